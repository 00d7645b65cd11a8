"""How many trailing positions of an lm-eval log-likelihood batch need logits.

lm-eval's `HFLM._loglikelihood_tokens` feeds a causal LM a right-padded batch (B, T) of
`(context + continuation)[-(max_length + 1):][:-1]` rows, takes the log-softmax of all B·T·V
logits and keeps, for row i, the positions [n_i − c_i, n_i) (n_i its unpadded length, c_i its
continuation's tokens), counted from the end of the logits it is given: it accepts logits of
fewer positions than T (it slices at n_i + (T' − T)). Only those positions matter, so the head
(V columns: most of the work of a small model on a long prompt) and the log-softmax need to run
on the last

    k = max_i (T − n_i + c_i)

positions of the batch, not on all T: `logits_to_keep=k` in a transformers forward. The
few-shot prompts of MBPP (several hundred tokens before a reference of ~30–150) are where this
counts.

`ContinuationWindows` learns n_i and c_i from the requests of one `_loglikelihood_tokens` call
and finds each row of a batch among them (rows are right-padded with token 0, so a row's
length is read off the requests, never guessed from its zeros). Where a row matches no request
(lm-eval's batch-size probe, or a path this module does not know) it answers 0: all positions,
exactly lm-eval's own computation.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

#: lm-eval's request: ((context string, continuation string), context ids, continuation ids).
Request = tuple[tuple[str, str], Sequence[int], Sequence[int]]

#: The id lm-eval's `pad_and_concat` right-pads a causal batch with.
PAD_ID = 0


class ContinuationWindows:
    """The continuation lengths of one `_loglikelihood_tokens` call's requests, by input row.

    Args:
        requests: lm-eval's requests of the call.
        max_length: the model's context length as lm-eval truncates with it (`HFLM.max_length`).
    """

    def __init__(self, requests: Sequence[Request], max_length: int) -> None:
        #: unpadded input length n -> {input ids: the longest continuation c among its requests}
        self._continuations: dict[int, dict[tuple[int, ...], int]] = {}
        for _, context_ids, continuation_ids in requests:
            row = tuple((list(context_ids) + list(continuation_ids))[-(max_length + 1) :][:-1])
            by_row = self._continuations.setdefault(len(row), {})
            by_row[row] = max(by_row.get(row, 0), len(continuation_ids))

    def positions_to_keep(self, batch: Tensor) -> int:
        """k for a right-padded batch (B, T) of input ids: the logits of its last k positions
        hold every continuation of its rows; 0 (all T positions) where k would be T or a row is
        not one of the requests."""
        width = batch.shape[1]
        needed = 0
        for row in batch.tolist():
            padding = 0
            while padding < width and row[width - 1 - padding] == PAD_ID:
                padding += 1
            found = False
            # The row's unpadded length lies between width - padding and width (its own last
            # tokens may be pad ids too): every request that fits is taken, the widest window kept.
            for length in range(width - padding, width + 1):
                continuation = self._continuations.get(length, {}).get(tuple(row[:length]))
                if continuation is not None:
                    needed = max(needed, width - length + continuation)
                    found = True
            if not found:
                return 0
        return 0 if needed >= width else needed
