"""The claims table of docs/results.md: every claim of the three papers, the paper's number and
ours, generated from `docs/results/claims.yaml`, whose every measured number is read from a JSON
file of the repository at a key path.

    python -m studies.claims            # print the Markdown table
    python -m studies.claims --write    # replace the table in docs/results.md
    python -m studies.claims --check    # exit 1 when docs/results.md is out of date

A row of the YAML file:

    paper: 004                    # 001 (PIT), 004 (weight-tying-bias), 002 (the essay)
    claim: text                   # what the paper says, in our words (short quotes only)
    where: "Table 1"              # where in the paper: Table N, Figure N, §N.M, Appendix X
    paper_number: "0.669 vs 0.420"  # as printed in the paper (every decimal is checked in it)
    ours: "{u} vs {e}"            # a template: {name} is a value below; no literal decimals
    n: "1 pair"                   # independently trained models behind `ours`
    interval: "{lo}–{hi}"         # optional template: numbers beside the rule's own, or "—"
    units: ["u0 - e0", "u1 - e1"] # one signed difference per independent unit (seed), an
                                  # expression over the values below, + = the paper's direction
    units_from: [{file: F, path: P, sign: -1}]  # or: lists of differences stored in a JSON
    unit_digits: 3                # decimals of the rule's mean and interval in the table
    note: template                # optional: what else the row's numbers show (last column)
    verdict: not tested           # ONLY in a row without units, with `reason`: a definition,
    reason: text                  # "not tested", a claim without a direction, a declared
                                  # design that reads no test yet ("undecided")
    values:
      u: {file: docs/results/cross_seed.json, path: a/b/0/c, value: 0.500, digits: 3}

The verdict of a row with units is computed here by one rule (`RULE`, printed above the table):
the exact two-sided sign-flip test of the units' mean (all 2^n sign patterns), Holm-adjusted over
every row the rule judges, at ALPHA = 0.05; "reproduced" if the adjusted p ≤ ALPHA and the mean
is in the paper's direction, "contradicted" if ≤ ALPHA and the other way, "undecided" otherwise.
n units give at best p = 2/2^n, so no row with fewer than 6 units can be decided; the last
column prints what the row's 95 % t-interval rules out.

A value is the number at `path` (keys and list indices joined by "/"; a `*` index collects
every item's rest of the path: "bases/*/gain"), or with `slice: [i, j]` (or `[i, j, step]`)
the mean of that list's items i..j-1 (every step-th), or with `minus: PATH` / `over: PATH` the difference or
ratio of two numbers of the same file; `times: PATH` multiplies by a third (a ratio of ratios:
`path: a/b, times: d, over: c` is (a/b)·d/c). `value` is the number as the table prints it, rounded to
`digits` decimals (`sig` for significant digits, `scale: 100` for percent); tests/docs check it
against the JSON.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import operator
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import studies
from studies import ROOT

#: The papers by their file prefix in ../shared/papers, and their names in the table.
PAPERS = {
    "001": "PIT (Gu et al., 2602.04556)",
    "004": "weight-tying-bias (Lopardo et al., 2603.26663)",
    "002": "read–write symmetry essay",
}
VERDICTS = ("reproduced", "contradicted", "undecided", "not tested")
#: The level of the rule: a verdict other than "undecided" needs a Holm-adjusted p ≤ ALPHA.
ALPHA = 0.05
#: The rule as the page states it (above the table).
RULE = (
    "**The rule** (applied by `studies.claims`, not by hand): each row lists one signed "
    "difference per independently trained unit (a seed or a model pair), positive in the "
    "paper's direction. The exact two-sided sign-flip test of their mean (all 2^n sign "
    "patterns) gives p; Holm's adjustment over every row the rule judges gives the row's "
    f"adjusted p. **reproduced**: adjusted p ≤ {ALPHA} and the mean in the paper's direction; "
    f"**contradicted**: adjusted p ≤ {ALPHA} and the mean the other way; **undecided**: "
    "anything else. n units can give at best p = 2/2^n (0.5 for n = 2, 0.0625 for n = 5), so a "
    "row needs at least 6 units, and more after Holm, before it can be decided; with 2 seeds "
    'a direction in both is reported ("2 of 2") but decides nothing. The last column gives '
    "what the row's 95% t-interval of the mean rules out (none with one unit). A verdict by "
    "hand only where the claim has no direction to test (a definition, an identity, a claim "
    "not run, a closeness claim the paper gives no margin for) or where the row's own "
    "declared design reads no test yet, with its reason."
)
BEGIN = "<!-- claims table: generated by `python -m studies.claims --write`; do not edit -->"
END = "<!-- end of claims table -->"
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DECIMAL = re.compile(r"(?<![\w.§])-?\d+\.\d+")
_EXPR_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def repo_root() -> Path:
    """The repository whose docs/results.md and JSON files the table is made from."""
    return ROOT


def default_source() -> Path:
    return repo_root() / "docs" / "results" / "claims.yaml"


@dataclass
class Value:
    """One measured number of a row: where it is, and how the table prints it."""

    name: str
    file: str
    path: str
    value: float
    digits: int | None = None
    sig: int | None = None
    #: the mean of the items [start:stop] (or [start:stop:step]) of the list at `path`
    slice: tuple[int, ...] | None = None
    minus: str | None = None
    over: str | None = None
    times: str | None = None
    scale: float = 1.0

    @classmethod
    def from_spec(cls, name: str, spec: dict[str, Any]) -> Value:
        """The value a YAML spec ({file, path, value, digits, slice: [i, j], ...}) describes."""
        spec = dict(spec)
        if "slice" in spec:
            spec["slice"] = tuple(spec["slice"])
        return cls(name=name, **spec)

    def rounded(self, x: float) -> float:
        x = x * self.scale
        if self.sig is not None:
            return float(f"{x:.{self.sig}g}")
        return round(x, self.digits if self.digits is not None else 3)

    def text(self) -> str:
        v = self.value
        if self.sig is not None:
            s = f"{v:.{self.sig}g}"
            if "e" in s:
                mant, exp = s.split("e")
                s = f"{mant}e{int(exp)}"
        else:
            s = f"{v:.{self.digits if self.digits is not None else 3}f}"
        return s.replace("-", "−")


def lookup(data: Any, path: str) -> Any:
    """The item of nested dicts/lists at `path` ("a/b/0/c"); a dict key that itself holds "/"
    (e.g. "pit/identity") is matched by joining the parts. A `*` in place of a list index gives
    the list of every item's rest of the path ("bases/*/base_loss")."""
    parts = path.split("/")
    node = data
    i = 0
    while i < len(parts):
        if isinstance(node, list) and parts[i] == "*":
            rest = "/".join(parts[i + 1 :])
            return [lookup(item, rest) if rest else item for item in node]
        if isinstance(node, list):
            node = node[int(parts[i])]
            i += 1
            continue
        if not isinstance(node, dict):
            raise KeyError(f"{path}: {parts[i]!r} below a {type(node).__name__}")
        for j in range(i + 1, len(parts) + 1):
            key = "/".join(parts[i:j])
            if key in node:
                node = node[key]
                i = j
                break
        else:
            raise KeyError(f"{path}: no key {parts[i]!r}")
    return node


