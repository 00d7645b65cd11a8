"""Token ids inside the vocabulary: the check every embedding lookup and loss makes.

`check_ids` refuses ids outside [0, V) with a `TokenIdError`, a `tying.errors.UserError` (bad
input: data made by another tokenizer, a model of another vocabulary) on the CPU, and with an
asynchronous device assertion on CUDA and under `torch.compile`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tying.errors import UserError


class TokenIdError(UserError, ValueError, IndexError):
    """Token ids outside the vocabulary [0, V): bad input (data made by another tokenizer, a
    model of another vocabulary), so a `tying.errors.UserError` that the CLI prints as one
    line; also a ValueError and an IndexError, as it was before, for callers that catch those."""


def check_ids(
    ids: Tensor, vocab_size: int, what: str, hint: str = "", valid: Tensor | None = None
) -> None:
    """Refuse ids outside [0, V) (among the `valid` ones, where given).

    On the CPU in eager mode: a `TokenIdError` (a ValueError and an IndexError)
    "{what} {id} is outside the vocabulary [0, V){hint}"
    (reads the minimum and maximum back to the host). On CUDA and under `torch.compile`:
    `torch._assert_async`, which neither waits for the device nor breaks the compiled graph
    (a bad id fails the step with a RuntimeError; on CUDA, later): check ids where the data
    is loaded to catch them early.

    Args:
        ids: integer ids, any shape.
        vocab_size: V.
        what: the ids' name in the message ("token id", "target id").
        hint: appended to the message.
        valid: optional bool mask of the ids to check, shaped like `ids`.
    """
    if ids.device.type == "cpu" and not torch.compiler.is_compiling():
        check = ids if valid is None else ids[valid]
        if check.numel():
            lo, hi = int(check.min()), int(check.max())
            if lo < 0 or hi >= vocab_size:
                bad = hi if hi >= vocab_size else lo
                raise TokenIdError(
                    f"{what} {bad} is outside the vocabulary [0, {vocab_size}){hint}"
                )
        return
    ok = (ids >= 0) & (ids < vocab_size)
    if valid is not None:
        ok = ok | ~valid
    torch._assert_async(ok.all(), f"a {what} is outside the vocabulary [0, {vocab_size}){hint}")
