"""Adding tokens to a model's vocabulary: `tying add-tokens SPEC --tokens FILE --out DIR`.

    from tying.update import AddTokensOptions, add_tokens
    result = add_tokens(AddTokensOptions("runs/pit", tokens="new.txt", out="runs/pit+tok"))

Steps (nothing is written before the model and the tokenizer are grown and checked):

tokenizer -> the `tokenizers` added-token mechanism: each string becomes an `AddedToken`
             (not special, not normalized), matched in the text before the model's
             pre-tokenizer runs, so it is ONE id (V, V+1, ... in file order) and text without
             the new strings tokenizes exactly as before (the BPE, its merges and every old id
             are untouched).
init      -> each new token's rows are the mean of old rows (`tying.interface.resize`):
             `mean` all V rows (transformers' `resize_token_embeddings(mean_resizing=True)`
             without its N(0, 1e-9·Σ) sample noise), `subwords` the rows of the pieces the old
             tokenizer splits the string into. PIT re-orthonormalises its memory and changes T
             so that W_out·E = I_d stays exact and the old input rows are kept exactly
             (`pit_keep`).
write     -> a run of our decoder: a `tying.hf.TyingForCausalLM` folder (loads with `tying.load`
             and transformers' AutoModelForCausalLM once tying is imported); a converted
             (native) folder: the same kind of folder (`tying.hf.from_pretrained`); a plain
             transformers model: a plain transformers checkpoint (tied stays tied); with the
             grown tokenizer (tokenizer.json + tokenizer_config.json) and add_tokens.json.
check     -> optionally, the change on old text (`check_text`): KL(before || after) and the
             loss change in nats/token over `check_tokens` positions, the new tokens' columns
             included in the after-softmax.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from tying.errors import ExistingFileError, InvalidInputError, MissingFileError
from tying.interface.resize import PitKeep, grow_interface
from tying.loader import ADDED_TOKENS_RECORD, LoadedModel, load_any, vocab_size_before_added_tokens
from tying.options.add_tokens import INITS as INITS
from tying.options.add_tokens import AddTokensOptions as AddTokensOptions
from tying.outputs import write_text_atomic

logger = logging.getLogger(__name__)

#: The record of what was added, in the output folder.
RECORD_FILE = ADDED_TOKENS_RECORD


@dataclass
class AddTokensResult:
    """What `add_tokens` did.

    Attributes:
        out: the output folder.
        ids: new string -> its id.
        record: add_tokens.json.
    """

    out: Path
    ids: dict[str, int]
    record: dict[str, Any] = field(default_factory=dict)


def read_token_file(path: str | Path) -> list[str]:
    """The new token strings of `path`, one a line, in order (line breaks removed).

    Raises:
        FileNotFoundError: no such file.
        ValueError: no token, or a string twice (`FILE:LINE: ...`).
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingFileError(f"no such tokens file: {path}")
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        text = line.removesuffix("\r")
        if not text:
            continue
        if text in seen:
            raise InvalidInputError(
                f"{path}:{number}: {text!r} is listed twice (first on line {seen[text]})"
            )
        seen[text] = number
        tokens.append(text)
    if not tokens:
        raise InvalidInputError(f"{path} lists no token (one string a line)")
    return tokens


def grow_tokenizer(backend: Any, tokens: list[str], vocab_size: int) -> Any:
    """A copy of the `tokenizers.Tokenizer` with `tokens` added as ids V, V+1, ... (not special).

    Raises:
        ValueError: the tokenizer's size differs from the model's V (padded rows), or a string
            is already one id of the old tokenizer (nothing to add).
    """
    from tokenizers import AddedToken, Tokenizer

    size = backend.get_vocab_size(with_added_tokens=True)
    if size != vocab_size:
        raise InvalidInputError(
            f"the tokenizer has {size} ids but the model {vocab_size} rows: new ids would not "
            "follow the model's last row (models with padded vocabularies are not supported)"
        )
    for text in tokens:
        ids = backend.encode(text, add_special_tokens=False).ids
        if len(ids) == 1 and backend.decode(ids) == text:
            raise InvalidInputError(
                f"{text!r} is already one token of the vocabulary (id {ids[0]})"
            )
    grown = Tokenizer.from_str(backend.to_str())
    added = grown.add_tokens([AddedToken(t, special=False, normalized=False) for t in tokens])
    if added != len(tokens):
        raise ValueError(f"the tokenizer took {added} of the {len(tokens)} new strings")
    for i, text in enumerate(tokens):
        got = grown.token_to_id(text)
        if got != vocab_size + i:  # pragma: no cover - tokenizers appends in order
            raise RuntimeError(f"{text!r} got id {got}, expected {vocab_size + i}")
    return grown


