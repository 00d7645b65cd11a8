"""PIT built from a teacher: centred memory with input bias, scale correction, exact W_out E = I."""

import pytest
import torch

from tying import PseudoInverseTying
from tying.conversion.closed_form import (
    T_INITS,
    pit_from_teacher,
    pit_from_teacher_matrices,
    teacher_factors,
)
from tying.interface.linalg import orthonormal_from_gaussian


def anisotropic_teacher(V: int = 300, d: int = 12, seed: int = 0) -> torch.Tensor:
    """A teacher embedding with a spread spectrum (1..50) and a large common mean row."""
    g = torch.Generator().manual_seed(seed)
    Q = orthonormal_from_gaussian(V, d, g)
    B = orthonormal_from_gaussian(d, d, g)
    sigma = torch.logspace(0, 1.7, d, dtype=torch.float64)
    mean_row = 3.0 * torch.randn(d, generator=g, dtype=torch.float64)
    return (Q * sigma) @ B.T + mean_row


def consistency_error(pit: PseudoInverseTying) -> float:
    """max |W_out E − I| / 1, on the rows the model reads (input bias included)."""
    E = pit.embedding_matrix()
    W_out = pit.unembedding_matrix().T
    eye = torch.eye(pit.d_model, dtype=E.dtype)
    return float((W_out @ E - eye).abs().max().detach())


@pytest.mark.parametrize("t_init", T_INITS)
@pytest.mark.parametrize("centre", [False, True])
@pytest.mark.parametrize("input_scale", [None, 1.0, 3.0])
def test_every_option_keeps_w_out_e_identity_float64(t_init, centre, input_scale) -> None:
    E0 = anisotropic_teacher()
    pit = pit_from_teacher(E0, t_init, dtype=torch.float64, centre=centre, input_scale=input_scale)
    assert consistency_error(pit) <= 1e-9
    assert (pit.input_bias is not None) == centre


def test_embedding_matrix_includes_the_input_bias_and_embed_agrees() -> None:
    E0 = anisotropic_teacher()
    pit = pit_from_teacher(E0, "output", dtype=torch.float64, centre=True)
    Z, L = pit.z, pit.cholesky_factor()
    expected = Z @ torch.linalg.inv(L @ L.T) + pit.input_bias
    torch.testing.assert_close(pit.embedding_matrix(), expected)
    ids = torch.tensor([[0, 5, 5, 299]])
    torch.testing.assert_close(pit.embed(ids), expected[ids])


def test_centred_output_keeps_the_head_up_to_a_constant_logit() -> None:
    # The teacher's head is E0^T; the centred PIT head is (E0 − 1μ^T)^T: every logit of a
    # hidden state h moves by the same h·μ, so the softmax is unchanged.
    E0 = anisotropic_teacher()
    pit = pit_from_teacher(E0, "output", dtype=torch.float64, centre=True)
    h = torch.randn(7, 12, dtype=torch.float64)
    shift = pit.logits(h) - h @ E0.T
    torch.testing.assert_close(shift, shift[:, :1].expand_as(shift))
    torch.testing.assert_close(shift[:, 0], -(h @ E0.mean(0)))


def test_centred_input_keeps_the_teacher_rows_with_t_init_input() -> None:
    E0 = anisotropic_teacher()
    pit = pit_from_teacher(E0, "input", dtype=torch.float64, centre=True)
    torch.testing.assert_close(pit.embedding_matrix(), E0)


def test_output_scale_puts_e_at_the_teacher_scale_in_the_bulk() -> None:
    # output: E = c U H^{-1} with c = r s²: its singular values are r s²/σ_i, equal to the
    # teacher's σ_i exactly where σ_i = s (the median), for r = 1.
    E0 = anisotropic_teacher(d=11)  # odd d: the median is one of the σ_i
    f = teacher_factors(E0, "output", input_scale=1.0)
    s = float(f.singular_values.median())
    assert f.input_scale == pytest.approx(s * s)
    assert f.gain_factor == pytest.approx(s * s)  # keeps the head: gain·c, W_out/c
    pit = pit_from_teacher(E0, "output", dtype=torch.float64, input_scale=1.0)
    sv = torch.linalg.svdvals(pit.embedding_matrix().detach())
    assert float(sv.median()) == pytest.approx(s, rel=1e-9)


def test_scale_and_gain_reproduce_an_orthonormal_up_to_scale_teacher_exactly() -> None:
    # E0 = a Q (+ a mean row orthogonal to nothing in particular): H = a I, so with the scale
    # correction every t_init gives E = E0 and W_out·m = E0^T: the teacher exactly.
    V, d, a = 200, 8, 7.5
    g = torch.Generator().manual_seed(3)
    Q = orthonormal_from_gaussian(V, d, g)
    Q = Q - Q.mean(0)
    Q = torch.linalg.svd(Q, full_matrices=False)
    Q = Q.U @ Q.Vh
    mu = torch.randn(d, generator=g, dtype=torch.float64)
    E0 = a * Q + mu
    h = torch.randn(5, d, dtype=torch.float64)
    for t_init in T_INITS:
        f = teacher_factors(E0, t_init, centre=True, input_scale=1.0)
        pit = PseudoInverseTying(f.Z, f.L, input_bias=f.input_bias)
        torch.testing.assert_close(pit.embedding_matrix(), E0)
        logits = pit.logits(h * f.gain_factor)
        shift = logits - h @ E0.T
        torch.testing.assert_close(shift, shift[:, :1].expand_as(shift))  # softmax unchanged


