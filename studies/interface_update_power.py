"""Power of the interface-update experiment (docs/updates-design.md, "Updates that touch the
interface", issue 36 item 3), from the variance of §14's units.

§14 (`docs/results/update_units.json`) measured the spread of the primary metric y (ln of the
side-effect KL on WikiText-2 per nat/token of target gain) over 8 units: the sd of the paired
PIT − TT differences (`primary/sd`) and of each interface's values (`control_sd`,
`treatment_sd`). Updates that move the interface may spread more, so the table is given for
that sd and for twice it. For PIT/TT ratios of 1.5, 1.25 and 1.1 it gives the power of the
exact two-sided sign-flip test (`tying.evaluation.stats.sign_flip_power`) at 8, 10 and 12
units, at α = 0.05 and at α = 0.025 (the Holm step of the two primary tests), and the fewest
units for 80 % power at α = 0.05 (`units_for_power`, up to 16 units).

    python -m studies.interface_update_power [--units docs/results/update_units.json]
        [--out docs/results/interface_update_power.json] [--simulations 2000]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from studies.update_power import MAX_UNITS, power_table

RATIOS = {"1.5": 1.5, "1.25": 1.25, "1.1": 1.1}
UNITS = (8, 10, 12)
ALPHAS = {"0.05": 0.05, "0.025": 0.025}


def table(sd: float, simulations: int) -> dict[str, dict]:
    """{"sd" | "2sd": {"sd_log", "ratios": {ratio: {"effect_log", "power": {alpha: {n: power}},
    "units_for_80_percent": n or None (at α = 0.05)}}}} for the paired sd `sd` (log units)."""
    effects = {name: math.log(ratio) for name, ratio in RATIOS.items()}
    return power_table(sd, effects, UNITS, simulations, ALPHAS, rows_key="ratios")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", default="docs/results/update_units.json")
    ap.add_argument("--out", default="docs/results/interface_update_power.json")
    ap.add_argument("--simulations", type=int, default=2000)
    args = ap.parse_args(argv)
    units = json.loads(Path(args.units).read_text())
    (comparison,) = units["update_units"]["comparisons"]
    primary = comparison["primary"]
    result = {
        "what": "power of the exact two-sided sign-flip test of the PIT - TT difference of "
        "ln(side-effect KL on WikiText-2 / target gain), one value per unit, at the paired sd "
        "of docs/results.md §14's units and at twice it",
        "units": args.units,
        "n": primary["n"],
        "sd_paired": primary["sd"],
        "sd_control": primary["control_sd"],
        "sd_treatment": primary["treatment_sd"],
        "simulations": args.simulations,
        "max_units": MAX_UNITS,
        "unit_counts": list(UNITS),
        "table": table(primary["sd"], args.simulations),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for label, block in result["table"].items():
        for name, row in block["ratios"].items():
            print(label, name, row["units_for_80_percent"], row["power"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
