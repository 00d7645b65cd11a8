"""Final-number extraction (lm-eval gsm8k filters) and code extraction (stop sequences)."""

from __future__ import annotations

import random
import re

import pytest

from tying.evaluation.answers import (
    answers_match,
    extract_code,
    extract_number,
    normalize_number,
    reference_answer_gsm8k,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("#### 1,000", "1000"),
        ("$42.", "42"),
        ("42.0", "42"),
        ("The answer is 7 apples and 3 pears", "3"),  # the last number, as lm-eval
        ("no number", None),
        ("", None),
        ("The temperature fell to -12 degrees.", "-12"),
        ("She pays -$5 back", "-5"),
        ("half of it: 0.5", "0.5"),
        ("1,234.50", "1234.5"),
        ("so 2+2=4.", "4"),
        ("It costs $1,200.00 in total.", "1200"),
        ("version 1.2.3", None),  # lm-eval's last match, and it is no number
        (
            "5 cats.\nQuestion: how many dogs? 9",
            "9",
        ),  # no stop here: lm-eval cuts generations first
    ],
)
def test_extract_number_hand_cases(text, expected):
    assert extract_number(text) == expected


def test_strict_match_takes_the_first_marked_number():
    text = "3 + 4 = 7\n#### 7\nand then #### 9, 12"
    assert extract_number(text, strict=True) == "7"
    assert extract_number(text) == "12"
    assert extract_number("The answer is 7", strict=True) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("42.0", "42"),
        ("-0.0", "0"),
        ("0.50", "0.5"),
        (".5", "0.5"),
        ("007", "7"),
        ("1,000,000", "1000000"),
        ("100", "100"),  # no exponent form ("1E+2")
        (8.0, "8"),  # SVAMP's Answer field
        (0.1, "0.1"),  # through repr, not the binary value 0.1000000000000000055...
        (1e16, "10000000000000000"),
        (12, "12"),
        ("1e5", None),
        ("nan", None),
        (float("inf"), None),
        (True, None),
        ("-", None),
        (None, None),
    ],
)
def test_normalize_number(value, expected):
    assert normalize_number(value) == expected


def test_answers_match_compares_exact_decimals():
    assert answers_match("42.0", "42")
    assert answers_match("$1,000", 1000.0)
    assert answers_match("0.5", "0.50")
    assert not answers_match("0.1", "0.10000001")
    assert not answers_match(None, "3")
    assert not answers_match("3", None)
    assert not answers_match("abc", "abc")  # both not numbers: no match
    # Exact decimals, not floats: these two differ although float() would make them equal.
    assert float("9007199254740993") == float("9007199254740992")
    assert not answers_match("9007199254740993", "9007199254740992")


def test_reference_answer_gsm8k():
    assert reference_answer_gsm8k("9 * 2 = $<<9*2=18>>18 a day.\n#### 18") == "18"
    assert reference_answer_gsm8k("...\n#### 1,080") == "1080"
    assert reference_answer_gsm8k("#### -3") == "-3"
    with pytest.raises(ValueError, match="#### <number>"):
        reference_answer_gsm8k("The answer is 18")
    with pytest.raises(ValueError, match="#### <number>"):
        reference_answer_gsm8k("#### eighteen")


def _lm_eval_flexible(text: str) -> str:
    """lm-eval 0.4.x: RegexFilter(flexible pattern, group_select=-1) then exact_match's
    regexes_to_ignore [",", "\\$", "(?s).*#### ", "\\.$"] (lm_eval/filters/extraction.py)."""
    matches = re.findall(r"(-?[$0-9.,]{2,})|(-?[0-9]+)", text)
    if not matches:
        return "[invalid]"
    match = [m for m in matches[-1] if m]
    value = match[0].strip() if match else "[invalid]"
    for pattern in [",", "\\$", "(?s).*#### ", "\\.$"]:
        value = re.sub(pattern, "", value)
    return value


def test_agrees_with_lm_eval_flexible_extract_on_integers():
    """Wherever lm-eval's string is an integer, ours is the same integer; elsewhere both fail."""
    rng = random.Random(0)
    words = ["apples", "cost", "$", "and", "is", "total", ".", ",", "=", "+", "-", "\n", "####"]
    for _ in range(2000):
        parts = []
        for _ in range(rng.randint(0, 8)):
            if rng.random() < 0.5:
                number = f"{rng.choice(['', '-', '$'])}{rng.randint(0, 12000):,}"
                parts.append(number + rng.choice(["", ".", ".00", ".5"]))
            else:
                parts.append(rng.choice(words))
        text = " ".join(parts)
        theirs, ours = _lm_eval_flexible(text), extract_number(text)
        if re.fullmatch(r"-?(0|[1-9][0-9]*)", theirs):
            assert ours == theirs, text
        if ours is None:
            assert normalize_number(theirs) is None, text


def test_extract_code_takes_the_first_fenced_block():
    generation = (
        "Here you go:\n```python\ndef f(x):\n    return x + 1\n```\nIt adds one.\n```\nother\n```"
    )
    assert extract_code(generation) == "def f(x):\n    return x + 1"
    assert extract_code("```\ndef g():\n    pass") == "def g():\n    pass"  # never closed


def test_extract_code_program_stops_after_the_function():
    generation = (
        "import math\n# helper\ndef helper(x):\n    return x * 2\n\n"
        "def f(x):\n    assert x >= 0\n    print(x)\n    return helper(x)\n"
        "assert f(2) == 4\nprint(f(3))\n"
    )
    expected = "import math\n# helper\ndef helper(x):\n    return x * 2\n\ndef f(x):\n    assert x >= 0\n    print(x)\n    return helper(x)"
    assert extract_code(generation) == expected
    assert extract_code("def f():\n    return 1\nif __name__ == '__main__':\n    f()") == (
        "def f():\n    return 1"
    )
    assert (
        extract_code("def f():\n    return 1\n[DONE]\nYou are an expert")
        == "def f():\n    return 1"
    )
    assert extract_code("x = 1\nassert x == 1\n") == "x = 1\nassert x == 1"  # no def: kept whole


def test_extract_code_continuation_uses_lm_eval_humaneval_stops():
    body = "    total = 0\n    # add them\n    for x in xs:\n        if x > 0:\n            total += x\n    return total\n"
    for tail in [
        "\ndef other():\n    pass",
        "\n# tests",
        "\nif __name__ == '__main__':",
        "\nprint(f([1]))",
        "\nclass A:",
    ]:
        assert extract_code(body + tail, continuation=True) == body.rstrip()
    assert extract_code(body, continuation=True) == body.rstrip()
    # A body followed by a closing fence (instruct style), and a fenced whole function.
    assert extract_code(body + "```\nThis sums.", continuation=True) == body.rstrip()
    fenced = "```python\ndef f(xs):\n" + body + "```"
    assert extract_code(fenced, continuation=True) == "def f(xs):\n" + body.rstrip()
