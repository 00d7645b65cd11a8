"""`tying.model`: the decoder-only transformer that reads and writes tokens through a `TokenInterface`.

- `config.ModelConfig`, `presets.PRESETS` / `preset_config`: shapes;
- `decoder.Decoder`: parallel blocks, GQA with rotary positions and a channel gate, SwiGLU;
- `params.parameter_counts`: closed-form parameter accounting;
- `hf.TyingConfig` / `hf.TyingForCausalLM`: the transformers wrapper, registered with
  `AutoConfig` / `AutoModelForCausalLM` (model_type "tying") when this package is imported.
"""

from tying.model.config import ModelConfig
from tying.model.decoder import Decoder
from tying.model.hf import TyingConfig, TyingForCausalLM, register_auto
from tying.model.params import parameter_counts
from tying.model.presets import PRESETS, preset_config

register_auto()

__all__ = [
    "PRESETS",
    "Decoder",
    "ModelConfig",
    "TyingConfig",
    "TyingForCausalLM",
    "parameter_counts",
    "preset_config",
    "register_auto",
]