def token_sources(init: str, tokens: list[str], backend: Any, vocab_size: int) -> list[list[int]]:
    """For each new string, the old ids whose rows its init averages (see the module docstring)."""
    if init not in INITS:
        raise InvalidInputError(f"init must be one of {INITS}, got {init!r}")
    if init == "mean":
        return [list(range(vocab_size)) for _ in tokens]
    return [backend.encode(t, add_special_tokens=False).ids for t in tokens]


def first_added_id(spec: str | Path) -> int:
    """V_old of a model folder written by `add_tokens` (its add_tokens.json).

    Raises:
        ValueError: `spec` is not such a folder.
    """
    before = vocab_size_before_added_tokens(spec)
    if before is None:
        raise InvalidInputError(
            f"train_tokens=new needs a model written by tying add-tokens ({spec} has no "
            f"{RECORD_FILE})"
        )
    return before


def set_interface(loaded: LoadedModel, interface: Any) -> None:
    """Put `interface` into the loaded model in place of its current one."""
    from tying.hf.modules import INTERFACE_ATTR

    model = loaded.model
    hf_model = getattr(model, "hf_model", None)
    if hf_model is not None:
        from tying.conversion.model import unwrap_model

        inner = unwrap_model(hf_model)
        setattr(inner, INTERFACE_ATTR, interface)
        inner.config.vocab_size = interface.vocab_size
    else:
        model.interface = interface
        model.config = dataclasses.replace(model.config, vocab_size=interface.vocab_size)


def _transformers_tokenizer(backend: Any, eos_token: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos_token)


def _save_model(loaded: LoadedModel, folder: Path, tokenizer: Any) -> str:
    """Write the grown model to `folder`; returns the format written."""
    from tying.hf import TyingForCausalLM, export, is_converted_folder
    from tying.hf.state import CONFIG_KEY, interface_record

    hf_model = getattr(loaded.model, "hf_model", None)
    if hf_model is None:
        wrapper = TyingForCausalLM.from_decoder(loaded.model, eos_token_id=tokenizer.eos_token_id)
        wrapper.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return "tying-decoder"
    from tying.conversion.model import unwrap_model

    inner = unwrap_model(hf_model)
    spec_path = Path(loaded.spec).expanduser()
    if spec_path.is_dir() and is_converted_folder(spec_path):
        record = dict(getattr(inner.config, CONFIG_KEY))
        record.update(interface_record(loaded.interface, float(record.get("embed_scale", 1.0))))
        setattr(inner.config, CONFIG_KEY, record)
        inner.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return "converted"
    export(inner, folder, tokenizer)
    return "transformers"


@torch.no_grad()
def old_text_changes(
    loaded: LoadedModel,
    before: Any,
    afters: dict[str, Any],
    ids: Tensor,
    seq_len: int = 256,
) -> dict[str, dict[str, float]]:
    """KL(before || after) and the loss change on token ids that hold no new token, for each
    grown interface of `afters` (one pass of the old model per window, shared).

    The trunk is shared; the interface is swapped between `before` (V rows) and each `after`
    (V + k rows). The after-softmax runs over all V + k columns (the probability the new
    tokens take counts as damage); the before-distribution has none on them. When an after
    interface embeds the window exactly as `before` does, the trunk is not run again.

    Args:
        loaded: the model (its interface is left as `before`).
        before: the old interface.
        afters: name -> grown interface.
        ids: (n,) token ids, n ≥ 2.
        seq_len: tokens per window (the last window may be shorter).

    Returns:
        name -> kl_nats, loss_before, loss_after, delta_loss (nats/token), tokens.
    """
    V = before.vocab_size
    sums = {name: [0.0, 0.0, 0.0] for name in afters}  # kl, loss before, loss after
    count = 0
    for start in range(0, ids.numel() - 1, seq_len):
        window = ids[start : start + seq_len + 1]
        if window.numel() < 2:
            break
        inputs, targets = window[:-1].unsqueeze(0), window[1:]
        set_interface(loaded, before)
        hidden_b = loaded.model.final_hidden(inputs)[0]
        lb = torch.log_softmax(loaded.logits_from_hidden(hidden_b).to(torch.float64), dim=-1)
        nll_b = -float(lb.gather(1, targets[:, None]).sum())
        embedded = before.embed(inputs)
        for name, after in afters.items():
            set_interface(loaded, after)
            same_input = torch.equal(after.embed(inputs), embedded)
            hidden = hidden_b if same_input else loaded.model.final_hidden(inputs)[0]
            la = torch.log_softmax(loaded.logits_from_hidden(hidden).to(torch.float64), dim=-1)
            sums[name][0] += float((lb.exp() * (lb - la[:, :V])).sum())
            sums[name][1] += nll_b
            sums[name][2] -= float(la.gather(1, targets[:, None]).sum())
        count += targets.numel()
    set_interface(loaded, before)
    return {
        name: {
            "kl_nats": kl / count,
            "loss_before": nb / count,
            "loss_after": na / count,
            "delta_loss": (na - nb) / count,
            "tokens": count,
        }
        for name, (kl, nb, na) in sums.items()
    }


