"""Adapters: structure, embed scale, final-norm gain, unsupported architectures."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tying.hf import families as adapters
from tying.hf import get_adapter, supported_model_types
from tying.hf.families import ADAPTER_REQUIREMENTS


def test_structure_and_final_norm_gain(family: str, tiny) -> None:
    model = tiny.model(family)
    adapter = get_adapter(model)
    d = tiny.HIDDEN
    assert len(adapter.blocks(model)) == tiny.LAYERS
    assert adapter.input_embedding(model) is model.get_input_embeddings()
    norm = adapter.final_norm(model)
    gain = adapter.final_norm_gain(model)
    assert gain.shape == (d,)
    torch.testing.assert_close(adapters.final_norm_gain(model), gain)
    assert adapters.blocks(model) is adapter.blocks(model)
    assert adapters.final_norm(model) is norm and adapters.base_model(model) is adapter.base_model(
        model
    )
    # norm(x) = gain ⊙ normalize(x) (+ bias): compare with a reference normalization.
    x = torch.randn(3, 5, d)
    eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", None) or 1e-5
    if "LayerNorm" in type(norm).__name__:
        ref = F.layer_norm(x, (d,), eps=eps) * gain
        if getattr(norm, "bias", None) is not None:
            ref = ref + norm.bias
    else:
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain
    torch.testing.assert_close(norm(x), ref, rtol=1e-5, atol=1e-5)


def test_gemma_embed_scale_and_gain_offset(tiny) -> None:
    gemma = tiny.model("gemma3")
    adapter = get_adapter(gemma)
    assert adapter.embed_scale(gemma) == pytest.approx(math.sqrt(tiny.HIDDEN))
    torch.testing.assert_close(
        adapter.final_norm_gain(gemma), 1.0 + adapter.final_norm(gemma).weight
    )
    ids = tiny.ids()
    emb = gemma.get_input_embeddings()
    torch.testing.assert_close(emb(ids), emb.weight[ids] * adapter.embed_scale(gemma))
    llama = tiny.model("llama")
    assert get_adapter(llama).embed_scale(llama) == 1.0


def test_unsupported_architecture_error_lists_types_and_requirements() -> None:
    model = nn.Linear(2, 2)
    model.config = SimpleNamespace(model_type="mamba")
    with pytest.raises(ValueError) as info:
        get_adapter(model)
    message = str(info.value)
    assert "'mamba'" in message
    for model_type in supported_model_types():
        assert model_type in message
    assert ADAPTER_REQUIREMENTS in message
    with pytest.raises(ValueError, match="model_type"):
        get_adapter(nn.Linear(2, 2))
