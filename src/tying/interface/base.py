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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.interface.kl import linear_distillation_loss, linear_kl_divergence
from tying.interface.loss import linear_cross_entropy
from tying.interface.token_ids import check_ids

#: Called as hook(side, name, grad) with side "input" (the lookup) or "output" (the head),
#: `name` the parameter's attribute name and `grad` the gradient reaching it along that side.
PathHook = Callable[[str, str, Tensor], None]

SIDES = ("input", "output")
#: The teacher matrices an interface can be built from: E0 ("input") or U0 ("output").
SOURCES = ("input", "output")

#: The interface registry: `tie` name -> class (filled by `TokenInterface.__init_subclass__`;
#: read it through `tying.interface.registry`).
REGISTRY: dict[str, type[TokenInterface]] = {}


@dataclass(frozen=True)
class GradientSplit:
    """One split the gradient-path tracker reports: a parameter's input- vs output-side part.

    Attributes:
        prefix: metric prefix: "" for the interface's primary split (logged as `grad_*`),
            e.g. "L" or "Z" for further splits (logged as `grad_L_*`, `grad_Z_*`).
        input_name: the parameter whose input-side (lookup) gradient is the input part.
        output_name: the parameter whose output-side (head) gradient is the output part.
        shared: whether the two parts reach ONE tensor (tied) rather than two (untied).
    """

    prefix: str
    input_name: str
    output_name: str
    shared: bool


@dataclass
class TeacherConversion:
    """An interface built from a pretrained model's matrices, and what was kept or lost.

    Attributes:
        interface: the new interface.
        source: the teacher matrix it was built from: "input" (E0), "output" (U0) or "both".
        used: that matrix (V, d) (for reports: zero rows, dtype).
        notes: human-readable remarks (what an untied teacher loses under TT, ...).
        settings: interface-specific choices to record (e.g. PIT's {"t_init": "output"}).
    """

    interface: TokenInterface
    source: str
    used: Tensor
    notes: list[str]
    settings: dict[str, Any]


def _float_cpu(x: Tensor) -> Tensor:
    """Detached CPU tensor in float32, or float64 if it is float64."""
    x = x.detach().cpu()
    return x if x.dtype in (torch.float32, torch.float64) else x.to(torch.float32)


