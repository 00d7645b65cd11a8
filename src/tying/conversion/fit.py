"""Fit a PIT conversion to its teacher on calibration text (`t_init="fit"`).

With the trunk frozen, `fit_pit` minimises the mean over tokens of KL(teacher ‖ converted)
over a few degrees of freedom of the converted model (`FitOptions.params`), each starting
from the closed form the conversion built:

- "t": T = T0^{1/2} exp(X) T0^{1/2}, X symmetric (d(d+1)/2 values), written back as its
  Cholesky factor L (so W_out·E = I_d holds exactly for every value);
- "gain": the final-norm gain g = g0 ⊙ exp(γ) (a LayerNorm bias scales with it);
- "bias": the input bias b = b0 + ρ·δ (centred PIT only), ρ the RMS entry of E;
- "z": Z itself, projected back to orthonormal (and centred) columns after each step.

The steps: `_FitVariables` (the start values and the state they map to), `_KLObjective`
(the teacher's logits from the captured hidden states, the KL chunk by chunk),
`_train_steps` (Adam over fresh windows) and the check on held-out windows that keeps the
start when the fit did not lower the KL there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from tying.conversion.capture import Batch, TeacherCapture
from tying.conversion.model import ModelParts, parts_of, softcapped
from tying.errors import InvalidInputError
from tying.interface.kl import linear_kl_divergence
from tying.interface.linalg import polar_retraction
from tying.interface.options import FIT_PARAMETERS as FIT_PARAMETERS  # re-exported
from tying.interface.options import FitOptions
from tying.interface.pit import PseudoInverseTying, activation_inverse

log = logging.getLogger(__name__)


@dataclass
class FitReport:
    """What `fit_pit` did.

    Attributes:
        params: the fitted degrees of freedom.
        steps: optimizer steps taken.
        tokens: calibration tokens trained on.
        kl_train: mean KL of the first and of the last 10% of steps (nats/token).
        kl_check_before, kl_check_after: KL on the held-out check windows before and after
            (None without check windows).
        kept: whether the fitted values were kept (False: the start was better on the check).
        elapsed_s: wall time.
    """

    params: tuple[str, ...]
    steps: int
    tokens: int
    kl_train: tuple[float, float]
    kl_check_before: float | None
    kl_check_after: float | None
    kept: bool
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "params": list(self.params),
            "steps": self.steps,
            "tokens": self.tokens,
            "kl_train": list(self.kl_train),
            "kl_check_before": self.kl_check_before,
            "kl_check_after": self.kl_check_after,
            "kept": self.kept,
            "elapsed_s": round(self.elapsed_s, 2),
        }


class _HeadFactors(nn.Module):
    """ids -> (x, W, b) of the converted model's head; a module so functional_call can swap state."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        parts = parts_of(self.model)
        return parts.interface().head_factors(parts.trunk(input_ids))


def _spd_sqrt(T: Tensor) -> Tensor:
    """T^{1/2} of a symmetric positive definite matrix (eigendecomposition, T's dtype)."""
    evals, evecs = torch.linalg.eigh(0.5 * (T + T.T))
    evals = evals.clamp_min(torch.finfo(T.dtype).tiny)
    return (evecs * evals.sqrt()) @ evecs.T


def _l_param_of(L: Tensor, activation: str) -> Tensor:
    """The raw `l_param` (strict lower part of L, diagonal act^{-1}(L_ii)) of a Cholesky factor."""
    return torch.tril(L, diagonal=-1) + torch.diag_embed(
        activation_inverse(torch.diagonal(L), activation)
    )


