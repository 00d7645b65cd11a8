"""Bad input and damaged runs: one clear line, exit status 2, no lost or poisoned work."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from tying.cli import main
from tying.train import checkpoint as ckpt

from .conftest import small_run


def _train_args(corpus, out, **overrides) -> list[str]:
    settings = {"max_steps": 4, "checkpoint_every": 2, **overrides}
    return ["train", *small_run(corpus, out, **settings)]


@pytest.fixture()
def finished_run(small_corpus, tmp_path):
    """A 4-step TT run with checkpoints at steps 2 and 4."""
    out = tmp_path / "run"
    assert main(_train_args(small_corpus, out)) == 0
    return out


def _one_error_line(capsys, *fragments: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": error: " in line]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err), err
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])
    return errors[0]


@pytest.mark.parametrize(
    ("change", "key", "old", "new"),
    [
        ("norm=layer", "norm", "'rms'", "'layer'"),
        ("preset=mini", "preset", "'tiny'", "'mini'"),
        ("tie=pit", "tie", "'tt'", "'pit'"),
    ],
)
def test_resume_refuses_another_model(
    small_corpus, finished_run, capsys, change, key, old, new
) -> None:
    config_before = (finished_run / "config.yaml").read_text()
    capsys.readouterr()
    args = _train_args(small_corpus, finished_run, max_steps=6, resume=True)
    assert main([*args, change]) == 2
    _one_error_line(capsys, f"{key}={old}", f"{key}={new}")
    assert (finished_run / "config.yaml").read_text() == config_before


def test_failed_start_writes_nothing(small_corpus, tmp_path, capsys) -> None:
    out = tmp_path / "never"
    assert main(_train_args(small_corpus, out, data=tmp_path / "nope.jsonl")) == 2
    _one_error_line(capsys, "nope.jsonl")
    assert not (out / "config.yaml").exists()


def _poison(checkpoint, value: float) -> str:
    path = checkpoint / "model.safetensors"
    state = load_file(str(path))
    name = sorted(state)[0]
    state[name] = state[name].clone().fill_(value)
    save_file(state, str(path))
    return name


def test_nonfinite_checkpoint_is_named_and_skipped_on_resume(
    small_corpus, finished_run, capsys
) -> None:
    last = ckpt.list_checkpoints(finished_run)[-1]
    name = _poison(last, float("nan"))
    assert ckpt.checkpoint_problem(last) is not None
    good, skipped = ckpt.latest_good_checkpoint(finished_run)
    assert good is not None and good.name == "step-0000002" and name in skipped[0]
    capsys.readouterr()
    assert main(["eval", str(last), "--max-tokens", "64"]) == 2
    _one_error_line(capsys, "non-finite", name.removeprefix("model."))
    # resume skips the poisoned step 4 and continues from step 2, saying so
    assert main(_train_args(small_corpus, finished_run, max_steps=6, resume=True)) == 0
    err = capsys.readouterr().err
    assert "skipping a damaged checkpoint" in err and "resuming from step 2" in err
    assert name.removeprefix("model.") in err  # the bad tensor is named
    assert ckpt.checkpoint_problem(ckpt.list_checkpoints(finished_run)[-1]) is None


def test_resume_without_an_intact_checkpoint_is_refused(small_corpus, finished_run, capsys):
    for checkpoint in ckpt.list_checkpoints(finished_run):
        _poison(checkpoint, float("inf"))
    metrics_before = (finished_run / "metrics.jsonl").read_text()
    capsys.readouterr()
    assert main(_train_args(small_corpus, finished_run, max_steps=6, resume=True)) == 2
    _one_error_line(capsys, f"no intact checkpoint in {finished_run}", "another out")
    assert (finished_run / "metrics.jsonl").read_text() == metrics_before


def test_truncated_weights_name_the_file(small_corpus, finished_run, capsys) -> None:
    last = ckpt.list_checkpoints(finished_run)[-1]
    weights = last / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    capsys.readouterr()
    assert main(["eval", str(last)]) == 2
    _one_error_line(capsys, str(weights), "damaged")
    assert main(["probe", str(last), "--out", str(finished_run / "probe")]) == 2
    _one_error_line(capsys, str(weights))
    assert main(_train_args(small_corpus, finished_run, max_steps=6, resume=True)) == 0
    assert "resuming from step 2" in capsys.readouterr().err


def test_eval_json_holds_no_nan(finished_run, monkeypatch, capsys) -> None:
    import tying.evaluation.text_loss as text_loss

    def nan_loss(*args, **kwargs):
        return {"loss": float("nan"), "ppl": float("nan"), "tokens": 5}

    monkeypatch.setattr(text_loss, "evaluate", nan_loss)
    assert main(["eval", str(finished_run), "--max-tokens", "64", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)  # strict JSON: no NaN token
    assert result["loss"] is None and result["ppl"] is None and result["finite"] is False


def test_tokenized_folder_is_a_data_source(small_corpus, tmp_path, capsys) -> None:
    shards = tmp_path / "shards"
    tok = str(small_corpus["tokenizer"])
    assert (
        main(["tokenize", str(small_corpus["train"]), "--out", str(shards), "--tokenizer", tok])
        == 0
    )
    out = tmp_path / "from-shards"
    assert main(_train_args(small_corpus, out, data=shards, max_steps=2)) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--data", str(shards), "--max-tokens", "64", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] > 0
    # shards of another tokenizer are refused with what to do
    assert main(["eval", str(out), "--data", str(shards), "--tokenizer", "gpt2"]) == 2
    _one_error_line(capsys, "tokenize the text again")
    # a non-empty --out is refused unless --overwrite
    assert (
        main(["tokenize", str(small_corpus["train"]), "--out", str(shards), "--tokenizer", tok])
        == 2
    )
    _one_error_line(capsys, "pass --overwrite to replace it")


def test_eval_takes_any_model_spec(tiny_teacher, small_corpus, capsys) -> None:
    args = ["eval", str(tiny_teacher), "--data", str(small_corpus["val"]), "--max-tokens", "64"]
    assert main([*args, "--seq-len", "32", "--precision", "fp32", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # a random tied Llama of V = 512 is close to uniform: loss near ln 512 = 6.24 nats/token
    assert result["finite"] and abs(result["loss"] - torch.log(torch.tensor(512.0)).item()) < 0.5


def test_unknown_verb_and_key_are_one_line(capsys) -> None:
    assert main(["trian"]) == 2
    _one_error_line(capsys, "did you mean 'train'")
    assert main(["train", "max_step=3"]) == 2
    _one_error_line(capsys, "did you mean 'max_steps'")
    assert main(["params", "tiny", "--tie", "weird"]) == 2
    _one_error_line(capsys, "tie must be one of")


def test_saved_config_with_another_interfaces_option_still_loads(finished_run, capsys) -> None:
    """A run saved by an earlier version with `t_init` (a PIT option, flat then) in a TT config
    loads for analysis and export; a new TT config with it is refused."""
    from tying.config import ConfigError
    from tying.interface.options import PitOptions
    from tying.train.config import TrainConfig, saved_train_config
    from tying.train.restore import load_trained

    last = ckpt.list_checkpoints(finished_run)[-1]
    state = json.loads((last / "trainer.json").read_text())
    del state["config"]["pit"]  # as an earlier version wrote it: flat keys, no section
    state["config"]["t_init"] = "output"
    (last / "trainer.json").write_text(json.dumps(state))
    _, _, cfg, _ = load_trained(last)
    assert cfg.tie == "tt" and cfg.pit == PitOptions()
    assert saved_train_config({"tie": "pit", "t_init": "output"}, "x").pit.t_init == "output"
    with pytest.raises(ConfigError, match="pit.t_init applies to tie='pit' only"):
        TrainConfig(tie="tt", pit=PitOptions(t_init="output"))
    capsys.readouterr()
    assert main(["eval", str(last), "--max-tokens", "64"]) == 0
