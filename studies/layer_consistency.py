"""Claims row 10 (PIT paper, Figure 2 and abstract: "stronger layerwise semantic
consistency"), measured: the layerwise consistency of every TT and PIT run of an experiment
grid, one number per run, PIT − TT per seed.

For each run's final model (`tying.lens.consistency.layerwise_consistency`, k = 10, on the
first `--tokens` positions of the Gutenberg validation split in windows of the run's
seq_len):

    consistency(run) = mean over the intermediate residual entries i = 0..L−1 of
                       |top-k(lens_i) ∩ top-k(lens_L)| / k

and per seed s the unit's difference d_s = consistency(PIT, s) − consistency(TT, s)
(positive = the paper's direction). The JSON stores every run's value and profile and the
per-seed differences; the claims generator judges the row from them by its one rule.

    python -m studies.layer_consistency configs/experiments/layer_consistency.yaml \
        [seeds=[0,1]] [--tokens 16384] [--out docs/results/layer_consistency.json]

`key=value` overrides of the config (e.g. `seeds=[0,1]`) measure part of a grid: the seeds
whose TT and PIT runs were trained.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def measure_run(run_dir: Path, tokens: int, k: int, seq_len: int) -> dict[str, Any]:
    """The layerwise consistency of the model in `run_dir` (see the module docstring)."""
    import torch

    from tying.data.corpus import default_validation_source, prepare_store
    from tying.devices import autocast_for, resolve_device, resolve_precision
    from tying.lens.consistency import layerwise_consistency
    from tying.lens.data import window_batches
    from tying.loader import load_any

    device = resolve_device("auto")
    loaded = load_any(str(run_dir))
    loaded.model.to(device).eval()
    store = prepare_store(
        default_validation_source(),
        loaded.tokenizer,
        expected_vocab_size=loaded.vocab_size,
        allow_padded_vocab=True,
        progress=False,
    )
    windows = range(max(1, tokens // seq_len))
    batches = window_batches(store, windows, seq_len, batch_size=8)
    precision = resolve_precision("auto", torch.device(device))
    result = layerwise_consistency(
        loaded,
        batches,
        k=k,
        candidates=(
            min(loaded.tokenizer.vocab_size, loaded.vocab_size)
            if loaded.tokenizer is not None
            else None
        ),
        autocast=autocast_for(device, precision),
    )
    return {
        **result.to_dict(),
        "precision": precision,
        "device": str(device),
        "val_loss": final_val_loss(run_dir),
    }


def final_val_loss(run_dir: Path) -> float | None:
    """The run's last validation loss (nats/token) from its metrics.jsonl, None without one:
    how far training got, beside the consistency of the model it left."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    losses = [row["val_loss"] for row in rows if "val_loss" in row]
    return losses[-1] if losses else None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from tying.experiment import load_experiment

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", help="the experiment config whose grid was trained")
    parser.add_argument(
        "overrides", nargs="*", help="key=value overrides of the config, e.g. seeds=[0,1]"
    )
    parser.add_argument("--tokens", type=int, default=16384, help="positions per model")
    parser.add_argument("--k", type=int, default=10, help="tokens per top-k set")
    parser.add_argument("--out", default="docs/results/layer_consistency.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_experiment(args.config, args.overrides)
    seq_len = int(cfg.train.get("seq_len", 256))
    runs = []
    for spec in cfg.runs():
        t0 = time.perf_counter()
        value = measure_run(cfg.run_dir(spec), args.tokens, args.k, seq_len)
        runs.append(
            {"run": spec.name, "tie": spec.tie, "label": spec.label, "seed": spec.seed, **value}
        )
        log.info(
            f"{spec.name}: consistency {value['consistency']:.4f} "
            f"({time.perf_counter() - t0:.1f} s)"
        )
    by = {(r["label"], r["seed"]): r["consistency"] for r in runs}
    units = [
        {
            "seed": seed,
            "tt": by[("tt", seed)],
            "pit": by[("pit", seed)],
            "difference": by[("pit", seed)] - by[("tt", seed)],
        }
        for seed in cfg.seeds
        if ("tt", seed) in by and ("pit", seed) in by
    ]
    import torch

    result = {
        "what": "layerwise consistency (docs/metrics.md): PIT − TT per seed, positive = PIT "
        "more consistent (the paper's direction)",
        "config": args.config,
        "overrides": args.overrides,
        "tokens": args.tokens,
        "k": args.k,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        },
        "runs": runs,
        "units": units,
        "differences": [u["difference"] for u in units],
        "tt_mean": sum(u["tt"] for u in units) / len(units) if units else None,
        "pit_mean": sum(u["pit"] for u in units) / len(units) if units else None,
        "mean_difference": sum(u["difference"] for u in units) / len(units) if units else None,
        "pit_ahead": sum(u["difference"] > 0 for u in units),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    log.info(f"wrote {out}: {result['pit_ahead']}/{len(units)} seeds with PIT ahead")
    return result


if __name__ == "__main__":
    main()
