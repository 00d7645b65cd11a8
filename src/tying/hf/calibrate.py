"""How much a conversion moves a pretrained model, measured and reduced on calibration text.

A conversion replaces the teacher's embedding and head; the rest of the model
is untouched. On token windows (inputs, targets) of calibration text:

- `capture_teacher(model, batches)` runs the unconverted model once and keeps what
  its head reads: the final hidden states (B, T, d) per window and the head
  (weight, bias, soft-capping). No V-sized logits are stored.
- `step0_kl(model, captured)` is the damage: the mean over tokens of
  KL(teacher ‖ converted) in nats/token, with the converted model's loss and the
  teacher's on the same targets.
- `search_input_scale` picks the relative input scale r of a PIT conversion by
  measurement (a 1-D search in log r, a few forward passes).
- `fit_pit` minimises the KL over T (through its Cholesky factor) and the final-norm
  gain, with the trunk frozen (see `FitOptions`).

Logits are formed chunk by chunk (`tying.interface.kl`); nothing holds N×V.

Every function takes a transformers causal LM (through its `tying.hf.adapters` adapter, also
inside an HFCausalLM or peft wrapper) or any `tying.interface.InterfaceModel` that is not
one, such as our `tying.decoder.Decoder` (its `final_hidden`, `final_norm` and
`interface`), so the step-0 table can be measured on both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from tying.hf.adapters import get_adapter
from tying.hf.convert import _unwrap, interface_of
from tying.interface.base import TokenInterface
from tying.interface.kl import linear_kl_divergence
from tying.interface.pit import PseudoInverseTying

Batch = tuple[Tensor, Tensor]


@dataclass
class TeacherCapture:
    """What a teacher predicts on calibration windows, without its N×V logits.

    Attributes:
        batches: the (inputs, targets) windows, (B, T) each, targets shifted by one.
        hidden: the teacher's final hidden states per window, (B, T, d) float32.
        weight: the teacher's head weight (V, d) (`nn.Linear` layout), detached.
        bias: the head bias (V,) or None.
        softcap: the logit soft-capping c (logits <- c·tanh(logits/c)) or None.
    """

    batches: list[Batch]
    hidden: list[Tensor]
    weight: Tensor
    bias: Tensor | None
    softcap: float | None

    @property
    def tokens(self) -> int:
        """Number of target tokens."""
        return sum(int(t.numel()) for _, t in self.batches)

    def subset(self, max_tokens: int) -> TeacherCapture:
        """The first windows holding at most `max_tokens` targets (at least one window)."""
        n, count = 0, 0
        for _, t in self.batches:
            if n and count + t.numel() > max_tokens:
                break
            n, count = n + 1, count + int(t.numel())
        return TeacherCapture(
            self.batches[:n], self.hidden[:n], self.weight, self.bias, self.softcap
        )

    def split(self, first_tokens: int) -> tuple[TeacherCapture, TeacherCapture]:
        """(the first windows up to `first_tokens` targets, the rest)."""
        head = self.subset(first_tokens)
        n = len(head.batches)
        rest = TeacherCapture(
            self.batches[n:], self.hidden[n:], self.weight, self.bias, self.softcap
        )
        return head, rest


@dataclass
class _Parts:
    """What calibration reads and changes of a model, whatever its kind.

    Attributes:
        inner: the model whose named parameters are changed (unwrapped).
        trunk: ids (B, T) -> hidden states after the final norm (B, T, d).
        head: hidden (..., d) -> logits (..., V) as the model computes them now.
        head_weight: the head's weight (V, d) (`nn.Linear` layout), detached.
        head_bias: its bias (V,) or None.
        softcap: logit soft-capping c or None.
        final_norm: the final norm module.
        norm_gain_offset: the constant the stored norm weight is offset by (Gemma: 1).
    """

    inner: nn.Module
    trunk: Callable[[Tensor], Tensor]
    head: Callable[[Tensor], Tensor]
    head_weight: Tensor
    head_bias: Tensor | None
    softcap: float | None
    final_norm: nn.Module
    norm_gain_offset: float

    def interface(self) -> Any:
        """The model's token interface (ValueError for an unconverted transformers model)."""
        own = getattr(self.inner, "interface", None)
        return own if isinstance(own, TokenInterface) else interface_of(self.inner)

    def scale_final_norm_(self, factor: float) -> None:
        """Multiply the final norm's output by `factor`: its gain (and a LayerNorm bias)."""
        weight = getattr(self.final_norm, "weight", None)
        if not isinstance(weight, Tensor):
            raise ValueError(
                f"the final norm {type(self.final_norm).__name__} has no gain to rescale; "
                "convert without scale correction (input_scale='none')"
            )
        with torch.no_grad():
            gain = (weight.to(torch.float64) + self.norm_gain_offset) * factor
            weight.copy_((gain - self.norm_gain_offset).to(weight.dtype))
            bias = getattr(self.final_norm, "bias", None)
            if isinstance(bias, Tensor):
                bias.mul_(factor)