class _FitVariables:
    """The fitted variables (X, γ, δ, Z), their start values, and the model state they give.

    `state()` maps the variables to {"model.<name>": tensor} for the converted model's
    parameters they replace (`torch.func.functional_call` of `_HeadFactors`); all zeros (and
    Z as it was) give the start exactly.

    Args:
        parts: the converted model's parts.
        pit: its PIT interface.
        names: the fitted degrees of freedom (`FitOptions.parameter_names`).
    """

    def __init__(self, parts: ModelParts, pit: PseudoInverseTying, names: tuple[str, ...]):
        self.names, self.pit, self.inner = names, pit, parts.inner
        self.norm, self.offset = parts.final_norm, parts.norm_gain_offset
        self.norm_weight = getattr(self.norm, "weight", None)
        self.norm_bias = getattr(self.norm, "bias", None)
        self.work = torch.float64 if pit.z.dtype == torch.float64 else torch.float32
        L0 = pit.cholesky_factor().detach().to(torch.float64)
        self.R0w = _spd_sqrt(L0 @ L0.T).to(self.work)
        d = pit.d_model
        self.X = torch.zeros(d, d, dtype=self.work, requires_grad="t" in names)
        self.gamma = torch.zeros(d, dtype=self.work, requires_grad="gain" in names)
        self.delta = torch.zeros(d, dtype=self.work, requires_grad="bias" in names)
        self.start = {k: v.detach().clone() for k, v in pit.state_dict().items()}
        weight, bias = self.norm_weight, self.norm_bias
        self.weight0 = weight.detach().clone() if isinstance(weight, Tensor) else None
        self.nbias0 = bias.detach().clone() if isinstance(bias, Tensor) else None
        self.gain0 = self.weight0.to(self.work) + self.offset if self.weight0 is not None else None
        self.rho = float(pit.embedding_matrix().detach().to(torch.float64).pow(2).mean().sqrt())
        self.z_param = nn.Parameter(pit.z.detach().clone()) if "z" in names else None
        modules = dict((m, n) for n, m in self.inner.named_modules())
        self.prefix = "model." + modules[pit] + "."
        self.norm_prefix = "model." + modules[self.norm] + "."

    def state(self) -> dict[str, Tensor]:
        """{"model.<name>": value} of the parameters the variables replace."""
        out: dict[str, Tensor] = {}
        pit, names, work = self.pit, self.names, self.work
        if "t" in names:
            sym = 0.5 * (self.X + self.X.T)
            T = self.R0w @ torch.linalg.matrix_exp(sym) @ self.R0w
            L = torch.linalg.cholesky(0.5 * (T + T.T))
            out[self.prefix + "l_param"] = _l_param_of(L, pit.diag_activation).to(pit.l_param.dtype)
        if "gain" in names:
            scale = torch.exp(self.gamma)
            out[self.norm_prefix + "weight"] = (self.gain0 * scale - self.offset).to(
                self.weight0.dtype
            )
            if self.nbias0 is not None:
                out[self.norm_prefix + "bias"] = (self.nbias0.to(work) * scale).to(
                    self.nbias0.dtype
                )
        if "bias" in names:
            start = self.start["input_bias"].to(work)
            out[self.prefix + "input_bias"] = (start + self.rho * self.delta).to(
                pit.input_bias.dtype
            )
        if self.z_param is not None:
            out[self.prefix + "z"] = self.z_param
        return out

    def optimizer(self, options: FitOptions) -> torch.optim.Adam:
        """Adam with one group per step size: X (lr), γ and δ (gain_lr), Z (z_lr)."""
        groups = []
        if "t" in self.names:
            groups.append({"params": [self.X], "lr": options.lr})
        if "gain" in self.names or "bias" in self.names:
            chosen = [v for k, v in (("gain", self.gamma), ("bias", self.delta)) if k in self.names]
            groups.append({"params": chosen, "lr": options.gain_lr})
        if self.z_param is not None:
            groups.append({"params": [self.z_param], "lr": options.z_lr})
        return torch.optim.Adam(groups)

    @torch.no_grad()
    def retract_z_(self) -> None:
        """Z back to orthonormal columns (centred first when the PIT has an input bias)."""
        if self.z_param is None:
            return
        zw = self.z_param.to(self.work)
        if self.pit.input_bias is not None:
            zw = zw - zw.mean(dim=0, keepdim=True)
        self.z_param.copy_(polar_retraction(zw).to(self.z_param.dtype))

    @torch.no_grad()
    def write_(self) -> None:
        """Copy the fitted values into the model's tensors."""
        fitted = {k: v.detach().clone() for k, v in self.state().items()}
        tensors = dict(self.inner.named_parameters()) | dict(self.inner.named_buffers())
        for key, value in fitted.items():
            tensors[key.removeprefix("model.")].copy_(value)

    @torch.no_grad()
    def restore_(self) -> None:
        """Put the start values back (interface state, final-norm gain and bias)."""
        self.pit.load_state_dict(self.start)
        if self.weight0 is not None:
            self.norm_weight.copy_(self.weight0)
        if self.nbias0 is not None:
            self.norm_bias.copy_(self.nbias0)


