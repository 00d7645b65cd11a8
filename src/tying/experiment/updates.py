"""The update stage of an experiment: LoRA adapters on chosen models, evaluated the same way,
with their side effects and TT-vs-PIT comparisons (`ExperimentConfig.updates`).

For every base model B (`updates.bases`) and update task T (`updates.tasks`):

    out/updates/B/eval/results.json            B on `eval_tasks` (tying evaluate)
    out/updates/B/T/adapter/                   the LoRA adapter (tying finetune)
    out/updates/B/T/eval/results.json          B + adapter on the same items
    out/updates/B/T/side-effects/side_effects.json   B against B + adapter (tying side-effects)
    out/updates/B/T/target-base.json           B on `updates.targets[T]` (a .jsonl task's
    out/updates/B/T/target-updated.json        held-out completions) and B + adapter on it

Each step is skipped when its output exists (results.json, finetune.json, side_effects.json)
and a killed adapter resumes from its newest checkpoint, so a rerun continues the stage. The
steps are the verbs' library functions with the experiment's option sections.

`analyze_updates` reads those files into the report's `updates` block:

    {"bases": {B: {"model", "eval": {task: accuracy, ci95, n, ref_loglik_per_token}}},
     "adapters": [{"base", "task", "steps", "final_loss", "seconds_per_step",
                   "eval": {...}, "change": {task: compare_results(B, B + adapter)},
                   "side_effects": {"texts": {text: kl_nats, kl_nats_ci95, delta_loss,
                                     delta_loss_ci95, top1_agreement, tokens},
                                    "lens_kl_change": [...], "interface_change": {...}}}],
     "comparisons": [{"control", "treatment", "task",
                      "updated": {eval task: McNemar and bootstrap, treatment vs control},
                      "gain": {eval task: paired bootstrap of the per-item change of the
                               reference log-likelihood, treatment's minus control's},
                      "side_effects": {text: paired bootstrap over windows of the KL,
                                       treatment minus control}}]}
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tying.config import from_dict
from tying.errors import InvalidInputError, MissingFileError
from tying.experiment.config import ExperimentConfig, RunSpec

log = logging.getLogger(__name__)

#: Files that mark a finished step.
RESULTS_FILE = "results.json"
FINETUNE_FILE = "finetune.json"
SIDE_EFFECTS_FILE = "side_effects.json"


def task_label(task: str) -> str:
    """Folder name of an update task: the task name, or a .jsonl file's stem."""
    return Path(task).stem if task.endswith(".jsonl") else task


@dataclass(frozen=True)
class UpdateBase:
    """One model the stage updates.

    Attributes:
        name: its folder under out/updates.
        spec: the model spec (`tying.hf.load`): the teacher, a run or a checkpoint folder.
        lora_seed: seed of its LoRA adapters.
        run: the grid cell it comes from (`updates.units`), else None.
        step: the step of its checkpoint (`updates.units`), else None.
    """

    name: str
    spec: str
    lora_seed: int
    run: RunSpec | None = None
    step: int | None = None


def update_bases(cfg: ExperimentConfig) -> list[UpdateBase]:
    """The stage's bases: `updates.bases` (LoRA seed `updates.finetune.seed`, else
    `updates.seed`), or with `updates.units`
    every checkpoint of every grid run (those of `updates.unit_steps` if given), oldest first
    (LoRA seed = the run's seed).

    Raises:
        FileNotFoundError: `updates.units` and a grid run without checkpoints, or without one of
            `updates.unit_steps`.
    """
    from tying.train.checkpoint import list_checkpoints

    u = cfg.updates
    if not u.units:
        seed = int(u.finetune.get("seed", u.seed))
        return [UpdateBase(n, cfg.update_base_spec(m), seed) for n, m in u.bases.items()]
    bases = []
    for run in cfg.runs():
        checkpoints = list_checkpoints(cfg.run_dir(run))
        if not checkpoints:
            raise MissingFileError(
                f"{cfg.run_dir(run)} has no checkpoint: train the grid before its update units"
            )
        by_step = {int(path.name.split("-")[1]): path for path in checkpoints}
        missing = sorted(set(u.unit_steps or ()) - set(by_step))
        if missing:
            raise MissingFileError(
                f"{cfg.run_dir(run)} has no checkpoint at step(s) {missing} of "
                f"updates.unit_steps (it has {sorted(by_step)})"
            )
        for step, path in by_step.items():
            if u.unit_steps is None or step in u.unit_steps:
                bases.append(UpdateBase(unit_base_name(run, step), str(path), run.seed, run, step))
    return bases


