"""The model's head for lenses: products in the compute dtype, log-sum-exp and KL in float32.

A lens reads N positions at L + 1 entries through the model's head, z = h Uᵀ + b (U = W_outᵀ,
V×d; soft-capped c·tanh(z/c) where the architecture does): (L + 1)·N products of d × V, nearly
all of the work (SmolLM2, 16,384 positions: 31 × 16,384 × 576 × 49,152 × 2 ≈ 29 TFLOP).
`LensHead` makes each (chunk, entry) one matrix product in the compute dtype (bf16 where the
hardware multiplies it natively) into a reused buffer, then one streamed log-sum-exp in float32
(float64 for float64 models; `tying.lens.kernels`: compiled, fused row kernels on large chunks,
eager row blocks of `BLOCK_BYTES` otherwise). It never forms log q:

    KL(p ‖ q) = Σ_v p_v log p_v − Σ_v p_v z_v + lse(z)
              = −H(p) − h · (p U) − p · b + lse(z)

The final distribution p, its negative entropy −H(p) and the mean row p U (n × d, one float32
product per chunk) are prepared once per chunk of positions (`Target`) and shared by every
entry, so the middle term is a d-sized dot per position, exact in float32. Soft-capped heads are
not linear in h: there Σ_v p_v z_v is summed over V in the block pass. U is materialised once
per `LensHead` (PIT: U = Z T, one product instead of three). Differences z − max below −80 are
clamped before exp (subnormal floats are ~17× slower there; the sum changes by < V·e⁻⁸⁰).

Rounding. A bf16 product rounds h and U to 8 significant bits and its output to 8 bits (±0.06
per logit near 30, ±0.25 near 120; SmolLM2's lens logits reach both): lse(z) is off by ~2e-4 of
the KL (0.005–0.02 bits/token on SmolLM2, measured). Where q carries its mass the logits are
recomputed exactly: S_q, the `exact_q` largest bf16 logits of each position (found from the
maxima of 128-column groups: the top k lie in the k groups with the largest maxima), from the
float32 rows of U (a k × d product per position), and

    log Σ_v e^(z_v−m) += log1p( Σ_{v∈S_q} (e^(z_v−m−s) − e^(ẑ_v−m−s)) ),   s = log Σ_v e^(ẑ_v−m)

with ẑ the bf16 value. Soft-capped heads correct their sum Σ p z the same way on S_p, the
`exact_p` most probable tokens of p. This keeps every entry of SmolLM2 within 1e-3 bits/token
of the float32 path (tests/lens/test_lens_precision.py).

Training (`kl_with_grad`) uses the same pass without corrections and computes the gradient in
it: ∂KL/∂z = q − p (times 1 − tanh²(z/c) under soft-capping), written over the product buffer
in the compute dtype, then ∂KL/∂h = (q − p) U, a second product; only (n, d) is kept for
backward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from tying.devices import resolve_precision
from tying.lens.kernels import EXP_FLOOR, GROUP, finish_, kernels
from tying.loader import LoadedModel

#: Bytes of one float32 row block of the eager passes (~170 rows at V = 49k). Cache-sized
#: blocks (4 MiB) are no faster on an idle CPU and 2× slower on a busy one: every elementwise
#: op is a thread barrier, and 12 ops per block add up.
BLOCK_BYTES = 32 << 20
#: Default sizes of the exact-correction sets S_q and S_p (bf16 products only).
EXACT_Q = 16
EXACT_P = 16


def work_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 for float64, else float32: the dtype of log-sum-exp and KL."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Workspace:
    """Buffers reused across calls (large CPU allocations otherwise page-fault on every use)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._flat: dict[str, Tensor] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
        """A contiguous tensor of `shape` and `dtype`, reusing storage; contents undefined."""
        numel = 1
        for s in shape:
            numel *= s
        flat = self._flat.get(name)
        if flat is None or flat.dtype != dtype or flat.numel() < numel:
            flat = torch.empty(numel, dtype=dtype, device=self.device)
            self._flat[name] = flat
        return flat[:numel].view(shape)


