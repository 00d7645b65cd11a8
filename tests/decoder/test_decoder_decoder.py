"""The Decoder against naive reference implementations, and its training behaviour."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from tying.decoder.config import ModelConfig
from tying.decoder.decoder import Decoder
from tying.interface import TransposeTying

V = 300


def small_config(**overrides) -> ModelConfig:
    return ModelConfig(
        **{"vocab_size": V, "d_model": 128, "n_layers": 2, "max_seq_len": 64, **overrides}
    )


# ---------------------------------------------------------------- naive references
def naive_norm(x: Tensor, weight: Tensor, kind: str, eps: float) -> Tensor:
    if kind == "rms":
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight


def naive_rope(x: Tensor, theta: float) -> Tensor:
    """Rotate each pair (x_i, x_{i+D/2}) at position p by the angle p · theta^(-2i/D)."""
    D = x.shape[-1]
    half = D // 2
    pos = torch.arange(x.shape[-2], dtype=torch.float64)
    out = torch.empty_like(x)
    for i in range(half):
        angle = pos * theta ** (-2 * i / D)
        c, s = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        a, b = x[..., i], x[..., i + half]
        out[..., i] = a * c - b * s
        out[..., i + half] = a * s + b * c
    return out


def naive_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Explicit causal softmax attention; k, v with fewer heads are repeated (GQA)."""
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    T = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def naive_block(block, x: Tensor, cfg: ModelConfig) -> Tensor:
    """x + attn(norm(x)) + mlp(norm(x)), written out with plain matrix products."""
    B, T, _ = x.shape
    H, K, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    h = naive_norm(x, block.norm.weight, cfg.norm, cfg.norm_eps)
    at = block.attn
    q = (h @ at.q_proj.weight.T).view(B, T, H, D).transpose(1, 2)
    k = (h @ at.k_proj.weight.T).view(B, T, K, D).transpose(1, 2)
    v = (h @ at.v_proj.weight.T).view(B, T, K, D).transpose(1, 2)
    q, k = naive_rope(q, cfg.rope_theta), naive_rope(k, cfg.rope_theta)
    a = naive_attention(q, k, v).transpose(1, 2).reshape(B, T, H * D)
    attn_out = (a * at.gate) @ at.o_proj.weight.T
    ml = block.mlp
    mlp_out = (
        F.silu(h @ ml.gate_proj.weight.T) * (h @ ml.up_proj.weight.T)
    ) @ ml.down_proj.weight.T
    return x + attn_out + mlp_out


