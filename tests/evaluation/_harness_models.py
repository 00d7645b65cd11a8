"""A tiny random Llama saved with a byte-level BPE trained on the benchmark texts, for the
`tying evaluate` tests (import the fixture into a test module)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tying.evaluation.tasks import load_task


def train_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE (any text round-trips) trained on 300 items of each task."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = []
    for task in ("gsm8k", "svamp", "mbpp", "humaneval"):
        texts += [item.prompt + item.target for item in load_task(task)[:300]]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>")


def save_tiny_model(folder: Path, tokenizer, seed: int = 0, hidden: int = 32) -> Path:
    """A random tied 2-layer Llama (d = `hidden`) with a long context (8,192), saved with
    `tokenizer`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_lora(model_dir: Path, folder: Path):
    """A LoRA (rank 4, q/v projections, random B so that it changes the outputs) on the model
    of `model_dir`, saved to `folder`: (the loaded base `EvalModel`, the peft model)."""
    import peft

    from tying.evaluation.loading import load_for_evaluation

    base = load_for_evaluation(model_dir)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    tuned = peft.get_peft_model(base.model, lora)
    with torch.no_grad():
        for name, p in tuned.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    tuned.save_pretrained(folder)
    return base, tuned


@pytest.fixture(scope="session")
def eval_model_dir(tmp_path_factory) -> Path:
    """Folder of the tiny evaluation model (transformers format, with its tokenizer)."""
    return save_tiny_model(tmp_path_factory.mktemp("eval-model"), train_tokenizer())
