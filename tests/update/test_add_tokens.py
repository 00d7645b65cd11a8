"""`tying add-tokens` and `tying.interface.resize`: new rows, PIT's exact identity, the grown
tokenizer, the written folders and the change on old text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tying.interface.pit import PseudoInverseTying
from tying.interface.resize import grow_interface, pit_grow_factors
from tying.interface.transpose import TransposeTying
from tying.interface.untied import Untied

from ..conftest import train_tiny

NEW = ["<tool_call>", "</tool_call>", " zorblax"]
OLD_TEXT = "Question: what is 3 plus 4?\nAnswer: def add(a, b):\n    return a + b\n" * 3


def _pit64(V: int = 300, d: int = 16, centred: bool = False, seed: int = 0) -> PseudoInverseTying:
    """A float64 PIT with a random memory (centred: Z^T 1 = 0) and a random T far from I."""
    from tying.interface.linalg import polar

    g = torch.Generator().manual_seed(seed)
    M = torch.randn(V, d, generator=g, dtype=torch.float64) + 0.3
    if centred:
        M = M - M.mean(dim=0)
    Z = polar(M).U
    L = torch.tril(0.3 * torch.randn(d, d, generator=g, dtype=torch.float64), diagonal=-1)
    L = L + torch.diag(torch.linspace(0.5, 2.0, d, dtype=torch.float64))
    bias = torch.randn(d, generator=g, dtype=torch.float64) if centred else None
    return PseudoInverseTying(Z, L, input_bias=bias)


#: float64 rounding of products with T and T^{-1} (cond(T) = 16 here): ~1e-12.
TOL = 1e-11
SOURCES = [[3, 7, 9], [11], list(range(300))]


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("keep", ["input", "output", "naive"])
def test_pit_grow_keeps_identity_and_the_chosen_side(keep: str, centred: bool) -> None:
    pit = _pit64(centred=centred)
    E0, U0 = pit.analysis_matrices()
    grown = grow_interface(pit, SOURCES, pit_keep=keep).interface
    assert isinstance(grown, PseudoInverseTying) and grown.vocab_size == 303
    E1, U1 = grown.analysis_matrices()
    eye = torch.eye(16, dtype=torch.float64)
    assert (U1.T @ E1 - eye).abs().max() < TOL  # W_out' E' = I_d
    Z = grown.z
    assert (Z.T @ Z - eye).abs().max() < TOL
    if centred:
        assert Z.sum(dim=0).abs().max() < TOL
    if keep == "input":
        assert (E1[:300] - E0).abs().max() < TOL
    if keep == "output" and not centred:
        assert (U1[:300] - U0).abs().max() < TOL
    if keep == "output" and centred:  # every logit shifts by the same μ T' h: softmax-invariant
        shift = U1[:300] - U0
        assert (shift - shift[0]).abs().max() < TOL
    # the old rows give up exactly the new rows' share of the identity
    share = U1[300:].T @ E1[300:]
    assert share.abs().max() > 1e-3
    assert (U1[:300].T @ E1[:300] + share - eye).abs().max() < TOL


def test_both_old_sides_cannot_be_kept() -> None:
    """E_old and U_old both unchanged would need N = 0: the new rows' share T'^{-1} N^T N T'."""
    pit = _pit64()
    E0, U0 = pit.analysis_matrices()
    for keep in ("input", "output"):
        E1, U1 = grow_interface(pit, [[5]], pit_keep=keep).interface.analysis_matrices()
        moved = max((E1[:300] - E0).abs().max(), (U1[:300] - U0).abs().max())
        assert moved > 1e-4


def test_pit_factors_with_zero_rows_change_nothing() -> None:
    pit = _pit64()
    Z, L = pit.z, pit.cholesky_factor()
    T = L @ L.T
    Z1, T1, _ = pit_grow_factors(Z, T, torch.zeros(2, 16, dtype=torch.float64), "input")
    assert torch.allclose(Z1[:300], Z, atol=1e-13) and torch.allclose(T1, T, atol=1e-12)
    assert Z1[300:].abs().max() == 0


