"""The package layering of docs/architecture.md, enforced on every import statement.

Each package of `tying` sits on a layer and may import only from its own package and from
lower layers; this is checked on every `import` / `from ... import` in the source, including
imports inside functions (an upward import hidden in a function is still a cycle). Inside a
package, modules import each other without a cycle either (`test_no_import_cycle`).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tying"
#: The studies of docs/results (a package of the repository, not of `tying`): checked as one
#: more package above the library, so that they use `tying` like any other package above it.
STUDIES = ROOT / "studies"

#: package -> layer (docs/architecture.md). Lower layers never import higher ones.
LAYERS: dict[str, float] = {
    "_compat": 0,
    "errors": -1,  # below everything: the error types every layer raises
    "example_budget": -0.5,  # imports only errors; config (layer 0) imports it
    "config": 0,
    "config_flags": 0.25,  # the CLI flags of a config: imports config and example_budget
    "paths": 0,
    "threads": 0,
    "devices": 0,
    "outputs": 0,
    "kernels": 0.25,  # asks devices (layer 0) whether Triton compiles for a GPU
    "options": 0.5,
    "info": 1,
    "interface": 1,
    "analysis": 2,
    "data": 2,
    "decoder": 2,
    "conversion": 2,
    "hf": 3,
    "train": 4,
    "loader": 5,
    "adapters": 5,
    "lens": 6,
    "probe": 6,
    "teacher": 6,
    "report": 5,
    "evaluation": 7,
    "update": 8,
    "experiment": 9,
    "commands": 10,
    "cli": 10,
    "studies": 10,
    "__main__": 11,
}


def _package(module: str) -> str:
    """ "train" for tying.train.loop, "tying" for tying itself, "studies" for any study."""
    parts = module.split(".")
    if parts[0] == "studies":
        return "studies"
    return parts[1] if len(parts) > 1 else "tying"


def _ours(name: str) -> bool:
    return name.startswith("tying.") or name.split(".")[0] == "studies"


def _modules() -> list[tuple[str, Path]]:
    """(module name, file) of every module of src/tying and studies/."""
    return [
        (".".join(path.relative_to(base).with_suffix("").parts).removesuffix(".__init__"), path)
        for base, folder in ((SRC.parent, SRC), (ROOT, STUDIES))
        for path in sorted(folder.rglob("*.py"))
    ]


def _imports() -> list[tuple[str, str, int]]:
    """(importing module, imported tying or studies module, line) for every import in
    src/tying and studies/."""
    found = []
    for module, path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found += [(module, n, node.lineno) for n in names if _ours(n)]
    return found


def test_the_studies_are_seen() -> None:
    """The layering reads the studies too (a study that moved away would escape it)."""
    studies = {m for m, _ in _modules() if _package(m) == "studies"}
    assert {"studies.claims", "studies.teacher_seeds", "studies.update_power"} <= studies
    assert any(_package(m) == "studies" and t.startswith("tying.") for m, t, _ in _imports())


def test_studies_and_benchmarks_import_public_names_only() -> None:
    """What lives outside the package uses its public names: a private `_name` of `tying`
    imported by a study or a benchmark is a name the library may change without notice."""
    private = []
    for path in sorted([*STUDIES.rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tying"):
                private += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_")
                ]
            elif isinstance(node, ast.Import):
                private += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {a.name}"
                    for a in node.names
                    if a.name.startswith("tying")
                    and any(p.startswith("_") for p in a.name.split("."))
                ]
    assert private == []


def _module_graph() -> dict[str, set[str]]:
    """module -> the modules of src/tying and studies/ it imports (any import statement,
    inside functions too).

    `from tying.a import b` names module tying.a.b when that is a module, else tying.a;
    `import tying.a.b` names tying.a.b. Importing a submodule runs its package's __init__ first,
    but that is Python's order of execution, not a dependency the code states: only the named
    module is an edge.
    """
    files = _modules()
    modules = {m for m, _ in files}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [
                    f"{node.module}.{alias.name}"
                    if f"{node.module}.{alias.name}" in modules
                    else node.module
                    for alias in node.names
                ]
            else:
                continue
            graph[module] |= {t for t in targets if t in modules and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The finder itself: a loop of three, a self-contained pair and a chain."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle() -> None:
    """No module of src/tying (or studies/) imports itself through others, imports inside
    functions included (docs/architecture.md): across packages the layers forbid it, inside
    one package this does."""
    graph = _module_graph()
    assert {"tying.train.build", "tying.train.resolve"} <= set(graph)
    assert "tying.train.resolve" in graph["tying.train.build"]  # edges are read
    assert _cycles(graph) == []


def test_every_package_has_a_layer() -> None:
    packages = {_package(m) for m, _, _ in _imports()} | {_package(t) for _, t, _ in _imports()}
    assert packages - {"tying"} <= set(LAYERS), sorted(packages - {"tying"} - set(LAYERS))


def test_no_package_imports_a_higher_layer() -> None:
    upward = [
        f"{module}:{line} imports {target}"
        for module, target, line in _imports()
        if _package(module) != "tying"
        and _package(module) != _package(target)
        and LAYERS[_package(target)] >= LAYERS[_package(module)]
    ]
    assert upward == []


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("analysis", "train"),
        ("hf", "train"),
        ("hf", "loader"),
        ("interface", "decoder"),
        ("conversion", "hf"),
    ],
)
def test_named_rules(package: str, forbidden: str) -> None:
    """The rules docs/architecture.md states by name (also implied by the layers)."""
    assert not [
        (m, t) for m, t, _ in _imports() if _package(m) == package and _package(t) == forbidden
    ]


#: Branches on an interface name (or class) that predate the rule, per module: item 4 of
#: issue 27 moves them behind the registry. The count may only go down.
TIE_BRANCHES_LEFT = {
    "tying.decoder.config": 1,
    "tying.experiment.analysis": 2,
    "tying.probe.compare": 1,
    "tying.train.optim": 1,
    "tying.conversion.fit": 1,  # fit_pit fits PIT's own parameters (Z, L, input bias)
}


def _tie_branches() -> dict[str, list[int]]:
    """module -> lines that compare with a registered tie name or test isinstance against an
    interface class, outside the `interface` package (where the registry lives)."""
    from tying.interface import ties

    names = set(ties())
    classes = {"Untied", "TransposeTying", "PseudoInverseTying"}

    def strings(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return set().union(*(strings(e) for e in node.elts))
        return set()

    found: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        if _package(module) == "interface":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                compared = set().union(strings(node.left), *(strings(c) for c in node.comparators))
                hit = bool(compared & names)
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                hit = len(node.args) == 2 and bool(
                    {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} & classes
                )
            else:
                continue
            if hit:
                found.setdefault(module, []).append(node.lineno)
    return found


def test_no_new_tie_branch_outside_the_registry() -> None:
    """Whatever depends on the interface asks the registry or the class (docs/architecture.md):
    a comparison with a tie name or an isinstance against an interface class is a leak."""
    leaks = {
        module: lines
        for module, lines in _tie_branches().items()
        if len(lines) > TIE_BRANCHES_LEFT.get(module, 0)
    }
    assert leaks == {}


def test_commands_only_parse_and_call() -> None:
    """A verb module defines `add_arguments` and `run`, nothing else: its work lives in a
    package function that takes an options dataclass."""
    for path in sorted((SRC / "commands").glob("*.py")):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        assert defined == {"add_arguments", "run"}, (path.name, sorted(defined))


def test_top_level_help_imports_no_torch() -> None:
    code = (
        "import sys, contextlib, io\n"
        "import tying.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    tying.cli.main(['--help'])\n"
        "assert 'torch' not in sys.modules, 'tying --help imported torch'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
