"""The model side of the seam: what a model that reads and writes tokens through a
`TokenInterface` offers to the trainer, the probe, the lenses and the updates.

Both of tying's model classes satisfy it: `tying.decoder.Decoder` (our decoder) and
`tying.hf.HFCausalLM` (any converted transformers causal LM). Code that consumes models is
annotated with `InterfaceModel` and checks it with `isinstance(model, InterfaceModel)`
(attributes and methods present), never with a list of `hasattr` calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from torch import Tensor, nn

from tying.interface.base import TokenInterface


@runtime_checkable
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
