"""docs/results.md §16 is what `python -m studies.interface_updates --write` makes of
docs/results/interface_updates.json, and the JSON's comparisons are the declared code's
(`update_units.compare_units`) on its own unit records, with Holm over the primary tests."""

from __future__ import annotations

import json

import pytest

from studies import ROOT
from studies.interface_updates import (
    BLOCK,
    RESULTS_PAGE,
    choose_seeds,
    comparisons,
    markdown,
    seeds_rule_pending,
)

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


def _rule(sds: dict, seeds: range) -> dict:
    return {"sd_limit": 0.15, "sd_over_seeds_0_7": sds, "seeds_read": list(seeds)}


def test_the_seeds_rule_reads_seeds_0_to_7_only_when_both_sds_are_within_the_limit() -> None:
    assert seeds_rule_pending(_rule({"a": 0.1, "b": 0.15}, range(8))) is None
    over = seeds_rule_pending(_rule({"a": 0.1, "b": 0.2}, range(8)))
    assert over is not None and "(b) 0.200" in over and "(a)" not in over
    unknown = seeds_rule_pending(_rule({"a": 0.1, "b": None}, range(8)))
    assert unknown is not None and "(b)" in unknown
    assert seeds_rule_pending(_rule({"a": 0.3, "b": 0.2}, range(12))) is None
    assert seeds_rule_pending(_rule({"a": 0.3, "b": 0.2}, range(11))) is not None


def test_no_test_is_read_while_the_rule_waits_for_seeds(data: dict) -> None:
    waiting = json.loads(json.dumps(data))
    waiting["seeds_rule"] = _rule({"a": 0.3, "b": None}, range(8))
    for update in waiting["updates"].values():
        for c in update["comparisons"]:
            if "primary" in c:
                c["primary"]["n"] = 8
    text = markdown(waiting)
    verdicts = [line for line in text.splitlines() if line.startswith("Primary:")]
    assert verdicts and all("not read as a test: the sd" in v for v in verdicts)


def test_an_update_missing_a_seed_of_0_to_7_has_no_sd_yet(data: dict) -> None:
    bases = [u for u in data["units"] if u["update"] == "a"]
    sd = choose_seeds({"a": {"update_units": {"bases": bases}}})[1]["a"]
    assert sd == pytest.approx(data["seeds_rule"]["sd_over_seeds_0_7"]["a"])
    short = [u for u in bases if u["base_seed"] != 7]
    assert choose_seeds({"a": {"update_units": {"bases": short}}})[1]["a"] is None
