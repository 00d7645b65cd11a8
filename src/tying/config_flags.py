"""Command-line flags made from a config dataclass (`tying.config`'s dialect on the command line).

- `add_config_arguments` makes an argparse flag of every field (kebab-case, `--max-steps`),
  with the help text of the field (the "Attributes:" section of the dataclass docstring, one
  `name: text` entry per field, units included), its type in words, its default as it would be
  typed and its choices, so the CLI never repeats a default by hand.
- `config_from_args` builds the dataclass from defaults < YAML < `key=value` overrides < flags
  (shrunk when TYING_EXAMPLE_BUDGET is set: `tying.example_budget`).

This module imports no torch (the CLI's `--help` stays fast).
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import types
import typing
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from tying.config import (
    ALIASES,
    CLI,
    POSITIONAL,
    ConfigError,
    T,
    _annotation_at,
    _choices,
    _hints,
    _is_config,
    _moved_keys,
    _optional_inner,
    _required,
    flag_name,
    load_config,
    parse_value,
    set_dotted,
)

# ----------------------------------------------------------------------------- docs
_ENTRY = re.compile(r"^(\s*)([A-Za-z_][\w, ]*?):\s+(.*)$")


def field_help(cls: type) -> dict[str, str]:
    """{field name: help text} from the "Attributes:" (or "Args:") section of `cls`'s docstring.

    Google style: an entry is `name: text`, continued on lines indented deeper; `a, b: text`
    documents several fields at once.
    """
    doc = inspect.getdoc(cls) or ""
    out: dict[str, str] = {}
    in_section = False
    indent: int | None = None
    current: list[str] = []
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped in ("Attributes:", "Args:"):
            in_section, indent, current = True, None, []
            continue
        if not in_section:
            continue
        if not stripped:
            continue
        lead = len(line) - len(line.lstrip())
        if lead == 0:  # a new top-level section or paragraph ends the attributes
            in_section = False
            continue
        match = _ENTRY.match(line)
        if match and (indent is None or len(match.group(1)) == indent):
            indent = len(match.group(1))
            current = [n.strip() for n in match.group(2).split(",")]
            for name in current:
                out[name] = match.group(3).strip()
        elif current and indent is not None and lead > indent:
            for name in current:
                out[name] += " " + stripped
    return out


# ----------------------------------------------------------------------------- CLI
def _type_label(annotation: Any) -> str:
    """A field's type in words, for --help: INT, FLOAT, STR, true|false, a Literal's values
    ({a,b}), a union's parts joined by | (`true|false|auto`, `FLOAT|auto`), a list's element
    type, and |null when None is allowed."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        parts = [_type_label(a) for a in args if a is not type(None)]
        label = "|".join(dict.fromkeys(p.strip("{}").replace(",", "|") for p in parts))
        if len(parts) == 1:
            label = parts[0]
        return label + ("|null" if type(None) in args else "")
    if origin is Literal:
        return "{" + ",".join(map(str, typing.get_args(annotation))) + "}"
    if origin in (list, tuple, set, frozenset):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return _type_label(args[0]) if args else "VALUE"
    if origin is dict or annotation is dict:
        return "MAP"
    if annotation is bool:
        return "true|false"
    if annotation in (int, float, str):
        return annotation.__name__.upper()
    return "VALUE"


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return "[" + ", ".join(map(str, items)) + "]" if items else "none"
    if isinstance(value, int) and abs(value) >= 10_000:
        return f"{value:_}".replace("_", ",")
    return str(value)


class _StoreDotted(argparse.Action):
    """Stores a flag's raw text under `namespace._flags[dotted key]` (parsed later)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        flags = getattr(namespace, "_flags", None)
        if flags is None:
            flags = {}
            namespace._flags = flags
        flags[self.dest] = values


class _BoolDotted(argparse.Action):
    """`--name` / `--no-name` for a bool field, stored like `_StoreDotted`."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.pop("nargs", None)
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        _StoreDotted.__call__(
            self, parser, namespace, not str(option_string).startswith("--no-"), option_string
        )


class _MovedDotted(argparse.Action):
    """An old flat flag of a key that moved into a section (`--t-init` for pit.t_init): stored
    under the new key like `_StoreDotted` (`--no-OLD` for a bool), and remembered in
    `namespace._moved_flags` so that `flags_from_args` warns once the CLI's log is set up."""

    def __init__(self, option_strings: list[str], dest: str, boolean: bool = False, **kwargs):
        if boolean:
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)
        self.boolean = boolean

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if self.boolean:
            values = not str(option_string).startswith("--no-")
        _StoreDotted.__call__(self, parser, namespace, values, option_string)
        moved = getattr(namespace, "_moved_flags", None)
        if moved is None:
            moved = []
            namespace._moved_flags = moved
        new = flag_name(self.dest)
        if str(option_string).startswith("--no-"):
            new = "--no-" + new[2:]
        moved.append((str(option_string), new))


