"""`TyingConfig` (the transformers config of our decoder) declares the `ModelConfig` fields from
the dataclass itself (`model_config_fields`): the two field lists, their defaults and their
types (tuples as JSON lists) cannot drift."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from tying.decoder.config import ModelConfig
from tying.hf.decoder_lm import TyingConfig, json_type, model_config_fields


def test_tying_config_declares_every_model_config_field() -> None:
    config = TyingConfig()
    hints = typing.get_type_hints(ModelConfig)
    tying_fields = {f.name: f for f in dataclasses.fields(TyingConfig)}
    for field in dataclasses.fields(ModelConfig):
        assert field.name in tying_fields, f"TyingConfig lacks {field.name}"
        assert tying_fields[field.name].default == field.default, field.name
        assert tying_fields[field.name].type == json_type(hints[field.name]), field.name
    assert config.to_model_config() == ModelConfig()


def test_tuples_are_declared_as_lists() -> None:
    assert json_type(tuple[float, float] | None) == list[float] | None
    assert json_type(tuple[int, ...]) == list[int]
    assert json_type(int | None) == int | None
    pit = TyingConfig(tie="pit", vocab_size=300, d_model=64, pit_diag_clamp=(0.1, 10.0))
    assert pit.pit_diag_clamp == [0.1, 10.0]
    assert pit.to_model_config().pit_diag_clamp == (0.1, 10.0)


def test_a_new_model_config_field_reaches_the_transformers_config() -> None:
    """The namespace is derived, not written out: a field added to the dataclass appears."""

    @dataclasses.dataclass
    class Grown(ModelConfig):
        extra_clamp: tuple[float, float] | None = (1.0, 2.0)
        extra_list: list[int] = dataclasses.field(default_factory=lambda: [3])

    namespace = model_config_fields(Grown)
    assert namespace["extra_clamp"] == (1.0, 2.0)
    assert namespace["__annotations__"]["extra_clamp"] == list[float] | None
    assert namespace["extra_list"].default_factory() == [3]
    assert set(namespace["__annotations__"]) == {f.name for f in dataclasses.fields(Grown)}


def test_a_field_without_default_is_refused() -> None:
    @dataclasses.dataclass
    class NoDefault:
        width: int

    with pytest.raises(TypeError, match="no default"):
        model_config_fields(NoDefault)
