"""The `tying probe` verb, block errors, skips, and the corpus counter."""

from __future__ import annotations

import base64
import json
import re

import pytest
import torch

from tying.cli import main
from tying.data.tokenizer import load_tokenizer
from tying.probe import parse_skip
from tying.probe.corpus import corpus_token_counts


def _run(argv: list[str]) -> int:
    return main(["probe", *argv])


def test_cli_writes_json_markdown_and_plots(tt_run, probe_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "probe"
    argv = [str(tt_run), "--out", str(out), "--corpus", str(probe_corpus["val"])]
    assert _run([*argv, "--corpus-tokens", "3000"]) == 0
    captured = capsys.readouterr()
    assert "consistency:" in captured.err and "wrote" in captured.out
    report = json.loads((out / "probe.json").read_text())
    assert report["norm_frequency"]["tokens"] == 3000 and report["norm_frequency"]["capped"]
    markdown = (out / "probe.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert sorted(links) == sorted(report["plots"].values())
    for link in links:
        assert (out / link).read_bytes()[:4] == b"\x89PNG"
    assert "| delta_ti | unitless, ‖W_out E − I‖_F | " in markdown
    assert "## Drift across checkpoints" in markdown and "Error" not in markdown
    # probe.html: the same document, self-contained: every plot embedded byte for byte
    assert str(out / "probe.html") in captured.out
    page = (out / "probe.html").read_text()
    embedded = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([^"]+)">', page)
    assert sorted(base64.b64decode(e) for e in embedded) == sorted(
        (out / name).read_bytes() for name in report["plots"].values()
    )
    assert "Drift across checkpoints" in page and 'src="drift.png"' not in page
    assert report["params"]["embedding"] == 300 * 256  # V·d of the tiny TT run
    assert (
        '<td class="num">76,800</td>' in page and "| 76,800 |" in markdown
    )  # thousands separators


def test_cli_rejects_bad_arguments(tt_run, tmp_path, capsys) -> None:
    assert _run([str(tt_run), "--out", str(tmp_path), "--skip", "nonsense"]) == 2
    assert "unknown block 'nonsense'" in capsys.readouterr().err
    assert _run([str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert _run([str(tt_run), "--out", str(tmp_path), "--k", "0"]) == 2
    assert _run([str(tt_run), "--out", str(tmp_path), "--threads", "0"]) == 2
    assert _run([str(tt_run), "--out", str(tmp_path), "--corpus", str(tmp_path / "no.txt")]) == 2
    assert "no.txt" in capsys.readouterr().err
    assert not (tmp_path / "probe.json").exists()


def test_failing_block_is_reported_and_others_still_run(llamas, tmp_path, capsys) -> None:
    """V = 24 < d = 32: consistency cannot be computed; params, spectra still are."""
    out = tmp_path / "small"
    assert _run([str(llamas["small"]), "--out", str(out), "--skip", "norms"]) == 1
    report = json.loads((out / "probe.json").read_text())
    assert "V >= d" in report["consistency"]["error"]
    assert report["errors"] == ["consistency"]
    assert report["params"]["embedding"] == 24 * 32
    assert report["spectra"]["E"]["condition_number"] is None  # rank <= V < d: sigma_min = 0
    assert "**Error:**" in (out / "probe.md").read_text()
    assert "<strong>Error:</strong> <code>" in (out / "probe.html").read_text()
    assert "1 block(s) failed: consistency" in capsys.readouterr().err


def test_parse_skip_accepts_lists_commas_and_aliases() -> None:
    assert parse_skip(["knn,spectral", "norms"]) == {
        "knn_overlap",
        "spectral_distance",
        "norm_frequency",
    }
    assert parse_skip(None) == frozenset()
    with pytest.raises(ValueError, match="unknown block"):
        parse_skip("knn,foo")


def test_corpus_counts_are_exact_and_capped(probe_corpus) -> None:
    tok = load_tokenizer(probe_corpus["tokenizer"])
    full, info = corpus_token_counts(str(probe_corpus["val"]), tok, 320)
    assert not info["capped"] and int(full.sum()) == info["tokens"]
    assert full[300:].sum() == 0  # rows past the tokenizer (padded model rows) stay at 0
    capped, info_c = corpus_token_counts(str(probe_corpus["val"]), tok, 320, max_tokens=1234)
    assert info_c["capped"] and int(capped.sum()) == 1234
    assert bool((capped <= full).all())
    with pytest.raises(ValueError, match="max_tokens"):
        corpus_token_counts(str(probe_corpus["val"]), tok, 320, max_tokens=0)


def test_corpus_pieces_cover_long_documents(tmp_path) -> None:
    from tying.probe.corpus import PIECE_CHARS, _pieces

    text = ("word " * 50 + "\n\n") * (3 * PIECE_CHARS // 250)
    pieces = list(_pieces(text))
    assert "".join(pieces) == text
    assert len(pieces) > 2 and max(len(p) for p in pieces) <= PIECE_CHARS
    assert all(p.startswith("\n\n") for p in pieces[1:])
    assert torch.tensor([len(p) for p in pieces]).sum() == len(text)
