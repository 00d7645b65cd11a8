"""The one configuration system: dataclasses, YAML files and `key=value` overrides.

    cfg = load_config(TrainConfig, "configs/train.yaml", ["lr=3e-4", "tie=pit"])

Values of overrides are parsed as YAML scalars (`3e-4`, `true`, `null`,
`[1, 2]`), then checked against the dataclass field's type. An unknown key is
an error that names the closest known key. A field whose type is itself a
dataclass is a section: a mapping in YAML (`distill: {teacher: initial}`) and
dotted keys in overrides (`distill.alpha=0.5`), merged key by key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration file or override that cannot be applied."""


def _suggest(key: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(sorted(known))}"


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    """Check `value` against a field annotation, converting the harmless cases (int -> float)."""
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
                return _coerce(name, value, option)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0] if errors else f"{name}: invalid value {value!r}")
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} must be a list, got {value!r}")
        args = typing.get_args(annotation)
        item = args[0] if args else Any
        items = [_coerce(name, v, item) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping, got {value!r}")
        return value
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise ConfigError(
                f"{name} must be a mapping of {annotation.__name__} keys, got {value!r}"
            )
        return from_dict(annotation, value, source=f"section {name!r}")
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


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """`["a=1", "b=x"]` -> `{"a": 1, "b": "x"}` (values parsed as YAML scalars)."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        out[key] = yaml.safe_load(raw) if raw.strip() else None
    return out


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`base` updated by `update`; dotted keys ("a.b") and nested mappings merge key by key."""
    out = dict(base)
    for key, value in update.items():
        head, dot, rest = key.partition(".")
        if dot:
            value, key = {rest: value}, head
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif isinstance(value, dict):
            out[key] = _merge({}, value)
        else:
            out[key] = value
    return out


def from_dict(cls: type[T], data: dict[str, Any], source: str = "config") -> T:
    """Build dataclass `cls` from a mapping, rejecting unknown keys and ill-typed values.

    Dotted keys ("section.key") address fields of a section (a dataclass-typed field).
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = typing.get_type_hints(cls)
    kwargs = {}
    data = _merge({}, data)
    for key, value in data.items():
        if key not in fields:
            raise ConfigError(f"unknown key {key!r} in {source}" + _suggest(key, list(fields)))
        kwargs[key] = _coerce(key, value, hints[key])
    try:
        return cls(**kwargs)
    except TypeError as e:  # pragma: no cover - dataclass signature errors
        raise ConfigError(str(e)) from e


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """A `cls` from defaults, then the YAML file at `path`, then `key=value` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {p} does not exist")
        loaded = yaml.safe_load(p.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{p} must hold a mapping of key: value, got {type(loaded).__name__}")
        for key in loaded:
            if str(key).partition(".")[0] not in {f.name for f in dataclasses.fields(cls)}:  # type: ignore[arg-type]
                raise ConfigError(
                    f"unknown key {key!r} in {p}"
                    + _suggest(key, [f.name for f in dataclasses.fields(cls)])  # type: ignore[arg-type]
                )
        data = _merge(data, loaded)
    data = _merge(data, parse_overrides(overrides))
    return from_dict(cls, data, source=str(path) if path else "overrides")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON/YAML-able dict of a config dataclass (tuples become lists)."""

    def plain(v: Any) -> Any:
        if isinstance(v, tuple | list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v

    return {k: plain(v) for k, v in dataclasses.asdict(cfg).items()}


def save_config(cfg: Any, path: str | Path) -> None:
    """Write a config dataclass as YAML."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
