"""The modules that stand where a `transformers` model had its embedding and head.

Both wrap ONE `TokenInterface`, which the converted model registers once as
`model.tying_interface` (so `model.parameters()` yields each interface
parameter once and `state_dict` keys read `tying_interface.z`, ...). The
wrappers keep a plain, unregistered reference to it: they own no parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tying.interface.base import TokenInterface

#: Attribute of the converted causal LM that registers the interface.
INTERFACE_ATTR = "tying_interface"


class _InterfaceView(nn.Module):
    """Shared plumbing: an unregistered reference to the interface."""

    def __init__(self, interface: TokenInterface) -> None:
        super().__init__()
        if not isinstance(interface, TokenInterface):
            raise ValueError(f"expected a tying TokenInterface, got {type(interface).__name__}")
        # Bypass nn.Module.__setattr__: the interface is registered on the model, not here.
        object.__setattr__(self, "_interface", interface)
        # transformers' weight initialization skips modules carrying this flag.
        self._is_hf_initialized = True

    @property
    def interface(self) -> TokenInterface:
        """The shared token interface (registered on the model as `tying_interface`)."""
        return self._interface

    def extra_repr(self) -> str:
        return f"interface={type(self._interface).__name__} (shared: model.{INTERFACE_ATTR})"


class InterfaceEmbedding(_InterfaceView):
    """Input embedding: ids (...) -> interface.embed(ids) · embed_scale, (..., d).

    Reproduces the forward of the module it replaces, including a constant
    multiplier applied by the architecture's embedding module (Gemma3:
    sqrt(d), rounded to the activation dtype first, as transformers does).

    Args:
        interface: the shared token interface.
        embed_scale: the constant multiplier (1.0 for most architectures).
    """

    def __init__(self, interface: TokenInterface, embed_scale: float = 1.0) -> None:
        super().__init__(interface)
        self.embed_scale = float(embed_scale)
        self.padding_idx = None

    def forward(self, input_ids: Tensor) -> Tensor:
        out = self._interface.embed(input_ids)
        if self.embed_scale != 1.0:
            scale = torch.tensor(self.embed_scale, dtype=torch.float32, device=out.device)
            out = out * scale.to(out.dtype)
        return out

    @property
    def num_embeddings(self) -> int:
        """V (like `nn.Embedding.num_embeddings`)."""
        return self._interface.vocab_size

    @property
    def embedding_dim(self) -> int:
        """d (like `nn.Embedding.embedding_dim`)."""
        return self._interface.d_model

    @property
    def weight(self) -> Tensor:
        """E, (V, d), materialized from the interface, without embed_scale.

        For code that inspects `get_input_embeddings().weight` (shape, dtype);
        it is not a parameter of this module and assigning it is an error.
        """
        return self._interface.embedding_matrix()

    def extra_repr(self) -> str:
        return super().extra_repr() + f", embed_scale={self.embed_scale:g}"


class InterfaceHead(_InterfaceView):
    """Output head: hidden (..., d) -> interface.logits(hidden), (..., V)."""

    def forward(self, hidden: Tensor) -> Tensor:
        return self._interface.logits(hidden)

    @property
    def in_features(self) -> int:
        """d (like `nn.Linear.in_features`)."""
        return self._interface.d_model

    @property
    def out_features(self) -> int:
        """V (like `nn.Linear.out_features`)."""
        return self._interface.vocab_size

    @property
    def weight(self) -> Tensor:
        """U = W_out^T, (V, d), materialized from the interface (`nn.Linear.weight` layout).

        For code that inspects `get_output_embeddings().weight`; it is not a
        parameter of this module and assigning it is an error.
        """
        return self._interface.unembedding_matrix()

    @property
    def bias(self) -> Tensor | None:
        """The interface's output bias (V,), or None."""
        return self._interface.bias
