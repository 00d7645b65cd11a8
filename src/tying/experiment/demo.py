"""`tying demo`: a fixed small teacher-mode experiment (probe, TT and PIT runs, lens, report).

1. probes the teacher (consistency raw/effective, parameters, norm–frequency on the validation
   text); 2. converts it to TT and to PIT (teacher mode, default `t_init`) and continues
   pretraining each for the same token budget, tracking gradient paths; 3. runs the logit lens
   on the teacher and both runs, probes both; 4. writes report.html/.md/.json.

Sizing, measured on 2 idle cores (2026-11-22, `time tying demo`, the validation shards and
the converted GGUF already cached): 9 min 25 s in all. TT trained 24 steps of 2,048 tokens
in 197 s (288 tokens/s, the first step pays the warm-up), PIT in 143 s (396 tokens/s: Z is
frozen in teacher mode); the logit lens took 42-55 s per model on 2,048 positions; the
probes took the rest. Disk: each checkpoint of a SmolLM2 run holds 0.54 GB of fp32 weights
(+1.1 GB of optimizer state in the newest only, see `keep_optimizer_states`): 4.9 GB for
the demo.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tying.experiment.config import AnalysisSettings, ExperimentConfig, LensSettings

#: Default token budget per run.
DEMO_TOKENS = 49_152
#: Training documents (books) tokenized from the default corpus: ample for the budget.
DEMO_DOCUMENTS = 8


@dataclass
class DemoOptions:
    """Options of `tying demo`.

    Attributes:
        model: the teacher (smollm2, a .gguf, a transformers folder or a hub id).
        data: training text (null = a few Gutenberg training books).
        val_data: validation and lens text (null = Gutenberg validation).
        budget: training tokens per run.
        steps: optimizer steps (overrides `budget`; null = from the budget).
        out: output folder (report.html, report.md, report.json, runs/).
        seq_len: tokens per window.
        batch_tokens: tokens per optimizer step.
        lens_tokens: positions of the logit lens.
        eval_tokens: validation tokens per run.
        tokenizer: override the teacher's tokenizer (a tokenizer spec).
        precision: auto, bf16 or fp32 for training.
        progress: show progress bars.
    """

    model: str = "smollm2"
    data: str | None = None
    val_data: str | None = None
    budget: int = DEMO_TOKENS
    steps: int | None = None
    out: str = "runs/demo"
    seq_len: int = 256
    batch_tokens: int = 2048
    lens_tokens: int = 2048
    eval_tokens: int = 4096
    tokenizer: str | None = None
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    progress: bool = True


def demo_config(options: DemoOptions | None = None) -> ExperimentConfig:
    """The demo's ExperimentConfig (teacher mode, ties tt and pit, one seed)."""
    o = options or DemoOptions()
    train: dict[str, Any] = {
        "seq_len": o.seq_len,
        "global_batch_tokens": o.batch_tokens,
        "micro_batch_size": max(1, min(4, o.batch_tokens // o.seq_len)),
        "lr": 3e-4,
        "weight_decay": 0.0,
        "warmup_steps": 2,
        "eval_every": 0,
        "eval_tokens": o.eval_tokens,
        "precision": o.precision,
        "data": o.data,
        "val_data": o.val_data,
        "max_documents": DEMO_DOCUMENTS if o.data is None else None,
    }
    if o.tokenizer is not None:
        train["tokenizer"] = o.tokenizer
    if o.steps is not None:
        train["max_steps"] = o.steps
    return ExperimentConfig(
        name=f"tying demo: {o.model}, TT vs PIT continued pretraining",
        out=o.out,
        ties=["tt", "pit"],
        modes=["teacher"],
        seeds=[0],
        teacher_model=o.model,
        tokens=None if o.steps is not None else o.budget,
        checkpoints=3,
        train=train,
        lens=LensSettings(kind="logit", max_tokens=o.lens_tokens, batch_size=4),
        analysis=AnalysisSettings(corpus_tokens=100_000, loss_window=5),
    )


def summary_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per run (and the teacher): losses, consistency, wall time."""
    rows = []
    teacher = report.get("teacher")
    if teacher and "consistency" in teacher and "error" not in teacher["consistency"]:
        rows.append(
            {
                "name": "teacher",
                "delta_ti": teacher["consistency"]["raw"]["delta_ti"],
                "cos_eff": teacher["consistency"]["effective"]["cosine_distance"],
            }
        )
    for run in report["runs"]:
        cons = run["probe"].get("consistency", {})
        rows.append(
            {
                "name": run["name"],
                "loss": run["final_train_loss"],
                "val_loss": run["val_loss"],
                "val_ppl": run["val_ppl"],
                "delta_ti": cons.get("raw", {}).get("delta_ti"),
                "cos_eff": cons.get("effective", {}).get("cosine_distance"),
                "time_s": run["wall_time_s"],
            }
        )
    return rows


def format_summary(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of `summary_rows`."""
    from tying.report import format_value

    keys = ["name", "loss", "val_loss", "val_ppl", "delta_ti", "cos_eff", "time_s"]
    cells = [keys] + [[format_value(r.get(k)) for k in keys] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells
    )


def run_demo(cfg: ExperimentConfig, progress: bool = True, log: Callable[[str], None] = print):
    """Run the demo experiment; prints the summary table and the report's path."""
    from tying.experiment import run_experiment

    result = run_experiment(cfg, progress=progress, log=log)
    log(format_summary(summary_rows(result.report)))
    log(f"report: {result.html_path}")
    return result
