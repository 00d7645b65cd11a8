"""`ExperimentConfig`: a grid (tie or variant) × mode × seed of training runs at one budget.

    cfg = load_experiment("configs/experiments/cpu.yaml", ["seeds=[0]", "train.lr=1e-3"])
    for spec in cfg.runs():
        train_cfg = cfg.train_config(spec)       # the TrainConfig of one grid cell

Each run lives in `out/runs/<mode>-<label>-s<seed>/` (a `tying train` run folder), where the
label is the tie ("pit") or, when the grid lists `variants`, the variant's name ("pit-riemann").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tying.config import ConfigError, from_dict, lift_moved_keys, load_config, renamed
from tying.errors import InvalidInputError
from tying.options.add_tokens import AddTokensOptions
from tying.options.common import Precision
from tying.options.evaluate import EvaluateOptions, parse_tasks
from tying.options.finetune import FinetuneOptions
from tying.options.interface import check_tie_name, tie_names
from tying.options.probe import parse_skip
from tying.options.side_effects import SideEffectsOptions
from tying.options.train import TrainConfig

#: TrainConfig keys the grid sets itself (per cell).
GRID_KEYS = ("seed", "out", "out_dir", "resume")


@dataclass
class LensSettings:
    """The lens evaluation after the grid (`ExperimentConfig.lens`).

    Attributes:
        kind: logit, tuned, both or none (no lens).
        max_tokens: evaluated positions per model.
        seq_len: tokens per window (None: the runs' seq_len).
        batch_size: windows per forward pass.
        data: evaluation text (None: the runs' val_data, else Gutenberg validation).
        tuned_steps: tuned-lens training steps.
        tuned_tokens_per_step: tuned-lens training tokens per step.
        precision: auto, bf16 or fp32 for the forward passes and heads (KL in float32).
        include_teacher: also evaluate the teacher model when the grid has teacher runs.
    """

    kind: Literal["logit", "tuned", "both", "none"] = "logit"
    max_tokens: int = 4096
    seq_len: int | None = None
    batch_size: int = 8
    data: str | None = None
    tuned_steps: int = 100
    tuned_tokens_per_step: int = 2048
    precision: Precision = "auto"
    include_teacher: bool = True

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.batch_size < 1:
            raise ConfigError("lens.max_tokens and lens.batch_size must be >= 1")


@dataclass
class AnalysisSettings:
    """The probe and metric settings after the grid (`ExperimentConfig.analysis`).

    Attributes:
        loss_window: the final training loss is the mean of the last `loss_window` steps.
        grad_share_steps: the output-gradient share is shown over the first steps.
        grad_share_window: rolling-mean window of the gradient-share curve (steps).
        k: neighbours of KNN@k overlap.
        spectral_k, n_components: spectral distance's kNN graph and omnibus embedding size.
        corpus_tokens: tokens counted for norm-frequency (from the lens/validation text).
        maps: raw or effective matrices in the tied-vs-untied comparisons.
        skip: probe blocks left out (names of `tying.probe.BLOCKS`).
        probe_teacher: probe the teacher model when the grid has teacher runs.
    """

    loss_window: int = 10
    grad_share_steps: int = 200
    grad_share_window: int = 5
    k: int = 10
    spectral_k: int = 32
    n_components: int = 64
    corpus_tokens: int = 100_000
    maps: Literal["raw", "effective"] = "raw"
    skip: list[str] = field(default_factory=list)
    probe_teacher: bool = True

    def __post_init__(self) -> None:
        for name in ("loss_window", "grad_share_steps", "grad_share_window", "k", "corpus_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"analysis.{name} must be >= 1, got {getattr(self, name)}")
        try:
            parse_skip(list(self.skip))
        except ValueError as e:
            raise ConfigError(f"analysis.skip: {e}") from None


#: Update-stage option keys the stage sets itself (per base, task and folder).
UPDATE_OWN_KEYS = ("spec", "base", "updated", "task", "tasks", "out", "adapter", "resume", "limit")


@dataclass
class UpdateSettings:
    """The update stage after the grid (`ExperimentConfig.updates`): a LoRA adapter per base
    model and task, every model evaluated on the same seeded items, and the side effects.

    Attributes:
        bases: {name: model} of the models updated: "teacher" (`teacher_model` as it is), the
            name of a grid run (e.g. teacher-pit-s0) or any model spec; empty = no update stage.
        tasks: update tasks: one adapter per base and task (mbpp, gsm8k or a .jsonl file).
        eval_tasks: tasks every base and every adapter is evaluated on (the cross-task change
            of an adapter is its change on the tasks it was not trained for).
        limit: items per evaluated task (a fixed seeded subset, the same for every model);
            null = all.
        seed: seed of the task subsets, the LoRA initialisation and the bootstraps.
        compare: pairs [control, treatment] of base names (e.g. [tt, pit]) compared item by
            item after the same update: exact McNemar on correctness, paired bootstraps of
            the reference log-likelihood (over items) and of the side-effect KL (over windows).
        finetune: `tying finetune` options shared by every adapter (max_steps, batch_size,
            lr, rank, ...).
        evaluate: `tying evaluate` options shared by every evaluation (batch_size,
            max_new_tokens, num_fewshot, precision, ...).
        side_effects: `tying side-effects` options (texts, max_tokens, lens_tokens, ...);
            `skip: true` leaves the side effects out.
        units: the design of docs/updates-design.md instead of `bases`: every checkpoint of
            every grid run is a base (named RUN-stepN), updated on each task by a LoRA whose
            seed is the run's seed (one unit of replication per run); analysed by
            `tying.experiment.update_units`; `bases` must then be empty and `compare` names
            pairs of grid labels ([[tt, pit]]).
        unit_steps: with `units`, the checkpoint steps that are bases (e.g. [10, 40]); null:
            every checkpoint.
        add_tokens: `tying add-tokens` options (tokens, init, pit_keep, ...): when given, every
            base is first grown by those tokens (folder `updates/BASE/grown`) and the grown
            model is the base that is evaluated, updated and compared (issue 36's new-token
            update); empty = none.
        targets: {update task: held-out .jsonl file of prompt/completion records}: for an
            update trained on a .jsonl task, the file whose completions' likelihood is its
            target (`tying.evaluation.completions`), measured on each base and each updated
            model; the target gain of `tying.experiment.update_units` is read from it.
        outside_family: metric names (`tying.experiment.update_units.metric_values`, e.g.
            `cross:gsm8k`) reported but left out of the secondary family and its Holm
            correction, as the design declares.
    """

    bases: dict[str, str] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=lambda: ["mbpp", "gsm8k"])
    eval_tasks: list[str] = field(default_factory=lambda: ["gsm8k", "svamp", "mbpp", "humaneval"])
    limit: int | None = 20
    seed: int = 0
    compare: list[list[str]] = field(default_factory=list)
    finetune: dict[str, Any] = field(default_factory=dict)
    evaluate: dict[str, Any] = field(default_factory=dict)
    side_effects: dict[str, Any] = field(default_factory=dict)
    units: bool = False
    unit_steps: list[int] | None = None
    add_tokens: dict[str, Any] = field(default_factory=dict)
    targets: dict[str, str] = field(default_factory=dict)
    outside_family: list[str] = field(default_factory=list)

    @property
    def enabled(self) -> bool:
        """Whether the experiment has an update stage (bases given, or units)."""
        return bool(self.bases) or self.units

    def __post_init__(self) -> None:
        for name in self.bases:
            if not _SAFE_NAME.fullmatch(str(name)):
                raise ConfigError(
                    f"updates.bases: name {name!r} must be letters, digits, '.', '_' or '-' "
                    "(it names a folder)"
                )
        if self.units and self.bases:
            raise ConfigError(
                "updates.units makes every checkpoint of every grid run a base: remove "
                "updates.bases"
            )
        if self.units and not self.compare:
            raise ConfigError(
                "updates.units needs updates.compare: pairs [control, treatment] of grid "
                "labels (e.g. [[tt, pit]])"
            )
        if self.units and "seed" in self.finetune:
            raise ConfigError(
                "updates.finetune.seed: with updates.units each LoRA's seed is its run's seed; "
                "remove it"
            )
        if self.unit_steps is not None and (not self.units or len(self.unit_steps) < 2):
            raise ConfigError(
                "updates.unit_steps needs updates.units and >= 2 steps (a line through each "
                f"run's bases), got {self.unit_steps}"
            )
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"updates.limit must be >= 1 or null, got {self.limit}")
        if not self.tasks or len(set(self.tasks)) != len(self.tasks):
            raise ConfigError(
                f"updates.tasks must be a non-empty list without duplicates: {self.tasks}"
            )
        unknown = [t for t in self.targets if t not in self.tasks]
        if unknown:
            raise ConfigError(
                f"updates.targets: {unknown} are not update tasks ({', '.join(self.tasks)})"
            )
        for task, file in self.targets.items():
            if not str(file).endswith(".jsonl"):
                raise ConfigError(
                    f"updates.targets.{task}: {file!r} must be a .jsonl file of "
                    '{"prompt": ..., "completion": ...} records'
                )
        try:
            parse_tasks(self.eval_tasks)
        except ValueError as e:
            raise ConfigError(f"updates.eval_tasks: {e}") from None
        for pair in [] if self.units else self.compare:  # units: grid labels, checked there
            if len(pair) != 2 or pair[0] == pair[1] or any(p not in self.bases for p in pair):
                raise ConfigError(
                    f"updates.compare: {pair} must be two different names of updates.bases "
                    f"({', '.join(self.bases) or 'none given'})"
                )
        sections = (
            ("finetune", FinetuneOptions, {"spec": "model"}),
            ("evaluate", EvaluateOptions, {"spec": "model"}),
            ("side_effects", SideEffectsOptions, {"base": "a", "updated": "b"}),
        )
        if self.add_tokens:
            own = [k for k in self.add_tokens if k in ("spec", "out")]
            if own or "tokens" not in self.add_tokens:
                raise ConfigError(
                    "updates.add_tokens needs `tokens` (a file, one string a line) and sets "
                    f"spec and out itself (remove {own})"
                )
            from_dict(
                AddTokensOptions, {**self.add_tokens, "spec": "m"}, source="updates.add_tokens"
            )
        for section, cls, required in sections:
            keys = dict(getattr(self, section))
            skip = keys.pop("skip", False) if section == "side_effects" else False
            if not isinstance(skip, bool):
                raise ConfigError(f"updates.side_effects.skip must be true or false, got {skip!r}")
            own = [k for k in keys if k in UPDATE_OWN_KEYS]
            if own:
                raise ConfigError(
                    f"updates.{section}: {own} are set by the update stage (bases, tasks, "
                    "eval_tasks, limit); remove them"
                )
            from_dict(cls, {**keys, **required}, source=f"updates.{section}")

    @property
    def skip_side_effects(self) -> bool:
        """True when `side_effects` says `skip: true`."""
        return bool(self.side_effects.get("skip", False))


@dataclass(frozen=True)
class RunSpec:
    """One grid cell.

    Attributes:
        mode: scratch or teacher.
        label: the tie, or the variant's name when the grid has variants.
        seed: the seed.
        tie: the cell's interface.
    """

    mode: str
    label: str
    seed: int
    tie: str

    @property
    def name(self) -> str:
        """Folder name, e.g. `scratch-pit-s0` or `scratch-pit-riemann-s1`."""
        return f"{self.mode}-{self.label}-s{self.seed}"


@dataclass
class ExperimentConfig:
    """A grid of runs (tie or variant) × mode × seed at an equal token budget, and its analysis.

    Attributes:
        name: title of the report.
        out: experiment folder (runs/, analysis/, figures/, report.*).
        ties: interfaces of the grid (null = every registered interface; must be null when
            `variants` is given).
        variants: named cells instead of ties: {name: TrainConfig overrides}, each setting at
            least `tie` (e.g. {pit-riemann: {tie: pit, pit: {z_optimizer: riemannian_adam}}}).
        modes: scratch (a preset from random init) and/or teacher (a converted model).
        seeds: seeds (initialisation and data order).
        teacher_model: the teacher-mode model (a `tying.hf.load` spec).
        tokens: token budget per run; sets max_steps = ceil(tokens / global_batch_tokens)
            (null: the max_steps of `train`).
        checkpoints: checkpoints per run (drift reads them; checkpoint_every = max_steps //
            checkpoints unless `train` sets it).
        train: TrainConfig keys shared by every run.
        scratch: TrainConfig keys of scratch-mode runs (after `train`).
        teacher: TrainConfig keys of teacher-mode runs (after `train`).
        lens: the lens evaluation after the grid.
        analysis: the probes and metrics after the grid.
        updates: LoRA updates of chosen models after the grid, their evaluation and side
            effects (empty `bases`: none).
        keep_optimizer_states: keep optimizer.pt in every checkpoint of a finished run (false:
            only in the newest; the older ones keep their weights, which is all drift reads).
    """

    name: str = "experiment"
    out: str = renamed("runs/experiment", "out_dir")
    ties: list[str] | None = None
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    modes: list[Literal["scratch", "teacher"]] = field(default_factory=lambda: ["scratch"])
    seeds: list[int] = field(default_factory=lambda: [0])
    teacher_model: str = "smollm2"
    tokens: int | None = None
    checkpoints: int = 4
    train: dict[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)
    teacher: dict[str, Any] = field(default_factory=dict)
    lens: LensSettings = field(default_factory=LensSettings)
    analysis: AnalysisSettings = field(default_factory=AnalysisSettings)
    updates: UpdateSettings = field(default_factory=UpdateSettings)
    keep_optimizer_states: bool = False

    def __post_init__(self) -> None:
        if self.variants and self.ties is not None:
            raise ConfigError(
                "give either ties or variants (each variant sets its own tie), not both"
            )
        for name, overrides in self.variants.items():
            if not isinstance(overrides, dict) or "tie" not in overrides:
                raise ConfigError(f"variants.{name} must be a mapping that sets at least `tie`")
            if not _SAFE_NAME.fullmatch(str(name)):
                raise ConfigError(
                    f"variant name {name!r} must be letters, digits, '.', '_' or '-' (it names "
                    "a folder)"
                )
        for tie in self.ties or []:
            try:
                check_tie_name(tie)
            except ValueError as e:
                raise ConfigError(f"ties: {e}") from None
        for name in ("modes", "seeds"):
            values = getattr(self, name)
            if not values:
                raise ConfigError(f"{name} must not be empty")
            if len(set(values)) != len(values):
                raise ConfigError(f"{name} has duplicates: {values}")
        if self.ties is not None and (not self.ties or len(set(self.ties)) != len(self.ties)):
            raise ConfigError(f"ties must be a non-empty list without duplicates, got {self.ties}")
        if self.tokens is not None and self.tokens < 1:
            raise ConfigError(f"tokens must be >= 1 or null, got {self.tokens}")
        if self.checkpoints < 2:
            raise ConfigError(f"checkpoints must be >= 2 (drift needs two), got {self.checkpoints}")
        for section in ("train", "scratch", "teacher"):
            bad = [k for k in getattr(self, section) if k in (*GRID_KEYS, "tie")]
            if bad:
                raise ConfigError(
                    f"{section}: {bad} are set per grid cell (ties or variants, seeds, out); "
                    "remove them"
                )
        for name, overrides in self.variants.items():
            bad = [k for k in overrides if k in GRID_KEYS]
            if bad:
                raise ConfigError(f"variants.{name}: {bad} are set per grid cell; remove them")
        for spec in self.runs():  # every cell's TrainConfig must be valid before anything runs
            self.train_config(spec)
        labels = [label for label, _ in self.labels()]
        for pair in self.updates.compare if self.updates.units else []:
            if len(pair) != 2 or pair[0] == pair[1] or any(p not in labels for p in pair):
                raise ConfigError(
                    f"updates.compare: {pair} must be two different labels of the grid "
                    f"({', '.join(labels)})"
                )
        for name, model in self.updates.bases.items():
            if self.update_base_is_run(model) is None and _RUN_NAME.fullmatch(model):
                names = ", ".join(s.name for s in self.runs())
                raise ConfigError(
                    f"updates.bases.{name}: {model!r} looks like a grid run but the grid has "
                    f"only {names}"
                )

    def update_base_is_run(self, model: str) -> RunSpec | None:
        """The grid cell named `model` (e.g. teacher-pit-s0), or None."""
        return next((s for s in self.runs() if s.name == model), None)

    def update_base_spec(self, model: str) -> str:
        """The model spec of an `updates.bases` value: the teacher, a run folder or `model`."""
        if model == "teacher":
            return self.teacher_model
        spec = self.update_base_is_run(model)
        return str(self.run_dir(spec)) if spec is not None else model

    def labels(self) -> list[tuple[str, str]]:
        """(label, tie) of the grid's columns: the variants, else the ties."""
        if self.variants:
            return [(name, str(v["tie"])) for name, v in self.variants.items()]
        return [(tie, tie) for tie in (self.ties if self.ties is not None else tie_names())]

    def runs(self) -> list[RunSpec]:
        """The grid cells, mode-major then seed then label (in the order listed)."""
        return [
            RunSpec(mode, label, int(seed), tie)
            for mode in self.modes
            for seed in self.seeds
            for label, tie in self.labels()
        ]

    @property
    def root(self) -> Path:
        return Path(self.out)

    def run_dir(self, spec: RunSpec) -> Path:
        return self.root / "runs" / spec.name

    def _cell_overrides(self, spec: RunSpec) -> dict[str, Any]:
        """TrainConfig keys of one cell before the grid's own: train < mode < variant."""
        data: dict[str, Any] = dict(self.train)
        data.update(self.scratch if spec.mode == "scratch" else self.teacher)
        if self.variants:
            data.update(self.variants[spec.label])
        return data

    def set_keys(self, spec: RunSpec) -> set[str]:
        """TrainConfig keys this experiment sets for `spec` (the rest are TrainConfig defaults)."""
        keys = {
            *lift_moved_keys(TrainConfig, self._cell_overrides(spec), warn=False),
            "tie",
            "seed",
            "model",
            "max_steps",
            "checkpoint_every",
        }
        return keys - {"progress", "resume", "tensorboard"}

    def train_config(self, spec: RunSpec) -> TrainConfig:
        """The TrainConfig of one cell: defaults < `train` < mode section < variant < the cell.

        Gradient paths are tracked; the training text is the whole source (`max_tokens: null`,
        not a run's own `auto` slice) unless the grid sets it; checkpoints are spaced for
        `checkpoints` per run and all kept (drift reads them).
        """
        # the whole source, as the grids of docs/results.md were trained (a cell may set it)
        data: dict[str, Any] = {
            "track_gradient_paths": True,
            "tensorboard": False,
            "max_tokens": None,
        }
        cell = self._cell_overrides(spec)
        data.update(cell)
        data.update(
            tie=spec.tie,
            seed=spec.seed,
            out=str(self.run_dir(spec)),
            model=self.teacher_model if spec.mode == "teacher" else None,
        )
        cfg = from_dict(TrainConfig, data, source=f"{self.name}: {spec.name}", section="train")
        if self.tokens is not None:
            cfg.max_steps = max(1, math.ceil(self.tokens / cfg.global_batch_tokens))
        if "checkpoint_every" not in cell:
            cfg.checkpoint_every = max(1, cfg.max_steps // self.checkpoints)
        if cfg.checkpoint_every:
            cfg.keep_last = max(cfg.keep_last, cfg.max_steps // cfg.checkpoint_every + 1)
        return cfg


_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
#: The shape of a grid run's name (mode-label-sSEED).
_RUN_NAME = re.compile(r"(scratch|teacher)-[A-Za-z0-9._-]+-s[0-9]+")


def load_experiment(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """An `ExperimentConfig` from a YAML file and `key=value` overrides (dotted keys for
    sections: `train.max_steps=50`, `lens.kind=tuned`).

    Raises:
        FileNotFoundError: `path` does not exist.
        ConfigError: unknown keys, ill-typed values.
    """
    return load_config(ExperimentConfig, path, overrides)


def parse_shard(text: str) -> tuple[int, int]:
    """(i, n) from "I/N" with 1 <= I <= N.

    Raises:
        InvalidInputError: another form.
    """
    parts = text.split("/")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        index, count = int(parts[0]), int(parts[1])
        if 1 <= index <= count:
            return index, count
    raise InvalidInputError(f"shard {text!r}: give I/N with 1 <= I <= N, e.g. 2/8")