def _parts(model: nn.Module) -> _Parts:
    """The `_Parts` of a transformers causal LM (by its adapter) or of an InterfaceModel."""
    inner = _unwrap(model)
    own = getattr(inner, "interface", None)
    if isinstance(own, TokenInterface) and callable(getattr(inner, "final_hidden", None)):
        head_weight = own.unembedding_matrix().detach()
        bias = own.bias.detach() if own.bias is not None else None
        return _Parts(
            inner, inner.final_hidden, own.logits, head_weight, bias, None, inner.final_norm, 0.0
        )
    adapter = get_adapter(inner)
    base = adapter.base_model(inner)
    head = adapter.output_head(inner)
    cap = adapter.logit_softcap(inner)

    def trunk(ids: Tensor) -> Tensor:
        return base(input_ids=ids, use_cache=False).last_hidden_state

    bias = getattr(head, "bias", None)
    return _Parts(
        inner,
        trunk,
        lambda h: _softcapped(head(h), cap),
        head.weight.detach(),
        bias.detach() if isinstance(bias, Tensor) else None,
        cap,
        adapter.final_norm(inner),
        adapter.norm_gain_offset,
    )


@torch.no_grad()
def capture_teacher(model: nn.Module, batches: Sequence[Batch]) -> TeacherCapture:
    """Run an (unconverted) transformers causal LM on `batches` and keep what its head reads.

    Args:
        model: a supported causal LM (converted or not: its head as it is now is the teacher).
        batches: (inputs, targets) windows of shape (B, T).

    Raises:
        ValueError: no batches.
    """
    batches = list(batches)
    if not batches:
        raise ValueError("no calibration windows: give at least one (inputs, targets) batch")
    parts = _parts(model)
    inner = parts.inner
    was_training = inner.training
    inner.eval()
    try:
        hidden = [parts.trunk(x).float() for x, _ in batches]
    finally:
        inner.train(was_training)
    return TeacherCapture(
        batches=batches,
        hidden=hidden,
        weight=parts.head_weight,
        bias=parts.head_bias,
        softcap=parts.softcap,
    )


def _softcapped(logits: Tensor, cap: float | None) -> Tensor:
    return logits if cap is None else cap * torch.tanh(logits / cap)


def _kl_and_ce_sums(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    t_hidden: Tensor,
    capture: TeacherCapture,
    targets: Tensor,
    chunk: int = 256,
) -> tuple[float, float, float]:
    """Sums over tokens of KL(teacher ‖ model), the model's CE and the teacher's CE (no grad)."""
    kl = ce = t_ce = 0.0
    h2 = hidden.reshape(-1, hidden.shape[-1])
    t2 = t_hidden.reshape(-1, t_hidden.shape[-1])
    y = targets.reshape(-1)
    for i in range(0, h2.shape[0], chunk):
        s = head(h2[i : i + chunk]).float()
        t = t2[i : i + chunk].float() @ capture.weight.float().T
        if capture.bias is not None:
            t = t + capture.bias.float()
        t = _softcapped(t, capture.softcap)
        log_q = torch.log_softmax(s, dim=-1)
        log_p = torch.log_softmax(t, dim=-1)
        kl += float((log_p.exp() * (log_p - log_q)).sum())
        yi = y[i : i + chunk]
        ce += float(torch.nn.functional.nll_loss(log_q, yi, reduction="sum"))
        t_ce += float(torch.nn.functional.nll_loss(log_p, yi, reduction="sum"))
    return kl, ce, t_ce


