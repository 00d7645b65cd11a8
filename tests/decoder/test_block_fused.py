"""The parallel block's fused input projection (the CUDA path, called directly here on the CPU)
computes the unfused block's function, with and without a KV cache and a padding mask."""

from __future__ import annotations

import torch
from torch import nn

from tying.decoder import Decoder, preset_config


def _block_inputs(model: Decoder, B: int, T: int):
    x = torch.randn(B, T, model.config.d_model, dtype=torch.float64)
    cos, sin = model.rotary.cos[:T].double(), model.rotary.sin[:T].double()
    return x, cos, sin


def test_fused_branches_equal_the_two_branches_in_float64() -> None:
    model = Decoder(preset_config("tiny", vocab_size=300, tie="tt", n_layers=2)).double()
    block = model.blocks[0]
    x, cos, sin = _block_inputs(model, 2, 7)
    h = block.norm(x)
    expected = block.attn(h, cos, sin) + block.mlp(h)
    got = block._fused_branches(h, cos, sin, None, None, 0)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    mask = Decoder._attention_mask(7, 0, torch.tensor([[0, 0, 1, 1, 1, 1, 1]] * 2), x.device)
    torch.testing.assert_close(
        block._fused_branches(h, cos, sin, mask, None, 0),
        block.attn(h, cos, sin, mask) + block.mlp(h),
        rtol=1e-12,
        atol=1e-12,
    )


def test_wrapped_or_hooked_projections_are_not_fused() -> None:
    model = Decoder(preset_config("tiny", vocab_size=300, tie="tt", n_layers=1))
    block = model.blocks[0]
    assert block._projections_fusable()
    handle = block.attn.q_proj.register_forward_hook(lambda *_: None)
    assert not block._projections_fusable()
    handle.remove()

    class Adapted(nn.Linear):  # e.g. a LoRA layer: a subclass with its own forward
        pass

    block.mlp.up_proj = Adapted(block.mlp.up_proj.in_features, block.mlp.up_proj.out_features)
    assert not block._projections_fusable()


def test_fused_only_on_cuda_and_not_under_compile(monkeypatch) -> None:
    """The fused product is the eager CUDA path; compiled graphs and the CPU keep the five
    projections (a compiled fused backward was one slow kernel, see `_fuses_projections`)."""
    block = Decoder(preset_config("tiny", vocab_size=300, tie="tt", n_layers=1)).blocks[0]
    assert block._fuses_projections(torch.device("cuda"))
    assert not block._fuses_projections(torch.device("cpu"))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not block._fuses_projections(torch.device("cuda"))
