"""Hugging Face wrapper: `TyingConfig` and `TyingForCausalLM` (model_type "tying").

`save_pretrained` / `from_pretrained` (safetensors), `generate()` (with a
`DynamicCache` KV cache and left padding), `AutoModelForCausalLM` and peft
LoRA work on the `Decoder` unchanged. The token interface stays the one seam:

- `get_input_embeddings()` returns the interface itself (an `nn.Module` whose
  forward is `embed`, so forward hooks such as peft's
  `enable_input_require_grads` fire);
- `get_output_embeddings()` returns `lm_head`, a parameter-free module whose
  forward is `interface.logits` and whose `weight` is `interface.unembedding_matrix()`;
- nothing is ever re-tied by transformers: `tie_word_embeddings` is always
  False and there are no `_tied_weights_keys` (TT's tying lives inside the interface).

State dict keys: `model.blocks.{i}.…`, `model.final_norm.weight` and the
interface's own tensors under `model.interface.` (untied: weight_in,
weight_out; TT: weight; PIT: z and l_param).
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import types
import typing
from typing import Any

import torch
from torch import Tensor, nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    GenerationMixin,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from tying.decoder.config import ModelConfig
from tying.decoder.decoder import Decoder, build_config_interface
from tying.hf.modules import InterfaceHead
from tying.hf.state import empty_interface, interface_record
from tying.interface import TokenInterface, tie_of

_MODEL_FIELDS = tuple(f.name for f in dataclasses.fields(ModelConfig))
#: The output's KV-cache field: `cache` from transformers 5.2x, `past_key_values` before (the
#: old name still works there, with a deprecation warning).
_CACHE_FIELD = (
    "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"
)


def json_type(annotation: Any) -> Any:
    """The JSON form of a field type: `tuple[X, ...]` becomes `list[X]` (inside unions too), as
    a transformers config stores what its config.json holds; other types are kept."""
    origin = typing.get_origin(annotation)
    if origin is tuple:
        return list[typing.get_args(annotation)[0]]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (json_type(a) for a in typing.get_args(annotation)))
    return annotation


def model_config_fields(config_class: type = ModelConfig) -> dict[str, Any]:
    """The class namespace that declares `config_class`'s fields on a transformers config:
    `__annotations__` (JSON types, see `json_type`) and the defaults, derived from the
    dataclass so that the two field lists cannot drift.

    Raises:
        TypeError: a field without a default (a transformers config needs one for each).
    """
    hints = typing.get_type_hints(config_class)
    namespace: dict[str, Any] = {"__annotations__": {}}
    for f in dataclasses.fields(config_class):
        if f.default is dataclasses.MISSING:
            if f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{config_class.__name__}.{f.name} has no default")
            namespace[f.name] = dataclasses.field(default_factory=f.default_factory)
        else:
            namespace[f.name] = f.default
        namespace["__annotations__"][f.name] = json_type(hints[f.name])
    return namespace


#: A transformers config declaring the `ModelConfig` fields (transformers reads a config's
#: fields from its class annotations); `TyingConfig` adds the token ids and its methods.
_ModelConfigFields = types.new_class(
    "_ModelConfigFields",
    (PreTrainedConfig,),
    exec_body=lambda namespace: namespace.update(model_config_fields(), __module__=__name__),
)


class TyingConfig(_ModelConfigFields):  # type: ignore[misc, valid-type]
    """transformers config of the tying decoder: the `ModelConfig` fields plus the usual token ids.

    The `ModelConfig` fields are declared from the dataclass itself (`model_config_fields`), with
    tuples as lists (config.json). Derived sizes (n_heads, n_kv_heads, d_ff) are resolved on
    construction. Standard aliases: hidden_size, num_hidden_layers, num_attention_heads,
    num_key_value_heads, intermediate_size, max_position_embeddings.
    """

    model_type = "tying"
    attribute_map = {  # noqa: RUF012 (a ClassVar in PreTrainedConfig)
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "num_attention_heads": "n_heads",
        "num_key_value_heads": "n_kv_heads",
        "intermediate_size": "d_ff",
        "max_position_embeddings": "max_seq_len",
    }

    tie_word_embeddings: bool = False
    use_cache: bool = True
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    #: The `config.tying`-style record (`tying.hf.state.interface_record`) of an interface the
    #: `ModelConfig` fields cannot rebuild (a decoder converted to another tie, a centred PIT):
    #: the model is then built around `empty_interface(record)`; None otherwise.
    interface_record: dict[str, Any] | None = None

    def __post_init__(self, **kwargs: Any) -> None:
        if self.tie_word_embeddings:
            raise ValueError(
                "TyingConfig keeps tie_word_embeddings=False: tying lives inside the token interface; "
                "choose it with tie='tt' or tie='pit'"
            )
        resolved = self.to_model_config()  # validates and resolves the derived sizes
        self.n_heads, self.n_kv_heads, self.d_ff = (
            resolved.n_heads,
            resolved.n_kv_heads,
            resolved.d_ff,
        )
        if resolved.pit_diag_clamp is not None:
            self.pit_diag_clamp = list(resolved.pit_diag_clamp)
        super().__post_init__(**kwargs)

    def to_model_config(self) -> ModelConfig:
        """The `ModelConfig` these fields describe."""
        return ModelConfig.from_dict({name: getattr(self, name) for name in _MODEL_FIELDS})

    @classmethod
    def from_model_config(cls, config: ModelConfig, **kwargs: Any) -> TyingConfig:
        """A `TyingConfig` holding `config`'s fields (kwargs: token ids and other HF options)."""
        return cls(**config.to_dict(), **kwargs)


