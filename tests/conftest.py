"""Shared test settings and fixtures: a small real-text corpus with a 512-token BPE tokenizer,
a per-session shard cache, and a tiny tied Llama teacher saved with that tokenizer; plain
helpers for random tiny Llamas and word-level tokenizers (import with `from ..conftest`)."""

from __future__ import annotations

import json
import lzma
import os
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tying.paths import gutenberg_validation

#: Deterministic cuBLAS for the whole session: `train(deterministic=True)` sets this too, but
#: only a process's first cuBLAS handle reads it, and in a test worker an earlier test may
#: have made one.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def word_vocab(vocab_size: int, shift: int = 0) -> dict[str, int]:
    """ "[UNK]", "[PAD]", "</s>" at ids 0-2, then words "w{i + shift}" at ids i = 3..V-1."""
    vocab = {"[UNK]": 0, "[PAD]": 1, "</s>": 2}
    vocab.update({f"w{i + shift}": i for i in range(3, vocab_size)})
    return vocab


def word_tokenizer(vocab_size: int, shift: int = 0):
    """A word-level fast tokenizer over `word_vocab(vocab_size, shift)`, EOS "</s>"."""
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(word_vocab(vocab_size, shift), unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", eos_token="</s>"
    )


def random_llama(
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    max_positions: int,
    *,
    tied: bool,
    pad_token_id: int,
    seed: int = 0,
):
    """A random 2-layer LlamaForCausalLM (4 heads, 2 KV heads, bos 1, eos 2), float32, with its
    norm gains perturbed by 0.1·N(0, 1) so that the final-norm gain is not the identity."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tied,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=pad_token_id,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def tiny_train_settings(corpus: dict[str, Path], out: Path, **overrides) -> dict:
    """The one tiny training run of the tests: the tiny preset on a small corpus, seconds on a
    CPU (fp32, no validation, no intermediate checkpoint); `overrides` replace any key.

    Returns:
        TrainConfig keys (`TrainConfig(**settings)`; `as_overrides` for key=value items).
    """
    settings = dict(
        data=str(corpus["train"]),
        val_data="",
        tokenizer=str(corpus["tokenizer"]),
        preset="tiny",
        seq_len=32,
        micro_batch_size=4,
        global_batch_tokens=128,
        max_steps=4,
        warmup_steps=1,
        lr=3e-3,
        eval_every=0,
        checkpoint_every=0,
        precision="fp32",
        progress=False,
        tensorboard=False,
        out=str(out),
    )
    settings.update(overrides)
    return settings


def as_overrides(settings: dict) -> list[str]:
    """`key=value` items of a settings dict."""
    return [f"{k}={v}" for k, v in settings.items()]


def train_tiny(corpus: dict[str, Path], out: Path, cache: Path, **overrides) -> Path:
    """Train `tiny_train_settings(corpus, out, **overrides)` with its shard cache in `cache`."""
    from tying.train import TrainConfig, train

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TYING_CACHE_DIR", str(cache))
        train(TrainConfig(**tiny_train_settings(corpus, out, **overrides)))
    return out


@pytest.fixture
def cuda() -> torch.device:
    """The CUDA device; skips the test on a machine without one (the tests marked `cuda`)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.device("cuda")


#: Environment variable naming a file that every failing test's report is appended to as soon
#: as it fails (pytest prints its tracebacks only at the end, which a run cut by a time limit,
#: such as a lent GPU's, never reaches).
FAILURE_LOG_ENV = "TYING_TEST_FAILURE_LOG"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Append a failed test's id, phase and traceback to $TYING_TEST_FAILURE_LOG, if set; under
    pytest-xdist only the controller writes, as each worker's report arrives."""
    path = os.environ.get(FAILURE_LOG_ENV)
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")


