"""Untied and transpose-tied interfaces, shared behaviour, bad input, autocast, save/load."""

import pytest
import torch
from safetensors.torch import load_file, save_file

from tying import PseudoInverseTying, TransposeTying, Untied, build_interface
from tying.conversion import pit_from_teacher
from tying.interface import TIES


def make(tie: str, V: int = 64, d: int = 16):
    iface = build_interface(tie, V, d, generator=torch.Generator().manual_seed(0))
    if tie == "pit":
        with torch.no_grad():
            iface.l_param.diagonal().normal_(0, 0.2)
    return iface


@pytest.mark.parametrize("tie", TIES)
def test_shapes_and_materialized_matrices(tie) -> None:
    iface = make(tie)
    ids = torch.randint(0, 64, (2, 5))
    h = iface.embed(ids)
    assert h.shape == (2, 5, 16)
    assert iface.logits(h).shape == (2, 5, 64)
    assert iface.embedding_matrix().shape == (64, 16)
    assert iface.unembedding_matrix().shape == (64, 16)
    torch.testing.assert_close(
        iface.logits(h), h @ iface.unembedding_matrix().T, rtol=1e-5, atol=1e-5
    )
    torch.testing.assert_close(h, iface.embedding_matrix()[ids], rtol=1e-5, atol=1e-6)
    assert iface.vocab_size == 64 and iface.d_model == 16


def test_parameter_counts_count_shared_storage_once() -> None:
    V, d = 64, 16
    assert make("untied").num_parameters() == 2 * V * d
    assert make("tt").num_parameters() == V * d
    assert make("pit").num_parameters() == V * d + d * (d + 1) // 2


def test_transpose_tying_shares_one_matrix() -> None:
    tt = make("tt")
    assert tt.embedding_matrix() is tt.unembedding_matrix()
    assert len(list(tt.parameters())) == 1


def _split_tt_gradient(scale: float):
    """Gradient of E from the input side only and from the output side only."""
    torch.manual_seed(0)
    E = torch.randn(30, 5, dtype=torch.float64)
    tt = TransposeTying(E, input_grad_scale=scale).double()
    ids = torch.randint(0, 30, (12,))
    targets = torch.randint(0, 30, (12,))
    h = tt.embed(ids)
    out = tt.loss(torch.tanh(h), targets)
    g_total = torch.autograd.grad(out, tt.weight)[0]
    h_det = tt.embed(ids).detach()
    g_out = torch.autograd.grad(tt.loss(torch.tanh(h_det), targets), tt.weight)[0]
    return out.detach(), g_total - g_out, g_out


def test_input_grad_scale_scales_only_the_input_side() -> None:
    loss1, gin1, gout1 = _split_tt_gradient(1.0)
    loss5, gin5, gout5 = _split_tt_gradient(5.0)
    torch.testing.assert_close(loss1, loss5)  # forward unchanged
    torch.testing.assert_close(gout1, gout5)  # output side unchanged
    torch.testing.assert_close(gin5, 5.0 * gin1)  # input side ×5
    assert gin1.abs().max() > 0


@pytest.mark.parametrize("tie", TIES)
def test_bf16_autocast_is_finite_and_close_to_fp32(tie) -> None:
    iface = make(tie, V=500, d=64)
    ids = torch.randint(0, 500, (4, 32))
    targets = torch.randint(0, 500, (4, 32))
    mix = torch.nn.Linear(64, 64)
    ref = iface.loss(mix(iface.embed(ids)), targets)
    ref_grads = torch.autograd.grad(ref, list(iface.parameters()))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        h = mix(iface.embed(ids))
        logits = iface.logits(h)
        loss = iface.loss(h, targets)
    assert torch.isfinite(logits).all() and torch.isfinite(loss)
    assert logits.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref, rtol=2e-2, atol=2e-2)
    grads = torch.autograd.grad(loss, list(iface.parameters()))
    for g, r in zip(grads, ref_grads):
        assert torch.isfinite(g).all()
        cos = torch.nn.functional.cosine_similarity(g.flatten().float(), r.flatten(), dim=0)
        assert cos > 0.99, cos


