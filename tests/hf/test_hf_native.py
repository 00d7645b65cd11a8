"""Native save_pretrained / tying.hf.from_pretrained round trip (PIT stores only Z and L)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tying.hf import (
    InterfaceEmbedding,
    conversion_report,
    convert,
    from_pretrained,
    interface_of,
    is_converted_folder,
    load,
)
from tying.interface import PseudoInverseTying, TransposeTying
from tying.loader import load_for_export


def _logits(model, ids):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize(
    ("family", "tie"), [("llama", "pit"), ("gemma3", "pit"), ("gpt_neox", "tt")]
)
def test_round_trip_is_exact(family: str, tie: str, tiny, tmp_path: Path) -> None:
    model = tiny.model(family, tied=True)
    options = {"trainable_z": True, "diag_activation": "softplus"} if tie == "pit" else {}
    report = convert(model, tie, **options)
    ids = tiny.ids()
    model.save_pretrained(tmp_path)
    tiny.tokenizer().save_pretrained(tmp_path)
    assert is_converted_folder(tmp_path)

    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        keys = set(f.keys())
    interface_keys = {k for k in keys if k.startswith("tying_interface.")}
    if tie == "pit":  # only Z and L: no materialized E or W_out
        assert interface_keys == {"tying_interface.z", "tying_interface.l_param"}
    else:
        assert interface_keys == {"tying_interface.weight"}
    assert not any(
        k.endswith(("embed_tokens.weight", "embed_in.weight", "lm_head.weight")) for k in keys
    )

    loaded = from_pretrained(tmp_path).eval()
    interface = interface_of(loaded)
    assert type(interface) is type(interface_of(model))
    for key, value in interface_of(model).state_dict().items():
        torch.testing.assert_close(interface.state_dict()[key], value, rtol=0, atol=0)
    if tie == "pit":
        assert isinstance(interface, PseudoInverseTying)
        assert interface.trainable_z and interface.diag_activation == "softplus"
    else:
        assert isinstance(interface, TransposeTying)
    assert isinstance(loaded.get_input_embeddings(), InterfaceEmbedding)
    assert loaded.get_input_embeddings().embed_scale == report.embed_scale
    assert conversion_report(loaded) == report
    assert loaded.config.tie_word_embeddings is False
    torch.testing.assert_close(_logits(loaded, ids), _logits(model, ids), rtol=0, atol=0)
    # the generic loaders route converted folders through from_pretrained
    via_load, tokenizer = load(tmp_path)
    assert len(tokenizer) == tiny.VOCAB
    torch.testing.assert_close(_logits(via_load, ids), _logits(model, ids), rtol=0, atol=0)
    via_export, _ = load_for_export(tmp_path)
    assert type(interface_of(via_export)) is type(interface)


def test_from_pretrained_dtype(tiny, tmp_path: Path) -> None:
    model = tiny.model("qwen3")
    convert(model, "pit")
    model.save_pretrained(tmp_path)
    loaded = from_pretrained(tmp_path, dtype=torch.float64)
    assert interface_of(loaded).z.dtype == torch.float64
    assert next(loaded.model.layers.parameters()).dtype == torch.float64
    ids = tiny.ids()
    assert tiny.rel(_logits(loaded, ids).float(), _logits(model, ids)) < 1e-4


def test_errors_on_plain_folders(tiny, tmp_path: Path) -> None:
    tiny.model("llama").save_pretrained(tmp_path)
    assert not is_converted_folder(tmp_path)
    with pytest.raises(ValueError, match="not saved from a converted model"):
        from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="neither a converted model folder"):
        load_for_export(tmp_path)
    with pytest.raises(FileNotFoundError):
        from_pretrained(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        load_for_export(tmp_path / "missing")
    plain, tokenizer = load(tmp_path)  # a plain folder loads as a plain model, no tokenizer files
    assert tokenizer is None and not hasattr(plain, "tying_interface")