def test_pit_rows_too_long_are_refused() -> None:
    pit = _pit64()
    with pytest.raises(ValueError, match="too long"):
        pit_grow_factors(
            pit.z,
            torch.eye(16, dtype=torch.float64),
            1.5 * torch.eye(16, dtype=torch.float64)[:1],
            "input",
        )


def _decoder64(tie: str):
    """A float64 decoder with random weights (PIT: a memory orthonormal in float64)."""
    from tying.decoder import Decoder, ModelConfig
    from tying.interface.linalg import polar

    config = ModelConfig(vocab_size=2048, d_model=32, n_layers=2, head_dim=16, tie=tie)
    model = Decoder(config, generator=torch.Generator().manual_seed(0)).double().eval()
    if tie == "pit":
        model.interface.z.data.copy_(polar(model.interface.z.data).U)
    return model


@pytest.mark.parametrize(
    ("tie", "keep"),
    [("untied", "input"), ("tt", "input"), ("pit", "input"), ("pit", "output"), ("pit", "naive")],
)
def test_grown_decoder_on_old_text(tie: str, keep: str) -> None:
    """Our decoder (V = 2,048) grown by 3 tokens (mean and piece-mean inits), on 128 old ids
    (near-uniform logits, so 3 new tokens take about 3/(V + 3) of the softmax): PIT keeps
    W_out'E' = I_d to float64 rounding; untied, TT and keep=input leave the hidden states
    exactly as they were; for untied and TT the whole KL and loss change are the new tokens'
    share, −mean log(1 − p_new); every change ≤ 0.01 nats/token."""
    from tying.loader import wrap_model
    from tying.update.tokens import old_text_changes, set_interface

    model = _decoder64(tie)
    loaded = wrap_model(model, None, tie)
    before, V = model.interface, 2048
    ids = torch.randint(0, V, (129,), generator=torch.Generator().manual_seed(1))
    sources = {"mean": [list(range(V))] * 3, "pieces": [[3, 7], [11], [100, 200, 250]]}
    grown = {name: grow_interface(before, s, pit_keep=keep) for name, s in sources.items()}
    changes = old_text_changes(loaded, before, {n: g.interface for n, g in grown.items()}, ids, 128)
    with torch.no_grad():
        hidden0 = model.final_hidden(ids[None, :-1])[0]
        for name, g in grown.items():
            change = changes[name]
            assert 0 <= change["kl_nats"] <= 0.01 and abs(change["delta_loss"]) <= 0.01
            set_interface(loaded, g.interface)
            hidden = model.final_hidden(ids[None, :-1])[0]
            logits = loaded.logits_from_hidden(hidden)
            set_interface(loaded, before)
            if tie == "pit":
                E, U = g.interface.analysis_matrices()
                assert (U.T @ E - torch.eye(32, dtype=torch.float64)).abs().max() < TOL
            if tie != "pit" or keep == "input":
                torch.testing.assert_close(hidden, hidden0, rtol=0, atol=1e-12)
            if tie != "pit":
                share = -torch.log1p(-torch.softmax(logits, dim=-1)[:, V:].sum(dim=-1)).mean()
                assert change["kl_nats"] == pytest.approx(float(share), rel=1e-9, abs=1e-15)
                assert change["delta_loss"] == pytest.approx(float(share), rel=1e-9, abs=1e-15)
                assert float(share) > 0


def test_untied_and_tt_new_rows_are_the_means_old_rows_bitwise() -> None:
    g = torch.Generator().manual_seed(1)
    E, W = torch.randn(50, 8, generator=g), torch.randn(50, 8, generator=g)
    bias = torch.randn(50, generator=g)
    untied = Untied(E, W, bias=bias)
    grown = grow_interface(untied, [[1, 2, 3], [4]]).interface
    assert torch.equal(grown.weight_in[:50], E) and torch.equal(grown.weight_out[:50], W)
    torch.testing.assert_close(grown.weight_in[50], E[1:4].mean(0), rtol=0, atol=1e-6)
    torch.testing.assert_close(grown.weight_out[51], W[4], rtol=0, atol=0)
    torch.testing.assert_close(grown.bias[50], bias[1:4].mean(), rtol=0, atol=1e-6)
    tt = grow_interface(TransposeTying(E, input_grad_scale=0.5), [[0, 9]]).interface
    assert tt.input_grad_scale == 0.5 and tt.shares_matrix
    assert torch.equal(tt.weight[:50], E)
    torch.testing.assert_close(tt.weight[50], (E[0] + E[9]) / 2, rtol=0, atol=1e-6)


