"""The transformers wrapper: save/load, Auto classes, generate (KV cache, left padding), peft LoRA."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModelForCausalLM
from transformers.cache_utils import DynamicCache

import tying.decoder  # noqa: F401  (registers the Auto classes)
from tying.decoder import ModelConfig
from tying.hf.decoder_lm import TyingConfig, TyingForCausalLM

V = 300
TIES = ("untied", "tt", "pit")
INTERFACE_KEYS = {
    "untied": {"weight_in", "weight_out"},
    "tt": {"weight"},
    "pit": {"z", "l_param"},
}


def make_model(tie: str = "tt", **overrides) -> TyingForCausalLM:
    cfg = TyingConfig(vocab_size=V, d_model=128, n_layers=2, max_seq_len=64, tie=tie, **overrides)
    return TyingForCausalLM(cfg).eval()


@pytest.mark.parametrize("tie", TIES)
def test_save_pretrained_from_pretrained_round_trip(tie: str, tmp_path: Path) -> None:
    model = make_model(tie)
    ids = torch.randint(0, V, (2, 10))
    model.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    prefix = "model.interface."
    assert {k[len(prefix) :] for k in keys if k.startswith(prefix)} == INTERFACE_KEYS[tie]
    assert not any(k.startswith("lm_head") for k in keys)
    assert AutoConfig.from_pretrained(tmp_path).model_type == "tying"
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, TyingForCausalLM)
    assert loaded.config.to_model_config() == model.config.to_model_config()
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, atol=0, rtol=0)
    if tie == "pit":
        z = loaded.model.interface.z.double()
        torch.testing.assert_close(z.T @ z, torch.eye(128, dtype=torch.float64), atol=1e-5, rtol=0)


def test_weights_missing_from_a_checkpoint_get_the_decoder_init(tmp_path: Path) -> None:
    model = make_model("pit")
    model.save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    for key in (
        "model.blocks.0.attn.gate",
        "model.blocks.1.attn.o_proj.weight",
        "model.interface.l_param",
    ):
        state.pop(key)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path)
    assert torch.equal(loaded.model.blocks[0].attn.gate, torch.ones(128))
    std = loaded.model.blocks[1].attn.o_proj.weight.std().item()
    assert std == pytest.approx(0.02 / 2, rel=0.1)  # init_std / sqrt(2 · n_layers)
    assert torch.equal(loaded.model.interface.l_param, torch.zeros(128, 128))  # L = I
    assert torch.equal(loaded.model.interface.z, model.model.interface.z)  # loaded, not redrawn
    assert torch.equal(
        loaded.model.rotary.cos, model.model.rotary.cos
    )  # non-persistent tables rebuilt


def test_config_aliases_and_validation() -> None:
    cfg = TyingConfig(vocab_size=V, d_model=256, n_layers=3)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads) == (256, 3, 4)
    assert (cfg.num_key_value_heads, cfg.intermediate_size) == (1, 768)
    assert cfg.tie_word_embeddings is False
    mc = ModelConfig(vocab_size=V, d_model=128, n_layers=2, tie="pit", pit_diag_clamp=(0.5, 2.0))
    assert TyingConfig.from_model_config(mc).to_model_config() == mc
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        TyingConfig(vocab_size=V, d_model=128, tie_word_embeddings=True)
    with pytest.raises(ValueError, match="tie must be one of"):
        TyingConfig(vocab_size=V, d_model=128, tie="shared")


def test_labels_are_shifted_and_the_loss_is_the_interface_loss() -> None:
    model = make_model("pit")
    ids = torch.randint(0, V, (2, 9))
    labels = ids.clone()
    labels[0, 4] = -100
    out = model(input_ids=ids, labels=labels)
    logits = out.logits
    ref = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1)
    )
    torch.testing.assert_close(out.loss, ref)
    assert logits.shape == (2, 9, V)
    items = int((labels[:, 1:] != -100).sum())
    summed = model(input_ids=ids, labels=labels, num_items_in_batch=items).loss
    torch.testing.assert_close(summed, ref)


def test_hidden_states_follow_the_transformers_convention() -> None:
    model = make_model()
    ids = torch.randint(0, V, (1, 7))
    out = model(ids, output_hidden_states=True)
    states = model.model.residual_states(ids)
    assert len(out.hidden_states) == model.config.n_layers + 1
    for a, b in zip(out.hidden_states[:-1], states[:-1]):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(out.hidden_states[-1], model.model.final_norm(states[-1]))


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_kv_cache_gives_the_logits_of_the_full_sequence(name: str) -> None:
    """Either keyword carries the cache (transformers 5.2x's generate passes cache=)."""
    model = make_model("pit")
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        full = model(ids, use_cache=False).logits
        cache = DynamicCache(config=model.config)
        first = model(ids[:, :5], use_cache=True, **{name: cache})
        assert cache.get_seq_length() == 5
        chunk = model(
            ids[:, 5:9], use_cache=True, **{name: first.past_key_values}
        )  # several new tokens
        steps = [
            model(ids[:, t : t + 1], use_cache=True, **{name: cache}).logits for t in range(9, 12)
        ]
    torch.testing.assert_close(first.logits, full[:, :5], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(chunk.logits, full[:, 5:9], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(torch.cat(steps, 1), full[:, 9:], atol=1e-5, rtol=1e-4)


def test_kv_cache_given_under_both_names_is_refused() -> None:
    model = make_model("tt")
    ids = torch.randint(0, V, (2, 3))
    with pytest.raises(ValueError, match="once"):
        model(
            ids,
            cache=DynamicCache(config=model.config),
            past_key_values=DynamicCache(config=model.config),
        )


@pytest.mark.parametrize("tie", TIES)
def test_generate_greedy_equals_manual_argmax_loop(tie: str) -> None:
    model = make_model(tie, init_std=0.2)  # a larger init gives varied greedy tokens
    prompt = torch.randint(0, V, (2, 5))
    out = model.generate(prompt, max_new_tokens=8, do_sample=False)
    seq = prompt
    with torch.no_grad():
        for _ in range(8):
            nxt = model(seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(out, seq)


def test_left_padding_gives_the_unpadded_logits_and_generations() -> None:
    model = make_model("tt", init_std=0.2)
    long, short = torch.randint(0, V, (1, 8)), torch.randint(0, V, (1, 5))
    pad = torch.zeros(1, 3, dtype=torch.long)
    batch = torch.cat([long, torch.cat([pad, short], 1)], 0)
    mask = torch.tensor([[1] * 8, [0] * 3 + [1] * 5])
    with torch.no_grad():
        padded = model(batch, attention_mask=mask, use_cache=False).logits
        torch.testing.assert_close(padded[0], model(long).logits[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(padded[1, 3:], model(short).logits[0], atol=1e-5, rtol=1e-4)
    gen = model.generate(batch, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(gen[0, 8:], model.generate(long, max_new_tokens=6, do_sample=False)[0, 8:])
    assert torch.equal(gen[1, 8:], model.generate(short, max_new_tokens=6, do_sample=False)[0, 5:])
    with pytest.raises(ValueError, match="2D"):
        model(batch, attention_mask=mask[:, None, None, :])


def test_embedding_accessors_expose_the_interface_and_are_never_retied() -> None:
    model = make_model("pit")
    iface = model.model.interface
    assert model.get_input_embeddings() is iface
    ids = torch.randint(0, V, (1, 4))
    torch.testing.assert_close(model.get_input_embeddings()(ids), iface.embed(ids))
    head = model.get_output_embeddings()
    h = torch.randn(3, 128)
    torch.testing.assert_close(head(h), iface.logits(h))
    torch.testing.assert_close(head.weight, iface.unembedding_matrix())
    assert list(head.parameters()) == []
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.tie_weights()
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(NotImplementedError, match="interface"):
        model.resize_token_embeddings(V + 1)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_peft_lora_trains_only_the_adapters() -> None:
    peft = pytest.importorskip("peft")
    model = make_model("pit")
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    pm = peft.get_peft_model(model, lora)
    pm.train()
    ids = torch.randint(0, V, (2, 10))
    before = pm(input_ids=ids, labels=ids).loss
    before.backward()
    with_grad = {n for n, p in pm.named_parameters() if p.grad is not None}
    trainable = {n for n, p in pm.named_parameters() if p.requires_grad}
    assert with_grad and with_grad == trainable
    assert all("lora_A" in n or "lora_B" in n for n in trainable)
    assert len(trainable) == 2 * 2 * model.config.n_layers  # A and B for q and v in each block
    assert torch.isfinite(before)
