"""The tables of docs/results.md that are typed in, checked against the JSON they come from: each
printed number must be the JSON value rounded to the digits printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = (ROOT / "docs" / "results.md").read_text()


def _json(name: str):
    return json.loads((ROOT / "docs" / "results" / name).read_text())


def _section(title_start: str) -> str:
    i = RESULTS.index("\n## " + title_start)
    j = RESULTS.find("\n## ", i + 1)
    return RESULTS[i : j if j > 0 else None]


def _rows(text: str, first_cell: str) -> list[list[str]]:
    """The cells of table rows whose first cell starts with `first_cell`."""
    out = []
    for line in text.splitlines():
        if line.startswith("| " + first_cell):
            out.append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def _number(text: str) -> tuple[float, float]:
    """A printed number and half a unit of its last printed digit."""
    t = text.replace("−", "-").replace(",", "").replace("+", "").strip()
    m = re.fullmatch(r"(-?\d+)(?:\.(\d+))?(?:e(-?\d+))?", t)
    assert m, f"not a number: {text!r}"
    decimals = len(m.group(2) or "")
    exp = int(m.group(3) or 0)
    return float(t), 0.5 * 10.0 ** (exp - decimals)


def _same(printed: str, value: float) -> bool:
    x, half = _number(printed)
    # three significant digits of an integer column (e.g. 2011 tokens/s) are printed exactly
    return abs(x - value) <= half * (1 + 1e-9)


def _check(printed: str, value: float, where: str) -> None:
    assert _same(printed, value), f"{where}: the page says {printed}, the JSON {value}"


def test_number_reader():
    assert _same("5.279", 5.2794) and not _same("5.279", 5.2796)
    assert _same("2.63e-3", 0.002634) and not _same("2.63e-3", 0.00264)
    assert _same("−0.017", -0.0172) and _same("2011", 2011.4)


def test_section_1_losses_are_report_json():
    runs = {r["name"]: r for r in _json("report.json")["runs"]}
    rows = _rows(_section("1. Loss"), "scratch-")
    assert len(rows) == 6
    for name, train, val, ppl, wall, tps in rows:
        r = runs[name]
        for printed, key in (
            (train, "final_train_loss"),
            (val, "val_loss"),
            (ppl, "val_ppl"),
            (wall, "wall_time_s"),
            (tps, "tokens_per_s"),
        ):
            _check(printed, r[key], f"§1 {name} {key}")


def test_section_3_gradient_shares_are_report_json():
    runs = {r["name"]: r for r in _json("report.json")["runs"]}
    rows = _rows(_section("3. Output-side"), "scratch-")
    assert len(rows) == 6
    for name, *cells in rows:
        share = runs[name]["grad_out_share"]["share"]
        windows = [share[:20], share[20:100], share[100:], share]
        for printed, w in zip(cells, windows, strict=True):
            _check(printed, sum(w) / len(w), f"§3 {name}")


def test_section_4b_cross_seed_table_is_cross_seed_json():
    data = _json("cross_seed.json")
    section = _section("4. The tied matrix")
    part_b = section[section.index("**B. Control") :]
    rows = _rows(part_b, "scratch-")
    assert len(rows) == 10
    for a, b, pair, orth, lin, knn, spec in rows:
        key = f"{a.removeprefix('scratch-')}_vs_{b.removeprefix('scratch-')}"
        blocks = data[key]

        def find(block, field, pair=pair, blocks=blocks):
            for p in blocks[block]["pairs"]:
                if re.sub(r" \([^)]*\)", "", p["label"]) == pair:
                    return p[field]
            raise AssertionError(f"{pair} not in {block}")

        _check(orth, find("alignment", "orthogonal"), f"§4 B {key} {pair}")
        _check(lin, find("alignment", "linear"), f"§4 B {key} {pair}")
        _check(knn, find("knn_overlap", "overlap"), f"§4 B {key} {pair}")
        _check(spec, find("spectral_distance", "distance"), f"§4 B {key} {pair}")


def test_section_5_and_6_norms_and_drift_are_report_json():
    runs = {r["name"]: r for r in _json("report.json")["runs"]}
    rows = _rows(_section("5. Norms"), "scratch-")
    assert len(rows) == 6
    for name, e, u in rows:
        nf = runs[name]["probe"]["norm_frequency"]
        _check(e, nf["E"]["spearman_rho"], f"§5 {name} E")
        _check(u, nf["U"]["spearman_rho"], f"§5 {name} U")
    rows = _rows(_section("6. Drift"), "scratch-")
    assert len(rows) == 6
    for name, _steps, e, u in rows:
        drift = runs[name]["probe"]["drift"]
        for printed, side in ((e, "E"), (u, "U")):
            values = [v.strip() for v in printed.strip("[]").split(",")]
            for p, v in zip(values, drift[side]["to_first"], strict=True):
                _check(p, v, f"§6 {name} {side}")


def test_section_7_lens_table_is_report_json():
    records = {(r["name"], r["kind"]): r["kl"] for r in _json("report.json")["lens"]["records"]}
    rows = _rows(_section("7. Lens"), "scratch-")
    assert len(rows) == 12
    for name, kind, *cells in rows:
        for p, v in zip(cells, records[(name, kind)], strict=True):
            _check(p, v, f"§7 {name} {kind}")


def test_section_10_side_effects_are_updates_report_json():
    adapters = {
        f"{a['base']} + {a['task'].upper()}": a
        for a in _json("updates_report.json")["updates"]["adapters"]
    }
    section = _section("10. Updates")
    table = section[section.index("| adapter | WikiText-2 KL") :]
    rows = [r for r in _rows(table, "") if " + " in r[0]][:6]
    assert len(rows) == 6
    for name, wk, wt, wd, gk, gt, gd in rows:
        texts = adapters[name.replace("GSM8K", "GSM8K")]["side_effects"]["texts"]
        for kl, top1, dloss, text in (
            (wk, wt, wd, "wikitext-2"),
            (gk, gt, gd, "gutenberg-validation"),
        ):
            t = texts[text]
            point, lo, hi = re.match(r"(\S+) \[(\S+), (\S+)\]", kl).groups()
            _check(point, t["kl_nats"], f"§10 {name} {text} KL")
            _check(lo, t["kl_nats_ci95"][0], f"§10 {name} {text} KL low")
            _check(hi, t["kl_nats_ci95"][1], f"§10 {name} {text} KL high")
            _check(top1, t["top1_agreement"], f"§10 {name} {text} top-1")
            _check(dloss, t["delta_loss"], f"§10 {name} {text} Δloss")


UPDATE_TASKS = ("gsm8k", "svamp", "mbpp", "humaneval")


def _updates_adapters() -> dict[str, dict]:
    """§10's adapters by their row name ("tt + GSM8K")."""
    return {
        f"{a['base']} + {a['task'].upper()}": a
        for a in _json("updates_report.json")["updates"]["adapters"]
    }


