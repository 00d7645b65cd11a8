"""convert(): forward/generate, exactness of each conversion, HF tying, padded vocabularies."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tying.hf import (
    DEFAULT_T_INIT,
    InterfaceEmbedding,
    InterfaceHead,
    conversion_report,
    convert,
    get_adapter,
    interface_of,
    is_converted,
)
from tying.interface import PseudoInverseTying, TransposeTying, Untied


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_convert_forward_generate(family: str, tie: str, tiny) -> None:
    model = tiny.model(family)
    ids = tiny.ids()
    report = convert(model, tie)
    assert report.tie == tie and report.family == get_adapter(model).family
    assert is_converted(model)
    assert isinstance(model.get_input_embeddings(), InterfaceEmbedding)
    assert isinstance(model.get_output_embeddings(), InterfaceHead)
    assert model.get_input_embeddings().interface is interface_of(model)
    assert model.get_output_embeddings().interface is interface_of(model)
    logits = _logits(model, ids)
    assert logits.shape == (*ids.shape, tiny.VOCAB) and torch.isfinite(logits).all()
    out = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert out.shape == (ids.shape[0], ids.shape[1] + 3)
    assert int(out.max()) < tiny.VOCAB


def test_interface_registered_once(tiny) -> None:
    model = tiny.model("llama")
    n_trunk = sum(
        p.numel()
        for n, p in model.named_parameters()
        if "embed_tokens" not in n and "lm_head" not in n
    )
    convert(model, "untied")
    interface = interface_of(model)
    params = list(model.parameters())
    assert len({id(p) for p in params}) == len(params)
    assert sum(p.numel() for p in params) == n_trunk + 2 * tiny.VOCAB * tiny.HIDDEN
    keys = model.state_dict().keys()
    assert {k for k in keys if "tying_interface" in k} == {
        "tying_interface.weight_in",
        "tying_interface.weight_out",
    }
    assert not any("embed_tokens" in k or "lm_head" in k for k in keys)
    assert interface is model.tying_interface
    embedding, head = model.get_input_embeddings(), model.get_output_embeddings()
    assert (embedding.num_embeddings, embedding.embedding_dim) == (tiny.VOCAB, tiny.HIDDEN)
    assert (head.in_features, head.out_features) == (tiny.HIDDEN, tiny.VOCAB)
    assert embedding.weight is interface.weight_in and head.weight is interface.weight_out
    assert list(embedding.parameters()) == [] and list(head.parameters()) == []


def test_tied_teacher_tt_and_untied_keep_logits(family: str, tiny) -> None:
    ids = tiny.ids()
    ref = _logits(tiny.model(family, tied=True), ids)
    for tie in ("tt", "untied"):
        model = tiny.model(family, tied=True)
        report = convert(model, tie)
        assert report.teacher_tied
        assert tiny.rel(_logits(model, ids), ref) < 1e-6
    assert isinstance(interface_of(model), Untied)


def test_untied_teacher_untied_keeps_logits_tt_uses_source(tiny) -> None:
    ids = tiny.ids()
    teacher = tiny.model("qwen2", tied=False)
    ref = _logits(teacher, ids)
    E0 = teacher.get_input_embeddings().weight.detach().clone()
    U0 = teacher.get_output_embeddings().weight.detach().clone()
    model = tiny.model("qwen2", tied=False)
    convert(model, "untied")
    assert tiny.rel(_logits(model, ids), ref) < 1e-6
    for source, expected in (("input", E0), ("output", U0)):
        model = tiny.model("qwen2", tied=False)
        report = convert(model, "tt", source=source)
        assert report.source == source and not report.teacher_tied and report.notes
        assert isinstance(interface_of(model), TransposeTying)
        torch.testing.assert_close(interface_of(model).embedding_matrix(), expected, rtol=0, atol=0)


def test_pit_output_keeps_head_input_keeps_embedding(family: str, tiny) -> None:
    """W_out·E = I: t_init="output" reproduces the head exactly, "input" the embedding."""
    ids = tiny.ids()
    teacher = tiny.model(family, tied=True)
    hidden = torch.randn(2, 7, tiny.HIDDEN)
    with torch.no_grad():
        head_ref = teacher.get_output_embeddings()(hidden)
        embed_ref = teacher.get_input_embeddings()(ids)
    U0 = teacher.get_output_embeddings().weight.detach()

    model = tiny.model(family, tied=True)
    report = convert(model, "pit", t_init="output")
    assert report.source == "output" and report.t_init == "output"
    pit = interface_of(model)
    assert isinstance(pit, PseudoInverseTying)
    with torch.no_grad():
        assert tiny.rel(pit.unembedding_matrix(), U0) < 1e-5
        assert tiny.rel(model.get_output_embeddings()(hidden), head_ref) < 1e-5

    model = tiny.model(family, tied=True)
    convert(model, "pit", t_init="input")
    with torch.no_grad():
        assert tiny.rel(interface_of(model).embedding_matrix(), U0) < 1e-5
        assert tiny.rel(model.get_input_embeddings()(ids), embed_ref) < 1e-5  # embed_scale kept
        # ... and then the head must move: W_out E = I while E0^T E0 != I.
        assert tiny.rel(model.get_output_embeddings()(hidden), head_ref) > 1e-2


def test_pit_untied_teacher_source_follows_t_init(tiny) -> None:
    teacher = tiny.model("gpt_neox", tied=False)
    E0 = teacher.get_input_embeddings().weight.detach()
    U0 = teacher.get_output_embeddings().weight.detach()
    model = tiny.model("gpt_neox", tied=False)
    assert convert(model, "pit").source == ("output" if DEFAULT_T_INIT == "output" else "input")
    assert tiny.rel(interface_of(model).unembedding_matrix(), U0) < 1e-5
    model = tiny.model("gpt_neox", tied=False)
    assert convert(model, "pit", t_init="input").source == "input"
    assert tiny.rel(interface_of(model).embedding_matrix(), E0) < 1e-5


def test_pit_identity_z_is_polar_factor(tiny) -> None:
    model = tiny.model("llama")
    E0 = model.get_input_embeddings().weight.detach().double()
    convert(model, "pit", t_init="identity", trainable_z=True)
    pit = interface_of(model)
    assert pit.trainable_z
    torch.testing.assert_close(
        pit.transform().double(), torch.eye(tiny.HIDDEN, dtype=torch.float64)
    )
    U, _, Vh = torch.linalg.svd(E0, full_matrices=False)
    torch.testing.assert_close(pit.z.double(), U @ Vh, rtol=0, atol=1e-5)


def test_hf_tying_cannot_undo_conversion(tiny) -> None:
    """transformers 5 ties by parameter name when config.tie_word_embeddings: nothing to tie here."""
    ids = tiny.ids()
    for tie in ("pit", "untied"):
        model = tiny.model("llama", tied=True)
        convert(model, tie)
        ref = _logits(model, ids)
        state = {k: v.clone() for k, v in model.state_dict().items()}
        assert model.config.tie_word_embeddings is False
        model.tie_weights()
        model.post_init()  # re-collects tied keys and re-runs init + tie_weights
        model.config.tie_word_embeddings = True  # even with the flag back on
        model.tie_weights()
        assert model.get_expanded_tied_weights_keys(all_submodels=True) == {}
        assert isinstance(model.get_output_embeddings(), InterfaceHead)
        torch.testing.assert_close(_logits(model, ids), ref, rtol=0, atol=0)
        for k, v in model.state_dict().items():
            torch.testing.assert_close(v, state[k], rtol=0, atol=0)
    with pytest.raises(NotImplementedError, match="resize"):
        model.resize_token_embeddings(600)
    head = model.get_output_embeddings()
    with pytest.raises(KeyError):  # the wrappers have no weight parameter to re-point
        head.weight = nn.Parameter(torch.zeros(tiny.VOCAB, tiny.HIDDEN))


def test_padded_vocabulary_is_reported_and_kept(tiny) -> None:
    model = tiny.model("llama", tied=True)
    with torch.no_grad():
        model.get_input_embeddings().weight[480:] = 0.0  # padded rows, zero as in many checkpoints
    report = convert(model, "pit", tokenizer=tiny.tokenizer(480))
    assert report.vocab_rows == tiny.VOCAB and report.tokenizer_vocab == 480
    assert report.padded_rows == 20
    assert report.zero_rows == 21  # the padded rows and the padding_idx row (pad_token_id=0)
    assert any("padded" in note for note in report.notes)
    assert interface_of(model).vocab_size == tiny.VOCAB
    ids = torch.tensor([[3, 490, 499]])  # padded ids stay valid model ids
    assert torch.isfinite(_logits(model, ids)).all()
    assert conversion_report(model) is report
    assert model.config.tying["report"]["padded_rows"] == 20

    model = tiny.model("llama")
    with pytest.raises(ValueError, match="tokenizer has 600 tokens"):
        convert(model, "tt", tokenizer=tiny.tokenizer(600))
    assert not is_converted(model)


def test_gemma_report_and_softcap(tiny) -> None:
    model = tiny.model("gemma3")
    report = convert(model, "tt")
    assert report.embed_scale == pytest.approx(math.sqrt(tiny.HIDDEN))
    assert report.to_dict()["embed_scale"] == model.config.tying["embed_scale"]


def test_output_bias_is_carried(tiny) -> None:
    model = tiny.model("llama", tied=False)
    head = nn.Linear(tiny.HIDDEN, tiny.VOCAB, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.normal_()
    model.lm_head = head
    ids = tiny.ids()
    ref = _logits(model, ids)
    report = convert(model, "untied")
    assert report.output_bias
    torch.testing.assert_close(interface_of(model).bias, head.bias)
    assert tiny.rel(_logits(model, ids), ref) < 1e-6


def test_bad_arguments(tiny) -> None:
    model = tiny.model("llama")
    with pytest.raises(ValueError, match="tie must be"):
        convert(model, "weird")
    with pytest.raises(ValueError, match="t_init does not apply to tie='tt'"):
        convert(model, "tt", t_init="output")
    with pytest.raises(ValueError, match="source must be"):
        convert(model, "pit", source="both")
    with pytest.raises(ValueError, match="t_init must be"):
        convert(model, "pit", t_init="middle")
    assert not is_converted(model)
    convert(model, "pit")
    with pytest.raises(ValueError, match="already converted"):
        convert(model, "tt")
    with pytest.raises(ValueError, match="convert it first"):
        interface_of(tiny.model("llama"))
