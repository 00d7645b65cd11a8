"""The lm-eval model "tying": lm-eval's Hugging Face model, fed by the project's loaders, generating
with `tying.evaluation.generate.greedy_generate`.

`TyingLM` is `lm_eval.models.huggingface.HFLM` (batching, left padding, truncation,
`loglikelihood`, `generate_until`, stop-sequence post-processing: all lm-eval's own), with:

- construction from an instantiated model and tokenizer (`TyingLM(model, tokenizer)`), or
  from `model_args` `spec=...,adapter=...,dtype=...` loaded by
  `tying.evaluation.loading.load_for_evaluation` (runs, checkpoints, "smollm2", .gguf files,
  transformers folders, peft adapters);
- greedy generation through `greedy_generate` (same tokens as `generate(do_sample=False)`,
  less work per token); any sampling option falls back to lm-eval's `generate` path;
- log-likelihoods with the head run only on the positions that hold continuations
  (`logits_to_keep`, see `tying.evaluation.continuation_logits`), where the model's forward
  takes that argument: the same numbers, a fraction of the work on long prompts;
- `get_model_info` without Hub look-ups (works offline).

Importing this module registers the model with lm-eval (`register_model("tying")`). lm-eval
0.4 discovers neither models nor task folders by entry point, so the stock `lm_eval` command
only knows "tying" once this module is imported; `python -m tying.evaluation.harness_cli` is
lm-eval's own command line with it imported and our task folder included (see that module).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from lm_eval.api.registry import register_model
from lm_eval.models.huggingface import HFLM

from tying import devices
from tying._compat import moved_attribute
from tying.errors import InvalidInputError
from tying.evaluation.continuation_logits import ContinuationWindows, Request
from tying.evaluation.generate import eos_ids_of, forward_parameters, greedy_generate
from tying.evaluation.loading import EvalModel, apply_adapter, load_for_evaluation, parse_dtype

#: The name of the model in lm-eval (`--model tying`).
MODEL_NAME = "tying"

log = logging.getLogger(__name__)

#: lm-eval's warnings about what `TyingLM` does on purpose (an instantiated model, one
#: process): logged at debug level on this module's logger instead.
EXPECTED_LM_EVAL_WARNINGS = (
    "`pretrained` model kwarg is not of type `str`",
    "Passed an already-initialized model through `pretrained`",
)

#: Generation options that keep decoding greedy (anything else goes to `generate`).
_GREEDY_KEYS = {"do_sample", "temperature", "attention_mask"}


def __getattr__(name: str) -> Any:
    """Old names kept for one release: `resolve_device` is `tying.devices.resolve_device`."""
    if name == "resolve_device":
        return moved_attribute(__name__, name, "tying.devices")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _ExpectedAtDebug(logging.Filter):
    """Drops lm-eval's `EXPECTED_LM_EVAL_WARNINGS`, logging them at debug level here."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(EXPECTED_LM_EVAL_WARNINGS):
            log.debug("lm-eval (expected): %s", message)
            return False
        return True


@contextmanager
def _expected_lm_eval_warnings_at_debug() -> Iterator[None]:
    """While HFLM is built around an instantiated model, its expected warnings go to debug."""
    logger = logging.getLogger(HFLM.__module__)
    expected = _ExpectedAtDebug()
    logger.addFilter(expected)
    try:
        yield
    finally:
        logger.removeFilter(expected)


def _device(device: str | torch.device | None) -> torch.device:
    """A device a caller resolved already (`tying evaluate` does, once) as it is; a name (lm-eval's
    command line, a library caller) through `tying.devices.resolve_device`."""
    return device if isinstance(device, torch.device) else devices.resolve_device(device)