def _point_and_interval(cell: str) -> tuple[str, str, str]:
    """ "+0.007 [+0.003, +0.020]" -> ("+0.007", "+0.003", "+0.020")."""
    m = re.search(r"(\S+) \[(\S+), (\S+)\]", cell)
    assert m, f"not a point and interval: {cell!r}"
    return m.group(1), m.group(2), m.group(3)


def test_section_10_likelihood_and_change_tables_are_updates_report_json():
    """§10's reference log-likelihoods (bases and adapters) and each update's change with its
    item-bootstrap interval."""
    updates = _json("updates_report.json")["updates"]
    adapters = _updates_adapters()
    section = _section("10. Updates")
    table = section[section.index("| model | GSM8K") :]
    rows = _rows(table, "")[1:10]
    assert [r[0] for r in rows][:3] == ["teacher", "tt", "pit"]
    for name, *cells, _exact in rows:
        for printed, task in zip(cells, UPDATE_TASKS, strict=True):
            if " + " in name:
                value = adapters[name.removesuffix(" LoRA")]["change"][task]["updated"]
            else:
                value = updates["bases"][name]["eval"][task]
            _check(printed, value["ref_loglik_per_token"], f"§10 {name} {task}")
    table = section[section.index("| adapter | Δ GSM8K") :]
    rows = [r for r in _rows(table, "") if " + " in r[0]][:6]
    assert len(rows) == 6
    for name, *cells in rows:
        for cell, task in zip(cells, UPDATE_TASKS, strict=True):
            change = adapters[name]["change"][task]
            point, lo, hi = _point_and_interval(cell)
            _check(point, change["delta_ref_loglik_per_token"], f"§10 {name} Δ{task}")
            _check(lo, change["ref_loglik_bootstrap"]["ci95"][0], f"§10 {name} Δ{task} low")
            _check(hi, change["ref_loglik_bootstrap"]["ci95"][1], f"§10 {name} Δ{task} high")


