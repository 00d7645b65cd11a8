"""Batched greedy generation with a KV cache: the lean loop behind `tying evaluate`.

`greedy_generate(model, input_ids, attention_mask, ...)` produces the tokens that
`model.generate(input_ids, attention_mask=..., do_sample=False, max_new_tokens=...)` produces
for any causal LM the project loads (`tying.hf.TyingForCausalLM`, a converted or plain
transformers model, either under a peft adapter), with less work per token:

- one prefill forward over the left-padded prompts, then one forward per new token on the
  last position only, reusing the model's KV cache (passed as `cache=` where the forward takes
  that name, transformers 5.2x, else as `past_key_values=`; read from the output's field of
  the same name, so no deprecated name is used and transformers warns about nothing);
- positions as `generate` builds them: `cumsum(mask) - 1` (0 on padding) for the prompt,
  then `last + 1` per row, so left-padded rows see the positions of their unpadded prompt;
- `logits_to_keep=1` (when the model's forward accepts it) so the head runs on one position;
- argmax of the last logits, no logits processors, no stopping-criteria objects, under
  `torch.inference_mode()`.

A row stops when it emits an end-of-sequence id or when its generated text contains one of
the stop strings; it is then filled with `pad_token_id` (the `generate` convention), and the
loop ends when every row has stopped or after `max_new_tokens` tokens.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

#: Extra tokens decoded beyond the longest stop string when checking for stop strings.
STOP_WINDOW_SLACK = 4


def forward_parameters(model: nn.Module) -> set[str]:
    """Names of the keyword arguments of the forward that finally runs (through peft wrappers)."""
    names: set[str] = set()
    current: Any = model
    for _ in range(4):  # PeftModelForCausalLM -> LoraModel -> the transformers model
        params = inspect.signature(current.forward).parameters
        names |= {n for n, p in params.items() if p.kind is not p.VAR_KEYWORD}
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            break
        inner = getattr(current, "base_model", None)
        inner = getattr(inner, "model", inner) if inner is not None else None
        if inner is None or inner is current or not isinstance(inner, nn.Module):
            break
        current = inner
    return names


def cache_argument(parameters: set[str]) -> str:
    """The forward's keyword for the KV cache: "cache" where it takes that name (transformers
    5.2x, where "past_key_values" is deprecated), else "past_key_values"."""
    return "cache" if "cache" in parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The KV cache of a forward's output: its `cache` field where it has one (transformers
    5.2x; reading `past_key_values` there warns), else `past_key_values`."""
    fields = getattr(type(output), "__dataclass_fields__", {})
    return output.cache if "cache" in fields else output.past_key_values


def eos_ids_of(model: nn.Module, tokenizer: Any = None) -> list[int]:
    """The end-of-sequence ids `generate` would stop on: the model's generation config (or
    config) `eos_token_id` (an int or a list), plus the tokenizer's `eos_token_id`.

    Args:
        model: a transformers causal LM (possibly peft-wrapped).
        tokenizer: a transformers tokenizer, or None.

    Returns:
        The distinct ids, in order of appearance (may be empty).
    """
    ids: list[int] = []
    sources = [getattr(model, "generation_config", None), getattr(model, "config", None)]
    for source in sources:
        value = getattr(source, "eos_token_id", None) if source is not None else None
        if value is not None:
            ids.extend([value] if isinstance(value, int) else list(value))
            break
    tok_eos = getattr(tokenizer, "eos_token_id", None)
    if isinstance(tok_eos, int):
        ids.append(tok_eos)
    return list(dict.fromkeys(int(i) for i in ids))


def _stop_hits(
    generated: Tensor, rows: list[int], stop_strings: Sequence[str], tokenizer: Any, window: int
) -> list[int]:
    """The rows among `rows` whose last `window` generated tokens decode to a text holding a
    stop string. `generated`: (B, n) new tokens so far."""
    tail = generated[rows, -window:].tolist()
    texts = tokenizer.batch_decode(tail, skip_special_tokens=False)
    return [row for row, text in zip(rows, texts) if any(s in text for s in stop_strings)]


