"""The optimizer of a run: parameter groups, per-group learning rates, and the optimizer factory.

Every group carries `name`, `weight_decay` and `lr_scale`; the scheduled learning rate
lr(step) is applied as `lr(step) × lr_scale` to each group (`Optimizers.set_lr`).

| group      | parameters                                               | decay        | lr_scale        |
|------------|----------------------------------------------------------|--------------|-----------------|
| `decay`    | matrices of the blocks, V×d matrices of untied/TT        | weight_decay | 1               |
| `no_decay` | norms, gains, biases (1-D)                               | 0            | 1               |
| `pit_z`    | PIT's memory Z (V×d, orthonormal columns)                | 0            | `pit.z_lr_scale` |
| `pit_l`    | PIT's Cholesky parameter (d×d: L's off-diagonal and ρ)   | 0            | `pit.l_lr_scale` |

Decay would pull Z off the Stiefel manifold and L's off-diagonal to 0 and ρ to 0 (T to I for
the exp diagonal), so PIT's groups are never decayed.

Z is trained in one of two ways (`pit.z_optimizer`):

- "adamw": Z is one more AdamW group; after every step the polar retraction
  Z ← Z (ZᵀZ)^{-1/2} puts it back on the Stiefel manifold {Z : ZᵀZ = I}.
- "riemannian_adam": geoopt's `RiemannianAdam` (Bécigneul & Ganea, ICLR 2019) on the Stiefel
  manifold with the Euclidean metric: the gradient is projected on the tangent space
  (G − Z sym(ZᵀG)), Adam's moments are kept there and carried to the new point by
  projection, and the step ends with a retraction (here the same polar one, GEMM-only and
  shardable, instead of geoopt's QR). Everything else stays in AdamW.

`Optimizers` steps both together and hands the list to torch.distributed.checkpoint, so
each optimizer's state and its parameter groups (lr_scale included) are saved and restored.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from tying.config import ConfigError
from tying.interface.linalg import polar_retraction
from tying.interface.pit import PseudoInverseTying
from tying.train.config import ENTRY_SIZE, T_OPTIMIZERS, Z_OPTIMIZERS, TrainConfig
from tying.train.schedule import learning_rate

#: The keys of `OptimizerSettings`: `TrainConfig` and `FinetuneOptions` both carry them (flat
#: keys of their verbs, with each verb's own defaults).
OPTIMIZER_SETTINGS = (
    "lr",
    "min_lr_ratio",
    "warmup_steps",
    "weight_decay",
    "beta1",
    "beta2",
    "grad_clip",
)


@dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer and schedule of a run, whichever verb runs it (`tying.train.loop`).

    AdamW with (beta1, beta2) and decoupled weight decay on the `decay` group, the learning rate
    warmed up linearly for `warmup_steps`, then a cosine to lr × min_lr_ratio at `max_steps`
    (`tying.train.schedule.learning_rate`), times each group's lr_scale; gradients clipped to a
    global norm of `grad_clip` (0: not clipped).

    Attributes:
        lr: peak learning rate.
        min_lr_ratio: final learning rate of the cosine decay, as a fraction of lr.
        warmup_steps: steps of linear warm-up.
        weight_decay: AdamW's decoupled decay of the `decay` group.
        beta1: AdamW first-moment decay.
        beta2: AdamW second-moment decay.
        grad_clip: maximum global gradient norm (0 = no clipping).
    """

    lr: float
    min_lr_ratio: float = 0.1
    warmup_steps: int = 0
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"lr must be a positive number, got {self.lr}")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        for name in ("weight_decay", "grad_clip"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {getattr(self, name)}")

    @classmethod
    def of(cls, options: Any) -> OptimizerSettings:
        """The settings of a verb's options (`TrainConfig`, `FinetuneOptions`: the same keys).

        Raises:
            ConfigError: a value out of range (named).
        """
        return cls(**{key: getattr(options, key) for key in OPTIMIZER_SETTINGS})

    @property
    def betas(self) -> tuple[float, float]:
        """Adam's (β1, β2)."""
        return (self.beta1, self.beta2)

    @property
    def max_norm(self) -> float:
        """The clipping norm (inf: no clipping)."""
        return self.grad_clip if self.grad_clip > 0 else float("inf")

    def lr_at(self, step: int, max_steps: int) -> float:
        """The scheduled learning rate of optimizer step `step` (1-based) of `max_steps`."""
        return learning_rate(
            step,
            lr=self.lr,
            warmup_steps=self.warmup_steps,
            max_steps=max_steps,
            min_lr_ratio=self.min_lr_ratio,
        )


def z_lr_scale(
    spec: float | str, vocab_size: int, d_model: int, init_std: float | None, z_optimizer: str
) -> float:
    """Multiplier of Z's learning rate: a number, or "entry_size" (Z's relative step = a standard one).

    A standard N(0, init_std²) matrix under AdamW moves each entry by about lr per step, a
    relative step ‖ΔW‖_F/‖W‖_F ≈ lr/init_std. "entry_size" gives Z the same relative step:

    - "adamw" also moves each entry of Z by about lr_z, and Z's entries have root-mean-square
      exactly 1/√V (‖Z‖_F² = d over V·d entries): lr_z = lr · (1/√V)/init_std
      (0.223 × lr for V = 50,257, init_std = 0.02);
    - "riemannian_adam" (geoopt) normalises by one second moment for the whole matrix, so its
      step has Frobenius norm about lr_z, against ‖Z‖_F = √d: lr_z = lr · √d/init_std
      (800 × lr for d = 256).

    Args:
        spec: a positive number, or "entry_size".
        vocab_size: V.
        d_model: d.
        init_std: the standard deviation of a standard (untied/TT) initialisation; needed
            for "entry_size".
        z_optimizer: "adamw" or "riemannian_adam".
    """
    if not isinstance(spec, str):
        return float(spec)
    if spec != ENTRY_SIZE:
        raise ConfigError(
            f"pit.z_lr_scale must be a positive number or {ENTRY_SIZE!r}, got {spec!r}"
        )
    if init_std is None:
        raise ConfigError(
            f"pit.z_lr_scale={ENTRY_SIZE!r} needs the model's init_std (a scratch decoder); "
            "give a number instead"
        )
    if z_optimizer == "riemannian_adam":
        return math.sqrt(d_model) / init_std
    return (1.0 / math.sqrt(vocab_size)) / init_std


def param_groups(
    model: nn.Module,
    weight_decay: float,
    *,
    z_lr_scale: float = 1.0,
    l_lr_scale: float = 1.0,
) -> list[dict[str, Any]]:
    """The named parameter groups of the module docstring (empty groups left out).

    PIT's parameters are found by identity through `model.interface` (any wrapper removed
    by the caller); a model without a PIT interface has only `decay` and `no_decay`.

    Args:
        model: the unwrapped model (`.interface` is its token interface).
        weight_decay: AdamW's decoupled decay of the `decay` group.
        z_lr_scale: multiplier of the learning rate of PIT's Z.
        l_lr_scale: multiplier of the learning rate of PIT's Cholesky parameter.
    """
    for name, value in (("z_lr_scale", z_lr_scale), ("l_lr_scale", l_lr_scale)):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"{name} must be a positive finite number, got {value!r}")
    interface = getattr(model, "interface", None)
    pit_ids: dict[int, str] = {}
    if isinstance(interface, PseudoInverseTying):
        pit_ids = {id(interface.z): "pit_z", id(interface.l_param): "pit_l"}
    groups: dict[str, dict[str, Any]] = {
        "decay": {"params": [], "weight_decay": weight_decay, "lr_scale": 1.0},
        "no_decay": {"params": [], "weight_decay": 0.0, "lr_scale": 1.0},
        "pit_z": {"params": [], "weight_decay": 0.0, "lr_scale": z_lr_scale},
        "pit_l": {"params": [], "weight_decay": 0.0, "lr_scale": l_lr_scale},
    }
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if id(p) in pit_ids:
            key = pit_ids[id(p)]
        elif p.dim() >= 2:
            key = "decay"
        else:
            key = "no_decay"
        groups[key]["params"].append(p)
    return [{"name": name, **group} for name, group in groups.items() if group["params"]]


