"""The flags of keys that moved into a section (`MOVED_KEYS`) still work for one release:
`tying convert --t-init X` sets pit.t_init, with a DeprecationWarning naming the new flag, and
stays out of --help; the result equals the new flags' exactly."""

from __future__ import annotations

import warnings

import pytest

from tying.cli import build_parser
from tying.config_flags import config_from_args
from tying.options.convert import ConvertOptions

COMMON = ["smollm2", "--tie", "pit", "--out", "converted"]


def _options(args: list[str]) -> tuple[ConvertOptions, list[str]]:
    namespace = build_parser("convert").parse_intermixed_args(COMMON + args)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        options = config_from_args(ConvertOptions, namespace)
    return options, [str(w.message) for w in caught if w.category is DeprecationWarning]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (["--t-init", "identity"], ["--pit.t-init", "identity"], "--t-init is now --pit.t-init"),
        (["--no-centre"], ["--no-pit.centre"], "--no-centre is now --no-pit.centre"),
        (
            ["--fit.tokens", "128"],
            ["--pit.fit.tokens", "128"],
            "--fit.tokens is now --pit.fit.tokens",
        ),
    ],
)
def test_an_old_flag_sets_the_moved_key_and_warns(old, new, message) -> None:
    by_old, warned = _options(old)
    by_new, warned_new = _options(new)
    assert by_old == by_new
    assert by_old != _options([])[0]  # the flag changed something
    assert [w for w in warned if message in w and "removed in tying 0.3" in w] != []
    assert warned_new == []


def test_old_flags_stay_out_of_help() -> None:
    text = build_parser("convert").format_help()
    assert "--pit.t-init" in text and "--t-init" not in text.replace("--pit.t-init", "")
