"""Two teachers that are not SmolLM2, trained briefly on Gutenberg, for the step-0 table.

- `decoder`: our decoder, preset `tiny` (4 parallel blocks, d = 256, RMSNorm), TT, GPT-2
  tokenizer, trained from scratch by `tying train`.
- `gpt2`: a transformers `GPT2LMHeadModel` (4 layers, d = 256, 4 heads, LayerNorm with bias,
  tied embedding and head), initialised at random, trained by `tying train` in teacher mode
  with `tie=tt` (exact for a tied model) on the same data path, then exported back to a plain
  transformers folder (`tying export`).

Both at the same budget (`--steps` × `--batch-tokens`, by default 30 × 1,024 = 30,720
tokens: the shared 2-core machine trained at ~65 tokens/s when these were made, so the
teachers are barely past unigram statistics); then measure each with
`benchmarks/teacher_init.py --model OUT/decoder` and `--model OUT/gpt2/plain`.

Usage:
    OMP_NUM_THREADS=1 python -m studies.second_teachers [--out runs/second] [--steps 30]
        [--batch-tokens 1024] [--only decoder|gpt2]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def train_decoder(out: Path, steps: int, batch_tokens: int) -> dict:
    from tying.config import from_dict
    from tying.train import TrainConfig, train

    cfg = from_dict(
        TrainConfig,
        {
            "preset": "tiny",
            "tie": "tt",
            "max_steps": steps,
            "global_batch_tokens": batch_tokens,
            "micro_batch_size": batch_tokens // 256,
            "seq_len": 256,
            "warmup_steps": 5,
            "eval_every": 0,
            "eval_tokens": 8192,
            "checkpoint_every": 0,
            "max_documents": 40,
            "precision": "fp32",
            "tensorboard": False,
            "progress": False,
            "out": str(out),
        },
    )
    t0 = time.perf_counter()
    result = train(cfg)
    return {**result.summary(), "train_s": round(time.perf_counter() - t0)}


def make_gpt2(folder: Path, seed: int = 0) -> None:
    """A random tied GPT-2 (4 × 256) with the GPT-2 tokenizer's tokenizer.json, saved to `folder`."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from tying.data.tokenizer import load_tokenizer

    tok = load_tokenizer("gpt2")
    config = GPT2Config(
        vocab_size=tok.vocab_size,
        n_positions=1024,
        n_embd=256,
        n_layer=4,
        n_head=4,
        tie_word_embeddings=True,
        bos_token_id=tok.eos_id,
        eos_token_id=tok.eos_id,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.backend.save(str(folder / "tokenizer.json"))


def train_gpt2(out: Path, steps: int, batch_tokens: int) -> dict:
    from tying.config import from_dict
    from tying.teacher.conversion import ExportOptions, export_to_folder
    from tying.train import TrainConfig, train

    init = out / "init"
    if not (init / "config.json").is_file():
        make_gpt2(init)
    cfg = from_dict(
        TrainConfig,
        {
            "model": str(init),
            "tie": "tt",
            "max_steps": steps,
            "global_batch_tokens": batch_tokens,
            "micro_batch_size": batch_tokens // 256,
            "seq_len": 256,
            "lr": 2e-3,
            "warmup_steps": 5,
            "weight_decay": 0.1,
            "eval_every": 0,
            "eval_tokens": 8192,
            "checkpoint_every": 0,
            "max_documents": 40,
            "step0_tokens": 0,
            "precision": "fp32",
            "tensorboard": False,
            "progress": False,
            "out": str(out / "run"),
        },
    )
    t0 = time.perf_counter()
    result = train(cfg)
    export_to_folder(ExportOptions(path=str(out / "run"), out=str(out / "plain"), overwrite=True))
    tokenizer = init / "tokenizer.json"
    (out / "plain" / "tokenizer.json").write_bytes(tokenizer.read_bytes())
    return {**result.summary(), "train_s": round(time.perf_counter() - t0)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="runs/second")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-tokens", type=int, default=1024)
    parser.add_argument("--only", choices=("decoder", "gpt2"), default=None)
    args = parser.parse_args()
    out = Path(args.out)
    done = {}
    if args.only in (None, "decoder"):
        done["decoder"] = train_decoder(out / "decoder", args.steps, args.batch_tokens)
    if args.only in (None, "gpt2"):
        done["gpt2"] = train_gpt2(out / "gpt2", args.steps, args.batch_tokens)
    print(json.dumps(done, indent=2))


if __name__ == "__main__":
    main()