def test_section_10_pit_against_tt_is_updates_report_json():
    """§10's paired PIT − TT table: comparisons 0 (the MBPP update) and 1 (GSM8K)."""
    comparisons = _json("updates_report.json")["updates"]["comparisons"]
    adapters = _updates_adapters()
    assert [c["task"] for c in comparisons] == ["mbpp", "gsm8k"]
    section = _section("10. Updates")
    table = section[section.index("| | MBPP update | GSM8K update |") :]
    rows = {r[0]: r[1:] for r in _rows(table, "")[1:8]}

    def numbers(cell: str) -> list[str]:
        return re.findall(r"(?<![A-Za-z\d.])[−+-]?\d[\d.]*(?:e[−-]?\d+)?", cell)

    (head,) = [k for k in rows if k.startswith("gain on its target")]
    pooled = numbers(head)
    for i, task in enumerate(("mbpp", "gsm8k")):
        for j, base in enumerate(("pit", "tt")):
            change = adapters[f"{base} + {task.upper()}"]["change"][task]
            _check(pooled[2 * i + j], change["delta_ref_loglik_per_token"], f"§10 pooled {base}")
    for k, c in enumerate(comparisons):
        target = c["task"]
        treatment, control, d, lo, hi = numbers(rows[head][k])
        g = c["gain"][target]
        for printed, value in (
            (treatment, g["treatment_change"]),
            (control, g["control_change"]),
            (d, g["difference"]),
            (lo, g["ci95"][0]),
            (hi, g["ci95"][1]),
        ):
            _check(printed, value, f"§10 {target} update: gain on the target")
        others = [t for t in ("mbpp", "humaneval") if t != target]
        cell = numbers(rows["gain on the other code task (HumanEval) / math task"][k])
        assert len(cell) == 3 * len(others)
        for j, task in enumerate(others):
            g = c["gain"][task]
            for printed, value in zip(
                cell[3 * j : 3 * j + 3], (g["difference"], *g["ci95"]), strict=True
            ):
                _check(printed, value, f"§10 {target} update: gain on {task}")
        g = c["gain"]["svamp"]
        cell = numbers(rows["gain on SVAMP"][k])
        for printed, value in zip(cell, (g["difference"], *g["ci95"], g["p_value"])):
            _check(printed, value, f"§10 {target} update: SVAMP")
        u = c["updated"][target]
        cell = numbers(rows["updated PIT − updated TT on the target"][k])
        for printed, value in zip(
            cell, (u["delta_ref_loglik_per_token"], *u["ref_loglik_bootstrap"]["ci95"]), strict=True
        ):
            _check(printed, value, f"§10 {target} update: updated PIT − TT")
        for label, text in (
            ("WikiText-2 KL, ratio pit/tt", "wikitext-2"),
            ("Gutenberg KL, ratio pit/tt", "gutenberg-validation"),
        ):
            s = c["side_effects"][text]
            ratio, diff, lo, hi, p = numbers(rows[label][k])
            for printed, value in (
                (ratio, s["ratio"]),
                (diff, s["difference"]),
                (lo, s["ci95"][0]),
                (hi, s["ci95"][1]),
                (p, s["p_value"]),
            ):
                _check(printed, value, f"§10 {target} update: {label}")