def stiefel_manifold():
    """geoopt's Stiefel manifold (Euclidean metric) with the polar retraction.

    geoopt's own `EuclideanStiefel.retr` is a thin QR; the polar retraction
    R(X, U) = (X+U)((X+U)ᵀ(X+U))^{-1/2} is also a retraction of the Stiefel manifold, the
    one the "adamw" path uses, built from GEMMs and a d×d eigendecomposition (no V×d QR).
    The vector transport stays geoopt's: projection on the tangent space at the new point.
    """
    with warnings.catch_warnings():  # geoopt's import runs torch.jit.script (deprecated)
        warnings.simplefilter("ignore", DeprecationWarning)
        from geoopt import EuclideanStiefel

    class PolarStiefel(EuclideanStiefel):
        name = "Stiefel(euclidean, polar retraction)"

        def retr(self, x: Tensor, u: Tensor) -> Tensor:
            return polar_retraction(x + u)

    return PolarStiefel()


def _riemannian_adam(group: dict[str, Any], betas: tuple[float, float]) -> torch.optim.Optimizer:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from geoopt.optim import RiemannianAdam
    except ImportError as e:  # pragma: no cover - geoopt is a dependency
        raise ConfigError(
            "pit.z_optimizer='riemannian_adam' needs geoopt: pip install geoopt"
        ) from e

    class StiefelAdam(RiemannianAdam):
        """RiemannianAdam whose plain (non-ManifoldParameter) tensors live on the Stiefel manifold."""

        _default_manifold = stiefel_manifold()

        def step(self, closure=None):
            # geoopt counts steps with a Python int; a state restored through
            # torch.distributed.checkpoint holds a tensor, whose float32 bias corrections
            # would differ from the uninterrupted run's at rounding level.
            for state in self.state.values():
                if isinstance(state.get("step"), Tensor):
                    state["step"] = int(state["step"].item())
            return super().step(closure)

    return StiefelAdam([group], lr=0.0, betas=betas)


