"""What `tying.hf` needs to know about each Hugging Face causal-LM architecture.

An `Adapter` answers, for one family of `transformers` models:

- where the input embedding and the output head are (through the model's own
  `get_input_embeddings` / `get_output_embeddings` / `set_*` methods);
- the constant multiplier the architecture applies to the looked-up embedding
  rows (Gemma3 multiplies by sqrt(d) inside its embedding module);
- the base model (`model.model`, `model.transformer`, `model.gpt_neox`), its
  decoder blocks and its final norm, with the norm's effective gain
  (Gemma's RMSNorm multiplies by 1 + weight);
- the logit soft-capping applied after the head, if any.

`ADAPTERS` maps `config.model_type` to its adapter; `get_adapter(model)`
raises a ValueError naming the supported types for anything else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from tying.conversion.model import scale_norm_output_
from tying.errors import InvalidInputError

#: What an adapter must provide, quoted in the error for unsupported architectures.
ADAPTER_REQUIREMENTS = (
    "an adapter (tying.hf.families.Adapter, registered in tying.hf.families.ADAPTERS under the "
    "config's model_type) must provide: the attribute holding the base model, the attribute of "
    "the base model holding the decoder blocks (an nn.ModuleList) and the final norm, the "
    "norm's gain offset (1.0 when the norm multiplies by 1 + weight), the constant multiplier "
    "applied to embedding rows (embed_scale) and the config attribute of any logit "
    "soft-capping; the model class must implement get_input_embeddings/set_input_embeddings "
    "and get_output_embeddings/set_output_embeddings"
)


def _unit_scale(model: nn.Module, embedding: nn.Module) -> float:
    """Architectures that feed embedding rows in unscaled."""
    return 1.0


def _gemma_scale(model: nn.Module, embedding: nn.Module) -> float:
    """Gemma3TextScaledWordEmbedding multiplies rows by `scalar_embed_scale` (sqrt(d))."""
    scale = getattr(embedding, "scalar_embed_scale", None)
    if scale is None:
        scale = model.config.hidden_size**0.5
    return float(scale)


@dataclass(frozen=True)
class Adapter:
    """How to reach the token interface and the trunk of one architecture family.

    Attributes:
        family: human-readable family name, e.g. "llama".
        model_types: the `config.model_type` values this adapter serves.
        base_attr: attribute of the causal LM holding the base model.
        blocks_attr: attribute of the base model holding the decoder blocks.
        norm_attr: attribute of the base model holding the final norm.
        norm_gain_offset: the norm multiplies normalized states by
            (norm_gain_offset + weight); 1.0 for Gemma, 0.0 otherwise.
        scale_fn: (model, unconverted embedding module) -> the constant
            multiplier applied to embedding rows in the embedding's forward.
        softcap_attr: config attribute of the logit soft-capping c applied after
            the head (logits <- c·tanh(logits/c)), or None.
        examples: checkpoints of this family, for messages and docs.
    """

    family: str
    model_types: tuple[str, ...]
    base_attr: str
    blocks_attr: str
    norm_attr: str
    norm_gain_offset: float = 0.0
    scale_fn: Callable[[nn.Module, nn.Module], float] = field(default=_unit_scale)
    softcap_attr: str | None = None
    examples: tuple[str, ...] = ()

    # ------------------------------------------------------------ structure
    def base_model(self, model: nn.Module) -> nn.Module:
        """The decoder trunk without the head (e.g. `LlamaModel`)."""
        return getattr(model, self.base_attr)

    def blocks(self, model: nn.Module) -> nn.ModuleList:
        """The decoder blocks, in order: an `nn.ModuleList` of n_layers modules."""
        return getattr(self.base_model(model), self.blocks_attr)

    def final_norm(self, model: nn.Module) -> nn.Module:
        """The norm applied to the last block's output before the head."""
        return getattr(self.base_model(model), self.norm_attr)

    def final_norm_gain(self, model: nn.Module) -> Tensor:
        """The multiplicative gain the final norm applies, shape (d,).

        norm(x) = gain ⊙ normalize(x) (+ bias for LayerNorm), with gain = weight,
        1 + weight for Gemma's RMSNorm, and ones for parameter-free norms (OLMo).
        """
        norm = self.final_norm(model)
        weight = getattr(norm, "weight", None)
        d = int(model.config.hidden_size)
        if weight is None:
            ref = next(model.parameters())
            return torch.ones(d, dtype=ref.dtype, device=ref.device)
        return weight.detach() + self.norm_gain_offset

    def scale_final_norm_(self, model: nn.Module, factor: float) -> None:
        """Multiply the final norm's output by `factor`, in place: gain (and LayerNorm bias).

        norm(x) = gain ⊙ normalize(x) + β becomes factor · norm(x): the stored weight
        becomes factor·gain − offset (Gemma stores gain − 1) and a bias β becomes factor·β.

        Raises:
            ValueError: the norm has no weight to scale (OLMo's parameter-free LayerNorm).
        """
        scale_norm_output_(
            self.final_norm(model), self.norm_gain_offset, factor, f" of this {self.family} model"
        )

    def final_norm_parameters(self, model: nn.Module) -> list[nn.Parameter]:
        """The final norm's own parameters (gain, and bias for LayerNorm); empty if parameter-free."""
        return list(self.final_norm(model).parameters(recurse=False))

    # ------------------------------------------------------------ token interface
    def input_embedding(self, model: nn.Module) -> nn.Module:
        """The module the base model calls on input ids."""
        return model.get_input_embeddings()

    def output_head(self, model: nn.Module) -> nn.Module:
        """The module mapping final hidden states to logits."""
        head = model.get_output_embeddings()
        if head is None:
            raise InvalidInputError(
                f"{type(model).__name__} has no output head (get_output_embeddings() is None): "
                "load the model with AutoModelForCausalLM, not AutoModel"
            )
        return head

    def set_input_embedding(self, model: nn.Module, module: nn.Module) -> None:
        """Replace the input embedding module."""
        model.set_input_embeddings(module)

    def set_output_head(self, model: nn.Module, module: nn.Module) -> None:
        """Replace the output head module."""
        model.set_output_embeddings(module)

    def embed_scale(self, model: nn.Module) -> float:
        """The constant multiplier applied to embedding rows (sqrt(d) for Gemma3, else 1)."""
        from tying.hf.modules import InterfaceEmbedding

        embedding = self.input_embedding(model)
        if isinstance(embedding, InterfaceEmbedding):
            return embedding.embed_scale
        return self.scale_fn(model, embedding)

    def logit_softcap(self, model: nn.Module) -> float | None:
        """The soft-capping constant c applied after the head, or None."""
        if self.softcap_attr is None:
            return None
        value = getattr(model.config, self.softcap_attr, None)
        return float(value) if value else None


