"""Documents from text files and Hugging Face datasets.

A *source* names where documents come from. It is one of:

- a path to a file, a directory (searched recursively for supported files) or a glob
  (``corpus/train-*.jsonl.xz``, ``**`` allowed), or a list of these;
- ``"hf:NAME[:CONFIG][@SPLIT][?KEY=VALUE&...]"``: a Hugging Face dataset loaded with
  ``datasets.load_dataset(NAME, CONFIG, split=SPLIT, streaming=True, KEY=VALUE, ...)``
  (SPLIT defaults to ``train``), e.g. ``hf:HuggingFaceFW/fineweb-edu:sample-10BT`` or, for local
  files, ``hf:json?data_files=/data/a.jsonl``;
- a ``datasets.Dataset`` / ``datasets.IterableDataset`` object (only for `iter_documents`).

Supported file formats (each plain, ``.gz`` or ``.xz``):

- ``.txt``: the whole file is ONE document (UTF-8);
- ``.jsonl``: one JSON object per line, the document is its ``text_field`` (blank lines skipped);
- ``.parquet``: the column ``text_field``, read in record batches with pyarrow.

A document whose text is ``None`` (a null cell) is skipped; every other value must be a string.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import lzma
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qsl

from tying.errors import InvalidInputError, MissingFileError

#: Suffixes read as documents (before an optional compression suffix).
FORMATS: tuple[str, ...] = (".txt", ".jsonl", ".parquet")
#: Compression suffixes understood on top of `FORMATS`.
COMPRESSIONS: tuple[str, ...] = (".gz", ".xz")
#: Prefix of a Hugging Face dataset source.
HF_PREFIX = "hf:"

#: Rows per record batch when reading parquet.
_PARQUET_BATCH_ROWS = 1024

PathLike = str | os.PathLike
Source = PathLike | Sequence[PathLike]


# --------------------------------------------------------------------------- file formats


def file_format(path: PathLike) -> tuple[str, str | None]:
    """The ``(format, compression)`` of a file from its name.

    Args:
        path: a file name such as ``train-00.jsonl.xz``.

    Returns:
        format in `FORMATS` (``".jsonl"``) and compression in `COMPRESSIONS` or None.

    Raises:
        ValueError: the name has no supported suffix.
    """
    name = Path(path).name.lower()
    compression = None
    for suffix in COMPRESSIONS:
        if name.endswith(suffix):
            compression, name = suffix, name[: -len(suffix)]
            break
    for suffix in FORMATS:
        if name.endswith(suffix):
            return suffix, compression
    expected = ", ".join(f"{f}[{'|'.join(COMPRESSIONS)}]" for f in FORMATS)
    raise InvalidInputError(f"unsupported file type: {path}; expected one of {expected}")


def _is_supported(path: Path) -> bool:
    try:
        file_format(path)
    except ValueError:
        return False
    return True


def _open_binary(path: Path, compression: str | None) -> IO[bytes]:
    if compression == ".gz":
        return gzip.open(path, "rb")
    if compression == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def _check_text(value: Any, where: str, text_field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise InvalidInputError(
        f"{where}: field {text_field!r} holds a {type(value).__name__}, expected a string; "
        "pass text_field=... naming the column that holds the document text"
    )


def _read_txt(path: Path, compression: str | None) -> Iterator[str]:
    with _open_binary(path, compression) as f:
        raw = f.read()
    try:
        yield raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(
            f"{path} is not valid UTF-8 ({e}); convert it to UTF-8 (e.g. with iconv)"
        ) from e


def _read_jsonl(path: Path, compression: str | None, text_field: str) -> Iterator[str]:
    with _open_binary(path, compression) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InvalidInputError(
                    f"{where}: not a JSON object ({e}); expected JSON Lines"
                ) from e
            if not isinstance(row, dict) or text_field not in row:
                keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise InvalidInputError(
                    f"{where}: no field {text_field!r} (found {keys}); "
                    "pass text_field=... naming the field that holds the document text"
                )
            text = _check_text(row[text_field], where, text_field)
            if text is not None:
                yield text


def _read_parquet(path: Path, compression: str | None, text_field: str) -> Iterator[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if compression is None:
        parquet = pq.ParquetFile(path)
    else:  # parquet needs random access: decompress into memory
        with _open_binary(path, compression) as f:
            parquet = pq.ParquetFile(pa.BufferReader(f.read()))
    names = parquet.schema_arrow.names
    if text_field not in names:
        raise InvalidInputError(
            f"{path}: no column {text_field!r} (found {names}); "
            "pass text_field=... naming the column that holds the document text"
        )
    for batch in parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[text_field]):
        for value in batch.column(0).to_pylist():
            text = _check_text(value, str(path), text_field)
            if text is not None:
                yield text


def read_file(path: PathLike, text_field: str = "text") -> Iterator[str]:
    """The documents of one file, in file order.

    Args:
        path: a ``.txt``, ``.jsonl`` or ``.parquet`` file, optionally ``.gz``/``.xz``.
        text_field: the JSON field / parquet column holding the text (unused for ``.txt``).

    Yields:
        Document texts.
    """
    path = Path(path)
    fmt, compression = file_format(path)
    if fmt == ".txt":
        yield from _read_txt(path, compression)
    elif fmt == ".jsonl":
        yield from _read_jsonl(path, compression, text_field)
    else:
        yield from _read_parquet(path, compression, text_field)


# --------------------------------------------------------------------------- resolving sources


def is_hf_source(source: object) -> bool:
    """Whether `source` is a ``"hf:..."`` dataset spec."""
    return isinstance(source, str) and source.startswith(HF_PREFIX)


def _items(source: Source) -> list[PathLike]:
    if isinstance(source, (str, os.PathLike)):
        return [source]
    items = list(source)
    if not items:
        raise InvalidInputError(
            "empty list of sources; expected at least one path, directory or glob"
        )
    return items


def _expand(item: PathLike) -> list[Path]:
    text = os.path.expanduser(os.fspath(item))
    path = Path(text)
    if path.is_dir():
        found = [p for p in path.rglob("*") if p.is_file() and _is_supported(p)]
        if not found:
            raise MissingFileError(
                f"no {'/'.join(FORMATS)} files (optionally .gz/.xz) in directory {path}"
            )
        return sorted(found)
    if path.is_file():
        file_format(path)  # raises ValueError for an unsupported suffix named explicitly
        return [path]
    if any(c in text for c in "*?["):
        found = []
        for match in sorted(glob.glob(text, recursive=True)):
            p = Path(match)
            if p.is_dir():
                found.extend(sorted(q for q in p.rglob("*") if q.is_file() and _is_supported(q)))
            elif _is_supported(p):
                found.append(p)
        if not found:
            raise MissingFileError(
                f"glob {text!r} matches no {'/'.join(FORMATS)} files (optionally .gz/.xz)"
            )
        return found
    raise MissingFileError(
        f"corpus path not found: {path}; expected a file ({'/'.join(FORMATS)}, optionally "
        ".gz/.xz), a directory of them, a glob, or 'hf:NAME' (the default corpus lives under "
        "$TYING_DATA_DIR, default ../shared/data beside the repository)"
    )


def resolve_files(source: Source) -> list[Path]:
    """The files a path source names, in a deterministic order.

    Each item (file, directory or glob) expands to its supported files sorted by path; items keep
    the order given; a file named twice is read once (first place kept).

    Args:
        source: a path, directory or glob, or a list of them (not ``"hf:..."``).

    Returns:
        Absolute paths of the files, in reading order.

    Raises:
        FileNotFoundError: an item matches no supported file.
        ValueError: `source` is a ``hf:`` spec, or a named file has an unsupported suffix.
    """
    items = _items(source)
    for item in items:
        if is_hf_source(item):
            raise InvalidInputError(
                f"{item!r} is a Hugging Face dataset, not a file path; "
                "pass it alone to iter_documents (it cannot be mixed with files)"
            )
    files: list[Path] = []
    seen: set[Path] = set()
    for item in items:
        for path in _expand(item):
            path = path.resolve()
            if path not in seen:
                seen.add(path)
                files.append(path)
    return files


# --------------------------------------------------------------------------- Hugging Face


@dataclass(frozen=True)
class HFSpec:
    """A parsed ``hf:NAME[:CONFIG][@SPLIT][?KEY=VALUE&...]`` source."""

    name: str
    config: str | None = None
    split: str = "train"
    kwargs: dict[str, Any] = field(default_factory=dict)


def _parse_value(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return value


def parse_hf_spec(spec: str) -> HFSpec:
    """Parse ``hf:NAME[:CONFIG][@SPLIT][?KEY=VALUE&...]``.

    A key given several times collects its values into a list (``data_files``); ``true``/``false``
    become booleans.

    Raises:
        ValueError: the spec has no dataset name.
    """
    if not is_hf_source(spec):
        raise InvalidInputError(f"not a Hugging Face source: {spec!r}; expected 'hf:NAME[:CONFIG]'")
    body = spec[len(HF_PREFIX) :]
    body, _, query = body.partition("?")
    kwargs: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        parsed = _parse_value(value)
        if key in kwargs:
            prev = kwargs[key]
            kwargs[key] = [*prev, parsed] if isinstance(prev, list) else [prev, parsed]
        else:
            kwargs[key] = parsed
    body, at, split = body.partition("@")
    name, _, config = body.partition(":")
    if not name:
        raise InvalidInputError(
            f"no dataset name in {spec!r}; expected 'hf:NAME[:CONFIG][@SPLIT][?KEY=VALUE]', "
            "e.g. 'hf:HuggingFaceFW/fineweb-edu:sample-10BT'"
        )
    return HFSpec(
        name=name, config=config or None, split=split if at and split else "train", kwargs=kwargs
    )


def load_hf_dataset(spec: str | HFSpec) -> Any:
    """The dataset a ``hf:`` spec names, from ``datasets.load_dataset`` (streaming by default).

    ``streaming=false`` in the query loads (and caches) the whole split instead.
    """
    import datasets

    parsed = parse_hf_spec(spec) if isinstance(spec, str) else spec
    kwargs = {"streaming": True, **parsed.kwargs}
    return datasets.load_dataset(parsed.name, parsed.config, split=parsed.split, **kwargs)


def _iter_dataset(dataset: Iterable[dict[str, Any]], text_field: str, where: str) -> Iterator[str]:
    columns = getattr(dataset, "column_names", None)
    if columns is not None and text_field not in columns:
        raise InvalidInputError(
            f"{where}: no column {text_field!r} (found {columns}); "
            "pass text_field=... naming the column that holds the document text"
        )
    for row in dataset:
        if text_field not in row:
            raise InvalidInputError(
                f"{where}: no column {text_field!r} (found {sorted(row)}); "
                "pass text_field=... naming the column that holds the document text"
            )
        text = _check_text(row[text_field], where, text_field)
        if text is not None:
            yield text


def _is_hf_dataset(obj: object) -> bool:
    return hasattr(obj, "column_names") and hasattr(obj, "features") and not isinstance(obj, str)


# --------------------------------------------------------------------------- documents


def iter_documents(source: Source | Any, text_field: str = "text") -> Iterator[str]:
    """Every document of a source, in a deterministic order.

    Args:
        source: paths/directories/globs (or a list of them), a ``"hf:..."`` spec, or a
            ``datasets`` dataset object (see the module docstring).
        text_field: JSON field / parquet or dataset column holding the text.

    Yields:
        Document texts (str), files in `resolve_files` order, rows in file order.

    Raises:
        FileNotFoundError: a path matches nothing (raised before the first document).
        ValueError: a row lacks `text_field`, or holds a non-string.
    """
    if _is_hf_dataset(source):
        yield from _iter_dataset(source, text_field, "dataset")
        return
    if is_hf_source(source):
        yield from _iter_dataset(load_hf_dataset(source), text_field, str(source))
        return
    for path in resolve_files(source):
        yield from read_file(path, text_field)


# --------------------------------------------------------------------------- fingerprints


@dataclass(frozen=True)
class SourceInfo:
    """What a source is, for manifests and cache keys.

    Attributes:
        description: a readable one-line description (the paths, or the ``hf:`` spec).
        files: for path sources, ``[{"path", "size", "mtime_ns"}]`` per file in reading order.
        fingerprint: sha256 hex of the text field, the description and the file list; it changes
            when a file is added, removed, resized or touched.
    """

    description: str
    files: list[dict[str, Any]]
    fingerprint: str


def describe_source(source: Source, text_field: str = "text") -> SourceInfo:
    """The `SourceInfo` of a path or ``hf:`` source (local ``data_files`` are fingerprinted too).

    Raises:
        FileNotFoundError: a path matches nothing.
    """
    if _is_hf_dataset(source):
        raise InvalidInputError(
            "a datasets object has no stable fingerprint; pass a path or an 'hf:...' spec"
        )
    hf = is_hf_source(source)
    if hf:
        description = str(source)
        data_files = parse_hf_spec(description).kwargs.get("data_files", [])
        data_files = [data_files] if isinstance(data_files, str) else data_files
        local = [p for p in data_files if Path(p).exists()]
        paths = resolve_files(local) if local else []
    else:
        paths = resolve_files(source)
        description = ", ".join(str(p) for p in _items(source))
    files = []
    for path in paths:
        stat = path.stat()
        files.append({"path": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    payload = json.dumps(
        # a path source is its files (however they were named); a hf: source its whole spec
        {"text_field": text_field, "spec": description if hf else None, "files": files},
        sort_keys=True,
    )
    return SourceInfo(description, files, hashlib.sha256(payload.encode()).hexdigest())
