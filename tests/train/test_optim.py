"""Optimizer of a run: parameter groups, Z's learning-rate rules, the Stiefel RiemannianAdam,
Zᵀ Z = I under every Z option, and exact resume with several groups and optimizers."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from safetensors.torch import load_file

from tying.config import ConfigError, load_config
from tying.decoder import Decoder, preset_config
from tying.interface.linalg import orthonormal_from_gaussian
from tying.train import checkpoint as ckpt
from tying.train import train
from tying.train.config import TrainConfig
from tying.train.metrics import read_metrics
from tying.train.optim import build_optimizers, param_groups, stiefel_manifold, z_lr_scale

from .conftest import small_run


def _tiny(tie: str, **kw) -> Decoder:
    cfg = preset_config("tiny", vocab_size=300, d_model=64, n_layers=1, tie=tie, **kw)
    return Decoder(cfg, generator=torch.Generator().manual_seed(0))


def _gram_error(z: torch.Tensor) -> float:
    z = z.double()
    return (z.T @ z - torch.eye(z.shape[1], dtype=torch.float64)).abs().max().item()


# ----------------------------------------------------------------------------- groups


def test_pit_groups_hold_z_and_l_undecayed_with_their_lr_scales() -> None:
    model = _tiny("pit", pit_trainable_z=True)
    groups = {g["name"]: g for g in param_groups(model, 0.1, z_lr_scale=0.25, l_lr_scale=8.0)}
    assert list(groups) == ["decay", "no_decay", "pit_z", "pit_l"]
    assert groups["pit_z"]["params"] == [model.interface.z]
    assert groups["pit_l"]["params"] == [model.interface.l_param]
    assert (groups["pit_z"]["lr_scale"], groups["pit_l"]["lr_scale"]) == (0.25, 8.0)
    assert groups["pit_z"]["weight_decay"] == groups["pit_l"]["weight_decay"] == 0.0
    assert groups["decay"]["weight_decay"] == 0.1 and groups["no_decay"]["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in groups["decay"]["params"])
    assert all(p.dim() == 1 for p in groups["no_decay"]["params"])
    # Every trainable parameter is in exactly one group.
    grouped = [id(p) for g in groups.values() for p in g["params"]]
    assert sorted(grouped) == sorted(id(p) for p in model.parameters() if p.requires_grad)


def test_frozen_z_and_tt_have_no_z_group() -> None:
    frozen = {g["name"] for g in param_groups(_tiny("pit"), 0.1)}
    assert frozen == {"decay", "no_decay", "pit_l"}
    tt = param_groups(_tiny("tt"), 0.1)
    assert {g["name"] for g in tt} == {"decay", "no_decay"}
    tt_model = _tiny("tt")
    decayed = {
        id(p) for g in param_groups(tt_model, 0.1) if g["name"] == "decay" for p in g["params"]
    }
    assert id(tt_model.interface.weight) in decayed


def test_set_lr_applies_each_groups_scale() -> None:
    model = _tiny("pit", pit_trainable_z=True)
    opt = build_optimizers(
        model, lr=1.0, weight_decay=0.1, betas=(0.9, 0.95), z_lr_scale=0.5, l_lr_scale=4.0
    )
    opt.set_lr(2e-3)
    lrs = {g["name"]: g["lr"] for g in opt.param_groups}
    assert lrs == pytest.approx({"decay": 2e-3, "no_decay": 2e-3, "pit_z": 1e-3, "pit_l": 8e-3})


@pytest.mark.parametrize(
    "z_optimizer, expected",
    [("adamw", 1 / (0.02 * math.sqrt(50257))), ("riemannian_adam", math.sqrt(256) / 0.02)],
)
def test_entry_size_rule(z_optimizer, expected) -> None:
    assert z_lr_scale("entry_size", 50257, 256, 0.02, z_optimizer) == pytest.approx(expected)
    assert z_lr_scale(0.3, 50257, 256, None, z_optimizer) == 0.3


def test_entry_size_rule_gives_the_relative_step_of_a_standard_matrix() -> None:
    # One AdamW step from zero moments moves every entry by lr (sign of the gradient): the
    # relative step of an N(0, std²) matrix is lr·√(V d)/(std·√(V d)) = lr/std; Z's with
    # lr_z = lr·scale is lr·scale·√(V d)/√d, which the rule makes equal.
    V, d, std, lr = 2000, 16, 0.02, 1e-3
    scale = z_lr_scale("entry_size", V, d, std, "adamw")
    Z = torch.nn.Parameter(orthonormal_from_gaussian(V, d).float())
    before = Z.detach().clone()
    opt = torch.optim.AdamW([Z], lr=lr * scale, weight_decay=0.0)
    Z.grad = torch.randn(V, d)
    opt.step()
    relative = ((Z.detach() - before).norm() / before.norm()).item()
    assert relative == pytest.approx(lr / std, rel=1e-3)


def test_entry_size_rule_needs_init_std_and_a_known_name() -> None:
    with pytest.raises(ConfigError, match="init_std"):
        z_lr_scale("entry_size", 100, 8, None, "adamw")
    with pytest.raises(ConfigError, match="entry_size"):
        z_lr_scale("by_entry", 100, 8, 0.02, "adamw")


@pytest.mark.parametrize(
    "override, message",
    [
        ("pit.z_optimizer=sgd", "pit.z_optimizer must be one of"),
        ("pit.t_optimizer=sgd", "pit.t_optimizer must be one of"),
        ("pit.z_lr_scale=0", "positive number or 'entry_size'"),
        ("pit.z_lr_scale=fast", "pit.z_lr_scale must be"),
        ("pit.t_scale=-1", "positive number or 'auto'"),
        ("pit.t_scale=match", "pit.t_scale must be"),
        ("pit.l_lr_scale=0", "pit.l_lr_scale must be a positive number"),
    ],
)
def test_bad_pit_optimisation_values(override, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(TrainConfig, None, ["tie=pit", override])


def test_pit_keys_that_do_not_apply_are_refused() -> None:
    with pytest.raises(ConfigError, match="scratch-mode PIT only"):
        load_config(TrainConfig, None, ["tie=pit", "model=smollm2", "pit.t_scale=2"])
    with pytest.raises(ConfigError, match="pit.t_scale applies to tie='pit' only"):
        load_config(TrainConfig, None, ["tie=tt", "pit.t_scale=auto"])
    with pytest.raises(ConfigError, match="fsdp"):
        load_config(
            TrainConfig,
            None,
            ["tie=pit", "pit.z_optimizer=riemannian_adam", "distributed=fsdp"],
        )


# ----------------------------------------------------------------------------- Riemannian step


def test_riemannian_adam_minimises_a_quadratic_on_the_stiefel_manifold() -> None:
    # min over XᵀX = I of tr(Xᵀ A X) is the sum of the d smallest eigenvalues of A
    # (Ky Fan); X leaves its start, the cost falls to that value, and X stays orthonormal.
    torch.manual_seed(0)
    n, d = 40, 3
    Q = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64))[0]
    A = (Q * torch.linspace(1.0, 10.0, n, dtype=torch.float64)) @ Q.T
    optimum = torch.linalg.eigvalsh(A)[:d].sum().item()
    X = torch.nn.Parameter(orthonormal_from_gaussian(n, d, torch.Generator().manual_seed(1)))
    model = torch.nn.Module()
    model.x = X
    from tying.train.optim import _riemannian_adam

    opt = _riemannian_adam(
        {"params": [X], "weight_decay": 0.0, "lr_scale": 1.0, "name": "pit_z"}, (0.9, 0.99)
    )
    opt.param_groups[0]["lr"] = 0.05
    costs = []
    for _ in range(300):
        cost = torch.trace(X.T @ A @ X)
        costs.append(cost.item())
        opt.zero_grad()
        cost.backward()
        opt.step()
    final = torch.trace(X.T @ A @ X).item()
    assert costs[1] < costs[0] and costs[10] < costs[0]
    assert final - optimum < 1e-3 * (costs[0] - optimum), (costs[0], final, optimum)
    assert _gram_error(X.detach()) < 1e-10


def test_polar_stiefel_retraction_and_projection() -> None:
    manifold = stiefel_manifold()
    X = orthonormal_from_gaussian(50, 4, torch.Generator().manual_seed(2))
    G = torch.randn(50, 4, dtype=torch.float64)
    U = manifold.proju(X, G)
    skew = X.T @ U
    torch.testing.assert_close(skew, -skew.T)  # tangent: XᵀU is skew-symmetric
    Y = manifold.retr(X, 0.1 * U)
    assert _gram_error(Y) < 1e-12
    svd = torch.linalg.svd(X + 0.1 * U, full_matrices=False)
    torch.testing.assert_close(Y, svd.U @ svd.Vh)  # the polar factor: nearest orthonormal


def _random_pit(V: int, d: int, activation: str = "exp"):
    from tying import PseudoInverseTying

    g = torch.Generator().manual_seed(5)
    pit = PseudoInverseTying.scratch(
        V, d, generator=g, dtype=torch.float64, diag_activation=activation
    )
    with torch.no_grad():
        pit.l_param.diagonal().copy_(0.3 * torch.randn(d, generator=g, dtype=torch.float64))
        pit.l_param.add_(torch.tril(0.2 * torch.randn(d, d, generator=g, dtype=torch.float64), -1))
    return pit


@pytest.mark.parametrize("activation", ["exp", "softplus"])
def test_spd_adam_recovers_the_gradient_with_respect_to_t(activation) -> None:
    # loss(T) = ‖h T Zᵀ‖² depends on l_param only through T = L Lᵀ, so the gradient the
    # optimizer reconstructs from l_param's must equal the direct one, sym(∂loss/∂T).
    from tying.train.optim import CholeskySPDAdam

    pit = _random_pit(40, 5, activation)
    h = torch.randn(7, 5, dtype=torch.float64)
    pit.logits(h).pow(2).sum().backward()
    group = {"params": [pit.l_param], "name": "pit_l", "lr_scale": 1.0, "weight_decay": 0.0}
    opt = CholeskySPDAdam(group, pit, (0.9, 0.95))
    G_T = opt._euclidean_gradient(pit.l_param, pit.l_param.grad)
    T = pit.transform().detach().requires_grad_(True)
    (direct,) = torch.autograd.grad((h @ T @ pit.z.T).pow(2).sum(), T)
    torch.testing.assert_close(G_T, 0.5 * (direct + direct.T))


def test_spd_adam_minimises_a_convex_function_of_t() -> None:
    # f(T) = tr(A T) − log det T over SPD matrices has its minimum at T = A⁻¹.
    from tying.train.optim import CholeskySPDAdam

    pit = _random_pit(30, 4)
    g = torch.Generator().manual_seed(6)
    B = torch.randn(4, 4, generator=g, dtype=torch.float64)
    A = B @ B.T + 0.5 * torch.eye(4, dtype=torch.float64)
    group = {"params": [pit.l_param], "name": "pit_l", "lr_scale": 1.0, "weight_decay": 0.0}
    opt = CholeskySPDAdam(group, pit, (0.9, 0.99))
    opt.param_groups[0]["lr"] = 0.05
    values = []
    for _ in range(400):
        f = torch.trace(A @ pit.transform()) - pit.log_det_t()
        values.append(f.item())
        opt.zero_grad()
        f.backward()
        opt.step()
    optimum = 4 + torch.logdet(A).item()  # f(A⁻¹) = d + log det A
    assert values[5] < values[0]
    assert values[-1] - optimum < 1e-3 * (values[0] - optimum), (values[0], values[-1], optimum)
    torch.testing.assert_close(pit.transform(), torch.linalg.inv(A), atol=1e-2, rtol=1e-2)


def test_spd_adam_step_is_a_relative_step_of_t() -> None:
    # The first step has Adam's direction m/√v = g/‖g‖ (one second moment for the matrix):
    # ‖T^{-1/2} ΔT T^{-1/2}‖_F ≈ lr, whatever the size of the gradient.
    from tying.train.optim import CholeskySPDAdam

    for scale in (1e-3, 1e3):
        pit = _random_pit(30, 6)
        T0 = pit.transform().detach()
        (scale * pit.logits(torch.randn(5, 6, dtype=torch.float64)).sum()).backward()
        group = {"params": [pit.l_param], "name": "pit_l", "lr_scale": 1.0, "weight_decay": 0.0}
        opt = CholeskySPDAdam(group, pit, (0.9, 0.95))
        opt.param_groups[0]["lr"] = 1e-3
        opt.step()
        evals, evecs = torch.linalg.eigh(T0)
        inv_sqrt = (evecs * evals.rsqrt()) @ evecs.T
        rel = (inv_sqrt @ (pit.transform().detach() - T0) @ inv_sqrt).norm().item()
        assert rel == pytest.approx(1e-3, rel=1e-2), (scale, rel)


# ----------------------------------------------------------------------------- tiny runs

Z_OPTIONS = {
    "adamw": {"pit.trainable_z": True},
    "adamw-entry-size": {"pit.trainable_z": True, "pit.z_lr_scale": "entry_size"},
    "riemannian": {
        "pit.trainable_z": True,
        "pit.z_optimizer": "riemannian_adam",
        "pit.z_lr_scale": "entry_size",
    },
    "t-scale-auto": {"pit.trainable_z": True, "pit.t_scale": "auto"},
    "frozen": {"pit.trainable_z": False, "pit.l_lr_scale": 10.0},
    "spd-t": {
        "pit.trainable_z": True,
        "pit.t_optimizer": "riemannian_adam",
        "pit.l_lr_scale": 50.0,
        "pit.t_scale": 4.0,
    },
}


def _final_z(run_dir) -> torch.Tensor:
    return load_file(ckpt.latest_checkpoint(run_dir) / "model.safetensors")["interface.z"]


def _check_z_option(small_corpus, tmp_path, option: str, steps: int) -> None:
    cfg = load_config(
        TrainConfig,
        None,
        small_run(
            small_corpus,
            tmp_path,
            tie="pit",
            max_steps=steps,
            warmup_steps=min(5, steps // 2),
            eval_every=0,
            checkpoint_every=0,
            **Z_OPTIONS[option],
        ),
    )
    result = train(cfg)
    z = _final_z(tmp_path)
    assert _gram_error(z) <= 1e-5, option
    # The run learned, and Z moved unless it is frozen.
    losses = [r["loss"] for r in read_metrics(tmp_path) if "loss" in r]
    assert sum(losses[-3:]) / 3 < losses[0] - (0.5 if steps >= 50 else 0.1), losses
    initial = Decoder(
        preset_config("tiny", vocab_size=z.shape[0], tie="pit"),
        generator=torch.Generator().manual_seed(0),
    ).interface.z
    if option == "frozen":
        assert torch.equal(z, initial)
    else:
        assert (z - initial).abs().max() > 1e-3
    assert result.steps == steps


@pytest.mark.slow
@pytest.mark.parametrize("option", list(Z_OPTIONS))
def test_every_z_option_keeps_z_orthonormal_over_50_steps(small_corpus, tmp_path, option) -> None:
    _check_z_option(small_corpus, tmp_path, option, 50)


@pytest.mark.parametrize("option", list(Z_OPTIONS))
def test_every_z_option_keeps_z_orthonormal_over_8_steps(small_corpus, tmp_path, option) -> None:
    _check_z_option(small_corpus, tmp_path, option, 8)


def test_auto_t_scale_gives_w_out_the_row_norm_of_a_standard_init() -> None:
    """pit.t_scale=auto: T = init_std·√V·I, W_out's rows as long as N(0, init_std²) rows,
    W_out E = I, and the blocks initialised exactly as with T = I (same generator order)."""
    from tying.train.build import build_model

    V = 4096
    auto = build_model(load_config(TrainConfig, None, ["tie=pit", "pit.t_scale=auto"]), V)
    plain = build_model(load_config(TrainConfig, None, ["tie=pit", "pit.t_scale=1"]), V)
    std, d = auto.config.init_std, auto.config.d_model
    c = std * math.sqrt(V)
    torch.testing.assert_close(auto.interface.transform(), c * torch.eye(d), rtol=1e-6, atol=0)
    U, E = auto.interface.unembedding_matrix(), auto.interface.embedding_matrix()
    assert U.norm(dim=1).mean().item() == pytest.approx(std * math.sqrt(d), rel=0.01)
    assert (U.T @ E - torch.eye(d)).abs().max() < 1e-4
    assert torch.equal(auto.interface.z, plain.interface.z)
    blocks = {k: v for k, v in plain.state_dict().items() if not k.startswith("interface.")}
    assert all(torch.equal(v, auto.state_dict()[k]) for k, v in blocks.items())
    # The scratch default is auto: the same model, weight for weight.
    default = build_model(load_config(TrainConfig, None, ["tie=pit"]), V)
    assert all(torch.equal(v, default.state_dict()[k]) for k, v in auto.state_dict().items())


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (["tie=pit"], "auto"),
        (["tie=pit", "pit.t_scale=1"], 1.0),
        (["tie=pit", "pit.t_scale=0.5"], 0.5),
        (["tie=pit", "model=smollm2"], 1.0),
    ],
)
def test_t_scale_default_is_auto_for_scratch_pit_only(overrides, expected) -> None:
    cfg = load_config(TrainConfig, None, overrides)
    assert cfg.pit.resolved_t_scale(teacher=cfg.model is not None) == expected
    assert cfg.interface_keywords().get("t_scale", 1.0) == (1.0 if cfg.model else expected)


# ----------------------------------------------------------------------------- resume


def _run(small_corpus, out_dir, **kw) -> list[str]:
    return small_run(
        small_corpus,
        out_dir,
        tie="pit",
        max_steps=6,
        checkpoint_every=3,
        keep_last=2,
        eval_every=0,
        **{"pit.trainable_z": True, "pit.z_lr_scale": 0.5, "pit.l_lr_scale": 4.0},
        **kw,
    )


@pytest.mark.parametrize(
    "z_optimizer, t_optimizer",
    [("adamw", "adamw"), ("riemannian_adam", "adamw"), ("adamw", "riemannian_adam")],
)
def test_resume_restores_groups_and_repeats_the_run_exactly(
    small_corpus, tmp_path, z_optimizer, t_optimizer
) -> None:
    ref_dir, cut_dir = tmp_path / "ref", tmp_path / "cut"
    train(
        load_config(
            TrainConfig,
            None,
            _run(
                small_corpus,
                ref_dir,
                **{"pit.z_optimizer": z_optimizer, "pit.t_optimizer": t_optimizer},
            ),
        )
    )
    # A copy of the run as it stood at its step-3 checkpoint: later checkpoint removed.
    shutil.copytree(ref_dir, cut_dir)
    shutil.rmtree(cut_dir / "checkpoints" / ckpt.step_dir_name(6))
    (cut_dir / "checkpoints" / "latest").write_text(ckpt.step_dir_name(3) + "\n")
    _, optim_state, _ = ckpt.load_checkpoint(cut_dir / "checkpoints" / ckpt.step_dir_name(3))
    saved = {g["name"]: g["lr_scale"] for g in optim_state["param_groups"]}
    assert saved == {"decay": 1.0, "no_decay": 1.0, "pit_z": 0.5, "pit_l": 4.0}

    train(
        load_config(
            TrainConfig,
            None,
            _run(
                small_corpus,
                cut_dir,
                **{"pit.z_optimizer": z_optimizer, "pit.t_optimizer": t_optimizer},
                resume=True,
            ),
        )
    )
    ref = {r["step"]: r["loss"] for r in read_metrics(ref_dir) if "loss" in r}
    again = {r["step"]: r["loss"] for r in read_metrics(cut_dir) if "loss" in r}
    assert sorted(again) == list(range(1, 7))
    assert all(again[s] == ref[s] for s in range(4, 7)), (ref, again)
    a = load_file(ckpt.latest_checkpoint(ref_dir) / "model.safetensors")
    b = load_file(ckpt.latest_checkpoint(cut_dir) / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_refuses_another_optimizer_or_t_scale_but_not_another_lr_scale(tmp_path) -> None:
    from tying.train.run import check_resume_compatible

    saved = load_config(TrainConfig, None, ["tie=pit", "pit.z_lr_scale=0.5"])
    for change, key in (
        ("pit.z_optimizer=riemannian_adam", "pit.z_optimizer"),
        ("pit.t_optimizer=riemannian_adam", "pit.t_optimizer"),
        # A run saved before the default became auto holds pit_t_scale: 1.0 (now pit.t_scale).
        ("pit.t_scale=1", "pit.t_scale=1.0"),
    ):
        new = load_config(TrainConfig, None, ["tie=pit", "pit.z_lr_scale=0.5", change])
        with pytest.raises(ConfigError, match=key):
            check_resume_compatible(saved, new, tmp_path)
    check_resume_compatible(saved, load_config(TrainConfig, None, ["tie=pit"]), tmp_path)


def test_set_lr_scales_replaces_the_loaded_scales() -> None:
    model = _tiny("pit", pit_trainable_z=True)
    opt = build_optimizers(model, lr=1.0, weight_decay=0.1, betas=(0.9, 0.95), z_lr_scale=0.5)
    assert opt.lr_scales() == {"decay": 1.0, "no_decay": 1.0, "pit_z": 0.5, "pit_l": 1.0}
    opt.set_lr_scales({"pit_z": 2.0})
    opt.set_lr(1e-3)
    lrs = {g["name"]: g["lr"] for g in opt.param_groups}
    assert lrs["pit_z"] == pytest.approx(2e-3) and lrs["decay"] == pytest.approx(1e-3)
