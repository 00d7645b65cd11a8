"""Least-damage PIT conversion of a teacher: centred memory, scale correction, fit, step-0 KL."""

from __future__ import annotations

import copy

import pytest
import torch

from tying.conversion import T_INITS, FitOptions, capture_teacher, step0_kl
from tying.hf import HFCausalLM, convert, export, from_pretrained, interface_of
from tying.hf.families import get_adapter
from tying.interface.linalg import orthonormal_from_gaussian

from .conftest import HIDDEN, VOCAB, ids, tiny_model

GAINED = ("gpt2", "llama", "qwen2", "qwen3", "gpt_neox", "olmo2", "olmo3", "gemma3")


def windows(n: int, batch: int = 1, length: int = 16, seed: int = 0):
    """`n` random (inputs, targets) windows of shape (batch, length)."""
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(0, VOCAB, (batch, length), generator=g),
            torch.randint(0, VOCAB, (batch, length), generator=g),
        )
        for _ in range(n)
    ]


def consistency(model) -> float:
    """max |W_out E − I| for the rows the model reads (input bias included)."""
    pit = interface_of(model)
    with torch.no_grad():
        E = pit.embedding_matrix().double()
        W_out = pit.unembedding_matrix().double().T
    return float((W_out @ E - torch.eye(E.shape[1], dtype=torch.float64)).abs().max())


def peaky_teacher(seed: int = 0):
    """A tied tiny Llama with an anisotropic embedding, a mean row and confident predictions."""
    model = tiny_model("llama", seed=seed)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        E = model.get_input_embeddings().weight
        E.mul_(torch.logspace(0, 1.3, HIDDEN)).add_(0.5 * torch.randn(HIDDEN, generator=g))
        get_adapter(model).final_norm(model).weight.mul_(3.0)
    return model


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma3", "olmo"])
def test_every_option_keeps_w_out_e_identity_in_float64(family) -> None:
    teacher = tiny_model(family).double()
    scales = ("none",) if family == "olmo" else ("none", 1.0, 2.5)  # OLMo 1: no final gain
    for t_init in T_INITS:
        for centre in (False, True):
            for scale in scales:
                model = copy.deepcopy(teacher)
                convert(model, "pit", t_init=t_init, centre=centre, input_scale=scale)
                assert consistency(model) <= 1e-9, (t_init, centre, scale)


def test_fit_keeps_w_out_e_identity_with_trainable_centred_z() -> None:
    model = peaky_teacher().double()
    options = FitOptions(tokens=128, check_tokens=32, params="t,gain,bias,z", autocast=False)
    report = convert(model, "pit", calibration=windows(12), fit_options=options, trainable_z=True)
    assert report.t_init == "fit" and report.fit["steps"] == 4
    assert consistency(model) <= 1e-9
    z = interface_of(model).z.double()
    assert float(z.detach().sum(0).abs().max()) <= 1e-9  # the retraction kept Z^T 1 = 0


@pytest.mark.parametrize("family", GAINED)
def test_scale_correction_keeps_an_orthonormal_up_to_scale_teacher(family) -> None:
    # E0 = a Q + 1 μ^T with Q orthonormal and centred: H = a I, so with the centred memory
    # and input_scale = 1 every t_init gives E = E0 and a head that differs from the
    # teacher's only by a constant per position: the next-token distributions are unchanged.
    teacher = tiny_model(family).double()
    g = torch.Generator().manual_seed(2)
    Q = orthonormal_from_gaussian(VOCAB, HIDDEN, g)
    Q = torch.linalg.svd(Q - Q.mean(0), full_matrices=False)
    mu = 0.02 * torch.randn(HIDDEN, generator=g, dtype=torch.float64)
    with torch.no_grad():
        teacher.get_input_embeddings().weight.copy_(0.7 * Q.U @ Q.Vh + mu)
    x = ids()
    with torch.no_grad():
        expected = torch.log_softmax(teacher(input_ids=x).logits, -1)
    softcapped = get_adapter(teacher).logit_softcap(teacher) is not None
    for t_init in T_INITS:
        model = copy.deepcopy(teacher)
        report = convert(model, "pit", t_init=t_init, centre=True, input_scale=1.0)
        assert report.centre is not softcapped  # a constant shift is not harmless under tanh
        with torch.no_grad():
            got = torch.log_softmax(model(input_ids=x).logits, -1)
        if softcapped:
            continue  # uncentred: E and W_out move by the mean row; checked by consistency
        # Gemma's RMSNorm computes in float32 whatever the model's dtype.
        atol = 1e-6 if family == "gemma3" else 1e-9
        torch.testing.assert_close(got, expected, rtol=0, atol=atol)


