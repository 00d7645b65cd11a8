"""Closed-form parameter accounting against instantiated modules, and the `params` verb."""

from __future__ import annotations

import json

import pytest
import torch

from tying.cli import main
from tying.decoder.config import ModelConfig
from tying.decoder.decoder import Decoder
from tying.decoder.params import count_stored, parameter_counts
from tying.decoder.presets import PRESETS, preset_config

TIES = ("untied", "tt", "pit")


def _closed_form(cfg: ModelConfig) -> int:
    """The formula written out once more, independently of tying.decoder.params."""
    d, V, L, f, kv = (
        cfg.d_model,
        cfg.vocab_size,
        cfg.n_layers,
        cfg.d_ff,
        cfg.n_kv_heads * cfg.head_dim,
    )
    per_layer = (d * d + 2 * d * kv + d * d + d) + 3 * d * f + d
    emb = {"untied": 2 * V * d, "tt": V * d, "pit": V * d + d * (d + 1) // 2}[cfg.tie]
    return L * per_layer + d + emb


@pytest.mark.parametrize("tie", TIES)
@pytest.mark.parametrize(("preset", "norm"), [("tiny", "rms"), ("tiny", "layer"), ("mini", "rms")])
def test_closed_form_equals_instantiated_module(preset: str, tie: str, norm: str) -> None:
    cfg = preset_config(preset, vocab_size=1024, tie=tie, norm=norm)
    model = Decoder(cfg)
    counts = parameter_counts(cfg)
    assert counts["total"] == _closed_form(cfg)
    assert model.num_parameters() == counts["total"]
    # Every stored element, shared storage once, the frozen PIT buffer Z included.
    stored = count_stored(model)
    assert stored == counts["stored_total"]
    if tie == "pit":
        assert "z" in dict(model.interface.named_buffers())
        assert (
            stored - counts["total"] == cfg.d_model * (cfg.d_model - 1) // 2
        )  # unused upper triangle of L
    else:
        assert stored == sum(p.numel() for p in model.parameters())  # no buffer counted twice
    assert counts["embedding"] == model.interface.num_parameters()
    assert counts["non_embedding"] + counts["embedding"] == counts["total"]
    assert counts["embedding_share"] == pytest.approx(counts["embedding"] / counts["total"])


def test_tt_storage_is_shared_between_input_and_output() -> None:
    model = Decoder(preset_config("tiny", vocab_size=512, tie="tt"))
    iface = model.interface
    assert iface.embedding_matrix().data_ptr() == iface.unembedding_matrix().data_ptr()
    assert parameter_counts(model.config)["tying_saves"] == 512 * 256


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_on_meta_device_match_the_closed_form(preset: str) -> None:
    for tie in TIES:
        for vocab in (32000, 50257):
            assert parameter_counts(preset_config(preset, vocab_size=vocab, tie=tie))["total"] == (
                _closed_form(preset_config(preset, vocab_size=vocab, tie=tie))
            )
        cfg = preset_config(preset, vocab_size=50257, tie=tie)
        with torch.device("meta"):
            model = Decoder(cfg)  # shapes only: nothing is allocated or drawn
        counts = parameter_counts(cfg)
        assert model.num_parameters() == counts["total"]
        assert count_stored(model) == counts["stored_total"]


def test_table_3_totals_at_v32000_with_tt() -> None:
    """The paper's quoted totals (rounded) are reproduced with V = 32,000 and the embedding counted once."""
    quoted = {"small": 133e6, "medium": 303e6, "large": 613e6, "xl": 1.17e9}
    for name, total in quoted.items():
        got = parameter_counts(preset_config(name, vocab_size=32000, tie="tt"))["total"]
        digits = 3  # the quoted numbers have 3 significant digits
        assert float(f"{got:.{digits}g}") == total, (name, got)


def _run_verb(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["params", *argv])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("tie", TIES)
def test_params_verb_json_matches_closed_form(tie: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run_verb(["small", "--vocab", "32000", "--tie", tie, "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    cfg = preset_config("small", vocab_size=32000, tie=tie)
    assert data["total"] == _closed_form(cfg)
    assert data["embedding"] == parameter_counts(cfg)["embedding"]
    assert data["embedding_share"] == pytest.approx(data["embedding"] / data["total"])


def test_params_verb_table_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _run_verb(["tiny", "--vocab", "1000"], capsys)
    assert code == 0 and "total" in out and "embedding share" in out
    code, _ = _run_verb(["huge"], capsys)
    assert code == 2
