"""`tying eval`: the next-token loss of any model on a text (nats/token), as JSON.

Any SPEC the analysis verbs accept: a training run or checkpoint, `smollm2`, a .gguf file, a
transformers folder (converted or not) or a hub id (`tying.loader.load_any`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from tying.data.corpus import default_validation_source, prepare_store, resolve_source
from tying.devices import autocast_for, resolve_device, resolve_precision
from tying.errors import InvalidInputError
from tying.loader import load_any
from tying.options.eval import EvalOptions as EvalOptions
from tying.train.evaluate import evaluate


def nonfinite_tensors(module: torch.nn.Module) -> list[str]:
    """Names of the parameters and buffers of `module` that hold NaN or Inf."""
    return [
        name
        for name, t in [*module.named_parameters(), *module.named_buffers()]
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]


def evaluate_text(options: EvalOptions) -> dict[str, Any]:
    """Loss (nats/token), perplexity and token count of a model on a text.

    Returns:
        {"spec", "checkpoint", "data", "loss", "ppl", "tokens", "finite"}: `loss`/`ppl` are
        null (and `finite` false) when the loss is not a finite number, so the JSON stays valid.

    Raises:
        ValueError: the model holds non-finite weights (named), has no tokenizer, or the text
            is too short; FileNotFoundError: the spec or the text does not exist.
    """
    if options.batch_size < 1 or (options.seq_len is not None and options.seq_len < 2):
        raise InvalidInputError("batch_size must be >= 1 and seq_len >= 2")
    device = resolve_device(options.device)
    loaded = load_any(options.spec, tokenizer=options.tokenizer)
    bad = nonfinite_tensors(loaded.model)
    if bad:
        raise InvalidInputError(
            f"{options.spec} holds non-finite values in {len(bad)} tensor(s), first {bad[0]}: "
            "evaluate an earlier checkpoint (checkpoints/step-N)"
        )
    if loaded.tokenizer is None:
        raise InvalidInputError(
            f"{options.spec} has no tokenizer: set tokenizer (a tokenizer name or folder)"
        )
    run_cfg = getattr(loaded, "train_config", None)
    seq_len = options.seq_len or (run_cfg.seq_len if run_cfg is not None else 256)
    source = resolve_source(options.data) if options.data else default_validation_source()
    store = prepare_store(
        source,
        loaded.tokenizer,
        expected_vocab_size=loaded.vocab_size,
        allow_padded_vocab=True,
        progress=False,
    )
    loaded.to(device)
    result = evaluate(
        loaded.model,
        store,
        seq_len=seq_len,
        batch_size=options.batch_size,
        max_tokens=options.max_tokens,
        autocast=autocast_for(device, options.precision),
        device=device,
    )
    finite = math.isfinite(result["loss"])
    return {
        "spec": options.spec,
        "checkpoint": str(loaded.checkpoint) if loaded.checkpoint is not None else None,
        "data": str(source),
        "loss": result["loss"] if finite else None,
        "ppl": result["ppl"] if finite else None,
        "tokens": result["tokens"],
        "finite": finite,
        "precision": resolve_precision(options.precision, device),
    }
