"""Anchor: on a tied transformers model, tying's TT `--train-interface` update is peft's LoRA
with `modules_to_save=["embed_tokens", "lm_head"], ensure_weight_tying=True` (peft 0.21):
the same losses and the same trained tensors over a few steps."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F


@pytest.mark.slow
def test_tt_train_interface_equals_peft_with_ensure_weight_tying(tiny_base, qa_file, tmp_path):
    import peft
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tying.loader import load_any
    from tying.train.optim import OptimizerSettings
    from tying.update import FinetuneOptions, finetune
    from tying.update.data import ExampleOrder, collate, load_examples, tokenize_examples

    if "ensure_weight_tying" not in peft.LoraConfig.__dataclass_fields__:
        pytest.skip(f"peft {peft.__version__} has no ensure_weight_tying")
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    options = FinetuneOptions(
        str(tiny_base), task=str(qa_file), out=str(tmp_path / "ours"), max_steps=4,
        batch_size=4, max_seq_len=64, lr=3e-3, dropout=0.0, train_interface=True,
        target_modules=targets, seed=0, checkpoint_every=0, progress=False,
        precision="fp32", device="cpu",
    )  # fmt: skip
    finetune(options)
    lines = (tmp_path / "ours" / "metrics.jsonl").read_text().splitlines()
    ours = [json.loads(line)["loss"] for line in lines]
    our_lora = load_file(str(tmp_path / "ours" / "adapter_model.safetensors"))
    our_weight = load_file(str(tmp_path / "ours" / "interface.safetensors"))["weight"]

    tokenizer = load_any(str(tiny_base)).tokenizer
    data = tokenize_examples(
        load_examples(str(qa_file)), tokenizer.encode, options.max_seq_len, tokenizer.eos_id
    )
    model = AutoModelForCausalLM.from_pretrained(tiny_base, dtype=torch.float32)
    assert model.config.tie_word_embeddings
    initial = model.get_input_embeddings().weight.detach().clone()
    torch.manual_seed(options.seed)
    config = peft.LoraConfig(
        r=options.rank, lora_alpha=options.alpha, lora_dropout=0.0, target_modules=targets,
        bias="none", task_type="CAUSAL_LM", modules_to_save=["embed_tokens", "lm_head"],
        ensure_weight_tying=True,
    )  # fmt: skip
    tuned = peft.get_peft_model(model, config)
    params = [p for p in tuned.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=options.lr, betas=(0.9, 0.999), weight_decay=0.0)
    settings = OptimizerSettings.of(options)
    order = ExampleOrder(len(data.examples), options.seed)
    theirs = []
    tuned.train()
    for step in range(1, options.max_steps + 1):
        for group in optimizer.param_groups:
            group["lr"] = settings.lr_at(step, options.max_steps)
        batch = [data.examples[i] for i in order.next_batch(options.batch_size)]
        inputs, labels = collate(batch, pad_id=tokenizer.eos_id)
        logits = tuned(input_ids=inputs).logits
        keep = labels != -100
        loss = F.cross_entropy(logits[keep].float(), labels[keep])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, options.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        theirs.append(loss.item())

    assert ours == pytest.approx(theirs, abs=1e-5)
    embed = tuned.base_model.model.model.embed_tokens.modules_to_save["default"].weight
    head = tuned.base_model.model.lm_head.modules_to_save["default"].weight
    assert embed is head  # peft kept the tie
    torch.testing.assert_close(our_weight, embed.detach(), rtol=0, atol=1e-5)
    assert (our_weight - initial).abs().max() > 1e-3  # the shared matrix did train
    their_lora = peft.get_peft_model_state_dict(tuned)
    lora_keys = {k for k in their_lora if "lora_" in k}
    assert lora_keys == set(our_lora)
    for key in lora_keys:
        torch.testing.assert_close(our_lora[key], their_lora[key], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_a_tied_model_updated_through_tying_exports_tied(tiny_base, qa_file, tmp_path):
    """finetune --train-interface, the adapter applied and merged, `tying.hf.export`: the
    checkpoint is tied (one stored matrix) and holds the trained matrix."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from tying.adapters import apply_adapter, causal_lm_of
    from tying.hf import export
    from tying.loader import load_any
    from tying.update import FinetuneOptions, finetune

    adapter = tmp_path / "adapter"
    finetune(
        FinetuneOptions(
            str(tiny_base), task=str(qa_file), out=str(adapter), max_steps=2, batch_size=4,
            max_seq_len=64, lr=3e-3, train_interface=True, checkpoint_every=0,
            progress=False, precision="fp32", device="cpu",
        )
    )  # fmt: skip
    loaded = load_any(str(tiny_base))
    causal = causal_lm_of(loaded.model, eos_token_id=loaded.tokenizer.eos_id)
    merged = apply_adapter(causal, adapter).merge_and_unload()
    export(merged, tmp_path / "exported")
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "exported")
    assert plain.config.tie_word_embeddings
    embed, head = plain.get_input_embeddings().weight, plain.lm_head.weight
    assert embed.data_ptr() == head.data_ptr()
    trained = load_file(str(adapter / "interface.safetensors"))["weight"]
    torch.testing.assert_close(embed.detach(), trained, rtol=0, atol=0)
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        torch.testing.assert_close(
            plain(ids).logits, merged(input_ids=ids).logits, atol=1e-5, rtol=0
        )
