"""`TYING_EXAMPLE_BUDGET=tiny`: every verb shrunk to a budget of seconds, for running the docs.

The examples of README.md and docs/*.md are run as written by tests/docs/test_examples.py, which
sets this variable instead of editing their text. When it is set to "tiny", the options of every
verb built from the command line (`tying.config_flags.config_from_args`) are capped, field by field
and in their nested sections (a `TrainConfig`'s `pit.fit`, an experiment's `train`, `lens`,
`updates` ...), by `TINY`:

- steps: max_steps, steps (demo), update_steps, train_steps, tuned_steps, unit_steps ≤ 2;
- tokens: max_tokens (the training text of `tying train`, the text of lens and side effects),
  eval_tokens, step0_tokens, lens_tokens, fit tokens, budget, ... ≤ a few hundred; seq_len ≤ 64,
  micro_batch_size ≤ 2 and one micro-batch a step (global_batch_tokens = seq_len ×
  micro_batch_size, batch_tokens likewise);
- items: limit ≤ 1 (evaluate, side effects, updates), max_new_tokens ≤ 16, one seed, bootstrap
  resamples ≤ 100;

a value already below its cap is kept, and a value of None ("all", "until done") becomes the
cap. Models are not shrunk: an example that names SmolLM2 still loads it. Anything else set
to this variable is bad input (InvalidInputError). A warning says when the budget is active.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, TypeVar

from tying.errors import InvalidInputError

#: The environment variable; its one accepted value is "tiny".
EXAMPLE_BUDGET_ENV = "TYING_EXAMPLE_BUDGET"

#: Caps of the "tiny" budget, by option name (whatever the verb or section it belongs to).
TINY: dict[str, int] = {
    # optimizer steps
    "max_steps": 2,
    "steps": 2,
    "update_steps": 1,
    "train_steps": 2,
    "tuned_steps": 2,
    "unit_steps": 2,
    # tokens (of text read, measured or generated)
    "max_tokens": 512,
    "eval_tokens": 128,
    "step0_tokens": 128,
    "lens_tokens": 128,
    "side_effect_tokens": 128,
    "tokens": 256,
    "check_tokens": 64,
    "budget": 256,
    "corpus_tokens": 2048,
    "train_tokens_per_step": 128,
    "tuned_tokens_per_step": 128,
    "seq_len": 64,
    "max_seq_len": 128,
    "micro_batch_size": 2,
    "max_new_tokens": 16,
    # items and repetitions
    "limit": 1,
    "update_limit": 1,
    "max_documents": 4,
    "bootstrap_resamples": 100,
    "grad_share_steps": 2,
    "batch_size": 2,
    "eval_batch_size": 2,
}
#: TrainConfig keys an experiment's `train` section gets when it does not set them (then capped).
_TRAIN_SECTION: dict[str, Any] = {
    "max_steps": 2,
    "seq_len": 64,
    "micro_batch_size": 2,
    "global_batch_tokens": 128,
    "eval_tokens": 128,
    "step0_tokens": 128,
    "max_tokens": 512,
}
#: Options whose None means "all" or "until done": None becomes the cap.
_NONE_MEANS_ALL = {"limit", "max_steps", "steps", "max_new_tokens", "max_tokens", "unit_steps"}
#: Options that take the place of a run's token budget ("auto" becomes the cap).
_AUTO_IS_A_BUDGET = {"max_tokens", "budget", "update_limit"}

log = logging.getLogger(__name__)
T = TypeVar("T")


def example_budget() -> str | None:
    """The active budget ("tiny") or None when `TYING_EXAMPLE_BUDGET` is unset or empty.

    Raises:
        InvalidInputError: any other value (a ValueError, printed as bad input).
    """
    value = os.environ.get(EXAMPLE_BUDGET_ENV, "").strip()
    if not value:
        return None
    if value != "tiny":
        raise InvalidInputError(f"{EXAMPLE_BUDGET_ENV} must be tiny or unset, got {value!r}")
    return value


def apply_example_budget(options: T) -> T:
    """`options` (a verb's dataclass) capped by `TINY` when the budget is active, else as is.

    The dataclass is changed in place (and returned); nested dataclasses and dict sections are
    capped too. Logs one warning naming the budget.
    """
    if example_budget() is None:
        return options
    log.warning(
        "%s=tiny: %s shrunk to a tiny budget (a couple of steps, a few hundred tokens, one "
        "item); unset it for real results",
        EXAMPLE_BUDGET_ENV,
        type(options).__name__,
    )
    _shrink(options)
    return options


def _capped(name: str, value: Any) -> Any:
    cap = TINY.get(name)
    if cap is None or isinstance(value, bool):
        return value
    if value is None:
        return cap if name in _NONE_MEANS_ALL else value
    if value == "auto" and name in _AUTO_IS_A_BUDGET:
        return cap
    if isinstance(value, int) and value > cap:
        return cap
    return value


def _shrink(obj: Any) -> Any:
    """Cap `obj` in place: a dataclass's fields, a dict's keys; returns it."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        _shrink_items(items)
        for name, value in items.items():
            object.__setattr__(obj, name, value)
    elif isinstance(obj, dict):
        _shrink_items(obj)
    return obj


def _shrink_items(items: dict[str, Any]) -> None:
    if isinstance(items.get("train"), dict):  # an experiment's TrainConfig keys of every run
        items["train"] = {**_TRAIN_SECTION, **items["train"]}
    for name, value in list(items.items()):
        if dataclasses.is_dataclass(value) or isinstance(value, dict):
            items[name] = _shrink(value)
        else:
            items[name] = _capped(name, value)
    if isinstance(items.get("seeds"), list) and len(items["seeds"]) > 1:
        items["seeds"] = items["seeds"][:1]
    # one micro-batch per optimizer step, so the batch stays a multiple of the window
    if {"global_batch_tokens", "seq_len", "micro_batch_size"} & set(items) and (
        "global_batch_tokens" in items or "micro_batch_size" in items
    ):
        seq_len = int(items.get("seq_len") or TINY["seq_len"])
        micro = int(items.get("micro_batch_size") or TINY["micro_batch_size"])
        items.update(seq_len=seq_len, micro_batch_size=micro, global_batch_tokens=seq_len * micro)
    if "batch_tokens" in items and "seq_len" in items:
        items["batch_tokens"] = min(int(items["batch_tokens"]), 2 * int(items["seq_len"]))
