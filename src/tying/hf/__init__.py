"""Hugging Face integration: convert, export and load transformers causal LMs.

    model, tokenizer = tying.hf.load("smollm2")            # or a folder, a .gguf, a hub id
    report = tying.hf.convert(model, "pit", tokenizer=tokenizer)
    tying.hf.interface_of(model)                             # the PseudoInverseTying
    model.save_pretrained(d); tying.hf.from_pretrained(d)   # native: stores Z and L only
    tying.hf.export(model, out, tokenizer)                   # plain transformers checkpoint

See docs/hf.md.
"""

from tying.hf.adapters import ADAPTERS, Adapter, get_adapter, supported_model_types
from tying.hf.causal_lm import HFCausalLM
from tying.hf.convert import (
    DEFAULT_T_INIT,
    ConversionReport,
    conversion_report,
    convert,
    interface_of,
    is_converted,
)
from tying.hf.export import export, load_for_export
from tying.hf.loading import NAMED_MODELS, load, named_model_path
from tying.hf.modules import InterfaceEmbedding, InterfaceHead
from tying.hf.native import from_pretrained, is_converted_folder

__all__ = [
    "ADAPTERS",
    "DEFAULT_T_INIT",
    "NAMED_MODELS",
    "Adapter",
    "ConversionReport",
    "HFCausalLM",
    "InterfaceEmbedding",
    "InterfaceHead",
    "conversion_report",
    "convert",
    "export",
    "from_pretrained",
    "get_adapter",
    "interface_of",
    "is_converted",
    "is_converted_folder",
    "load",
    "load_for_export",
    "named_model_path",
    "supported_model_types",
]