_ADAPTER_LIST = (
    Adapter(
        family="gpt2",
        model_types=("gpt2",),
        base_attr="transformer",
        blocks_attr="h",
        norm_attr="ln_f",
        examples=("openai-community/gpt2", "cerebras/Cerebras-GPT-111M"),
    ),
    Adapter(
        family="llama",
        model_types=("llama",),
        base_attr="model",
        blocks_attr="layers",
        norm_attr="norm",
        examples=("HuggingFaceTB/SmolLM2-135M", "meta-llama/Llama-3.2-1B"),
    ),
    Adapter(
        family="qwen2",
        model_types=("qwen2",),
        base_attr="model",
        blocks_attr="layers",
        norm_attr="norm",
        examples=("Qwen/Qwen2.5-0.5B",),
    ),
    Adapter(
        family="qwen3",
        model_types=("qwen3",),
        base_attr="model",
        blocks_attr="layers",
        norm_attr="norm",
        examples=("Qwen/Qwen3-0.6B",),
    ),
    Adapter(
        family="gpt_neox",
        model_types=("gpt_neox",),
        base_attr="gpt_neox",
        blocks_attr="layers",
        norm_attr="final_layer_norm",
        examples=("EleutherAI/pythia-160m",),
    ),
    Adapter(
        family="olmo",
        model_types=("olmo", "olmo2", "olmo3"),
        base_attr="model",
        blocks_attr="layers",
        norm_attr="norm",
        examples=("allenai/OLMo-1B-hf", "allenai/OLMo-2-0425-1B"),
    ),
    Adapter(
        family="gemma3",
        model_types=("gemma3_text",),
        base_attr="model",
        blocks_attr="layers",
        norm_attr="norm",
        norm_gain_offset=1.0,
        scale_fn=_gemma_scale,
        softcap_attr="final_logit_softcapping",
        examples=("google/gemma-3-270m", "google/gemma-3-1b-pt"),
    ),
)

#: config.model_type -> Adapter.
ADAPTERS: dict[str, Adapter] = {t: a for a in _ADAPTER_LIST for t in a.model_types}


def supported_model_types() -> tuple[str, ...]:
    """The `config.model_type` values with an adapter, sorted."""
    return tuple(sorted(ADAPTERS))


def get_adapter(model: nn.Module) -> Adapter:
    """The adapter of a `transformers` causal LM, by `model.config.model_type`.

    Raises:
        ValueError: the model has no config, or its model_type has no adapter
            (the message lists the supported types and what an adapter provides).
    """
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type is None:
        raise InvalidInputError(
            f"{type(model).__name__} has no config.model_type: tying.hf works on transformers "
            "causal LMs (AutoModelForCausalLM)"
        )
    adapter = ADAPTERS.get(model_type)
    if adapter is None:
        raise InvalidInputError(
            f"architecture {model_type!r} ({type(model).__name__}) is not supported by tying.hf; "
            f"supported model types: {', '.join(supported_model_types())}. To add it, "
            + ADAPTER_REQUIREMENTS
            + "."
        )
    return adapter


# ------------------------------------------------------------ model-level shortcuts
def base_model(model: nn.Module) -> nn.Module:
    """The trunk of a supported causal LM (see `Adapter.base_model`)."""
    return get_adapter(model).base_model(model)


def blocks(model: nn.Module) -> nn.ModuleList:
    """The decoder blocks of a supported causal LM, n_layers of them."""
    return get_adapter(model).blocks(model)


def final_norm(model: nn.Module) -> nn.Module:
    """The final norm of a supported causal LM."""
    return get_adapter(model).final_norm(model)


def final_norm_gain(model: nn.Module) -> Tensor:
    """The multiplicative gain (d,) the final norm applies (Gemma: 1 + weight; OLMo: ones)."""
    return get_adapter(model).final_norm_gain(model)


def embed_scale(model: nn.Module) -> float:
    """The constant multiplier applied to embedding rows (Gemma3: sqrt(d); else 1)."""
    return get_adapter(model).embed_scale(model)
