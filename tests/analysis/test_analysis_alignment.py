"""Alignment under identity, orthogonal and linear maps."""

from __future__ import annotations

import math
from types import ModuleType

import pytest
import torch

from tying.analysis import (
    ALIGNMENT_KEYS,
    IDENTITY_MODES,
    alignment,
    alignment_table,
    least_squares_map,
)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _rotation(d: int, seed: int) -> torch.Tensor:
    Q, _ = torch.linalg.qr(torch.randn(d, d, generator=_gen(seed), dtype=torch.float64))
    return Q


def test_rotation_plus_noise() -> None:
    """A random rotation plus small noise: orthogonal ≈ 1, identity ≈ 0."""
    X = torch.randn(2000, 64, generator=_gen(0), dtype=torch.float64)
    Y = X @ _rotation(64, 1) + 0.05 * torch.randn(2000, 64, generator=_gen(2), dtype=torch.float64)
    out = alignment(X, Y)
    assert tuple(out) == ALIGNMENT_KEYS
    assert out["orthogonal"] > 0.99
    assert out["linear"] >= out["orthogonal"] - 1e-9
    assert abs(out["identity"]) < 0.1


def test_general_linear_map_needs_the_linear_score() -> None:
    X = torch.randn(2000, 32, generator=_gen(3), dtype=torch.float64)
    W = torch.randn(32, 32, generator=_gen(4), dtype=torch.float64)
    Y = X @ W + 0.01 * torch.randn(2000, 32, generator=_gen(5), dtype=torch.float64)
    out = alignment(X, Y)
    assert out["linear"] > 0.999
    assert out["orthogonal"] < 0.9


@pytest.mark.parametrize("identity", IDENTITY_MODES)
@pytest.mark.parametrize(("d_src", "d_tgt"), [(24, 24), (24, 16), (16, 24)])
def test_agrees_with_naive_float64(
    naive: ModuleType, d_src: int, d_tgt: int, identity: str
) -> None:
    X = torch.randn(300, d_src, generator=_gen(6)) + 2.0
    Y = X[:, :1] * torch.randn(300, d_tgt, generator=_gen(7)) + torch.randn(
        300, d_tgt, generator=_gen(8)
    )
    got = alignment(X, Y, identity=identity)
    ref = naive.alignment(naive.as64(X), naive.as64(Y), identity)
    for key in ALIGNMENT_KEYS:
        if ref[key] is None:
            assert got[key] is None
        else:
            assert got[key] == pytest.approx(ref[key], rel=1e-9, abs=1e-12), key


def test_least_squares_map_matches_lstsq() -> None:
    S = torch.randn(400, 20, generator=_gen(9), dtype=torch.float64)
    T = torch.randn(400, 12, generator=_gen(10), dtype=torch.float64)
    assert torch.allclose(least_squares_map(S, T), torch.linalg.lstsq(S, T).solution, atol=1e-10)


def test_identity_by_hand() -> None:
    """Raw: the cosines of the stored rows; centred: of the rows minus the column means."""
    src = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]], dtype=torch.float64)
    tgt = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], dtype=torch.float64)
    # Raw rows: cos = 1, 1/√2, 4/(2·2√2) = 1/√2.
    assert alignment(src, tgt)["identity"] == pytest.approx((1 + math.sqrt(2)) / 3, rel=1e-14)
    # Centred (means (2/3, 1) and (1, 1)): rows (1/3, −1)·(0, −1), (1/3, 0)·(−1, 0),
    # (−2/3, 1)·(1, 1): cos = 3/√10, −1, 1/√26.
    centred = (3 / math.sqrt(10) - 1 + 1 / math.sqrt(26)) / 3
    assert alignment(src, tgt, identity="centred")["identity"] == pytest.approx(centred, rel=1e-14)
    with pytest.raises(ValueError, match="identity must be one of"):
        alignment(src, tgt, identity="mean")


def test_scores_ignore_a_constant_offset_except_raw_identity() -> None:
    X = torch.randn(500, 16, generator=_gen(11), dtype=torch.float64)
    Y = X @ _rotation(16, 12) + 0.3 * torch.randn(500, 16, generator=_gen(13), dtype=torch.float64)
    shifted_x, shifted_y = X + 5.0, Y - torch.arange(16, dtype=torch.float64)
    a = alignment(X, Y, identity="centred")
    b = alignment(shifted_x, shifted_y, identity="centred")
    for key in ALIGNMENT_KEYS:
        assert a[key] == pytest.approx(b[key], abs=1e-10)
    # The raw identity compares the stored rows, offsets included.
    raw = alignment(shifted_x, shifted_y)["identity"]
    assert abs(raw - a["identity"]) > 0.05


def test_direction_changes_only_the_linear_score() -> None:
    """T holds a rank-4 image of S (d = 8): S → T is fitted almost exactly, T → S is not."""
    S = torch.randn(1000, 8, generator=_gen(14), dtype=torch.float64)
    W = torch.randn(8, 4, generator=_gen(15), dtype=torch.float64) @ torch.randn(
        4, 8, generator=_gen(16), dtype=torch.float64
    )
    T = S @ W + 0.01 * torch.randn(1000, 8, generator=_gen(17), dtype=torch.float64)
    forward, backward = alignment(S, T), alignment(T, S)
    assert forward["linear"] > 0.99
    assert backward["linear"] < 0.9
    assert forward["identity"] == pytest.approx(backward["identity"], rel=1e-12)
    assert forward["orthogonal"] == pytest.approx(backward["orthogonal"], rel=1e-9)


def test_alignment_table() -> None:
    mats = {
        name: torch.randn(200, 8, generator=_gen(i)) for i, name in enumerate(("tied", "in", "out"))
    }
    rows = alignment_table(mats)
    assert [(r["source"], r["target"]) for r in rows] == [
        ("tied", "in"),
        ("tied", "out"),
        ("in", "out"),
    ]
    assert rows[0] == {"source": "tied", "target": "in", **alignment(mats["tied"], mats["in"])}
    both = alignment_table(mats, both_directions=True)
    assert len(both) == 6
    forward, backward = both[0], both[1]
    assert forward["orthogonal"] == pytest.approx(backward["orthogonal"], rel=1e-9)  # symmetric
    with pytest.raises(ValueError, match="two matrices"):
        alignment_table({"only": mats["tied"]})


def test_rejects_bad_input() -> None:
    X = torch.randn(10, 4)
    with pytest.raises(ValueError, match="rows"):
        alignment(X, X[:9])
    with pytest.raises(ValueError, match="at least 2"):
        alignment(X[:1], X[:1])
    with pytest.raises(ValueError, match="matrix"):
        alignment(X[0], X[0])
