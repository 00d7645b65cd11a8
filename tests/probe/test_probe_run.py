"""`run_probe` on training runs: keys, agreement with direct calls, drift, PIT consistency."""

from __future__ import annotations

import json
import math

import pytest
import torch
from scipy import stats

from tying.analysis import consistency, drift, norm_frequency, row_cosine
from tying.data.readers import iter_documents
from tying.data.tokenizer import load_tokenizer
from tying.decoder.params import parameter_counts
from tying.probe import ProbeOptions, run_probe
from tying.train import checkpoint as ckpt
from tying.train.restore import load_trained

TOP_KEYS = {"format", "model", "consistency", "params", "spectra", "norm_frequency", "drift"}


@pytest.fixture(scope="module")
def tt_probe(tt_run, probe_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("probe-tt")
    options = ProbeOptions(str(tt_run), corpus=str(probe_corpus["val"]), corpus_tokens=None)
    return run_probe(options, out)


def test_report_keys_and_files(tt_probe) -> None:
    report = tt_probe.report
    assert TOP_KEYS <= set(report)
    assert set(report["consistency"]) == {"raw", "effective"}
    assert report["errors"] == []
    assert "against" not in report and "alignment" not in report
    model = report["model"]
    assert (model["kind"], model["tie"], model["vocab_size"], model["d_model"]) == (
        "run",
        "tt",
        300,
        256,
    )
    assert model["step"] == 6
    assert json.loads(tt_probe.json_path.read_text()) == report
    assert set(report["plots"]) == {"norm_frequency", "spectra", "drift"}
    for path in tt_probe.plots.values():
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(report["timings_s"]) >= {"load", "consistency", "drift", "total"}


def test_consistency_equals_direct_call(tt_run, tt_probe) -> None:
    model, _, _, _ = load_trained(tt_run)
    E = model.interface.embedding_matrix().detach()
    U = model.interface.unembedding_matrix().detach()
    expected = consistency(E, U, final_norm_gain=model.final_norm.weight.detach())
    got = tt_probe.report["consistency"]
    for view in ("raw", "effective"):
        for key, value in expected[view].items():
            assert got[view][key] == pytest.approx(value, rel=1e-9, abs=1e-12), (view, key)
    # TT raw: the only informative number is ||E^T E - I||_F.
    assert got["raw"]["delta_ti"] == pytest.approx(
        float(torch.linalg.matrix_norm(E.double().T @ E.double() - torch.eye(256))), rel=1e-9
    )


def test_params_match_the_closed_form(tt_run, tt_probe) -> None:
    _, _, cfg, _ = load_trained(tt_run)
    from tying.train.build import build_model

    model = build_model(cfg, 300)
    closed = parameter_counts(model.config)
    params = tt_probe.report["params"]
    assert params["total"] == closed["total"]
    assert params["embedding"] == 300 * 256
    assert params["tying_saves"] == 300 * 256


def test_drift_matches_checkpoints_loaded_independently(tt_run, tt_probe) -> None:
    block = tt_probe.report["drift"]
    folders = ckpt.list_checkpoints(tt_run)
    assert block["steps"] == [2, 4, 6] == [int(p.name.split("-")[1]) for p in folders]
    Es = [load_trained(p)[0].interface.embedding_matrix().detach() for p in folders]
    assert block["E"] == drift(Es)
    assert block["E"]["to_first"][0] == pytest.approx(1.0)
    prev = float(row_cosine(Es[2], Es[1]).mean())
    assert block["E"]["to_previous"][1] == pytest.approx(prev, rel=1e-12)
    assert block["U"] == block["E"]  # tied: U = E at every checkpoint


def test_norm_frequency_agrees_with_a_naive_count(tt_run, probe_corpus, tt_probe) -> None:
    tok = load_tokenizer(probe_corpus["tokenizer"])
    counts = torch.zeros(300, dtype=torch.int64)
    for doc in iter_documents(str(probe_corpus["val"])):
        for i in tok.encode(doc):
            counts[i] += 1
    block = tt_probe.report["norm_frequency"]
    assert block["tokens"] == int(counts.sum())
    assert block["distinct_tokens"] == int((counts > 0).sum())
    model, _, _, _ = load_trained(tt_run)
    E = model.interface.embedding_matrix().detach()
    assert block["E"] == norm_frequency(E, counts)
    seen = counts > 0
    rho = stats.spearmanr(E[seen].double().norm(dim=1), counts[seen].double()).statistic
    assert block["E"]["spearman_rho"] == pytest.approx(rho, rel=1e-12)


def test_probe_of_one_checkpoint_covers_drift_up_to_it(tt_run, probe_corpus, tmp_path) -> None:
    folder = ckpt.list_checkpoints(tt_run)[1]
    options = ProbeOptions(str(folder), skip=frozenset({"norm_frequency", "plots"}))
    report = run_probe(options, tmp_path).report
    assert report["model"]["step"] == 4
    assert report["drift"]["steps"] == [2, 4]
    assert report["plots"] == {}


def test_pit_run_has_raw_consistency_zero(pit_run, tmp_path) -> None:
    options = ProbeOptions(str(pit_run), skip=frozenset({"norm_frequency", "spectra"}))
    report = run_probe(options, tmp_path).report
    assert report["model"]["tie"] == "pit"
    raw = report["consistency"]["raw"]
    # E = Z T^-1 and U = Z T give B_in = B_out = Z and equal column spaces: zero to float64
    # precision. W_out E = T Z^T Z T^-1 is I only up to the float32 orthonormality of the
    # stored Z: delta_ti is ||T (Z^T Z) T^-1 - I||_F, small but not float64-small.
    for key in ("cosine_distance", "procrustes_error", "principal_angle_max"):
        assert abs(raw[key]) < 1e-9, (key, raw[key])
    model, _, _, _ = load_trained(pit_run)
    iface = model.interface
    Z = iface.z.detach().double()
    L = iface.cholesky_factor().detach().double()
    T = L @ L.T
    g = model.final_norm.weight.detach().double()
    product = T @ (Z.T @ Z) @ torch.linalg.inv(T)  # W_out E
    eye = torch.eye(256, dtype=torch.float64)
    assert raw["delta_ti"] < 1e-5
    assert raw["delta_ti"] == pytest.approx(
        float(torch.linalg.matrix_norm(product - eye)), rel=1e-3
    )
    # Effective (s = 1): W_out_eff E_eff = diag(g) W_out E, close to diag(g).
    effective = float(torch.linalg.matrix_norm(g[:, None] * product - eye))
    assert report["consistency"]["effective"]["delta_ti"] == pytest.approx(effective, rel=1e-6)
    assert effective == pytest.approx(float(torch.linalg.vector_norm(g - 1.0)), abs=1e-5)
    assert "drift" not in report and "1 checkpoint" in report["skipped"]["drift"]
    assert report["params"]["embedding"] == 300 * 256 + 256 * 257 // 2
    assert math.isclose(
        report["params"]["tying_saves"], 2 * 300 * 256 - report["params"]["embedding"]
    )
