"""docs/results.md §16 is what `python -m studies.interface_updates --write` makes of
docs/results/interface_updates.json, and the JSON's comparisons are the declared code's
(`update_units.compare_units`) on its own unit records, with Holm over the primary tests."""

from __future__ import annotations

import json

import pytest

from studies import ROOT
from studies.interface_updates import BLOCK, RESULTS_PAGE, comparisons, markdown

DATA = ROOT / "docs" / "results" / "interface_updates.json"


@pytest.fixture(scope="module")
def data() -> dict:
    return json.loads(DATA.read_text())


def test_the_results_block_is_generated_from_the_json(data: dict) -> None:
    block = BLOCK.search(RESULTS_PAGE.read_text())
    assert block is not None
    inner = block.group(0)[len(block.group(1)) : -len(block.group(2))]
    assert inner == markdown(data)


def test_the_comparisons_recompute_from_the_stored_units(data: dict) -> None:
    for key, update in data["updates"].items():
        records = [u for u in data["units"] if u["update"] == key and u["analysed"]]
        pairs = [[c["control"], c["treatment"]] for c in update["comparisons"]]
        outside = [n for c in update["comparisons"] for n in c.get("reported", {})]
        again = json.loads(json.dumps(comparisons(records, pairs, sorted(set(outside)))))
        assert again == update["comparisons"], key


def test_every_unit_names_its_interface_seed_and_update(data: dict) -> None:
    assert data["units"], "no unit recorded"
    for unit in data["units"]:
        assert unit["update"] in ("a", "b") and unit["tie"] in ("untied", "tt", "pit")
        assert isinstance(unit["base_seed"], int) and unit["step"] in (10, 40)
        assert set(unit["kl"]) == {"wikitext-2", "gutenberg-validation"}