def test_scale_input_multiplies_e_and_divides_w_out() -> None:
    pit = pit_from_teacher(anisotropic_teacher(), "output", dtype=torch.float64, centre=True)
    E, U = pit.embedding_matrix(), pit.unembedding_matrix()
    pit.scale_input_(2.5)
    torch.testing.assert_close(pit.embedding_matrix(), 2.5 * E)
    torch.testing.assert_close(pit.unembedding_matrix(), U / 2.5)
    assert consistency_error(pit) <= 1e-9


def test_input_bias_needs_a_centred_memory() -> None:
    Z = orthonormal_from_gaussian(50, 4)
    with pytest.raises(ValueError, match="centred memory"):
        PseudoInverseTying(Z, torch.eye(4, dtype=torch.float64), input_bias=torch.zeros(4))
    from tying.interface.pit import centred_placeholder

    with pytest.raises(ValueError, match="shape"):
        PseudoInverseTying(centred_placeholder(50, 4), torch.eye(4), input_bias=torch.zeros(5))


def test_retraction_keeps_columns_centred_and_orthonormal() -> None:
    pit = pit_from_teacher(anisotropic_teacher().float(), "output", centre=True, trainable_z=True)
    opt = torch.optim.Adam(pit.parameters(), lr=1e-2)
    pit.attach_retraction(opt)
    for _ in range(20):
        ids = torch.randint(0, 300, (32,))
        loss = pit.loss(pit.embed(ids), torch.randint(0, 300, (32,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    Z = pit.z.detach().double()
    assert float(Z.sum(0).abs().max()) / 300**0.5 <= 1e-6
    assert float((Z.T @ Z - torch.eye(12, dtype=torch.float64)).abs().max()) <= 1e-5
    assert pit.input_bias.grad is not None


def test_num_parameters_counts_the_input_bias() -> None:
    pit = pit_from_teacher(anisotropic_teacher(), centre=True)
    assert pit.num_parameters() == 300 * 12 + 12 * 13 // 2 + 12
    assert "input_bias" in dict(pit.named_parameters())


def test_teacher_factors_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="t_init"):
        teacher_factors(anisotropic_teacher(), "fit")
    with pytest.raises(ValueError, match="input_scale"):
        teacher_factors(anisotropic_teacher(), "output", input_scale=0.0)


@pytest.mark.parametrize("t_init", [None, "fit", "output", "input", "identity"])
@pytest.mark.parametrize("input_scale", ["auto", "none", 2.0])
def test_from_teacher_matrices_settings_and_exact_consistency(t_init, input_scale) -> None:
    E0 = anisotropic_teacher()
    built = pit_from_teacher_matrices(
        E0, E0, bias=None, teacher_tied=True, t_init=t_init, input_scale=input_scale
    )
    s = built.settings
    assert s["t_init"] == (t_init or "fit") and s["centre"] is True
    assert s["closed_form"] == ("output" if s["t_init"] == "fit" else s["t_init"])
    assert s["fit"] == {None: "default", "fit": "requested"}.get(t_init)
    assert s["search_input_scale"] == (input_scale == "auto")
    direct = teacher_factors(
        E0,
        s["closed_form"],
        centre=True,
        input_scale=None if input_scale == "none" else (1.0 if input_scale == "auto" else 2.0),
    )
    torch.testing.assert_close(built.interface.transform(), direct.L @ direct.L.T)
    expected_gain = 1.0 if input_scale == "none" else direct.gain_factor
    assert s["gain_factor"] == pytest.approx(expected_gain, rel=1e-12)
    assert consistency_error(built.interface) <= 1e-9
    E, U = built.interface.analysis_matrices()  # the rows the model reads, bias included
    torch.testing.assert_close(E, built.interface.embedding_matrix())
    assert float((U.T @ E - torch.eye(12, dtype=torch.float64)).abs().max()) <= 1e-9


def test_placeholder_of_a_centred_interface_loads_its_state_exactly() -> None:
    pit = pit_from_teacher(anisotropic_teacher(), "output", centre=True)
    assert pit.options()["centred"] is True
    empty = PseudoInverseTying.placeholder(
        300, 12, dtype=torch.float32, bias=False, **pit.options()
    )
    assert empty.input_bias is not None
    empty.load_state_dict(pit.state_dict(), strict=True)
    ids = torch.arange(300)
    assert torch.equal(empty.embed(ids), pit.embed(ids))
    plain = pit_from_teacher(anisotropic_teacher(), "output")
    assert plain.options()["centred"] is False
    again = PseudoInverseTying.placeholder(
        300, 12, dtype=torch.float32, bias=False, **plain.options()
    )
    assert again.input_bias is None


def test_from_teacher_matrices_rejects_bad_values() -> None:
    E0 = anisotropic_teacher()
    with pytest.raises(ValueError, match="t_init must be"):
        pit_from_teacher_matrices(E0, E0, bias=None, teacher_tied=True, t_init="x")
    with pytest.raises(ValueError, match="input_scale"):
        pit_from_teacher_matrices(E0, E0, bias=None, teacher_tied=True, input_scale="large")
