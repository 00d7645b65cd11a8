"""MFU is stored against both peaks: every `mfu` of benchmarks/results/gpu*.json (against the
matmul peak measured in its run) has an `mfu_spec` beside it, the same FLOP rate over the
vendor's dense bf16 peak, and benchmarks/gpu.py computes it that way."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = sorted((ROOT / "benchmarks" / "results").glob("gpu*.json"))


def _gpu_module():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return module


def _mfus(result: dict) -> list[dict]:
    entries = list(result.get("steps", {}).get("variants", {}).values())
    return [e for e in [*entries, result.get("train", {})] if "mfu" in e]


@pytest.mark.parametrize("path", RESULTS, ids=[p.name for p in RESULTS])
def test_every_mfu_has_its_spec_twin(path):
    result = json.loads(path.read_text())
    m = result["machine"]
    assert m["spec_peak_bf16_flops"] == 989e12 and "datasheet" in m["spec_peak_source"]
    scale = m["matmul_peak_bf16_flops"] / m["spec_peak_bf16_flops"]
    assert m["measured_over_spec_peak"] == pytest.approx(scale, rel=1e-12)
    entries = _mfus(result)
    assert entries
    for e in entries:
        assert e["mfu_spec"] == pytest.approx(e["mfu"] * scale, rel=1e-12)
        assert e["mfu_spec"] < e["mfu"]  # the measured peak is below the spec on these GPUs


def test_add_mfu_spec_computes_and_skips_unknown_gpus():
    gpu = _gpu_module()
    result = {
        "machine": {"gpu": "NVIDIA H200", "matmul_peak_bf16_flops": 500e12},
        "steps": {"variants": {"a": {"mfu": 0.5}, "b": {"error": "x"}}, "summary": {}},
        "train": {"mfu": 0.4},
    }
    gpu.add_mfu_spec(result)
    assert result["steps"]["variants"]["a"]["mfu_spec"] == pytest.approx(0.5 * 500 / 989)
    assert "mfu_spec" not in result["steps"]["variants"]["b"]
    assert result["train"]["mfu_spec"] == pytest.approx(0.4 * 500 / 989)
    assert gpu.spec_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu.spec_peak("NVIDIA H100 PCIe") is None and gpu.spec_peak("NVIDIA A100") is None
    other = {"machine": {"gpu": "NVIDIA A100", "matmul_peak_bf16_flops": 1e14}, "train": {"mfu": 1}}
    gpu.add_mfu_spec(other)
    assert "mfu_spec" not in other["train"]
