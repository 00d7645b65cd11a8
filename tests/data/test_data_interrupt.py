"""Token budgets of a build (`max_tokens`) and interrupted builds: nothing left in the cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tying.data import shards as shards_mod
from tying.data.shards import Manifest, build_shards, cache_key, ensure_shards, open_shards


def _docs(n: int, words: int = 60) -> list[str]:
    return [
        f"Document {i}: " + " ".join(f"w{(i * 7 + j) % 97}" for j in range(words)) for i in range(n)
    ]


def test_max_tokens_ends_with_the_document_that_reaches_it(tmp_path, gpt2, write_jsonl):
    """The limited build is the full build's prefix, cut at the end of the document that
    reaches the limit; the manifest records the limit, the cache key tells the builds apart."""
    path = write_jsonl(tmp_path / "d.jsonl", _docs(40))
    full = build_shards(path, tmp_path / "full", gpt2, batch_docs=3, progress=False)
    stream = open_shards(tmp_path / "full")[0 : full.num_tokens]
    ends = np.flatnonzero(stream == gpt2.eos_id) + 1  # cumulative tokens after each document
    for limit in (1, int(ends[0]), int(ends[0]) + 1, int(ends[9]) - 5, 10**9):
        out = tmp_path / f"cut-{limit}"
        manifest = build_shards(path, out, gpt2, batch_docs=3, max_tokens=limit, progress=False)
        expected = int(ends[np.searchsorted(ends, limit)]) if limit <= ends[-1] else int(ends[-1])
        assert manifest.num_tokens == expected
        assert manifest.max_tokens == limit
        assert Manifest.load(out).max_tokens == limit
        np.testing.assert_array_equal(open_shards(out)[0:expected], stream[:expected])
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        build_shards(path, tmp_path / "bad", gpt2, max_tokens=0, progress=False)
    # the key of a build without a limit is the one it had before limits existed
    old = __import__("hashlib").sha256(
        json.dumps([shards_mod.FORMAT_VERSION, "f", "h", None, "text"]).encode()
    )
    assert cache_key("f", "h", None) == old.hexdigest()[:16]
    assert cache_key("f", "h", None, max_tokens=5) != cache_key("f", "h", None)
    cache = tmp_path / "cache"
    limited = ensure_shards(path, cache, gpt2, max_tokens=int(ends[2]), progress=False)
    assert Manifest.load(limited).num_documents == 3
    assert ensure_shards(path, cache, gpt2, max_tokens=int(ends[2]), progress=False) == limited
    assert ensure_shards(path, cache, gpt2, progress=False) != limited


_CHILD = """
import pathlib, sys, time
from tying.data import shards
from tying.data.tokenizer import load_tokenizer

tok = load_tokenizer("gpt2")
encode = type(tok).encode_batch
def slow(self, texts):
    pathlib.Path(sys.argv[3]).touch()
    time.sleep(0.05)
    return encode(self, texts)
type(tok).encode_batch = slow
shards.ensure_shards(sys.argv[1], sys.argv[2], tok, batch_docs=1, shard_tokens=256, progress=False)
"""


def _hidden(cache: Path) -> list[Path]:
    return [p for p in cache.iterdir() if p.name.startswith(".")] if cache.is_dir() else []


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_an_interrupted_build_leaves_nothing_in_the_cache(tmp_path, gpt2, write_jsonl, sig):
    """SIGINT and SIGTERM mid-build remove the hidden build folder before the process ends; a
    build killed outright (SIGKILL) is swept by the next `ensure_shards` of this host."""
    path = write_jsonl(tmp_path / "d.jsonl", _docs(2000))
    cache, started = tmp_path / "cache", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(cache), str(started)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (started.exists() and any(cache.glob(".*/shard-*.bin*"))):  # mid-way, shards written
        assert child.poll() is None, child.stderr.read()
        assert time.monotonic() < deadline, "the build never started"
        time.sleep(0.05)
    child.send_signal(getattr(signal, sig))
    _, stderr = child.communicate(timeout=60)
    assert child.returncode != 0, "the build finished before the signal"
    if sig == "SIGTERM":
        assert child.returncode == 143, stderr
    if sig == "SIGKILL":
        assert len(_hidden(cache)) == 1  # nothing could run; the next build sweeps it
        folder = ensure_shards(path, cache, gpt2, max_documents=1, progress=False)
        assert list(cache.iterdir()) == [folder]
    else:
        assert list(cache.iterdir()) == [], stderr


def test_the_sweep_keeps_live_and_foreign_builds(tmp_path):
    """Only this host's builds whose process is gone are removed."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tag = shards_mod._tmp_tag
    names = {
        "dead": f".x{tag(dead.pid)}abcd1234",
        "live": f".x{tag(os.getppid())}abcd1234",
        "mine": f".x{tag()}abcd1234",
        "foreign": f".x.tmp-otherhost-{dead.pid}-abcd1234",
        "done": "x-gpt2-0123456789abcdef",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
    removed = shards_mod.sweep_abandoned_builds(tmp_path)
    assert removed == [tmp_path / names["dead"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        n for k, n in names.items() if k != "dead"
    )
