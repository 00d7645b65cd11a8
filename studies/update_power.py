"""Power analysis of the pre-registered update experiment (docs/updates-design.md, issue 26).

Primary metric per unit (one base + one LoRA): y = ln(KL(base ‖ updated) on WikiText-2 test /
target gain), the side-effect KL in nats/token per nat/token of gain on the update's own task.
Today's only estimate of its spread between independently trained units of ONE interface is the
two TT-interface bases of docs/results.md §10 (SmolLM2-135M and its TT continuation), each with
an MBPP and a GSM8K LoRA: per update task, d = y(teacher) − y(tt) is the difference of two units,
and sd_d = √(mean d²) estimates the spread of a PIT − TT paired difference (no shared base).
With 2 such differences this estimate is itself rough (a χ² with 2 degrees of freedom), so the
table is given for sd_d and for 2·sd_d.

For effects (the PIT/TT ratio of KL per nat of gain) of 1.25×, 1.5× and 2×, it gives the power
of the exact sign-flip test (`tying.evaluation.stats.sign_flip_power`, two-sided, α = 0.05; the
primary metric is one test, so no multiplicity correction) at 6–16 units, and the fewest units
for 80 % power (`units_for_power`).

    python -m studies.update_power [--report docs/results/updates_report.json]
        [--out docs/results/update_power.json]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tying.evaluation.stats import sign_flip_power, units_for_power

EFFECTS = {"1.25x": math.log(1.25), "1.5x": math.log(1.5), "2x": math.log(2.0)}
UNITS = list(range(6, 17, 2))
MAX_UNITS = 16  # 2^16 sign patterns per simulated sample
SIDE_TEXT = "wikitext-2"


def power_row(
    effect: float,
    spread: float,
    units: Iterable[int],
    simulations: int,
    alphas: dict[str, float] | None = None,
) -> dict[str, Any]:
    """One row of a power table: {"effect_log": effect, "power": {n: power} (or, with `alphas`,
    {alpha's name: {n: power}}), "units_for_80_percent": the fewest units for 80 % power at
    α = 0.05, or None up to `MAX_UNITS`} for a true mean paired difference `effect` and an sd
    `spread` (log units) under the exact two-sided sign-flip test."""

    def powers(alpha: float) -> dict[str, float]:
        return {
            str(n): sign_flip_power(effect, spread, n, alpha, simulations=simulations)
            for n in units
        }

    return {
        "effect_log": effect,
        "power": powers(0.05) if alphas is None else {a: powers(x) for a, x in alphas.items()},
        "units_for_80_percent": units_for_power(
            effect, spread, max_n=MAX_UNITS, simulations=simulations
        ),
    }


def power_table(
    sd: float,
    effects: dict[str, float],
    units: Iterable[int],
    simulations: int,
    alphas: dict[str, float] | None = None,
    rows_key: str = "effects",
) -> dict[str, dict]:
    """{"sd" | "2sd": {"sd_log": spread, rows_key: {name: `power_row`}}}: the power table at
    the paired sd `sd` (log units) and at twice it, one row per effect (its log ratio)."""
    return {
        label: {
            "sd_log": spread,
            rows_key: {
                name: power_row(effect, spread, units, simulations, alphas)
                for name, effect in effects.items()
            },
        }
        for label, spread in (("sd", sd), ("2sd", 2 * sd))
    }


def primary_values(report: dict) -> dict[str, dict[str, float]]:
    """{base: {task: y}}, y = ln(KL on SIDE_TEXT / gain on the update's task), every adapter."""
    updates = report["updates"]
    out: dict[str, dict[str, float]] = {}
    for adapter in updates["adapters"]:
        base, task = adapter["base"], adapter["task"]
        gain = (
            adapter["eval"][task]["ref_loglik_per_token"]
            - updates["bases"][base]["eval"][task]["ref_loglik_per_token"]
        )
        kl = adapter["side_effects"]["texts"][SIDE_TEXT]["kl_nats"]
        out.setdefault(base, {})[task] = math.log(kl / gain)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--report", default="docs/results/updates_report.json")
    ap.add_argument("--out", default="docs/results/update_power.json")
    ap.add_argument("--simulations", type=int, default=2000)
    args = ap.parse_args(argv)
    values = primary_values(json.loads(Path(args.report).read_text()))
    tasks = sorted(values["teacher"])
    differences = {t: values["teacher"][t] - values["tt"][t] for t in tasks}
    sd = math.sqrt(sum(d * d for d in differences.values()) / len(differences))
    table = power_table(sd, EFFECTS, UNITS, args.simulations)
    result = {
        "what": "power of the exact two-sided sign-flip test, alpha 0.05, of the PIT - TT "
        "difference of ln(side-effect KL on WikiText-2 / target gain), one value per unit",
        "report": args.report,
        "primary_values": values,
        "tt_unit_differences": differences,
        "sd_estimate_log": sd,
        "simulations": args.simulations,
        "table": table,
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=1))
    for label, block in table.items():
        for name, row in block["effects"].items():
            print(label, name, row["units_for_80_percent"], row["power"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
