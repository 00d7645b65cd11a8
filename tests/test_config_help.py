"""Help and messages a user can read (issue 38 item 5): types in words, defaults as typed,
required settings marked, YAML errors with file:line:column, key typos by their key path,
contradictory settings named."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from tying.config import ConfigError, load_config, positional
from tying.config_flags import _type_label, add_config_arguments
from tying.options.train import TrainConfig, contradictions


@pytest.mark.parametrize(
    ("annotation", "label"),
    [
        (int, "INT"),
        (float | None, "FLOAT|null"),
        (bool, "true|false"),
        (bool | Literal["auto"], "true|false|auto"),
        (float | Literal["auto"] | None, "FLOAT|auto|null"),
        (Literal["a", "b"], "{a,b}"),
        (Literal["a", "b"] | None, "{a,b}|null"),
        (list[float], "FLOAT"),
        (list[str] | None, "STR|null"),
        (frozenset[str] | str, "STR"),
        (dict[str, int], "MAP"),
    ],
)
def test_type_labels_are_words(annotation: object, label: str) -> None:
    assert _type_label(annotation) == label


@dataclasses.dataclass
class _Options:
    """Options.

    Attributes:
        spec: the model.
        out: output folder.
        ylim: y range.
        skip: blocks left out.
        compile: compile or not.
    """

    spec: str = positional()
    out: str
    ylim: list[float] | None = None
    skip: frozenset[str] | str = dataclasses.field(default_factory=frozenset)
    compile: bool | Literal["auto"] = "auto"


def test_help_marks_required_and_types_elements() -> None:
    parser = argparse.ArgumentParser(prog="tying x", formatter_class=argparse.RawTextHelpFormatter)
    add_config_arguments(parser, _Options)
    text = " ".join(parser.format_help().split())
    assert "--out STR output folder (required)" in text
    assert "--ylim FLOAT [FLOAT ...]" in text
    assert "--skip STR blocks left out (default: none)" in text
    assert "--compile true|false|auto compile or not (default: auto)" in text
    assert "frozenset" not in text and "UNION" not in text and "LIST" not in text


def test_yaml_syntax_errors_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("tie: pit\nmax_steps: [1, 2\nlr: 3\n")
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path)
    assert str(info.value) == f"{path}:3:3: not valid YAML: expected ',' or ']', but got ':'"


def test_a_key_typo_is_named_by_its_key_path(tmp_path: Path) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("tie: pit\npit:\n  t_innit: fit\n")
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, path)
    assert str(info.value) == f"unknown key 'pit.t_innit' in {path}; did you mean 'pit.t_init'?"
    with pytest.raises(ConfigError) as info:
        load_config(TrainConfig, None, ["pit.t_scale=x"])
    assert str(info.value) == "pit.t_scale must be a number, got 'x'"


def test_contradictory_settings_are_named() -> None:
    assert contradictions(TrainConfig(max_steps=200)) == []
    warmup, evaluation = contradictions(
        TrainConfig(max_steps=5, warmup_steps=10, eval_every=100, lr=1e-3)
    )
    assert warmup == (
        "warmup_steps=10 > max_steps=5: the learning rate never reaches lr=0.001 (it ends at "
        "0.0005)"
    )
    assert evaluation == "eval_every=100 > max_steps=5: validation runs only at the end"
    # equal is not longer; 0 is off; a checkpoint interval past the end loses nothing (the
    # final step is always checkpointed), so checkpoint_every=100 is no contradiction
    assert contradictions(TrainConfig(max_steps=5, warmup_steps=5, eval_every=5)) == []
    assert (
        contradictions(TrainConfig(max_steps=5, warmup_steps=0, eval_every=0, checkpoint_every=0))
        == []
    )


def test_the_train_verb_warns_about_contradictions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import types

    import tying.train
    from tying.cli import main

    seen = []
    summary = dict(run_dir=str(tmp_path / "run"), steps=5, tokens=640, final_loss=5.0)
    summary.update(val_loss=None, elapsed_s=1.0)
    monkeypatch.setattr(
        tying.train,
        "train",
        lambda cfg: seen.append(cfg) or types.SimpleNamespace(summary=lambda: summary),
    )
    (tmp_path / "run").mkdir()
    out = str(tmp_path / "run")
    assert main(["train", "max_steps=5", "--out", out, "warmup_steps=10"]) == 0
    assert [(c.max_steps, c.warmup_steps, c.out) for c in seen] == [(5, 10, out)]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "tying train: warning: warmup_steps=10 > max_steps=5: the learning rate never reaches "
        "lr=0.002 (it ends at 0.001)",
        "tying train: warning: eval_every=100 > max_steps=5: validation runs only at the end",
    ]


def test_the_finetune_verb_warns_about_contradictions_with_the_same_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """`tying finetune` has a step schedule too: the same sentences as `tying train`, on its
    own prefix, before anything loads; without max_steps (the length follows the data) there
    is nothing to check."""
    import types

    import tying.update
    from tying.cli import main
    from tying.options.finetune import FinetuneOptions

    assert contradictions(FinetuneOptions("m", max_steps=None, warmup_steps=99)) == []
    out = tmp_path / "adapter"

    def fake(options):
        out.mkdir()
        (out / "finetune.json").write_text("{}")
        return types.SimpleNamespace(out=out, steps=3, final_loss=1.0, seconds_per_step=None)

    monkeypatch.setattr(tying.update, "finetune", fake)
    argv = ["finetune", "m", "--out", str(out), "--max-steps", "3", "--warmup-steps", "10"]
    assert main([*argv, "--lr", "1e-3", "--checkpoint-every", "2"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "tying finetune: warning: warmup_steps=10 > max_steps=3: the learning rate never "
        "reaches lr=0.001 (it ends at 0.0003)"
    ]
    assert contradictions(FinetuneOptions("m", max_steps=3)) == []


def test_one_spelling_for_the_weights_dtype_the_old_flag_kept() -> None:
    """probe's --load-dtype is --dtype, as in convert and evaluate; the old flag still works,
    with a deprecation warning, and is not listed in --help."""
    from tying.config_flags import config_from_args
    from tying.options.convert import ConvertOptions
    from tying.options.evaluate import EvaluateOptions
    from tying.options.probe import ProbeOptions

    for cls in (ProbeOptions, ConvertOptions, EvaluateOptions):
        assert "dtype" in {f.name for f in dataclasses.fields(cls)}, cls
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, ProbeOptions)
    assert "--load-dtype" not in parser.format_help()
    new = config_from_args(ProbeOptions, parser.parse_args(["m", "--dtype", "bfloat16"]))
    assert new.dtype == "bfloat16"
    with pytest.warns(DeprecationWarning, match="'load_dtype' is now called 'dtype'"):
        old = config_from_args(ProbeOptions, parser.parse_args(["m", "--load-dtype", "float16"]))
    assert old.dtype == "float16"
