"""`tying demo`: a fixed small teacher-mode experiment (probe, TT and PIT runs, lens, report).

1. probes the teacher (consistency raw/effective, parameters, norm–frequency on the validation
   text); 2. converts it to TT and to PIT (teacher mode; PIT by the default fit on a reduced
   calibration budget, see `DEMO_VARIANTS`) and continues pretraining each for the same token
   budget, tracking gradient paths; 3. runs the logit lens on the teacher and both runs,
   probes both; 4. writes report.html/.md/.json.

Sizing, measured on 2 idle cores (2026-11-22, `time tying demo`, the validation shards and
the converted GGUF already cached): 9 min 25 s in all. TT trained 24 steps of 2,048 tokens
in 197 s (288 tokens/s, the first step pays the warm-up), PIT in 143 s (396 tokens/s: Z is
frozen in teacher mode); the logit lens took 42-55 s per model on 2,048 positions; the
probes took the rest. Disk: each checkpoint of a SmolLM2 run holds 0.54 GB of fp32 weights
(+1.1 GB of optimizer state in the newest only, see `keep_optimizer_states`): 4.9 GB for
the demo.

With the update step and the closed-form PIT conversion (2026-11-23, quiet machine, the same
caches) the defaults of then (49,152 tokens, lens on 2,048 positions, 3 evaluation items) took
18 min 14 s: TT 255 s, PIT 207 s (the conversion now searches the input scale and measures
the step-0 KL), the update step about 6 min, probes and lens the rest. Cut to 36,864 tokens
(18 steps), a lens on 1,024 positions and 2 evaluation items, `make demo` from a fresh clone
(empty caches, quiet machine, 2026-11-23) took 16 min 11 s: setup 85 s, data and GGUF 39 s,
TT 208 s, PIT conversion 65 s and training 164 s, the update step 300 s (PIT's generations
ran to the 256-token limit: 70 s of it), probes 60 s, lens 49 s. Hence the defaults now:
24,576 tokens (12 steps) and generations of at most `DEMO_MAX_NEW_TOKENS`, with PIT converted
by the fit on `DEMO_FIT_TOKENS`. On a CPU the demo runs half of that (`resolve_budget`); the
time `make demo` takes from a fresh clone is measured by benchmarks/results/make_demo.json and
quoted in the README.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from tying.experiment.config import (
    AnalysisSettings,
    ExperimentConfig,
    LensSettings,
    UpdateSettings,
)
from tying.options.demo import (
    DEMO_TOKENS,
    DEMO_TOKENS_CPU,
    DEMO_UPDATE_LIMIT,
    DEMO_UPDATE_LIMIT_CPU,
)
from tying.options.demo import DemoOptions as DemoOptions

log = logging.getLogger(__name__)

#: Generation limit of the update step's evaluation (MBPP's own is 256): the demo's few items
#: show the pipeline; the reference log-likelihood, not exact match, carries its comparison.
DEMO_MAX_NEW_TOKENS = 128
#: Training documents (books) tokenized from the default corpus: ample for the budget.
DEMO_DOCUMENTS = 8
#: Calibration tokens of the demo's PIT fit (the default fit trains on 65,536, more than
#: twice the demo's whole training budget).
DEMO_FIT_TOKENS = 4096
#: The demo's two runs. PIT takes the default conversion, t_init=fit, on a sixteenth of its
#: calibration budget: step-0 KL 2.39 nats/token on SmolLM2 in 8 fit steps (16 s in the demo),
#: against 3.47 for the best closed form and 0.95 for the default fit (docs/teacher.md).
DEMO_VARIANTS: dict[str, dict[str, Any]] = {
    "tt": {"tie": "tt"},
    "pit": {"tie": "pit", "pit": {"t_init": "fit", "fit": {"tokens": DEMO_FIT_TOKENS}}},
}


def demo_updates(o: DemoOptions) -> UpdateSettings:
    """The demo's update step: the same short LoRA on the TT and the PIT run, both evaluated on
    the same few items before and after, the side effects on WikiText-2, TT vs PIT paired."""
    if o.update_steps < 1:
        return UpdateSettings()
    evaluated = o.update_task if o.update_task in ("mbpp", "gsm8k") else "mbpp"
    return UpdateSettings(
        bases={"tt": "teacher-tt-s0", "pit": "teacher-pit-s0"},
        tasks=[o.update_task],
        eval_tasks=[evaluated],
        limit=o.update_limit,
        compare=[["tt", "pit"]],
        finetune={
            "max_steps": o.update_steps,
            "batch_size": 4,
            "max_seq_len": 384,
            "precision": o.precision,
            "checkpoint_every": 0,
        },
        evaluate={
            "precision": o.precision,
            "batch_size": 4,
            "max_new_tokens": DEMO_MAX_NEW_TOKENS,
        },
        side_effects={
            "texts": ["wikitext-2"],
            "max_tokens": o.side_effect_tokens,
            "seq_len": o.seq_len,
            "lens_tokens": o.seq_len,
            "precision": o.precision,
            "bootstrap_resamples": 2000,
        },
    )


def resolve_budget(o: DemoOptions) -> DemoOptions:
    """`budget` and `update_limit` as numbers: "auto" is the full demo on a GPU and half of it
    on a CPU, said in the log. Measured from a fresh clone on 2 cores
    (benchmarks/results/make_demo.json): the full demo took 15 min 24 s in bf16 on a CPU with
    fast bf16, and the half demo 14 min 31 s in fp32.
    """
    from tying.devices import resolve_device

    on_cpu = resolve_device("auto").type == "cpu"
    full = {"budget": DEMO_TOKENS, "update_limit": DEMO_UPDATE_LIMIT}
    cpu = {"budget": DEMO_TOKENS_CPU, "update_limit": DEMO_UPDATE_LIMIT_CPU}
    chosen = {k: (cpu if on_cpu else full)[k] for k in full if getattr(o, k) == "auto"}
    if on_cpu and chosen:
        log.info(
            "on a CPU the demo runs "
            + ", ".join(f"{k} {v}" for k, v in chosen.items())
            + " (a GPU runs "
            + ", ".join(f"{k} {full[k]}" for k in chosen)
            + ") to stay within 15 minutes on 2 cores; set "
            + " and ".join(f"{k} {full[k]}" for k in chosen)
            + " for the full demo"
        )
    return dataclasses.replace(o, **chosen)


def demo_config(options: DemoOptions | None = None) -> ExperimentConfig:
    """The demo's ExperimentConfig (teacher mode, ties tt and pit, one seed, the update step),
    its budget resolved by `resolve_budget`."""
    o = resolve_budget(options or DemoOptions())
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
        variants=DEMO_VARIANTS,
        modes=["teacher"],
        seeds=[0],
        teacher_model=o.model,
        tokens=None if o.steps is not None else o.budget,
        checkpoints=3,
        train=train,
        lens=LensSettings(kind="logit", max_tokens=o.lens_tokens, batch_size=4),
        analysis=AnalysisSettings(corpus_tokens=100_000, loss_window=5),
        updates=demo_updates(o),
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


def update_lines(updates: dict[str, Any] | None) -> list[str]:
    """One line per update: the target task before and after, and the side-effect KL."""
    from tying.report import format_value

    if not updates:
        return []
    lines = []
    for adapter in updates["adapters"]:
        base = updates["bases"][adapter["base"]]["eval"]
        parts = []
        for task, entry in adapter["eval"].items():
            parts.append(
                f"{task} accuracy {format_value(base[task]['accuracy'], 3)} -> "
                f"{format_value(entry['accuracy'], 3)}, reference log-likelihood "
                f"{format_value(base[task]['ref_loglik_per_token'], 4)} -> "
                f"{format_value(entry['ref_loglik_per_token'], 4)} nats/token"
            )
        for text, entry in ((adapter.get("side_effects") or {}).get("texts") or {}).items():
            parts.append(f"KL on {text} {format_value(entry['kl_nats'], 3)} nats/token")
        lines.append(f"{adapter['base']} + {adapter['task']} LoRA: " + "; ".join(parts))
    return lines


def format_summary(rows: list[dict[str, Any]]) -> str:
    """A plain-text table of `summary_rows`."""
    from tying.report import format_value

    keys = ["name", "loss", "val_loss", "val_ppl", "delta_ti", "cos_eff", "time_s"]
    cells = [keys] + [[format_value(r.get(k)) for k in keys] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(keys))]
    return "\n".join(
        "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells
    )


def run_demo(cfg: ExperimentConfig, progress: bool = True) -> Any:
    """Run the demo experiment (an `ExperimentResult`; `demo_summary` is its text)."""
    from tying.experiment import run_experiment

    return run_experiment(cfg, progress=progress)


def demo_summary(result: Any) -> str:
    """What `tying demo` prints: the summary table, one line per update and the report's path."""
    lines = [format_summary(summary_rows(result.report))]
    lines += update_lines(result.report.get("updates"))
    lines.append(f"report: {result.html_path}")
    return "\n".join(lines)
