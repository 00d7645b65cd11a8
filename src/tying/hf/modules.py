"""The modules that stand where a `transformers` model had its embedding and head.

Both read ONE `TokenInterface` from the module that registers it (its owner): a converted
transformers model registers it once as `model.tying_interface`, tying's own decoder as
`decoder.interface`, so `model.parameters()` yields each interface parameter once. The
wrappers keep a plain, unregistered reference to the owner and look the interface up on every
call (replacing the owner's interface is seen at once); they own no parameters.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tying.interface.base import TokenInterface

#: Attribute of the converted causal LM that registers the interface.
INTERFACE_ATTR = "tying_interface"


class _InterfaceView(nn.Module):
    """Shared plumbing: an unregistered reference to the module that owns the interface.

    Args:
        owner: the module that registers the interface as its attribute `attr`.
        attr: that attribute's name (`INTERFACE_ATTR` on converted transformers models,
            "interface" on tying's decoder).
    """

    def __init__(self, owner: nn.Module, attr: str = INTERFACE_ATTR) -> None:
        super().__init__()
        if not isinstance(getattr(owner, attr, None), TokenInterface):
            raise ValueError(
                f"{type(owner).__name__}.{attr} is not a tying TokenInterface: register the "
                "interface on the model before installing the wrappers"
            )
        # Bypass nn.Module.__setattr__: the interface is registered on the owner, not here.
        object.__setattr__(self, "_owner", owner)
        self._attr = attr
        # transformers' weight initialization skips modules carrying this flag.
        self._is_hf_initialized = True

    @property
    def interface(self) -> TokenInterface:
        """The shared token interface (the owner's attribute)."""
        return getattr(self._owner, self._attr)

    def extra_repr(self) -> str:
        return f"interface={type(self.interface).__name__} (shared: {self._attr})"


class InterfaceEmbedding(_InterfaceView):
    """Input embedding: ids (...) -> interface.embed(ids) · embed_scale, (..., d).

    Reproduces the forward of the module it replaces, including a constant
    multiplier applied by the architecture's embedding module (Gemma3:
    sqrt(d), rounded to the activation dtype first, as transformers does).

    Args:
        owner: the module registering the interface (see `_InterfaceView`).
        embed_scale: the constant multiplier (1.0 for most architectures).
        attr: the owner's attribute holding the interface.
    """

    def __init__(
        self, owner: nn.Module, embed_scale: float = 1.0, attr: str = INTERFACE_ATTR
    ) -> None:
        super().__init__(owner, attr)
        self.embed_scale = float(embed_scale)
        self.padding_idx = None

    def forward(self, input_ids: Tensor) -> Tensor:
        out = self.interface.embed(input_ids)
        if self.embed_scale != 1.0:
            scale = torch.tensor(self.embed_scale, dtype=torch.float32, device=out.device)
            out = out * scale.to(out.dtype)
        return out

    @property
    def num_embeddings(self) -> int:
        """V (like `nn.Embedding.num_embeddings`)."""
        return self.interface.vocab_size

    @property
    def embedding_dim(self) -> int:
        """d (like `nn.Embedding.embedding_dim`)."""
        return self.interface.d_model

    @property
    def weight(self) -> Tensor:
        """E, (V, d), materialized from the interface, without embed_scale.

        For code that inspects `get_input_embeddings().weight` (shape, dtype);
        it is not a parameter of this module and assigning it is an error.
        """
        return self.interface.embedding_matrix()

    def extra_repr(self) -> str:
        return super().extra_repr() + f", embed_scale={self.embed_scale:g}"


class InterfaceHead(_InterfaceView):
    """Output head: hidden (..., d) -> interface.logits(hidden), (..., V)."""

    def forward(self, hidden: Tensor) -> Tensor:
        return self.interface.logits(hidden)

    @property
    def in_features(self) -> int:
        """d (like `nn.Linear.in_features`)."""
        return self.interface.d_model

    @property
    def out_features(self) -> int:
        """V (like `nn.Linear.out_features`)."""
        return self.interface.vocab_size

    @property
    def weight(self) -> Tensor:
        """U = W_out^T, (V, d), materialized from the interface (`nn.Linear.weight` layout).

        For code that inspects `get_output_embeddings().weight`; it is not a
        parameter of this module and assigning it is an error.
        """
        return self.interface.unembedding_matrix()

    @property
    def bias(self) -> Tensor | None:
        """The interface's output bias (V,), or None."""
        return self.interface.bias