def _geoopt_spd():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from geoopt import SymmetricPositiveDefinite

    return SymmetricPositiveDefinite()


class CholeskySPDAdam(torch.optim.Optimizer):
    """Riemannian Adam on T = L Lᵀ over the SPD manifold, for PIT's stored Cholesky parameter.

    The parameter stays `l_param` (L's strict lower triangle and ρ, L_ii = act(ρ_i)); each
    step works on T itself, in float64:

    1. G_T = ∂loss/∂T from l_param's gradient, by the chain rule through the Cholesky
       factorisation (T -> L -> l_param is a bijection onto the SPD matrices);
    2. geoopt's `RiemannianAdam` update on `geoopt.SymmetricPositiveDefinite` (affine-invariant
       metric ⟨U, W⟩_T = tr(T⁻¹ U T⁻¹ W)): Riemannian gradient T sym(G_T) T, first moment
       kept in the tangent space and transported, ONE second moment for the whole matrix
       (geoopt's manifold-wise Adam), and the retraction T + U + ½ U T⁻¹ U, which stays SPD;
    3. l_param <- (the strict lower triangle of chol(T_new), act⁻¹ of its diagonal).

    In the affine-invariant metric ‖T^{-1/2} ΔT T^{-1/2}‖_F is the size of the change of
    log T, so the learning rate is a relative step: with consistent gradients T's
    eigenvalues move by a factor of about e^{±lr} per step, and its condition number by at
    most e^{2·lr}. A Cholesky factor under AdamW instead moves every entry of L by about lr,
    which lets T's largest eigenvalue grow only slowly at the base lr and, at a larger lr,
    makes T ill-conditioned (a lower-triangular L with off-diagonal entries of 0.1–0.5
    is exponentially ill-conditioned in d).

    Args:
        group: the `pit_l` parameter group (one parameter: l_param).
        interface: the PIT interface that owns l_param (for its diagonal activation).
        betas: Adam's (β1, β2).
        eps: added to the root of the second moment.
    """

    def __init__(
        self,
        group: dict[str, Any],
        interface: PseudoInverseTying,
        betas: tuple[float, float],
        eps: float = 1e-8,
    ) -> None:
        if interface.diag_clamp is not None:
            raise ConfigError(
                "pit.t_optimizer='riemannian_adam' needs an unclamped diagonal of L "
                "(diag_clamp hides the gradient of clamped entries); use pit.t_optimizer=adamw"
            )
        if [id(p) for p in group["params"]] != [id(interface.l_param)]:
            raise ValueError("CholeskySPDAdam updates exactly the interface's l_param")
        super().__init__([group], {"lr": 0.0, "betas": betas, "eps": eps})
        self._interface = interface
        self._manifold = _geoopt_spd()

    def _cholesky(self, l_param: Tensor) -> Tensor:
        """L in float64 from the stored parameter."""
        return self._interface.cholesky_factor(l_param.detach().to(torch.float64))

    def _euclidean_gradient(self, l_param: Tensor, grad: Tensor) -> Tensor:
        """G_T (d×d, symmetric, float64) from ∂loss/∂l_param: backward through chol and act⁻¹."""
        with torch.enable_grad():
            L = self._cholesky(l_param)
            T = (L @ L.T).requires_grad_(True)
            L_of_T = torch.linalg.cholesky(T)
            diag = torch.diagonal(L_of_T)
            if self._interface.diag_activation == "exp":
                rho = diag.log()
            else:  # softplus⁻¹(y) = y + log(1 − e^{−y})
                rho = diag + torch.log(-torch.expm1(-diag))
            params = torch.tril(L_of_T, diagonal=-1) + torch.diag_embed(rho)
            (G_T,) = torch.autograd.grad(params, T, grad.to(torch.float64))
        return 0.5 * (G_T + G_T.T)

    def _store(self, l_param: Tensor, T: Tensor) -> None:
        L = torch.linalg.cholesky(0.5 * (T + T.T))
        diag = torch.diagonal(L)
        if self._interface.diag_activation == "exp":
            rho = diag.log()
        else:
            rho = diag + torch.log(-torch.expm1(-diag))
        new = torch.tril(L, diagonal=-1) + torch.diag_embed(rho)
        l_param.copy_(new.to(l_param.dtype))

    @torch.no_grad()
    def step(self, closure=None):  # type: ignore[override]
        loss = closure() if closure is not None else None
        manifold = self._manifold
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    # Stored in the parameter's dtype (torch casts loaded optimizer state to
                    # it), worked on in float64.
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
                    state["exp_avg_sq"] = torch.zeros((), dtype=p.dtype, device=p.device)
                if isinstance(
                    state["step"], Tensor
                ):  # restored through torch.distributed.checkpoint
                    state["step"] = int(state["step"].item())
                state["step"] += 1
                L = self._cholesky(p)
                T = L @ L.T
                rgrad = manifold.egrad2rgrad(T, self._euclidean_gradient(p, p.grad))
                exp_avg = state["exp_avg"].to(torch.float64)
                exp_avg_sq = state["exp_avg_sq"].to(torch.float64)
                exp_avg.mul_(beta1).add_(rgrad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).add_(manifold.inner(T, rgrad), alpha=1 - beta2)
                bias1 = 1 - beta1 ** state["step"]
                bias2 = 1 - beta2 ** state["step"]
                direction = (exp_avg / bias1) / ((exp_avg_sq / bias2).sqrt() + group["eps"])
                new_T, new_avg = manifold.retr_transp(T, -group["lr"] * direction, exp_avg)
                self._store(p, new_T)
                state["exp_avg"].copy_(new_avg)
                state["exp_avg_sq"].copy_(exp_avg_sq)
        return loss


