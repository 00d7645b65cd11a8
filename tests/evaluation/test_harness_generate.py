"""`greedy_generate` gives the tokens of `model.generate(do_sample=False)`: plain and tied
Llamas, the tying decoder for each tie, a peft LoRA; per-row EOS and stop strings."""

from __future__ import annotations

import pytest
import torch

from tying.evaluation.generate import eos_ids_of, greedy_generate
from tying.hf import TyingConfig, TyingForCausalLM

from ..conftest import random_llama, word_tokenizer

V = 300
PAD = 1
PROMPT = 9


def sharpen(model: torch.nn.Module, factor: float = 8.0) -> torch.nn.Module:
    """Scale the matrices of a random model so its greedy tokens vary along a sequence."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(factor)
    return model.eval()


def left_padded_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(3, 9) prompts of ids 3..V-1, rows 1 and 2 left-padded by 4 and 2 PAD tokens."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (3, PROMPT), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    mask[2, :2] = 0
    return ids.masked_fill(mask == 0, PAD), mask


def hf_greedy(model, ids, mask, n, **kw) -> torch.Tensor:
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=n, do_sample=False, pad_token_id=PAD, **kw
    )


def mid_token(reference: torch.Tensor) -> int:
    """A token that row 0 generates at step 3 (and no row generates before): used as EOS so
    that one row stops in the middle while the others go on."""
    new = reference[:, PROMPT:]
    token = int(new[0, 3])
    assert not bool((new[:, :3] == token).any()), "pick another seed: the token appears early"
    return token


def check_against_generate(model) -> None:
    ids, mask = left_padded_batch()
    free = hf_greedy(model, ids, mask, 16, eos_token_id=None)
    assert torch.equal(greedy_generate(model, ids, mask, max_new_tokens=16, pad_token_id=PAD), free)
    eos = mid_token(free)
    ref = hf_greedy(model, ids, mask, 16, eos_token_id=eos)
    ours = greedy_generate(model, ids, mask, max_new_tokens=16, eos_token_id=eos, pad_token_id=PAD)
    assert torch.equal(ours, ref)
    assert int(ours[0, PROMPT + 3]) == eos and bool((ours[0, PROMPT + 4 :] == PAD).all())


@pytest.mark.parametrize("tied", [False, True])
def test_llama_tokens_equal_generate(tied: bool) -> None:
    model = sharpen(random_llama(V, 64, 128, 64, tied=tied, pad_token_id=PAD))
    model.generation_config.eos_token_id = None
    check_against_generate(model)


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_tying_decoder_tokens_equal_generate(tie: str) -> None:
    config = TyingConfig(
        vocab_size=V, d_model=128, n_layers=2, max_seq_len=64, tie=tie, init_std=0.2
    )
    check_against_generate(TyingForCausalLM(config).eval())


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_peft_lora_tokens_equal_generate() -> None:
    peft = pytest.importorskip("peft")
    base = sharpen(random_llama(V, 64, 128, 64, tied=True, pad_token_id=PAD))
    base.generation_config.eos_token_id = None
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(base, lora)
    with torch.no_grad():  # non-zero B: the adapter changes the logits
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    model.eval()
    ids, mask = left_padded_batch()
    with model.disable_adapter():
        plain = hf_greedy(model, ids, mask, 12)
    adapted = hf_greedy(model, ids, mask, 12)
    assert not torch.equal(plain, adapted)
    assert torch.equal(
        greedy_generate(model, ids, mask, max_new_tokens=12, pad_token_id=PAD), adapted
    )


def test_stop_string_ends_its_row_only() -> None:
    tokenizer = word_tokenizer(V)
    model = sharpen(random_llama(V, 64, 128, 64, tied=False, pad_token_id=PAD))
    model.generation_config.eos_token_id = None
    ids, mask = left_padded_batch()
    free = greedy_generate(model, ids, mask, max_new_tokens=16, pad_token_id=PAD)
    stop_token = int(free[0, PROMPT + 3])
    first = [(free[r, PROMPT:] == stop_token).nonzero().flatten().tolist() for r in range(3)]
    stop_word = tokenizer.convert_ids_to_tokens(stop_token)
    out = greedy_generate(
        model,
        ids,
        mask,
        max_new_tokens=16,
        pad_token_id=PAD,
        stop_strings=[stop_word + " "],  # a word then a space: seen once the next word arrives
        tokenizer=tokenizer,
    )
    for row in range(3):
        if first[row]:
            end = PROMPT + first[row][0] + 2  # the stop word, then one more word
            assert torch.equal(out[row, :end], free[row, :end])
            assert bool((out[row, end:] == PAD).all())
        else:
            assert torch.equal(out[row], free[row, : out.shape[1]])


def test_zero_new_tokens_and_bad_input() -> None:
    model = random_llama(V, 64, 128, 64, tied=True, pad_token_id=PAD).eval()
    ids, mask = left_padded_batch()
    assert torch.equal(greedy_generate(model, ids, mask, max_new_tokens=0), ids)
    with pytest.raises(ValueError, match="max_new_tokens"):
        greedy_generate(model, ids, mask, max_new_tokens=-1)
    with pytest.raises(ValueError, match="shape"):
        greedy_generate(model, ids, mask[:, 1:], max_new_tokens=2)
    with pytest.raises(ValueError, match="tokenizer"):
        greedy_generate(model, ids, mask, max_new_tokens=2, stop_strings=["x"])


def test_eos_ids_merge_model_and_tokenizer() -> None:
    model = random_llama(V, 64, 128, 64, tied=True, pad_token_id=PAD)
    model.generation_config.eos_token_id = [7, 2]
    assert eos_ids_of(model, word_tokenizer(V)) == [7, 2]
    model.generation_config.eos_token_id = 9
    assert eos_ids_of(model, word_tokenizer(V)) == [9, 2]
