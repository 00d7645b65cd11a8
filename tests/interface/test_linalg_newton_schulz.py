"""The accelerator path of the inverse square root (Newton–Schulz, no eigendecomposition, no host
sync) against the CPU's eigendecomposition, in float64."""

from __future__ import annotations

import pytest
import torch

from tying.interface.linalg import newton_schulz_inverse_sqrt, polar_retraction, spd_inverse_sqrt


@pytest.mark.parametrize("perturbation", [0.0, 1e-3, 1e-2, 0.1])
def test_newton_schulz_equals_eigh_for_a_perturbed_orthonormal_memory(perturbation) -> None:
    g = torch.Generator().manual_seed(0)
    V, d = 2000, 96
    Z = torch.linalg.qr(torch.randn(V, d, generator=g, dtype=torch.float64))[0]
    Z = Z + perturbation * torch.randn(V, d, generator=g, dtype=torch.float64)
    G = Z.T @ Z
    expected = spd_inverse_sqrt(G)  # CPU: eigendecomposition
    got = newton_schulz_inverse_sqrt(G)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("condition", [10.0, 1e3])
def test_newton_schulz_on_an_ill_conditioned_spd_matrix(condition) -> None:
    g = torch.Generator().manual_seed(1)
    d = 64
    Q = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=torch.float64))[0]
    evals = torch.logspace(0, -torch.log10(torch.tensor(condition)).item(), d, dtype=torch.float64)
    G = (Q * evals) @ Q.T
    M = newton_schulz_inverse_sqrt(G, eps=0.0)
    torch.testing.assert_close(M @ G @ M, torch.eye(d, dtype=torch.float64), rtol=0, atol=1e-8)


def test_polar_retraction_gives_orthonormal_columns_through_either_path() -> None:
    g = torch.Generator().manual_seed(2)
    Z = torch.randn(500, 32, generator=g, dtype=torch.float64)
    G = Z.T @ Z
    R = Z @ newton_schulz_inverse_sqrt(G)
    torch.testing.assert_close(R.T @ R, torch.eye(32, dtype=torch.float64), rtol=0, atol=1e-10)
    torch.testing.assert_close(R, polar_retraction(Z), rtol=0, atol=1e-10)