@dataclass
class _KLObjective:
    """KL(teacher ‖ converted) on a window, the converted model evaluated at `variables.state()`.

    The teacher's logits t = softcap(h_T W_Tᵀ + b_T) come from the captured hidden states;
    without soft-capping the KL is formed chunk by chunk (`linear_kl_divergence`), never N×V.
    """

    variables: _FitVariables
    capture: TeacherCapture
    autocast: bool

    def __post_init__(self) -> None:
        self.wrapper = _HeadFactors(self.variables.inner)
        self.device = self.variables.pit.z.device

    def __call__(self, batch: Batch, t_hidden: Tensor, grad: bool) -> Tensor:
        """Mean KL over the window's tokens (nats/token), a scalar (with a graph when `grad`)."""
        capture = self.capture
        context = torch.enable_grad() if grad else torch.no_grad()
        with context:
            with _autocast(self.autocast, self.device):
                x, W, b = torch.func.functional_call(
                    self.wrapper, self.variables.state(), (batch[0].to(self.device),)
                )
            if capture.softcap is None:
                return linear_kl_divergence(
                    x.float(),
                    W.float(),
                    t_hidden,
                    capture.weight.float(),
                    None if b is None else b.float(),
                    None if capture.bias is None else capture.bias.float(),
                )
            s = softcapped(torch.nn.functional.linear(x.float(), W.float(), b), capture.softcap)
            t = torch.nn.functional.linear(t_hidden.float(), capture.weight.float(), capture.bias)
            t = softcapped(t, capture.softcap)
            return torch.nn.functional.kl_div(
                torch.log_softmax(s.flatten(0, -2), -1),
                torch.log_softmax(t.flatten(0, -2), -1),
                log_target=True,
                reduction="batchmean",
            )

    def mean_over(self, capture: TeacherCapture | None) -> float | None:
        """The token-weighted mean KL over the captured windows (None without windows)."""
        if capture is None:
            return None
        total = 0.0
        for batch, th in zip(capture.batches, capture.hidden, strict=True):
            total += float(self(batch, th, grad=False)) * batch[1].numel()
        return total / capture.tokens


def _check_fit(
    parts: ModelParts, options: FitOptions, capture: TeacherCapture
) -> tuple[PseudoInverseTying, TeacherCapture | None, TeacherCapture]:
    """(the PIT, the check windows or None, the training windows), or ValueError."""
    pit = parts.interface()
    if not isinstance(pit, PseudoInverseTying):
        raise InvalidInputError(
            "fit_pit fits PIT conversions: convert the model with tie='pit' first"
        )
    names = options.parameter_names()
    if "gain" in names and not isinstance(getattr(parts.final_norm, "weight", None), Tensor):
        raise InvalidInputError(
            "this model's final norm has no gain to fit: drop 'gain' from params"
        )
    if "bias" in names and pit.input_bias is None:
        raise InvalidInputError(
            "'bias' fits the input bias of a centred PIT: convert with centre=True"
        )
    check, train = capture.split(options.check_tokens) if options.check_tokens else (None, capture)
    if train.tokens < options.tokens:
        raise InvalidInputError(
            f"the fit budget is {options.tokens} tokens but the calibration windows hold "
            f"{train.tokens} after {options.check_tokens} check tokens: give more calibration "
            "text or lower the budget"
        )
    return pit, check, train


