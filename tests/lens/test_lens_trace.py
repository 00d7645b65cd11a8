"""Transition trace: structure, identities at the first and last entries, table and figure."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tying.hf import HFCausalLM, convert
from tying.lens import format_trace, plot_trace, transition_trace
from tying.loader import wrap_model

from .conftest import LAYERS, SEQ, loaded, sample_chain, tiny_llama


def _decode(i: int) -> str:
    return f"t{i}"


def test_trace_structure_and_identities(trained_decoder) -> None:
    model = trained_decoder.model
    lm = loaded(model, name="markov")
    ids = sample_chain(trained_decoder.chain, 1, 12, seed=3)[0]
    k = 4
    trace = transition_trace(lm, ids, k=k)
    assert trace.position == 11 and trace.token_id == int(ids[-1]) and trace.k == k
    assert [e.index for e in trace.entries] == list(range(LAYERS + 1))
    assert [e.label for e in trace.entries] == ["emb", "1", "2", "3"]
    for e in trace.entries:
        assert len(e.input_ids) == len(e.output_ids) == k
        assert e.input_cosines == sorted(e.input_cosines, reverse=True)
        assert e.output_probs == sorted(e.output_probs, reverse=True)
        assert e.overlap == len(set(e.input_ids) & set(e.output_ids)) / k
        assert e.top1_agree == (e.input_ids[0] == e.output_ids[0])
    # entry 0 is the token's own embedding row: its top input-side anchor, cosine 1
    assert trace.entries[0].input_ids[0] == trace.token_id
    assert trace.entries[0].input_cosines[0] == pytest.approx(1.0, abs=1e-5)
    # the last entry's output side is the model's own prediction
    with torch.no_grad():
        logits = model(ids[None])[0, -1]
    assert trace.predicted_id == int(logits.argmax())
    torch.testing.assert_close(
        torch.tensor(trace.entries[-1].output_probs),
        torch.softmax(logits, -1).topk(k).values,
    )
    # input-side cosines are those of the raw residual state to the rows of E
    with torch.no_grad():
        x = model.residual_states(ids[None])[2][0, -1]
        cos = F.normalize(model.interface.embedding_matrix(), dim=-1) @ F.normalize(x, dim=-1)
    assert trace.entries[2].input_ids == cos.topk(k).indices.tolist()


def test_trace_text_json_and_figure(tmp_path, trained_decoder) -> None:
    lm = loaded(trained_decoder.model, name="markov")
    ids = sample_chain(trained_decoder.chain, 1, SEQ, seed=4)[0]
    trace = transition_trace(lm, ids, k=3, position=5)
    assert trace.position == 5 and trace.token_id == int(ids[5])
    table = format_trace(trace, _decode)
    lines = table.splitlines()
    assert len(lines) == 3 + LAYERS + 1
    assert lines[3].startswith("emb") and lines[-1].startswith(str(LAYERS))
    assert f"'t{trace.predicted_id}'" in lines[0]
    record = trace.to_dict(_decode)
    assert record["predicted_id"] == trace.predicted_id
    assert record["entries"][0]["input_tokens"][0] == f"t{trace.token_id}"
    path = plot_trace(trace, _decode, tmp_path / "trace.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_of_a_converted_hf_model_limits_candidates() -> None:
    hf = tiny_llama(tied=True)
    convert(hf, tie="pit")
    lm = wrap_model(HFCausalLM(hf), name="llama")
    ids = torch.tensor([5, 9, 17, 33])
    trace = transition_trace(lm, ids, k=5, candidates=40)
    assert all(max(e.input_ids + e.output_ids) < 40 for e in trace.entries)
    assert len(trace.entries) == 3
    with torch.no_grad():
        logits = hf(ids[None]).logits[0, -1, :40]
    assert trace.predicted_id == int(logits.argmax())


def test_trace_bad_arguments(trained_decoder) -> None:
    lm = loaded(trained_decoder.model)
    ids = torch.tensor([1, 2, 3])
    with pytest.raises(
        ValueError, match=r"outside the prompt of 3 tokens: choose one in \[-3, 2\]"
    ):
        transition_trace(lm, ids, position=3)
    with pytest.raises(ValueError, match="k must be"):
        transition_trace(lm, ids, k=0)
    with pytest.raises(ValueError, match="non-empty prompt"):
        transition_trace(lm, torch.zeros(0, dtype=torch.long))