class TyingPreTrainedModel(PreTrainedModel):
    """Common settings of the tying models."""

    config_class = TyingConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["ParallelBlock"]  # noqa: RUF012
    _supports_sdpa = True
    _tied_weights_keys = None

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """The decoder's init scheme, module by module (used for weights missing from a checkpoint)."""
        if isinstance(module, TokenInterface):
            _init_interface_(module, self.config.to_model_config())
        elif isinstance(getattr(self, "model", None), Decoder):
            self.model.init_module_(module)


@torch.no_grad()
def _init_interface_(interface: TokenInterface, config: ModelConfig) -> None:
    """Fill the interface tensors that were not loaded with a fresh interface's values."""
    todo = [
        (name, t)
        for name, t in [
            *interface.named_parameters(recurse=False),
            *interface.named_buffers(recurse=False),
        ]
        if not getattr(t, "_is_hf_initialized", False)
    ]
    if not todo:
        return
    with torch.device("cpu"):
        fresh = dict(build_config_interface(config).state_dict())
    for name, t in todo:
        t.copy_(fresh[name])


def _config_of(decoder: Decoder) -> tuple[ModelConfig, dict[str, Any] | None]:
    """(the `ModelConfig` of `decoder` with its interface's tie, the interface's record or None).

    The record is None when the config alone rebuilds an interface of the same class, tensors
    and options (a decoder as trained); a converted decoder (`tying.conversion.convert` on its
    own interface: another tie, a centred PIT's input bias) needs it to be saved and reloaded.
    """
    interface = decoder.interface
    config = decoder.config
    if tie_of(interface) != config.tie:
        config = dataclasses.replace(config, tie=tie_of(interface))
    with torch.device("meta"):
        built = build_config_interface(config)
    same = (
        type(built) is type(interface)
        and built.state_dict().keys() == interface.state_dict().keys()
        and built.options() == interface.options()
    )
    return config, None if same else interface_record(interface, embed_scale=1.0)