@register_model(MODEL_NAME)
class TyingLM(HFLM):
    """lm-eval's HFLM around a model of this project.

    Args:
        pretrained: an instantiated transformers causal LM (or a spec string, same as `spec`).
        tokenizer: its transformers tokenizer (required with an instantiated model).
        spec: what to load when `pretrained` is not given (see `load_for_evaluation`).
        adapter: a peft adapter folder to apply on top.
        dtype: weights dtype ("float32", "bfloat16", ...); None: float32 for `spec`, an
            instantiated model's own.
        device: where to run, resolved by `tying.devices.resolve_device` ("auto": CUDA if
            available, else the CPU; CUDA asked for where there is none is a ValueError).
            Default: an instantiated model stays where it is, a spec goes to "auto".
        batch_size: requests per forward/generation batch (int, or lm-eval's "auto").
        continuation_logits: log-likelihoods with the head on the continuation positions only
            (where the model's forward takes `logits_to_keep`); False: on every position, as
            lm-eval's HFLM (the same numbers, more work).
        **kwargs: other HFLM options (max_length, max_batch_size, mixed_precision_dtype, ...).

    Raises:
        ValueError: neither a model nor a spec, a model without tokenizer, an adapter that
            does not fit (see `tying.evaluation.loading`).
    """

    def __init__(
        self,
        pretrained: Any = None,
        tokenizer: Any = None,
        *,
        spec: str | None = None,
        adapter: str | None = None,
        dtype: str | torch.dtype | None = None,
        device: str | torch.device | None = None,
        batch_size: int | str = 1,
        continuation_logits: bool = True,
        **kwargs: Any,
    ) -> None:
        if isinstance(pretrained, (str, Path)):
            spec, pretrained = str(pretrained), None
        if pretrained is None:
            run_device = _device(device)
            if spec is None:
                raise InvalidInputError(
                    "the tying model needs spec=... (a run, checkpoint, model folder, .gguf file "
                    "or 'smollm2') or an instantiated model"
                )
            loaded = load_for_evaluation(
                spec, adapter=adapter, dtype=dtype or torch.float32, device=run_device
            )
        else:
            if tokenizer is None:
                raise InvalidInputError(
                    "an instantiated model needs its tokenizer: pass tokenizer=... as well"
                )
            model = pretrained if adapter is None else apply_adapter(pretrained, adapter)
            if device is not None:
                model.to(_device(device))
            if dtype is not None:
                model.to(parse_dtype(dtype))
            model.eval()
            name = getattr(getattr(model, "config", None), "_name_or_path", "") or "model"
            loaded = EvalModel(
                model=model, tokenizer=tokenizer, name=name, spec="", adapter=adapter
            )
        self.loaded = loaded
        self._windows: ContinuationWindows | None = None
        self._keeps_logits = continuation_logits and "logits_to_keep" in forward_parameters(
            loaded.model
        )
        with _expected_lm_eval_warnings_at_debug():
            super().__init__(
                pretrained=loaded.model,
                tokenizer=loaded.tokenizer,
                backend="causal",
                batch_size=batch_size,
                **kwargs,
            )

    def _loglikelihood_tokens(
        self,
        requests: list[Request],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        """lm-eval's, with the requests known to `_model_call` (which positions need logits)."""
        self._windows = ContinuationWindows(requests, self.max_length)
        try:
            return super()._loglikelihood_tokens(
                requests, disable_tqdm=disable_tqdm, override_bs=override_bs
            )
        finally:
            self._windows = None

    def _model_call(self, inps: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        """lm-eval's forward (under its autocast) of a batch (B, T), with the logits in float32:
        lm-eval takes their log-softmax and sums the log-likelihoods outside the autocast, where
        bf16 logits would round a sum of -704.27 nats to -704.0.

        Inside `_loglikelihood_tokens`, where the model takes `logits_to_keep`: the logits of
        the last k positions only (B, k, V), k from `ContinuationWindows` (lm-eval slices each
        row's continuation from the end of what it gets)."""
        keep = 0
        if self._windows is not None and self._keeps_logits and not args and not kwargs:
            keep = self._windows.positions_to_keep(inps)
        if keep:
            with (
                torch.no_grad(),
                torch.autocast(
                    device_type=self.device.type,
                    dtype=self.mixed_precision_dtype,
                    enabled=self.mixed_precision_dtype is not None,
                ),
            ):
                logits = self.model(inps, logits_to_keep=keep).logits
        else:
            logits = super()._model_call(inps, *args, **kwargs)
        return logits.float() if logits.dtype in (torch.bfloat16, torch.float16) else logits

    # ------------------------------------------------------------------ generation
    def _model_generate(
        self, context: torch.Tensor, max_length: int, stop: list[str], **generation_kwargs: Any
    ) -> torch.Tensor:
        """Greedy continuation of left-padded `context` (B, T) up to `max_length` tokens in all,
        stopping each row at EOS or at one of `stop`; (B, T + n) ids. Sampling options fall
        back to lm-eval's `generate` path."""
        sampling = bool(generation_kwargs.get("do_sample")) or (
            float(generation_kwargs.get("temperature") or 0.0) > 0.0
        )
        if sampling or set(generation_kwargs) - _GREEDY_KEYS:
            return super()._model_generate(context, max_length, stop, **generation_kwargs)
        with torch.autocast(
            device_type=self.device.type,
            dtype=self.mixed_precision_dtype,
            enabled=self.mixed_precision_dtype is not None,
        ):
            return greedy_generate(
                self.model,
                context,
                generation_kwargs.get("attention_mask"),
                max_new_tokens=max(0, max_length - context.shape[1]),
                eos_token_id=eos_ids_of(self.model, self.tokenizer),
                pad_token_id=self.tokenizer.pad_token_id,
                stop_strings=stop,
                tokenizer=self.tokenizer,
            )

    # ------------------------------------------------------------------ bookkeeping
    def get_model_info(self) -> dict[str, Any]:
        """Parameters, dtype, spec and adapter (no Hub look-up)."""
        model = self._model
        return {
            "model_num_parameters": sum(p.numel() for p in model.parameters()),
            "model_dtype": str(getattr(model, "dtype", "")),
            "model_spec": self.loaded.spec,
            "model_name": self.loaded.name,
            "adapter": self.loaded.adapter,
        }