class Optimizers:
    """The optimizers of one run, used as one: AdamW, plus a Stiefel RiemannianAdam for Z.

    Attributes:
        optimizers: the torch optimizers (what torch.distributed.checkpoint saves and loads).
    """

    def __init__(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.optimizers = list(optimizers)

    def __iter__(self) -> Iterator[torch.optim.Optimizer]:
        return iter(self.optimizers)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """Every group of every optimizer (the dicts themselves: writable)."""
        return [g for opt in self.optimizers for g in opt.param_groups]

    def lr_scales(self) -> dict[str, float]:
        """{group name: lr_scale} of every named group."""
        return {g["name"]: g.get("lr_scale", 1.0) for g in self.param_groups if "name" in g}

    def set_lr_scales(self, scales: dict[str, float]) -> None:
        """Set the lr_scale of the named groups (after loading a state saved with others)."""
        for group in self.param_groups:
            if group.get("name") in scales:
                group["lr_scale"] = scales[group["name"]]

    def set_lr(self, lr: float) -> None:
        """Set each group's learning rate to lr × its lr_scale."""
        for group in self.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)

    def step(self) -> None:
        for opt in self.optimizers:
            opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=set_to_none)

    def optimizer_of(self, param: Tensor) -> torch.optim.Optimizer:
        """The optimizer that updates `param` (ValueError if none does)."""
        for opt in self.optimizers:
            if any(p is param for g in opt.param_groups for p in g["params"]):
                return opt
        raise ValueError("no optimizer of this run updates that parameter")


def fused_on_device(groups: list[dict[str, Any]]) -> bool:
    """Whether AdamW runs fused (one kernel for every parameter): when every parameter is a
    plain CUDA tensor. The CPU keeps the for-each implementation, whose results earlier runs
    and the recorded regression values were made with; FSDP2's DTensors keep it too."""
    params = [p for g in groups for p in g["params"]]
    return bool(params) and all(
        p.device.type == "cuda" and type(p.data) is torch.Tensor for p in params
    )


