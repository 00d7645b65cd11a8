"""`ExperimentConfig`: a grid tie × mode × seed of training runs at one token budget.

    cfg = load_config(ExperimentConfig, "configs/experiments/cpu.yaml", ["seeds=[0]"])
    for spec in cfg.runs():
        train_cfg = cfg.train_config(spec)       # the TrainConfig of one grid cell

Each run lives in `out_dir/runs/<mode>-<tie>-s<seed>/` (a `tying train` run folder).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tying.config import ConfigError, from_dict
from tying.interface import check_tie
from tying.train.config import TrainConfig

MODES = ("scratch", "teacher")
LENS_KINDS = ("logit", "tuned", "both", "none")
#: TrainConfig keys the grid sets itself (per cell).
GRID_KEYS = ("tie", "seed", "out_dir", "resume")


@dataclass
class LensSettings:
    """The lens evaluation after the grid (`ExperimentConfig.lens`).

    Attributes:
        kind: "logit", "tuned", "both" or "none" (no lens).
        max_tokens: evaluated positions per model.
        seq_len: tokens per window (None: the runs' seq_len).
        batch_size: windows per forward pass.
        data: evaluation text (None: the runs' val_data, else Gutenberg validation).
        tuned_steps, tuned_tokens_per_step: tuned-lens training budget (steps × tokens).
        include_teacher: also evaluate the teacher model when the grid has teacher runs.
    """

    kind: str = "logit"
    max_tokens: int = 4096
    seq_len: int | None = None
    batch_size: int = 8
    data: str | None = None
    tuned_steps: int = 100
    tuned_tokens_per_step: int = 2048
    include_teacher: bool = True

    def __post_init__(self) -> None:
        if self.kind not in LENS_KINDS:
            raise ConfigError(f"lens.kind must be one of {LENS_KINDS}, got {self.kind!r}")
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
        maps: "raw" or "effective" matrices in the tied-vs-untied comparisons.
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
    maps: str = "raw"
    skip: list[str] = field(default_factory=list)
    probe_teacher: bool = True

    def __post_init__(self) -> None:
        from tying.probe import parse_skip

        for name in ("loss_window", "grad_share_steps", "grad_share_window", "k", "corpus_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"analysis.{name} must be >= 1, got {getattr(self, name)}")
        try:
            parse_skip(list(self.skip))
        except ValueError as e:
            raise ConfigError(f"analysis.skip: {e}") from None


@dataclass(frozen=True)
class RunSpec:
    """One grid cell."""

    mode: str
    tie: str
    seed: int

    @property
    def name(self) -> str:
        """Folder name, e.g. `scratch-pit-s0`."""
        return f"{self.mode}-{self.tie}-s{self.seed}"


@dataclass
class ExperimentConfig:
    """A grid of runs tie × mode × seed at an equal token budget, and its analysis.

    Attributes:
        name: title of the report.
        out_dir: experiment folder (runs/, analysis/, figures/, report.*).
        ties: interfaces ("untied", "tt", "pit").
        modes: "scratch" (a preset from random init) and/or "teacher" (a converted model).
        seeds: seeds (initialisation and data order).
        teacher_model: the teacher-mode model (a `tying.hf.load` spec).
        tokens: token budget per run; sets max_steps = ceil(tokens / global_batch_tokens)
            (None: the max_steps of `train`).
        checkpoints: checkpoints per run (for drift; checkpoint_every = max_steps // this,
            unless `train` sets checkpoint_every).
        train: TrainConfig overrides shared by every run.
        scratch, teacher: TrainConfig overrides of one mode (applied after `train`).
        lens: `LensSettings` keys.
        analysis: `AnalysisSettings` keys.
        keep_optimizer_states: keep optimizer.pt in every checkpoint of a finished run (False:
            only in the newest; the older ones keep their weights, which is all drift reads).
    """

    name: str = "experiment"
    out_dir: str = "runs/experiment"
    ties: list[str] = field(default_factory=lambda: ["untied", "tt", "pit"])
    modes: list[str] = field(default_factory=lambda: ["scratch"])
    seeds: list[int] = field(default_factory=lambda: [0])
    teacher_model: str = "smollm2"
    tokens: int | None = None
    checkpoints: int = 4
    train: dict[str, Any] = field(default_factory=dict)
    scratch: dict[str, Any] = field(default_factory=dict)
    teacher: dict[str, Any] = field(default_factory=dict)
    lens: dict[str, Any] = field(default_factory=dict)
    analysis: dict[str, Any] = field(default_factory=dict)
    keep_optimizer_states: bool = False

    def __post_init__(self) -> None:
        for tie in self.ties:
            try:
                check_tie(tie)
            except ValueError as e:
                raise ConfigError(f"ties: {e}") from None
        for mode in self.modes:
            if mode not in MODES:
                raise ConfigError(f"modes must be some of {MODES}, got {mode!r}")
        for name in ("ties", "modes", "seeds"):
            values = getattr(self, name)
            if not values:
                raise ConfigError(f"{name} must not be empty")
            if len(set(values)) != len(values):
                raise ConfigError(f"{name} has duplicates: {values}")
        if self.tokens is not None and self.tokens < 1:
            raise ConfigError(f"tokens must be >= 1 or null, got {self.tokens}")
        if self.checkpoints < 2:
            raise ConfigError(f"checkpoints must be >= 2 (drift needs two), got {self.checkpoints}")
        for section in ("train", "scratch", "teacher"):
            bad = [k for k in getattr(self, section) if k in GRID_KEYS]
            if bad:
                raise ConfigError(
                    f"{section}: {bad} are set per grid cell (ties, seeds, out_dir); remove them"
                )
        self.lens_settings()
        self.analysis_settings()
        for spec in self.runs():  # every cell's TrainConfig must be valid before anything runs
            self.train_config(spec)

    def lens_settings(self) -> LensSettings:
        return from_dict(LensSettings, self.lens, source="lens")

    def analysis_settings(self) -> AnalysisSettings:
        return from_dict(AnalysisSettings, self.analysis, source="analysis")

    def runs(self) -> list[RunSpec]:
        """The grid cells, mode-major then seed then tie (untied first, as listed)."""
        return [
            RunSpec(mode, tie, int(seed))
            for mode in self.modes
            for seed in self.seeds
            for tie in self.ties
        ]

    @property
    def root(self) -> Path:
        return Path(self.out_dir)

    def run_dir(self, spec: RunSpec) -> Path:
        return self.root / "runs" / spec.name

    def set_keys(self, spec: RunSpec) -> set[str]:
        """TrainConfig keys this experiment sets for `spec` (the rest are TrainConfig defaults)."""
        mode = self.scratch if spec.mode == "scratch" else self.teacher
        keys = {*self.train, *mode, "tie", "seed", "model", "max_steps", "checkpoint_every"}
        return keys - {"progress", "resume", "tensorboard"}

    def train_config(self, spec: RunSpec) -> TrainConfig:
        """The TrainConfig of one cell: defaults < `train` < mode overrides < the cell.

        Gradient paths are tracked; checkpoints are spaced for `checkpoints` per run and all
        kept (drift reads them).
        """
        data: dict[str, Any] = {"track_gradient_paths": True, "tensorboard": False}
        data.update(self.train)
        data.update(self.scratch if spec.mode == "scratch" else self.teacher)
        data.update(
            tie=spec.tie,
            seed=spec.seed,
            out_dir=str(self.run_dir(spec)),
            model=self.teacher_model if spec.mode == "teacher" else None,
        )
        source = f"{self.name}: {spec.name}"
        cfg = from_dict(TrainConfig, data, source=source)
        if self.tokens is not None:
            cfg.max_steps = max(1, math.ceil(self.tokens / cfg.global_batch_tokens))
        if "checkpoint_every" not in self.train and "checkpoint_every" not in (
            self.scratch if spec.mode == "scratch" else self.teacher
        ):
            cfg.checkpoint_every = max(1, cfg.max_steps // self.checkpoints)
        if cfg.checkpoint_every:
            cfg.keep_last = max(cfg.keep_last, cfg.max_steps // cfg.checkpoint_every + 1)
        return cfg


#: Sections of ExperimentConfig that are mappings (dotted overrides `train.lr=1e-3` go in them).
SECTIONS = ("train", "scratch", "teacher", "lens", "analysis")


def load_experiment(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Any:
    """An `ExperimentConfig` from a YAML file and `key=value` overrides.

    `section.key=value` (section one of SECTIONS) sets one key inside a mapping section, e.g.
    `train.max_steps=50`; a plain `key=value` replaces a top-level value.

    Raises:
        FileNotFoundError: `path` does not exist.
        ConfigError: unknown keys, ill-typed values, an unknown section.
    """
    import yaml

    from tying.config import parse_overrides

    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"experiment config {p} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p} must hold a mapping of key: value")
        data.update(loaded)
    for key, value in parse_overrides(list(overrides)).items():
        if "." in key:
            section, sub = key.split(".", 1)
            if section not in SECTIONS:
                raise ConfigError(
                    f"override {key!r}: dotted keys go into one of {SECTIONS}, not {section!r}"
                )
            data[section] = {**(data.get(section) or {}), sub: value}
        else:
            data[key] = value
    return from_dict(ExperimentConfig, data, source=str(path) if path else "overrides")