@torch.no_grad()
def step0_kl(model: nn.Module, capture: TeacherCapture) -> dict[str, float]:
    """The damage of a conversion: KL(teacher ‖ converted) and both losses on the captured windows.

    Args:
        model: the converted transformers model (or an HFCausalLM / peft wrapper around it).
        capture: `capture_teacher` of the same model before conversion.

    Returns:
        {"kl", "loss", "teacher_loss"} in nats/token (means over tokens) and "tokens".
    """
    parts = _parts(model)
    inner = parts.inner
    was_training = inner.training
    inner.eval()
    kl = ce = t_ce = 0.0
    try:
        for (x, y), th in zip(capture.batches, capture.hidden, strict=True):
            h = parts.trunk(x)
            k, c, tc = _kl_and_ce_sums(h, parts.head, th, capture, y)
            kl, ce, t_ce = kl + k, ce + c, t_ce + tc
    finally:
        inner.train(was_training)
    n = capture.tokens
    return {"kl": kl / n, "loss": ce / n, "teacher_loss": t_ce / n, "tokens": n}


def scale_final_norm_(model: nn.Module, factor: float) -> None:
    """Multiply the final norm's output of a model by `factor`, in place (gain, LayerNorm bias).

    Raises:
        ValueError: the final norm has no gain.
    """
    _parts(model).scale_final_norm_(factor)


def _scale_pit_input_(model: nn.Module, factor: float) -> None:
    """E <- factor·E (input bias too), W_out <- W_out/factor, final-norm gain <- factor·gain."""
    parts = _parts(model)
    pit = parts.interface()
    if not isinstance(pit, PseudoInverseTying):
        raise ValueError("the input scale applies to PIT conversions only")
    pit.scale_input_(factor)
    parts.scale_final_norm_(factor)


@dataclass
class ScaleSearch:
    """Result of `search_input_scale`.

    Attributes:
        best: the factor applied (relative to the scale the model had on entry).
        kl: KL (nats/token) at each factor tried, {factor: kl}.
    """

    best: float
    kl: dict[float, float]


def search_input_scale(
    model: nn.Module,
    capture: TeacherCapture,
    factors: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0),
    refine: int = 2,
) -> ScaleSearch:
    """Pick the factor f multiplying a converted PIT model's input (head kept) by measured KL.

    Tries `factors` (relative to the current scale), then `refine` rounds that try
    the geometric midpoints on each side of the best one so far; leaves the model at
    the best factor. Each try is one forward pass over the captured windows.

    Args:
        model: a PIT-converted transformers model whose final norm has a gain.
        capture: the teacher on calibration windows (`capture_teacher`).
        factors: the first grid, > 0.
        refine: rounds of bisection in log f.
    """
    current = 1.0
    tried: dict[float, float] = {}

    def measure(f: float) -> float:
        nonlocal current
        _scale_pit_input_(model, f / current)
        current = f
        if f not in tried:
            tried[f] = step0_kl(model, capture)["kl"]
        return tried[f]

    for f in sorted(factors):
        measure(f)
    step = math.sqrt(sorted(factors)[1] / sorted(factors)[0]) if len(factors) > 1 else 2.0
    for _ in range(refine):
        best = min(tried, key=tried.get)
        for f in (best / step, best * step):
            measure(f)
        step = math.sqrt(step)
    best = min(tried, key=tried.get)
    _scale_pit_input_(model, best / current)
    return ScaleSearch(best=best, kl=dict(sorted(tried.items())))


