"""docs/updates-design.md quotes docs/results/update_power.json (studies/update_power.py): every
power, sd and unit count of its table, and the first-look ratios, are the JSON's."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "updates-design.md").read_text()
DATA = json.loads((ROOT / "docs" / "results" / "update_power.json").read_text())


def _table_rows() -> list[list[str]]:
    rows = [line for line in PAGE.splitlines() if re.match(r"\| (1\.25|1\.5|2)× \|", line)]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_power_table_is_the_json() -> None:
    rows = _table_rows()
    assert len(rows) == 5
    by_sd = {round(b["sd_log"], 2): b for b in DATA["table"].values()}
    for ratio, sd, *powers, units in rows:  # quoted with 2 decimals (format .2f)
        block = by_sd[float(sd)]["effects"][ratio.replace("×", "x")]
        for n, quoted in zip(("6", "8", "10", "12", "16"), powers, strict=True):
            assert quoted == f"{block['power'][n]:.2f}", (ratio, sd, n)
        expected = block["units_for_80_percent"]
        assert units == (
            f"> {max(map(int, block['power']))}" if expected is None else str(expected)
        )


def test_first_look_ratios_are_the_json() -> None:
    values = DATA["primary_values"]
    for task in ("mbpp", "gsm8k"):
        difference = values["pit"][task] - values["tt"][task]
        assert f"{difference:+.3f}".replace("-", "−") in PAGE
        assert f"{math.exp(difference):.2f}×" in PAGE
    assert f"{DATA['sd_estimate_log']:.2f}" in PAGE


def test_the_result_quoted_is_update_units_json():
    units = json.loads((ROOT / "docs" / "results" / "update_units.json").read_text())
    (comparison,) = units["update_units"]["comparisons"]
    primary = comparison["primary"]
    lo, hi = primary["ratio_ci95"]
    assert (
        f"metric {primary['ratio']:.2f} (95 % {lo:.2f}–{hi:.2f}, exact sign-flip p "
        f"{primary['sign_flip']['p']:.3f} over {primary['n']} units)"
    ) in " ".join(PAGE.split())
    holm = {f"{s['p_holm']:.3f}" for s in comparison["secondary"].values()}
    assert len(holm) == 1 and len(comparison["secondary"]) == 6  # the page says "each of six"
    assert f"p {holm.pop()} for each of its six tests" in " ".join(PAGE.split())


def test_interface_power_table_is_the_json():
    """The power table of "Updates that touch the interface" is
    docs/results/interface_update_power.json (studies/interface_update_power.py), cell by cell."""
    data = json.loads((ROOT / "docs" / "results" / "interface_update_power.json").read_text())
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in PAGE.splitlines()
        if line.startswith("| ratio ")
    ]
    assert len(rows) == 6
    by_sd = {f"{b['sd_log']:.3g}": b for b in data["table"].values()}
    assert set(by_sd) == {f"{data['sd_paired']:.3g}", f"{2 * data['sd_paired']:.3g}"}
    for ratio, sd, alpha, *powers, units in rows:
        row = by_sd[sd]["ratios"][ratio.removeprefix("ratio ")]
        for n, quoted in zip(("8", "10", "12"), powers, strict=True):
            assert quoted == f"{row['power'][alpha][n]:.2f}", (ratio, sd, alpha, n)
        expected = row["units_for_80_percent"]
        if units != "—":
            assert units.removesuffix(" (α 0.05)") == (
                f"> {data['max_units']}" if expected is None else str(expected)
            ), (ratio, sd, units)
