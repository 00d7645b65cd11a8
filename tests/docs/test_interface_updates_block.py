"""docs/results.md §16 is what `python -m studies.interface_updates --write` makes of
docs/results/interface_updates.json, and the JSON's comparisons are the declared code's
(`update_units.compare_units`) on its own unit records, with Holm over the primary tests."""

from __future__ import annotations

import json
import math

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
        assert _differences(again, update["comparisons"], key) == []


def _differences(again, stored, where: str) -> list[str]:
    """Where two JSON values differ: structure, strings and integers exactly, floats to a
    relative 1e-9 (another numpy or libm may round a sum or an exp otherwise in the last bit;
    Python 3.12 with numpy 2 on a GPU machine did)."""
    if isinstance(stored, dict) and isinstance(again, dict):
        if again.keys() != stored.keys():
            return [f"{where}: keys {sorted(again)} != {sorted(stored)}"]
        return [d for k in stored for d in _differences(again[k], stored[k], f"{where}.{k}")]
    if isinstance(stored, list) and isinstance(again, list):
        if len(again) != len(stored):
            return [f"{where}: {len(again)} items != {len(stored)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(again, stored))
            for d in _differences(x, y, f"{where}[{i}]")
        ]
    if isinstance(stored, float) and isinstance(again, float | int) and not isinstance(again, bool):
        return (
            []
            if math.isclose(again, stored, rel_tol=1e-9, abs_tol=1e-15)
            else [f"{where}: {again!r} != {stored!r}"]
        )
    return (
        []
        if again == stored and type(again) is type(stored)
        else [f"{where}: {again!r} != {stored!r}"]
    )


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
