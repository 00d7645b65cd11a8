"""Training examples of `tying finetune`: a task's training split or a JSONL file, tokenized,
drawn in a seeded, resumable order and collated with the prompt masked out of the loss.

An example is a prompt and its completion. The model reads prompt + completion; the loss is
the cross-entropy of the completion's tokens only (prompt positions and padding carry the
label -100). Sources:

- ``mbpp``: MBPP's training split (task_ids 601–974, 374 problems), the zero-shot MBPP prompt
  of `tying.evaluation.tasks` (the template lm-eval's mbpp task uses, ending ``[BEGIN]\\n``),
  completion = the reference code + ``"\\n[DONE]"`` (the end marker lm-eval stops at);
- ``gsm8k``: GSM8K's training file (7,473 problems), prompt ``"Question: {question}\\nAnswer:"``
  (lm-eval's gsm8k template), completion = ``" "`` + the worked solution ending ``#### N``;
- ``FILE.jsonl``: one JSON object per line, ``{"prompt": str, "completion": str}`` (the
  completion non-empty; an optional ``"id"``; other keys ignored; blank lines skipped).

Tokenization: prompt and completion are encoded separately and concatenated (the prompt's
tokens are exactly those the model sees when it generates after that prompt), then the
end-of-text token is appended when asked (`append_eos`), then the whole is cut to
`max_seq_len` tokens from the right (the completion's tail goes first). An example whose prompt
alone fills `max_seq_len` has no answer token left and is skipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tying.errors import InvalidInputError, MissingFileError
from tying.evaluation.tasks import MBPP_FEWSHOT_TARGET, TASKS, load_task

#: Tasks with a training split.
TRAIN_TASKS = ("mbpp", "gsm8k")
#: Label of positions that carry no loss (prompt tokens, padding).
IGNORE_INDEX = -100


@dataclass(frozen=True)
class Example:
    """One training example.

    Attributes:
        id: "mbpp/<task_id>", "gsm8k/train/<line index>", or "<file>:<line>" (or the record's id).
        prompt: the text the model reads before the completion.
        completion: the text it learns to write.
    """

    id: str
    prompt: str
    completion: str


@dataclass(frozen=True)
class TokenizedExample:
    """An example as token ids.

    Attributes:
        ids: prompt tokens then completion tokens (then EOS), at most max_seq_len of them.
        prompt_tokens: how many of `ids` belong to the prompt (no loss on them).
    """

    ids: tuple[int, ...]
    prompt_tokens: int

    @property
    def answer_tokens(self) -> int:
        """Tokens the loss is computed on: len(ids) − prompt_tokens."""
        return len(self.ids) - self.prompt_tokens


def task_examples(task: str) -> list[Example]:
    """The training examples of a task (see the module docstring for the templates).

    Raises:
        ValueError: a task without a training split, or a malformed task file.
        FileNotFoundError: the task's file is missing.
    """
    if task == "gsm8k":
        return [Example(i.id, i.prompt, i.target) for i in load_task("gsm8k", "train")]
    if task == "mbpp":
        items = load_task("mbpp", "train", num_fewshot=0)
        return [
            Example(i.id, i.prompt, MBPP_FEWSHOT_TARGET.format(code=i.reference)) for i in items
        ]
    raise InvalidInputError(
        f"task {task!r} has no training split: use task mbpp, gsm8k or a FILE.jsonl of "
        '{"prompt": ..., "completion": ...} records'
    )


def read_examples(path: str | Path) -> list[Example]:
    """The examples of a JSONL file of ``{"prompt": str, "completion": str}`` records.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not a JSON object with a string prompt and a non-empty
            string completion (file and line named), or no record at all.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise MissingFileError(
            f"task file {file} not found: give task mbpp, gsm8k or an existing .jsonl file"
        )
    examples = []
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidInputError(f"{file}: cannot be read as UTF-8 text ({e}); fix the file") from e
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{file}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(
                f'{where}: not valid JSON ({e.msg}); each line must be {{"prompt": ..., '
                '"completion": ...}'
            ) from e
        examples.append(_example(record, where, f"{file.name}:{number}"))
    if not examples:
        raise InvalidInputError(
            f'{file} holds no records: write one {{"prompt": ..., "completion": ...}} per line'
        )
    return examples


def _example(record: Any, where: str, default_id: str) -> Example:
    if not isinstance(record, dict):
        raise InvalidInputError(
            f'{where}: expected a JSON object {{"prompt": ..., "completion": ...}}, got '
            f"{type(record).__name__}"
        )
    prompt, completion = record.get("prompt"), record.get("completion")
    if not isinstance(prompt, str):
        raise InvalidInputError(f"{where}: field 'prompt' missing or not a string")
    if not isinstance(completion, str) or not completion:
        raise InvalidInputError(f"{where}: field 'completion' missing, empty or not a string")
    return Example(str(record.get("id", default_id)), prompt, completion)


def load_examples(task: str) -> list[Example]:
    """`task_examples` for "mbpp"/"gsm8k", else `read_examples` of the file `task` names.

    Raises:
        ValueError / FileNotFoundError: see those functions; an unknown name that is not a
            .jsonl file.
    """
    if task.lower() in TASKS:  # svamp and humaneval: a clear "no training split"
        return task_examples(task.lower())
    if task.lower().endswith(".jsonl") or Path(task).expanduser().is_file():
        return read_examples(task)
    raise InvalidInputError(
        f"unknown task {task!r}: use mbpp, gsm8k or a FILE.jsonl of "
        '{"prompt": ..., "completion": ...} records'
    )


@dataclass
class TokenizedSet:
    """Tokenized examples and what tokenization did.

    Attributes:
        examples: the kept examples, in input order.
        truncated: examples cut to max_seq_len (their completion's tail dropped).
        skipped: ids of examples whose prompt alone fills max_seq_len (dropped).
    """

    examples: list[TokenizedExample]
    truncated: int
    skipped: list[str]

    def summary(self) -> dict[str, Any]:
        """Counts for finetune.json: items, truncated, skipped, answer and total tokens."""
        answer = sum(e.answer_tokens for e in self.examples)
        total = sum(len(e.ids) for e in self.examples)
        return {
            "items": len(self.examples),
            "truncated": self.truncated,
            "skipped": len(self.skipped),
            "answer_tokens": answer,
            "tokens": total,
            "answer_tokens_per_item": answer / max(1, len(self.examples)),
        }


def tokenize_examples(
    examples: Sequence[Example],
    encode: Any,
    max_seq_len: int,
    eos_id: int | None = None,
) -> TokenizedSet:
    """Token ids of every example (see the module docstring).

    Args:
        examples: the examples.
        encode: text -> list of ids, without special tokens (`TextTokenizer.encode`).
        max_seq_len: tokens per example at most (>= 2).
        eos_id: appended after the completion's tokens; None appends nothing.

    Raises:
        ValueError: max_seq_len < 2, or no example keeps an answer token.
    """
    if max_seq_len < 2:
        raise InvalidInputError(f"max_seq_len must be >= 2 tokens, got {max_seq_len}")
    kept, truncated, skipped = [], 0, []
    for example in examples:
        prompt = list(encode(example.prompt))
        answer = list(encode(example.completion)) + ([eos_id] if eos_id is not None else [])
        if len(prompt) >= max_seq_len:
            skipped.append(example.id)
            continue
        ids = prompt + answer
        if len(ids) > max_seq_len:
            truncated += 1
            ids = ids[:max_seq_len]
        kept.append(TokenizedExample(tuple(ids), len(prompt)))
    if not kept:
        raise InvalidInputError(
            f"every prompt is at least max_seq_len={max_seq_len} tokens long, so no answer token "
            "is left to train on: raise max_seq_len"
        )
    return TokenizedSet(kept, truncated, skipped)


def collate(examples: Sequence[TokenizedExample], pad_id: int) -> tuple[Tensor, Tensor]:
    """Inputs and shifted targets of a batch, right-padded to its longest example.

    For an example with ids x_0 … x_{n−1} and p prompt tokens, row b is
    inputs[b] = x_0 … x_{n−2} and targets[b, t] = x_{t+1} where t + 1 ≥ p, else -100
    (the prompt predicts nothing; the first answer token is predicted from the last prompt
    token). Padding: inputs `pad_id`, targets -100. Causal attention never lets a real
    position see the padding after it, so no attention mask is needed.

    Returns:
        (inputs, targets), int64, both (B, T) with T = max(n) − 1.
    """
    width = max(len(e.ids) for e in examples) - 1
    inputs = torch.full((len(examples), width), pad_id, dtype=torch.long)
    targets = torch.full((len(examples), width), IGNORE_INDEX, dtype=torch.long)
    for row, example in enumerate(examples):
        ids = torch.tensor(example.ids, dtype=torch.long)
        n = len(example.ids) - 1
        inputs[row, :n] = ids[:-1]
        start = max(example.prompt_tokens - 1, 0)
        targets[row, start:n] = ids[start + 1 :]
    return inputs, targets


class ExampleOrder:
    """A seeded, resumable order of n examples: epoch e is the permutation of range(n) drawn by
    `torch.randperm` from a generator seeded with seed + e; batches are consecutive slices of
    the concatenated epochs (a batch may span the end of one epoch and the start of the next).

    Args:
        n: number of examples (>= 1).
        seed: seed of the permutations.
    """

    def __init__(self, n: int, seed: int = 0) -> None:
        if n < 1:
            raise InvalidInputError(f"need at least one example, got {n}")
        self.n, self.seed = int(n), int(seed)
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.n, generator=generator).tolist()

    def next_batch(self, size: int) -> list[int]:
        """The indices of the next `size` examples."""
        chosen: list[int] = []
        while len(chosen) < size:
            if self.position == self.n:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            take = min(size - len(chosen), self.n - self.position)
            chosen += self._order[self.position : self.position + take]
            self.position += take
        return chosen

    @property
    def epochs_done(self) -> float:
        """Examples drawn so far / n."""
        return self.epoch + self.position / self.n

    def state_dict(self) -> dict[str, int]:
        """{"n", "seed", "epoch", "position"}: where the next batch starts."""
        return {"n": self.n, "seed": self.seed, "epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a `state_dict`.

        Raises:
            ValueError: the state is for another number of examples or seed.
        """
        if int(state["n"]) != self.n or int(state["seed"]) != self.seed:
            raise InvalidInputError(
                f"the checkpoint's data order is for {state['n']} examples with seed "
                f"{state['seed']}, this run has {self.n} with seed {self.seed}: resume with the "
                "same task, max_seq_len and seed"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
