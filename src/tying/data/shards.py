"""Token shards: a corpus tokenized once into flat memmap files plus a manifest.

Layout of a shard folder::

    shard-00000.bin   raw token ids, little-endian uint16 (V <= 65,536) or uint32, no header
    shard-00001.bin   ...
    manifest.json     what the shards hold (see `Manifest`), written last

The shards concatenated are one token stream: every document's tokens followed by the EOS id,
documents in `iter_documents` order; a document may span two shards. A build writes each shard
to ``*.tmp`` and renames it when complete, and writes the manifest last (again via a temporary
file and ``os.replace``), so a killed build never looks complete.

A build may stop early: after `max_documents` documents, or at the end of the document that
reaches `max_tokens` tokens (what a training run will read; `tying train max_tokens=...`).

The cache (`ensure_shards`) builds in a hidden sibling folder renamed into place at the end. An
interrupted build leaves nothing behind: Ctrl-C (SIGINT) and SIGTERM remove the folder before
the process ends (SIGTERM then exits with status 143), and the folders of builds killed outright
(SIGKILL, a power cut) are swept by the next `ensure_shards` on the same host, once their process
is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tying.data.readers import Source, SourceInfo, describe_source, iter_documents

# The shard folder's format and its reader live in token_store; their names stay importable here.
from tying.data.token_store import (  # noqa: F401
    FORMAT_VERSION,
    MANIFEST_NAME,
    Manifest,
    TokenStore,
    open_shards,
    shard_name,
    token_dtype,
)
from tying.data.tokenizer import TextTokenizer, load_tokenizer
from tying.errors import InvalidInputError

#: Default tokens per shard file (2^26 = 64 Mi tokens: 128 MiB as uint16).
DEFAULT_SHARD_TOKENS = 2**26
#: A batch of documents is also cut when it holds this many characters.
_BATCH_CHARS = 8 * 2**20
# --------------------------------------------------------------------------- writing


class _ShardWriter:
    """Appends token arrays to ``shard-NNNNN.bin`` files of at most `shard_tokens` tokens."""

    def __init__(self, folder: Path, dtype: np.dtype, shard_tokens: int, eos_id: int) -> None:
        self.folder = folder
        self.dtype = dtype
        self.shard_tokens = shard_tokens
        self.eos_id = eos_id
        self.shards: list[dict[str, Any]] = []
        self._file = None
        self._tokens = self._documents = self._max = 0
        #: tokens written so far, all shards together
        self.total = 0

    def _open(self) -> None:
        name = shard_name(len(self.shards))
        self._tmp = self.folder / f"{name}.tmp"
        self._file = open(self._tmp, "wb")  # noqa: SIM115 (closed in _finish)
        self._tokens = self._documents = self._max = 0

    def _finish(self) -> None:
        if self._file is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self._file = None
        name = shard_name(len(self.shards))
        os.replace(self._tmp, self.folder / name)
        self.shards.append(
            {
                "file": name,
                "tokens": self._tokens,
                "documents": self._documents,
                "max_id": self._max,
            }
        )

    def write(self, tokens: np.ndarray) -> None:
        while tokens.size:
            if self._file is None:
                self._open()
            take = tokens[: self.shard_tokens - self._tokens]
            self._file.write(take.astype(self.dtype, copy=False).tobytes())
            self._tokens += int(take.size)
            self.total += int(take.size)
            self._documents += int(np.count_nonzero(take == self.eos_id))
            self._max = max(self._max, int(take.max()))
            tokens = tokens[take.size :]
            if self._tokens == self.shard_tokens:
                self._finish()

    def close(self) -> list[dict[str, Any]]:
        self._finish()
        return self.shards

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            with contextlib.suppress(OSError):
                os.remove(self._tmp)


def _document_batches(
    documents: Iterator[str], batch_docs: int, max_documents: int | None, batch_chars: int
) -> Iterator[list[str]]:
    batch: list[str] = []
    chars = count = 0
    for text in documents:
        if not text:
            continue
        if max_documents is not None and count >= max_documents:
            break
        batch.append(text)
        chars += len(text)
        count += 1
        if len(batch) >= batch_docs or chars >= batch_chars:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _join_with_eos(ids: list[list[int]], eos_id: int) -> np.ndarray:
    """One int64 array: doc_0, EOS, doc_1, EOS, ... (empty encodings are dropped)."""
    eos = np.array([eos_id], dtype=np.int64)
    parts: list[np.ndarray] = []
    for doc in ids:
        if doc:
            parts.append(np.asarray(doc, dtype=np.int64))
            parts.append(eos)
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _clear_build(folder: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(folder / MANIFEST_NAME)
    for path in folder.glob("shard-*.bin*"):
        path.unlink()


def build_shards(
    source: Source,
    out_dir: str | Path,
    tokenizer: TextTokenizer | str | None = None,
    *,
    text_field: str = "text",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    batch_docs: int = 256,
    max_documents: int | None = None,
    max_tokens: int | None = None,
    progress: bool = True,
) -> Manifest:
    """Tokenize every document of `source` into token shards in `out_dir`.

    Documents are read in order, encoded `batch_docs` at a time with the tokenizer's thread-
    parallel ``encode_batch`` (the next batch is read while one is encoded), each followed by EOS,
    and appended to shards of `shard_tokens` tokens (the last one shorter). Any previous manifest
    and shards in `out_dir` are removed first.

    Args:
        source: paths/directories/globs or a ``hf:`` spec (see `tying.data.readers`).
        out_dir: the shard folder (created).
        tokenizer: a `TextTokenizer` or a `load_tokenizer` spec (default GPT-2).
        text_field: JSON field / column holding the text.
        shard_tokens: tokens per shard file.
        batch_docs: documents per encode batch.
        max_documents: stop after this many (non-empty) documents; None reads all.
        max_tokens: stop after the document that brings the shards to this many tokens (EOS
            included); None reads all.
        progress: show a tqdm bar (tokens, tokens/s) on stderr.

    Returns:
        The `Manifest` written to ``out_dir/manifest.json``.

    Raises:
        FileNotFoundError: the source matches no files.
        ValueError: the source holds no non-empty document, or bad arguments.
    """
    from tqdm.auto import tqdm

    if shard_tokens < 1 or batch_docs < 1:
        raise InvalidInputError(
            f"shard_tokens and batch_docs must be >= 1, got {shard_tokens}, {batch_docs}"
        )
    for name, limit in (("max_documents", max_documents), ("max_tokens", max_tokens)):
        if limit is not None and limit < 1:
            raise InvalidInputError(f"{name} must be >= 1 or None, got {limit}")
    tok = load_tokenizer(tokenizer)
    info: SourceInfo = describe_source(source, text_field)  # raises early for a missing path
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _clear_build(folder)
    dtype = token_dtype(tok.vocab_size)
    writer = _ShardWriter(folder, dtype, shard_tokens, tok.eos_id)
    documents = 0
    label = Path(info.description.split(", ")[0]).name[:40]
    bar = tqdm(
        desc=f"tokenize {label}",
        unit="tok",
        unit_scale=True,
        disable=not progress,
        dynamic_ncols=True,
    )
    # with a token limit, batches of about a quarter of the text it needs (4 characters/token)
    batch_chars = _BATCH_CHARS if max_tokens is None else min(_BATCH_CHARS, max(max_tokens, 2**16))
    batches = _document_batches(
        iter_documents(source, text_field), batch_docs, max_documents, batch_chars
    )
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = None
            for batch in batches:
                future = pool.submit(tok.encode_batch, batch)  # encodes while we read on
                if pending is not None:
                    documents += _write_encoded(
                        writer, pending.result(), tok, bar, documents, max_tokens
                    )
                pending = future
                if max_tokens is not None and writer.total >= max_tokens:
                    pending = None
                    break
            if pending is not None:
                documents += _write_encoded(
                    writer, pending.result(), tok, bar, documents, max_tokens
                )
        shards = writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        bar.close()
    if documents == 0:
        raise InvalidInputError(f"source {info.description} holds no non-empty document")
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        tokenizer={
            "name": tok.name,
            "hash": tok.hash,
            "vocab_size": tok.vocab_size,
            "eos_id": tok.eos_id,
        },
        dtype=dtype.str,
        shards=shards,
        num_tokens=sum(s["tokens"] for s in shards),
        num_documents=documents,
        source=info.description,
        fingerprint=info.fingerprint,
        source_files=info.files,
        text_field=text_field,
        max_documents=max_documents,
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        max_tokens=max_tokens,
    )
    manifest.save(folder)
    return manifest


def _write_encoded(
    writer: _ShardWriter,
    ids: list[list[int]],
    tok: TextTokenizer,
    bar: Any,
    done: int,
    max_tokens: int | None = None,
) -> int:
    if max_tokens is not None:  # whole documents up to the one that reaches max_tokens
        room, kept = max_tokens - writer.total, []
        for doc in ids:
            if room <= 0:
                break
            kept.append(doc)
            room -= len(doc) + 1 if doc else 0
        ids = kept
    tokens = _join_with_eos(ids, tok.eos_id)
    if tokens.size and int(tokens.max()) >= tok.vocab_size:  # a tokenizer bug, never data
        raise InvalidInputError(
            f"tokenizer {tok.name} produced id {int(tokens.max())} >= its "
            f"vocab_size {tok.vocab_size}"
        )
    writer.write(tokens)
    written = sum(1 for doc in ids if doc)
    bar.update(int(tokens.size))
    bar.set_postfix(docs=done + written, refresh=False)
    return written


# --------------------------------------------------------------------------- cache


def _slug(text: str, limit: int = 48) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.")[-limit:].strip("-.") or "source"


def _source_slug(description: str) -> str:
    """A readable folder name part: ``gutenberg-train-.jsonl.xz`` or ``HuggingFaceFW-fineweb``."""
    first = description.split(", ")[0]
    if first.startswith("hf:"):
        return _slug(first[3:].split("?")[0])
    return _slug("-".join(Path(first).parts[-2:]))


def cache_key(
    fingerprint: str,
    tokenizer_hash: str,
    max_documents: int | None,
    text_field: str = "text",
    max_tokens: int | None = None,
) -> str:
    """The 16-hex-digit key of a shard build: source fingerprint × tokenizer × options (a build
    without a token limit keeps the key it had before the limit existed)."""
    parts: list[Any] = [FORMAT_VERSION, fingerprint, tokenizer_hash, max_documents, text_field]
    if max_tokens is not None:
        parts.append({"max_tokens": max_tokens})
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def _is_complete(
    folder: Path,
    fingerprint: str,
    tok: TextTokenizer,
    max_documents: int | None,
    text_field: str,
    max_tokens: int | None = None,
) -> bool:
    try:
        manifest = Manifest.load(folder)
    except (FileNotFoundError, ValueError):
        return False
    if (
        manifest.fingerprint != fingerprint
        or manifest.tokenizer.get("hash") != tok.hash
        or manifest.max_documents != max_documents
        or manifest.max_tokens != max_tokens
        or manifest.text_field != text_field
    ):
        return False
    itemsize = np.dtype(manifest.dtype).itemsize
    for shard in manifest.shards:
        path = folder / shard["file"]
        if not path.is_file() or path.stat().st_size != shard["tokens"] * itemsize:
            return False
    return True


def is_shard_folder(source: Source) -> bool:
    """Whether `source` is one folder holding a shard manifest (``manifest.json``)."""
    if not isinstance(source, str | Path):
        return False
    folder = Path(str(source)).expanduser()
    return folder.is_dir() and (folder / MANIFEST_NAME).is_file()


def ensure_shards(
    source: Source,
    cache_root: str | Path | None = None,
    tokenizer: TextTokenizer | str | None = None,
    *,
    text_field: str = "text",
    max_documents: int | None = None,
    max_tokens: int | None = None,
    **build_kwargs: Any,
) -> Path:
    """The shard folder of (`source`, `tokenizer`), built only when no complete one exists.

    The folder is ``cache_root/<source-slug>-<tokenizer>-<key>`` with `cache_key` of the source
    fingerprint (paths, sizes, mtimes), the tokenizer hash and the options, so an edited source or
    another tokenizer gets a new folder, and a second call returns at once. A build goes to a
    temporary sibling folder renamed into place at the end, so concurrent callers (e.g. several
    ranks) never see a half-built folder; still, in a distributed run call it on one rank first.
    An interrupted build leaves nothing behind (see the module docstring).

    Args:
        source: paths/directories/globs or a ``hf:`` spec.
        cache_root: parent folder of the caches (default ``tying.paths.cache_dir() / "shards"``).
        tokenizer: a `TextTokenizer` or a `load_tokenizer` spec (default GPT-2).
        text_field: JSON field / column holding the text.
        max_documents, max_tokens: see `build_shards` (part of the key).
        **build_kwargs: passed to `build_shards` (``shard_tokens``, ``batch_docs``, ``progress``).

    A `source` that is itself a shard folder (written by `tying tokenize --out`, holding
    ``manifest.json``) is used as it is, after checking that it was tokenized by `tokenizer`.

    Returns:
        The folder holding ``manifest.json`` and the shards (open it with `open_shards`).

    Raises:
        ValueError: a shard folder made with another tokenizer.
    """
    from tying.paths import cache_dir

    tok = load_tokenizer(tokenizer)
    if is_shard_folder(source):
        folder = Path(str(source)).expanduser()
        made_with = Manifest.load(folder).tokenizer
        if made_with.get("hash") != tok.hash:
            raise InvalidInputError(
                f"the shards in {folder} were made with tokenizer {made_with.get('name')!r}, not "
                f"{tok.name!r}: tokenize the text again with tokenizer "
                f"{tok.name!r}, or point at the text itself"
            )
        return folder
    info = describe_source(source, text_field)
    root = Path(cache_root) if cache_root is not None else cache_dir() / "shards"
    key = cache_key(info.fingerprint, tok.hash, max_documents, text_field, max_tokens)
    tok_name = Path(tok.name).name if os.sep in tok.name else tok.name
    folder = root / f"{_source_slug(info.description)}-{_slug(tok_name, 24)}-{key}"
    limits = (max_documents, text_field, max_tokens)
    if _is_complete(folder, info.fingerprint, tok, *limits):
        return folder
    sweep_abandoned_builds(root)
    tmp = folder.with_name(f".{folder.name}{_tmp_tag()}{uuid.uuid4().hex[:8]}")
    try:
        with _sigterm_raises():
            build_shards(
                source,
                tmp,
                tok,
                text_field=text_field,
                max_documents=max_documents,
                max_tokens=max_tokens,
                **build_kwargs,
            )
        if _is_complete(folder, info.fingerprint, tok, *limits):
            return folder  # another process finished first
        if folder.exists():
            shutil.rmtree(folder)  # stale or partial
        try:
            os.rename(tmp, folder)
        except OSError:
            if not _is_complete(folder, info.fingerprint, tok, *limits):
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _tmp_tag(pid: int | None = None) -> str:
    """The part of a build folder's name that says whose it is: ``.tmp-<host>-<pid>-``."""
    host = _slug(socket.gethostname(), 32).replace("-", "_")
    return f".tmp-{host}-{os.getpid() if pid is None else pid}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_abandoned_builds(root: str | Path) -> list[Path]:
    """Remove the hidden build folders in `root` whose process, on this host, is gone (a build
    killed by SIGKILL or a power cut); builds of live processes and of other hosts stay.

    Returns:
        The folders removed.
    """
    removed: list[Path] = []
    prefix = _tmp_tag(0).rsplit("-0-", 1)[0] + "-"  # ".tmp-<host>-"
    root = Path(root)
    if not root.is_dir():
        return removed
    for path in root.glob(".*"):
        name = path.name
        at = name.find(prefix)
        if at < 0 or not path.is_dir():
            continue
        pid = name[at + len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises SystemExit(143) inside the block, so that cleanup code runs (the default
    action ends the process at once, leaving a half-built folder). Only in the main thread and
    only where SIGTERM has its default action: a handler someone installed stays."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def _raise(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
