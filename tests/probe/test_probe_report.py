"""probe.md / probe.html from a probe.json dict: one Document, tables with units, figures."""

from __future__ import annotations

import base64
import re

import pytest

from tying.probe.report import build_document, render_markdown, write_probe_documents
from tying.report import Table

MODEL = {
    "spec": "runs/x",
    "name": "x",
    "kind": "run",
    "vocab_size": 49152,
    "d_model": 576,
    "tie": "tt",
    "interface": "TransposeTying",
    "n_layers": 30,
    "embed_scale": 1.0,
    "final_norm_gain": True,
    "tokenizer": "smollm2",
    "shares_matrix": True,
}
DRIFT = {
    "steps": [2, 4, 6],
    "E": {"to_first": [1.0, 0.999998, 0.999997], "to_previous": [0.999998, 0.999999]},
    "U": {"to_first": [1.0, 0.999998, 0.999997], "to_previous": [0.999998, 0.999999]},
}


def _png(path) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1, 1))
    fig.subplots().plot([0, 1])
    fig.savefig(path)
    return path.read_bytes()


def test_probe_document_tables_and_figures(tmp_path) -> None:
    png = _png(tmp_path / "drift.png")
    data = {
        "model": MODEL,
        "drift": DRIFT,
        "params": {"error": "boom <V < d>"},
        "plots": {"drift": "drift.png"},
        "timings_s": {"load": 1.5, "total": 12.25},
    }
    doc = build_document(data, tmp_path)
    assert [s.title for s in doc.sections] == [
        "Model",
        "Parameters (bias paper, Appendix A)",
        "Drift across checkpoints (bias paper §5.1)",
        "Timings",
    ]
    drift = next(b for b in doc.sections[2].blocks if isinstance(b, Table))
    # a drift of 3e-6 stays visible: 7 significant digits, not "1"
    assert drift.cells() == [
        ["2", "1", "–", "1", "–"],
        ["4", "0.999998", "0.999998", "0.999998", "0.999998"],
        ["6", "0.999997", "0.999999", "0.999997", "0.999999"],
    ]
    model = next(b for b in doc.sections[0].blocks if isinstance(b, Table)).cells()
    assert ["vocabulary size V (tokens)", "49,152"] in model and ["blocks", "30"] in model
    md_path, html_path = write_probe_documents(data, tmp_path)
    md = md_path.read_text()
    assert md == render_markdown(data, tmp_path)
    assert "![drift curves" in md and "](drift.png)" in md
    assert "**Error:** `boom <V < d>`" in md
    page = html_path.read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert [base64.b64decode(e) for e in embedded] == [png]
    assert "<strong>Error:</strong> <code>boom &lt;V &lt; d&gt;</code>" in page
    assert "E and U are one matrix" in page


def test_missing_plot_writes_neither_file(tmp_path) -> None:
    data = {"model": MODEL, "drift": DRIFT, "plots": {"drift": "drift.png"}}
    with pytest.raises(FileNotFoundError, match="drift.png"):
        write_probe_documents(data, tmp_path)
    assert not (tmp_path / "probe.md").exists() and not (tmp_path / "probe.html").exists()