_JSON_CACHE: dict[Path, Any] = {}


def load_json(file: str, root: Path | None = None) -> Any:
    """The parsed data of a repository file: JSON, or YAML for a `.yaml`/`.yml` file (an
    experiment's config under configs/, whose settings a page may quote)."""
    p = (root or repo_root()) / file
    if p not in _JSON_CACHE:
        text = p.read_text()
        _JSON_CACHE[p] = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
    return _JSON_CACHE[p]


def measured(v: Value, root: Path | None = None) -> float:
    """The number `v` names, computed from its JSON file (unrounded, unscaled)."""
    data = load_json(v.file, root)
    x = lookup(data, v.path)
    if v.slice is not None:
        items = x[slice(*v.slice)]
        x = sum(items) / len(items)
    x = float(x)
    if v.minus is not None:
        x -= float(lookup(data, v.minus))
    if v.times is not None:
        x *= float(lookup(data, v.times))
    if v.over is not None:
        x /= float(lookup(data, v.over))
    return x


def value_matches(v: Value, root: Path | None = None) -> bool:
    got = v.rounded(measured(v, root))
    return math.isclose(got, v.value, rel_tol=1e-9, abs_tol=1e-12)


def evaluate(expr: str, names: dict[str, float]) -> float:
    """The value of a unit expression: names of the row's values, numbers, + − × /, unary −
    and abs(); nothing else is evaluated."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.BinOp) and type(node.op) in _EXPR_OPS:
            return _EXPR_OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return float(node.value)
        if isinstance(node, ast.Name) and node.id in names:
            return names[node.id]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "abs"
            and len(node.args) == 1
        ):
            return abs(ev(node.args[0]))
        raise ValueError(f"unit expression {expr!r}: {ast.dump(node)[:60]} is not allowed")

    return ev(ast.parse(expr, mode="eval"))


@dataclass(frozen=True)
class Judgement:
    """What the rule says of one row: its units, test, interval and verdict."""

    units: tuple[float, ...]
    mean: float
    p: float
    holm_p: float
    ci95: tuple[float, float] | None
    verdict: str


def exact_sign_flip_p(units: list[float]) -> float:
    """Exact two-sided sign-flip p of the mean: the share of the 2^n sign patterns of the units
    whose |mean| is at least the observed |mean| (the observed pattern included; 1 for n = 1).
    Enumerated with numpy in blocks (n ≤ 24): 2^19 patterns take a fraction of a second, where
    `tying.evaluation.stats.sign_flip_test` (scipy) takes tens of seconds."""
    import numpy as np

    u = np.abs(np.asarray(units, dtype=np.float64))
    n = u.size
    if not 1 <= n <= 24:
        raise ValueError(f"need 1 to 24 units, got {n}")
    observed = abs(float(np.mean(units)))
    count = 0
    block = 1 << min(n, 16)
    for start in range(0, 1 << n, block):
        bits = ((np.arange(start, start + block)[:, None] >> np.arange(n)) & 1).astype(np.float64)
        means = np.abs((1.0 - 2.0 * bits) @ u) / n
        count += int(np.count_nonzero(means >= observed * (1 - 1e-12)))
    return count / float(1 << n)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (`tying.evaluation.stats.holm`,
    which this layer may not import): adj_(j) = max_{i ≤ j} min(1, (m − i + 1) p_(i))."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def judge(claims: list[Claim], root: Path | None = None) -> dict[int, Judgement]:
    """The rule applied to every row with units (by index in `claims`): exact two-sided
    sign-flip p of the mean, Holm over those rows, the 95% t-interval, the verdict."""
    from scipy import stats as st

    rows = {i: c.unit_values(root) for i, c in enumerate(claims) if c.ruled}
    ps = {i: exact_sign_flip_p(u) for i, u in rows.items()}
    adjusted = dict(zip(ps, holm(list(ps.values())), strict=True))
    out = {}
    for i, u in rows.items():
        mean = math.fsum(u) / len(u)
        if adjusted[i] <= ALPHA and mean != 0:
            verdict = "reproduced" if mean > 0 else "contradicted"
        else:
            verdict = "undecided"
        ci = None
        if len(u) > 1:
            sd = math.sqrt(math.fsum((x - mean) ** 2 for x in u) / (len(u) - 1))
            half = float(st.t.ppf(0.975, len(u) - 1)) * sd / math.sqrt(len(u))
            ci = (mean - half, mean + half)
        out[i] = Judgement(tuple(u), mean, ps[i], adjusted[i], ci, verdict)
    return out


def _num(x: float, digits: int) -> str:
    if x == 0:
        return "0"
    s = f"{x:+.{digits}f}" if abs(x) >= 10**-digits else f"{x:+.1e}"
    return s.replace("-", "−").replace("e−0", "e−").replace("e+0", "e")


def _p(x: float) -> str:
    s = f"{x:.2g}"
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s.replace("-", "−")


def rule_interval(c: Claim, j: Judgement) -> str:
    """The interval cell of a ruled row: signs, mean, 95% t, exact p and Holm p."""
    n = len(j.units)
    k = sum(1 for x in j.units if x > 0)
    unit = "unit" if n == 1 else "units"
    parts = [f"{k} of {n} {unit} in the paper's direction; mean {_num(j.mean, c.unit_digits)}"]
    if j.ci95 is not None:
        lo, hi = (_num(x, c.unit_digits) for x in j.ci95)
        parts.append(f"95% t {lo} to {hi}")
    parts.append(f"exact sign-flip p {_p(j.p)}, Holm {_p(j.holm_p)}")
    return "; ".join(parts)


def rule_excluded(c: Claim, j: Judgement) -> str:
    """What the 95% t-interval of a ruled row rules out (+ = the paper's direction)."""
    if j.ci95 is None:
        return "none: one unit gives no interval"
    lo, hi = (_num(x, c.unit_digits) for x in j.ci95)
    return f"a mean effect below {lo} or above {hi} (95% t, + = the paper's direction)"


@dataclass
class Claim:
    paper: str
    claim: str
    where: str
    paper_number: str
    ours: str
    n: str
    values: dict[str, Value]
    interval: str = "—"
    note: str = ""
    verdict: str = ""
    reason: str = ""
    units: tuple[str, ...] = ()
    units_from: tuple[dict[str, Any], ...] = ()
    unit_digits: int = 3

    @property
    def ruled(self) -> bool:
        """True when the rule gives the verdict (the row has units)."""
        return bool(self.units or self.units_from)

    def unit_values(self, root: Path | None = None) -> list[float]:
        """The row's signed differences, one per unit, unrounded (+ = the paper's direction)."""
        names = {k: measured(v, root) for k, v in self.values.items()}
        out = [evaluate(expr, names) for expr in self.units]
        for spec in self.units_from:
            items = lookup(load_json(spec["file"], root), spec["path"])
            out += [float(spec.get("sign", 1)) * float(x) for x in items]
        return out

    def fill(self, template: str) -> str:
        def sub(m: re.Match[str]) -> str:
            return self.values[m.group(1)].text()

        return _PLACEHOLDER.sub(sub, template)


def load_claims(path: Path | None = None) -> list[Claim]:
    raw = yaml.safe_load(Path(path or default_source()).read_text())
    claims = []
    for i, row in enumerate(raw["claims"]):
        values = {}
        for name, spec in (row.get("values") or {}).items():
            values[name] = Value.from_spec(name, spec)
        keys = {"values", "units", "units_from", "unit_digits"}
        fields = {k: str(v) for k, v in row.items() if k not in keys}
        try:
            claim = Claim(
                values=values,
                units=tuple(str(u) for u in row.get("units") or ()),
                units_from=tuple(dict(u) for u in row.get("units_from") or ()),
                unit_digits=int(row.get("unit_digits", 3)),
                **fields,
            )
        except TypeError as e:
            raise ValueError(f"claims row {i}: {e}") from None
        if claim.paper not in PAPERS:
            raise ValueError(f"claims row {i}: paper {claim.paper!r} not in {sorted(PAPERS)}")
        if claim.ruled and (claim.verdict or claim.reason):
            raise ValueError(f"claims row {i}: a row with units gets its verdict from the rule")
        if not claim.ruled and (claim.verdict not in VERDICTS or not claim.reason):
            raise ValueError(
                f"claims row {i}: without units a row needs a verdict (one of {VERDICTS}) "
                "and the reason it is not the rule's"
            )
        for template in (claim.ours, claim.interval, claim.note, claim.reason):
            for name in _PLACEHOLDER.findall(template):
                if name not in values:
                    raise ValueError(f"claims row {i}: {{{name}}} has no value")
        claims.append(claim)
    return claims


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(claims: list[Claim], root: Path | None = None) -> str:
    """The rule and the Markdown table (between the BEGIN and END markers)."""
    judged = judge(claims, root)
    lines = [
        BEGIN,
        "",
        textwrap.fill(RULE, width=100, break_long_words=False, break_on_hyphens=False),
        "",
        "| # | paper | claim | where | paper's number | ours | n | interval | verdict "
        "| effect it rules out / why not |",
        "|---:|---|---|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(claims):
        note = c.fill(c.note)
        if i in judged:
            j = judged[i]
            interval = rule_interval(c, j)
            if c.interval not in ("", "—"):
                interval += "; " + c.fill(c.interval)
            verdict = j.verdict
            excluded = rule_excluded(c, j) + (f"; {note}" if note else "")
        else:
            interval = c.fill(c.interval)
            verdict = c.verdict
            excluded = f"verdict by hand: {c.fill(c.reason)}" + (f"; {note}" if note else "")
        cells = [
            str(i + 1),
            PAPERS[c.paper].split(" (")[0],
            c.claim,
            c.where,
            c.paper_number,
            c.fill(c.ours),
            c.n,
            interval,
            f"**{verdict}**",
            excluded,
        ]
        lines.append("| " + " | ".join(_cell(x) for x in cells) + " |")
    lines += ["", END]
    return "\n".join(lines)


def replace_block(markdown: str, table: str) -> str:
    """docs/results.md with its claims table (BEGIN..END) replaced by `table`."""
    return studies.replace_block(markdown, BEGIN, END, table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m studies.claims", description=__doc__)
    ap.add_argument("--source", type=Path, default=None, help="claims YAML")
    ap.add_argument("--doc", type=Path, default=repo_root() / "docs" / "results.md")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", action="store_true", help="replace the table in --doc")
    group.add_argument("--check", action="store_true", help="exit 1 if --doc is out of date")
    args = ap.parse_args(argv)
    claims = load_claims(args.source)
    bad = [f"{c.where} {v.name}" for c in claims for v in c.values.values() if not value_matches(v)]
    if bad:
        print("values that differ from their JSON: " + ", ".join(bad), file=sys.stderr)
        return 1
    table = render(claims)
    if args.write or args.check:
        text = args.doc.read_text()
        new = replace_block(text, table)
        if args.check:
            if new != text:
                print(f"{args.doc} is out of date: run python -m studies.claims --write")
                return 1
            return 0
        args.doc.write_text(new)
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