def randomize_unit_params(model: Decoder) -> None:
    """Give norms and gates non-trivial values so the references check them."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and not name.startswith("interface"):
                p.copy_(1 + 0.3 * torch.randn_like(p))


# ---------------------------------------------------------------- structure
@pytest.mark.parametrize(
    "shape",
    [
        {"head_dim": 64},  # 2 heads, 1 kv head
        {"head_dim": 32, "n_kv_heads": 2},  # 4 heads, groups of 2
        {"head_dim": 32, "n_kv_heads": 4},  # plain multi-head
        {"head_dim": 32, "n_kv_heads": 1, "norm": "layer"},  # multi-query, LayerNorm
    ],
)
def test_blocks_equal_naive_parallel_block(shape: dict) -> None:
    cfg = small_config(**shape)
    model = Decoder(cfg).double()
    randomize_unit_params(model)
    ids = torch.randint(0, V, (2, 11))
    with torch.no_grad():
        states = model.residual_states(ids)
        assert len(states) == cfg.n_layers + 1
        torch.testing.assert_close(states[0], model.interface.embed(ids))
        for i, block in enumerate(model.blocks):
            torch.testing.assert_close(states[i + 1], naive_block(block, states[i], cfg))
        final = naive_norm(states[-1], model.final_norm.weight, cfg.norm, cfg.norm_eps)
        torch.testing.assert_close(model.final_hidden(ids), final)
        torch.testing.assert_close(model(ids), final @ model.interface.unembedding_matrix().T)


def test_causality_future_tokens_do_not_change_earlier_logits() -> None:
    model = Decoder(small_config()).eval()
    ids = torch.randint(0, V, (2, 16))
    changed = ids.clone()
    changed[:, 9:] = (changed[:, 9:] + 7) % V
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9])
    assert not torch.allclose(a[:, 9:], b[:, 9:])


def test_loss_equals_cross_entropy_of_logits() -> None:
    model = Decoder(small_config())
    ids = torch.randint(0, V, (3, 10))
    targets = torch.randint(0, V, (3, 10))
    targets[0, :3] = -100
    loss = model(ids, targets)
    ref = F.cross_entropy(model(ids).reshape(-1, V), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(loss, ref)
    with pytest.raises(ValueError, match="targets must have the shape"):
        model(ids, targets[:, :-1])


def test_init_scheme() -> None:
    cfg = small_config(n_layers=8, d_model=256, init_std=0.05)
    model = Decoder(cfg, generator=torch.Generator().manual_seed(1))
    q = torch.cat([b.attn.q_proj.weight.flatten() for b in model.blocks])
    o = torch.cat([b.attn.o_proj.weight.flatten() for b in model.blocks])
    down = torch.cat([b.mlp.down_proj.weight.flatten() for b in model.blocks])
    assert q.std().item() == pytest.approx(0.05, rel=0.02)
    assert o.std().item() == pytest.approx(0.05 / math.sqrt(16), rel=0.02)
    assert down.std().item() == pytest.approx(0.05 / math.sqrt(16), rel=0.02)
    for b in model.blocks:
        assert torch.equal(b.attn.gate, torch.ones_like(b.attn.gate))
        assert torch.equal(b.norm.weight, torch.ones_like(b.norm.weight))
    again = Decoder(cfg, generator=torch.Generator().manual_seed(1))
    for (n, p), (_, p2) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(p, p2), n


def test_sequence_longer_than_max_seq_len_raises() -> None:
    model = Decoder(small_config(max_seq_len=16))
    model(torch.randint(0, V, (1, 16)))
    with pytest.raises(ValueError, match="max_seq_len=16"):
        model(torch.randint(0, V, (1, 17)))


def test_interface_must_match_config() -> None:
    with pytest.raises(ValueError, match="vocab_size=300"):
        Decoder(small_config(), interface=TransposeTying.scratch(V + 1, 128))
    with pytest.raises(ValueError, match="ModelConfig"):
        Decoder({"d_model": 128})  # type: ignore[arg-type]
    iface = TransposeTying.scratch(V, 128)
    assert Decoder(small_config(), interface=iface).interface is iface


def test_out_of_vocabulary_ids_raise() -> None:
    with pytest.raises(IndexError, match="outside the vocabulary"):
        Decoder(small_config())(torch.tensor([[0, V]]))


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_bf16_autocast_is_finite_and_close_to_fp32(tie: str) -> None:
    model = Decoder(small_config(tie=tie))
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        ref = model(ids)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(ids)
            loss = model(ids, ids)
    assert torch.isfinite(low).all() and torch.isfinite(loss)
    err = (low.float() - ref).abs().max() / ref.abs().max()
    assert err < 0.05
    assert loss.item() == pytest.approx(model(ids, ids).item(), rel=0.02)


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_each_tie_learns_a_repeating_sequence(tie: str) -> None:
    torch.manual_seed(0)
    model = Decoder(small_config(tie=tie), generator=torch.Generator().manual_seed(0))
    pattern = torch.randint(0, V, (8,))
    seq = pattern.repeat(5)[None]  # (1, 40)
    inputs, targets = seq[:, :-1], seq[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        loss = model(inputs, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0], losses


def test_pit_with_trainable_z_stays_orthonormal_while_training() -> None:
    model = Decoder(small_config(tie="pit", pit_trainable_z=True))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.interface.attach_retraction(opt)
    ids = torch.randint(0, V, (2, 12))
    for _ in range(3):
        loss = model(ids, ids)
        opt.zero_grad()
        loss.backward()
        assert model.interface.z.grad is not None
        opt.step()
    z = model.interface.z.double()
    torch.testing.assert_close(z.T @ z, torch.eye(128, dtype=torch.float64), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_torch_compile_matches_eager_and_the_trunk_has_no_graph_break() -> None:
    model = Decoder(small_config(tie="tt"))
    ids = torch.randint(0, V, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model)(ids), model(ids), atol=1e-5, rtol=1e-4)
        x = model.interface.embed(ids)
        trunk = torch.compile(lambda e: model.trunk(inputs_embeds=e)[0], fullgraph=True)
        torch.testing.assert_close(trunk(x), model.trunk(ids)[0], atol=1e-5, rtol=1e-4)
