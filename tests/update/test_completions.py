"""`tying.update.completions`: the likelihood of held-out completions (an update's target on a
.jsonl task) against a naive reference that scores each record alone, without padding; and the
old-row drift of `interface_change`."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tying.evaluation.side_effects import interface_change
from tying.update.completions import completion_loglik

from .conftest import write_jsonl


def _naive(folder: Path, path: Path, append_eos: bool) -> list[tuple[float, int]]:
    """Per record: Σ log p(completion token | everything before it), one unpadded sequence at a
    time through the plain transformers model, in float64."""
    import json

    from transformers import AutoModelForCausalLM

    from tying.loader import load_any

    tokenizer = load_any(str(folder)).tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    out = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        prompt = tokenizer.encode(record["prompt"])
        answer = tokenizer.encode(record["completion"]) + ([tokenizer.eos_id] if append_eos else [])
        ids = torch.tensor([prompt + answer])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0], dim=-1)
        total = sum(float(logp[len(prompt) + j - 1, token]) for j, token in enumerate(answer))
        out.append((total, len(answer)))
    return out


@pytest.mark.parametrize("append_eos", [True, False])
def test_completion_loglik_matches_scoring_each_record_alone(
    tiny_base: Path, tmp_path: Path, append_eos: bool
) -> None:
    records = [
        {
            "id": f"r{i}",
            "prompt": "Question: " + "what is " * (i % 4) + f"{i}?\nAnswer:",
            "completion": f" {i} and {i * 7}" + " ok" * (i % 3),
        }
        for i in range(7)
    ]  # prompts and completions of different lengths: the batches are padded
    path = write_jsonl(tmp_path / "held-out.jsonl", records)
    got = completion_loglik(tiny_base, path, append_eos=append_eos, batch_size=3, device="cpu")
    want = _naive(tiny_base, path, append_eos)
    assert [i["id"] for i in got["items"]] == [r["id"] for r in records]
    assert [i["ref_tokens"] for i in got["items"]] == [n for _, n in want]
    for item, (total, _) in zip(got["items"], want, strict=True):
        assert item["ref_loglik"] == pytest.approx(total, rel=1e-5, abs=1e-4)
    tokens = sum(n for _, n in want)
    assert got["ref_tokens"] == tokens and got["n"] == len(records)
    assert got["ref_loglik_per_token"] == pytest.approx(sum(t for t, _ in want) / tokens, rel=1e-5)
    assert len(got["sha256"]) == 64


def test_interface_change_separates_the_old_rows() -> None:
    """Only the 2 added rows move: the whole matrices change, the old rows do not."""
    E = torch.randn(10, 4, dtype=torch.float64)
    moved = E.clone()
    moved[8:] += 1.0

    def loaded(matrix: torch.Tensor) -> SimpleNamespace:
        return SimpleNamespace(
            interface=SimpleNamespace(analysis_matrices=lambda: (matrix, matrix))
        )

    change = interface_change(loaded(E), loaded(moved), old_rows=8)
    assert change["E_old_rel_change"] == 0.0 and change["U_old_rel_change"] == 0.0
    expected = float(torch.linalg.norm(moved - E) / torch.linalg.norm(E))
    assert change["E_rel_change"] == pytest.approx(expected) and change["E_rel_change"] > 0
    whole = interface_change(loaded(E), loaded(moved))
    assert whole["E_old_rel_change"] == pytest.approx(expected)
