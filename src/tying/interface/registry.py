"""The interface registry: the one place a `tie` string becomes a class.

Every `TokenInterface` subclass that sets a class attribute `tie` registers itself under that
name when its class is created (`TokenInterface.__init_subclass__`); the three built-in ones are
imported by `tying.interface`. A fourth interface is one new module defining its class (with
`tie`, `scratch`, `placeholder`, `count_parameters` and what else `TokenInterface` asks of
it), imported once — no other file branches on the name.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from tying.errors import InvalidInputError
from tying.interface.base import REGISTRY, TokenInterface


def ties() -> tuple[str, ...]:
    """The registered interface names, in registration order ("untied", "tt", "pit", ...)."""
    return tuple(REGISTRY)


def check_tie(tie: str) -> str:
    """Return `tie` if it names a registered interface, else raise ValueError listing the choices."""
    if tie not in REGISTRY:
        raise InvalidInputError(f"tie must be one of {ties()}, got {tie!r}")
    return tie


def interface_class(tie: str) -> type[TokenInterface]:
    """The interface class registered as `tie` (ValueError listing the choices otherwise)."""
    return REGISTRY[check_tie(tie)]


def tie_of(interface: TokenInterface) -> str:
    """The registered name of an interface instance ("untied", "tt", "pit", ...)."""
    tie = getattr(type(interface), "tie", None)
    if tie not in REGISTRY or not isinstance(interface, REGISTRY[tie]):
        raise InvalidInputError(
            f"{type(interface).__name__} is not a registered token interface: give it a class "
            f"attribute `tie`; registered: {ties()}"
        )
    return tie


#: Keywords every interface's `scratch` / `from_teacher_matrices` takes from the caller itself.
_COMMON_KEYWORDS = frozenset({"generator", "init_std", "bias", "teacher_tied"})


def check_options(tie: str, method: Any, options: Mapping[str, Any], what: str) -> None:
    """Raise ValueError when `options` holds a keyword that `method` of interface `tie` lacks.

    Args:
        tie: the interface name (for the message).
        method: the callable the options go to (its signature is the list of valid keywords).
        options: keyword arguments about to be passed.
        what: what the options are for, e.g. "scratch" or "conversion" (for the message).
    """
    params = inspect.signature(method).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    bad = sorted(set(options) - set(params))
    if bad:
        valid = sorted(
            n
            for n, p in params.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and n not in _COMMON_KEYWORDS
        )
        raise InvalidInputError(
            f"{', '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to tie={tie!r} "
            f"({what} options of {tie}: {', '.join(valid) or 'none'})"
        )


def build_interface(
    tie: str,
    vocab_size: int,
    d_model: int,
    *,
    generator: torch.Generator | None = None,
    init_std: float = 0.02,
    **options: Any,
) -> TokenInterface:
    """A freshly initialised interface for training from scratch: `interface_class(tie).scratch`.

    Args:
        tie: a registered name ("untied", "tt", "pit").
        vocab_size: V.
        d_model: d.
        generator: random source (deterministic construction).
        init_std: standard deviation of a Gaussian init of V×d matrices (interfaces that draw one).
        options: the interface's own scratch options (TT: input_grad_scale; PIT: trainable_z,
            diag_activation, diag_clamp, ...); one that does not apply raises ValueError.
    """
    cls = interface_class(tie)
    check_options(tie, cls.scratch, options, "scratch")
    return cls.scratch(vocab_size, d_model, generator=generator, init_std=init_std, **options)


def __getattr__(name: str) -> Any:
    if name == "TIES":  # a tuple fixed at first use; `ties()` follows later registrations
        return ties()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def interface_options(config: Any, tie: str) -> dict[str, Any]:
    """{constructor keyword: value} of interface `tie` read from `config`'s fields.

    The keys come from the interface class's `config_options` (config key -> keyword); keys
    the config does not have are skipped.
    """
    mapping = interface_class(tie).config_options
    return {kw: getattr(config, key) for key, kw in mapping.items() if hasattr(config, key)}


def options_section(config: Any, tie: str) -> Any | None:
    """The options of interface `tie` in a run config: its section named `tie` (of the
    interface class's `options_class`), or None when the interface has no options."""
    if interface_class(tie).options_class is None:
        return None
    return getattr(config, tie)


def check_interface_options(config: Any, tie: str) -> None:
    """Raise ValueError when `config` sets an option of another interface than `tie`.

    Options are flat keys (the interface class's `config_options`, in a model config) or a
    section named by the interface (its `options_class`, in a run config); one is "set" when
    it differs from its default.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    for other in ties():
        if other == tie:
            continue
        cls = interface_class(other)
        for key in cls.config_options:
            if key in defaults and getattr(config, key) != defaults[key]:
                raise InvalidInputError(
                    f"{key} applies to tie={other!r} only, got tie={tie!r} with "
                    f"{key}={getattr(config, key)!r}: leave it at its default "
                    f"({defaults[key]!r})"
                )
        if cls.options_class is not None and hasattr(config, other):
            section, default = getattr(config, other), cls.options_class()
            for f in dataclasses.fields(default):
                value = getattr(section, f.name)
                if value != getattr(default, f.name):
                    raise InvalidInputError(
                        f"{other}.{f.name} applies to tie={other!r} only, got tie={tie!r} "
                        f"with {other}.{f.name}={value!r}: leave it at its default "
                        f"({getattr(default, f.name)!r})"
                    )
