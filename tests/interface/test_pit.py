"""Pseudo-inverse tying: exact identities, teacher initialisations, retraction, gradients."""

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from tying import PseudoInverseTying, TransposeTying
from tying.conversion import pit_from_teacher
from tying.interface.linalg import orthonormal_from_gaussian


def random_pit(
    V: int, d: int, dtype=torch.float32, spread: float = 0.3, **kw
) -> PseudoInverseTying:
    """A PIT interface with a random, well-conditioned L (not the identity)."""
    g = torch.Generator().manual_seed(1)
    pit = PseudoInverseTying.scratch(V, d, generator=g, dtype=dtype, **kw)
    with torch.no_grad():
        pit.l_param.diagonal().copy_(torch.randn(d, generator=g, dtype=dtype) * spread)
        off = torch.randn(d, d, generator=g, dtype=dtype) * (spread / d**0.5)
        pit.l_param.add_(torch.tril(off, diagonal=-1))
    return pit


def test_pseudo_inverse_identity_float32_d256() -> None:
    pit = random_pit(4096, 256)
    T = pit.transform()
    assert not torch.allclose(T, torch.eye(256), atol=1e-2)  # L really is random
    W_out = pit.unembedding_matrix().T  # (d, V)
    E = pit.embedding_matrix()  # (V, d)
    err = (W_out @ E - torch.eye(256)).abs().max().item()
    assert err <= 1e-4, err


def test_embed_matches_materialized_rows() -> None:
    pit = random_pit(300, 16)
    ids = torch.randint(0, 300, (3, 11))
    torch.testing.assert_close(pit.embed(ids), pit.embedding_matrix()[ids])


def test_logits_equal_h_T_Zt() -> None:
    pit = random_pit(300, 16, dtype=torch.float64)
    h = torch.randn(5, 16, dtype=torch.float64)
    expected = h @ pit.transform() @ pit.z.T
    torch.testing.assert_close(pit.logits(h), expected)
    torch.testing.assert_close(pit.unembedding_matrix(), pit.z @ pit.transform())


def test_identity_T_gives_transpose_tying_logits_on_Z() -> None:
    pit = PseudoInverseTying.scratch(200, 32)
    tt = TransposeTying(pit.z.clone())
    h = torch.randn(7, 32)
    assert torch.equal(pit.transform(), torch.eye(32))
    torch.testing.assert_close(pit.logits(h), tt.logits(h), rtol=0, atol=1e-6)
    ids = torch.randint(0, 200, (9,))
    torch.testing.assert_close(pit.embed(ids), tt.embed(ids), rtol=0, atol=1e-6)


def test_scratch_is_deterministic_and_orthonormal() -> None:
    a = PseudoInverseTying.scratch(500, 24, generator=torch.Generator().manual_seed(3))
    b = PseudoInverseTying.scratch(500, 24, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.z, b.z)
    gram = a.z.double().T @ a.z.double()
    assert (gram - torch.eye(24, dtype=torch.float64)).abs().max() < 1e-6


def test_z_is_a_frozen_buffer_by_default() -> None:
    pit = PseudoInverseTying.scratch(100, 8)
    assert "z" not in dict(pit.named_parameters())
    assert set(pit.state_dict()) == {"z", "l_param"}
    trainable = PseudoInverseTying.scratch(100, 8, trainable_z=True)
    assert "z" in dict(trainable.named_parameters())
    assert set(trainable.state_dict()) == {"z", "l_param"}


class _LogitsModule(torch.nn.Module):
    """Calls `pit.logits` from `forward`, so `functional_call` can substitute its state."""

    def __init__(self, pit: PseudoInverseTying) -> None:
        super().__init__()
        self.pit = pit

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.pit.logits(h)


@pytest.fixture(params=["solves", "inverse"])
def embed_path(request, monkeypatch) -> str:
    """Both ways `embed` applies T^{-1}: triangular solves (the CPU) and the product with
    L^{-T} L^{-1} (accelerators), forced here on the CPU."""
    by_inverse = request.param == "inverse"
    monkeypatch.setattr("tying.interface.pit.solves_by_inverse", lambda device: by_inverse)
    return request.param


