"""Benchmark: batched greedy generation, `tying.evaluation.generate.greedy_generate` against
transformers' `model.generate(do_sample=False)`, on the same model, batch and prompts.

Prompts are the first `--batch` GSM8K test questions (left-padded by the model's tokenizer);
both sides generate `--new-tokens` tokens with the model's end-of-sequence id, and the run
checks that they return identical token ids. A second pair of variants adds the stop
strings `tying evaluate` uses for GSM8K: ours checks them itself, `generate` gets
lm-eval's own stopping criteria (what lm-eval's HFLM passes it).

Models: "tiny" (a random 2-layer Llama, V = 512, d = 64: the CI size, where the per-token
overhead of the loop dominates) and, with `--models tiny,smollm2`, SmolLM2-135M through
`tying.hf.load` (run by hand; ~1 min per variant and round on 2 CPU cores).

Time: the variants are timed alternately, one call of each per round after a warm-up round
(`benchmarks/timing.py`), and compared by their medians; ratio = generate / ours (> 1: ours
is faster).

Results of each model go under "models" in one JSON file; a run replaces the entries of the
models it measures and keeps the others (each entry has its date).

Usage:
    python benchmarks/generation.py [--models tiny,smollm2] [--batch 8] [--new-tokens 64]
        [--reps 5] [--out benchmarks/results/generation.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from timing import medians, round_robin, write_json
from tying.evaluation.generate import greedy_generate
from tying.paths import data_dir

STOP = ["Question:", "</s>", "<|im_end|>"]


def tiny_model():
    """A random tied 2-layer Llama (V = 512, d = 64) and a byte-level tokenizer of 512 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    questions = gsm8k_questions(200)
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<pad>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    backend.train_from_iterator(questions, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(config).eval(), tokenizer


def gsm8k_questions(n: int) -> list[str]:
    """The first n GSM8K test questions as "Question: ...\\nAnswer:" prompts."""
    lines = (data_dir() / "bench" / "gsm8k" / "test.jsonl").read_text().splitlines()[:n]
    return [f"Question: {json.loads(line)['question']}\nAnswer:" for line in lines]


def measure(name: str, batch: int, new_tokens: int, reps: int) -> dict:
    """Time the four variants on one model; check that both sides give the same tokens."""
    if name == "tiny":
        model, tokenizer = tiny_model()
    else:
        from tying.hf import load

        model, tokenizer = load("smollm2")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    enc = tokenizer(gsm8k_questions(batch), return_tensors="pt", padding="longest")
    ids, mask = enc["input_ids"], enc["attention_mask"]
    pad, eos = tokenizer.pad_token_id, model.generation_config.eos_token_id
    n = new_tokens

    from lm_eval.models.utils_hf import stop_sequences_criteria

    def hf() -> torch.Tensor:
        return model.generate(
            ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=pad
        )

    def ours() -> torch.Tensor:
        return greedy_generate(
            model, ids, mask, max_new_tokens=n, eos_token_id=eos, pad_token_id=pad
        )

    def hf_stop() -> torch.Tensor:
        criteria = stop_sequences_criteria(tokenizer, STOP, ids.shape[1], ids.shape[0])
        return model.generate(
            ids,
            attention_mask=mask,
            max_new_tokens=n,
            do_sample=False,
            pad_token_id=pad,
            stopping_criteria=criteria,
        )

    def ours_stop() -> torch.Tensor:
        return greedy_generate(
            model,
            ids,
            mask,
            max_new_tokens=n,
            eos_token_id=eos,
            pad_token_id=pad,
            stop_strings=STOP,
            tokenizer=tokenizer,
        )

    reference, mine = hf(), ours()
    identical = bool(torch.equal(reference, mine))
    print(f"{name}: identical tokens: {identical}; {reference.shape[1] - ids.shape[1]} new tokens")
    steps = {"generate": hf, "ours": ours, "generate_stop": hf_stop, "ours_stop": ours_stop}
    times = round_robin(steps, reps, label=f"{name} ")
    med = medians(times)
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "shape": {
            "batch": batch,
            "prompt_tokens": int(ids.shape[1]),
            "new_tokens": int(reference.shape[1] - ids.shape[1]),
            "vocab": int(model.config.vocab_size),
        },
        "identical_tokens": identical,
        "time_s": {k: {"median": med[k], "all": v} for k, v in times.items()},
        "ratio_generate_over_ours": med["generate"] / med["ours"],
        "ratio_generate_over_ours_with_stop_strings": med["generate_stop"] / med["ours_stop"],
    }
    print(
        f"{name}: generate / ours = {result['ratio_generate_over_ours']:.2f} "
        f"(with stop strings {result['ratio_generate_over_ours_with_stop_strings']:.2f})"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", default="tiny", help="comma-separated: tiny, smollm2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "generation.json"))
    args = parser.parse_args()
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = sorted(set(names) - {"tiny", "smollm2"})
    if unknown:
        parser.error(f"unknown model(s) {unknown}: choose among tiny, smollm2")

    out = Path(args.out)
    previous = json.loads(out.read_text()) if out.is_file() else {}
    runs = dict(previous.get("models", {}))
    for name in names:
        runs[name] = measure(name, args.batch, args.new_tokens, args.reps)
    result = {
        "benchmark": "batched greedy generation: transformers generate vs tying greedy_generate",
        "stop_strings": STOP,
        "machine": {
            "platform": platform.platform(),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        },
        "models": runs,
    }
    write_json(result, out)


if __name__ == "__main__":
    main()