@pytest.mark.parametrize("tied", [True, False])
def test_mean_init_matches_transformers_mean_resizing(tied: bool) -> None:
    """transformers samples N(mean, 1e-9·Σ): its rows agree with ours to that noise."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from tying.loader import wrap_model

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=120, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied,
    )  # fmt: skip
    reference = LlamaForCausalLM(config)
    with torch.no_grad():
        reference.lm_head.weight.add_(0.0 if tied else 0.05)  # untied: another mean
    ours = LlamaForCausalLM(config)
    ours.load_state_dict(reference.state_dict())
    reference.resize_token_embeddings(122, mean_resizing=True)
    interface = wrap_model(ours).interface
    grown = grow_interface(interface, [list(range(120))] * 2).interface
    E_ref = reference.get_input_embeddings().weight.detach()
    U_ref = reference.get_output_embeddings().weight.detach()
    scale = E_ref[:120].std()
    assert (grown.embedding_matrix()[120:] - E_ref[120:]).abs().max() < 1e-3 * scale
    assert (grown.unembedding_matrix()[120:] - U_ref[120:]).abs().max() < 1e-3 * scale
    assert grown.shares_matrix == tied


# ----------------------------------------------------------------------------- end to end
def _tokens_file(tmp_path: Path, tokens: list[str] = NEW) -> Path:
    path = tmp_path / "new.txt"
    path.write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
    return path


def _check_folder(out: Path, old_tokenizer, loader) -> None:
    """Both tokenizer loads: one id per new string, old text exactly as before."""
    from transformers import AutoTokenizer

    from tying.data.tokenizer import load_tokenizer

    record = json.loads((out / "add_tokens.json").read_text())
    V = record["vocab_size"]["before"]
    assert record["out"] == str(out)  # the keys `tying add-tokens` printed in 0.1: out, ids
    assert record["ids"] == {text: V + i for i, text in enumerate(NEW)}
    fast = AutoTokenizer.from_pretrained(out)
    plain = load_tokenizer(str(out))
    for i, text in enumerate(NEW):
        assert fast(text, add_special_tokens=False)["input_ids"] == [V + i]
        assert plain.encode(text) == [V + i]
    assert plain.encode(OLD_TEXT) == old_tokenizer.encode(OLD_TEXT)
    assert fast(OLD_TEXT, add_special_tokens=False)["input_ids"] == old_tokenizer.encode(OLD_TEXT)
    mixed = plain.encode("x<tool_call>y")
    assert V in mixed
    loaded = loader(out)
    assert loaded.vocab_size == V + len(NEW)


def _old_text_file(tmp_path: Path) -> Path:
    from tying.paths import data_dir

    text = (data_dir() / "corpus" / "wikitext-2" / "test.txt").read_text()[:20_000]
    path = tmp_path / "held_out.txt"
    path.write_text(text)
    return path


@pytest.mark.parametrize("init", ["mean", "subwords"])
def test_add_tokens_to_a_tied_transformers_model(tiny_base, tmp_path, init) -> None:
    from transformers import AutoModelForCausalLM

    import tying
    from tying.update import AddTokensOptions, add_tokens

    out = tmp_path / "out"
    result = add_tokens(
        AddTokensOptions(
            str(tiny_base), tokens=str(_tokens_file(tmp_path)), out=str(out), init=init,
            check_text=str(_old_text_file(tmp_path)), check_tokens=512, seq_len=128,
        )
    )  # fmt: skip
    base = tying.load(str(tiny_base))
    _check_folder(out, base.tokenizer, tying.load)
    assert result.record["format"] == "transformers"
    plain = AutoModelForCausalLM.from_pretrained(out)
    assert plain.config.tie_word_embeddings and plain.config.vocab_size == 1024 + 3
    assert plain.get_input_embeddings().weight.data_ptr() == plain.lm_head.weight.data_ptr()
    ids = torch.tensor([base.tokenizer.encode(OLD_TEXT)])
    with torch.no_grad():
        before = base.model.hf_model(ids).logits
        after = plain(ids).logits
    torch.testing.assert_close(after[..., :1024], before, rtol=0, atol=1e-5)  # old rows kept
    check = result.record["old_text"]
    assert check["tokenization_unchanged"] and 0 <= check["kl_nats"] <= 0.01
    assert abs(check["delta_loss"]) <= 0.01


@pytest.fixture(scope="module")
def decoder_run_folders(small_corpus, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("add-tokens-runs")
    return {
        tie: train_tiny(small_corpus, root / tie, root / "cache", tie=tie, max_steps=3)
        for tie in ("untied", "tt", "pit")
    }


@pytest.mark.slow
@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_add_tokens_to_decoder_runs(decoder_run_folders, tmp_path, tie) -> None:
    import tying
    from tying.update import AddTokensOptions, add_tokens

    out = tmp_path / "out"
    result = add_tokens(
        AddTokensOptions(
            str(decoder_run_folders[tie]), tokens=str(_tokens_file(tmp_path)), out=str(out),
            init="subwords", check_text=str(_old_text_file(tmp_path)), check_tokens=512,
            seq_len=32,
        )
    )  # fmt: skip
    base = tying.load(str(decoder_run_folders[tie]))
    _check_folder(out, base.tokenizer, tying.load)
    grown = tying.load(str(out))
    assert type(grown.interface) is type(base.interface)
    E1, U1 = grown.interface.analysis_matrices()
    E0, U0 = base.interface.analysis_matrices()
    V = base.vocab_size
    torch.testing.assert_close(E1[:V], E0, rtol=0, atol=1e-6)  # input rows kept (PIT: keep=input)
    if tie == "pit":
        assert (
            U1.double().T @ E1.double() - torch.eye(E1.shape[1], dtype=torch.float64)
        ).abs().max() < 1e-4
    else:
        assert torch.equal(U1[:V], U0)
    ids = torch.tensor([base.tokenizer.encode(OLD_TEXT)[:32]])
    with torch.no_grad():
        torch.testing.assert_close(grown.model.final_hidden(ids), base.model.final_hidden(ids))
    check = result.record["old_text"]
    assert check["tokenization_unchanged"] and 0 <= check["kl_nats"] <= 0.01


def test_add_tokens_to_a_native_pit_folder(tiny_base, tmp_path) -> None:
    import tying
    from tying.hf import convert, from_pretrained, load
    from tying.update import AddTokensOptions, add_tokens

    model, tokenizer = load(str(tiny_base))
    convert(model, "pit", tokenizer=tokenizer)
    native = tmp_path / "pit"
    model.save_pretrained(native)
    tokenizer.save_pretrained(native)
    out = tmp_path / "out"
    result = add_tokens(
        AddTokensOptions(str(native), tokens=str(_tokens_file(tmp_path)), out=str(out))
    )
    assert result.record["format"] == "converted"
    _check_folder(out, tying.load(str(native)).tokenizer, tying.load)
    reloaded = from_pretrained(out)
    interface = tying.hf.interface_of(reloaded)
    assert isinstance(interface, PseudoInverseTying) and interface.vocab_size == 1024 + 3
    E, U = interface.analysis_matrices()
    assert (U.T @ E - torch.eye(32, dtype=torch.float64)).abs().max() < 1e-4


def test_cli_errors(tiny_base, tmp_path, capsys) -> None:
    from tying.cli import main
    from tying.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(tiny_base))
    one = next(
        text
        for text in (tokenizer.decode([i]) for i in range(300, 1000))
        if text.strip() and len(tokenizer.encode(text)) == 1
    )
    existing = tmp_path / "old.txt"
    existing.write_text(one + "\n")
    twice = tmp_path / "twice.txt"
    twice.write_text("<a>\n<a>\n")
    cases = [
        ([str(tiny_base), "--tokens", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o")],
         "no such tokens file"),
        ([str(tiny_base), "--tokens", str(twice), "--out", str(tmp_path / "o")], "listed twice"),
        ([str(tiny_base), "--tokens", str(existing), "--out", str(tmp_path / "o")],
         "already one token"),
    ]  # fmt: skip
    for argv, message in cases:
        assert main(["add-tokens", *argv]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith("tying add-tokens: error: ") and message in err
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- --train-tokens
@pytest.fixture(scope="module")
def grown_runs(decoder_run_folders, tmp_path_factory) -> dict[str, Path]:
    """The decoder runs with NEW added (subwords init)."""
    from tying.update import AddTokensOptions, add_tokens

    root = tmp_path_factory.mktemp("grown")
    tokens = _tokens_file(root)
    return {
        tie: add_tokens(
            AddTokensOptions(str(run), tokens=str(tokens), out=str(root / tie), init="subwords")
        ).out
        for tie, run in decoder_run_folders.items()
    }


@pytest.mark.slow
@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_train_tokens_new_trains_only_the_new_rows(grown_runs, tmp_path, tie) -> None:
    _check_new_rows_training(grown_runs, tmp_path, tie, "cpu")


@pytest.mark.cuda
@pytest.mark.parametrize("tie", ["untied", "tt", "pit"])
def test_train_tokens_new_on_cuda(cuda, grown_runs, tmp_path, tie) -> None:
    """The rows' masks and kept copies follow the model to the GPU (a lent H100 found them
    left on the CPU: "Expected all tensors to be on the same device")."""
    _check_new_rows_training(grown_runs, tmp_path, tie, "cuda")


def test_fixed_tensors_follow_the_model_to_its_device() -> None:
    from tying.update.token_rows import _Follow

    kept = _Follow(torch.ones(3))
    moved = kept.on(torch.empty(3, device="meta"))
    assert moved.device.type == "meta" and kept.on(moved) is moved  # moved once, then reused


def _check_new_rows_training(grown_runs, tmp_path, tie: str, device: str) -> None:
    from safetensors.torch import load_file

    import tying
    from tying.update import FinetuneOptions, finetune

    from .conftest import write_jsonl

    records = [
        {"prompt": f"call {i} <tool_call>", "completion": f" zorblax {i}</tool_call>"}
        for i in range(8)
    ]
    data = write_jsonl(tmp_path / "tools.jsonl", records)
    out = tmp_path / "ft"
    finetune(
        FinetuneOptions(
            str(grown_runs[tie]), task=str(data), out=str(out), max_steps=3, batch_size=4,
            lr=1e-2, weight_decay=0.1, train_tokens="new", progress=False, device=device,
            precision="fp32", checkpoint_every=0,
        )
    )  # fmt: skip
    base = tying.load(str(grown_runs[tie])).interface
    trained = load_file(str(out / "interface.safetensors"))
    V0 = base.vocab_size - len(NEW)
    for name in base.vocab_tensors:
        before, after = getattr(base, name).detach(), trained[name]
        assert not torch.equal(after[V0:], before[V0:]), name  # the new rows trained
        if name not in base.manifold_tensors:
            assert torch.equal(after[:V0], before[:V0]), name  # old rows bitwise (decay 0.1)
    if tie == "pit":
        assert "l_param" in trained
        base.load_state_dict({**base.state_dict(), **trained})
        E, U = base.analysis_matrices()
        assert (U.T @ E - torch.eye(E.shape[1], dtype=torch.float64)).abs().max() < 1e-5
    else:
        assert set(trained) == set(base.vocab_tensors)  # TT: one matrix serves both ends
