"""HFCausalLM: the decoder API of tying over converted transformers models (and peft)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tying.hf import HFCausalLM, convert, interface_of


@pytest.mark.parametrize("family", ["gpt2", "llama", "gpt_neox", "olmo", "gemma3"])
def test_residual_states_final_hidden_and_loss(family: str, tiny) -> None:
    model = tiny.model(family)
    convert(model, "pit")
    lm = HFCausalLM(model)
    ids = tiny.ids()
    with torch.no_grad():
        states = lm.residual_states(ids)
        hidden = lm.final_hidden(ids)
        logits = lm(ids)
        hf = model(ids, output_hidden_states=True)
    assert len(states) == tiny.LAYERS + 1
    assert all(s.shape == (*ids.shape, tiny.HIDDEN) for s in states)
    # entries are pre-norm: the final norm of the last one is what the head reads
    torch.testing.assert_close(lm.final_norm(states[-1]), hidden)
    # transformers' hidden_states agree on all but the last entry, which is post-norm there
    for ours, theirs in zip(states[:-1], hf.hidden_states[:-1]):
        torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(hf.hidden_states[-1], hidden)
    if family != "gpt2":  # GPT-2 adds position embeddings before the first block
        torch.testing.assert_close(states[0], interface_of(model).embed(ids) * lm.embed_scale)
    torch.testing.assert_close(logits, hf.logits)
    targets = ids.roll(-1, dims=1)
    targets[:, -1] = -100
    loss = lm(ids, targets)
    ref = F.cross_entropy(hf.logits.reshape(-1, tiny.VOCAB), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-6)
    assert lm.interface is interface_of(model)
    assert lm.final_norm_gain().shape == (tiny.HIDDEN,)
    assert {id(p) for p in lm.parameters()} == {id(p) for p in model.parameters()}


def test_gemma_softcap_loss(tiny) -> None:
    from transformers import AutoModelForCausalLM

    config = tiny.config("gemma3")
    config.final_logit_softcapping = 5.0
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    convert(model, "tt")
    lm = HFCausalLM(model)
    assert lm.logit_softcap == 5.0
    ids = tiny.ids()
    with torch.no_grad():
        ref_logits = model(ids).logits
        assert ref_logits.abs().max() <= 5.0
        torch.testing.assert_close(lm(ids), ref_logits)
        loss = lm(ids, ids)
    torch.testing.assert_close(
        loss, F.cross_entropy(ref_logits.reshape(-1, tiny.VOCAB), ids.reshape(-1))
    )


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_peft_lora_on_converted_llama(tiny) -> None:
    from peft import LoraConfig, get_peft_model

    model = tiny.model("llama")
    convert(model, "pit", trainable_z=True)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    ids = tiny.ids()
    out = peft_model(input_ids=ids, labels=ids)
    out.loss.backward()
    lora = [p for n, p in peft_model.named_parameters() if "lora_" in n]
    assert lora and all(p.grad is not None for p in lora)
    assert any(p.grad.abs().sum() > 0 for p in lora)
    assert interface_of(peft_model) is interface_of(model)
    assert not interface_of(model).l_param.requires_grad  # peft freezes everything else
    lm = HFCausalLM(peft_model)
    with torch.no_grad():
        torch.testing.assert_close(
            lm(ids[:, :-1], ids[:, 1:]), out.loss.detach(), rtol=1e-5, atol=1e-6
        )


def test_requires_converted_model(tiny) -> None:
    with pytest.raises(ValueError, match="convert"):
        HFCausalLM(tiny.model("llama"))
