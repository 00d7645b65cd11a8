"""What a conversion reads and changes in a model, whatever kind of model it is.

The conversion pipeline (`tying.conversion.pipeline`) and the measurements (capture, step-0
KL, scale search, fit) never look inside a model themselves; they ask its *kind*:

- `ModelParts`: what the measurements read and change of a model: the trunk (ids → final
  normalized states), the head as the model computes it now, the teacher head's weight,
  bias and soft-capping, the final norm (its gain and the constant the stored weight is
  offset by) and the model's token interface;
- `Teacher`: what a conversion reads of a model before it is converted (E0, U0, the head
  bias, the embedding scale, ...) and how it puts the new interface in.

Two kinds exist: `InterfaceModel`s (our `tying.decoder.Decoder`, anything with an
`interface`, a `final_hidden` and a `final_norm`), built in here, and transformers causal LMs,
whose kind `tying.hf` registers when it is imported (`register_model_kind`): the conversion
package sits below `hf` in the layers and never imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from tying.errors import InvalidInputError
from tying.interface.base import TokenInterface


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a peft wrapper (`get_base_model`) or an HFCausalLM (`hf_model`)."""
    for _ in range(8):
        if callable(getattr(model, "get_base_model", None)):
            inner = model.get_base_model()
        else:
            inner = getattr(model, "hf_model", None)
        if not isinstance(inner, nn.Module) or inner is model:
            return model
        model = inner
    return model


@contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """`model` in eval mode for the block, then back in the mode it had (training or not)."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def softcapped(logits: Tensor, cap: float | None) -> Tensor:
    """c·tanh(logits/c) (logit soft-capping), or `logits` unchanged when `cap` is None."""
    return logits if cap is None else cap * torch.tanh(logits / cap)


def scale_norm_output_(norm: nn.Module, offset: float, factor: float, owner: str = "") -> None:
    """Multiply a norm's output by `factor`, in place: its gain (and a LayerNorm bias).

    norm(x) = g ⊙ normalize(x) + β with g = offset + weight (Gemma stores g − 1) becomes
    factor·norm(x): the stored weight becomes factor·g − offset and β becomes factor·β.

    Args:
        norm: the final norm module.
        offset: the constant its stored weight is offset by.
        factor: the multiplier.
        owner: words naming the model, for the message (e.g. " of this llama model").

    Raises:
        ValueError: the norm has no gain (a parameter-free norm).
    """
    weight = getattr(norm, "weight", None)
    if not isinstance(weight, Tensor):
        raise InvalidInputError(
            f"the final norm {type(norm).__name__}{owner} has no gain to rescale; "
            "convert without scale correction (input_scale='none')"
        )
    with torch.no_grad():
        gain = (weight.to(torch.float64) + offset) * factor
        weight.copy_((gain - offset).to(weight.dtype))
        bias = getattr(norm, "bias", None)
        if isinstance(bias, Tensor):
            bias.mul_(factor)


@dataclass
class ModelParts:
    """What the measurements read and change of a model, whatever its kind.

    Attributes:
        inner: the model whose named parameters are changed (unwrapped).
        trunk: ids (B, T) -> hidden states after the final norm (B, T, d).
        head: hidden (..., d) -> logits (..., V) as the model computes them now.
        head_weight: the head's weight (V, d) (`nn.Linear` layout), detached.
        head_bias: its bias (V,) or None.
        softcap: logit soft-capping c or None.
        final_norm: the final norm module.
        norm_gain_offset: the constant the stored norm weight is offset by (Gemma: 1).
        interface_of: () -> the model's token interface (raises ValueError for a model that
            has none, e.g. an unconverted transformers model).
    """

    inner: nn.Module
    trunk: Callable[[Tensor], Tensor]
    head: Callable[[Tensor], Tensor]
    head_weight: Tensor
    head_bias: Tensor | None
    softcap: float | None
    final_norm: nn.Module
    norm_gain_offset: float
    interface_of: Callable[[], TokenInterface]

    def interface(self) -> TokenInterface:
        """The model's token interface."""
        return self.interface_of()

    def scale_final_norm_(self, factor: float) -> None:
        """Multiply the final norm's output by `factor` (`scale_norm_output_`)."""
        scale_norm_output_(self.final_norm, self.norm_gain_offset, factor)