def test_output_scale_keeps_the_head_after_the_final_norm() -> None:
    # t_init="output" with the scale correction: T = H / c and gain × c, so the head applied
    # to the final norm's output is the teacher's up to the centring shift, for any state.
    teacher = peaky_teacher().double()
    model = copy.deepcopy(teacher)
    report = convert(model, "pit", t_init="output", input_scale=2.0)
    assert report.gain_factor > 1.0
    states = torch.randn(3, 5, HIDDEN, dtype=torch.float64)
    with torch.no_grad():
        t = teacher.lm_head(get_adapter(teacher).final_norm(teacher)(states))
        s = model.lm_head(get_adapter(model).final_norm(model)(states))
    torch.testing.assert_close(torch.log_softmax(s, -1), torch.log_softmax(t, -1))


def test_fit_lowers_the_kl_on_a_tiny_model() -> None:
    teacher = peaky_teacher()
    calibration, held_out = windows(80, length=32), windows(4, batch=2, length=32, seed=9)
    start = copy.deepcopy(teacher)
    closed = convert(start, "pit", t_init="output", calibration=calibration, measure=held_out)
    model = copy.deepcopy(teacher)
    options = FitOptions(tokens=2048, check_tokens=256, lr=3e-3, gain_lr=2e-2, autocast=False)
    fitted = convert(model, "pit", calibration=calibration, measure=held_out, fit_options=options)
    assert fitted.t_init == "fit" and fitted.fit["kept"]
    assert fitted.fit["kl_check_after"] < fitted.fit["kl_check_before"]
    assert fitted.step0["kl"] < 0.95 * closed.step0["kl"]  # held-out windows, not fitted on
    assert closed.scale_search is not None and fitted.input_scale == closed.input_scale


def test_step0_report_is_zero_for_tt_and_positive_for_raw_pit() -> None:
    teacher = peaky_teacher()
    held_out = windows(2, batch=2)
    tt = convert(copy.deepcopy(teacher), "tt", measure=held_out)
    assert abs(tt.step0["kl"]) < 1e-5 and tt.step0["tokens"] == 64
    assert tt.step0["loss"] == pytest.approx(tt.step0["teacher_loss"], abs=1e-5)
    raw = convert(
        copy.deepcopy(teacher),
        "pit",
        t_init="output",
        centre=False,
        input_scale="none",
        measure=held_out,
    )
    assert raw.step0["kl"] > 0.1


def test_step0_kl_matches_full_logits() -> None:
    teacher = peaky_teacher()
    held_out = windows(2, batch=2)
    captured = capture_teacher(teacher, held_out)
    model = copy.deepcopy(teacher)
    convert(model, "pit", t_init="output")
    kl = step0_kl(model, captured)["kl"]
    with torch.no_grad():
        p = torch.cat([torch.log_softmax(teacher(input_ids=x).logits, -1) for x, _ in held_out])
        q = torch.cat([torch.log_softmax(model(input_ids=x).logits, -1) for x, _ in held_out])
    expected = float((p.exp() * (p - q)).sum(-1).mean())
    assert kl == pytest.approx(expected, rel=1e-5)


