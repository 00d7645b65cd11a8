"""`tying.decoder`: the decoder-only transformer that reads and writes tokens through a `TokenInterface`.

- `config.ModelConfig`, `presets.PRESETS` / `preset_config`: shapes;
- `decoder.Decoder`: parallel blocks, GQA with rotary positions and a channel gate, SwiGLU;
- `params.parameter_counts`: closed-form parameter accounting.

Its transformers wrapper (`TyingConfig`, `TyingForCausalLM`, model_type "tying") lives with the
rest of the Hugging Face integration, in `tying.hf.decoder_lm`.
"""

from tying.decoder.config import ModelConfig
from tying.decoder.decoder import Decoder
from tying.decoder.params import parameter_counts
from tying.decoder.presets import PRESETS, preset_config

__all__ = [
    "PRESETS",
    "Decoder",
    "ModelConfig",
    "parameter_counts",
    "preset_config",
]