def unit_base_name(run: RunSpec, step: int) -> str:
    """The name (folder under out/updates) of the unit base of grid run `run` at checkpoint
    `step`; its LoRA seed is the run's seed."""
    return f"{run.name}-step{step}"


@dataclass(frozen=True)
class UpdateFolders:
    """The folders of one base model's update on one task (see the module docstring)."""

    adapter: Path
    eval: Path
    side_effects: Path


def base_eval_folder(cfg: ExperimentConfig, base: str) -> Path:
    """Where the stage writes the evaluation of base `base` itself."""
    return cfg.root / "updates" / base / "eval"


def update_folders(cfg: ExperimentConfig, base: str, task: str) -> UpdateFolders:
    """Where the stage writes the files of base `base`'s `task` adapter."""
    leaf = cfg.root / "updates" / base / task_label(task)
    return UpdateFolders(leaf / "adapter", leaf / "eval", leaf / "side-effects")


def target_files(cfg: ExperimentConfig, base: str, task: str) -> tuple[Path, Path]:
    """Where the stage writes the target likelihood of base `base` and of base + its `task`
    adapter (`updates.targets`)."""
    leaf = cfg.root / "updates" / base / task_label(task)
    return leaf / "target-base.json", leaf / "target-updated.json"


def _target(cfg: ExperimentConfig, spec: str, task: str, adapter: Path | None, out: Path) -> None:
    from tying.outputs import write_text_atomic
    from tying.update.completions import completion_loglik

    f = cfg.updates.finetune
    options = {"precision": cfg.updates.evaluate.get("precision", "fp32")}
    for key in ("max_seq_len", "append_eos", "device"):
        if key in f:
            options[key] = f[key]
    result = completion_loglik(spec, cfg.updates.targets[task], adapter=adapter, **options)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, json.dumps(result, indent=1) + "\n")


def evaluate_options(cfg: ExperimentConfig, spec: str, adapter: Path | None, out: Path) -> Any:
    """The stage's `EvaluateOptions` for model `spec` (with `adapter`, if any) written to
    `out`: the `updates.evaluate` section with the stage's tasks, item limit and seed."""
    from tying.evaluation.evaluate import EvaluateOptions

    u = cfg.updates
    return from_dict(
        EvaluateOptions,
        {
            **u.evaluate,
            "spec": spec,
            "adapter": str(adapter) if adapter is not None else None,
            "tasks": list(u.eval_tasks),
            "limit": u.limit,
            "seed": u.seed,
            "out": str(out),
        },
        source="updates.evaluate",
    )


def _evaluate(cfg: ExperimentConfig, spec: str, adapter: Path | None, out: Path) -> None:
    from tying.evaluation.evaluate import evaluate_model

    evaluate_model(evaluate_options(cfg, spec, adapter, out))


def _finetune(
    cfg: ExperimentConfig, base: UpdateBase, task: str, out: Path, progress: bool
) -> None:
    from tying.update.finetune import FinetuneOptions, finetune

    data = {"progress": progress, **cfg.updates.finetune}
    # resume only a folder a killed run left behind: a first run starts without the warning
    # that there is nothing to resume
    data.update(spec=base.spec, seed=base.lora_seed, task=task, out=str(out), resume=out.exists())
    finetune(from_dict(FinetuneOptions, data, source="updates.finetune"))


def _side_effects(
    cfg: ExperimentConfig, spec: str, adapter: Path, out: Path, progress: bool
) -> None:
    from tying.evaluation.side_effects import SideEffectsOptions, run_side_effects

    keys = {k: v for k, v in cfg.updates.side_effects.items() if k != "skip"}
    data = {"seed": cfg.updates.seed, "progress": progress, **keys}
    data.update(base=spec, updated=spec, adapter=str(adapter), out=str(out))
    run_side_effects(from_dict(SideEffectsOptions, data, source="updates.side_effects"))


def _add_tokens(cfg: ExperimentConfig, spec: str, out: Path) -> None:
    from tying.update.tokens import AddTokensOptions, add_tokens

    data = {**cfg.updates.add_tokens, "spec": spec, "out": str(out), "overwrite": True}
    add_tokens(from_dict(AddTokensOptions, data, source="updates.add_tokens"))


