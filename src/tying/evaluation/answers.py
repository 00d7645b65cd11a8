"""Extracting answers from generations: final numbers (GSM8K, SVAMP) and code (MBPP, HumanEval).

Numbers follow lm-evaluation-harness's ``gsm8k`` task (lm_eval/tasks/gsm8k/gsm8k.yaml, v0.4.x):
its "flexible-extract" filter takes the LAST match of ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, its
"strict-match" filter the FIRST match of ``#### (\\-?[0-9\\.\\,]+)``. The match is then normalised
so that equal numbers compare equal (see `normalize_number`); lm-eval instead compares strings
after deleting ``,``, ``$`` and one trailing ``.``, so "42.0" vs "42" differs there and not here.

Code follows the usual stop sequences; `extract_code` states the exact rule.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

#: lm-eval gsm8k "strict-match": the number after "#### " (first match).
STRICT_PATTERN = re.compile(r"#### (\-?[0-9\.\,]+)")
#: lm-eval gsm8k "flexible-extract": any number-like run (last match).
FLEXIBLE_PATTERN = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
#: lm-eval humaneval.yaml's `until`: a completion of a function body ends at any of these.
CONTINUATION_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
#: A standalone program (MBPP) ends at the first column-0 line starting with one of these,
#: looked for after its first column-0 ``def``.
PROGRAM_STOPS = ("assert", "print(", "if __name__")
#: MBPP's end-of-solution marker (the paper's and lm-eval's ``[BEGIN] ... [DONE]`` format).
DONE_MARKER = "[DONE]"

_PLAIN_NUMBER = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)")
_FENCE_OPEN = re.compile(r"```[\w+.-]*[ \t]*\n?")


def normalize_number(value: str | int | float | None) -> str | None:
    """A number in canonical decimal form, or None if `value` is not one.

    Strings: ``,`` and ``$`` are deleted, trailing ``.`` stripped, then the rest must be a plain
    decimal (``-?digits[.digits]``, or ``.digits``); it is read as an exact `decimal.Decimal`
    (never a float) and written without exponent, trailing zeros or ``-0``. Ints and floats
    (SVAMP's ``Answer``) go through the same canonical form (floats through their shortest repr).

    Examples: "1,000" -> "1000", "$42." -> "42", "42.0" -> "42", "1,234.50" -> "1234.5",
    "-0.50" -> "-0.5", 8.0 -> "8", "1.2.3" -> None, "" -> None.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        number = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    else:
        text = value.strip().replace(",", "").replace("$", "").rstrip(".")
        if not _PLAIN_NUMBER.fullmatch(text):
            return None
        try:
            number = Decimal(text)
        except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
            return None
    if number == 0:
        return "0"
    return format(number.normalize(), "f")


def extract_number(text: str, *, strict: bool = False) -> str | None:
    """The final answer of a generation, normalised (`normalize_number`), or None.

    Args:
        text: the generation (for GSM8K in lm-eval, cut at "Question:").
        strict: False for lm-eval's "flexible-extract" (the last number-like run in `text`),
            True for its "strict-match" (the first ``#### N``).

    Examples: "The answer is 7 apples and 3 pears" -> "3"; "#### 1,000" -> "1000";
    "no number" -> None. As in lm-eval, the chosen match is not replaced by an earlier one when
    it is no number (e.g. "1.2.3"): then the result is None.
    """
    if strict:
        found = STRICT_PATTERN.search(text)
        raw = found.group(1) if found else None
    else:
        matches = FLEXIBLE_PATTERN.findall(text)
        raw = next((group for group in matches[-1] if group), None) if matches else None
    return normalize_number(raw)


def reference_answer_gsm8k(answer_field: str) -> str:
    """The final number of a GSM8K ``answer`` field (the text after its last ``####``), normalised.

    Raises:
        ValueError: no ``####`` or no number after it.
    """
    _, marker, tail = answer_field.rpartition("####")
    number = normalize_number(tail) if marker else None
    if number is None:
        raise ValueError(
            f"GSM8K answer does not end with '#### <number>': {answer_field[-60:]!r}; "
            "is this a GSM8K file?"
        )
    return number


def answers_match(prediction: str | None, reference: str | int | float | None) -> bool:
    """True if both are numbers (after `normalize_number`) with the same exact decimal value."""
    left, right = normalize_number(prediction), normalize_number(reference)
    return left is not None and left == right


def extract_code(generation: str, *, continuation: bool = False) -> str:
    """The code in a generation, by these rules, in order.

    1. Fence: if the text contains ```````: when `continuation` is set and non-blank text
       comes before the first fence, the code is that text (a body followed by a closing fence,
       lm-eval's ``humaneval_instruct`` rule); otherwise the code is the inside of the first
       fenced block (its opening line, e.g. ```````python``, dropped; up to the next fence or
       the end), as lm-eval's ``mbpp_instruct`` does.
    2. ``[DONE]``: the code ends before the first ``[DONE]`` (MBPP's end marker).
    3. Stop sequences:
       - `continuation` (HumanEval: the text continues a function whose header is in the
         prompt): the code ends before the first of lm-eval's HumanEval stop sequences
         ``"\\nclass"``, ``"\\ndef"``, ``"\\n#"``, ``"\\nif"``, ``"\\nprint"`` (plain string
         matches, as lm-eval's ``until``);
       - otherwise (MBPP: a whole program): the code ends before the first line that starts at
         column 0 with ``assert``, ``print(`` or ``if __name__``, looked for after the first
         column-0 ``def `` (so helper functions, imports and comments are kept, and a program
         without ``def`` is kept whole).
    4. Trailing whitespace is removed (leading indentation is kept).

    Args:
        generation: the model's text after the prompt.
        continuation: True for HumanEval-style completions of a function body.
    """
    code = _unfence(generation, continuation)
    done = code.find(DONE_MARKER)
    if done != -1:
        code = code[:done]
    if continuation:
        cuts = [i for i in (code.find(stop) for stop in CONTINUATION_STOPS) if i != -1]
    else:
        first_def = re.search(r"^def ", code, flags=re.MULTILINE)
        stops = "|".join(re.escape(stop) for stop in PROGRAM_STOPS)
        start = first_def.end() if first_def else len(code)
        found = re.compile(rf"^(?:{stops})", flags=re.MULTILINE).search(code, start)
        cuts = [found.start()] if found else []
    if cuts:
        code = code[: min(cuts)]
    return code.rstrip()


def _unfence(text: str, continuation: bool) -> str:
    first = text.find("```")
    if first == -1:
        return text
    if continuation and text[:first].strip():
        return text[:first]
    opening = _FENCE_OPEN.match(text, first)
    body = text[opening.end() if opening else first + 3 :]
    end = body.find("```")
    return body if end == -1 else body[:end]