def build_optimizers(
    model: nn.Module,
    *,
    lr: float,
    weight_decay: float,
    betas: tuple[float, float],
    z_optimizer: str = "adamw",
    z_lr_scale: float = 1.0,
    l_lr_scale: float = 1.0,
    t_optimizer: str = "adamw",
) -> Optimizers:
    """AdamW over the groups of `param_groups`; with "riemannian_adam", Z's group goes to geoopt.

    The retraction of the "adamw" path is not attached here (see
    `PseudoInverseTying.attach_retraction`): a run attaches it after loading a checkpoint.

    Args:
        model: the unwrapped model.
        lr: initial learning rate (the loop sets it every step).
        weight_decay: decoupled decay of the `decay` group.
        betas: Adam's (β1, β2), shared by all groups.
        z_optimizer: "adamw" or "riemannian_adam".
        z_lr_scale: multiplier of Z's learning rate.
        l_lr_scale: multiplier of the Cholesky parameter's learning rate.
        t_optimizer: "adamw" (AdamW on l_param) or "riemannian_adam" (`CholeskySPDAdam`).
    """
    if t_optimizer not in T_OPTIMIZERS:
        raise ConfigError(f"pit.t_optimizer must be one of {T_OPTIMIZERS}, got {t_optimizer!r}")
    if z_optimizer not in Z_OPTIMIZERS:
        raise ConfigError(f"pit.z_optimizer must be one of {Z_OPTIMIZERS}, got {z_optimizer!r}")
    groups = param_groups(model, weight_decay, z_lr_scale=z_lr_scale, l_lr_scale=l_lr_scale)
    stiefel = [g for g in groups if g["name"] == "pit_z" and z_optimizer == "riemannian_adam"]
    spd = [g for g in groups if g["name"] == "pit_l" and t_optimizer == "riemannian_adam"]
    euclidean = [g for g in groups if not any(g is s for s in stiefel + spd)]
    optimizers: list[torch.optim.Optimizer] = [
        torch.optim.AdamW(euclidean, lr=lr, betas=betas, fused=fused_on_device(euclidean))
    ]
    if stiefel:
        optimizers.append(_riemannian_adam(stiefel[0], betas))
    if spd:
        optimizers.append(CholeskySPDAdam(spd[0], model.interface, betas))
    out = Optimizers(optimizers)
    out.set_lr(lr)
    return out


def attach_retraction_for_run(model: nn.Module, optimizers: Optimizers, cfg: TrainConfig) -> None:
    """Keep a trained PIT memory on the Stiefel manifold under AdamW: attach the interface's
    polar retraction to the optimizer of Z (a Riemannian optimizer retracts Z itself; a
    frozen Z or another interface needs nothing). Call after a checkpoint is loaded: loading
    optimizer state runs a zero-lr step, which must not retract Z."""
    interface = getattr(model, "interface", None)
    z_optimizer = getattr(cfg.interface_options, "z_optimizer", "adamw")
    if getattr(interface, "trainable_z", False) and z_optimizer == "adamw":
        interface.attach_retraction(optimizers.optimizer_of(interface.z))


def optimizers_for_run(model: nn.Module, cfg: TrainConfig) -> Optimizers:
    """`build_optimizers` with a run's settings (PIT keys resolved against the model).

    `pit.z_lr_scale="entry_size"` reads V and d from the interface and init_std from the
    model's `config` (a scratch decoder); only the run's own interface section is read.
    """
    options = cfg.interface_options  # the run's interface section (PIT's names its optimisers)
    z_optimizer = getattr(options, "z_optimizer", "adamw")
    t_optimizer = getattr(options, "t_optimizer", "adamw")
    z_scale, l_scale = 1.0, 1.0
    if hasattr(options, "z_lr_scale"):
        interface = model.interface
        init_std = getattr(getattr(model, "config", None), "init_std", None)
        z_scale = z_lr_scale(
            options.z_lr_scale, interface.vocab_size, interface.d_model, init_std, z_optimizer
        )
        l_scale = options.l_lr_scale
    return build_optimizers(
        model,
        lr=cfg.lr,
        weight_decay=cfg.weight_decay,
        betas=(cfg.beta1, cfg.beta2),
        z_optimizer=z_optimizer,
        z_lr_scale=z_scale,
        l_lr_scale=l_scale,
        t_optimizer=t_optimizer,
    )