@dataclass
class Target:
    """The model's final distribution on n positions, prepared for all the entries.

    Attributes:
        probs: (n, V) p = softmax(z_f), work dtype (lives in the head's workspace).
        neg_entropy: (n,) −H(p) = Σ_v p_v log p_v (nats), work dtype.
        mean_row: (n, d) p U, so that Σ_v p_v z_v = h · (p U) + p · b (linear heads), or None.
        mean_bias: (n,) p · b, or None (no bias, or a soft-capped head).
        support: (n, k_p) the k_p most probable tokens of p (soft-capped bf16 heads), or None.
        support_probs: (n, k_p) their probabilities, or None.
        support_rows: (n, k_p, d) their rows of U in the work dtype, or None.
    """

    probs: Tensor
    neg_entropy: Tensor
    mean_row: Tensor | None = None
    mean_bias: Tensor | None = None
    support: Tensor | None = None
    support_probs: Tensor | None = None
    support_rows: Tensor | None = None


@dataclass
class LensHead:
    """The head of one model, prepared for streamed lens KLs (see the module docstring).

    Attributes:
        weight: (V, d) U in the compute dtype (the same tensor as `exact` when that is the work
            dtype).
        exact: (V, d) U in the work dtype (float32, or float64 for float64 models).
        bias: (V,) output bias in the work dtype, or None.
        softcap: the soft-capping c, or None.
        exact_q: size of S_q (0: no correction; only used when `corrected`).
        exact_p: size of S_p (soft-capped heads only).
    """

    weight: Tensor
    exact: Tensor
    bias: Tensor | None = None
    softcap: float | None = None
    exact_q: int = EXACT_Q
    exact_p: int = EXACT_P
    _ws: _Workspace = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.weight.shape != self.exact.shape or self.exact.dim() != 2:
            raise ValueError(
                f"weight {tuple(self.weight.shape)} and exact {tuple(self.exact.shape)} must be "
                "the same (V, d) matrix"
            )
        self._ws = _Workspace(self.exact.device)
        V = self.vocab_size
        self.exact_q = min(self.exact_q, V) if self.corrected else 0
        self.exact_p = min(self.exact_p, V) if self.corrected and not self.linear else 0

    @classmethod
    @torch.no_grad()
    def of(
        cls,
        model: LoadedModel,
        precision: str = "fp32",
        *,
        exact_q: int = EXACT_Q,
        exact_p: int = EXACT_P,
    ) -> LensHead:
        """The head of `model` with products in `precision` ("auto", "bf16" or "fp32").

        "fp32" means the work dtype: float32, or float64 for a float64 model.

        Raises:
            ValueError: an unknown precision.
        """
        precision = resolve_precision(precision, model.device)
        U = model.interface.unembedding_matrix().detach()
        work = work_dtype(U.dtype)
        exact = U.to(work).contiguous()
        compute = torch.bfloat16 if precision == "bf16" else work
        weight = exact if compute == work else exact.to(compute)
        bias = model.interface.bias
        bias = None if bias is None else bias.detach().to(work)
        return cls(weight, exact, bias, model.logit_softcap, exact_q, exact_p)

    # ------------------------------------------------------------ properties
    @property
    def vocab_size(self) -> int:
        """V."""
        return self.exact.shape[0]

    @property
    def d_model(self) -> int:
        """d."""
        return self.exact.shape[1]

    @property
    def work_dtype(self) -> torch.dtype:
        """The dtype of log-sum-exp, KL and targets."""
        return self.exact.dtype

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype of the lens products."""
        return self.weight.dtype

    @property
    def corrected(self) -> bool:
        """Whether the products run below the work dtype (and are corrected exactly on S_q)."""
        return self.weight.dtype != self.exact.dtype

    @property
    def linear(self) -> bool:
        """Whether the logits are linear in h (no soft-capping)."""
        return self.softcap is None

    def _rows_per_block(self) -> int:
        return max(1, BLOCK_BYTES // (self.vocab_size * self.exact.element_size()))

    def _finish_(self, z: Tensor, index: Tensor | None = None) -> Tensor:
        """Add the bias (at `index`) and soft-cap, in place on work-dtype logits `z`."""
        bias = self.bias if self.bias is None or index is None else self.bias[index]
        return finish_(z, bias, self.softcap)

    def _flat(self, hidden: Tensor) -> Tensor:
        if hidden.shape[-1] != self.d_model:
            raise ValueError(
                f"hidden states must have last dimension d={self.d_model}, got shape "
                f"{tuple(hidden.shape)}"
            )
        return hidden.reshape(-1, self.d_model)

    # ------------------------------------------------------------ the target
    @torch.no_grad()
    def target(self, final_hidden: Tensor) -> Target:
        """p, −H(p) and p U of the model's own logits on (..., d) final hidden states.

        Computed in the work dtype (two products per chunk, shared by every entry). The target's
        probabilities live in the head's workspace: valid until the next call of `target`.
        """
        work = self.work_dtype
        h = self._flat(final_hidden.detach()).to(work)
        n, V = h.shape[0], self.vocab_size
        probs = self._ws.get("probs", (n, V), work)
        torch.mm(h, self.exact.t(), out=probs)
        neg_entropy = torch.empty(n, dtype=work, device=h.device)
        r = self._rows_per_block()
        for b0 in range(0, n, r):
            b1 = min(b0 + r, n)
            x = self._finish_(probs[b0:b1])
            x.sub_(x.amax(dim=1, keepdim=True)).clamp_(min=EXP_FLOOR)  # x = z − m
            e = torch.exp(x, out=self._ws.get("tmp", (b1 - b0, V), work))
            s = e.sum(dim=1)
            # −H(p) = Σ p (z − m) − log Σ exp(z − m)
            neg_entropy[b0:b1] = x.mul_(e).sum(dim=1) / s - s.log()
            torch.div(e, s.unsqueeze(1), out=x)
        target = Target(probs, neg_entropy)
        if self.linear:
            target.mean_row = probs @ self.exact
            if self.bias is not None:
                target.mean_bias = probs @ self.bias
        elif self.exact_p:
            top = probs.topk(self.exact_p, dim=1)
            target.support, target.support_probs = top.indices, top.values
            target.support_rows = self.exact[top.indices]
        return target

    # ------------------------------------------------------------ the streamed pass
    def _pass(
        self, hidden: Tensor, target: Target, want_grad: bool
    ) -> tuple[Tensor, Tensor | None]:
        """KL(p ‖ q) per row (nats, work dtype) and, if `want_grad`, ∂KL/∂h (n, d)."""
        work, compute = self.work_dtype, self.compute_dtype
        n, V = hidden.shape[0], self.vocab_size
        if target.probs.shape != (n, V):
            raise ValueError(
                f"the target holds {tuple(target.probs.shape)} probabilities, the lens states "
                f"{tuple(hidden.shape)}: give both the same positions"
            )
        z = self._ws.get("z", (n, V), compute)
        torch.mm(hidden.to(compute), self.weight.t(), out=z)
        h = hidden.to(work)
        kq = 0 if want_grad else self.exact_q
        dots = None if self.linear else torch.empty(n, dtype=work, device=z.device)
        shift = torch.empty(n, dtype=work, device=z.device)
        log_sum = torch.empty(n, dtype=work, device=z.device)
        top_q = torch.empty(n, kq, dtype=torch.long, device=z.device) if kq else None
        # compiled kernels take the whole chunk in one call; eager ones go block by block
        rows = n if kernels.enabled(z.numel(), z.device) else self._rows_per_block()
        for b0 in range(0, n, rows):
            b1 = min(b0 + rows, n)
            probs = target.probs[b0:b1]
            groups, m, s, dot = kernels.stats(
                z[b0:b1], work, self.bias, self.softcap, None if dots is None else probs
            )
            shift[b0:b1], log_sum[b0:b1] = m, s.log()
            if dots is not None:
                dots[b0:b1] = dot
            if top_q is not None:
                top_q[b0:b1] = self._top_columns(z[b0:b1], groups, kq)
            if want_grad:
                z[b0:b1] = kernels.grad(z[b0:b1], work, self.bias, self.softcap, m, s, probs)
        if dots is not None:
            if target.support is not None and not want_grad:
                exact = self._exact_logits(target.support_rows, h, target.support)
                approx = self._finish_(z.gather(1, target.support).to(work), target.support)
                dots += (target.support_probs * (exact - approx)).sum(dim=1)
            # Σ p z − lse = Σ p (z − m) − log Σ exp(z − m)
            kl = target.neg_entropy - dots + log_sum
        else:
            mean = (h * target.mean_row).sum(dim=1)
            if target.mean_bias is not None:
                mean += target.mean_bias
            kl = target.neg_entropy - mean + shift + log_sum
        if top_q is not None:
            exact = self._exact_logits(self.exact[top_q], h, top_q)
            approx = self._finish_(z.gather(1, top_q).to(work), top_q)
            ref = (shift + log_sum).unsqueeze(1)
            change = (exact - ref).exp() - (approx - ref).exp()
            kl += torch.log1p(change.sum(dim=1))
        grad = torch.mm(z, self.weight).to(work) if want_grad else None
        return kl, grad

    def _top_columns(self, z: Tensor, groups: Tensor, k: int) -> Tensor:
        """Columns of the k largest finished logits per row of `z` (r, V), given their group
        maxima (r, G): the k largest values lie in the k groups with the largest maxima."""
        V = z.shape[1]
        chosen = groups.topk(min(k, groups.shape[1]), dim=1, sorted=False).indices
        offsets = torch.arange(GROUP, device=z.device)
        columns = (chosen.unsqueeze(2) * GROUP + offsets).reshape(chosen.shape[0], -1)
        inside = columns.clamp(max=V - 1)  # the last group may be short
        values = self._finish_(z.gather(1, inside).to(self.work_dtype), inside)
        values.masked_fill_(columns >= V, -torch.inf)
        best = values.topk(k, dim=1, sorted=False).indices
        return columns.gather(1, best)

    def _exact_logits(self, rows: Tensor, hidden: Tensor, index: Tensor) -> Tensor:
        """Finished logits of `rows` (n, k, d) against `hidden` (n, d): (n, k), work dtype."""
        return self._finish_(torch.bmm(rows, hidden.unsqueeze(2)).squeeze(2), index)

    @torch.no_grad()
    def kl(self, hidden: Tensor, target: Target) -> Tensor:
        """KL(final ‖ lens) per position in nats: (..., d) normed lens states -> (n,) work dtype."""
        return self._pass(self._flat(hidden.detach()), target, want_grad=False)[0]

    def kl_with_grad(self, hidden: Tensor, target: Target) -> Tensor:
        """`kl` differentiable with respect to `hidden` (no exact corrections): (n, d) -> (n,)."""
        return _KLFunction.apply(self._flat(hidden), self, target)


class _KLFunction(torch.autograd.Function):
    """KL rows with the gradient computed in the forward pass (only (n, d) is saved)."""

    @staticmethod
    def forward(ctx, hidden: Tensor, head: LensHead, target: Target) -> Tensor:  # type: ignore[override]
        with torch.no_grad():
            kl, grad = head._pass(hidden.detach(), target, want_grad=True)
        ctx.save_for_backward(grad)
        ctx.dtype = hidden.dtype
        return kl

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        (grad,) = ctx.saved_tensors
        return (grad * grad_out.unsqueeze(1).to(grad.dtype)).to(ctx.dtype), None, None
