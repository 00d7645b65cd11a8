"""Convert a `transformers` causal LM: the transformers side of `tying.conversion`.

`tying.hf.convert(model, tie)` is `tying.conversion.convert`: it replaces, in place, the
input embedding and the output head by an `InterfaceEmbedding` and an `InterfaceHead` around
ONE `TokenInterface` registered as `model.tying_interface`. The rest of the model is
untouched, so `forward`, `generate`, `save_pretrained` and peft keep working. What is built
(the closed forms, the scale search, the fit, the step-0 KL) is the conversion package's;
this module is what it needs of a transformers model, its *kind*
(`tying.conversion.model.register_model_kind`, registered on import):

- reading: the teacher matrices E0 (the embedding weight, without any embed_scale) and U0
  (the head weight, `nn.Linear` layout), the head bias, the trunk, the final norm and the
  logit soft-capping, through the family's `tying.hf.families.Adapter`;
- writing: `install_interface` and the record in `config.tying` (`CONFIG_KEY`).

transformers 5 ties `lm_head.weight` to the embedding by parameter name
(`_tied_weights_keys`, applied when `config.tie_word_embeddings` is true, in
`post_init`, `tie_weights` and `from_pretrained`). A converted model has
`config.tie_word_embeddings = False` and an empty instance-level
`_tied_weights_keys` (and `all_tied_weights_keys`), so those calls find
nothing to tie, even if the flag is switched back on. The wrappers own no
`weight` parameter that could be re-pointed, and `resize_token_embeddings`,
which would swap in a plain `nn.Embedding`, raises instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from tying._compat import moved_name
from tying.conversion import convert
from tying.conversion.model import (
    ModelParts,
    Teacher,
    register_model_kind,
    softcapped,
    unwrap_model,
)
from tying.errors import InvalidInputError
from tying.hf.families import Adapter, get_adapter
from tying.hf.modules import INTERFACE_ATTR, InterfaceEmbedding, InterfaceHead
from tying.hf.state import CONFIG_KEY, interface_record
from tying.interface import TokenInterface

if TYPE_CHECKING:
    from tying.conversion.report import ConversionReport

__all__ = [
    "REPORT_ATTR",
    "TransformersKind",
    "conversion_report",
    "convert",
    "install_interface",
    "interface_of",
    "is_converted",
]
#: Attribute of a converted model holding its ConversionReport.
REPORT_ATTR = "tying_report"
#: Names that moved to `tying.conversion` in 0.2 (old name -> new module), with a warning.
_MOVED = {
    "CLOSED_FORM_T_INIT": "tying.conversion.closed_form",
    "DEFAULT_T_INIT": "tying.conversion.closed_form",
    "PIT_INITS": "tying.conversion.closed_form",
    "SEARCH_TOKENS": "tying.conversion.scale",
    "SOURCES": "tying.interface.base",
    "ConversionReport": "tying.conversion.report",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        return moved_name(f"{__name__}.{name}", _MOVED[name], name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_converted(model: nn.Module) -> bool:
    """Whether `model` (or the transformers model inside it) carries a token interface."""
    return isinstance(getattr(unwrap_model(model), INTERFACE_ATTR, None), TokenInterface)


def interface_of(model: nn.Module) -> TokenInterface:
    """The `TokenInterface` of a converted model (also through peft or HFCausalLM wrappers).

    Raises:
        ValueError: the model was not converted.
    """
    inner = unwrap_model(model)
    interface = getattr(inner, INTERFACE_ATTR, None)
    if not isinstance(interface, TokenInterface):
        raise InvalidInputError(
            f"{type(inner).__name__} has no token interface: convert it first with "
            "tying.hf.convert(model, tie=...) or load a converted folder with tying.hf.from_pretrained"
        )
    return interface


def conversion_report(model: nn.Module) -> ConversionReport | None:
    """The ConversionReport of a converted model (None if it has none)."""
    return getattr(unwrap_model(model), REPORT_ATTR, None)


def _teacher_matrices(adapter: Adapter, model: nn.Module) -> tuple[Tensor, Tensor, Tensor | None]:
    """E0 (V×d), U0 (V×d) and the head bias (V,) or None, detached."""
    embedding = adapter.input_embedding(model)
    head = adapter.output_head(model)
    E0 = getattr(embedding, "weight", None)
    U0 = getattr(head, "weight", None)
    if not isinstance(E0, Tensor) or E0.dim() != 2:
        raise InvalidInputError(
            f"the input embedding {type(embedding).__name__} has no (V, d) weight to convert"
        )
    if not isinstance(U0, Tensor) or U0.shape != E0.shape:
        raise InvalidInputError(
            f"the output head {type(head).__name__} must have a weight of shape {tuple(E0.shape)} "
            f"(the embedding's), got {None if U0 is None else tuple(U0.shape)}"
        )
    if E0.device.type == "meta":
        raise InvalidInputError(
            "the model's weights are on the meta device: load real weights first"
        )
    bias = getattr(head, "bias", None)
    return E0.detach(), U0.detach(), (bias.detach() if isinstance(bias, Tensor) else None)


def install_interface(
    model: nn.Module, interface: TokenInterface, adapter: Adapter, embed_scale: float
) -> None:
    """Put `interface` in `model` in place of its embedding and head, and switch off HF tying.

    Registers the interface once as `model.tying_interface`, installs the two
    wrappers through the model's set_input_embeddings/set_output_embeddings,
    sets `config.tie_word_embeddings = False` and empties the tied-weight
    mappings transformers 5 consults (`_tied_weights_keys`, `all_tied_weights_keys`).
    """
    setattr(model, INTERFACE_ATTR, interface)
    interface._is_hf_initialized = True
    adapter.set_input_embedding(model, InterfaceEmbedding(model, embed_scale))
    adapter.set_output_head(model, InterfaceHead(model))
    model.config.tie_word_embeddings = False
    text_config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    )
    if text_config is not None and text_config is not model.config:
        text_config.tie_word_embeddings = False
    for module in model.modules():
        if hasattr(module, "all_tied_weights_keys"):
            module.all_tied_weights_keys = {}
    model._tied_weights_keys = {}
    # transformers' resize would put a plain nn.Embedding back and silently drop the interface.
    model.resize_token_embeddings = _resize_unsupported


def _resize_unsupported(*args: Any, **kwargs: Any) -> None:
    """Stands in for `resize_token_embeddings` on converted models."""
    raise NotImplementedError(
        "resize_token_embeddings is not supported on a model converted by tying.hf: resize the "
        "teacher before converting (model.resize_token_embeddings(n), then tying.hf.convert)"
    )


def _record(model: nn.Module, report: ConversionReport) -> None:
    """Keep the report as `model.tying_report` and, with the interface record, in its config."""
    interface = interface_of(model)
    embed_scale = float(report.embed_scale)
    record = interface_record(interface, embed_scale)
    record["report"] = report.to_dict()
    setattr(model.config, CONFIG_KEY, record)
    setattr(model, REPORT_ATTR, report)


class TransformersKind:
    """The conversion's access to a transformers causal LM, through its family's adapter."""

    def matches(self, model: nn.Module) -> bool:
        """A model with a `config.model_type` (an unsupported one raises in `get_adapter`)."""
        return getattr(getattr(model, "config", None), "model_type", None) is not None

    def parts(self, model: nn.Module) -> ModelParts:
        """The trunk is the base model, the head the output head as it is now (soft-capped)."""
        adapter = get_adapter(model)
        base = adapter.base_model(model)
        head = adapter.output_head(model)
        cap = adapter.logit_softcap(model)

        def trunk(ids: Tensor) -> Tensor:
            return base(input_ids=ids, use_cache=False).last_hidden_state

        bias = getattr(head, "bias", None)
        return ModelParts(
            inner=model,
            trunk=trunk,
            head=lambda h: softcapped(head(h), cap),
            head_weight=head.weight.detach(),
            head_bias=bias.detach() if isinstance(bias, Tensor) else None,
            softcap=cap,
            final_norm=adapter.final_norm(model),
            norm_gain_offset=adapter.norm_gain_offset,
            interface_of=lambda: interface_of(model),
        )

    def teacher(self, model: nn.Module) -> Teacher:
        """E0, U0 and the head bias by the adapter; installs by `install_interface`.

        Raises:
            ValueError: unsupported architecture, or a model already converted.
        """
        adapter = get_adapter(model)
        if is_converted(model):
            raise InvalidInputError(
                "this model is already converted (it has model.tying_interface); export it with "
                "tying.hf.export and reload it to convert again"
            )
        E0, U0, bias = _teacher_matrices(adapter, model)
        embed_scale = float(adapter.scale_fn(model, adapter.input_embedding(model)))
        return Teacher(
            E0=E0,
            U0=U0,
            bias=bias,
            model_type=model.config.model_type,
            family=adapter.family,
            embed_scale=embed_scale,
            softcap=adapter.logit_softcap(model),
            norm_has_gain=bool(adapter.final_norm_parameters(model)),
            install=lambda interface: install_interface(model, interface, adapter, embed_scale),
            record=lambda report: _record(model, report),
        )


register_model_kind(TransformersKind())