def _cores() -> int:
    """CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):  # Linux
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist, each worker takes its share of the CPU cores for torch's threads (and
    the subprocesses it starts, through OMP_NUM_THREADS) unless OMP_NUM_THREADS is set. torch's
    default, every core in every worker, oversubscribes them: 15 workers × 16 threads on the
    16-core GPU machine of 2026-11-26, where the suite ran far slower than on 2 cores; on
    those 2 cores the default run went from 289 s to 222 s with this share."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        threads = max(1, _cores() // workers)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


#: TYING_COMPILE as the session found it; the tests not marked `cuda` and every fixture of a
#: wider scope (set up before any function-scoped fixture) see "0" instead.
_COMPILE_SETTING = os.environ.get("TYING_COMPILE")
os.environ["TYING_COMPILE"] = "0"


@pytest.fixture(autouse=True)
def _compile_only_in_cuda_tests(request: pytest.FixtureRequest, monkeypatch) -> None:
    """On a machine with a GPU, `compile: auto` would compile every tiny run of the suite
    (tens of seconds each): tests not marked `cuda`, and the module- and session-scoped
    fixtures (`os.environ` above: a module's reference run compiled while its tests ran eager
    differed from them at the 7th digit on a GPU machine), run with TYING_COMPILE=0, eager as
    on the CPU. The `cuda` tests get the session's own setting back and compile where they
    mean to; a test that asks for compilation explicitly (`compile=True`, or setting
    TYING_COMPILE itself) still gets it."""
    if request.node.get_closest_marker("cuda") is not None:
        if _COMPILE_SETTING is None:
            monkeypatch.delenv("TYING_COMPILE")
        else:
            monkeypatch.setenv("TYING_COMPILE", _COMPILE_SETTING)


def cut_corpus(root: Path, chars: int, train_fraction: float, vocab_size: int) -> dict[str, Path]:
    """Train/validation .jsonl cut from the first Gutenberg validation book, and a BPE tokenizer.

    Args:
        root: folder to write train.jsonl, val.jsonl and tokenizer/tokenizer.json into.
        chars: characters of the book used; paragraphs over 40 characters become documents.
        train_fraction: share of the paragraphs that go to train.jsonl (the rest: val.jsonl).
        vocab_size: size of the byte-level BPE trained on the training paragraphs.
    """
    with lzma.open(gutenberg_validation(), "rt") as f:
        text = json.loads(f.readline())["text"]
    paragraphs = [p.strip() for p in text[:chars].split("\n\n") if len(p.strip()) > 40]
    cut = int(len(paragraphs) * train_fraction)
    train, val = paragraphs[:cut], paragraphs[cut:]
    for name, docs in (("train.jsonl", train), ("val.jsonl", val)):
        (root / name).write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(train, trainer)
    tok_dir = root / "tokenizer"
    tok_dir.mkdir()
    tok.save(str(tok_dir / "tokenizer.json"))
    return {"train": root / "train.jsonl", "val": root / "val.jsonl", "tokenizer": tok_dir}


@pytest.fixture(scope="session")
def make_corpus(tmp_path_factory):
    """Factory: `make_corpus(name, chars, train_fraction, vocab_size)` (see `cut_corpus`)."""

    def make(name: str, chars: int, train_fraction: float, vocab_size: int) -> dict[str, Path]:
        return cut_corpus(tmp_path_factory.mktemp(name), chars, train_fraction, vocab_size)

    return make


@pytest.fixture(scope="session")
def small_corpus(make_corpus) -> dict[str, Path]:
    """200k characters, 9/10 for training, a 512-token BPE."""
    return make_corpus("corpus", 200_000, 0.9, 512)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory, monkeypatch) -> None:
    """Shards of test corpora go to a per-session temporary cache."""
    monkeypatch.setenv("TYING_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="session")
def tiny_teacher(small_corpus, tmp_path_factory) -> Path:
    """A tied tiny Llama (d = 64 <= V = 512) saved with the small corpus's tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("teacher")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tok = PreTrainedTokenizerFast(
        tokenizer_file=str(small_corpus["tokenizer"] / "tokenizer.json"), eos_token="<|endoftext|>"
    )
    tok.save_pretrained(folder)
    return folder
