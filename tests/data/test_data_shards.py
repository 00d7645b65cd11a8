"""Token shards: exact round trip, manifest, cache reuse, atomicity, bad-input errors."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tying.cli import main
from tying.data import shards as shards_mod
from tying.data.readers import describe_source
from tying.data.shards import (
    MANIFEST_NAME,
    Manifest,
    build_shards,
    ensure_shards,
    open_shards,
    token_dtype,
)
from tying.data.tokenizer import wrap_tokenizer


def reference_stream(tok, docs: list[str]) -> np.ndarray:
    """Naive reference: each non-empty document encoded alone, followed by EOS."""
    ids: list[int] = []
    for doc in docs:
        if doc:
            ids += [*tok.encode(doc), tok.eos_id]
    return np.array(ids, dtype=np.int64)


def test_round_trip_equals_eos_joined_documents(corpus, gpt2, tmp_path):
    folder, docs = corpus
    manifest = build_shards(
        folder, tmp_path / "out", gpt2, shard_tokens=37, batch_docs=2, progress=False
    )
    store = open_shards(tmp_path / "out", expected_vocab_size=gpt2.vocab_size)
    tokens = store.slice(0, len(store))
    np.testing.assert_array_equal(tokens, reference_stream(gpt2, docs))
    eos = gpt2.eos_token
    assert gpt2.decode(tokens) == "".join(doc + eos for doc in docs)
    # manifest facts
    assert manifest.num_documents == len(docs) == int(np.sum(tokens == gpt2.eos_id))
    assert manifest.num_tokens == len(store) == sum(s["tokens"] for s in manifest.shards)
    assert [s["tokens"] for s in manifest.shards[:-1]] == [37] * (len(manifest.shards) - 1)
    assert len(manifest.shards) == -(-manifest.num_tokens // 37)
    assert sum(s["documents"] for s in manifest.shards) == manifest.num_documents
    assert manifest.tokenizer == {
        "name": "gpt2",
        "hash": gpt2.hash,
        "vocab_size": 50257,
        "eos_id": 50256,
    }
    assert manifest.dtype == "<u2" and manifest.fingerprint == describe_source(folder).fingerprint
    assert Manifest.load(tmp_path / "out") == manifest
    # raw files are plain memmap-readable arrays of the recorded length
    for shard in manifest.shards:
        raw = np.memmap(tmp_path / "out" / shard["file"], dtype="<u2", mode="r")
        assert len(raw) == shard["tokens"] and int(raw.max()) == shard["max_id"]
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_stream_does_not_depend_on_batching_or_sharding(corpus, gpt2, tmp_path):
    folder, _ = corpus
    build_shards(folder, tmp_path / "a", gpt2, batch_docs=1, shard_tokens=10, progress=False)
    build_shards(folder, tmp_path / "b", gpt2, batch_docs=64, progress=False)
    a, b = open_shards(tmp_path / "a"), open_shards(tmp_path / "b")
    np.testing.assert_array_equal(a[0 : len(a)], b[0 : len(b)])


def test_slices_across_shard_boundaries(corpus, gpt2, tmp_path):
    folder, docs = corpus
    build_shards(folder, tmp_path / "out", gpt2, shard_tokens=16, progress=False)
    store = open_shards(tmp_path / "out")
    reference = reference_stream(gpt2, docs)
    rng = np.random.default_rng(0)
    for _ in range(50):
        start = int(rng.integers(0, len(store)))
        length = int(rng.integers(0, min(100, len(store) - start) + 1))
        out = store.slice(start, length)
        assert out.dtype == np.int64
        np.testing.assert_array_equal(out, reference[start : start + length])
    np.testing.assert_array_equal(store[-5:], reference[-5:])
    with pytest.raises(IndexError, match="outside"):
        store.slice(len(store) - 2, 3)
    with pytest.raises(IndexError):
        store.slice(-1, 1)


def test_empty_documents_and_max_documents(tmp_path, gpt2, write_jsonl):
    docs = ["one", "", "two", "three", "four"]
    path = write_jsonl(tmp_path / "d.jsonl", docs)
    manifest = build_shards(path, tmp_path / "out", gpt2, max_documents=2, progress=False)
    store = open_shards(tmp_path / "out")
    assert manifest.num_documents == 2 and manifest.max_documents == 2
    assert gpt2.decode(store[0 : len(store)]) == f"one{gpt2.eos_token}two{gpt2.eos_token}"
    only_empty = write_jsonl(tmp_path / "e.jsonl", ["", ""])
    with pytest.raises(ValueError, match="no non-empty document"):
        build_shards(only_empty, tmp_path / "out2", gpt2, progress=False)


def test_large_vocabulary_uses_uint32(tmp_path, write_text):
    from tokenizers import Tokenizer, models, pre_tokenizers

    V = 70_000
    vocab = {f"w{i}": i for i in range(V - 1)} | {"<eos>": V - 1}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<eos>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = wrap_tokenizer(backend, "big")
    assert tok.eos_id == V - 1 and token_dtype(V) == np.dtype("<u4")
    path = write_text(tmp_path / "d.txt", "w69998 w3 w65536 w70")
    manifest = build_shards(path, tmp_path / "out", tok, progress=False)
    assert manifest.dtype == "<u4"
    store = open_shards(tmp_path / "out", expected_vocab_size=V)
    assert store[0 : len(store)].tolist() == [69998, 3, 65536, 70, V - 1]
    assert token_dtype(2**16) == np.dtype("<u2")


def test_missing_corpus_path_is_a_clear_error(tmp_path, gpt2):
    with pytest.raises(FileNotFoundError, match="corpus path not found"):
        build_shards(tmp_path / "missing.jsonl", tmp_path / "out", gpt2, progress=False)
    with pytest.raises(FileNotFoundError, match="corpus path not found"):
        ensure_shards(tmp_path / "missing.jsonl", tmp_path / "cache", gpt2, progress=False)
    with pytest.raises(FileNotFoundError, match="build_shards"):
        open_shards(tmp_path)


def test_ensure_shards_reuses_and_rebuilds(corpus, gpt2, tmp_path, monkeypatch):
    folder, _ = corpus
    calls = []
    real_build = shards_mod.build_shards

    def counting_build(*args, **kwargs):
        calls.append(args[1])
        return real_build(*args, **kwargs)

    monkeypatch.setattr(shards_mod, "build_shards", counting_build)
    cache = tmp_path / "cache"
    first = ensure_shards(folder, cache, gpt2, progress=False)
    stamp = (first / MANIFEST_NAME).stat().st_mtime_ns
    second = ensure_shards(folder, cache, gpt2, progress=False)
    assert second == first and len(calls) == 1
    assert (first / MANIFEST_NAME).stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [first.name]  # no temporary folder left
    # a different option or an edited source is another cache entry
    assert ensure_shards(folder, cache, gpt2, max_documents=2, progress=False) != first
    assert len(calls) == 2
    target = folder / "a.jsonl"
    stat = target.stat()
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert ensure_shards(folder, cache, gpt2, progress=False) != first
    assert len(calls) == 3
    # a folder whose manifest is gone (a killed build) is rebuilt in place
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (first / MANIFEST_NAME).unlink()
    assert ensure_shards(folder, cache, gpt2, progress=False) == first
    assert len(calls) == 4 and (first / MANIFEST_NAME).is_file()
    # a truncated shard is detected and rebuilt
    shard = first / Manifest.load(first).shards[0]["file"]
    shard.write_bytes(shard.read_bytes()[:-2])
    assert ensure_shards(folder, cache, gpt2, progress=False) == first
    assert len(calls) == 5
    open_shards(first).verify()


def test_ensure_shards_default_cache_root(corpus, gpt2, tmp_path, monkeypatch):
    monkeypatch.setenv("TYING_CACHE_DIR", str(tmp_path / "tc"))
    folder = ensure_shards(corpus[0], tokenizer=gpt2, progress=False)
    assert folder.parent == tmp_path / "tc" / "shards"


def test_killed_build_never_looks_complete(corpus, gpt2, tmp_path, monkeypatch):
    folder, docs = corpus
    build_shards(folder, tmp_path / "out", gpt2, shard_tokens=8, progress=False)

    def dying(source, text_field="text"):
        yield from docs[:3]
        raise KeyboardInterrupt  # killed mid-build

    monkeypatch.setattr(shards_mod, "iter_documents", dying)
    with pytest.raises(KeyboardInterrupt):
        build_shards(folder, tmp_path / "out", gpt2, shard_tokens=8, batch_docs=1, progress=False)
    assert not (tmp_path / "out" / MANIFEST_NAME).exists()  # the old manifest is gone too
    assert not list((tmp_path / "out").glob("*.tmp"))
    with pytest.raises(FileNotFoundError, match="did not"):
        open_shards(tmp_path / "out")
    with pytest.raises(KeyboardInterrupt):
        ensure_shards(folder, tmp_path / "cache", gpt2, progress=False)
    assert not list((tmp_path / "cache").iterdir())


def test_vocab_mismatch_is_a_clear_error(corpus, gpt2, tmp_path):
    build_shards(corpus[0], tmp_path / "out", gpt2, progress=False)
    with pytest.raises(ValueError, match=r"50257.*49152.*re-tokenize"):
        open_shards(tmp_path / "out", expected_vocab_size=49152)
    with pytest.raises(ValueError, match="50257"):
        open_shards(tmp_path / "out", expected_vocab_size=50304)
    padded = open_shards(tmp_path / "out", expected_vocab_size=50304, allow_padded_vocab=True)
    assert padded.vocab_size == 50257
    with pytest.raises(ValueError, match="tokenizer mismatch"):
        open_shards(tmp_path / "out", expected_tokenizer_hash="0" * 64)
    open_shards(tmp_path / "out", expected_tokenizer_hash=gpt2.hash)


def test_id_out_of_vocabulary_is_detected(corpus, gpt2, tmp_path):
    out = tmp_path / "out"
    manifest = build_shards(corpus[0], out, gpt2, shard_tokens=32, progress=False)
    # 1) a manifest that records an id >= V: refused at open, naming the shard
    bad = manifest.to_dict()
    bad["shards"][1]["max_id"] = 50257
    (out / MANIFEST_NAME).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"shard-00001\.bin holds token id 50257 >= vocab_size"):
        open_shards(out)
    manifest.save(out)
    # 2) a shard file whose bytes hold an id >= V: found on first read of that shard
    shard = out / manifest.shards[2]["file"]
    data = np.fromfile(shard, dtype="<u2")
    data[5] = 60000
    data.tofile(shard)
    store = open_shards(out)
    store.slice(0, 64)  # shards 0 and 1 are fine
    with pytest.raises(ValueError, match=r"shard-00002\.bin holds token id 60000"):
        store.slice(60, 10)
    with pytest.raises(ValueError, match="shard-00002"):
        open_shards(out).verify()
    # 3) a shard modified within the vocabulary so that its largest id changed
    data[:] = 7
    data.tofile(shard)
    with pytest.raises(ValueError, match="differs from its manifest"):
        open_shards(out).verify()


def test_truncated_or_missing_shard(corpus, gpt2, tmp_path):
    manifest = build_shards(corpus[0], tmp_path / "out", gpt2, shard_tokens=32, progress=False)
    shard = tmp_path / "out" / manifest.shards[0]["file"]
    shard.write_bytes(shard.read_bytes()[:-2])
    with pytest.raises(ValueError, match="truncated"):
        open_shards(tmp_path / "out")
    shard.unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        open_shards(tmp_path / "out")


def test_gutenberg_validation_prefix(gpt2, tmp_path):
    """The real corpus: the first two books of validation.jsonl.xz round-trip through shards."""
    from tying.data import default_validation_source, iter_documents

    source = default_validation_source()
    build_shards(source, tmp_path / "val", gpt2, max_documents=2, progress=False)
    store = open_shards(tmp_path / "val", expected_vocab_size=50257)
    docs = []
    for doc in iter_documents(source):
        docs.append(doc)
        if len(docs) == 2:
            break
    assert gpt2.decode(store[0 : len(store)]) == "".join(d + gpt2.eos_token for d in docs)


def test_tokenize_command(corpus, tmp_path, capsys):
    args = ["tokenize", str(corpus[0]), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*args, "--json", "--shard-tokens", "50"]) == 0
    summary = json.loads(capsys.readouterr().out)
    manifest = Manifest.load(tmp_path / "out")
    assert summary["tokens"] == manifest.num_tokens and summary["shards"] == len(manifest.shards)
    assert (
        main(["tokenize", str(corpus[0]), "--cache-root", str(tmp_path / "c"), "--no-progress"])
        == 0
    )
    assert "documents" in capsys.readouterr().out
