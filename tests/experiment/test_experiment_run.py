"""The experiment runner end to end on a minimal grid; resuming a killed grid."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tying.cli import main
from tying.experiment import DONE_FILE, load_experiment, run_experiment, run_grid, run_state
from tying.paths import repo_root
from tying.train.metrics import read_metrics

from .conftest import minimal_overrides

MINIMAL = repo_root() / "configs" / "experiments" / "minimal.yaml"


def test_minimal_grid_report(small_corpus, tmp_path) -> None:
    cfg = load_experiment(MINIMAL, minimal_overrides(small_corpus, tmp_path / "exp"))
    result = run_experiment(cfg, progress=False)
    for path in (result.json_path, result.markdown_path, result.html_path):
        assert path.is_file() and path.stat().st_size > 0
    report = json.loads(result.json_path.read_text())
    assert [r["name"] for r in report["runs"]] == ["scratch-untied-s0", "scratch-tt-s0"]
    for run in report["runs"]:
        rows = read_metrics(run["run_dir"])
        losses = [r["loss"] for r in rows if "lr" in r]
        vals = [r["val_loss"] for r in rows if "val_loss" in r]
        window = report["config"]["analysis"]["loss_window"]
        assert run["final_train_loss"] == pytest.approx(sum(losses[-window:]) / window)
        assert run["last_loss"] == losses[-1]
        assert run["val_loss"] == vals[-1]
        assert run["steps"] == cfg.train_config(cfg.runs()[0]).max_steps
        assert len(run["probe"]["drift"]["steps"]) >= 3
        checkpoints = sorted((Path(run["run_dir"]) / "checkpoints").glob("step-*"))
        assert [(c / "optimizer.pt").is_file() for c in checkpoints][-1]
        assert not any((c / "optimizer.pt").is_file() for c in checkpoints[:-1])
    tt = report["runs"][1]
    by_tie = {r["tie"]: r for r in report["by_interface"]}
    assert by_tie["tt"]["seeds"] == 1
    assert by_tie["tt"]["final_train_loss_mean"] == tt["final_train_loss"]
    assert tt["grad_out_share"] is not None and 0 <= tt["grad_out_share"]["share"][0] <= 1
    assert "alignment" in tt["probe"] and "alignment" not in report["runs"][0]["probe"]
    # a TT model's raw input and output are one matrix: consistency is exact (docs/metrics.md)
    assert tt["probe"]["consistency"]["raw"]["cosine_distance"] == pytest.approx(0, abs=1e-6)
    lens = report["lens"]["records"]
    assert [r["run"] for r in lens] == ["scratch-untied-s0", "scratch-tt-s0"]
    assert all(r["kl"][-1] == pytest.approx(0, abs=1e-5) for r in lens)
    md = result.markdown_path.read_text()
    assert f"{report['runs'][0]['last_loss']:.4g}" in md or "scratch-untied-s0" in md
    html = result.html_path.read_text()
    assert "data:image/png;base64," in html and "figures/" not in html.split("<body>")[1]
    for line in md.splitlines():
        if line.startswith("!["):
            assert (result.markdown_path.parent / line.split("(")[-1].rstrip(")")).is_file()


def test_resume_after_kill(small_corpus, tmp_path) -> None:
    # optimizer states kept: a run killed before its end was never pruned
    overrides = [*minimal_overrides(small_corpus, tmp_path / "exp"), "keep_optimizer_states=true"]
    cfg = load_experiment(MINIMAL, overrides)
    run_grid(cfg, progress=False)
    first, second = (cfg.run_dir(s) for s in cfg.runs())
    max_steps = cfg.train_config(cfg.runs()[1]).max_steps
    # Simulate a kill of the second run after its step-2 checkpoint.
    (second / DONE_FILE).unlink()
    for folder in (second / "checkpoints").glob("step-*"):
        if int(folder.name.split("-")[1]) > 2:
            shutil.rmtree(folder)
    (second / "checkpoints" / "latest").unlink()
    rows = read_metrics(second)
    (second / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows if r["step"] <= 3)
    )
    assert run_state(first, max_steps) == "finished"
    assert run_state(second, max_steps) == "partial"
    before = (first / "metrics.jsonl").stat().st_mtime_ns, (first / DONE_FILE).read_text()
    outcomes = run_grid(cfg, progress=False)
    assert [o.state for o in outcomes] == ["finished", "partial"]
    assert ((first / "metrics.jsonl").stat().st_mtime_ns, (first / DONE_FILE).read_text()) == before
    assert run_state(second, max_steps) == "finished"
    steps = [r["step"] for r in read_metrics(second) if "lr" in r]
    assert steps == list(range(1, max_steps + 1))  # each step once: resumed, not restarted


def test_cells_held_by_another_process_are_left_to_it(small_corpus, tmp_path) -> None:
    """Processes share a grid out: a cell whose run lock another process holds is skipped
    ("held"), the grid goes on, and analysing is refused until that cell has finished."""
    from tying.experiment.runner import require_trained
    from tying.train.lock import RunFolderInUseError, RunFolderLock

    cfg = load_experiment(MINIMAL, minimal_overrides(small_corpus, tmp_path / "exp"))
    first, second = (cfg.run_dir(s) for s in cfg.runs())
    max_steps = cfg.train_config(cfg.runs()[0]).max_steps
    other = RunFolderLock(first).acquire()  # another process trains the first cell
    try:
        outcomes = run_grid(cfg, progress=False)
    finally:
        other.release()
    assert [o.state for o in outcomes] == ["held", "new"]
    assert run_state(first, max_steps) == "new" and run_state(second, max_steps) == "finished"
    with pytest.raises(RunFolderInUseError, match="scratch-untied-s0"):
        require_trained(outcomes)
    outcomes = run_grid(cfg, progress=False)
    assert [o.state for o in outcomes] == ["new", "finished"]
    require_trained(outcomes)


def test_changed_settings_are_refused(small_corpus, tmp_path) -> None:
    from tying.config import ConfigError

    overrides = minimal_overrides(small_corpus, tmp_path / "exp")
    cfg = load_experiment(MINIMAL, [*overrides, "ties=[tt]"])
    run_grid(cfg, progress=False)
    changed = load_experiment(MINIMAL, [*overrides, "ties=[tt]", "train.lr=1e-2"])
    with pytest.raises(ConfigError, match="lr"):
        run_grid(changed, progress=False)


def test_config_errors() -> None:
    from tying.config import ConfigError

    with pytest.raises(ConfigError, match="did you mean"):
        load_experiment(MINIMAL, ["train.max_step=3"])
    with pytest.raises(ConfigError, match="modes"):
        load_experiment(MINIMAL, ["modes=[scratchy]"])
    with pytest.raises(ConfigError, match="per grid cell"):
        load_experiment(MINIMAL, ["train.tie=pit"])
    with pytest.raises(ConfigError, match="unknown key 'foo'"):
        load_experiment(MINIMAL, ["foo.bar=1"])
    cfg = load_experiment(MINIMAL, ["tokens=1000", "train.global_batch_tokens=256"])
    train_cfg = cfg.train_config(cfg.runs()[0])
    assert train_cfg.max_steps == 4 and train_cfg.keep_last >= train_cfg.max_steps // 2 + 1


def test_cli(small_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "exp"
    argv = [str(MINIMAL), *minimal_overrides(small_corpus, out), "ties=[tt]", "--no-progress"]
    assert main(["experiment", *argv, "--train-only"]) == 0
    assert (out / "runs" / "scratch-tt-s0" / DONE_FILE).is_file()
    assert not (out / "report.json").exists()
    assert main(["experiment", str(MINIMAL), "train.lrr=1"]) == 2
    assert (
        "unknown key 'train.lrr' in minimal experiment: scratch-untied-s0; did you mean 'train.lr'"
        in capsys.readouterr().err
    )
