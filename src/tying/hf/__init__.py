"""Hugging Face integration: convert, export and load transformers causal LMs.

    model, tokenizer = tying.hf.load("smollm2")            # or a folder, a .gguf, a hub id
    report = tying.hf.convert(model, "pit", tokenizer=tokenizer)
    tying.hf.interface_of(model)                             # the PseudoInverseTying
    model.save_pretrained(d); tying.hf.from_pretrained(d)   # native: stores Z and L only
    tying.hf.export(model, out, tokenizer)                   # plain transformers checkpoint
    tying.hf.TyingForCausalLM(tying.hf.TyingConfig(...))     # tying's decoder as a transformers model

`convert` is `tying.conversion.convert` (the conversion pipeline); importing `tying.hf` lets
it read transformers models (`tying.hf.convert.TransformersKind`). See docs/hf.md.
"""

from tying.conversion import DEFAULT_T_INIT, ConversionReport
from tying.hf.causal_lm import HFCausalLM
from tying.hf.convert import conversion_report, convert, interface_of, is_converted
from tying.hf.decoder_lm import TyingConfig, TyingForCausalLM, register_auto
from tying.hf.export import export
from tying.hf.families import ADAPTERS, Adapter, get_adapter, supported_model_types
from tying.hf.loading import NAMED_MODELS, load, named_model_path
from tying.hf.modules import InterfaceEmbedding, InterfaceHead
from tying.hf.native import from_pretrained, is_converted_folder

register_auto()


def __getattr__(name: str) -> object:
    if name == "load_for_export":  # moved to the loader layer (hf imports nothing of train)
        from tying._compat import moved_attribute

        return moved_attribute("tying.hf", name, "tying.loader")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ADAPTERS",
    "DEFAULT_T_INIT",
    "NAMED_MODELS",
    "Adapter",
    "ConversionReport",
    "HFCausalLM",
    "InterfaceEmbedding",
    "InterfaceHead",
    "TyingConfig",
    "TyingForCausalLM",
    "conversion_report",
    "convert",
    "export",
    "from_pretrained",
    "get_adapter",
    "interface_of",
    "is_converted",
    "is_converted_folder",
    "load",
    "named_model_path",
    "supported_model_types",
]
