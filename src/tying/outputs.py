"""Outputs written whole or not at all: folders and single files.

    with output_folder(out, overwrite=options.overwrite) as tmp:
        write everything into tmp
    # only now does `out` exist (renamed from tmp); a failure leaves `out` as it was

    write_text_atomic(path, text)   # a reader sees the old file or the new one, never a torn one

A non-empty `out` is refused unless `overwrite` (then it is replaced, not mixed into).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tying.errors import ExistingFileError


def check_output_folder(path: str | Path, overwrite: bool = False) -> Path:
    """`path` as a Path; FileExistsError when it is a non-empty folder (or a file) and not
    `overwrite`."""
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise ExistingFileError(f"{out} is a file, not a folder: choose another output folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ExistingFileError(
            f"{out} is not empty: choose another output folder, or set overwrite to replace it"
        )
    return out


@contextmanager
def output_folder(path: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """A temporary sibling folder to write into; renamed to `path` when the block succeeds.

    Raises:
        FileExistsError: `path` is not empty and `overwrite` is off (checked before the block).
    """
    out = check_output_folder(path, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
        if out.exists():
            old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a uniquely named temporary file beside it, fsynced
    and then renamed over `path` (`os.replace`): a killed writer leaves the old file or none,
    never a partial one, and two writers never share a temporary file. Returns `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
