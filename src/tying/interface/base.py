"""The token interface: the one seam between tokens and a network.

Every model reads tokens and writes logits only through a `TokenInterface`.
Notation, used in every docstring of this package:

- V: vocabulary size, d: hidden size (d_model), N: number of tokens.
- E (V×d): the input embedding; row v is the vector fed in for token v.
- W_out (d×V): the output projection, logits = h W_out (+ b).
- U = W_out^T (V×d): the unembedding, in `nn.Linear.weight` layout.

Each implementation defines the lookup (`embed`) and factors the head as

    logits(h) = head_input(h) @ head_weight()^T + b

with `head_weight()` of shape (V, d), so that the chunked loss never forms
W_out nor the N×V logits, and PIT never forms T Z^T.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.kl import linear_distillation_loss, linear_kl_divergence
from tying.interface.loss import linear_cross_entropy

#: Called as hook(side, name, grad) with side "input" (the lookup) or "output" (the head),
#: `name` the parameter's attribute name and `grad` the gradient reaching it along that side.
PathHook = Callable[[str, str, Tensor], None]

SIDES = ("input", "output")


class TokenInterface(nn.Module, ABC):
    """Base class of the token interface (an `nn.Module`).

    Subclasses implement `embed`, `_head_input`, `_head_weight` and
    `embedding_matrix`; everything else follows.

    Args:
        vocab_size: V.
        d_model: d.
        bias: optional output bias, shape (V,), trained with the head.
        loss_chunk_size: tokens per chunk in `loss` (default: ≤ 192 MiB of logits per chunk).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        bias: Tensor | None = None,
        loss_chunk_size: int | None = None,
    ) -> None:
        super().__init__()
        if vocab_size < 1 or d_model < 1:
            raise ValueError(
                f"vocab_size and d_model must be positive, got V={vocab_size}, d={d_model}"
            )
        self._vocab_size = int(vocab_size)
        self._d_model = int(d_model)
        self.loss_chunk_size = loss_chunk_size
        self._path_hook: PathHook | None = None
        if bias is not None:
            if bias.shape != (vocab_size,):
                raise ValueError(
                    f"output bias must have shape ({vocab_size},), got {tuple(bias.shape)}"
                )
            self.bias: nn.Parameter | None = nn.Parameter(
                bias.detach().clone(memory_format=torch.contiguous_format)
            )
        else:
            self.register_parameter("bias", None)

    # ----------------------------------------------------------------- sizes
    @property
    def vocab_size(self) -> int:
        """V, the number of rows of E and of U."""
        return self._vocab_size

    @property
    def d_model(self) -> int:
        """d, the hidden size."""
        return self._d_model

    def num_parameters(self) -> int:
        """Number of stored weights, each shared storage counted once.

        Parameters and persistent weight buffers (e.g. a frozen PIT memory Z)
        both count: they are the weights a checkpoint carries.
        """
        seen: set[int] = set()
        total = 0
        tensors = list(self.parameters()) + [
            b for _, b in self.named_buffers() if b.is_floating_point()
        ]
        for t in tensors:
            # Meta tensors have no storage (address 0): tell them apart by identity.
            key = id(t) if t.is_meta else t.untyped_storage().data_ptr()
            if key in seen:
                continue
            seen.add(key)
            total += t.numel()
        return total

    # ------------------------------------------------------- what subclasses define
    @abstractmethod
    def embed(self, input_ids: Tensor) -> Tensor:
        """Input vectors of tokens: (...) int -> (..., d)."""

    @abstractmethod
    def _head_input(self, hidden: Tensor) -> Tensor:
        """The d×d part of the head applied to hidden states: (..., d) -> (..., d)."""

    @abstractmethod
    def _head_weight(self) -> Tensor:
        """The (V, d) matrix the head input is projected on."""

    @abstractmethod
    def embedding_matrix(self) -> Tensor:
        """E, materialized: (V, d)."""

    def _output_bias(self) -> Tensor | None:
        return None if self.bias is None else self._on_side("output", "bias", self.bias)

    def unembedding_matrix(self) -> Tensor:
        """U = W_out^T, materialized: (V, d) (`nn.Linear.weight` layout)."""
        return self._head_weight()

    # ------------------------------------------------------------- gradient paths
    def set_path_hook(self, hook: PathHook | None) -> None:
        """Report the gradient of each interface parameter separately per side.

        With a hook set, every parameter is used through a distinct view on the
        input side (the lookup) and on the output side (the head); autograd
        sums the two view gradients into the parameter's `.grad`, and the hook
        sees each one: `hook(side, name, grad)` with grad of the parameter's shape.
        `None` removes the hook (no views, no cost).
        """
        self._path_hook = hook

    def _on_side(self, side: str, name: str, tensor: Tensor) -> Tensor:
        """`tensor` as used by one side; when a path hook is set, a view that reports its gradient."""
        hook = self._path_hook
        if hook is None or not tensor.requires_grad or not torch.is_grad_enabled():
            return tensor
        view = tensor.view_as(tensor)
        view.register_hook(lambda grad: hook(side, name, grad))
        return view

    # ------------------------------------------------------------- derived
    def forward(self, input_ids: Tensor) -> Tensor:
        """Same as `embed`, so the interface can stand where an `nn.Embedding` stood."""
        return self.embed(input_ids)

    def logits(self, hidden: Tensor) -> Tensor:
        """Next-token logits: (..., d) -> (..., V)."""
        self._check_hidden(hidden)
        return F.linear(self._head_input(hidden), self._head_weight(), self._output_bias())

    def loss(
        self,
        hidden: Tensor,
        targets: Tensor,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> Tensor:
        """Cross-entropy of `logits(hidden)` against `targets`, chunked over tokens (nats).

        Equal in value and gradients to `F.cross_entropy(self.logits(hidden), targets)`
        but holds at most one chunk of logits in the forward and backward passes.

        Args:
            hidden: (N, d) or (..., d).
            targets: (N,) or (...), ids in [0, V) or `ignore_index`.
            ignore_index: target value that is skipped.
            reduction: "mean", "sum" or "none".
        """
        self._check_hidden(hidden)
        return linear_cross_entropy(
            self._head_input(hidden),
            self._head_weight(),
            targets,
            self._output_bias(),
            ignore_index=ignore_index,
            reduction=reduction,
            chunk_size=self.loss_chunk_size,
        )

    def head_factors(self, hidden: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """(x, W, b) with logits(hidden) = x W^T + b: x (..., d), W (V, d), b (V,) or None."""
        self._check_hidden(hidden)
        return self._head_input(hidden), self._head_weight(), self._output_bias()

    def kl_from(
        self,
        hidden: Tensor,
        teacher: TokenInterface,
        teacher_hidden: Tensor,
        *,
        temperature: float = 1.0,
        valid: Tensor | None = None,
    ) -> Tensor:
        """Mean KL(teacher_τ ‖ self_τ) over tokens (nats), chunked (`linear_kl_divergence`).

        Args:
            hidden: this model's final hidden states, (N, d) or (..., d).
            teacher: the teacher's interface (same V; gets no gradient).
            teacher_hidden: the teacher's final hidden states for the same tokens.
            temperature: τ of both softmaxes.
            valid: optional (N,) bool mask of the tokens that count.
        """
        x, W, b = self.head_factors(hidden)
        with torch.no_grad():
            tx, tW, tb = teacher.head_factors(teacher_hidden)
        return linear_kl_divergence(
            x,
            W,
            tx,
            tW,
            b,
            tb,
            temperature=temperature,
            valid=valid,
            chunk_size=self.loss_chunk_size,
        )

    def distillation_loss(
        self,
        hidden: Tensor,
        targets: Tensor,
        teacher: TokenInterface,
        teacher_hidden: Tensor,
        *,
        alpha: float,
        temperature: float = 1.0,
        ignore_index: int = -100,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """(loss, CE, KL): loss = (1 − α)·CE + α·τ²·KL(teacher_τ ‖ self_τ), chunked, in nats.

        Only `loss` carries a gradient (to this interface and `hidden`); see
        `tying.interface.kl.linear_distillation_loss`.

        Args:
            hidden: final hidden states, (N, d) or (..., d).
            targets: next-token ids for the same tokens, `ignore_index` skipped.
            teacher: the teacher's interface (same V; gets no gradient).
            teacher_hidden: the teacher's final hidden states for the same tokens.
            alpha: weight α of the KL term, in [0, 1].
            temperature: τ > 0.
            ignore_index: target value skipped by both terms.
        """
        x, W, b = self.head_factors(hidden)
        with torch.no_grad():
            tx, tW, tb = teacher.head_factors(teacher_hidden)
        return linear_distillation_loss(
            x,
            W,
            tx,
            tW,
            targets,
            b,
            tb,
            alpha=alpha,
            temperature=temperature,
            ignore_index=ignore_index,
            chunk_size=self.loss_chunk_size,
        )

    # ------------------------------------------------------------- checks
    def _check_ids(self, input_ids: Tensor) -> None:
        """Raise on non-integer ids or ids outside [0, V)."""
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
        if input_ids.numel() == 0:
            return
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= self.vocab_size:
            bad = hi if hi >= self.vocab_size else lo
            raise IndexError(
                f"token id {bad} is outside the vocabulary [0, {self.vocab_size}): "
                f"check that the tokenizer matches this model (V={self.vocab_size})"
            )

    def _check_hidden(self, hidden: Tensor) -> None:
        """Raise when the last dimension of `hidden` is not d."""
        if hidden.dim() == 0 or hidden.shape[-1] != self.d_model:
            raise ValueError(
                f"hidden states must have last dimension d={self.d_model}, got shape {tuple(hidden.shape)}"
            )

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, d_model={self.d_model}, bias={self.bias is not None}"