@pytest.mark.parametrize("bad", ["5.280", "5.278"])
def test_a_mistyped_loss_is_caught(bad):
    value = next(r for r in _json("report.json")["runs"] if r["name"] == "scratch-untied-s0")
    assert _same("5.279", value["final_train_loss"])
    assert not _same(bad, value["final_train_loss"])


@pytest.mark.parametrize(
    "section, source",
    [
        ("11. Input-gradient", "input_grad_scale.json"),
        ("11b. Input-gradient", "input_grad_scale_full.json"),
    ],
)
def test_section_11_input_gradient_scaling_is_its_json(section, source):
    data = _json(source)
    early, final = str(data["steps"]["early"]), str(data["steps"]["final"])
    rows = _rows(_section(section), "scratch-tt")
    assert len(rows) == len(data["runs"]) >= 2
    for name, scale, val, *cells in rows:
        r = data["runs"][name]
        assert scale == f"×{r['scale']}"
        _check(val, r["val_loss"][final], f"§11 {name} val loss")
        refs = [
            (r["seed"], early),
            (r["seed"], final),
            (1 - r["seed"], final),
        ]
        for (seed, step), pair in zip(refs, zip(cells[::2], cells[1::2], strict=True), strict=True):
            rows_ = r["against"].get(f"untied-s{seed}")
            for printed, side in zip(pair, ("input", "output"), strict=True):
                if rows_ is None:
                    assert printed == "–", f"§11 {name}: no untied-s{seed}, yet {printed}"
                else:
                    _check(printed, rows_[step][side]["orthogonal"], f"§11 {name} {side}")


def test_section_11b_effects_are_effects_vs_x1():
    """§11b's paired table: scaled − ×1 per seed (s0 / s1), from the JSON's `effects_vs_x1`."""
    data = _json("input_grad_scale_full.json")
    effects, steps = data["effects_vs_x1"], data["steps"]
    rows = [r for r in _rows(_section("11b. Input-gradient"), "×") if r[1].endswith("seed")]
    assert len(rows) == 2 * len(effects)
    columns = [(steps["early"], "input"), (steps["early"], "output")]
    columns += [(steps["final"], "input"), (steps["final"], "output")]
    for scale, reference, *cells in rows:
        e = effects["x" + scale.removeprefix("×")]
        ref = {"same seed": "same", "other seed": "cross"}[reference]
        for cell, (step, side) in zip(cells, columns):
            for printed, seed in zip(cell.split(" / "), ("s0", "s1"), strict=True):
                _check(printed, e[seed][ref][str(step)][side], f"§11b {scale} {ref} {step} {side}")
        if ref == "same":
            for printed, seed in zip(cells[4].split(" / "), ("s0", "s1"), strict=True):
                _check(printed, e[seed]["val_loss"], f"§11b {scale} val loss")
        else:
            assert cells[4] == ""


def test_section_12_trace_overlaps_are_the_trace_json():
    files = {"TT": "tt-s0", "PIT": "pit-s0", "untied": "untied-s0"}
    rows = [r for r in _rows(_section("12. Transition"), "") if ", step " in r[0]]
    assert len(rows) >= 4
    for model, *overlaps, _agree in rows:
        kind, step = model.split(", step ")
        path = ROOT / "docs" / "results" / "traces" / f"{files[kind]}-step{step}.json"
        entries = json.loads(path.read_text())["entries"]
        for printed, e in zip(overlaps, entries, strict=True):
            _check(printed, e["overlap"], f"§12 {model} {e['label']}")


UNIT_METRICS = {
    "y, WikiText-2": "y:wikitext-2",
    "y, Gutenberg": "y:gutenberg-validation",
    "ln KL, WikiText-2": "ln_kl:wikitext-2",
    "ln KL, Gutenberg": "ln_kl:gutenberg-validation",
    "SVAMP log-lik. change": "cross:svamp",
    "HumanEval log-lik. change": "cross:humaneval",
    "lens KL change, blocks 1–2": "lens_first_half",
}


