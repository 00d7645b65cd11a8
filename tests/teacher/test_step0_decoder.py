"""Conversions of our own decoder (an InterfaceModel that is not a transformers model)."""

from __future__ import annotations

import copy

import pytest
import torch

from tying.conversion import (
    FitOptions,
    capture_teacher,
    conversion_table,
    convert_interface_model,
    step0_kl,
)
from tying.decoder import Decoder, ModelConfig
from tying.interface import PseudoInverseTying


def tt_decoder(norm: str = "rms") -> Decoder:
    """A small TT decoder whose embedding has a spread spectrum and a common mean row."""
    cfg = ModelConfig(vocab_size=96, d_model=32, n_layers=1, head_dim=16, norm=norm, tie="tt")
    model = Decoder(cfg, generator=torch.Generator().manual_seed(0)).double().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        W = model.interface.weight
        W.copy_(torch.randn(W.shape, generator=g, dtype=W.dtype) * torch.logspace(-0.5, 0.5, 32))
        W.add_(0.5 * torch.randn(32, generator=g, dtype=W.dtype))
    return model


def windows(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randint(0, 96, (1, 17), generator=g)
        out.append((x[:, :-1], x[:, 1:]))
    return out


@pytest.mark.parametrize("t_init", ["identity", "output", "input"])
@pytest.mark.parametrize("centre", [False, True])
@pytest.mark.parametrize("input_scale", ["none", 1.0])
def test_every_option_keeps_w_out_e_identity(t_init, centre, input_scale) -> None:
    model = tt_decoder()
    convert_interface_model(model, "pit", t_init=t_init, centre=centre, input_scale=input_scale)
    pit = model.interface
    assert isinstance(pit, PseudoInverseTying) and pit.centred == centre
    E, U = pit.analysis_matrices()
    assert float((U.T @ E - torch.eye(32, dtype=torch.float64)).abs().max()) <= 1e-9


def test_output_scale_correction_leaves_the_logits_of_the_output_form_unchanged() -> None:
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3))
    raw, scaled = tt_decoder(), tt_decoder()
    convert_interface_model(raw, "pit", t_init="output", centre=False, input_scale="none")
    info = convert_interface_model(scaled, "pit", t_init="output", centre=False, input_scale=1.0)
    assert info["gain_factor"] > 1.0  # the gain moved ...
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    # ... and the head on the same residual state is unchanged: gain·c times W_out/c
    torch.testing.assert_close(
        scaled.interface.logits(scaled.final_norm(x)), raw.interface.logits(raw.final_norm(x))
    )
    # E is c times larger, so the whole model differs (that is the point of the search)
    assert not torch.allclose(scaled(ids), raw(ids))


def test_search_and_fit_lower_the_kl_on_the_decoder() -> None:
    teacher = tt_decoder()
    measure, calibration = windows(4, 0), windows(40, 1)
    captured = capture_teacher(teacher, measure)
    assert step0_kl(copy.deepcopy(teacher), captured)["kl"] == pytest.approx(
        0, abs=1e-6
    )  # float32 capture
    table = conversion_table(
        teacher,
        measure,
        calibration,
        variants={
            "raw": {"tie": "pit", "t_init": "output", "centre": False, "input_scale": "none"},
            "auto": {"tie": "pit", "t_init": "output", "input_scale": "auto"},
            "fit": {"tie": "pit", "t_init": "fit"},
        },
        fit_options=FitOptions(tokens=512, check_tokens=64, lr=5e-3, gain_lr=5e-2, autocast=False),
    )
    kl = {k: v["kl"] for k, v in table["variants"].items()}
    assert table["teacher"]["loss"] > 0
    assert kl["auto"] <= kl["raw"] + 1e-9
    assert kl["fit"] < kl["auto"]
    assert table["variants"]["fit"]["fit"]["kept"]
