"""The decoder-only transformer: tokens in and logits out only through a `TokenInterface`.

    x_0 = interface.embed(ids)                              (B, T, d)
    x_i = x_{i-1} + Attn_i(N_i(x_{i-1})) + MLP_i(N_i(x_{i-1}))    i = 1..n_layers
    h   = N_final(x_L)
    logits = interface.logits(h)   or   loss = interface.loss(h, targets)   (chunked)

Init: linears ~ N(0, init_std²), the output projection of each branch (o_proj,
down_proj) ~ N(0, (init_std / sqrt(2·n_layers))²) (GPT-2), norms and the
attention gate at 1; the interface is built by `tying.interface.build_interface`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from tying.decoder.attention import GroupedQueryAttention
from tying.decoder.block import ParallelBlock
from tying.decoder.config import ModelConfig
from tying.decoder.layers import RotaryEmbedding, make_norm
from tying.decoder.params import count_stored
from tying.interface import TokenInterface, build_interface, interface_class


def build_config_interface(
    config: ModelConfig, generator: torch.Generator | None = None
) -> TokenInterface:
    """A freshly initialised interface for `config` (tie, V, d, init_std and the tie's options).

    Under a meta default device (e.g. `with torch.device("meta")`, as transformers'
    `from_pretrained` does) this returns an interface of the right class and shapes on
    the meta device without drawing or checking V×d values.
    """
    if torch.get_default_device().type == "meta":
        return _meta_interface(config)
    return build_interface(
        config.tie,
        config.vocab_size,
        config.d_model,
        generator=generator,
        init_std=config.init_std,
        **config.interface_options(),
    )


def _meta_interface(config: ModelConfig) -> TokenInterface:
    """Interface with meta tensors: built at V' = d on the CPU (cheap, valid), then resized on meta."""
    V, d = config.vocab_size, config.d_model
    cls = interface_class(config.tie)
    with torch.device("cpu"):
        small = cls.placeholder(d, d, dtype=torch.float32, bias=False, **config.interface_options())
    iface = small.to("meta")
    for name in cls.vocab_tensors:
        old = getattr(iface, name)
        new = torch.empty(V, d, dtype=old.dtype, device="meta")
        setattr(
            iface,
            name,
            nn.Parameter(new, requires_grad=old.requires_grad)
            if isinstance(old, nn.Parameter)
            else new,
        )
    iface._vocab_size = V
    return iface


class Decoder(nn.Module):
    """Decoder-only transformer with parallel blocks (see the module docstring).

    Args:
        config: the model shape and options.
        interface: the token interface; built from the config when None. Its vocab_size
            and d_model must match the config.
        generator: random source of the init (deterministic construction); a CPU
            generator, so build on the CPU and move the model afterwards.

    Attributes:
        interface: the `TokenInterface`.
        blocks: `nn.ModuleList` of `ParallelBlock` (attn.q_proj/k_proj/v_proj/o_proj,
            attn.gate, mlp.gate_proj/up_proj/down_proj, norm).
        final_norm: the norm before the head (for lenses: logits = interface.logits(final_norm(x))).
        rotary: the rotary tables.
    """

    def __init__(
        self,
        config: ModelConfig,
        interface: TokenInterface | None = None,
        generator: torch.Generator | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        if interface is None:
            interface = build_config_interface(config, generator)
        elif not isinstance(interface, TokenInterface):
            raise ValueError(f"interface must be a TokenInterface, got {type(interface).__name__}")
        if interface.vocab_size != config.vocab_size or interface.d_model != config.d_model:
            raise ValueError(
                f"interface has V={interface.vocab_size}, d={interface.d_model} but the config has "
                f"vocab_size={config.vocab_size}, d_model={config.d_model}: build them to match"
            )
        self.interface = interface
        self.blocks = nn.ModuleList(ParallelBlock(config) for _ in range(config.n_layers))
        self.final_norm = make_norm(config)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_seq_len, config.rope_theta)
        self.init_weights_(generator)

    # ------------------------------------------------------------------ init
    @torch.no_grad()
    def init_module_(self, module: nn.Module, generator: torch.Generator | None = None) -> None:
        """Initialise one module of the trunk (not the interface) per the init scheme."""
        std = self.config.init_std
        if isinstance(module, nn.Linear):
            if getattr(module, "residual_out", False):
                std = std / math.sqrt(2 * self.config.n_layers)
            nn.init.normal_(module.weight, mean=0.0, std=std, generator=generator)
        elif isinstance(module, (nn.RMSNorm, nn.LayerNorm)):
            nn.init.ones_(module.weight)
        elif isinstance(module, GroupedQueryAttention):
            nn.init.ones_(module.gate)
        elif isinstance(module, RotaryEmbedding):
            module.reset_tables_()

    def init_weights_(self, generator: torch.Generator | None = None) -> None:
        """Re-initialise every trunk module (the interface is left as it is)."""
        interface_modules = {id(m) for m in self.interface.modules()}
        for module in self.modules():
            if id(module) not in interface_modules:
                self.init_module_(module, generator)

    # ------------------------------------------------------------------ trunk
    def trunk(
        self,
        input_ids: Tensor | None = None,
        *,
        inputs_embeds: Tensor | None = None,
        position_ids: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        cache: Any | None = None,
        return_states: bool = False,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """Residual stream after the last block, BEFORE the final norm.

        Args:
            input_ids: (B, T) token ids in [0, V); or None with `inputs_embeds`.
            inputs_embeds: (B, T, d) input vectors used instead of interface.embed(input_ids).
            position_ids: (B, T) rotary positions (default: past + arange(T), or from the
                padding mask when one is given: number of real tokens before, minus 1).
            key_padding_mask: (B, past + T), 1/True for real tokens, 0 for padding: keys
                at padding are never attended to (left padding is supported).
            cache: transformers `Cache` (e.g. DynamicCache) with past keys/values; updated.
            return_states: also return [x_0, ..., x_L] (n_layers + 1 tensors (B, T, d)).

        Returns:
            (x_L of shape (B, T, d), the states or None).
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("pass exactly one of input_ids and inputs_embeds")
        x = self.interface(input_ids) if inputs_embeds is None else inputs_embeds
        if x.dim() != 3 or x.shape[-1] != self.config.d_model:
            raise ValueError(
                f"expected input_ids (B, T) or inputs_embeds (B, T, {self.config.d_model}), "
                f"got embeddings of shape {tuple(x.shape)}"
            )
        B, T, _ = x.shape
        past = int(cache.get_seq_length()) if cache is not None else 0
        if past + T > self.config.max_seq_len:
            raise ValueError(
                f"sequence length {past + T} (past {past} + new {T}) exceeds max_seq_len="
                f"{self.config.max_seq_len}: shorten the input or build the model with a larger max_seq_len"
            )
        cos, sin = self._rotary_tables(B, T, past, position_ids, key_padding_mask)
        attn_mask = self._attention_mask(T, past, key_padding_mask, x.device)
        states = [x] if return_states else None
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, attn_mask, cache, i)
            if states is not None:
                states.append(x)
        return x, states

    def _rotary_tables(
        self,
        B: int,
        T: int,
        past: int,
        position_ids: Tensor | None,
        key_padding_mask: Tensor | None,
    ) -> tuple[Tensor, Tensor]:
        """cos/sin of the query positions: (T, D), or (B, 1, T, D) for per-row positions."""
        if position_ids is None and key_padding_mask is not None:
            position_ids = (key_padding_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past:]
        if position_ids is None:
            return self.rotary.cos[past : past + T], self.rotary.sin[past : past + T]
        if position_ids.shape[-1] != T:
            raise ValueError(
                f"position_ids must have T={T} columns, got shape {tuple(position_ids.shape)}"
            )
        position_ids = position_ids.expand(B, T)
        return self.rotary.cos[position_ids].unsqueeze(1), self.rotary.sin[position_ids].unsqueeze(
            1
        )

    @staticmethod
    def _attention_mask(
        T: int, past: int, key_padding_mask: Tensor | None, device: torch.device
    ) -> Tensor | None:
        """Boolean mask (B or 1, 1, T, S), True = may attend; None when plain causal attention applies.

        Query i (absolute position past + i) sees key j iff j <= past + i and key j is not
        padding; every query also sees itself, so no row is empty (padded queries).
        """
        S = past + T
        if key_padding_mask is None and (past == 0 or T == 1):
            return None
        rows = torch.arange(T, device=device).unsqueeze(1) + past
        cols = torch.arange(S, device=device).unsqueeze(0)
        allowed = (cols <= rows).unsqueeze(0)  # (1, T, S)
        if key_padding_mask is not None:
            if key_padding_mask.shape[-1] != S:
                raise ValueError(
                    f"attention mask must cover past + new tokens = {S} positions, "
                    f"got shape {tuple(key_padding_mask.shape)}"
                )
            allowed = (allowed & key_padding_mask.bool().unsqueeze(1)) | (cols == rows).unsqueeze(0)
        return allowed.unsqueeze(1)

    # ------------------------------------------------------------------ public API
    def final_hidden(self, input_ids: Tensor) -> Tensor:
        """Hidden states after the final norm: (B, T) ids -> (B, T, d)."""
        return self.final_norm(self.trunk(input_ids)[0])

    def forward(self, input_ids: Tensor, targets: Tensor | None = None) -> Tensor:
        """Logits (B, T, V), or the mean cross-entropy (nats, scalar) against `targets` (B, T).

        The loss goes through `interface.loss` (chunked, never the B·T×V logits);
        targets equal to -100 are ignored. Targets are the next tokens, already shifted.
        """
        h = self.final_hidden(input_ids)
        if targets is None:
            return self.interface.logits(h)
        if targets.shape != input_ids.shape:
            raise ValueError(
                f"targets must have the shape of input_ids {tuple(input_ids.shape)}, got {tuple(targets.shape)}"
            )
        return self.interface.loss(h.reshape(-1, h.shape[-1]), targets.reshape(-1))

    def residual_states(self, input_ids: Tensor) -> list[Tensor]:
        """[x_0, x_1, ..., x_L]: embedding output then each block's output, before the final norm.

        n_layers + 1 tensors of shape (B, T, d).
        """
        _, states = self.trunk(input_ids, return_states=True)
        assert states is not None
        return states

    def num_parameters(self) -> int:
        """Free parameters: trunk elements + `interface.num_parameters()` (tied storage once).

        Equals `tying.decoder.params.parameter_counts(config)["total"]`.
        """
        iface = self.interface
        interface_ids = {id(t) for t in iface.parameters()} | {id(t) for t in iface.buffers()}
        trunk = sum(p.numel() for p in self.parameters() if id(p) not in interface_ids)
        return trunk + iface.num_parameters()

    def num_stored(self) -> int:
        """Elements stored in the state dict (parameters and persistent float buffers, shared once)."""
        return count_stored(self)
