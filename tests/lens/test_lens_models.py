"""`tying.loader`: one resolver for runs and Hugging Face models; lens data windows."""

from __future__ import annotations

import warnings

import pytest
import torch

from tying.data.shards import ensure_shards, open_shards
from tying.decoder.decoder import Decoder
from tying.lens.data import eval_window_count, training_steps, window_batches
from tying.loader import is_run_spec, load_any, safe_name, vocabulary_strings

from .conftest import tiny_llama, word_tokenizer


def test_load_any_run_folder_and_checkpoint(tiny_run) -> None:
    assert is_run_spec(tiny_run)
    lm = load_any(tiny_run)
    assert lm.kind == "run" and lm.name == "tiny-tt" and isinstance(lm.model, Decoder)
    assert lm.checkpoint is not None and lm.checkpoint.name.startswith("step-")
    assert lm.tokenizer is not None and lm.tokenizer.vocab_size == 300
    assert lm.n_entries == len(lm.model.blocks) + 1
    step = load_any(lm.checkpoint)
    assert step.kind == "run" and step.name == "tiny-tt-step-4"
    strings = vocabulary_strings(lm.tokenizer)
    assert len(strings) == 300 and strings[lm.tokenizer.eos_id] == "<|endoftext|>"
    assert vocabulary_strings(lm.tokenizer, 302)[-2:] == ["", ""]
    assert all(lm.tokenizer.backend.token_to_id(s) == i for i, s in enumerate(strings))


@pytest.mark.parametrize("tied", [True, False])
def test_load_any_plain_hf_folder(tmp_path, tied) -> None:
    hf = tiny_llama(tied=tied)
    folder = tmp_path / "plain-llama"
    hf.save_pretrained(folder)
    word_tokenizer(96).save_pretrained(folder)
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        before = hf(ids).logits
    lm = load_any(folder)
    assert lm.kind == "hf" and lm.name == "plain-llama" and lm.n_entries == 3
    assert lm.tokenizer is not None and lm.tokenizer.encode("w3 w4") == [3, 4]
    assert lm.tokenizer.eos_id == 2
    with torch.no_grad():
        _, final = lm.states_and_final(ids)
        torch.testing.assert_close(lm.logits_from_hidden(final), before, rtol=1e-5, atol=1e-5)


def test_wrap_model_unwraps_the_hf_wrapper_of_our_decoder() -> None:
    from tying.hf.decoder_lm import TyingConfig, TyingForCausalLM
    from tying.loader import wrap_model

    from .conftest import tiny_decoder

    config = tiny_decoder().config
    hf = TyingForCausalLM(TyingConfig.from_model_config(config)).eval()
    lm = wrap_model(hf)
    assert isinstance(lm.model, Decoder) and lm.n_entries == config.n_layers + 1
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        _, final = lm.states_and_final(ids)
        torch.testing.assert_close(lm.logits_from_hidden(final), hf(ids).logits)


def test_missing_path_and_names(tmp_path) -> None:
    assert not is_run_spec(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError):
        load_any(str(tmp_path / "nothing" / "model.gguf"))
    assert safe_name("HuggingFaceTB/SmolLM2-135M") == "HuggingFaceTB--SmolLM2-135M"
    assert safe_name("a b/c") == "a-b--c"


def test_training_windows_never_overlap_evaluation_windows(tiny_corpus) -> None:
    from tying.data.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_corpus["tokenizer"])
    store = open_shards(ensure_shards(str(tiny_corpus["val"]), None, tok, progress=False))
    L = 16
    n_eval = eval_window_count(store, L, 64)
    assert n_eval == 4
    eval_rows = torch.cat(list(window_batches(store, range(n_eval), L, 3)))
    torch.testing.assert_close(eval_rows.flatten(), torch.from_numpy(store.slice(0, 4 * L)))
    n_total = (store.num_tokens - 1) // L
    steps = list(
        training_steps(
            store, range(n_eval, n_total), L, steps=3, windows_per_step=5, batch_size=2, seed=1
        )
    )
    assert len(steps) == 3 and [sum(b.shape[0] for b in s) for s in steps] == [5, 5, 5]
    train_rows = torch.cat([b for s in steps for b in s])
    starts = {tuple(r.tolist()) for r in train_rows}
    assert len(starts) == 15  # drawn without replacement
    assert not starts & {tuple(r.tolist()) for r in eval_rows}
    with pytest.warns(UserWarning, match="windows repeat"):
        list(
            training_steps(
                store, range(n_eval, n_eval + 4), L, steps=2, windows_per_step=3, batch_size=3
            )
        )
    with pytest.raises(ValueError, match="no training windows"):
        next(training_steps(store, [], L, steps=1, windows_per_step=1, batch_size=1))
    with pytest.raises(ValueError, match="max_tokens"):
        eval_window_count(store, L, L - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert eval_window_count(store, L, None) == n_total
