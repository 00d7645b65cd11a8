"""The training options of each interface: one section per interface in a run's config.

Torch-free (the schema layer, `tying.options`), so that a run's configuration is checked
before torch is imported; `tying.interface.options` re-exports it.

A run's config (`tying.train.TrainConfig`) has one section per interface that has options,
named by its `tie` (`tt:`, `pit:`), of the type the interface class names in `options_class`;
only the section of the run's own interface may differ from its defaults. The code that
builds, converts or optimises an interface reads the section through the registry
(`tying.interface.registry.options_section`, `TrainConfig.interface_options`) and hands the
interface its keywords (`interface_keywords`), so no caller branches on the name.

Each section class lists in `MOVED_KEYS` the flat keys it replaces ({old key: field}); a
config that still uses them is read with a DeprecationWarning (`tying.config.from_dict`).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from tying.config import ConfigError
from tying.errors import InvalidInputError

#: How a trained PIT memory Z is optimised (tying.train.optim).
ZOptimizer = Literal["adamw", "riemannian_adam"]
#: How PIT's T = L Lᵀ is optimised (tying.train.optim).
TOptimizer = Literal["adamw", "riemannian_adam"]
Z_OPTIMIZERS: tuple[str, ...] = typing.get_args(ZOptimizer)
T_OPTIMIZERS: tuple[str, ...] = typing.get_args(TOptimizer)
#: Rule value of PitOptions.z_lr_scale (tying.train.optim.z_lr_scale).
ENTRY_SIZE = "entry_size"
#: How a PIT conversion initialises T (`PitOptions.t_init`): the closed forms identity, output
#: and input (`tying.conversion.closed_form.T_INITS`), and fit (the closed form, then T and the
#: final-norm gain fitted to the teacher on calibration text). The one list of these choices.
TInit = Literal["identity", "output", "input", "fit"]
PIT_INITS: tuple[str, ...] = typing.get_args(TInit)
#: Rule value of PitOptions.t_scale (tying.interface.pit.scratch_t_scale): c = init_std·√V.
T_SCALE_AUTO = "auto"


def _positive_or_rule(name: str, value: Any, rule: str) -> None:
    if value is None or value == rule:
        return
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value > 0
    ):
        raise InvalidInputError(f"{name} must be a positive number or {rule!r}, got {value!r}")


#: The degrees of freedom `fit_pit` can move: "t" (T through its Cholesky factor), "gain"
#: (the final-norm gain, and a LayerNorm bias with it), "bias" (the input bias of a centred
#: PIT) and "z" (the memory Z, kept orthonormal — and centred — by retraction).
FIT_PARAMETERS = ("t", "gain", "bias", "z")


@dataclass
class FitOptions:
    """Options of `fit_pit` (`t_init="fit"`): what moves, how far, on how much text.

    Attributes:
        tokens: the budget: calibration tokens the fit trains on, each once (fresh
            windows each step); the calibration windows must hold at least
            `tokens + check_tokens`. The default, 65,536 (128 steps of 2 × 256 tokens),
            brought SmolLM2-135M's step-0 KL to 0.95 nats/token (16,384: 1.60; the fit's
            gain comes from its number of steps, not from fresh text: docs/teacher.md).
        check_tokens: held-out calibration tokens on which the KL is measured before and
            after; the fit keeps the start if it did not lower the KL there.
        batch_windows: windows per step.
        params: what moves, a comma-separated subset of t (T), gain (the final-norm gain), bias
            (the input bias) and z (the memory Z, retracted after each step).
        lr: Adam step size of X, the symmetric log-change of T
            (T = T0^{1/2} exp(X) T0^{1/2}: a scale-free, always-SPD parametrisation).
        gain_lr: Adam step size of the log-change of the gain and of the input bias
            (in units of the teacher's RMS embedding entry).
        z_lr: Adam step size of Z's entries (when "z" is fitted).
        autocast: run the trunk under bf16 autocast (the head and KL stay float32): true,
            false, or "auto" (bf16 where the hardware multiplies it natively, as every verb's
            `precision: auto`: a CUDA GPU with bf16, a CPU with AVX512-BF16/AMX; on an AVX2
            CPU emulated bf16 made the fit 5 tokens/s instead of hundreds).
    """

    tokens: int = 65536
    check_tokens: int = 1024
    batch_windows: int = 2
    params: str = "t,gain,bias"
    lr: float = 5e-4
    gain_lr: float = 5e-3
    z_lr: float = 1e-4
    autocast: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        names = self.parameter_names()
        bad = sorted(set(names) - set(FIT_PARAMETERS))
        if bad or not names:
            raise InvalidInputError(
                f"fit params must be a comma-separated subset of {FIT_PARAMETERS}, got {self.params!r}"
            )
        for name in ("tokens", "batch_windows"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"fit {name} must be >= 1, got {getattr(self, name)}")
        if self.check_tokens < 0:
            raise InvalidInputError(f"fit check_tokens must be >= 0, got {self.check_tokens}")
        if self.autocast not in (True, False, "auto"):
            raise InvalidInputError(
                f"fit autocast must be true, false or auto, got {self.autocast!r}"
            )

    def uses_autocast(self, device: Any) -> bool:
        """Whether the fit runs its trunk under bf16 autocast on `device` (a torch.device or
        name; "auto" resolved by `tying.devices.resolve_precision`)."""
        if self.autocast == "auto":
            from tying.devices import resolve_precision  # imports torch: not at module level

            return resolve_precision("auto", device) == "bf16"
        return bool(self.autocast)

    def parameter_names(self) -> tuple[str, ...]:
        """The fitted degrees of freedom, in FIT_PARAMETERS order."""
        chosen = {p.strip() for p in self.params.split(",") if p.strip()}
        return tuple(p for p in FIT_PARAMETERS if p in chosen) + tuple(
            sorted(chosen - set(FIT_PARAMETERS))
        )


@dataclass
class TransposeOptions:
    """Options of transpose tying (TT) in a run: section `tt:` (`tt.input_grad_scale=5`).

    Attributes:
        input_grad_scale: multiplier of the gradient that reaches E through the input lookup
            (unitless, finite; 1 = plain TT; the weight-tying-bias paper's §6 uses 2, 5, 10).
    """

    MOVED_KEYS: ClassVar[dict[str, str]] = {"input_grad_scale": "input_grad_scale"}

    input_grad_scale: float = 1.0

    def __post_init__(self) -> None:
        if isinstance(self.input_grad_scale, bool) or not math.isfinite(self.input_grad_scale):
            raise InvalidInputError(
                f"tt.input_grad_scale must be finite, got {self.input_grad_scale!r}"
            )

    def check(self, *, teacher: bool, distributed: str) -> None:
        """Checks that need the run's mode (nothing for TT)."""

    def interface_keywords(self, *, teacher: bool) -> dict[str, Any]:
        """Keywords of `TransposeTying.scratch` / the TT conversion."""
        return {"input_grad_scale": self.input_grad_scale}

    def fixed_settings(self, *, teacher: bool) -> dict[str, Any]:
        """Settings a resumed run must keep: the interface's keywords."""
        return self.interface_keywords(teacher=teacher)


@dataclass
class PitOptions:
    """Options of pseudo-inverse tying (PIT) in a run: section `pit:` (`pit.t_scale=auto`).

    Attributes:
        t_init: teacher mode: how T is initialised (fit, output, input, identity; null = the
            conversion default, fit: T and the final-norm gain fitted to the teacher on
            calibration windows drawn from the training data with seed + 1; its budget is the
            `pit.fit` section).
        fit: teacher mode, t_init=fit: the fit's options (`FitOptions`): fit.tokens (budget in
            calibration tokens), fit.params (what moves: a subset of t,gain,bias,z), step sizes.
        centre: teacher mode: build Z from the centred teacher, its mean row an input bias.
        input_scale: teacher mode: scale correction: auto (searched on calibration windows),
            none, or a number r (E at r times the teacher's scale).
        trainable_z: train the memory Z (with a Stiefel retraction after each step); null =
            trained from scratch, frozen in teacher mode.
        diag_activation: exp or softplus, the map from parameters to L's diagonal.
        t_scale: scratch mode: the initial T = c·I, so E = Z/c and W_out = c·Zᵀ (unitless
            c > 0), or auto: c = init_std·√V (4.48 at V = 50,257), which starts W_out's rows
            and the logits at an N(0, init_std²) head's scale; 1 = the paper's T = I; null
            (the default) = auto from scratch (the study in docs/training.md), 1 in teacher
            mode.
        z_optimizer: a trained Z's optimiser: adamw (Z is an AdamW group, then the polar
            retraction) or riemannian_adam (geoopt's RiemannianAdam on the Stiefel manifold).
        z_lr_scale: Z's learning rate as a multiple of lr (unitless), or entry_size: Z's
            relative step made a standard matrix's ((1/√V)/init_std for adamw, √d/init_std
            for riemannian_adam; see tying.train.optim.z_lr_scale).
        t_optimizer: adamw (AdamW on L's stored parameter, the paper's) or riemannian_adam
            (Riemannian Adam on T over the SPD manifold, affine-invariant: the learning rate
            is then the step of log T per step).
        l_lr_scale: T's learning rate as a multiple of lr (unitless, > 0).
    """

    MOVED_KEYS: ClassVar[dict[str, str]] = {
        "t_init": "t_init",
        "pit_centre": "centre",
        "pit_input_scale": "input_scale",
        "pit_trainable_z": "trainable_z",
        "pit_diag_activation": "diag_activation",
        "pit_t_scale": "t_scale",
        "pit_z_optimizer": "z_optimizer",
        "pit_z_lr_scale": "z_lr_scale",
        "pit_t_optimizer": "t_optimizer",
        "pit_l_lr_scale": "l_lr_scale",
        "fit": "fit",
        # the flat keys of `tying convert` (ConvertOptions) before its `pit:` section
        "centre": "centre",
        "input_scale": "input_scale",
        "trainable_z": "trainable_z",
    }

    t_init: TInit | None = None
    fit: FitOptions = field(default_factory=FitOptions)
    centre: bool = True
    input_scale: str = "auto"
    trainable_z: bool | None = None
    diag_activation: Literal["exp", "softplus"] = "exp"
    t_scale: float | Literal["auto"] | None = None
    z_optimizer: ZOptimizer = "adamw"
    z_lr_scale: float | Literal["entry_size"] = 1.0
    t_optimizer: TOptimizer = "adamw"
    l_lr_scale: float = 1.0

    def __post_init__(self) -> None:
        _positive_or_rule("pit.t_scale", self.t_scale, T_SCALE_AUTO)
        _positive_or_rule("pit.z_lr_scale", self.z_lr_scale, ENTRY_SIZE)
        if isinstance(self.l_lr_scale, bool) or not (
            math.isfinite(self.l_lr_scale) and self.l_lr_scale > 0
        ):
            raise InvalidInputError(
                f"pit.l_lr_scale must be a positive number, got {self.l_lr_scale!r}"
            )

    def resolved_trainable_z(self, *, teacher: bool) -> bool:
        """Whether Z is trained: `trainable_z`, or by mode when it is None (frozen in teacher
        mode, trained from scratch)."""
        return self.trainable_z if self.trainable_z is not None else not teacher

    def resolved_t_scale(self, *, teacher: bool) -> float | Literal["auto"]:
        """The initial T = c·I: `t_scale`, or when it is None "auto" from scratch and 1 in
        teacher mode."""
        if self.t_scale is not None:
            return self.t_scale
        return 1.0 if teacher else T_SCALE_AUTO

    def check(self, *, teacher: bool, distributed: str) -> None:
        """Raise ValueError for options the run's mode or sharding cannot honour."""
        if teacher and self.t_scale not in (None, 1.0):
            raise InvalidInputError(
                f"pit.t_scale applies to scratch-mode PIT only (no model), got "
                f"pit.t_scale={self.t_scale!r} in teacher mode: leave it unset (or 1)"
            )
        for key in ("z_optimizer", "t_optimizer"):
            if getattr(self, key) != "adamw" and distributed == "fsdp":
                raise InvalidInputError(
                    f"pit.{key}='riemannian_adam' is not supported with distributed=fsdp "
                    f"(the interface is sharded as DTensors); use distributed=ddp or "
                    f"pit.{key}=adamw"
                )

    def interface_keywords(self, *, teacher: bool) -> dict[str, Any]:
        """Keywords of the PIT conversion (teacher) or of `PseudoInverseTying.scratch`.

        Teacher mode: t_init (when set), centre, input_scale, trainable_z, diag_activation.
        Scratch: trainable_z, diag_activation, and t_scale when it is not 1.
        """
        out: dict[str, Any] = {
            "trainable_z": self.resolved_trainable_z(teacher=teacher),
            "diag_activation": self.diag_activation,
        }
        if teacher:
            out |= {"centre": self.centre, "input_scale": self.input_scale}
            if self.t_init is not None:
                out["t_init"] = self.t_init
            return out
        t_scale = self.resolved_t_scale(teacher=False)
        if t_scale != 1.0:
            out["t_scale"] = t_scale
        return out

    def fixed_settings(self, *, teacher: bool) -> dict[str, Any]:
        """Settings a resumed run must keep: the interface's keywords and the optimizers whose
        state a checkpoint holds (z_optimizer, t_optimizer), with the initial T's scale
        resolved; learning-rate scales may change."""
        return self.interface_keywords(teacher=teacher) | {
            "t_scale": self.resolved_t_scale(teacher=teacher),
            "z_optimizer": self.z_optimizer,
            "t_optimizer": self.t_optimizer,
        }


#: Every registered interface name -> its options section class (None: no options), in the
#: registry's order. The torch-free copy of the registry's names, so that a configuration is
#: checked before torch is imported; a test holds it equal to `tying.interface.registry`
#: (a new interface adds its line here).
INTERFACE_SECTIONS: dict[str, type | None] = {
    "untied": None,
    "tt": TransposeOptions,
    "pit": PitOptions,
}


def tie_names() -> tuple[str, ...]:
    """The interface names a configuration may give as `tie` ("untied", "tt", "pit")."""
    return tuple(INTERFACE_SECTIONS)


def check_tie_name(tie: str) -> str:
    """Return `tie` if it names an interface, else raise InvalidInputError listing the choices."""
    if tie not in INTERFACE_SECTIONS:
        raise InvalidInputError(f"tie must be one of {tie_names()}, got {tie!r}")
    return tie


def check_other_sections(config: Any, tie: str) -> None:
    """Raise InvalidInputError when `config` (a run config with one section per interface) sets an
    option in the section of another interface than `tie` (one differing from its default)."""
    for other, options_class in INTERFACE_SECTIONS.items():
        if other == tie or options_class is None or not hasattr(config, other):
            continue
        section, default = getattr(config, other), options_class()
        for f in dataclasses.fields(default):
            value = getattr(section, f.name)
            if value != getattr(default, f.name):
                raise InvalidInputError(
                    f"{other}.{f.name} applies to tie={other!r} only, got tie={tie!r} "
                    f"with {other}.{f.name}={value!r}: leave it at its default "
                    f"({getattr(default, f.name)!r})"
                )


def check_interface_config(config: Any) -> None:
    """A run config's `tie` and interface sections, checked together (`check_tie_name`, then
    `check_other_sections`); a ConfigError, as the config's own checks raise."""
    try:
        check_tie_name(config.tie)
        check_other_sections(config, config.tie)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def options_section(config: Any, tie: str) -> Any | None:
    """The options of interface `tie` in a run config: its section named `tie`, or None when
    the interface has no options (torch-free twin of `tying.interface.registry.
    options_section`)."""
    return getattr(config, tie) if INTERFACE_SECTIONS.get(tie) else None
