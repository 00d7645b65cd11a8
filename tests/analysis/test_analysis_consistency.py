"""Interface consistency: naive agreement, invariances, TT/PIT/independent cases, errors."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from tying.analysis import CONSISTENCY_KEYS, consistency
from tying.conversion import pit_from_teacher

ANGLES_AND_PROCRUSTES = ("procrustes_error", "principal_angle_max", "principal_angle_mean")


def _random(V: int, d: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(V, d, generator=g, dtype=dtype)


def _well_conditioned(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.eye(d, dtype=torch.float64) + 0.3 * torch.randn(
        d, d, generator=g, dtype=torch.float64
    )


def _assert_matches(got: dict[str, float], ref: dict[str, float], rtol: float = 1e-7) -> None:
    for key in CONSISTENCY_KEYS:
        # The per-token polar-factor rows are float32 products (documented error < 1e-6).
        atol = 1e-6 if key == "cosine_distance" else 1e-9
        assert got[key] == pytest.approx(ref[key], rel=rtol, abs=atol), key


def test_keys_and_types() -> None:
    out = consistency(_random(60, 8, 0), _random(60, 8, 1))
    assert set(out) == {"raw", "effective"}
    for block in out.values():
        assert tuple(block) == CONSISTENCY_KEYS
        assert all(isinstance(v, float) for v in block.values())


def test_raw_agrees_with_naive_float64(naive: ModuleType) -> None:
    E, U = _random(200, 24, 0), _random(200, 24, 1) + 0.5 * _random(200, 24, 0)
    _assert_matches(consistency(E, U)["raw"], naive.consistency(naive.as64(E), naive.as64(U)))


def test_effective_is_raw_of_the_applied_maps(naive: ModuleType) -> None:
    """effective(E, U, g, s) = naive metrics of (s E, U diag(g)), also for a negative s."""
    E, U = _random(150, 16, 2), _random(150, 16, 3) + _random(150, 16, 2)
    g = torch.rand(16, generator=torch.Generator().manual_seed(4), dtype=torch.float64) + 0.2
    for s in (3.0, -0.5):
        got = consistency(E, U, final_norm_gain=g, embed_scale=s)["effective"]
        _assert_matches(got, naive.consistency(naive.as64(s * E), naive.as64(U * g)))


def test_float32_input_is_computed_in_float64(naive: ModuleType) -> None:
    E, U = _random(120, 12, 5, torch.float32), _random(120, 12, 6, torch.float32)
    _assert_matches(consistency(E, U)["raw"], naive.consistency(naive.as64(E), naive.as64(U)), 1e-6)


def test_u_equal_e_times_invertible_gives_zero_angles_and_procrustes() -> None:
    E = _random(300, 20, 7)
    U = E @ _well_conditioned(20, 8)
    g = torch.linspace(0.5, 2.0, 20, dtype=torch.float64)
    out = consistency(E, U, final_norm_gain=g, embed_scale=1.7)
    for block in out.values():
        for key in ANGLES_AND_PROCRUSTES:
            assert block[key] < 1e-10, key
        # ...while the per-token cosines and delta_ti still see M.
        assert block["cosine_distance"] > 1e-3
        assert block["delta_ti"] > 1.0


def test_transpose_tying_only_cosine_and_delta_carry_information() -> None:
    E = _random(300, 16, 9)
    g = torch.linspace(0.3, 3.0, 16, dtype=torch.float64)
    out = consistency(E, E, final_norm_gain=g, embed_scale=2.0)
    raw, eff = out["raw"], out["effective"]
    assert raw["cosine_distance"] < 1e-12  # B_in = B_out exactly
    for key in ANGLES_AND_PROCRUSTES:
        assert raw[key] < 1e-10 and eff[key] < 1e-10, key
    assert eff["cosine_distance"] > 1e-3  # the gain changes the effective output geometry
    assert raw["delta_ti"] == pytest.approx(
        float(torch.linalg.matrix_norm(E.T @ E - torch.eye(16)))
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_pit_interface_is_consistent(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(10)
    E0 = torch.randn(400, 32, generator=g, dtype=torch.float64) @ _well_conditioned(32, 11)
    pit = pit_from_teacher(E0, t_init="output", dtype=dtype)
    with torch.no_grad():
        E, U = pit.embedding_matrix(), pit.unembedding_matrix()
    raw = consistency(E, U)["raw"]
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    for key in CONSISTENCY_KEYS:
        if key == "delta_ti":
            continue  # a Frobenius norm over d² entries; delta_ti_rel is its per-sqrt(d) scale
        assert raw[key] < tol, (key, raw[key])
    # The effective maps of a PIT model with a non-constant gain are no longer inverse.
    eff = consistency(E, U, final_norm_gain=torch.linspace(0.5, 2.0, 32))["effective"]
    assert eff["delta_ti_rel"] > 0.1


def test_independent_matrices_give_clearly_nonzero_values() -> None:
    raw = consistency(_random(400, 32, 12), _random(400, 32, 13))["raw"]
    assert raw["cosine_distance"] > 0.8  # about 1: unrelated directions
    assert raw["procrustes_error"] > 0.5
    assert raw["principal_angle_mean"] > 0.3
    assert raw["principal_angle_max"] > 1.0
    assert raw["delta_ti_rel"] > 1.0


def test_scale_invariance_of_the_geometric_metrics() -> None:
    E, U = _random(100, 10, 14), _random(100, 10, 15)
    a, b = consistency(E, U)["raw"], consistency(5.0 * E, 0.1 * U)["raw"]
    for key in ANGLES_AND_PROCRUSTES:
        assert a[key] == pytest.approx(b[key], rel=1e-9, abs=1e-12), key
    assert a["cosine_distance"] == pytest.approx(b["cosine_distance"], abs=1e-6)


def test_rejects_bad_input() -> None:
    E = _random(50, 8, 16)
    with pytest.raises(ValueError, match="same"):
        consistency(E, _random(50, 9, 17))
    with pytest.raises(ValueError, match="V >= d"):
        consistency(_random(6, 8, 18), _random(6, 8, 19))
    bad = E.clone()
    bad[3, 2] = float("nan")
    with pytest.raises(ValueError, match="non-finite"):
        consistency(bad, E)
    with pytest.raises(ValueError, match="embed_scale"):
        consistency(E, E, embed_scale=0.0)
    with pytest.raises(ValueError, match="final_norm_gain"):
        consistency(E, E, final_norm_gain=torch.ones(7))
    deficient = E.clone()
    deficient[:, 1] = deficient[:, 0]
    with pytest.raises(ValueError, match="rank-deficient"):
        consistency(deficient, E)
    gain = torch.ones(8)
    gain[4] = 0.0
    with pytest.raises(ValueError, match="effective unembedding"):
        consistency(E, E, final_norm_gain=gain)
