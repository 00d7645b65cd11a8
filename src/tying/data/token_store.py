"""The token-shard folder's format and its reader: the manifest, shard names, the token dtype,
and `TokenStore` (the shards of a folder read as one memory-mapped token stream).

Layout of a shard folder::

    shard-00000.bin   raw token ids, little-endian uint16 (V <= 65,536) or uint32, no header
    shard-00001.bin   ...
    manifest.json     what the shards hold (see `Manifest`), written last

`tying.data.shards` writes these folders (and caches them); this module only describes and
reads them.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tying.errors import InvalidInputError, MissingFileError
from tying.outputs import write_text_atomic

#: Version of the shard layout and manifest; a cache built with another version is rebuilt.
FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
#: Tokens per chunk when scanning a shard for its largest id.
_SCAN_CHUNK = 2**24


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (V <= 65,536), else uint32 (little-endian)."""
    if vocab_size <= 2**16:
        return np.dtype("<u2")
    if vocab_size <= 2**32:
        return np.dtype("<u4")
    raise InvalidInputError(f"vocab_size {vocab_size} does not fit in uint32 token shards")


# --------------------------------------------------------------------------- manifest


@dataclass
class Manifest:
    """The contents of ``manifest.json``.

    Attributes:
        format_version: `FORMAT_VERSION` at build time.
        tokenizer: ``{"name", "hash", "vocab_size", "eos_id"}`` of the tokenizer used.
        dtype: numpy dtype string of the shards (``"<u2"`` or ``"<u4"``).
        shards: ``[{"file", "tokens", "documents", "max_id"}]`` in stream order; ``documents``
            counts the EOS tokens in the shard, ``max_id`` is its largest token id.
        num_tokens: total tokens (EOS included) = sum of the shards' ``tokens``.
        num_documents: documents written (empty documents are skipped).
        source: a description of the source (paths or ``hf:`` spec).
        fingerprint: `SourceInfo.fingerprint` of the source at build time.
        source_files: ``[{"path", "size", "mtime_ns"}]`` of the source files.
        text_field: the JSON field / column read.
        max_documents: the document limit of the build, or None for all.
        created: UTC time of the build (ISO 8601).
        max_tokens: the token limit of the build (it ends with the document that reaches it),
            or None for all.
    """

    format_version: int
    tokenizer: dict[str, Any]
    dtype: str
    shards: list[dict[str, Any]]
    num_tokens: int
    num_documents: int
    source: str
    fingerprint: str
    source_files: list[dict[str, Any]] = field(default_factory=list)
    text_field: str = "text"
    max_documents: int | None = None
    created: str = ""
    max_tokens: int | None = None

    @property
    def vocab_size(self) -> int:
        """V of the tokenizer the shards were made with."""
        return int(self.tokenizer["vocab_size"])

    @property
    def eos_id(self) -> int:
        """The end-of-document id written after every document."""
        return int(self.tokenizer["eos_id"])

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        return cls(**data)

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/manifest.json`` atomically (temporary file, fsync, ``os.replace``)."""
        path = Path(folder) / MANIFEST_NAME
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> Manifest:
        """Read ``folder/manifest.json``.

        Raises:
            FileNotFoundError: there is no manifest (no build, or a build that did not finish).
            ValueError: the manifest is unreadable or from another format version.
        """
        path = Path(folder) / MANIFEST_NAME
        if not path.is_file():
            raise MissingFileError(
                f"no {MANIFEST_NAME} in {folder}: not a token shard folder, or its build did not "
                "finish; build it with tying.data.build_shards / ensure_shards "
                "(CLI: `tying tokenize`)"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            manifest = cls.from_dict(data)
        except (json.JSONDecodeError, TypeError) as e:
            raise InvalidInputError(
                f"{path} is not a valid shard manifest ({e}); rebuild the shards"
            ) from e
        if manifest.format_version != FORMAT_VERSION:
            raise InvalidInputError(
                f"{path} has format version {manifest.format_version}, this code reads "
                f"{FORMAT_VERSION}; rebuild the shards"
            )
        return manifest


def shard_name(index: int) -> str:
    """File name of shard `index`: ``shard-00000.bin``."""
    return f"shard-{index:05d}.bin"


# --------------------------------------------------------------------------- reading


class TokenStore:
    """Read access to a shard folder: one virtual int64 token array across all shards.

    Use `open_shards` to create one. Shards are memory-mapped read-only; a shard's contents are
    checked (largest id < V, equal to the manifest's) the first time it is read, or all at once by
    `verify`.

    Attributes:
        folder: the shard folder.
        manifest: its `Manifest`.
        num_tokens: N, the length of the token stream (EOS included).
    """

    def __init__(self, folder: Path, manifest: Manifest) -> None:
        self.folder = folder
        self.manifest = manifest
        self.dtype = np.dtype(manifest.dtype)
        self._shards = [s for s in manifest.shards if s["tokens"] > 0]
        self._maps: list[np.memmap] = []
        for shard in self._shards:
            path = folder / shard["file"]
            if not path.is_file():
                raise MissingFileError(
                    f"shard {path} listed in the manifest is missing; rebuild the shards"
                )
            size = path.stat().st_size
            if size != shard["tokens"] * self.dtype.itemsize:
                raise InvalidInputError(
                    f"shard {path} has {size} bytes, the manifest expects {shard['tokens']} "
                    f"tokens × {self.dtype.itemsize} bytes; it was truncated or modified, "
                    "rebuild the shards"
                )
            self._maps.append(np.memmap(path, dtype=self.dtype, mode="r"))
        counts = [int(s["tokens"]) for s in self._shards]
        self._starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
        self.num_tokens = int(self._starts[-1])
        self._verified = [False] * len(self._shards)
        for shard in self._shards:
            if shard["max_id"] >= self.vocab_size:
                raise InvalidInputError(self._bad_id_message(shard, shard["max_id"]))

    @property
    def vocab_size(self) -> int:
        """V of the tokenizer the shards were made with; every id is < V."""
        return self.manifest.vocab_size

    @property
    def eos_id(self) -> int:
        """The end-of-document id."""
        return self.manifest.eos_id

    def __len__(self) -> int:
        return self.num_tokens

    def _bad_id_message(self, shard: dict[str, Any], max_id: int) -> str:
        return (
            f"shard {self.folder / shard['file']} holds token id {max_id} >= vocab_size "
            f"{self.vocab_size} of tokenizer {self.manifest.tokenizer.get('name')!r}; the shard is "
            "corrupt or was made with another tokenizer: rebuild it with the model's tokenizer"
        )

    def _verify(self, index: int) -> None:
        if self._verified[index]:
            return
        data, shard = self._maps[index], self._shards[index]
        max_id = max(int(data[i : i + _SCAN_CHUNK].max()) for i in range(0, len(data), _SCAN_CHUNK))
        if max_id >= self.vocab_size:
            raise InvalidInputError(self._bad_id_message(shard, max_id))
        if max_id != shard["max_id"]:
            raise InvalidInputError(
                f"shard {self.folder / shard['file']} differs from its manifest (largest id "
                f"{max_id}, recorded {shard['max_id']}); it was modified: rebuild the shards"
            )
        self._verified[index] = True

    def verify(self) -> None:
        """Scan every shard now (instead of on first read); raises ValueError like reads do."""
        for index in range(len(self._maps)):
            self._verify(index)

    def slice(self, start: int, length: int) -> np.ndarray:
        """Tokens ``[start, start + length)`` of the stream, across shard boundaries.

        Returns:
            int64 array of shape (length,).

        Raises:
            IndexError: the range is outside ``[0, num_tokens)``.
            ValueError: a shard read for the first time holds an id >= V.
        """
        start, length = int(start), int(length)
        if start < 0 or length < 0 or start + length > self.num_tokens:
            raise IndexError(
                f"token range [{start}, {start + length}) is outside the store's "
                f"[0, {self.num_tokens})"
            )
        out = np.empty(length, dtype=np.int64)
        index = bisect.bisect_right(self._starts, start) - 1
        filled = 0
        while filled < length:
            self._verify(index)
            local = start + filled - self._starts[index]
            take = min(length - filled, len(self._maps[index]) - local)
            out[filled : filled + take] = self._maps[index][local : local + take]
            filled += take
            index += 1
        return out

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("TokenStore supports store[a:b] slices (step 1) and .slice(start, n)")
        start, stop, _ = key.indices(self.num_tokens)
        return self.slice(start, max(stop - start, 0))

    def __repr__(self) -> str:
        return (
            f"TokenStore({str(self.folder)!r}, tokens={self.num_tokens:,}, "
            f"documents={self.manifest.num_documents:,}, V={self.vocab_size})"
        )


def open_shards(
    folder: str | Path,
    expected_vocab_size: int | None = None,
    *,
    allow_padded_vocab: bool = False,
    expected_tokenizer_hash: str | None = None,
) -> TokenStore:
    """Open a shard folder for reading.

    Args:
        folder: a folder written by `build_shards` / `ensure_shards`.
        expected_vocab_size: the model's V; must equal the shards' tokenizer V (or be larger when
            `allow_padded_vocab`, for embedding tables padded to a multiple of 64 or so).
        allow_padded_vocab: accept a model V larger than the tokenizer's.
        expected_tokenizer_hash: if given, the shards' tokenizer hash must equal it.

    Raises:
        FileNotFoundError: no manifest or a missing shard.
        ValueError: vocabulary or tokenizer mismatch, a truncated shard, or an id >= V.
    """
    folder = Path(folder)
    manifest = Manifest.load(folder)
    tok = manifest.tokenizer
    if expected_vocab_size is not None:
        ok = expected_vocab_size == manifest.vocab_size or (
            allow_padded_vocab and expected_vocab_size > manifest.vocab_size
        )
        if not ok:
            raise InvalidInputError(
                f"vocabulary mismatch: the token shards in {folder} were made with tokenizer "
                f"{tok.get('name')!r} (vocab_size {manifest.vocab_size}), the model has "
                f"vocab_size {expected_vocab_size}; use the model's own tokenizer, or re-tokenize "
                "the corpus with it"
            )
    if expected_tokenizer_hash is not None and expected_tokenizer_hash != tok.get("hash"):
        raise InvalidInputError(
            f"tokenizer mismatch: the token shards in {folder} were made with tokenizer "
            f"{tok.get('name')!r} (hash {str(tok.get('hash'))[:12]}…), expected hash "
            f"{expected_tokenizer_hash[:12]}…; re-tokenize the corpus with the model's tokenizer"
        )
    return TokenStore(folder, manifest)
