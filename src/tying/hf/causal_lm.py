"""`HFCausalLM`: a converted transformers model seen the way the trainer, lenses and probe see models.

It exposes the same methods as `tying.decoder.decoder.Decoder`:

    interface                      the TokenInterface
    final_hidden(ids)  -> (B, T, d)  after the final norm (what the head reads)
    forward(ids, targets=None)     logits (B, T, V), or the mean next-token loss
    residual_states(ids) -> list   n_layers + 1 states (B, T, d) before the final norm
    final_norm, embed_scale, blocks

Convention: `targets[b, t]` is the token to predict at position t (already
shifted, as in nanoGPT); `ignore_index` (-100) positions are skipped.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.conversion.model import unwrap_model
from tying.hf.convert import interface_of, is_converted
from tying.hf.families import Adapter, get_adapter
from tying.interface.base import TokenInterface


def _first_tensor(value: Any) -> Tensor:
    """The hidden states in a block's input/output (a tensor, or the first item of a tuple)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], Tensor):
        return value[0]
    raise TypeError(f"cannot find hidden states in a block output of type {type(value).__name__}")


class HFCausalLM(nn.Module):
    """A converted transformers causal LM (optionally peft-wrapped) with the decoder API of tying.

    Args:
        model: a model converted by `tying.hf.convert` (or loaded by
            `tying.hf.from_pretrained`), possibly wrapped by peft. It is
            registered as `self.hf_model`.

    Raises:
        ValueError: the model is not converted or its architecture is unsupported.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not is_converted(model):
            raise ValueError(
                "HFCausalLM needs a converted model: call tying.hf.convert(model, tie=...) first"
            )
        self.hf_model = model
        inner = unwrap_model(model)
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_adapter", get_adapter(inner))

    # ------------------------------------------------------------ structure
    @property
    def adapter(self) -> Adapter:
        """The architecture adapter."""
        return self._adapter

    @property
    def config(self) -> Any:
        """The transformers config."""
        return self._inner.config

    @property
    def interface(self) -> TokenInterface:
        """The token interface (shared by the embedding and the head)."""
        return interface_of(self._inner)

    @property
    def base_model(self) -> nn.Module:
        """The trunk (embedding -> blocks -> final norm), without the head."""
        return self._adapter.base_model(self._inner)

    @property
    def blocks(self) -> nn.ModuleList:
        """The decoder blocks, n_layers of them."""
        return self._adapter.blocks(self._inner)

    @property
    def final_norm(self) -> nn.Module:
        """The norm applied after the last block (before the head)."""
        return self._adapter.final_norm(self._inner)

    def final_norm_gain(self) -> Tensor:
        """The multiplicative gain of the final norm, (d,) (Gemma: 1 + weight)."""
        return self._adapter.final_norm_gain(self._inner)

    @property
    def embed_scale(self) -> float:
        """Constant multiplier applied to embedding rows (sqrt(d) for Gemma3, else 1)."""
        return self._adapter.embed_scale(self._inner)

    @property
    def logit_softcap(self) -> float | None:
        """Soft-capping c (logits <- c·tanh(logits/c)) applied after the head, or None."""
        return self._adapter.logit_softcap(self._inner)

    # ------------------------------------------------------------ forward passes
    def final_hidden(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """Hidden states after the final norm: (B, T) ids -> (B, T, d)."""
        out = self.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state

    def logits(self, hidden: Tensor) -> Tensor:
        """Logits (..., V) of final hidden states (..., d), soft-capped if the architecture does."""
        logits = self.interface.logits(hidden)
        cap = self.logit_softcap
        if cap is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def forward(
        self,
        input_ids: Tensor,
        targets: Tensor | None = None,
        attention_mask: Tensor | None = None,
        ignore_index: int = -100,
    ) -> Tensor:
        """Logits (B, T, V) without targets; with targets (B, T), the mean cross-entropy (nats).

        The loss is chunked (`interface.loss`, never N×V logits) unless the
        architecture soft-caps its logits (Gemma3 with final_logit_softcapping),
        which needs the full logits.
        """
        hidden = self.final_hidden(input_ids, attention_mask)
        if targets is None:
            return self.logits(hidden)
        if self.logit_softcap is None:
            return self.interface.loss(hidden, targets, ignore_index=ignore_index)
        logits = self.logits(hidden).float()
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index
        )

    def residual_states(
        self, input_ids: Tensor, attention_mask: Tensor | None = None
    ) -> list[Tensor]:
        """The residual stream: n_layers + 1 tensors (B, T, d), all BEFORE the final norm.

        Entry 0 is the input of the first block (token embedding · embed_scale,
        plus position embeddings for GPT-2), entry i the output of block i.
        (transformers' `output_hidden_states` puts the final-norm output last;
        these hooks do not.) `final_norm(states[-1])` equals `final_hidden`.
        """
        blocks = self.blocks
        states: list[Tensor | None] = [None] * (len(blocks) + 1)

        def pre_hook(module: nn.Module, args: tuple, kwargs: dict) -> None:
            states[0] = _first_tensor(args[0] if args else kwargs["hidden_states"])

        def make_hook(i: int):
            def hook(module: nn.Module, args: tuple, output: Any) -> None:
                states[i + 1] = _first_tensor(output)

            return hook

        handles = [blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True)]
        handles += [b.register_forward_hook(make_hook(i)) for i, b in enumerate(blocks)]
        try:
            self.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        finally:
            for h in handles:
                h.remove()
        missing = [i for i, s in enumerate(states) if s is None]
        if missing:
            raise RuntimeError(f"residual states {missing} were not captured: a block did not run")
        return states  # type: ignore[return-value]