@pytest.mark.parametrize("tie", TIES)
def test_safetensors_round_trip(tie, tmp_path) -> None:
    iface = make(tie)
    path = tmp_path / "iface.safetensors"
    save_file(iface.state_dict(), str(path))
    fresh = build_interface(tie, 64, 16, generator=torch.Generator().manual_seed(99))
    fresh.load_state_dict(load_file(str(path)))
    h = torch.randn(3, 16)
    ids = torch.randint(0, 64, (7,))
    assert torch.equal(fresh.logits(h), iface.logits(h))
    assert torch.equal(fresh.embed(ids), iface.embed(ids))


def test_pit_state_holds_only_z_and_l() -> None:
    assert set(make("pit").state_dict()) == {"z", "l_param"}


def test_output_bias() -> None:
    b = torch.randn(64)
    iface = TransposeTying(torch.randn(64, 16), bias=b)
    h = torch.randn(3, 16)
    torch.testing.assert_close(iface.logits(h), h @ iface.weight.T + b)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("tie", TIES)
def test_out_of_range_ids_name_the_id_and_V(tie) -> None:
    iface = make(tie)
    with pytest.raises(IndexError, match=r"70 .*\[0, 64\)"):
        iface.embed(torch.tensor([1, 70]))
    with pytest.raises(IndexError, match=r"-1"):
        iface.embed(torch.tensor([-1, 2]))
    with pytest.raises(ValueError, match="integer"):
        iface.embed(torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("tie", TIES)
def test_wrong_hidden_size(tie) -> None:
    iface = make(tie)
    with pytest.raises(ValueError, match="d=16"):
        iface.logits(torch.randn(3, 15))
    with pytest.raises(ValueError, match="d=16"):
        iface.loss(torch.randn(3, 17), torch.tensor([0, 1, 2]))


def test_bad_teacher_matrices() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        bad = torch.randn(50, 4)
        bad[3, 1] = float("nan")
        pit_from_teacher(bad)
    with pytest.raises(ValueError, match="rank-deficient"):
        low = torch.randn(50, 2) @ torch.randn(2, 4)
        pit_from_teacher(low)
    with pytest.raises(ValueError, match="V >= d"):
        pit_from_teacher(torch.randn(3, 8))
    with pytest.raises(ValueError, match="t_init must be one of"):
        pit_from_teacher(torch.randn(50, 4), t_init="teacher")
    with pytest.raises(ValueError, match="V >= d"):
        PseudoInverseTying.scratch(3, 8)
    with pytest.raises(ValueError, match="non-finite"):
        TransposeTying(torch.full((5, 2), float("inf")))


def test_bad_pit_factors() -> None:
    Z = torch.randn(40, 4)  # not orthonormal
    with pytest.raises(ValueError, match="orthonormal"):
        PseudoInverseTying(Z, torch.eye(4))
    Zq = torch.linalg.qr(torch.randn(40, 4)).Q
    with pytest.raises(ValueError, match="lower-triangular"):
        PseudoInverseTying(Zq, torch.eye(4) + torch.triu(torch.ones(4, 4), 1))
    with pytest.raises(ValueError, match="positive diagonal"):
        PseudoInverseTying(Zq, -torch.eye(4))
    with pytest.raises(ValueError, match=r"\(d, d\)"):
        PseudoInverseTying(Zq, torch.eye(3))


def test_mismatched_untied_shapes() -> None:
    with pytest.raises(ValueError, match="E and W"):
        Untied(torch.randn(10, 4), torch.randn(10, 5))


def test_unknown_tie() -> None:
    with pytest.raises(ValueError, match="tie must be one of"):
        build_interface("transpose", 10, 2)


@pytest.mark.parametrize("tie", TIES)
@pytest.mark.parametrize("chunk", [1, 7, 64, 100])
def test_logit_chunks_are_the_logits_by_columns(tie, chunk) -> None:
    iface = make(tie)
    if tie != "tt":  # a bias, to check it is cut with the columns
        iface.bias = torch.nn.Parameter(torch.randn(64))
    h = torch.randn(3, 5, 16)
    blocks = list(iface.logit_chunks(h, chunk))
    assert [v0 for v0, _ in blocks] == list(range(0, 64, chunk))
    assert all(z.shape[:-1] == (3, 5) for _, z in blocks)
    torch.testing.assert_close(torch.cat([z for _, z in blocks], -1), iface.logits(h))
    with pytest.raises(ValueError, match="chunk_size"):
        next(iface.logit_chunks(h, 0))


def test_manifold_tensors() -> None:
    assert make("pit").manifold_tensors == ("z",)
    assert make("tt").manifold_tensors == () == make("untied").manifold_tensors
