"""Answers within a second (issue 38 item 4): every `tying VERB --help` and every configuration
error is answered before torch or transformers is imported.

Exact part: after parsing and validating a verb's options, torch is not in `sys.modules`, and
the schema layer (`tying.options`) imports neither torch nor transformers. Timed part: each
answer's CPU time (user + system, of the child process: what a shared, loaded machine cannot
stretch) within the issue's bounds: `--help` 0.5 s, a configuration error 1 s, `tying info`
3 s (it imports torch, whose wall time on a loaded 2-core machine is anything); for `--help`
and errors the wall time too, within a loose bound (the machine may be shared).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import typing
from pathlib import Path

import pytest

from tying.cli import VERBS

SRC = Path(__file__).resolve().parents[1] / "src"

#: CPU seconds (user + system of the child) allowed per answer (issue 38 item 4).
HELP_CPU_S = 0.5
ERROR_CPU_S = 1.0
INFO_CPU_S = 3.0
#: `tying info` over `import torch`, CPU seconds measured side by side (1.05 on this
#: project's 2-core CPU, 2026-11-27).
INFO_OVER_TORCH = 1.5
#: Wall seconds allowed on a loaded machine (a real bound: importing torch and transformers
#: took 10-20 s wall on the same machine).
WALL_S = 8.0


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("TYING_DEBUG", None)
    return env


def _timed(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """(result, CPU seconds, wall seconds) of `python -m tying ARGS`."""
    return _timed_command([sys.executable, "-m", "tying", *args], cwd)


def _timed_command(
    command: list[str], cwd: Path
) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """(result, CPU seconds (user + system), wall seconds) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=120,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, cpu, wall


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_help_is_fast(verb: str, tmp_path: Path) -> None:
    result, cpu, wall = _timed([verb, "--help"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"tying {verb}" in result.stdout
    assert cpu <= HELP_CPU_S, f"tying {verb} --help took {cpu:.2f} s of CPU"
    assert wall <= WALL_S, f"tying {verb} --help took {wall:.2f} s"


#: One configuration error of each kind: unknown key, wrong type, unknown choice, missing file.
CONFIG_ERRORS = [
    (["train", "max_stpes=3"], "unknown key 'max_stpes'"),
    (["train", "max_steps=abc"], "max_steps must be an integer"),
    (["train", "tie=xx"], "tie must be one of"),
    (["train", "missing.yaml", "tie=pit"], "missing.yaml does not exist"),
    (["train", "--pit.t-init", "fitt"], "pit.t_init must be one of"),
    (["eval", "run", "--batch-size", "x"], "batch_size must be an integer"),
    (["probe", "run", "--skip", "nope"], "unknown block 'nope'"),
    (["lens", "run", "--kind", "nope"], "kind must be one of"),
    (["evaluate", "run", "--tasks", "nope"], "unknown task 'nope'"),
    (["finetune", "run", "--rank", "1.5"], "rank must be an integer"),
    (["side-effects", "a", "b", "--bootstrap-resamples", "x"], "must be an integer"),
    (["experiment", "missing.yaml"], "missing.yaml does not exist"),
    (["demo", "--budget", "x"], "budget must be an integer"),
    (["plot", "run", "--rolling", "0"], "rolling must be >= 1"),
    (["convert", "smollm2", "--out", "x", "--tie", "nope"], "tie must be one of"),
    (
        ["convert", "smollm2", "--out", "x", "--tie", "tt", "--pit.t-init", "output"],
        "pit.t_init applies to tie='pit' only",
    ),
    (["add-tokens", "run"], "missing required setting(s) tokens (--tokens)"),
    (["add-tokens", "run", "--init", "nope"], "init must be one of"),
    (["add-tokens", "run", "--check-tokens", "x"], "check_tokens must be an integer"),
    (["params", "tiny", "--vocab", "x"], "vocab must be an integer"),
    (["tokenize", "--batch-docs", "x"], "batch_docs must be an integer"),
    (["trace", "run", "--top-k", "x"], "top_k must be an integer"),
]


@pytest.mark.parametrize(("args", "message"), CONFIG_ERRORS, ids=lambda a: " ".join(a))
def test_config_errors_are_fast(args: list[str], message: str, tmp_path: Path) -> None:
    result, cpu, wall = _timed(args, tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tying {args[0]}: error: "), result.stderr
    assert message in lines[0]
    assert cpu <= ERROR_CPU_S, f"{args}: {cpu:.2f} s of CPU"
    assert wall <= WALL_S, f"{args}: {wall:.2f} s"


def test_info_is_fast(tmp_path: Path) -> None:
    """`tying info` imports torch (its facts are torch's) and little else: its CPU time is at
    most INFO_OVER_TORCH times that of `import torch` measured beside it, and INFO_CPU_S on a
    machine without CUDA. (On a lent H100 machine `import torch` alone took 5.7-6.6 s of CPU,
    and `tying info` about twice that while it still asked torch's has_triton, which imports
    torch._dynamo.)"""
    torch_cpu = _timed_command([sys.executable, "-c", "import torch"], tmp_path)[1]
    result, cpu, wall = _timed(["info", "--json"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert '"transformers"' in result.stdout
    assert cpu <= INFO_OVER_TORCH * torch_cpu, (
        f"tying info took {cpu:.2f} s of CPU, import torch {torch_cpu:.2f} s"
    )
    if '"cuda_available": false' in result.stdout:
        assert cpu <= INFO_CPU_S, f"tying info took {cpu:.2f} s of CPU ({wall:.1f} s wall)"


EXPERIMENT = Path(__file__).resolve().parents[1] / "configs" / "experiments" / "cpu.yaml"


def test_parsing_and_checking_import_no_torch(tmp_path: Path) -> None:
    """Every verb's parser and help, and the options of valid and invalid settings, built
    without torch, transformers or numpy in sys.modules (exact)."""
    code = f"""
import sys
from tying.cli import VERBS, build_parser
from tying.config import ConfigError
from tying.config_flags import config_from_args, split_config_items
from tying.options.experiment import ExperimentConfig
from tying.options.train import TrainConfig
for verb in VERBS:
    build_parser(verb).format_help()
ns = build_parser("train").parse_intermixed_args(["tie=pit", "--out", "r", "max_steps=5"])
path, overrides = split_config_items(ns.items)
cfg = config_from_args(TrainConfig, ns, path, overrides)
assert (cfg.tie, cfg.out, cfg.max_steps) == ("pit", "r", 5), cfg
for bad in (["max_stpes=3"], ["tie=xx"], ["pit.t_init=fitt"], ["lr=x"]):
    ns = build_parser("train").parse_intermixed_args(bad)
    try:
        config_from_args(TrainConfig, ns, *split_config_items(ns.items))
    except ConfigError:
        pass
    else:
        raise AssertionError(bad)
ns = build_parser("experiment").parse_intermixed_args([{str(EXPERIMENT)!r}, "seeds=[0]"])
config_from_args(ExperimentConfig, ns, *split_config_items([ns.config, *ns.overrides]))
print(",".join(m for m in ("torch", "transformers", "numpy", "peft") if m in sys.modules))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_schema_layer_imports_no_torch(tmp_path: Path) -> None:
    modules = sorted(p.stem for p in (SRC / "tying" / "options").glob("*.py"))
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('tying.options.' + m if m != '__init__' else 'tying.options')\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'numpy', 'peft', 'lm_eval'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


def test_the_schema_layer_s_names_are_the_library_s() -> None:
    """The torch-free copies of the registry's and the libraries' names equal them."""
    from tying.analysis.alignment import IDENTITY_MODES
    from tying.analysis.spectral import SPECTRAL_DEFINITIONS
    from tying.devices import PRECISIONS
    from tying.evaluation.tasks import TASKS
    from tying.interface import interface_class, ties
    from tying.options.add_tokens import AddTokensOptions
    from tying.options.common import TASK_NAMES, Precision
    from tying.options.interface import INTERFACE_SECTIONS, tie_names
    from tying.options.probe import ProbeOptions
    from tying.probe.compare import PAIR_SETS
    from tying.probe.matrices import MAPS
    from tying.update.tokens import INITS

    assert tie_names() == ties()
    assert {t: interface_class(t).options_class for t in ties()} == INTERFACE_SECTIONS
    assert TASK_NAMES == tuple(TASKS)
    assert typing.get_args(Precision) == PRECISIONS
    hints = typing.get_type_hints(ProbeOptions)
    assert typing.get_args(hints["maps"]) == MAPS
    assert typing.get_args(hints["identity"]) == IDENTITY_MODES
    assert typing.get_args(hints["pairs"]) == tuple(PAIR_SETS)
    assert typing.get_args(hints["spectral_definition"]) == tuple(SPECTRAL_DEFINITIONS)
    assert typing.get_args(typing.get_type_hints(AddTokensOptions)["init"]) == INITS


def test_train_takes_options_and_overrides_in_any_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The README's `tying train tie=tt --out runs/tt precision=fp32 resume=true`: key=value
    pairs after a flag reach the configuration (here the last one is a typo, reported as such,
    not as an unrecognized argument)."""
    from tying.cli import main

    out = str(tmp_path / "run")
    assert main(["train", "tie=tt", "--out", out, "precision=fp32", "max_stpes=1"]) == 2
    assert capsys.readouterr().err == (
        "tying train: error: unknown key 'max_stpes' in config; did you mean 'max_steps'?\n"
    )
    assert main(["train", "--out", out, "tie=pit", "--lr", "x", "seed=1"]) == 2
    assert "lr must be a number, got 'x'" in capsys.readouterr().err
