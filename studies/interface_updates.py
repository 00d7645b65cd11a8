"""Issue 36's interface-touching update experiment, assembled: the two update stages' reports
(`tying experiment ... --updates-only` -> updates.json, `tying.experiment.update_units`) into
docs/results/interface_updates.json, and the tables of docs/results.md §16 from it.

    updates (a)  configs/experiments/interface_updates.yaml          GSM8K LoRA + interface
    updates (b)  configs/experiments/interface_updates_tokens.yaml   4 new tokens + LoRA

The JSON:

    {"design": ..., "updates": {"a": {"config", "task", "comparisons"}, "b": {...}},
     "primary_family": [{"update", "comparison", "p", "p_holm"}],   Holm over (a) and (b)'s
                                                                    PIT-vs-TT primary tests
     "units": [one record per base and update: "update", "tie", "base_seed", "lora_seed",
               "step", "base_loss", "gain", "kl", "y", "drift", "cross", "lens_first_half",
               "kl_per_window", "items", ...]}

    python -m studies.interface_updates A/updates.json B/updates.json [--write]
        (--write: docs/results/interface_updates.json and the generated block of results.md)
    python -m studies.interface_updates --partial ROOT [--write]
        (stages not yet complete, cut short or still running: ROOT holds the configs' `out`
        folders, with the runs' metrics and the update folders (a GPU call's unpacked JSON, or
        this checkout's own `runs/`); the bases whose every file exists are recorded, and no
        test is read from fewer units than the test needs or while the seeds rule,
        `seeds_rule_pending`, still waits for seeds)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import statistics
from pathlib import Path
from typing import Any

from studies import ROOT

OUT = ROOT / "docs" / "results" / "interface_updates.json"
RESULTS_PAGE = ROOT / "docs" / "results.md"
BLOCK = re.compile(
    r"(<!-- generated: python -m studies.interface_updates[^>]*-->\n).*?(<!-- end generated -->)",
    re.S,
)
UPDATES = {
    "a": ("configs/experiments/interface_updates.yaml", "GSM8K LoRA + the interface"),
    "b": ("configs/experiments/interface_updates_tokens.yaml", "4 new tokens + LoRA"),
}
#: Row labels of the metrics, in table order.
LABELS = {
    "y:wikitext-2": "y, WikiText-2",
    "y:gutenberg-validation": "y, Gutenberg",
    "ln_kl:wikitext-2": "ln KL, WikiText-2",
    "ln_kl:gutenberg-validation": "ln KL, Gutenberg",
    "drift:E_old": "old-row drift of E",
    "drift:U_old": "old-row drift of U",
    "cross:svamp": "SVAMP log-lik. change",
    "cross:humaneval": "HumanEval log-lik. change",
    "cross:gsm8k": "GSM8K log-lik. change",
    "lens_first_half": "lens KL change, first half",
}


#: The pre-declared rule (docs/updates-design.md): seeds 0-7 are read when the sd of the
#: primary metric's PIT − TT differences over them is at most this for both updates, else all.
SD_LIMIT = 0.15
#: Units below which no two-sided exact sign-flip test can reach p ≤ 0.05 (2/2^5 > 0.05).
MIN_UNITS = 6
FIRST_SEEDS = tuple(range(8))
#: The seeds the rule adds when the sd over FIRST_SEEDS exceeds SD_LIMIT for either update.
EXTRA_SEEDS = tuple(range(8, 12))


def comparisons(records: list[dict[str, Any]], pairs: list[list[str]], outside: list[str]):
    """`compare_units` of every pair on `records` (the stage's own analysis, redone on the
    chosen seeds)."""
    from tying.experiment.update_units import compare_units

    if not records:
        return [{"control": c, "treatment": t, "error": "no base was measured"} for c, t in pairs]
    names = list(records[0]["metrics"])
    primary = "y:" + next(iter(records[0]["kl"]))
    secondary = [n for n in names if n != primary and n not in outside]
    reported = [n for n in names if n in outside]
    out = []
    for control, treatment in pairs:
        entry: dict[str, Any] = {"control": control, "treatment": treatment}
        try:
            entry.update(
                compare_units(records, control, treatment, primary, secondary, reported=reported)
            )
        except ValueError as e:
            entry["error"] = str(e)
        out.append(entry)
    return out


def choose_seeds(reports: dict[str, dict[str, Any]]) -> tuple[list[int], dict[str, float]]:
    """The seeds the analysis reads by the declared rule, and each update's sd over seeds 0-7
    (None until every one of them is a complete TT/PIT unit: a partial stage's sd decides
    nothing)."""
    sds = {}
    for key, report in reports.items():
        records = [r for r in report["update_units"]["bases"] if r["base_seed"] in FIRST_SEEDS]
        (tt_pit,) = comparisons(records, [["tt", "pit"]], [])
        complete = "primary" in tt_pit and tt_pit["primary"]["n"] == len(FIRST_SEEDS)
        sds[key] = tt_pit["primary"].get("sd", math.inf) if complete else None
    every = sorted(
        {r["base_seed"] for rep in reports.values() for r in rep["update_units"]["bases"]}
    )
    if all(sd is not None and sd <= SD_LIMIT for sd in sds.values()):
        return [s for s in every if s in FIRST_SEEDS], sds
    return every, sds


def seeds_rule_pending(rule: dict[str, Any]) -> str | None:
    """Why no test may be read yet under the declared seeds rule, or None when it may.

    Args:
        rule: the JSON's `seeds_rule` ({"sd_limit", "sd_over_seeds_0_7": {update: sd or None},
            "seeds_read"}).

    Returns:
        None when every update's sd over seeds 0-7 is known and at most the limit, or when
        seeds 8-11 are read; else the reason, as a sentence without its full stop.
    """
    if set(EXTRA_SEEDS) <= set(rule["seeds_read"]):
        return None
    sds = rule["sd_over_seeds_0_7"]
    unknown = sorted(k for k, sd in sds.items() if sd is None)
    over = {k: sd for k, sd in sds.items() if sd is not None and sd > rule["sd_limit"]}
    if over:
        text = ", ".join(f"({k}) {sd:.3f}" for k, sd in sorted(over.items()))
        return (
            f"the sd of the PIT − TT differences over seeds 0–7 exceeds {rule['sd_limit']} "
            f"({text}), so the declared rule measures seeds 8–11 before any test is read"
        )
    if unknown:
        names = " and ".join(f"({k})" for k in unknown)
        return (
            f"the sd over seeds 0–7 of update {names} is not known yet, and the declared rule "
            "reads no test before it is"
        )
    return None


def assemble(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """docs/results/interface_updates.json from {update: updates.json} (see the docstring)."""
    import yaml

    from tying.evaluation.stats import holm

    seeds, sds = choose_seeds(reports)
    updates, units, family = {}, [], []
    for key, report in reports.items():
        config, what = UPDATES[key]
        section = yaml.safe_load((ROOT / config).read_text())["updates"]
        records = [r for r in report["update_units"]["bases"] if r["base_seed"] in seeds]
        updates[key] = {
            "config": config,
            "what": what,
            "task": records[0]["task"] if records else None,
            "comparisons": comparisons(
                records, section["compare"], section.get("outside_family", [])
            ),
        }
        for record in report["update_units"]["bases"]:
            units.append({"update": key, "analysed": record["base_seed"] in seeds, **record})
        for c in updates[key]["comparisons"]:
            if (c["control"], c["treatment"]) == ("tt", "pit") and "primary" in c:
                p = c["primary"].get("sign_flip", {}).get("p")
                if p is not None:
                    family.append({"update": key, "comparison": "pit vs tt", "p": p})
    for entry, adjusted in zip(family, holm([f["p"] for f in family]), strict=True):
        entry["p_holm"] = adjusted
    return {
        "design": "docs/updates-design.md, 'Updates that touch the interface' (declared before "
        "the run)",
        "seeds_rule": {"sd_limit": SD_LIMIT, "sd_over_seeds_0_7": sds, "seeds_read": seeds},
        "updates": updates,
        "primary_family": family,
        "units": units,
    }


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return f"{value:+.{digits}f}".replace("-", "−")


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _summary_row(name: str, role: str, s: dict[str, Any]) -> str:
    ci = s.get("ci95")
    ratio = s.get("ratio")
    ratio_text = "—"
    if ratio is not None and s.get("ratio_ci95"):
        lo, hi = s["ratio_ci95"]
        ratio_text = f"{ratio:.2f} ({lo:.2f} to {hi:.2f})"
    return (
        f"| {LABELS.get(name, name)} | {role} | {s['n']} | {_fmt(s.get('mean'))} | "
        f"{_fmt(ci[0]) + ' to ' + _fmt(ci[1]) if ci else '—'} | {ratio_text} | "
        f"{_p(s.get('sign_flip', {}).get('p'))} | {_p(s.get('p_holm'))} |"
    )


def markdown(data: dict[str, Any]) -> str:
    """The tables of results.md §16."""
    lines = []
    holm_p = {f["update"]: f["p_holm"] for f in data["primary_family"]}
    pending = seeds_rule_pending(data["seeds_rule"])
    for key, update in data["updates"].items():
        lines += [f"**Update ({key}): {update['what']}** (`{update['config']}`)", ""]
        for c in update["comparisons"]:
            pair = f"{c['treatment'].upper()} vs {c['control'].upper()}"
            if "error" in c:
                lines += [f"{pair}: no comparison ({c['error']}).", ""]
                continue
            lines += [
                f"{pair}, at matched base loss {c['at_loss']:.3f} nats/token "
                f"(differences {c['treatment']} − {c['control']}; ratios {c['treatment']} / "
                f"{c['control']}):",
                "",
                "| metric | role | n | mean difference | 95% t-interval | ratio (95%) | "
                "sign-flip p | Holm p |",
                "|---|---|---:|---:|---|---|---:|---:|",
                _summary_row(c["primary_metric"], "primary", c["primary"]),
            ]
            lines += [_summary_row(n, "secondary", s) for n, s in c["secondary"].items()]
            lines += [_summary_row(n, "reported", s) for n, s in c.get("reported", {}).items()]
            verdict = c["primary"].get("verdict", "")
            if (c["control"], c["treatment"]) == ("tt", "pit") and key in holm_p:
                verdict += f"; Holm over the two updates' primary tests: p {holm_p[key]:.3g}"
            unread = pending
            if c["primary"]["n"] < MIN_UNITS:
                unread = (
                    f"{c['primary']['n']} unit(s), fewer than the {MIN_UNITS} an exact "
                    "two-sided sign-flip test needs to reach p ≤ 0.05"
                )
            if unread:
                verdict = (
                    f"not read as a test: {unread} (the interval and p above describe these "
                    "units only)"
                )
            lines += ["", f"Primary: {verdict}.", ""]
        lines += _descriptive(data, key)
    return "\n".join(lines).rstrip() + "\n"


def _descriptive(data: dict[str, Any], key: str) -> list[str]:
    rows = [u for u in data["units"] if u["update"] == key and u["analysed"]]
    lines = [
        "Means over the seeds of each interface's bases (nats/token; drift: relative change of "
        "the old rows; descriptive):",
        "",
        "| interface | step | bases | base loss | target gain | KL WikiText-2 | y WikiText-2 | "
        "drift E | drift U |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for u in rows:
        groups.setdefault((u["label"], u["step"]), []).append(u)

    def mean(values: list[float | None]) -> float | None:
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return statistics.fmean(finite) if finite else None

    for (label, step), group in sorted(groups.items()):
        lines.append(
            f"| {label.upper() if label != 'untied' else 'untied'} | {step} | {len(group)} | "
            f"{mean([g['base_loss'] for g in group]):.3f} | "
            f"{_fmt(mean([g['gain'] for g in group]))} | "
            f"{mean([g['kl'].get('wikitext-2') for g in group]):.3f} | "
            f"{_fmt(mean([g['y'].get('wikitext-2') for g in group]))} | "
            f"{_fmt(mean([g['drift'].get('E') for g in group]), 4)} | "
            f"{_fmt(mean([g['drift'].get('U') for g in group]), 4)} |"
        )
    return [*lines, ""]


def partial_report(root: Path, config: str) -> dict[str, Any]:
    """An updates.json-like block of the bases of `config`'s grid under `root` whose every
    file exists (`update_units.base_records`), with no statistics of its own."""
    from tying.errors import MissingFileError
    from tying.experiment import load_experiment
    from tying.experiment.update_units import base_records
    from tying.experiment.updates import unit_base_name

    cfg = load_experiment(ROOT / config)
    cfg = dataclasses.replace(cfg, out=str(root / cfg.out))
    bases = []
    for run in cfg.runs():
        for step in cfg.updates.unit_steps or ():
            try:
                bases += base_records(cfg, unit_base_name(run, step), run, step, run.seed)
            except MissingFileError:
                continue
    return {"update_units": {"bases": bases, "comparisons": []}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", nargs="?", help="updates.json of update (a)")
    parser.add_argument("b", nargs="?", help="updates.json of update (b)")
    parser.add_argument("--partial", type=Path, help="the root of stages not yet complete")
    parser.add_argument("--write", action="store_true", help="write the JSON and results.md")
    args = parser.parse_args(argv)
    if args.partial:
        reports = {k: partial_report(args.partial, UPDATES[k][0]) for k in UPDATES}
    else:
        reports = {k: json.loads(Path(p).read_text()) for k, p in (("a", args.a), ("b", args.b))}
    data = assemble(reports)
    data["status"] = "partial: not every base is measured" if args.partial else "complete"
    text = markdown(data)
    print(text)
    if args.write:
        OUT.write_text(json.dumps(data, indent=1) + "\n")
        page = RESULTS_PAGE.read_text()
        if not BLOCK.search(page):
            raise SystemExit(f"{RESULTS_PAGE} has no generated block of this study")
        RESULTS_PAGE.write_text(BLOCK.sub(lambda m: m.group(1) + text + m.group(2), page))
        print(f"wrote {OUT} and the block of {RESULTS_PAGE}")


if __name__ == "__main__":
    main()
