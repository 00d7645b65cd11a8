"""docs/results.md §13's tables are what `python -m studies.teacher_seeds --markdown` prints of
docs/results/teacher_seeds.json: every per-seed loss, KL, gap and training time in them, and the
per-teacher summaries, are the JSON's values as the tool rounds them (so each cell is checked
against its own key, whatever docs/numbers.yaml ties its text to elsewhere on the page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies import teacher_seeds as S

ROOT = Path(__file__).resolve().parents[2]
DATA = json.loads((ROOT / "docs" / "results" / "teacher_seeds.json").read_text())


def _section_13() -> str:
    page = (ROOT / "docs" / "results.md").read_text()
    start = page.index("\n## 13. ")
    return page[start : page.index("\n## 14. ", start)]


@pytest.mark.parametrize("index", range(5))
def test_each_table_of_section_13_is_the_tools_output(index):
    tables = S.markdown(DATA).split("\n\n")
    assert len(tables) == 5
    assert tables[index] in _section_13(), (
        "rerun `python -m studies.teacher_seeds --markdown` and paste its tables into §13"
    )


def test_a_changed_value_changes_its_table():
    data = json.loads(json.dumps(DATA))
    data["teachers"]["gpt2"]["units"][3]["tt"]["val_loss"] += 0.001
    assert S.markdown(data).split("\n\n")[0] not in _section_13()
