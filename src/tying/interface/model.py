"""The model side of the seam: what a model that reads and writes tokens through a
`TokenInterface` offers to the trainer, the probe, the lenses and the updates.

Both of tying's model classes satisfy it: `tying.decoder.Decoder` (our decoder) and
`tying.hf.HFCausalLM` (any converted transformers causal LM). Code that consumes models is
annotated with `InterfaceModel` and checks a model with `is_interface_model(model)`, the one
structural check, never with a list of `hasattr` calls.

`InterfaceModel` is deliberately not `runtime_checkable`: since Python 3.12, `isinstance(x, P)`
for a runtime Protocol reads attributes with `inspect.getattr_static`, which does not see an
`nn.Module`'s submodules (they live in `_modules`, reached through `nn.Module.__getattr__`), so
every model would be rejected there. `is_interface_model` reads them with plain `getattr`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from torch import Tensor, nn

from tying.interface.base import TokenInterface


class InterfaceModel(Protocol):
    """A causal LM whose token interface is the one seam between ids and the network.

    Attributes:
        interface: the `TokenInterface` (E and W_out), registered once in the model.
        final_norm: the norm applied to the last residual state before the head.
        blocks: the n_layers residual blocks, in order.
    """

    interface: TokenInterface
    final_norm: nn.Module
    blocks: Sequence[nn.Module]

    def residual_states(self, input_ids: Tensor) -> list[Tensor]:
        """[x_0, ..., x_L]: n_layers + 1 tensors (B, T, d), all BEFORE the final norm.

        x_0 is what the first block reads (the embedding output, scaled/positioned as the
        architecture does), x_i the output of block i.
        """
        ...

    def final_hidden(self, input_ids: Tensor) -> Tensor:
        """final_norm(x_L), (B, T, d): what the head reads."""
        ...

    def forward(self, input_ids: Tensor, targets: Tensor | None = None) -> Tensor:
        """Logits (B, T, V) without targets; with targets (B, T) (already shifted: position t
        predicts targets[t]; -100 ignored) the mean next-token cross-entropy in nats/token."""
        ...


#: The methods `InterfaceModel` promises.
_METHODS = ("residual_states", "final_hidden", "forward")


def is_interface_model(obj: object) -> bool:
    """Whether `obj` offers the `InterfaceModel` API: an `nn.Module` whose `interface` is a
    `TokenInterface`, with a `final_norm` module, a sequence of `blocks` and callable
    `residual_states`, `final_hidden` and `forward`.

    Attributes are read with `getattr`, so submodules registered in `nn.Module._modules` count
    (an `isinstance` against a runtime Protocol misses them on Python >= 3.12).
    """
    if not isinstance(obj, nn.Module):
        return False
    if not isinstance(getattr(obj, "interface", None), TokenInterface):
        return False
    if not isinstance(getattr(obj, "final_norm", None), nn.Module):
        return False
    if not isinstance(getattr(obj, "blocks", None), (nn.ModuleList, Sequence)):
        return False
    return all(callable(getattr(obj, name, None)) for name in _METHODS)
