"""ModelConfig validation, derived sizes, JSON round trip, presets."""

from __future__ import annotations

import json

import pytest

from tying.decoder.config import ModelConfig, swiglu_width
from tying.decoder.presets import PRESETS, preset_config


def test_derived_sizes_follow_the_rules() -> None:
    cfg = ModelConfig(vocab_size=300, d_model=512, n_layers=2)
    assert cfg.n_heads == 512 // 64
    assert cfg.n_kv_heads == cfg.n_heads // 4
    assert cfg.d_ff % 256 == 0 and cfg.d_ff >= 8 * 512 / 3 > cfg.d_ff - 256
    assert ModelConfig(vocab_size=300, d_model=128, n_layers=1).n_kv_heads == 1  # 2 heads -> min 1


@pytest.mark.parametrize("d", [128, 256, 384, 512, 768, 1024, 1280, 1600, 2048])
def test_swiglu_width_is_the_smallest_multiple_of_256_at_or_above_8d_over_3(d: int) -> None:
    f = swiglu_width(d)
    assert f % 256 == 0
    assert 3 * f >= 8 * d > 3 * (f - 256)


def test_dict_round_trip_is_json_able() -> None:
    cfg = ModelConfig(vocab_size=300, d_model=128, n_layers=2, tie="pit", pit_diag_clamp=(0.5, 2.0))
    data = json.loads(json.dumps(cfg.to_dict()))
    assert ModelConfig.from_dict(data) == cfg


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"d_model": 100}, "not divisible by head_dim"),
        ({"d_model": 256, "n_heads": 4, "n_kv_heads": 3}, "not divisible by n_kv_heads"),
        ({"d_model": 256, "n_heads": 3}, "n_heads \\* head_dim must equal d_model"),
        ({"tie": "both"}, "tie must be one of"),
        ({"norm": "batch"}, "norm must be one of"),
        ({"head_dim": 33, "d_model": 66}, "even"),
        ({"n_layers": 0}, "n_layers must be a positive integer"),
        ({"init_std": -1.0}, "init_std"),
        ({"tie": "untied", "input_grad_scale": 2.0}, "tie='tt' only"),
        ({"tie": "tt", "pit_trainable_z": True}, "tie='pit' only"),
        ({"tie": "pit", "pit_diag_clamp": (2.0, 1.0)}, "pit_diag_clamp"),
        ({"tie": "pit", "vocab_size": 64, "d_model": 128}, "vocab_size >= d_model"),
    ],
)
def test_bad_configs_raise_clear_errors(kwargs: dict, match: str) -> None:
    base = {"vocab_size": 300, "d_model": 128, "n_layers": 2}
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**base, **kwargs})


def test_from_dict_rejects_unknown_keys() -> None:
    with pytest.raises(ValueError, match="unknown ModelConfig keys"):
        ModelConfig.from_dict({"d_model": 128, "dropout": 0.1})


def test_presets_match_table_3_and_the_8_3_rule() -> None:
    table3 = {
        "small": (16, 768, 2304),
        "medium": (24, 1024, 2816),
        "large": (32, 1280, 3584),
        "xl": (40, 1600, 4480),
    }
    for name, (L, d, f) in table3.items():
        cfg = preset_config(name)
        assert (cfg.n_layers, cfg.d_model, cfg.d_ff) == (L, d, f)
        assert cfg.n_heads * cfg.head_dim == cfg.d_model
        assert cfg.n_heads == 4 * cfg.n_kv_heads  # GQA group 4 everywhere (kv width d/4)
    for name, (L, d) in {"tiny": (4, 256), "mini": (8, 512)}.items():
        cfg = preset_config(name)
        assert (cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.head_dim) == (L, d, swiglu_width(d), 64)
    # medium and large agree with the 8/3 rule; small does not (documented choice).
    assert preset_config("medium").d_ff == swiglu_width(1024)
    assert preset_config("large").d_ff == swiglu_width(1280)
    assert preset_config("small").d_ff != swiglu_width(768)


def test_preset_overrides_and_unknown_name() -> None:
    cfg = preset_config("tiny", vocab_size=1000, tie="pit")
    assert (cfg.vocab_size, cfg.tie) == (1000, "pit")
    with pytest.raises(ValueError, match="choose one of") as err:
        preset_config("huge")
    for name in PRESETS:
        assert name in str(err.value)
