"""Fixtures of the lens tests: tiny decoders (one trained on a Markov chain), tiny HF Llamas,
and a tiny training run folder with its corpus (no downloads)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tying.decoder.decoder import Decoder
from tying.decoder.presets import preset_config
from tying.loader import LoadedModel, wrap_model

from ..conftest import random_llama, train_tiny, word_tokenizer  # noqa: F401 (re-exported)

VOCAB = 64
D = 64
LAYERS = 3
SEQ = 32


def tiny_decoder(tie: str = "tt", vocab_size: int = VOCAB, n_layers: int = LAYERS, seed: int = 0):
    """A random 3-layer Decoder with d = 64, 4 heads of 16, V = `vocab_size`."""
    config = preset_config(
        "tiny",
        vocab_size=vocab_size,
        n_layers=n_layers,
        d_model=D,
        head_dim=16,
        max_seq_len=128,
        tie=tie,
    )
    return Decoder(config, generator=torch.Generator().manual_seed(seed)).eval()


def markov_chain(vocab_size: int = VOCAB, successors: int = 3, seed: int = 0) -> torch.Tensor:
    """A (V, V) transition matrix: each token goes to `successors` random tokens (random weights)."""
    g = torch.Generator().manual_seed(seed)
    P = torch.zeros(vocab_size, vocab_size)
    for v in range(vocab_size):
        nxt = torch.randperm(vocab_size, generator=g)[:successors]
        P[v, nxt] = torch.rand(successors, generator=g) + 0.2
    return P / P.sum(dim=1, keepdim=True)


def sample_chain(P: torch.Tensor, batch: int, length: int, seed: int) -> torch.Tensor:
    """(batch, length) token sequences of the chain P, random start tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.empty(batch, length, dtype=torch.long)
    ids[:, 0] = torch.randint(0, P.shape[0], (batch,), generator=g)
    for t in range(1, length):
        ids[:, t] = torch.multinomial(P[ids[:, t - 1]], 1, generator=g).squeeze(1)
    return ids


@pytest.fixture(scope="session")
def trained_decoder() -> SimpleNamespace:
    """A tiny Decoder trained (Adam, 200 steps of 8 × 32 tokens) on a sparse Markov chain."""
    torch.manual_seed(0)
    P = markov_chain()
    model = tiny_decoder()
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(200):
        ids = sample_chain(P, 8, SEQ + 1, seed=1000 + step)
        loss = model(ids[:, :-1], ids[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return SimpleNamespace(model=model, chain=P, loss=float(loss.detach()))


def loaded(model: torch.nn.Module, name: str = "tiny") -> LoadedModel:
    """`wrap_model` of an in-memory model."""
    return wrap_model(model, name=name)


def tiny_llama(tied: bool = True, vocab_size: int = 96, seed: int = 0):
    """A random 2-layer LlamaForCausalLM (d = 64, V = 96 > d: PIT needs a full-rank E with its
    zero padding row), norm gains perturbed, eval mode, float32."""
    return random_llama(vocab_size, D, 128, 128, tied=tied, pad_token_id=0, seed=seed).eval()


@pytest.fixture(scope="session")
def lens_cache(tmp_path_factory) -> Path:
    """A per-session shard cache."""
    return tmp_path_factory.mktemp("lens-cache")


@pytest.fixture(autouse=True)
def _cache_dir(lens_cache, monkeypatch) -> None:
    """Shards built by the tests go to the per-session temporary cache."""
    monkeypatch.setenv("TYING_CACHE_DIR", str(lens_cache))


@pytest.fixture(scope="session")
def tiny_corpus(make_corpus) -> dict[str, Path]:
    """120k characters of a Gutenberg validation book, 3/4 for training, a 300-token BPE."""
    return make_corpus("lens-corpus", 120_000, 0.75, 300)


@pytest.fixture(scope="session")
def tiny_run(tiny_corpus, lens_cache, tmp_path_factory) -> Path:
    """A finished 4-step training run of the tiny preset on the tiny corpus (a run folder)."""
    out = tmp_path_factory.mktemp("runs") / "tiny-tt"
    return train_tiny(tiny_corpus, out, lens_cache)