@dataclass
class Teacher:
    """What a conversion reads of a model before converting it, and how it installs the result.

    Attributes:
        E0: the input embedding weight (V, d), detached (without any embed_scale).
        U0: the output head weight (V, d) (`nn.Linear` layout), detached; the same tensor as
            E0 when the teacher is tied.
        bias: the head's bias (V,) or None.
        model_type: what the report calls the model (`config.model_type`, or the class name).
        family: the model family (the transformers adapter's, or "interface-model").
        embed_scale: constant multiplier applied to embedding rows (Gemma3: sqrt(d)).
        softcap: logit soft-capping after the head, or None.
        norm_has_gain: whether the final norm has a gain a scale correction can multiply.
        install: interface -> None: put the interface in place of the embedding and head.
        record: report -> None: keep the finished `ConversionReport` with the model.
    """

    E0: Tensor
    U0: Tensor
    bias: Tensor | None
    model_type: str
    family: str
    embed_scale: float
    softcap: float | None
    norm_has_gain: bool
    install: Callable[[TokenInterface], None]
    record: Callable[[Any], None]

    @property
    def tied(self) -> bool:
        """Whether E0 and U0 are one tensor."""
        return self.E0.data_ptr() == self.U0.data_ptr()


class ModelKind(Protocol):
    """A kind of model the conversion can read (`register_model_kind`)."""

    def matches(self, model: nn.Module) -> bool:
        """Whether `model` (unwrapped) is of this kind."""

    def parts(self, model: nn.Module) -> ModelParts:
        """Its `ModelParts` (`model` unwrapped)."""

    def teacher(self, model: nn.Module) -> Teacher:
        """Its `Teacher` (`model` unwrapped); raises ValueError if it cannot be converted."""


def _own_interface(model: nn.Module) -> TokenInterface | None:
    own = getattr(model, "interface", None)
    return own if isinstance(own, TokenInterface) else None


class InterfaceModelKind:
    """Our own models: anything with an `interface`, a `final_hidden` and a `final_norm`."""

    def matches(self, model: nn.Module) -> bool:
        """An `InterfaceModel` (a `TokenInterface` as `interface`, a callable `final_hidden`)."""
        return _own_interface(model) is not None and callable(getattr(model, "final_hidden", None))

    def parts(self, model: nn.Module) -> ModelParts:
        """The head is the interface's logits; the teacher head is its unembedding U."""
        own = _own_interface(model)
        bias = own.bias.detach() if own.bias is not None else None
        return ModelParts(
            inner=model,
            trunk=model.final_hidden,
            head=own.logits,
            head_weight=own.unembedding_matrix().detach(),
            head_bias=bias,
            softcap=None,
            final_norm=model.final_norm,
            norm_gain_offset=0.0,
            interface_of=lambda: _own_interface(model),
        )

    def teacher(self, model: nn.Module) -> Teacher:
        """E0 = the interface's E, U0 = E0 when it shares one matrix, else its U."""
        old = _own_interface(model)
        with torch.no_grad():
            E0 = old.embedding_matrix().detach().clone()
            U0 = E0 if old.shares_matrix else old.unembedding_matrix().detach().clone()

        def install(interface: TokenInterface) -> None:
            model.interface = interface

        return Teacher(
            E0=E0,
            U0=U0,
            bias=old.bias.detach().clone() if old.bias is not None else None,
            model_type=type(model).__name__,
            family="interface-model",
            embed_scale=1.0,
            softcap=None,
            norm_has_gain=isinstance(getattr(model.final_norm, "weight", None), Tensor),
            install=install,
            record=lambda report: None,
        )


#: The kinds tried in order: our InterfaceModels first, then those registered (transformers).
_KINDS: list[ModelKind] = [InterfaceModelKind()]


def register_model_kind(kind: ModelKind) -> None:
    """Let the conversion read one more kind of model (`tying.hf` registers transformers')."""
    if not any(type(k) is type(kind) for k in _KINDS):
        _KINDS.append(kind)


def kind_of(model: nn.Module) -> tuple[ModelKind, nn.Module]:
    """(the kind of `model`, the unwrapped model).

    Raises:
        ValueError: no registered kind reads it.
    """
    inner = unwrap_model(model)
    for kind in _KINDS:
        if kind.matches(inner):
            return kind, inner
    raise InvalidInputError(
        f"{type(inner).__name__} is neither an InterfaceModel (an `interface`, `final_hidden` "
        "and `final_norm`) nor a transformers causal LM (import tying.hf to convert those)"
    )


def parts_of(model: nn.Module) -> ModelParts:
    """The `ModelParts` of any model a kind reads (also inside an HFCausalLM or peft wrapper)."""
    kind, inner = kind_of(model)
    return kind.parts(inner)