def test_section_14_update_units_are_the_json():
    text = _section("14.")
    (comparison,) = _json("update_units.json")["update_units"]["comparisons"]
    primary = comparison["primary"]
    seeds = [r for r in _rows(text, "") if r[0].isdigit()]
    assert len(seeds) == primary["n"] == len(primary["units"])
    for row, unit in zip(seeds, primary["units"], strict=True):
        assert int(row[0]) == unit["base_seed"]
        for printed, key in zip(row[1:4], ("control", "treatment", "difference"), strict=True):
            _check(printed, unit[key], f"§14 seed {row[0]} {key}")
        assert row[4] == ("yes" if unit["extrapolated"] else "no")
    summaries = {comparison["primary_metric"]: primary, **comparison["secondary"]}
    printed_metrics = 0
    for title, key in UNIT_METRICS.items():
        (row,) = _rows(text, title + " |")
        summary = summaries[key]
        assert int(row[2]) == summary["n"]
        _check(row[3], summary["mean"], f"§14 {title} mean")
        lo, hi = row[4].split(" to ")
        _check(lo, summary["ci95"][0], f"§14 {title} ci low")
        _check(hi, summary["ci95"][1], f"§14 {title} ci high")
        if "ratio" in summary:
            ratio, rest = row[5].split(" (")
            r_lo, r_hi = rest.rstrip(")").split(" to ")
            for p, v in (
                (ratio, summary["ratio"]),
                (r_lo, summary["ratio_ci95"][0]),
                (r_hi, summary["ratio_ci95"][1]),
            ):
                _check(p, v, f"§14 {title} ratio")
        _check(row[6], summary["sign_flip"]["p"], f"§14 {title} p")
        if key != comparison["primary_metric"]:
            _check(row[7], summary["p_holm"], f"§14 {title} Holm p")
        printed_metrics += 1
    assert printed_metrics == len(summaries)
    assert primary["verdict"] in " ".join(text.split())


def test_section_14b_full_test_sets_are_the_json():
    """§14b: the experiment's comparison with the subsets' likelihoods and with the full sets',
    on the seeds whose full-set evaluations are done, and the per-base gain check."""
    text = _section("14b.")
    data = _json("update_units_full_sets.json")
    assert f"{data['bases_done']} bases" in text
    subset, full = data["subset"], data["full"]

    def check_full_columns(row: list[str], f: dict, title: str, holm: bool) -> None:
        """Columns 4-7: the full sets' mean, 95 % t interval, sign-flip p and Holm p."""
        for printed, value, what in (
            (row[4], f["mean"], "full mean"),
            (row[5].split(" to ")[0], f["ci95"][0], "full ci low"),
            (row[5].split(" to ")[1], f["ci95"][1], "full ci high"),
            (row[6], f["sign_flip"]["p"], "full p"),
        ):
            _check(printed, value, f"§14b {title} {what}")
        if holm:
            _check(row[7], f["p_holm"], f"§14b {title} Holm p")

    printed_metrics = 0
    for title, key in UNIT_METRICS.items():
        (row,) = _rows(text, title + " |")
        s = subset["primary"] if key == subset["primary_metric"] else subset["secondary"][key]
        f = full["primary"] if key == full["primary_metric"] else full["secondary"][key]
        assert int(row[1]) == s["n"] == f["n"] == len(data["seeds_done"])
        for printed, value, what in (
            (row[2], s["mean"], "subset mean"),
            (row[3].split(" to ")[0], s["ci95"][0], "subset ci low"),
            (row[3].split(" to ")[1], s["ci95"][1], "subset ci high"),
        ):
            _check(printed, value, f"§14b {title} {what}")
        check_full_columns(row, f, title, holm=key != full["primary_metric"])
        printed_metrics += 1
    assert printed_metrics == 1 + len(full["secondary"])
    assert full["primary"]["verdict"] in " ".join(text.split())
    extra = data["full_extra_tasks"]
    assert set(extra) == {"cross:mbpp"}
    (row,) = _rows(text, "MBPP log-lik. change (outside the family) |")
    m = extra["cross:mbpp"]
    assert int(row[1]) == m["n"] == len(data["seeds_done"]) and row[2] == row[3] == "—"
    check_full_columns(row, m, "MBPP (Holm p in a family of seven)", holm=True)
    assert m["p_holm_in_family_of"] == len(full["secondary"]) + 1
