"""Values of the package's source read without importing it: the dataclass field defaults and
module constants that the `defaults:` of docs/numbers.yaml name (`studies.numbers`) and that
the defaults proposer collects (`studies.numbers_defaults`). `ast` only: no torch import."""

from __future__ import annotations

import ast
import importlib.util
import operator
from pathlib import Path
from typing import Any

OPERATORS: dict[type, Any] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}


def constant(node: ast.AST) -> Any:
    """The value of a constant expression of the source: literals, dicts, lists and
    arithmetic on them (192 << 20, 2**24, -1e-3)."""
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](constant(node.left), constant(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -constant(node.operand)
    if isinstance(node, ast.Dict):
        return {constant(k): constant(v) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [constant(e) for e in node.elts]
    return ast.literal_eval(node)


def assigned(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The value node of `name = ...` / `name: T = ...` (a dataclass `field(default=...)`
    gives its default) or the class `name`, among the statements `body`."""
    for stmt in body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return stmt
        targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else getattr(stmt, "targets", [])
        value = getattr(stmt, "value", None)
        if value is None or not any(isinstance(t, ast.Name) and t.id == name for t in targets):
            continue
        if isinstance(value, ast.Call):  # dataclasses.field(default=...)
            default = next((k.value for k in value.keywords if k.arg == "default"), None)
            if default is not None:
                return default
        return value
    return None


def module_source(parts: list[str]) -> Path | None:
    """The .py file of module `parts` (["tying", "options", "probe"]), found from its top
    package's location without importing the packages between (they may import torch)."""
    spec = importlib.util.find_spec(parts[0])
    if spec is None:
        return None
    if len(parts) == 1:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for root in spec.submodule_search_locations or []:
        base = Path(root).joinpath(*parts[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    return None


def code_default(name: str) -> Any:
    """The value of a dotted name of the package, read from its source (nothing is imported,
    so the check costs no torch import): a dataclass field's default
    ("tying.options.finetune.FinetuneOptions.rank"), a module-level constant
    ("tying.kernels.COMPILE_MIN_ELEMENTS") or a key of a module's dict
    ("tying.decoder.presets.PRESETS.tiny.d_model").

    Raises:
        LookupError: no module, class, field, constant or key of that name.
    """
    parts = name.split(".")
    for i in range(len(parts) - 1, 0, -1):
        source = module_source(parts[:i])
        if source is None:
            continue
        node: Any = ast.parse(source.read_text())
        rest = parts[i:]
        while rest and isinstance(node, (ast.Module, ast.ClassDef)):
            node = assigned(node.body, rest.pop(0))
            if node is None:
                raise LookupError(f"{name}: no {parts[len(parts) - len(rest) - 1]!r}")
        value = constant(node)
        for key in rest:
            value = value[key]
        return value
    raise LookupError(f"{name}: no module")