def run_updates(
    cfg: ExperimentConfig, progress: bool = True, shard: tuple[int, int] = (1, 1)
) -> None:
    """Evaluate, update and measure every base and task (finished steps skipped).

    Args:
        cfg: the experiment.
        progress: progress bars.
        shard: (i, n): this process takes the bases i, i + n, i + 2n, ... (1-based) of
            `update_bases`, so n processes share the stage out (each base's steps are
            independent of the others').
    """
    u = cfg.updates
    index, count = shard
    if not 1 <= index <= count:
        raise InvalidInputError(f"shard {index}/{count}: need 1 <= I <= N")
    bases = update_bases(cfg)[index - 1 :: count]
    per_task = 2 if u.skip_side_effects else 3  # finetune, evaluate (, side effects)
    steps = len(bases) * (1 + len(u.tasks) * per_task + 2 * len(u.targets))
    done = 0

    def step(what: str, marker: Path, work: Callable[[], None]) -> None:
        nonlocal done
        done += 1
        if marker.is_file():
            log.info(f"[update {done}/{steps}] {what}: already done, skipped")
            return
        log.info(f"[update {done}/{steps}] {what}")
        work()

    for b in bases:
        if u.add_tokens:  # the grown model is the base (issue 36's new-token update)
            grown = cfg.root / "updates" / b.name / "grown"
            steps += 1
            step(
                f"{b.name}: add tokens",
                grown / "add_tokens.json",
                lambda b=b, grown=grown: _add_tokens(cfg, b.spec, grown),
            )
            b = dataclasses.replace(b, spec=str(grown))
        base, spec = b.name, b.spec
        base_eval = base_eval_folder(cfg, base)
        step(
            f"{base}: evaluate",
            base_eval / RESULTS_FILE,
            lambda spec=spec, out=base_eval: _evaluate(cfg, spec, None, out),
        )
        for task in u.tasks:
            f = update_folders(cfg, base, task)
            step(
                f"{base}: finetune on {task}",
                f.adapter / FINETUNE_FILE,
                lambda b=b, task=task, f=f: _finetune(cfg, b, task, f.adapter, progress),
            )
            step(
                f"{base} + {task_label(task)} adapter: evaluate",
                f.eval / RESULTS_FILE,
                lambda spec=spec, f=f: _evaluate(cfg, spec, f.adapter, f.eval),
            )
            if task in u.targets:
                before, after = target_files(cfg, base, task)
                step(
                    f"{base}: target likelihood of {task_label(task)}",
                    before,
                    lambda spec=spec, task=task, out=before: _target(cfg, spec, task, None, out),
                )
                step(
                    f"{base} + {task_label(task)} adapter: target likelihood",
                    after,
                    lambda spec=spec, task=task, f=f, out=after: _target(
                        cfg, spec, task, f.adapter, out
                    ),
                )
            if not u.skip_side_effects:
                step(
                    f"{base} + {task_label(task)} adapter: side effects",
                    f.side_effects / SIDE_EFFECTS_FILE,
                    lambda spec=spec, f=f: _side_effects(
                        cfg, spec, f.adapter, f.side_effects, progress
                    ),
                )


# ----------------------------------------------------------------------------- analysis
def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _eval_summary(results: dict[str, Any]) -> dict[str, Any]:
    keys = ("accuracy", "ci95", "n", "ref_loglik_per_token")
    return {task: {k: entry.get(k) for k in keys} for task, entry in results["tasks"].items()}


def _side_effect_summary(report: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "kl_nats",
        "kl_nats_ci95",
        "delta_loss",
        "delta_loss_ci95",
        "top1_agreement",
        "tokens",
    )
    return {
        "texts": {name: {k: text.get(k) for k in keys} for name, text in report["texts"].items()},
        "lens_kl_change": report.get("lens_kl_change"),
        "interface_change": report.get("interface_change"),
    }


def _per_item_loglik(entry: dict[str, Any]) -> list[float]:
    return [i["ref_loglik"] / i["ref_tokens"] for i in entry["items"]]


def item_changes(model: dict[str, Any], task: str) -> list[float]:
    """Per item of `task`: the update's change of log p(reference) / tokens (nats/token), from
    {"base": results.json of the base, "updated": results.json of base + adapter}."""
    before = _per_item_loglik(model["base"]["tasks"][task])
    after = _per_item_loglik(model["updated"]["tasks"][task])
    return [u - b for b, u in zip(before, after, strict=True)]


