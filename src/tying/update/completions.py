"""The likelihood of held-out completions: the target of an update trained on a .jsonl task.

An update trained with `tying finetune --task FILE.jsonl` (records ``{"prompt", "completion"}``)
has no lm-eval task that measures what it was for. Its target is the likelihood of the
completions of a held-out file of the same kind (e.g. `tying.update.tool_tokens`' test.jsonl,
whose completions use the added tokens), tokenized exactly as `tying finetune` tokenizes its
training examples (`tokenize_examples`: prompt, completion, then end-of-text when
`append_eos`):

    ref_loglik_i          = Σ_{t in completion_i} log p(x_t | x_<t)           (nats)
    ref_tokens_i          = the completion's token count (end-of-text included)
    ref_loglik_per_token  = Σ_i ref_loglik_i / Σ_i ref_tokens_i               (nats/token)

The returned entry has the shape of one task of `tying evaluate`'s results.json (`n`,
`ref_loglik_per_token`, `items` with `id`, `ref_loglik`, `ref_tokens`), so an update's
target gain is read the same way for lm-eval tasks and for files.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import torch

from tying.devices import autocast_for, resolve_device, resolve_precision


@torch.no_grad()
def completion_loglik(
    spec: str | Path,
    path: str | Path,
    *,
    adapter: str | Path | None = None,
    max_seq_len: int = 256,
    append_eos: bool = True,
    batch_size: int = 8,
    precision: str = "fp32",
    device: str = "auto",
) -> dict[str, Any]:
    """The log-likelihood of every completion of the .jsonl file `path` under model `spec`
    (with `adapter`, if any); see the module docstring.

    Args:
        spec: a model spec (`tying.loader.load_any`): a run, checkpoint or model folder.
        path: a .jsonl file of ``{"prompt", "completion"}`` records.
        adapter: a `tying finetune` adapter folder applied on top, or None.
        max_seq_len: tokens per example at most (longer completions are cut, as in training).
        append_eos: score the end-of-text token after each completion (as `tying finetune`
            trains it by default).
        batch_size: examples per forward pass.
        precision: "fp32" or "bf16" (or "auto") of the forward pass; log-probabilities are
            taken in float32.
        device: "auto", "cpu", "cuda", ...

    Returns:
        {"n", "ref_tokens", "ref_loglik_per_token" (nats/token), "truncated", "skipped",
        "items": [{"id", "ref_loglik" (nats), "ref_tokens"}], "file", "sha256", "seconds"}.

    Raises:
        FileNotFoundError / ValueError: a missing or malformed file, a model without a
            tokenizer or an adapter that does not fit the model.
    """
    from tying.adapters import apply_adapter, causal_lm_of
    from tying.errors import InvalidInputError
    from tying.loader import load_any
    from tying.update.data import collate, read_examples, tokenize_examples

    start = time.perf_counter()
    examples = read_examples(path)
    loaded = load_any(spec)
    tokenizer = loaded.tokenizer
    if tokenizer is None:
        raise InvalidInputError(f"model {spec} has no tokenizer: save one beside it")
    data = tokenize_examples(
        examples, tokenizer.encode, max_seq_len, tokenizer.eos_id if append_eos else None
    )
    target = resolve_device(device)
    model = causal_lm_of(loaded.model, eos_token_id=tokenizer.eos_id)
    if adapter is not None:
        model = apply_adapter(model, adapter)
    model.to(target).eval()
    autocast = autocast_for(target, resolve_precision(precision, target))
    skipped = set(data.skipped)
    kept = [e for e in examples if e.id not in skipped]
    pad = tokenizer.eos_id if tokenizer.eos_id is not None else 0
    items = []
    for first in range(0, len(data.examples), batch_size):
        batch = data.examples[first : first + batch_size]
        inputs, targets = collate(batch, pad)
        inputs, targets = inputs.to(target), targets.to(target)
        with autocast():
            logits = model(input_ids=inputs).logits
        logp = torch.log_softmax(logits.float(), dim=-1)
        keep = targets != -100
        picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        sums = (picked * keep).sum(dim=1).double().cpu()
        counts = keep.sum(dim=1).cpu()
        for row in range(len(batch)):
            items.append(
                {
                    "id": kept[first + row].id,
                    "ref_loglik": float(sums[row]),
                    "ref_tokens": int(counts[row]),
                }
            )
    tokens = sum(i["ref_tokens"] for i in items)
    file = Path(path).expanduser()
    return {
        "n": len(items),
        "ref_tokens": tokens,
        "ref_loglik_per_token": sum(i["ref_loglik"] for i in items) / max(tokens, 1),
        "truncated": data.truncated,
        "skipped": len(data.skipped),
        "items": items,
        "file": str(file),
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        "seconds": time.perf_counter() - start,
    }