def least_squares_gain(T: Tensor, H: Tensor, gain: Tensor, second_moment: Tensor) -> Tensor:
    """The final-norm gain g' that best reproduces a tied teacher's head for a given T.

    With Z = U (the polar factor of the centred teacher E0c = U H), the teacher's
    logits of a normalized final state n (1×d, before the gain g) are
    (n ⊙ g) H U^T up to a constant per position, and the converted model's are
    (n ⊙ g') T U^T. Their mean squared difference over states with second moment
    Σ = E[n^T n] (U has orthonormal columns, so it drops out),

        f(g') = E ||(n ⊙ g') T − (n ⊙ g) H||² = g'^T (Σ ∘ T T^T) g' − 2 g'^T (Σ ∘ T H) g + const,

    (∘ the elementwise product; (n ⊙ a) M (n ⊙ b)^T averages to a^T (Σ ∘ M) b) is a
    quadratic in g' with the minimiser

        g' = (Σ ∘ T T^T)^{-1} (Σ ∘ T H) g.

    For T = H / c it returns c·g (the scale correction keeps the head exactly).

    Args:
        T: (d, d) symmetric positive definite, the converted model's T.
        H: (d, d) the polar factor H of the centred teacher (its head is H U^T).
        gain: (d,) the teacher's final-norm gain g.
        second_moment: (d, d) Σ = E[n^T n] of the teacher's normalized final states.

    Returns:
        (d,) the gain g', float64.
    """
    T, H, g, S = (t.to(torch.float64) for t in (T, H, gain, second_moment))
    return torch.linalg.solve(S * (T @ T.T), (S * (T @ H)) @ g)


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
        autocast: run the trunk under bf16 autocast (the head and KL stay float32).
    """

    tokens: int = 65536
    check_tokens: int = 1024
    batch_windows: int = 2
    params: str = "t,gain,bias"
    lr: float = 5e-4
    gain_lr: float = 5e-3
    z_lr: float = 1e-4
    autocast: bool = True

    def __post_init__(self) -> None:
        names = self.parameter_names()
        bad = sorted(set(names) - set(FIT_PARAMETERS))
        if bad or not names:
            raise ValueError(
                f"fit params must be a comma-separated subset of {FIT_PARAMETERS}, got {self.params!r}"
            )
        for name in ("tokens", "batch_windows"):
            if getattr(self, name) < 1:
                raise ValueError(f"fit {name} must be >= 1, got {getattr(self, name)}")
        if self.check_tokens < 0:
            raise ValueError(f"fit check_tokens must be >= 0, got {self.check_tokens}")

    def parameter_names(self) -> tuple[str, ...]:
        """The fitted degrees of freedom, in FIT_PARAMETERS order."""
        chosen = {p.strip() for p in self.params.split(",") if p.strip()}
        return tuple(p for p in FIT_PARAMETERS if p in chosen) + tuple(
            sorted(chosen - set(FIT_PARAMETERS))
        )


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
        parts = _parts(self.model)
        return parts.interface().head_factors(parts.trunk(input_ids))


def _spd_sqrt(T: Tensor) -> Tensor:
    """T^{1/2} of a symmetric positive definite matrix (eigendecomposition, T's dtype)."""
    evals, evecs = torch.linalg.eigh(0.5 * (T + T.T))
    evals = evals.clamp_min(torch.finfo(T.dtype).tiny)
    return (evecs * evals.sqrt()) @ evecs.T


def _l_param_of(L: Tensor, activation: str) -> Tensor:
    """The raw `l_param` (strict lower part of L, diagonal act^{-1}(L_ii)) of a Cholesky factor."""
    diag = torch.diagonal(L)
    rho = diag.log() if activation == "exp" else diag + torch.log(-torch.expm1(-diag))
    return torch.tril(L, diagonal=-1) + torch.diag_embed(rho)


def fit_pit(
    model: nn.Module,
    capture: TeacherCapture,
    options: FitOptions | None = None,
    *,
    progress: bool = False,
) -> FitReport:
    """Fit a PIT conversion to its teacher: minimise KL(teacher ‖ converted), trunk frozen.

    The degrees of freedom (`FitOptions.params`) start from the model's current values:

    - "t": T = T0^{1/2} exp(X) T0^{1/2}, X symmetric (d(d+1)/2 values), written back as
      its Cholesky factor L (so W_out·E = I_d holds exactly for every value);
    - "gain": the final-norm gain g = g0 ⊙ exp(γ) (a LayerNorm bias scales with it);
    - "bias": the input bias b = b0 + ρ·δ (centred PIT only), ρ the RMS entry of E;
    - "z": Z itself, projected back to orthonormal (and centred) columns after each step.

    Each step reads `batch_windows` fresh calibration windows (in order), computes the
    teacher's logits from the captured hidden states chunk by chunk, and takes an Adam step.
    The first `check_tokens` tokens of the capture are held out: the KL on them is measured
    before and after, and the start is restored if the fit did not lower it.

    Args:
        model: a PIT-converted transformers model (or HFCausalLM around one).
        capture: `capture_teacher` on the calibration windows (before conversion).
        options: `FitOptions`.
        progress: show a tqdm progress bar.

    Returns:
        A `FitReport`; the model holds the fitted (or the start) values.

    Raises:
        ValueError: not a PIT model, "bias" without an input bias, "gain" with a
            parameter-free final norm, or fewer calibration tokens than the budget.
    """
    import time

    options = options or FitOptions()
    t_start = time.perf_counter()
    parts = _parts(model)
    inner = parts.inner
    pit = parts.interface()
    if not isinstance(pit, PseudoInverseTying):
        raise ValueError("fit_pit fits PIT conversions: convert the model with tie='pit' first")
    names = options.parameter_names()
    norm = parts.final_norm
    offset = parts.norm_gain_offset
    norm_weight = getattr(norm, "weight", None)
    norm_bias = getattr(norm, "bias", None)
    if "gain" in names and not isinstance(norm_weight, Tensor):
        raise ValueError("this model's final norm has no gain to fit: drop 'gain' from params")
    if "bias" in names and pit.input_bias is None:
        raise ValueError("'bias' fits the input bias of a centred PIT: convert with centre=True")
    check, train = capture.split(options.check_tokens) if options.check_tokens else (None, capture)
    if train.tokens < options.tokens:
        raise ValueError(
            f"the fit budget is {options.tokens} tokens but the calibration windows hold "
            f"{train.tokens} after {options.check_tokens} check tokens: give more calibration "
            "text or lower the budget"
        )

    # ------------------------------------------------------------ start values (float64)
    work = torch.float64 if pit.z.dtype == torch.float64 else torch.float32
    L0 = pit.cholesky_factor().detach().to(torch.float64)
    R0 = _spd_sqrt(L0 @ L0.T)
    d = pit.d_model
    X = torch.zeros(d, d, dtype=work, requires_grad="t" in names)
    gamma = torch.zeros(d, dtype=work, requires_grad="gain" in names)
    delta = torch.zeros(d, dtype=work, requires_grad="bias" in names)
    start = {k: v.detach().clone() for k, v in pit.state_dict().items()}
    weight0 = norm_weight.detach().clone() if isinstance(norm_weight, Tensor) else None
    nbias0 = norm_bias.detach().clone() if isinstance(norm_bias, Tensor) else None
    gain0 = weight0.to(work) + offset if weight0 is not None else None
    rho = float(pit.embedding_matrix().detach().to(torch.float64).pow(2).mean().sqrt())
    z = pit.z
    z_param = nn.Parameter(z.detach().clone()) if "z" in names else None
    R0w = R0.to(work)

    prefix = "model." + next(n for n, m in inner.named_modules() if m is pit) + "."
    norm_prefix = "model." + next(n for n, m in inner.named_modules() if m is norm) + "."

    def state() -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        if "t" in names:
            sym = 0.5 * (X + X.T)
            T = R0w @ torch.linalg.matrix_exp(sym) @ R0w
            L = torch.linalg.cholesky(0.5 * (T + T.T))
            out[prefix + "l_param"] = _l_param_of(L, pit.diag_activation).to(pit.l_param.dtype)
        if "gain" in names:
            scale = torch.exp(gamma)
            out[norm_prefix + "weight"] = (gain0 * scale - offset).to(weight0.dtype)
            if nbias0 is not None:
                out[norm_prefix + "bias"] = (nbias0.to(work) * scale).to(nbias0.dtype)
        if "bias" in names:
            out[prefix + "input_bias"] = (start["input_bias"].to(work) + rho * delta).to(
                pit.input_bias.dtype
            )
        if z_param is not None:
            out[prefix + "z"] = z_param
        return out

    wrapper = _HeadFactors(inner)
    device = pit.z.device

    def kl_of(batch: Batch, t_hidden: Tensor, grad: bool) -> Tensor:
        x_ids, _ = batch
        context = torch.enable_grad() if grad else torch.no_grad()
        with context:
            with _autocast(options.autocast, device):
                x, W, b = torch.func.functional_call(wrapper, state(), (x_ids.to(device),))
            if capture.softcap is None:
                return linear_kl_divergence(
                    x.float(),
                    W.float(),
                    t_hidden,
                    capture.weight.float(),
                    None if b is None else b.float(),
                    None if capture.bias is None else capture.bias.float(),
                )
            s = _softcapped(torch.nn.functional.linear(x.float(), W.float(), b), capture.softcap)
            t = torch.nn.functional.linear(t_hidden.float(), capture.weight.float(), capture.bias)
            t = _softcapped(t, capture.softcap)
            return torch.nn.functional.kl_div(
                torch.log_softmax(s.flatten(0, -2), -1),
                torch.log_softmax(t.flatten(0, -2), -1),
                log_target=True,
                reduction="batchmean",
            )

    def check_kl() -> float | None:
        if check is None:
            return None
        total = 0.0
        for batch, th in zip(check.batches, check.hidden, strict=True):
            total += float(kl_of(batch, th, grad=False)) * batch[1].numel()
        return total / check.tokens

    was_training = inner.training
    inner.eval()
    requires = [p.requires_grad for p in inner.parameters()]
    for p in inner.parameters():
        p.requires_grad_(False)
    groups = []
    if "t" in names:
        groups.append({"params": [X], "lr": options.lr})
    if "gain" in names or "bias" in names:
        groups.append(
            {
                "params": [v for k, v in (("gain", gamma), ("bias", delta)) if k in names],
                "lr": options.gain_lr,
            }
        )
    if z_param is not None:
        groups.append({"params": [z_param], "lr": options.z_lr})
    optimizer = torch.optim.Adam(groups)
    kl_before = check_kl()

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
            loss = kl_of((inputs, targets), t_hidden, grad=True)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if z_param is not None:
                with torch.no_grad():
                    zw = z_param.to(work)
                    if pit.input_bias is not None:
                        zw = zw - zw.mean(dim=0, keepdim=True)
                    from tying.interface.linalg import polar_retraction

                    z_param.copy_(polar_retraction(zw).to(z_param.dtype))
            steps += 1
            used += int(targets.numel())
            losses.append(float(loss.detach()))
            if bar is not None:
                bar.update(int(targets.numel()))
                bar.set_postfix(kl=f"{losses[-1]:.3f}")
        with torch.no_grad():
            fitted = {k: v.detach().clone() for k, v in state().items()}
            _assign(inner, fitted)
        kl_after = check_kl() if check is not None else None
        kept = kl_before is None or kl_after is None or kl_after < kl_before
        if not kept:
            with torch.no_grad():
                pit.load_state_dict(start)
                if weight0 is not None:
                    norm_weight.copy_(weight0)
                if nbias0 is not None:
                    norm_bias.copy_(nbias0)
    finally:
        if bar is not None:
            bar.close()
        for p, r in zip(inner.parameters(), requires, strict=True):
            p.requires_grad_(r)
        inner.train(was_training)
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


def _assign(model: nn.Module, values: dict[str, Tensor]) -> None:
    """Copy `values` (names as in `_HeadFactors`: "model.<name>") into the model's tensors."""
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    for key, value in values.items():
        tensors[key.removeprefix("model.")].copy_(value)


def _autocast(enabled: bool, device: torch.device) -> Any:
    return torch.autocast(device.type, dtype=torch.bfloat16) if enabled else nullcontext()


__all__ = [
    "FIT_PARAMETERS",
    "FitOptions",
    "FitReport",
    "ScaleSearch",
    "TeacherCapture",
    "capture_teacher",
    "fit_pit",
    "least_squares_gain",
    "scale_final_norm_",
    "search_input_scale",
    "step0_kl",
]
