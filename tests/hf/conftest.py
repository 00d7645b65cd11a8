"""Fixtures of the tying.hf tests: tiny random causal LMs of every supported family (no downloads).

Tests get the helpers through the `tiny` fixture; a test that takes a `family`
argument (not parametrized itself) runs once per supported family.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

VOCAB = 500
HIDDEN = 64
LAYERS = 2

#: family -> the transformers config class name; every one is a CausalLM under AutoModelForCausalLM.
FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "gpt_neox", "olmo", "olmo2", "olmo3", "gemma3")


def tiny_config(family: str, tied: bool = True, vocab_size: int = VOCAB):
    """A config of `family` with d=64, 2 layers, V=`vocab_size`, and the given weight tying."""
    import transformers as tf

    common = dict(
        vocab_size=vocab_size,
        tie_word_embeddings=tied,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    llama_like = dict(
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        **common,
    )
    if family == "gpt2":
        return tf.GPT2Config(n_embd=HIDDEN, n_layer=LAYERS, n_head=4, n_positions=128, **common)
    if family == "llama":
        return tf.LlamaConfig(**llama_like)
    if family == "qwen2":
        return tf.Qwen2Config(**llama_like)
    if family == "qwen3":
        return tf.Qwen3Config(head_dim=16, **llama_like)
    if family == "gpt_neox":
        return tf.GPTNeoXConfig(
            hidden_size=HIDDEN,
            intermediate_size=128,
            num_hidden_layers=LAYERS,
            num_attention_heads=4,
            max_position_embeddings=128,
            **common,
        )
    if family == "olmo":
        return tf.OlmoConfig(**llama_like)
    if family == "olmo2":
        return tf.Olmo2Config(**llama_like)
    if family == "olmo3":
        return tf.Olmo3Config(**llama_like)
    if family == "gemma3":
        return tf.Gemma3TextConfig(head_dim=16, sliding_window=8, **llama_like)
    raise ValueError(f"unknown family {family!r}")


def tiny_model(family: str, tied: bool = True, seed: int = 0, vocab_size: int = VOCAB) -> nn.Module:
    """A randomly initialised `AutoModelForCausalLM` of `family` in eval mode, float32.

    Norm gains and (Gemma) embedding rows are perturbed so that gains != 1 and
    each test exercises them.
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(
        tiny_config(family, tied, vocab_size), dtype=torch.float32
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def tiny_tokenizer(vocab_size: int = VOCAB):
    """A word-level fast tokenizer with `vocab_size` tokens ("[UNK]", "[PAD]", "w2", "w3", ...)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "[PAD]": 1, **{f"w{i}": i for i in range(2, vocab_size)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]")


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """max|a - b| / max|b|."""
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def ids(batch: int = 2, length: int = 7, vocab_size: int = VOCAB, seed: int = 1) -> torch.Tensor:
    """Random token ids (batch, length)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (batch, length), generator=g)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run tests that take `family` (and do not parametrize it) once per family."""
    if "family" in metafunc.fixturenames and not any(
        "family" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")
    ):
        metafunc.parametrize("family", FAMILIES)


@pytest.fixture(scope="session")
def tiny() -> SimpleNamespace:
    """The helpers and sizes of this module."""
    return SimpleNamespace(
        model=tiny_model,
        config=tiny_config,
        tokenizer=tiny_tokenizer,
        ids=ids,
        rel=relative_error,
        VOCAB=VOCAB,
        HIDDEN=HIDDEN,
        LAYERS=LAYERS,
        FAMILIES=FAMILIES,
    )
