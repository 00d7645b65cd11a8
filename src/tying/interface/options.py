"""The training options of each interface: one section per interface in a run's config.

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

import math
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tying.errors import InvalidInputError

#: How a trained PIT memory Z is optimised (tying.train.optim).
ZOptimizer = Literal["adamw", "riemannian_adam"]
#: How PIT's T = L Lᵀ is optimised (tying.train.optim).
TOptimizer = Literal["adamw", "riemannian_adam"]
Z_OPTIMIZERS: tuple[str, ...] = typing.get_args(ZOptimizer)
T_OPTIMIZERS: tuple[str, ...] = typing.get_args(TOptimizer)
#: Rule value of PitOptions.z_lr_scale (tying.train.optim.z_lr_scale).
ENTRY_SIZE = "entry_size"
#: Rule value of PitOptions.t_scale (tying.interface.pit.scratch_t_scale): c = init_std·√V.
T_SCALE_AUTO = "auto"


def _positive_or_rule(name: str, value: Any, rule: str) -> None:
    if value is None or value == rule:
        return
    if isinstance(value, bool) or not (
        isinstance(value, int | float) and math.isfinite(value) and value > 0
    ):
        raise InvalidInputError(f"{name} must be a positive number or {rule!r}, got {value!r}")


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
            run's `fit` section).
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
    }

    t_init: Literal["fit", "output", "input", "identity"] | None = None
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
