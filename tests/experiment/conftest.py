"""Helpers of the experiment tests (fixtures small_corpus and tiny_teacher: tests/conftest.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def minimal_overrides(corpus: dict[str, Path], out_dir: Path) -> list[str]:
    """Overrides of configs/experiments/minimal.yaml that train on the small corpus."""
    return [
        f"out={out_dir}",
        f"train.data={corpus['train']}",
        f"train.val_data={corpus['val']}",
        f"train.tokenizer={corpus['tokenizer']}",
        "train.progress=false",
        "train.max_documents=null",
    ]


def benchmark_script(name: str) -> ModuleType:
    """benchmarks/NAME.py imported as a module (the benchmarks folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
