"""Config system: YAML + overrides, unknown keys with suggestions, type checks."""

import pytest

from tying.config import ConfigError, load_config, parse_overrides, save_config
from tying.train.config import TrainConfig


def test_defaults_train_tiny_tt() -> None:
    cfg = load_config(TrainConfig)
    assert cfg.preset == "tiny" and cfg.tie == "tt" and cfg.data is None


def test_yaml_then_overrides(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("tie: pit\nlr: 0.001\nmax_steps: 10\n")
    cfg = load_config(TrainConfig, path, ["lr=3e-4", "precision=fp32", "resume=true", "model=null"])
    assert cfg.tie == "pit" and cfg.lr == 3e-4 and cfg.max_steps == 10
    assert cfg.precision == "fp32" and cfg.resume is True and cfg.model is None


def test_unknown_key_names_the_nearest() -> None:
    with pytest.raises(ConfigError, match="unknown key 'max_step'.*'max_steps'"):
        load_config(TrainConfig, None, ["max_step=5"])


def test_unknown_key_in_file(tmp_path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="learning_rate"):
        load_config(TrainConfig, path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("max_steps=abc", "integer"),
        ("max_steps=1.5", "integer"),
        ("lr=fast", "number"),
        ("resume=maybe", "true or false"),
        ("tie=shared", "tie must be one of"),
        ("precision=fp16", "precision must be one of"),
        ("max_steps=0", ">= 1"),
    ],
)
def test_bad_values(override, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(TrainConfig, None, [override])


def test_override_syntax() -> None:
    assert parse_overrides(["a=1", "b=x=y", "c="]) == {"a": 1, "b": "x=y", "c": None}
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["novalue"])


def test_missing_file() -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_config(TrainConfig, "/nonexistent/run.yaml")


def test_round_trip(tmp_path) -> None:
    cfg = load_config(TrainConfig, None, ["tie=untied", "seed=3"])
    save_config(cfg, tmp_path / "c.yaml")
    assert load_config(TrainConfig, tmp_path / "c.yaml") == cfg


def test_grad_accumulation_must_divide() -> None:
    cfg = load_config(
        TrainConfig, None, ["seq_len=64", "micro_batch_size=4", "global_batch_tokens=1024"]
    )
    assert cfg.grad_accum_steps(1) == 4 and cfg.grad_accum_steps(2) == 2
    with pytest.raises(ConfigError, match="not a multiple"):
        cfg.grad_accum_steps(3)


def test_max_tokens_auto_is_what_the_run_reads_rounded_up():
    """`max_tokens: auto` tokenizes max_steps × global_batch_tokens + one window (+ the teacher
    calibration) rounded up to a power of two, at least 2^20; null = the whole source; grids of
    `tying experiment` keep the whole source."""
    from tying.experiment.config import ExperimentConfig
    from tying.train.build import MIN_AUTO_TOKENS, data_token_budget

    assert TrainConfig().max_tokens == "auto"
    assert data_token_budget(TrainConfig(max_steps=10, global_batch_tokens=1024)) == 2**20
    assert data_token_budget(TrainConfig(max_steps=200)) == 2**22  # 3,276,800 + 257 -> 2^22
    assert data_token_budget(TrainConfig(max_steps=256, global_batch_tokens=16384)) == 2**23
    teacher = TrainConfig(model="smollm2", tie="pit", max_steps=64, global_batch_tokens=16384)
    assert data_token_budget(teacher) == 2**21  # 1,048,576 + 257 + 65,536 + 1,024
    assert data_token_budget(TrainConfig(max_tokens=None)) is None
    assert data_token_budget(TrainConfig(max_tokens=12345)) == 12345
    assert MIN_AUTO_TOKENS == 2**20
    grid = ExperimentConfig(name="g", out="o", ties=["tt"], seeds=[0], train={"max_steps": 2})
    assert all(grid.train_config(spec).max_tokens is None for spec in grid.runs())
    capped = ExperimentConfig(name="g", out="o", ties=["tt"], seeds=[0], train={"max_tokens": 9})
    assert all(capped.train_config(spec).max_tokens == 9 for spec in capped.runs())


def test_validation_budget_covers_what_validation_reads():
    from tying.train.build import validation_token_budget

    assert validation_token_budget(TrainConfig()) == 2**17  # 65,536 + 257 -> 2^17
    assert validation_token_budget(TrainConfig(eval_tokens=1024, step0_tokens=0)) == 2**16
    assert validation_token_budget(TrainConfig(eval_tokens=2**20)) == 2**21
    assert validation_token_budget(TrainConfig(max_tokens=None)) is None
    assert validation_token_budget(TrainConfig(max_tokens=12345)) == 2**17


def test_a_resumed_run_keeps_its_slice(tmp_path):
    """The resolved budget is written into the config (config.yaml records it); a resumed run
    reads it back whatever its new max_steps; a run of an earlier version (no key) had all."""
    from tying.config import save_config
    from tying.train.build import resolve_token_budget

    first = TrainConfig(max_steps=50, global_batch_tokens=1024, out=str(tmp_path))
    assert resolve_token_budget(first) == 2**20 and first.max_tokens == 2**20
    save_config(first, tmp_path / "config.yaml")
    longer = TrainConfig(max_steps=4096, global_batch_tokens=1024, out=str(tmp_path), resume=True)
    assert resolve_token_budget(longer) == 2**20
    fresh = TrainConfig(max_steps=4096, global_batch_tokens=1024, out=str(tmp_path))
    assert resolve_token_budget(fresh) == 2**23  # not a resume: its own (4,194,304 + 257)
    text = (tmp_path / "config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(
        "\n".join(line for line in text.splitlines() if not line.startswith("max_tokens"))
    )
    older = TrainConfig(max_steps=50, out=str(tmp_path), resume=True)
    assert resolve_token_budget(older) is None  # trained on the whole source