class TyingForCausalLM(TyingPreTrainedModel, GenerationMixin):
    """Causal LM around `tying.decoder.decoder.Decoder` (attribute `model`), head `lm_head`.

    Args:
        config: a `TyingConfig`.
    """

    def __init__(self, config: TyingConfig) -> None:
        super().__init__(config)
        record = getattr(config, "interface_record", None)
        interface = None
        if record:  # placeholder values (checked on the CPU), replaced by the saved tensors
            device = torch.get_default_device()
            with torch.device("cpu"):
                interface = empty_interface(record).to(device)
        self.model = Decoder(config.to_model_config(), interface=interface)
        self.lm_head = InterfaceHead(self.model, attr="interface")
        if torch.get_default_device().type != "meta":
            # The Decoder initialised itself: keep its weights through post_init.
            for t in [*self.parameters(), *self.buffers()]:
                t._is_hf_initialized = True
        self.post_init()

    @classmethod
    def from_decoder(cls, decoder: Decoder, **config_kwargs: Any) -> TyingForCausalLM:
        """A `TyingForCausalLM` around an existing `Decoder`, sharing its tensors (no copy).

        Args:
            decoder: the decoder (its `config` becomes the transformers config).
            config_kwargs: further `TyingConfig` fields (eos_token_id, pad_token_id, ...).
        """
        model_config, record = _config_of(decoder)
        config = TyingConfig.from_model_config(
            model_config, interface_record=record, **config_kwargs
        )
        with torch.device("meta"):
            wrapper = cls(config)
        wrapper.model = decoder
        wrapper.lm_head = InterfaceHead(decoder, attr="interface")
        return wrapper

    # ---------------------------------------------------------------- embeddings
    def get_input_embeddings(self) -> nn.Module:
        """The token interface (forward = embed: ids (...) -> (..., d))."""
        return self.model.interface

    def set_input_embeddings(self, value: nn.Module) -> None:
        raise NotImplementedError(
            "the input embedding is part of the token interface: replace the whole interface "
            "with `model.model.interface = new_interface` (a TokenInterface of the same V and d)"
        )

    def get_output_embeddings(self) -> nn.Module:
        """`lm_head`: forward = interface.logits, weight = interface.unembedding_matrix()."""
        return self.lm_head

    def set_output_embeddings(self, new_embeddings: nn.Module) -> None:
        raise NotImplementedError(
            "the output projection is part of the token interface: replace the whole interface "
            "with `model.model.interface = new_interface`"
        )

    def resize_token_embeddings(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            "resizing the vocabulary of a token interface is not supported: build a new model with "
            "the new vocab_size (or convert the interface) instead"
        )

    # ---------------------------------------------------------------- forward
    def forward(
        self,
        input_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: Any | None = None,
        inputs_embeds: Tensor | None = None,
        labels: Tensor | None = None,
        use_cache: bool | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int | Tensor = 0,
        cache: Any | None = None,
        **kwargs: Any,
    ) -> CausalLMOutputWithPast | tuple:
        """Logits (and loss) of a batch, HF conventions.

        Args:
            input_ids: (B, T) token ids (or `inputs_embeds` (B, T, d)).
            attention_mask: (B, past + T), 1 for real tokens, 0 for padding (left padding
                supported); None = all real.
            position_ids: (B, T) rotary positions; default from the mask / the cache length.
            past_key_values: a transformers `Cache` (created as `DynamicCache` when
                use_cache and none is given).
            labels: (B, T), NOT shifted: position t predicts labels[t + 1]; -100 is ignored.
                Loss = mean cross-entropy in nats through the chunked `interface.loss`
                (sum / num_items_in_batch when the Trainer passes `num_items_in_batch`).
            use_cache: keep keys/values for the next call (default: config.use_cache when
                not training).
            output_hidden_states: also return the n_layers + 1 hidden states (the last one
                after the final norm, as in transformers).
            logits_to_keep: keep the logits of the last k positions only (0 = all).
            cache: `past_key_values` under its newer name (the `generate` of transformers
                5.2x passes `cache=`); give one of the two.
        """
        if output_attentions:
            raise ValueError(
                "output_attentions is not supported (attention runs in scaled_dot_product_attention)"
            )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        if use_cache is None:
            use_cache = bool(self.config.use_cache) and not self.training
        if cache is not None and past_key_values is not None and cache is not past_key_values:
            raise ValueError("give the KV cache once: as cache= or as past_key_values=, not both")
        cache = cache if cache is not None else past_key_values
        if use_cache and cache is None:
            cache = DynamicCache(config=self.config)
        key_padding_mask = None
        if attention_mask is not None:
            if attention_mask.dim() != 2:
                raise ValueError(
                    f"attention_mask must be a 2D (batch, past + new tokens) padding mask, "
                    f"got shape {tuple(attention_mask.shape)}"
                )
            if not bool(attention_mask.bool().all()):
                key_padding_mask = attention_mask
        if position_ids is not None and int(position_ids.max()) >= self.config.max_seq_len:
            raise ValueError(
                f"position {int(position_ids.max())} is beyond max_seq_len={self.config.max_seq_len}"
            )
        x, states = self.model.trunk(
            input_ids,
            inputs_embeds=inputs_embeds,
            position_ids=position_ids,
            key_padding_mask=key_padding_mask,
            cache=cache,
            return_states=bool(output_hidden_states),
        )
        h = self.model.final_norm(x)
        interface = self.model.interface
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = interface.logits(h[:, keep])

        loss = None
        if labels is not None:
            shifted = labels[:, 1:].reshape(-1).to(h.device)
            hidden = h[:, :-1].reshape(-1, h.shape[-1])
            num_items = kwargs.get("num_items_in_batch")
            if num_items is not None:
                loss = interface.loss(hidden, shifted, reduction="sum") / num_items
            else:
                loss = interface.loss(hidden, shifted)

        hidden_states = tuple([*states[:-1], h]) if states is not None else None
        out_cache = cache if use_cache else None
        if not return_dict:
            out = tuple(v for v in (logits, out_cache, hidden_states) if v is not None)
            return (loss, *out) if loss is not None else out
        return CausalLMOutputWithPast(
            loss=loss, logits=logits, hidden_states=hidden_states, **{_CACHE_FIELD: out_cache}
        )


def register_auto() -> None:
    """Register "tying" with AutoConfig and AutoModelForCausalLM (idempotent)."""
    AutoConfig.register("tying", TyingConfig, exist_ok=True)
    AutoModelForCausalLM.register(TyingConfig, TyingForCausalLM, exist_ok=True)