def greedy_generate(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    stop_strings: Sequence[str] = (),
    tokenizer: Any = None,
) -> Tensor:
    """Greedy continuation of a left-padded batch, with a KV cache.

    Args:
        model: a causal LM whose forward takes `input_ids`, `attention_mask` (B, past + T),
            `position_ids`, `cache` (or `past_key_values`), `use_cache` (and, optionally,
            `logits_to_keep`) and returns `.logits` (B, T', V) and `.cache` (or
            `.past_key_values`) (transformers conventions).
        input_ids: (B, T) prompt ids, LEFT-padded.
        attention_mask: (B, T), 1 on prompt tokens, 0 on padding; None = no padding.
        max_new_tokens: at most this many tokens are appended to each row (>= 0).
        eos_token_id: id or ids that end a row (kept in the output, as `generate` does).
        pad_token_id: id written after a row has ended; default: the first EOS id, else 0.
        stop_strings: a row also ends once the decoded text of its generated tokens contains one
            of these (checked on the last `max len + STOP_WINDOW_SLACK` tokens, after each token);
            needs `tokenizer`. The stop string stays in the output (cut it when decoding).
        tokenizer: a transformers tokenizer (`batch_decode`), for `stop_strings`.

    Returns:
        (B, T + n) ids: the prompts followed by n <= max_new_tokens generated tokens, n being
        the step at which the last row ended (rows that ended earlier hold `pad_token_id`).

    Raises:
        ValueError: bad shapes, a negative max_new_tokens, or stop strings without a tokenizer.
    """
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (batch, tokens), got shape {tuple(input_ids.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids shape "
            f"{tuple(input_ids.shape)}"
        )
    stop_strings = [s for s in stop_strings if s]
    if stop_strings and tokenizer is None:
        raise ValueError("stop_strings need a tokenizer to decode the generated tokens")
    if eos_token_id is None:
        eos = []
    elif isinstance(eos_token_id, int):
        eos = [eos_token_id]
    else:
        eos = [int(i) for i in eos_token_id]
    if pad_token_id is None:
        pad_token_id = eos[0] if eos else 0
    if max_new_tokens == 0:
        return input_ids

    device = input_ids.device
    batch = input_ids.shape[0]
    accepts = forward_parameters(model)
    extra = {"logits_to_keep": 1} if "logits_to_keep" in accepts else {}
    cache_arg = cache_argument(accepts)
    eos_tensor = torch.tensor(eos, dtype=input_ids.dtype, device=device)
    window = max((len(s) for s in stop_strings), default=0) + STOP_WINDOW_SLACK

    mask = attention_mask.to(device=device, dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    step_ids = input_ids
    step_positions = positions
    cache = None
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    new_tokens: list[Tensor] = []

    with torch.inference_mode():
        for step in range(max_new_tokens):
            out = model(
                input_ids=step_ids,
                attention_mask=mask,
                position_ids=step_positions,
                use_cache=True,
                **{cache_arg: cache},
                **extra,
            )
            cache = output_cache(out)
            next_tokens = out.logits[:, -1].argmax(-1)
            next_tokens = torch.where(unfinished, next_tokens, pad_token_id)
            new_tokens.append(next_tokens)
            if eos:
                unfinished &= ~torch.isin(next_tokens, eos_tensor)
            if stop_strings:
                rows = unfinished.nonzero().flatten().tolist()
                if rows:
                    generated = torch.stack(new_tokens, dim=1)
                    hits = _stop_hits(
                        generated, rows, stop_strings, tokenizer, min(window, step + 1)
                    )
                    if hits:
                        unfinished[hits] = False
            if not bool(unfinished.any()):
                break
            step_ids = next_tokens[:, None]
            step_positions = step_positions[:, -1:] + 1
            mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
    return torch.cat([input_ids, torch.stack(new_tokens, dim=1)], dim=1)
