"""`TyingConfig` (the transformers config of our decoder) declares the `ModelConfig` fields again,
as transformers reads a config's fields from its class annotations: the two lists must not drift."""

from __future__ import annotations

import dataclasses

from tying.decoder.config import ModelConfig
from tying.hf.decoder_lm import TyingConfig


def test_tying_config_mirrors_model_config_defaults() -> None:
    config = TyingConfig()
    for field in dataclasses.fields(ModelConfig):
        assert field.name in TyingConfig.__annotations__, f"TyingConfig lacks {field.name}"
        assert getattr(TyingConfig, field.name) == field.default, field.name
    assert config.to_model_config() == ModelConfig()