def _add_moved_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """Hidden flags for the flat keys of `cls` that moved into a section (its sections'
    `MOVED_KEYS`): `tying convert --t-init output` still sets pit.t_init, with a
    DeprecationWarning, until tying 0.3. A moved section (`fit` -> pit.fit) keeps its fields'
    old flags (`--fit.tokens`)."""
    for old, (section, key) in _moved_keys(cls).items():
        new = f"{section}.{key}"
        inner, _ = _optional_inner(_annotation_at(cls, new))
        if _is_config(inner):
            hints = _hints(inner)
            leaves = [
                (f"{old}.{f.name}", f"{new}.{f.name}", hints[f.name])
                for f in dataclasses.fields(inner)
                if f.init
            ]
        else:
            leaves = [(old, new, inner)]
        for old_key, new_key, annotation in leaves:
            leaf, _ = _optional_inner(annotation)
            boolean = leaf is bool
            flags = [flag_name(old_key)] + (["--no-" + flag_name(old_key)[2:]] if boolean else [])
            many = typing.get_origin(leaf) in (list, tuple)
            try:
                parser.add_argument(
                    *flags,
                    dest=new_key,
                    action=_MovedDotted,
                    boolean=boolean,
                    **({} if boolean else {"nargs": "+" if many else None}),
                    help=argparse.SUPPRESS,
                    default=argparse.SUPPRESS,
                )
            except argparse.ArgumentError:  # the old name is a flag of its own today
                continue


def add_config_arguments(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    exclude: Iterable[str] = (),
    prefix: str = "",
    group: Any = None,
) -> None:
    """Add a flag for every field of `cls` (recursively for sections), help from the docstring.

    Positional fields (`positional()`) become positional arguments. Flags store raw text;
    `config_from_args` parses and checks it, so a flag, a YAML key and a `key=value`
    override of the same field mean the same thing.

    Args:
        parser: the verb's parser.
        cls: the options/config dataclass.
        exclude: field names (dotted for sections) without a flag.
        prefix: dotted prefix of a section (internal).
        group: argument group for a section (internal).
    """
    excluded = set(exclude)
    helps = field_help(cls)
    hints = _hints(cls)
    target = group if group is not None else parser
    for f in dataclasses.fields(cls):
        dotted = f"{prefix}{f.name}"
        if not f.init or dotted in excluded or f.metadata.get(CLI) is False:
            continue
        annotation = hints[f.name]
        inner, _ = _optional_inner(annotation)
        if _is_config(inner):
            section = parser.add_argument_group(
                f"{dotted} (section; also `{dotted}.KEY=VALUE`)", helps.get(f.name)
            )
            add_config_arguments(
                parser, inner, exclude=excluded, prefix=f"{dotted}.", group=section
            )
            continue
        text = helps.get(f.name, "")
        default = _default_text(f)
        if f.metadata.get(POSITIONAL):
            many = typing.get_origin(inner) in (list, tuple)
            target.add_argument(
                f.name,
                nargs=("+" if _required(f) else "*") if many else (None if _required(f) else "?"),
                metavar=f.name.upper(),
                help=text,
                default=argparse.SUPPRESS,
            )
            continue
        if _required(f):
            help_text = f"{text.rstrip('.')} (required)"
        else:
            help_text = f"{text.rstrip('.')} (default: {default})" if default else text
        choices = _choices(f)
        if inner is bool:
            target.add_argument(
                flag_name(dotted),
                "--no-" + flag_name(dotted)[2:],
                dest=dotted,
                action=_BoolDotted,
                help=help_text,
                default=argparse.SUPPRESS,
            )
            continue
        many = typing.get_origin(inner) in (list, tuple)
        target.add_argument(
            flag_name(dotted),
            dest=dotted,
            action=_StoreDotted,
            nargs="+" if many else None,
            metavar="{" + ",".join(choices) + "}"
            if choices
            else _type_label(inner if many else annotation),
            help=help_text.replace("%", "%%"),
            default=argparse.SUPPRESS,
        )
        for alias in f.metadata.get(ALIASES, ()):  # an old name's flag, kept out of --help
            target.add_argument(
                flag_name(f"{prefix}{alias}"),
                dest=f"{prefix}{alias}",
                action=_StoreDotted,
                nargs="+" if many else None,
                help=argparse.SUPPRESS,
                default=argparse.SUPPRESS,
            )
    if not prefix:
        _add_moved_flags(parser, cls)


def flags_from_args(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The flags and positionals given on the command line, parsed, as a nested mapping."""
    out: dict[str, Any] = {}
    raw: dict[str, Any] = dict(getattr(namespace, "_flags", {}) or {})
    for old_flag, new_flag in getattr(namespace, "_moved_flags", []):
        warnings.warn(
            f"{old_flag} is now {new_flag}; the old flag will be removed in tying 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
    for f in dataclasses.fields(cls):
        if f.metadata.get(POSITIONAL) and hasattr(namespace, f.name):
            raw[f.name] = getattr(namespace, f.name)
    for dotted, value in raw.items():
        annotation = _annotation_at(cls, dotted)
        if isinstance(value, bool) or value is None:
            parsed = value
        elif isinstance(value, list):
            inner, _ = _optional_inner(annotation)
            args = typing.get_args(inner)
            item = args[0] if args else Any
            parsed = [parse_value(v, item) if isinstance(v, str) else v for v in value]
        else:
            parsed = parse_value(value, annotation)
        set_dotted(out, dotted, parsed)
    return out


def split_config_items(items: Sequence[str]) -> tuple[str | None, list[str]]:
    """(YAML file or None, `key=value` overrides) from the positional items of a config verb:
    an optional file first, then overrides."""
    path = None
    items = list(items)
    if items and "=" not in items[0]:
        path, items = items[0], items[1:]
    bad = [i for i in items if "=" not in i]
    if bad:
        raise ConfigError(f"expected key=value after the config file, got {bad[0]!r}")
    return path, items


def config_from_args(
    cls: type[T],
    namespace: argparse.Namespace,
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> T:
    """`cls` from defaults < YAML `path` < `key=value` overrides < flags and positionals
    (shrunk when TYING_EXAMPLE_BUDGET is set: `tying.example_budget`)."""
    from tying.example_budget import apply_example_budget

    return apply_example_budget(load_config(cls, path, overrides, flags_from_args(cls, namespace)))
