"""Fixtures of the data tests: the GPT-2 tokenizer and small corpora written to tmp_path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tying.data.tokenizer import TextTokenizer, load_tokenizer

#: Documents with the awkward parts of real text: unicode, whitespace runs, digits, blank lines.
DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé — “quotes”, emoji 😀 and CJK 漢字.\n\nSecond paragraph.",
    "   leading spaces, trailing spaces   \n",
    "Numbers: 3.14159, 2718281828, 1e-9; contractions: don't, we'll, it's.",
    "Tabs\tand\r\nWindows line ends.",
    "A longer document. " * 40,
]


@pytest.fixture(scope="session")
def gpt2() -> TextTokenizer:
    return load_tokenizer("gpt2")


def _write_jsonl(path: Path, docs: list[str], field: str = "text") -> Path:
    """Write `docs` as JSON Lines (plain, .gz or .xz by suffix)."""
    from tying.data.readers import file_format

    text = "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs))
    _write_bytes(path, text.encode("utf-8"), file_format(path)[1])
    return path


def _write_text(path: Path, text: str) -> Path:
    from tying.data.readers import file_format

    _write_bytes(path, text.encode("utf-8"), file_format(path)[1])
    return path


def _write_bytes(path: Path, data: bytes, compression: str | None) -> None:
    import gzip
    import lzma

    path.parent.mkdir(parents=True, exist_ok=True)
    if compression == ".gz":
        data = gzip.compress(data)
    elif compression == ".xz":
        data = lzma.compress(data)
    path.write_bytes(data)


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, list[str]]:
    """A folder of three .jsonl files (plain, .gz, .xz) holding DOCUMENTS, and the documents in
    reading order."""
    folder = tmp_path / "corpus"
    _write_jsonl(folder / "a.jsonl", DOCUMENTS[:2])
    _write_jsonl(folder / "b.jsonl.gz", DOCUMENTS[2:4])
    _write_jsonl(folder / "c.jsonl.xz", DOCUMENTS[4:])
    return folder, list(DOCUMENTS)


@pytest.fixture
def write_jsonl():
    """`write_jsonl(path, docs, field="text")`: JSON Lines, compressed by suffix."""
    return _write_jsonl


@pytest.fixture
def write_text():
    """`write_text(path, text)`: a text file, compressed by suffix."""
    return _write_text
