"""The one configuration dialect: dataclasses, YAML files, `key=value` overrides and CLI flags.

    cfg = load_config(TrainConfig, "configs/train.yaml", ["lr=3e-4", "tie=pit"])
    cfg = load_config(ExperimentConfig, path, ["train.lr=1e-3", "seeds=[0,1]"])

- A config is a dataclass. A field whose type is another dataclass is a section: in YAML a
  mapping, in overrides and flags a dotted key (`train.lr=1e-3`, `--train.lr 1e-3`).
- Values of overrides and flags are parsed as YAML scalars (`3e-4`, `true`, `null`,
  `[1, 2]`), except for string fields, which take the text as it is. Every value is then
  checked against the field's type: int, float, bool, str, `Literal[...]` choices, optional
  (`X | None`), lists, nested dataclasses, mappings.
- An unknown key is an error that names the closest known key. A renamed key (a field whose
  metadata lists `aliases`) is accepted with a DeprecationWarning, and so is a flat key that
  moved into a section (the section class's `MOVED_KEYS`, {old key: field}: `pit_t_scale` is
  now `pit.t_scale`).
- The command-line flags of a config (`add_config_arguments`, `config_from_args`) are made
  from the same dataclasses by `tying.config_flags`.

This module imports no torch (the CLI's `--help` stays fast).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import types
import typing
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

from tying.errors import MissingFileError, UserError, read_text

T = TypeVar("T")

#: Field metadata keys understood here.
POSITIONAL = "positional"  # the field is a positional CLI argument
ALIASES = "aliases"  # old names of the field, accepted with a DeprecationWarning
CLI = "cli"  # False: no CLI flag (set by code, or only in YAML)
CHOICES = "choices"  # a callable (or "module:function") listing the valid values, for --help


class ConfigError(UserError, ValueError):
    """A configuration file, override or flag that cannot be applied (bad user input: a
    `tying.errors.UserError`; also a ValueError for callers that catch that)."""


# ----------------------------------------------------------------------------- fields
def positional(default: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """A dataclass field that the CLI takes as a positional argument."""
    return dataclasses.field(default=default, metadata={POSITIONAL: True}, **kwargs)


def tie_field(default: str = "tt") -> Any:
    """The `tie` field of an options dataclass: a registered interface name (choices in --help)."""
    return dataclasses.field(
        default=default, metadata={CHOICES: "tying.options.interface:tie_names"}
    )


def renamed(default: Any, *aliases: str, **kwargs: Any) -> Any:
    """A dataclass field that was called one of `aliases` before (accepted, with a warning)."""
    return dataclasses.field(default=default, metadata={ALIASES: aliases}, **kwargs)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


def _is_config(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _optional_inner(annotation: Any) -> tuple[Any, bool]:
    """(X, True) for `X | None`, else (annotation, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(args) < len(typing.get_args(annotation)):
            return args[0], True
    return annotation, False


def _suggest(key: str, known: Iterable[str], prefix: str = "") -> str:
    known = sorted(known)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    if close:
        return f"; did you mean {prefix + close[0]!r}?"
    return f"; known keys: {', '.join(prefix + k for k in known)}"


# ----------------------------------------------------------------------------- values
def _coerce(name: str, value: Any, annotation: Any, source: str = "config") -> Any:
    """Check `value` against a field annotation, converting the harmless cases (int -> float).

    `name` is the key path (`pit.t_scale`), `source` where the mapping came from (a file).
    """
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(name, value, option, source)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{name}: invalid value {value!r}")
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ConfigError(
                f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}"
            )
        return value
    if _is_config(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping of key: value, got {value!r}")
        return from_dict(annotation, value, source=source, section=name)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        item = args[0] if args else Any
        items = [_coerce(name, v, item, source) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping, got {value!r}")
        args = typing.get_args(annotation)
        if len(args) == 2:
            return {k: _coerce(f"{name}.{k}", v, args[1], source) for k, v in value.items()}
        return value
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if annotation in (int, float) and isinstance(value, str):
        with contextlib.suppress(ValueError):  # YAML 1.1 reads "3e-4" (no dot) as a string
            value = float(value)
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
            raise ConfigError(f"{name} must be an integer, got {value!r}")
        return int(value)
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return str(value)
    return value


def parse_value(raw: str, annotation: Any = Any) -> Any:
    """The value of one override or flag: the text itself for string fields (`null`/`none`
    for None where allowed), else the text parsed as a YAML scalar."""
    inner, optional = _optional_inner(annotation)
    if optional and raw.strip().lower() in ("null", "none", "~"):
        return None
    if inner is str or (typing.get_origin(inner) is Literal and _all_str(inner)):
        return raw
    if not raw.strip():
        return None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse {raw!r}: {str(e).splitlines()[0]}") from None


def _all_str(literal: Any) -> bool:
    return all(isinstance(c, str) for c in typing.get_args(literal))


def _moved_keys(cls: type) -> dict[str, tuple[str, str]]:
    """{old flat key: (section field, key in the section)} of `cls`'s sections' `MOVED_KEYS`."""
    fields = _fields(cls)
    hints = _hints(cls)
    out: dict[str, tuple[str, str]] = {}
    for name in fields:
        inner, _ = _optional_inner(hints[name])
        if _is_config(inner):
            for old, new in getattr(inner, "MOVED_KEYS", {}).items():
                if old not in fields:
                    out[old] = (name, new)
    return out


def lift_moved_keys(
    cls: type, data: dict[str, Any], source: str = "config", warn: bool = True
) -> dict[str, Any]:
    """`data` with the flat keys that moved into a section of `cls` put into that section.

    Args:
        cls: the config dataclass.
        data: its mapping (not changed).
        source: where the mapping comes from (for messages).
        warn: emit a DeprecationWarning per moved key (off for configs the project saved
            itself, e.g. an earlier run's config.yaml).

    Raises:
        ConfigError: an old key and its new place both given, with different values.
    """
    moved = _moved_keys(cls)
    if not moved or not any(key in data for key in moved):
        return data
    out = dict(data)
    for old, (section, key) in moved.items():
        if old not in out:
            continue
        value = out.pop(old)
        current = out.get(section)
        if dataclasses.is_dataclass(current):
            current = to_dict(current)
        merged = dict(current or {})
        if key in merged and merged[key] != value:
            raise ConfigError(
                f"{source}: {old}={value!r} and {section}.{key}={merged[key]!r} both given; "
                f"keep {section}.{key}"
            )
        merged[key] = value
        out[section] = merged
        if warn:
            warnings.warn(
                f"{source}: key {old!r} is now {section}.{key} (section {section!r}); the old "
                "name will be removed in tying 0.3",
                DeprecationWarning,
                stacklevel=3,
            )
    return out


def _annotation_at(cls: type, dotted: str) -> Any:
    """The annotation of a dotted key inside `cls` (Any when unknown: checked later)."""
    if _is_config(cls) and dotted in (moved := _moved_keys(cls)):
        section, key = moved[dotted]
        dotted = f"{section}.{key}"
    annotation: Any = cls
    for part in dotted.split("."):
        inner, _ = _optional_inner(annotation)
        if not _is_config(inner):
            return Any
        hints = _hints(inner)
        names = {f.name: f.name for f in dataclasses.fields(inner)}
        for f in dataclasses.fields(inner):
            for alias in f.metadata.get(ALIASES, ()):
                names[alias] = f.name
        if part not in names:
            return Any
        annotation = hints[names[part]]
    return annotation


def parse_overrides(overrides: Sequence[str], cls: type | None = None) -> dict[str, Any]:
    """`["a=1", "s.b=x"]` -> `{"a": 1, "s": {"b": "x"}}` (dotted keys become nested mappings).

    Args:
        overrides: `key=value` items.
        cls: the config class, so that string fields keep their text (see `parse_value`).
    """
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key:
            raise ConfigError(f"override {item!r} has no key")
        annotation = _annotation_at(cls, key) if cls is not None else Any
        set_dotted(out, key, parse_value(raw, annotation))
    return out


def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """data["a"]["b"] = value for key "a.b" (creating the mappings on the way)."""
    *path, leaf = key.split(".")
    node = data
    for part in path:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {} if child is None or not dataclasses.is_dataclass(child) else to_dict(child)
            node[part] = child
        node = child
    node[leaf] = value


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, recursively for mappings (a new dict; the inputs are unchanged)."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


# ----------------------------------------------------------------------------- building
def from_dict(
    cls: type[T], data: dict[str, Any], source: str = "config", section: str | None = None
) -> T:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and ill-typed values.

    `source` names where the mapping came from (a file, "config", "overrides") and `section`
    the key path of `cls` inside it (`pit`); messages name keys by their path (`pit.t_init`)
    and the file. Without `section`, a `source` other than "config"/"overrides" is taken
    as the section's path (`updates.finetune`).

    Nested dataclass fields take mappings; renamed keys (metadata `aliases`) and flat keys that
    moved into a section (`lift_moved_keys`) are accepted with a DeprecationWarning.
    """
    if section is None:
        section = "" if source in ("config", "overrides") else source
    where = "" if source == section else f" in {source}"
    data = lift_moved_keys(cls, data, source)
    fields = _fields(cls)
    aliases = {a: f.name for f in fields.values() for a in f.metadata.get(ALIASES, ())}
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        name = key
        if key in aliases:
            name = aliases[key]
            warnings.warn(
                f"{source}: key {key!r} is now called {name!r}; the old name will be removed "
                "in tying 0.3",
                DeprecationWarning,
                stacklevel=2,
            )
        if name not in fields:
            path = f"{section}.{key}" if section else key
            prefix = f"{section}." if section else ""
            raise ConfigError(f"unknown key {path!r}{where}" + _suggest(key, fields, prefix))
        qualified = f"{section}.{name}" if section else name
        kwargs[name] = _coerce(qualified, value, hints[name], source)
        choices = _choices(fields[name])
        if choices and kwargs[name] is not None and str(kwargs[name]) not in choices:
            raise ConfigError(f"{qualified} must be one of {', '.join(choices)}; got {value!r}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as e:  # a section's own check (e.g. PitOptions.__post_init__)
        raise ConfigError(str(e)) from None
    except TypeError as e:
        missing = [n for n, f in fields.items() if _required(f) and n not in kwargs]
        if missing:
            flags = ", ".join(flag_name(m) for m in missing)
            where = "" if source in ("config", "overrides") else f"{source}: "
            raise ConfigError(
                f"{where}missing required setting(s) {', '.join(missing)} ({flags})"
            ) from None
        raise ConfigError(f"{source}: {e}") from None


def _required(f: dataclasses.Field) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML config file (ConfigError/MissingFileError with a one-line reason)."""
    p = Path(path)
    if not p.exists():
        raise MissingFileError(f"config file {p} does not exist")
    try:
        loaded = yaml.safe_load(read_text(p, "config file"))
    except yaml.MarkedYAMLError as e:  # file:line:column: what is wrong
        mark = e.problem_mark
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(p)
        raise ConfigError(f"{where}: not valid YAML: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{p} is not valid YAML: {str(e).splitlines()[0]}") from None
    loaded = loaded or {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{p} must hold a mapping of key: value, got {type(loaded).__name__}")
    return loaded


def load_config(
    cls: type[T],
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    flags: dict[str, Any] | None = None,
) -> T:
    """A `cls` from defaults, then the YAML file at `path`, then `key=value` overrides, then flags.

    Args:
        cls: the config dataclass.
        path: a YAML file, or None.
        overrides: `key=value` items (dotted keys for sections).
        flags: values already parsed from CLI flags, as a nested mapping.
    """
    data: dict[str, Any] = read_yaml(path) if path is not None else {}
    data = merge(data, parse_overrides(overrides, cls))
    if flags:
        data = merge(data, flags)
    return from_dict(cls, data, source=str(path) if path else "config", section="")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON/YAML-able dict of a config dataclass (tuples become lists, sections mappings)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, tuple | list | frozenset | set):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return plain(cfg)


def save_config(cfg: Any, path: str | Path) -> None:
    """Write a config dataclass as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))


def flag_name(dotted: str) -> str:
    """`--max-steps` for "max_steps", `--train.lr` for "train.lr"."""
    return "--" + dotted.replace("_", "-")


def _choices(f: dataclasses.Field) -> list[str]:
    """The choices a field's metadata names (`choices`: a callable or "module:function")."""
    source = f.metadata.get(CHOICES)
    if source is None:
        return []
    if isinstance(source, str):
        module, _, attr = source.partition(":")
        source = getattr(importlib.import_module(module), attr)
    return [str(c) for c in source()]