@contextmanager
def _frozen(model: nn.Module) -> Iterator[None]:
    """`model` in eval mode with every parameter frozen for the block, then as it was."""
    was_training = model.training
    model.eval()
    requires = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, r in zip(model.parameters(), requires, strict=True):
            p.requires_grad_(r)
        model.train(was_training)


def _train_steps(
    objective: _KLObjective,
    train: TeacherCapture,
    optimizer: torch.optim.Optimizer,
    options: FitOptions,
    progress: bool,
) -> tuple[int, int, list[float]]:
    """Adam steps over `batch_windows` fresh windows each until `options.tokens` targets.

    Returns:
        (steps, target tokens used, the training KL of each step).
    """
    windows = list(zip(train.batches, train.hidden, strict=True))
    steps, used, losses = 0, 0, []
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=options.tokens, desc="fit PIT to teacher", unit="tok")
    try:
        i = 0
        while used < options.tokens and i < len(windows):
            group = windows[i : i + options.batch_windows]
            i += options.batch_windows
            inputs = torch.cat([b[0][0] for b in group])
            targets = torch.cat([b[0][1] for b in group])
            t_hidden = torch.cat([b[1] for b in group])
            loss = objective((inputs, targets), t_hidden, grad=True)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            objective.variables.retract_z_()
            steps += 1
            used += int(targets.numel())
            losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(int(targets.numel()))
                bar.set_postfix(kl=f"{losses[-1]:.3f}")
    finally:
        if bar is not None:
            bar.close()
    return steps, used, losses


def fit_pit(
    model: nn.Module,
    capture: TeacherCapture,
    options: FitOptions | None = None,
    *,
    progress: bool = False,
) -> FitReport:
    """Fit a PIT conversion to its teacher: minimise KL(teacher ‖ converted), trunk frozen.

    The degrees of freedom (`FitOptions.params`, see the module docstring) start from the
    model's current values. Each step reads `batch_windows` fresh calibration windows (in
    order), computes the teacher's logits from the captured hidden states chunk by chunk, and
    takes an Adam step. The first `check_tokens` tokens of the capture are held out: the KL on
    them is measured before and after, and the start is restored if the fit did not lower it.

    Args:
        model: a PIT-converted model (transformers, also inside an HFCausalLM, or our decoder).
        capture: `capture_teacher` on the calibration windows (before conversion).
        options: `FitOptions`.
        progress: show a tqdm progress bar.

    Returns:
        A `FitReport`; the model holds the fitted (or the start) values.

    Raises:
        ValueError: not a PIT model, "bias" without an input bias, "gain" with a
            parameter-free final norm, or fewer calibration tokens than the budget.
    """
    options = options or FitOptions()
    t_start = time.perf_counter()
    parts = parts_of(model)
    pit, check, train = _check_fit(parts, options, capture)
    names = options.parameter_names()
    variables = _FitVariables(parts, pit, names)
    autocast = options.uses_autocast(pit.z.device)
    log.info("PIT fit: trunk in %s", "bf16 autocast" if autocast else "fp32")
    objective = _KLObjective(variables, capture, autocast)
    with _frozen(parts.inner):
        optimizer = variables.optimizer(options)
        kl_before = objective.mean_over(check)
        steps, used, losses = _train_steps(objective, train, optimizer, options, progress)
        variables.write_()
        kl_after = objective.mean_over(check)
        kept = kl_before is None or kl_after is None or kl_after < kl_before
        if not kept:
            variables.restore_()
    tenth = max(1, len(losses) // 10)
    return FitReport(
        params=names,
        steps=steps,
        tokens=used,
        kl_train=(
            sum(losses[:tenth]) / tenth if losses else float("nan"),
            sum(losses[-tenth:]) / tenth if losses else float("nan"),
        ),
        kl_check_before=kl_before,
        kl_check_after=kl_after,
        kept=kept,
        elapsed_s=time.perf_counter() - t_start,
    )


def _autocast(enabled: bool, device: torch.device) -> Any:
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else nullcontext()
