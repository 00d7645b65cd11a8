"""Fixtures of the probe tests: a tiny corpus and tokenizer, tiny training runs (TT with three
checkpoints, PIT), and tiny transformers Llama folders with partly overlapping vocabularies
(no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ..conftest import random_llama, train_tiny, word_tokenizer, word_vocab  # noqa: F401 (re-exported)

#: BPE vocabulary of the tiny corpus (>= the tiny preset's d = 256: consistency needs V >= d).
BPE_VOCAB = 300
#: Width of the tiny Llamas.
LLAMA_D = 32


@pytest.fixture(scope="session")
def probe_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probe-cache")


@pytest.fixture(autouse=True)
def _cache_dir(probe_cache, monkeypatch) -> None:
    """Shards and caches written by the tests go to a per-session temporary folder."""
    monkeypatch.setenv("TYING_CACHE_DIR", str(probe_cache))


@pytest.fixture(scope="session")
def probe_corpus(make_corpus) -> dict[str, Path]:
    """100k characters of a Gutenberg validation book, 3/4 for training, a BPE_VOCAB-token BPE."""
    return make_corpus("probe-corpus", 100_000, 0.75, BPE_VOCAB)


@pytest.fixture(scope="session")
def tt_run(probe_corpus, probe_cache, tmp_path_factory) -> Path:
    """A 6-step TT run of the tiny preset (d = 256, V = 300) with checkpoints at 2, 4 and 6."""
    out = tmp_path_factory.mktemp("runs") / "tiny-tt"
    return train_tiny(
        probe_corpus, out, probe_cache, max_steps=6, checkpoint_every=2, keep_last=3, tie="tt"
    )


@pytest.fixture(scope="session")
def pit_run(probe_corpus, probe_cache, tmp_path_factory) -> Path:
    """A 2-step PIT run of the tiny preset (one checkpoint)."""
    out = tmp_path_factory.mktemp("runs") / "tiny-pit"
    return train_tiny(probe_corpus, out, probe_cache, max_steps=2, tie="pit")


def llama_folder(
    folder: Path, *, vocab_size: int, tied: bool, shift: int = 0, seed: int = 0, tokenizer=True
) -> Path:
    """Save a random 2-layer LlamaForCausalLM (d = 32, norm gains perturbed) with a word
    tokenizer into `folder` (plain transformers format, not converted)."""
    model = random_llama(vocab_size, LLAMA_D, 64, 64, tied=tied, pad_token_id=1, seed=seed)
    model.save_pretrained(folder)
    if tokenizer:
        word_tokenizer(vocab_size, shift).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def llamas(tmp_path_factory) -> dict[str, Path]:
    """Model folders: "tied" (V = 96, words w3..w95), "untied" (V = 100, words w13..w109: 86
    token strings shared with "tied"), "small" (V = 24 < d: consistency must fail)."""
    root = tmp_path_factory.mktemp("llamas")
    return {
        "tied": llama_folder(root / "tied", vocab_size=96, tied=True),
        "untied": llama_folder(root / "untied", vocab_size=100, tied=False, shift=10, seed=1),
        "small": llama_folder(root / "small", vocab_size=24, tied=True, seed=2),
    }


@pytest.fixture(scope="session", autouse=True)
def _one_thread():
    """The probe tests use tiny matrices (d <= 256), for which threaded LAPACK only adds
    synchronization: on a machine busy with other jobs a 256×256 eigh took seconds on 2 threads
    and milliseconds on one. One thread keeps these tests fast and their timing stable."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