@pytest.mark.parametrize("trainable_z", [False, True])
def test_gradcheck_float64(trainable_z: bool, embed_path: str) -> None:
    pit = random_pit(12, 4, dtype=torch.float64, trainable_z=trainable_z)
    ids = torch.tensor([0, 3, 3, 11, 5])  # repeated id: the unique/inverse path
    h = torch.randn(3, 4, dtype=torch.float64)
    names = ["l_param"] + (["z"] if trainable_z else [])
    wrapper = _LogitsModule(pit)

    def embed_f(*values: torch.Tensor) -> torch.Tensor:
        return functional_call(pit, dict(zip(names, values)), (ids,), strict=False)

    def logits_f(*values: torch.Tensor) -> torch.Tensor:
        state = {f"pit.{n}": v for n, v in zip(names, values)}
        return functional_call(wrapper, state, (h,), strict=False)

    inputs = tuple(getattr(pit, n).detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(embed_f, inputs)
    assert torch.autograd.gradcheck(logits_f, inputs)


def test_from_teacher_output_reproduces_teacher_head() -> None:
    E0 = torch.randn(400, 32, dtype=torch.float64)
    pit = pit_from_teacher(E0, t_init="output", dtype=torch.float64)
    h = torch.randn(6, 32, dtype=torch.float64)
    torch.testing.assert_close(pit.logits(h), h @ E0.T)
    torch.testing.assert_close(pit.unembedding_matrix(), E0)


def test_from_teacher_input_reproduces_teacher_embedding() -> None:
    E0 = torch.randn(400, 32, dtype=torch.float64)
    pit = pit_from_teacher(E0, t_init="input", dtype=torch.float64)
    torch.testing.assert_close(pit.embedding_matrix(), E0)
    ids = torch.tensor([[1, 2, 399]])
    torch.testing.assert_close(pit.embed(ids), E0[ids])


def test_from_teacher_cannot_keep_both_sides() -> None:
    E0 = torch.randn(400, 32, dtype=torch.float64)
    out = pit_from_teacher(E0, t_init="output", dtype=torch.float64)
    # W_out E = I forces the embedding to move: E = pinv(W_out) ≠ E0.
    assert (out.embedding_matrix() - E0).abs().max() > 0.1
    ident = pit_from_teacher(E0, t_init="identity", dtype=torch.float64)
    U = torch.linalg.svd(E0, full_matrices=False)
    torch.testing.assert_close(ident.embedding_matrix(), U.U @ U.Vh)


def test_from_teacher_float32_teacher() -> None:
    E0 = torch.randn(2000, 64) * 0.05
    pit = pit_from_teacher(E0)
    h = torch.randn(4, 64)
    torch.testing.assert_close(pit.logits(h), h @ E0.T, rtol=1e-4, atol=1e-5)


def test_retraction_keeps_z_orthonormal_over_100_steps() -> None:
    pit = PseudoInverseTying.scratch(500, 32, trainable_z=True)
    opt = torch.optim.AdamW(pit.parameters(), lr=1e-2)
    detach = pit.attach_retraction(opt)
    for _ in range(100):
        ids = torch.randint(0, 500, (64,))
        h = pit.embed(ids) + 0.1 * torch.randn(64, 32)
        loss = pit.loss(h, torch.randint(0, 500, (64,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
    gram = pit.z.double().T @ pit.z.double()
    err = (gram - torch.eye(32, dtype=torch.float64)).abs().max().item()
    assert err <= 1e-5, err
    # Z did move: the optimizer really trained it.
    fresh = PseudoInverseTying.scratch(500, 32)
    assert (pit.z - fresh.z).abs().max() > 1e-3
    detach()


def test_retraction_requires_trainable_z() -> None:
    pit = PseudoInverseTying.scratch(50, 4)
    with pytest.raises(ValueError, match="frozen"):
        pit.attach_retraction(torch.optim.SGD(pit.parameters(), lr=0.1))


def test_retraction_is_nearest_orthonormal_matrix() -> None:
    from tying.interface.linalg import polar_retraction

    Z = orthonormal_from_gaussian(60, 5) + 0.01 * torch.randn(60, 5, dtype=torch.float64)
    R = polar_retraction(Z)
    svd = torch.linalg.svd(Z, full_matrices=False)
    torch.testing.assert_close(R, svd.U @ svd.Vh)


@pytest.mark.parametrize("activation", ["exp", "softplus"])
def test_diag_activation_round_trip(activation: str) -> None:
    Z = orthonormal_from_gaussian(50, 6).float()
    L = torch.tril(torch.randn(6, 6)) * 0.1
    L.diagonal().copy_(torch.rand(6) + 0.5)
    pit = PseudoInverseTying(Z, L, diag_activation=activation)
    torch.testing.assert_close(pit.cholesky_factor(), L)


def test_diag_clamp() -> None:
    pit = PseudoInverseTying.scratch(50, 6, diag_clamp=(0.5, 2.0))
    with torch.no_grad():
        pit.l_param.diagonal().copy_(torch.tensor([-5.0, 0.0, 5.0, 0.1, -0.1, 3.0]))
    diag = torch.diagonal(pit.cholesky_factor())
    assert diag.min() >= 0.5 and diag.max() <= 2.0


def test_regularizers() -> None:
    pit = random_pit(50, 6, dtype=torch.float64)
    torch.testing.assert_close(pit.log_det_t(), torch.logdet(pit.transform()))
    expected = torch.diagonal(pit.cholesky_factor()).log().pow(2).sum()
    torch.testing.assert_close(pit.log_diag_penalty(), expected)
    pit.log_det_t().backward()
    assert pit.l_param.grad is not None


def test_num_parameters() -> None:
    pit = PseudoInverseTying.scratch(100, 8)
    assert pit.num_parameters() == 100 * 8 + 8 * 9 // 2


def test_loss_with_frozen_z_produces_no_z_gradient() -> None:
    pit = random_pit(80, 8)
    h = torch.randn(10, 8, requires_grad=True)
    pit.loss(h, torch.randint(0, 80, (10,))).backward()
    assert pit.l_param.grad is not None and h.grad is not None
    assert not pit.z.requires_grad


def test_embedding_solve_never_inverts(monkeypatch) -> None:
    pit = random_pit(80, 8)

    def forbidden(*a, **k):
        raise AssertionError("explicit inverse used")

    monkeypatch.setattr(torch.linalg, "inv", forbidden)
    monkeypatch.setattr(torch, "inverse", forbidden)
    pit.embed(torch.arange(80))
    pit.embedding_matrix()


def test_loss_and_gradients_match_a_naive_inverse_formula(embed_path: str) -> None:
    """PIT's loss and its gradients w.r.t. L's parameter and Z (triangular solves, chunked
    loss) equal those of the naive formula E = Z inv(L L^T), W_out = L L^T Z^T in float64."""
    pit = random_pit(60, 8, dtype=torch.float64, trainable_z=True)
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 60, (20,), generator=gen)
    targets = torch.randint(0, 60, (20,), generator=gen)
    loss = pit.loss(pit.embed(ids), targets)
    loss.backward()

    l_param = pit.l_param.detach().clone().requires_grad_(True)
    Z = pit.z.detach().clone().requires_grad_(True)
    L = pit.cholesky_factor(l_param)
    T = L @ L.T
    E = Z @ torch.linalg.inv(T)  # the explicit inverse PIT never forms
    logits = E[ids] @ (T @ Z.T)
    naive = F.cross_entropy(logits, targets)
    naive.backward()
    torch.testing.assert_close(loss, naive)
    torch.testing.assert_close(pit.l_param.grad, l_param.grad, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(pit.z.grad, Z.grad, rtol=1e-9, atol=1e-12)


def test_both_embed_paths_agree_and_keep_the_identity(monkeypatch) -> None:
    """The product path gives the triangular solves' rows to float64 rounding, and W_out E = I."""
    pit = random_pit(300, 16, dtype=torch.float64)
    ids = torch.arange(300)
    solved = pit.embed(ids)
    monkeypatch.setattr("tying.interface.pit.solves_by_inverse", lambda device: True)
    product = pit.embed(ids)
    torch.testing.assert_close(product, solved, rtol=1e-12, atol=1e-13)
    identity = pit.unembedding_matrix().T @ product
    torch.testing.assert_close(identity, torch.eye(16, dtype=torch.float64), rtol=0, atol=1e-11)


# ----------------------------------------------------------------------------- T's initial scale


def test_scratch_t_scale_divides_e_and_multiplies_w_out() -> None:
    g = torch.Generator().manual_seed(4)
    base = PseudoInverseTying.scratch(300, 16, generator=g, dtype=torch.float64)
    g = torch.Generator().manual_seed(4)
    c = 0.25
    pit = PseudoInverseTying.scratch(300, 16, generator=g, dtype=torch.float64, t_scale=c)
    assert torch.equal(pit.z, base.z)
    torch.testing.assert_close(pit.transform(), c * torch.eye(16, dtype=torch.float64))
    torch.testing.assert_close(pit.embedding_matrix(), base.z / c)
    torch.testing.assert_close(pit.unembedding_matrix(), base.z * c)
    W_out, E = pit.unembedding_matrix().T, pit.embedding_matrix()
    torch.testing.assert_close(W_out @ E, torch.eye(16, dtype=torch.float64))


def test_scratch_t_scale_auto_matches_a_gaussian_heads_row_norm() -> None:
    """ "auto" (c = init_std·√V) gives W_out's rows the mean norm of N(0, init_std²) rows."""
    from tying.interface.pit import scratch_t_scale

    V, d, std = 4096, 64, 0.02
    assert scratch_t_scale("auto", V, std) == pytest.approx(std * V**0.5)
    assert scratch_t_scale(3.0, V, std) == 3.0
    gen = torch.Generator().manual_seed(0)
    pit = PseudoInverseTying.scratch(V, d, generator=gen, init_std=std, t_scale="auto")
    gaussian = torch.randn(V, d, generator=gen) * std
    pit_rows = pit.unembedding_matrix().norm(dim=1).mean().item()
    assert pit_rows == pytest.approx(gaussian.norm(dim=1).mean().item(), rel=0.01)
    with pytest.raises(ValueError, match="t_scale must be a positive"):
        PseudoInverseTying.scratch(50, 4, t_scale=-1.0)
    with pytest.raises(ValueError, match="t_scale must be a positive"):
        scratch_t_scale("match", V, std)