def test_input_bias_survives_export_and_native_round_trip(tmp_path) -> None:
    model = peaky_teacher()
    options = FitOptions(tokens=64, check_tokens=0, autocast=False)
    convert(model, "pit", calibration=windows(8), fit_options=options)
    pit = interface_of(model)
    assert pit.input_bias is not None
    x = ids()
    with torch.no_grad():
        ours = model(input_ids=x).logits
    model.save_pretrained(tmp_path / "native")
    back = from_pretrained(tmp_path / "native")
    assert interface_of(back).input_bias is not None
    with torch.no_grad():
        torch.testing.assert_close(back(input_ids=x).logits, ours, rtol=0, atol=0)
    export(model, tmp_path / "plain")
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "plain").eval()
    with torch.no_grad():
        torch.testing.assert_close(
            plain.get_input_embeddings().weight, pit.embedding_matrix(), rtol=0, atol=0
        )
        torch.testing.assert_close(plain(input_ids=x).logits, ours, rtol=1e-4, atol=1e-4)


def test_hf_causal_lm_reads_the_biased_rows() -> None:
    model = peaky_teacher()
    convert(model, "pit")
    pit = interface_of(model)
    x = ids()
    states = HFCausalLM(model).residual_states(x)
    torch.testing.assert_close(states[0], pit.embedding_matrix()[x])


def test_conversion_errors() -> None:
    with pytest.raises(ValueError, match="calibration"):
        convert(tiny_model("llama"), "pit", t_init="fit")
    with pytest.raises(ValueError, match="no gain|has none"):
        convert(tiny_model("olmo"), "pit", t_init="output", input_scale=2.0)
    with pytest.raises(ValueError, match="input_scale"):
        convert(tiny_model("llama"), "pit", input_scale="large")
    with pytest.raises(ValueError, match="t_init must be"):
        convert(tiny_model("llama"), "pit", t_init="middle")
    with pytest.raises(ValueError, match="centre does not apply to tie='tt'"):
        convert(tiny_model("llama"), "tt", centre=True)
    with pytest.raises(ValueError, match="fit params"):
        FitOptions(params="t,everything")
    report = convert(tiny_model("olmo"), "pit", t_init="output")  # "auto" without a gain
    assert report.input_scale is None and any("no gain" in n for n in report.notes)


def test_least_squares_gain_is_the_minimiser_and_keeps_the_output_head() -> None:
    from tying.conversion import least_squares_gain

    g = torch.Generator().manual_seed(0)
    d, n_states = 6, 400
    A = torch.randn(d, d, generator=g, dtype=torch.float64)
    H = A @ A.T + d * torch.eye(d, dtype=torch.float64)
    B = torch.randn(d, d, generator=g, dtype=torch.float64)
    T = B @ B.T + torch.eye(d, dtype=torch.float64)
    gain = 1 + 0.3 * torch.randn(d, generator=g, dtype=torch.float64)
    n = torch.randn(n_states, d, generator=g, dtype=torch.float64)
    sigma = n.T @ n / n_states

    def f(gp: torch.Tensor) -> torch.Tensor:  # the naive objective over the states
        return ((n * gp) @ T - (n * gain) @ H).pow(2).sum(1).mean()

    best = least_squares_gain(T, H, gain, sigma)
    grad = torch.func.grad(f)(best)
    assert float(grad.abs().max()) < 1e-10  # stationary ...
    for _ in range(5):  # ... and a minimum (the objective is a convex quadratic)
        assert f(best + 0.01 * torch.randn(d, generator=g, dtype=torch.float64)) > f(best)
    torch.testing.assert_close(least_squares_gain(H / 7.0, H, gain, sigma), 7.0 * gain)


def test_soft_capped_heads_are_not_centred() -> None:
    model = tiny_model("gemma3")
    model.config.final_logit_softcapping = 30.0
    report = convert(model, "pit", t_init="output")
    assert report.centre is False and interface_of(model).input_bias is None
    assert any("soft-capped" in note for note in report.notes)
    assert consistency(model) <= 1e-4  # float32 model