def old_text_change(
    loaded: LoadedModel, before: Any, after: Any, ids: Tensor, seq_len: int = 256
) -> dict[str, float]:
    """`old_text_changes` of one grown interface; the model is left with `after` installed."""
    result = old_text_changes(loaded, before, {"after": after}, ids, seq_len)["after"]
    set_interface(loaded, after)
    return result


def _check_options(options: AddTokensOptions) -> tuple[list[str], Path]:
    if not options.tokens:
        raise InvalidInputError("give the new tokens (tokens: a file, one string a line)")
    if options.init not in INITS:
        raise InvalidInputError(f"init must be one of {INITS}, got {options.init!r}")
    if options.check_tokens < 2 or options.seq_len < 1:
        raise InvalidInputError("check_tokens must be >= 2 and seq_len >= 1")
    tokens = read_token_file(options.tokens)
    out = Path(options.out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not options.overwrite:
        raise ExistingFileError(
            f"{out} is not empty: choose another output folder, or set overwrite to replace it"
        )
    if options.check_text and not Path(options.check_text).expanduser().is_file():
        raise MissingFileError(f"no such check text: {options.check_text}")
    return tokens, out


def add_tokens(
    options: AddTokensOptions, log: Callable[[str], None] = logger.info
) -> AddTokensResult:
    """Grow the vocabulary of `options.spec` by the strings of `options.tokens` (module docstring).

    Raises:
        ValueError / FileNotFoundError: bad options, a token already in the vocabulary, a
            model without a tokenizer or with padded rows (nothing written).
        FileExistsError: a non-empty `out` without overwrite.
    """
    tokens, out = _check_options(options)
    loaded = load_any(options.spec)
    if loaded.tokenizer is None:
        raise InvalidInputError(f"model {options.spec} has no tokenizer: add-tokens grows one")
    old = loaded.tokenizer
    V = loaded.vocab_size
    backend = grow_tokenizer(old.backend, tokens, V)
    sources = token_sources(options.init, tokens, old.backend, V)
    before = loaded.interface
    grown = grow_interface(before, sources, pit_keep=options.pit_keep)
    set_interface(loaded, grown.interface)
    ids = {t: V + i for i, t in enumerate(tokens)}
    log(
        f"{loaded.name}: {len(tokens)} new tokens (ids {V}..{V + len(tokens) - 1}), init "
        f"{options.init}, {grown.details['tie']}"
    )
    check = None
    if options.check_text:
        text = Path(options.check_text).expanduser().read_text(encoding="utf-8")
        old_ids = old.encode(text)
        check_ids = torch.tensor(old_ids[: options.check_tokens + 1], dtype=torch.long)
        check = old_text_change(loaded, before, grown.interface, check_ids, options.seq_len)
        check["text"] = str(options.check_text)
        check["tokenization_unchanged"] = (
            backend.encode(text, add_special_tokens=False).ids == old_ids
        )
        log(
            f"old text: KL {check['kl_nats']:.2e} nats/token, loss {check['loss_before']:.4f} -> "
            f"{check['loss_after']:.4f} over {check['tokens']} tokens"
        )
    record = {
        "out": str(out),
        "ids": ids,
        "spec": options.spec,
        "options": dataclasses.asdict(options),
        "tokens": [{"text": t, "id": ids[t], "sources": len(s)} for t, s in zip(tokens, sources)],
        "subword_pieces": {t: s for t, s in zip(tokens, sources)}
        if options.init == "subwords"
        else None,
        "vocab_size": {"before": V, "after": V + len(tokens)},
        "resize": grown.details,
        "old_text": check,
    }
    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        tokenizer = _transformers_tokenizer(backend, old.eos_token)
        record["format"] = _save_model(loaded, tmp, tokenizer)
        write_text_atomic(tmp / RECORD_FILE, json.dumps(_finite(record), indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return AddTokensResult(out, ids, record)


def _finite(value: Any) -> Any:
    """`value` with non-finite floats as None (strict JSON)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


__all__ = [
    "INITS",
    "RECORD_FILE",
    "AddTokensOptions",
    "AddTokensResult",
    "PitKeep",
    "add_tokens",
    "first_added_id",
    "grow_tokenizer",
    "old_text_change",
    "old_text_changes",
    "read_token_file",
    "token_sources",
]