def compare_updates(
    control: dict[str, Any],
    treatment: dict[str, Any],
    *,
    n_resamples: int,
    seed: int,
) -> dict[str, Any]:
    """One update applied to two bases (control, treatment), compared item by item.

    Args:
        control, treatment: {"base": results.json of the base, "updated": results.json of
            base + adapter, "side_effects": side_effects.json or None}, all on the same items
            and windows.
        n_resamples, seed: of the paired bootstraps.

    Returns:
        `updated`: per eval task, treatment's updated model against control's (accuracy
        difference with the exact McNemar test, reference log-likelihood difference with a
        paired bootstrap over items; `compare_results` with base = control);
        `gain`: per eval task with likelihoods, the paired bootstrap over items of
        (treatment's change by the update) − (control's change), nats/token;
        `side_effects`: per text, the paired bootstrap over windows of treatment's KL minus
        control's (nats/token), when both were measured.
    """
    from tying.evaluation.side_effects import compare_results
    from tying.evaluation.stats import paired_bootstrap

    updated = compare_results(
        control["updated"], treatment["updated"], n_resamples=n_resamples, seed=seed
    )
    gain = {}
    for task, entry in control["updated"]["tasks"].items():
        if entry.get("ref_loglik_per_token") is None or task not in treatment["base"]["tasks"]:
            continue
        change_c = item_changes(control, task)
        change_t = item_changes(treatment, task)
        boot = paired_bootstrap(change_c, change_t, n_resamples=n_resamples, seed=seed)
        gain[task] = {
            "control_change": sum(change_c) / len(change_c),
            "treatment_change": sum(change_t) / len(change_t),
            "difference": boot.mean_difference,
            "ci95": [boot.ci_low, boot.ci_high],
            "p_value": boot.p_value,
        }
    effects = {}
    side_c, side_t = control.get("side_effects"), treatment.get("side_effects")
    if side_c and side_t:
        for text, entry_c in side_c["texts"].items():
            entry_t = side_t["texts"].get(text)
            if entry_t is None:
                continue
            kl_c = entry_c["per_window"]["kl_nats"]
            kl_t = entry_t["per_window"]["kl_nats"]
            if len(kl_c) != len(kl_t):
                raise ValueError(
                    f"side effects on {text}: {len(kl_c)} vs {len(kl_t)} windows; measure both "
                    "with the same max_tokens and seq_len"
                )
            boot = paired_bootstrap(kl_c, kl_t, n_resamples=n_resamples, seed=seed)
            effects[text] = {
                "control_kl_nats": entry_c["kl_nats"],
                "treatment_kl_nats": entry_t["kl_nats"],
                "difference": boot.mean_difference,
                "ci95": [boot.ci_low, boot.ci_high],
                "p_value": boot.p_value,
                "ratio": entry_t["kl_nats"] / entry_c["kl_nats"] if entry_c["kl_nats"] else None,
            }
    return {"updated": updated, "gain": gain, "side_effects": effects}


def analyze_updates(cfg: ExperimentConfig, n_resamples: int = 10000) -> dict[str, Any]:
    """The report's `updates` block from the stage's files (see the module docstring).

    Raises:
        FileNotFoundError: a step's output is missing (run the stage first).
    """
    from tying.evaluation.side_effects import compare_results

    u = cfg.updates

    def need(path: Path) -> dict[str, Any]:
        data = _read(path)
        if data is None:
            raise MissingFileError(f"{path} does not exist: run the experiment's update stage")
        return data

    bases: dict[str, Any] = {}
    adapters: list[dict[str, Any]] = []
    raw: dict[tuple[str, str], dict[str, Any]] = {}
    for base, model in u.bases.items():
        base_results = need(base_eval_folder(cfg, base) / RESULTS_FILE)
        bases[base] = {"model": cfg.update_base_spec(model), "eval": _eval_summary(base_results)}
        for task in u.tasks:
            f = update_folders(cfg, base, task)
            summary = need(f.adapter / FINETUNE_FILE)
            updated = need(f.eval / RESULTS_FILE)
            side = None if u.skip_side_effects else need(f.side_effects / SIDE_EFFECTS_FILE)
            adapters.append(
                {
                    "base": base,
                    "task": task_label(task),
                    "steps": summary.get("steps"),
                    "final_loss": summary.get("final_loss"),
                    "seconds_per_step": summary.get("seconds_per_step"),
                    "eval": _eval_summary(updated),
                    "change": compare_results(
                        base_results, updated, n_resamples=n_resamples, seed=u.seed
                    ),
                    "side_effects": _side_effect_summary(side) if side else None,
                }
            )
            raw[base, task] = {"base": base_results, "updated": updated, "side_effects": side}
    comparisons = []
    for control, treatment in u.compare:
        for task in u.tasks:
            comparisons.append(
                {
                    "control": control,
                    "treatment": treatment,
                    "task": task_label(task),
                    **compare_updates(
                        raw[control, task],
                        raw[treatment, task],
                        n_resamples=n_resamples,
                        seed=u.seed,
                    ),
                }
            )
    return {
        "tasks": [task_label(t) for t in u.tasks],
        "eval_tasks": list(u.eval_tasks),
        "limit": u.limit,
        "bases": bases,
        "adapters": adapters,
        "comparisons": comparisons,
    }
