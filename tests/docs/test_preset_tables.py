"""docs/model.md's preset tables are generated from PRESETS and the closed-form counts
(tests/decoder/test_decoder_params.py checks those counts against built models)."""

from __future__ import annotations

import pytest

from studies import preset_tables as P


def test_the_page_holds_the_generated_tables() -> None:
    page = P.PAGE.read_text(encoding="utf-8")
    assert f"{P.BEGIN}\n{P.render()}\n{P.END}" in page, (
        "rerun python -m studies.preset_tables --write"
    )


def test_write_is_idempotent(tmp_path) -> None:
    page = tmp_path / "model.md"
    page.write_text(f"before\n{P.BEGIN}\nold\n{P.END}\nafter\n", encoding="utf-8")
    P.write(page)
    once = page.read_text(encoding="utf-8")
    P.write(page)
    assert page.read_text(encoding="utf-8") == once
    assert once.startswith("before\n") and once.endswith("after\n") and "old" not in once


def test_a_page_without_the_markers_is_refused(tmp_path) -> None:
    page = tmp_path / "model.md"
    page.write_text(f"{P.END}\nno begin marker\n{P.BEGIN}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no generated block"):
        P.write(page)
    assert page.read_text(encoding="utf-8") == f"{P.END}\nno begin marker\n{P.BEGIN}\n"
