"""`tying finetune` on a GPU: a LoRA run in bf16 on CUDA learns and writes its adapter (marked
`cuda`, skipped without a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tying.update import finetune

from .test_finetune import metrics, options

pytestmark = pytest.mark.cuda


def test_lora_finetune_on_cuda_learns_and_saves_its_adapter(
    cuda, tiny_base: Path, tmp_path
) -> None:
    out = tmp_path / "adapter"
    finetune(options(tiny_base, out, device="cuda", precision="bf16", max_steps=12, lr=3e-3))
    rows = [r for r in metrics(out) if "loss" in r]
    assert len(rows) == 12
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert (out / "adapter_model.safetensors").is_file()
