"""The studies behind docs/results: scripts that read training runs and evaluations and write
the JSON, tables and figures of docs/results (and its claims table), with their verdicts.

Apart from `benchmarks/`, which only times the library and writes only benchmarks/results/.
A study belongs to the repository, not to the `tying` package (it is not installed with it):
it reads and writes the checkout's `configs/` and `docs/results/`, so it runs from the
repository's root, one module a study, each with a `main()`:

    python -m studies.NAME --help

Studies import `tying`'s public names only; `tying` never imports them
(tests/test_architecture.py puts this package above every layer of `src/tying`).
"""

from pathlib import Path

#: The repository's root (the checkout the studies read and write).
ROOT = Path(__file__).resolve().parent.parent


def replace_block(markdown: str, begin: str, end: str, block: str) -> str:
    """`markdown` with the text from the line `begin` through the line `end` (a page's
    generated block, markers included) replaced by `block` (markers included).

    Raises:
        ValueError: `markdown` lacks one of the markers.
    """
    if begin not in markdown or end not in markdown.split(begin, 1)[1]:
        raise ValueError(f"no generated block between {begin!r} and {end!r}")
    head, rest = markdown.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + block + tail