class TokenInterface(nn.Module, ABC):
    """Base class of the token interface (an `nn.Module`).

    Subclasses implement `embed`, `_head_input`, `_head_weight` and
    `embedding_matrix`; everything else follows. A subclass that sets the class attribute
    `tie` is registered under that name (`tying.interface.registry`) and provides what the
    rest of the package asks of an interface by name: `scratch` (a fresh one), `placeholder`
    (valid values of the right shapes, to load a state dict into), `count_parameters` (closed
    form), `options` (its constructor keywords, for records), `gradient_splits` (for the
    gradient-path tracker), `vocab_tensors`, `manifold_tensors` and `shares_matrix`.

    Args:
        vocab_size: V.
        d_model: d.
        bias: optional output bias, shape (V,), trained with the head.
        loss_chunk_size: tokens per chunk in `loss` (default: ≤ 192 MiB of logits per chunk).
    """

    #: The registered name ("untied", "tt", "pit"); set by each concrete subclass.
    tie: ClassVar[str]
    #: Attribute names of the (V, d) tensors (e.g. to build shapes on the meta device).
    vocab_tensors: ClassVar[tuple[str, ...]] = ()
    #: Attribute names of the tensors constrained to a manifold (PIT's Z: orthonormal columns):
    #: an optimizer that does not retract them onto it must leave them frozen (e.g. the LoRA
    #: updates of `tying.update` train every other interface parameter, never these).
    manifold_tensors: ClassVar[tuple[str, ...]] = ()
    #: Whether E and U = W_out^T are one stored matrix (exported as tie_word_embeddings=True).
    shares_matrix: ClassVar[bool] = False
    #: Model config keys (`tying.decoder.ModelConfig`, flat) that carry this interface's
    #: constructor options: config key -> constructor keyword (e.g. {"pit_trainable_z":
    #: "trainable_z"}).
    config_options: ClassVar[dict[str, str]] = {}
    #: The dataclass of this interface's options in a training run (`tying.interface.options`;
    #: the run config's section named by `tie`), or None when it has none.
    options_class: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        tie = cls.__dict__.get("tie")
        if tie is not None:
            if tie in REGISTRY and REGISTRY[tie].__qualname__ != cls.__qualname__:
                raise ValueError(
                    f"tie {tie!r} is already registered by {REGISTRY[tie].__name__}; "
                    f"choose another name for {cls.__name__}"
                )
            REGISTRY[tie] = cls

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

    # ------------------------------------------------------- registry protocol
    @classmethod
    @abstractmethod
    def scratch(
        cls,
        vocab_size: int,
        d_model: int,
        *,
        generator: torch.Generator | None = None,
        init_std: float = 0.02,
    ) -> TokenInterface:
        """A freshly initialised interface (V, d); subclasses add their own keyword options."""

    @classmethod
    @abstractmethod
    def placeholder(
        cls, vocab_size: int, d_model: int, *, dtype: torch.dtype, bias: bool, **options: Any
    ) -> TokenInterface:
        """An interface of this class and shapes with cheap valid values (load a state into it).

        Args:
            vocab_size: V.
            d_model: d.
            dtype: dtype of its tensors.
            bias: whether it has an output bias (V,).
            options: constructor keywords (`options()` of the interface that was saved).
        """

    @classmethod
    @abstractmethod
    def count_parameters(cls, vocab_size: int, d_model: int) -> int:
        """Free parameters of this interface at (V, d), without bias (closed form)."""

    @classmethod
    @abstractmethod
    def from_teacher_matrices(
        cls,
        E0: Tensor,
        U0: Tensor,
        *,
        bias: Tensor | None,
        teacher_tied: bool,
        source: str | None = None,
    ) -> TeacherConversion:
        """This interface built from a teacher's embedding E0 and head U0 (both V×d).

        Args:
            E0: the teacher's input embedding weight, (V, d).
            U0: its output head weight, (V, d) (`nn.Linear` layout); the same tensor as E0 when
                the teacher is tied.
            bias: the head's bias (V,), or None.
            teacher_tied: whether E0 and U0 are one tensor.
            source: which matrix to build from, "input" or "output" (None: the interface's
                default); subclasses add their own keyword options.
        """

    @classmethod
    def stored_elements(cls, vocab_size: int, d_model: int) -> int:
        """Elements its state dict stores at (V, d), without bias (default: `count_parameters`)."""
        return cls.count_parameters(vocab_size, d_model)

    def options(self) -> dict[str, Any]:
        """Constructor keyword arguments (other than tensors) that rebuild this interface (JSON-able)."""
        return {"loss_chunk_size": self.loss_chunk_size}

    @abstractmethod
    def gradient_splits(self) -> list[GradientSplit]:
        """The input/output splits the gradient-path tracker reports, primary (prefix "") first."""

    def rows_parameter(self) -> str | None:
        """The parameter whose input-side gradient rows show which tokens were looked up, or None."""
        return None

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

    @torch.no_grad()
    def analysis_matrices(self) -> tuple[Tensor, Tensor]:
        """(E, U), each (V, d), detached on the CPU, for analysis.

        Float32 (float64 when stored so); a CPU float32 weight is returned without a copy.
        When `shares_matrix`, U is the same tensor object as E. Interfaces whose matrices
        are computed (PIT) override this to compute them in float64.
        """
        E = _float_cpu(self.embedding_matrix())
        if self.shares_matrix:
            return E, E
        return E, _float_cpu(self.unembedding_matrix())

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

    def logit_chunks(self, hidden: Tensor, chunk_size: int) -> Iterator[tuple[int, Tensor]]:
        """The logits in blocks of vocabulary columns, never all V at once.

        Yields (v0, logits[..., v0:v1]) for v0 = 0, chunk_size, 2·chunk_size, ... with
        v1 = min(v0 + chunk_size, V): the head input (d×d part) is applied once, then each
        block is head_input(hidden) @ head_weight()[v0:v1]^T (+ b[v0:v1]). Concatenated over
        the blocks they equal `logits(hidden)`.

        Args:
            hidden: (..., d).
            chunk_size: columns per block (>= 1).

        Raises:
            ValueError: chunk_size < 1 or a hidden size other than d.
        """
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self._check_hidden(hidden)
        x = self._head_input(hidden)
        weight = self._head_weight()
        bias = self._output_bias()
        for v0 in range(0, self.vocab_size, chunk_size):
            v1 = min(v0 + chunk_size, self.vocab_size)
            yield v0, F.linear(x, weight[v0:v1], None if bias is None else bias[v0:v1])

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
        """Raise on non-integer ids or ids outside [0, V) (`tying.interface.loss.check_ids`:
        an IndexError on the CPU, an asynchronous assertion on CUDA and under torch.compile)."""
        if input_ids.is_floating_point() or input_ids.is_complex() or input_ids.dtype == torch.bool:
            raise ValueError(f"input_ids must be an integer tensor, got {input_ids.dtype}")
        check_ids(
            input_ids,
            self.vocab_size,
            "token id",
            f": check that the tokenizer matches this model (V={self.vocab_size})",
        )

    def _check_hidden(self, hidden: Tensor) -> None:
        """Raise when the last dimension of `hidden` is not d."""
        if hidden.dim() == 0 or hidden.shape[-1] != self.d_model:
            raise ValueError(
                f"hidden states must have last dimension d={self.d_model}, got shape {tuple(hidden.shape)}"
            )

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, d_model={self.d_model}, bias={self.bias is not None}"
