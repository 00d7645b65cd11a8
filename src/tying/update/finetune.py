"""`tying finetune SPEC --task mbpp|gsm8k|FILE.jsonl --out DIR`: a LoRA update of any model.

    result = finetune(FinetuneOptions(spec="smollm2", task="mbpp", out="runs/mbpp", max_steps=100))

setup      -> options checked, training examples read and tokenized, the base model loaded
              (`tying.loader.load_any`) and recorded (`tying.adapters.base_record`), all before
              anything is written; resume point
model      -> LoRA through peft (`tying.update.lora.add_lora`) on the transformers causal LM
              behind the model; the token interface frozen unless train_interface
optimizer  -> AdamW on the trainable tensors, linear warm-up then cosine decay
loop       -> one batch of examples per step (seeded order), loss = mean cross-entropy of the
              answer tokens (nats/token; prompt and padding masked with -100), gradient
              clipping, metrics.jsonl, checkpoints (atomic: adapter tensors, optimizer, RNG,
              data position), progress bar
end        -> the adapter (peft's save_pretrained: adapter_model.safetensors and
              adapter_config.json), tying_adapter.json (its base model), interface.safetensors
              (train_interface only) and finetune.json, all in DIR

A killed run continued with `resume` repeats the losses of an uninterrupted run exactly (same
machine and thread count): the checkpoint holds the adapter and interface tensors, AdamW's
state, the torch random state (LoRA dropout) and the position in the seeded example order.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tying.adapters import (
    ADAPTER_RECORD,
    INTERFACE_FILE,
    base_record,
    causal_lm_of,
    check_target_modules,
    default_target_modules,
    write_adapter_record,
)
from tying.config import ConfigError, from_dict, positional, to_dict
from tying.devices import autocast_for, resolve_device, resolve_precision
from tying.loader import load_any
from tying.train import checkpoint as ckpt
from tying.train.loop import DivergenceError
from tying.train.metrics import MetricsLogger
from tying.train.schedule import learning_rate
from tying.update.data import ExampleOrder, collate, load_examples, tokenize_examples
from tying.update.lora import add_lora, trainable_parameters

#: Summary of a finished run, in the output folder.
SUMMARY_FILE = "finetune.json"
#: Prefix of the interface tensors in a checkpoint's model.safetensors.
INTERFACE_PREFIX = "interface."


@dataclass
class FinetuneOptions:
    """Options of `tying finetune`.

    Attributes:
        spec: the base model: a run or checkpoint folder, smollm2, a .gguf file, a model folder
            or a hub id.
        task: mbpp, gsm8k (their training splits) or a .jsonl file of {"prompt", "completion"}
            records.
        out: output folder: the adapter (adapter_model.safetensors, adapter_config.json,
            tying_adapter.json), metrics.jsonl, finetune.json, checkpoints/.
        max_steps: optimizer steps (null = `epochs` passes over the training examples; 0 =
            save the untrained adapter, B = 0: the base model's outputs exactly).
        epochs: passes over the examples when max_steps is null.
        batch_size: examples per optimizer step.
        max_seq_len: tokens per example (prompt + completion); longer ones lose the end of
            their completion.
        lr: peak AdamW learning rate.
        warmup_steps: steps of linear warm-up.
        min_lr_ratio: final learning rate of the cosine decay, as a fraction of lr.
        weight_decay: AdamW weight decay of the trained tensors.
        beta1: AdamW first-moment decay.
        beta2: AdamW second-moment decay.
        grad_clip: maximum global gradient norm (0 = no clipping).
        rank: LoRA rank r.
        alpha: LoRA alpha; the update is scaled by alpha / r.
        dropout: LoRA dropout probability.
        target_modules: leaf names of the linear layers LoRA adapts (null = every linear layer
            inside the decoder blocks: the attention and MLP projections).
        train_interface: also train the token interface (untied: E and W_out; tt: the shared
            matrix; pit: the Cholesky factor L only, Z stays orthonormal).
        append_eos: end every completion with the tokenizer's end-of-text token.
        seed: seed of the LoRA initialisation, the dropout and the example order.
        checkpoint_every: steps between checkpoints (0 = only at the end).
        keep_last: checkpoints kept (older ones are deleted).
        resume: continue the run in `out` from its newest intact checkpoint.
        precision: auto, bf16 (autocast) or fp32; losses and log-sum-exp in fp32 always.
        device: auto (cuda if present), cpu or cuda[:N].
        tensorboard: also write TensorBoard event files.
        progress: show a progress bar.
    """

    spec: str = positional()
    task: str = "mbpp"
    out: str = "finetune"
    max_steps: int | None = None
    epochs: int = 1
    batch_size: int = 8
    max_seq_len: int = 512
    lr: float = 2e-4
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.05
    target_modules: list[str] | None = None
    train_interface: bool = False
    append_eos: bool = True
    seed: int = 0
    checkpoint_every: int = 50
    keep_last: int = 2
    resume: bool = False
    precision: str = "auto"
    device: str = "auto"
    tensorboard: bool = False
    progress: bool = True


#: Options a resumed run must keep (they fix the model, the data and their order).
RESUME_KEYS = (
    "spec",
    "task",
    "batch_size",
    "max_seq_len",
    "rank",
    "alpha",
    "dropout",
    "target_modules",
    "train_interface",
    "append_eos",
    "seed",
)


@dataclass
class FinetuneResult:
    """What a finished run reports.

    Attributes:
        out: the output (adapter) folder.
        steps: the last step.
        final_loss: loss of the last step (nats per answer token).
        seconds_per_step: mean wall-clock seconds of the steps this process ran.
        summary: finetune.json.
    """

    out: Path
    steps: int
    final_loss: float
    seconds_per_step: float | None
    summary: dict[str, Any] = field(default_factory=dict)


def check_options(options: FinetuneOptions) -> None:
    """Validate the options that need no file or model.

    Raises:
        ValueError: what is wrong, in one line.
    """
    positive = {
        "batch_size": options.batch_size,
        "epochs": options.epochs,
        "rank": options.rank,
        "keep_last": options.keep_last,
    }
    for name, value in positive.items():
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if options.max_steps is not None and options.max_steps < 0:
        raise ValueError(
            f"--max-steps must be >= 0, got {options.max_steps}; omit it for `epochs` passes"
        )
    if options.max_seq_len < 2:
        raise ValueError(f"--max-seq-len must be >= 2 tokens, got {options.max_seq_len}")
    if not (options.lr > 0 and math.isfinite(options.lr)):
        raise ValueError(f"--lr must be a positive number, got {options.lr}")
    if not options.alpha > 0:
        raise ValueError(f"--alpha must be > 0, got {options.alpha}")
    if not 0.0 <= options.dropout < 1.0:
        raise ValueError(f"--dropout must be in [0, 1), got {options.dropout}")
    for name in ("warmup_steps", "checkpoint_every"):
        if getattr(options, name) < 0:
            raise ValueError(f"{name} must be >= 0, got {getattr(options, name)}")
    if not 0.0 <= options.min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {options.min_lr_ratio}")
    if options.grad_clip < 0 or options.weight_decay < 0:
        raise ValueError("grad_clip and weight_decay must be >= 0")
    if options.target_modules is not None and not options.target_modules:
        raise ValueError("--target-modules needs at least one module name")
    resolve_precision(options.precision)


def _log(message: str) -> None:
    print(f"tying finetune: {message}", file=sys.stderr, flush=True)


def _resume_point(options: FinetuneOptions, out: Path) -> Path | None:
    """The checkpoint to continue from (None: start), after checking the settings; refuses an
    output folder that holds files unless resume."""
    if not options.resume:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise FileExistsError(
                f"{out} is not empty: pass --resume to continue the run in it, or choose "
                "another --out (nothing was overwritten)"
            )
        return None
    found = ckpt.checkpoint_to_resume(out, _log, "start again in another --out")
    if found is None:
        return None
    saved = from_dict(
        FinetuneOptions,
        ckpt.read_trainer_state(found)["options"],
        source=str(found / "trainer.json"),
    )
    for key in RESUME_KEYS:
        if getattr(saved, key) != getattr(options, key):
            raise ConfigError(
                f"cannot resume {out}: it was trained with {key}={getattr(saved, key)!r}, this "
                f"run asks for {key}={getattr(options, key)!r}; resume with the same setting, or "
                "choose another --out"
            )
    return found


def _adapter_state(peft_model: Any, interface: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The trained tensors: peft's adapter state dict and the trained interface tensors."""
    from peft import get_peft_model_state_dict

    state = dict(get_peft_model_state_dict(peft_model))
    state.update({INTERFACE_PREFIX + n: p for n, p in interface.items()})
    return state


def _load_adapter_state(
    peft_model: Any, interface: dict[str, torch.nn.Parameter], state: dict[str, torch.Tensor]
) -> None:
    from peft import set_peft_model_state_dict

    lora = {k: v for k, v in state.items() if not k.startswith(INTERFACE_PREFIX)}
    result = set_peft_model_state_dict(peft_model, lora)
    missing = [k for k in getattr(result, "missing_keys", []) if "lora_" in k]
    if missing:
        raise ValueError(f"the checkpoint lacks adapter tensor {missing[0]}: it is of another run")
    with torch.no_grad():
        for name, parameter in interface.items():
            parameter.copy_(state[INTERFACE_PREFIX + name])


def _save_adapter(peft_model: Any, out: Path, interface: dict[str, torch.Tensor]) -> None:
    """peft's adapter files (and interface.safetensors) into `out`, each replaced atomically."""
    tmp = out / ".adapter.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        peft_model.save_pretrained(str(tmp))
        if interface:
            ckpt.save_tensors(dict(interface), tmp / INTERFACE_FILE)
        for path in tmp.iterdir():
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    import json

    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)


def finetune(options: FinetuneOptions, log: Callable[[str], None] = _log) -> FinetuneResult:
    """Train a LoRA adapter of `options.spec` on `options.task` (see the module docstring).

    Raises:
        ValueError / FileNotFoundError: bad options, a missing or malformed task file, an
            unknown task, a model without a tokenizer, a module name LoRA cannot adapt
            (nothing is written).
        FileExistsError: a non-empty `out` without resume.
        ConfigError: a resume with other model or data settings.
        DivergenceError: the loss became NaN or Inf (the last good checkpoint is kept).
    """
    # ------------------------------------------------------------------ setup (nothing written)
    check_options(options)
    out = Path(options.out).expanduser()
    resume_from = _resume_point(options, out)
    examples = load_examples(options.task)
    device = resolve_device(options.device)
    precision = resolve_precision(options.precision, device)
    loaded = load_any(options.spec)
    if loaded.tokenizer is None:
        raise ValueError(
            f"model {options.spec} has no tokenizer: save one beside it (tokenizer.json) or "
            "finetune a folder that has one"
        )
    tokenizer = loaded.tokenizer
    data = tokenize_examples(
        examples,
        tokenizer.encode,
        options.max_seq_len,
        tokenizer.eos_id if options.append_eos else None,
    )
    causal = causal_lm_of(loaded.model, eos_token_id=tokenizer.eos_id)
    record = base_record(causal, spec=options.spec, name=loaded.name, kind=loaded.kind)
    targets = list(options.target_modules or default_target_modules(loaded.model.blocks))
    adapted = check_target_modules(causal, targets)
    torch.manual_seed(options.seed)  # LoRA's A, then the dropout masks: from the seed alone
    peft_model, interface_names = add_lora(
        causal,
        targets,
        rank=options.rank,
        alpha=options.alpha,
        dropout=options.dropout,
        train_interface=options.train_interface,
    )
    peft_model.to(device)
    named = trainable_parameters(peft_model)
    interface_params = dict(_interface_params(peft_model, interface_names))
    steps_per_epoch = math.ceil(len(data.examples) / options.batch_size)
    max_steps = (
        options.max_steps if options.max_steps is not None else options.epochs * steps_per_epoch
    )
    optimizer = torch.optim.AdamW(
        [p for _, p in named],
        lr=options.lr,
        betas=(options.beta1, options.beta2),
        weight_decay=options.weight_decay,
    )
    order = ExampleOrder(len(data.examples), options.seed)

    start_step, answer_tokens, elapsed_before = 0, 0, 0.0
    if resume_from is not None:
        model_state, optimizer_state, trainer_state = ckpt.load_checkpoint(resume_from)
        _load_adapter_state(peft_model, interface_params, model_state)
        optimizer.load_state_dict(optimizer_state)
        order.load_state_dict(trainer_state["order"])
        start_step = int(trainer_state["step"])
        answer_tokens = int(trainer_state["answer_tokens"])
        elapsed_before = float(trainer_state.get("elapsed_s", 0.0))
        ckpt.restore_rng(resume_from)
        log(f"resuming from step {start_step} ({resume_from})")

    # ------------------------------------------------------------------ run folder
    out.mkdir(parents=True, exist_ok=True)
    logger = MetricsLogger(
        out, resume_step=start_step if resume_from else None, tensorboard=options.tensorboard
    )
    autocast = autocast_for(device, precision)
    model = loaded.model  # the Decoder / HFCausalLM, now holding the LoRA layers
    peft_model.train()
    n_trainable = sum(p.numel() for _, p in named)
    log(
        f"{loaded.name}: LoRA r={options.rank} on {len(adapted)} modules ({', '.join(targets)}), "
        f"{n_trainable:,} trainable parameters"
        + (f" incl. interface {', '.join(interface_names)}" if interface_names else "")
        + f"; {len(data.examples)} examples, {max_steps} steps, {device}, {precision}"
    )

    def save(step: int) -> None:
        state = _adapter_state(peft_model, interface_params)
        bad = ckpt.nonfinite_tensors(state)
        if bad:
            raise DivergenceError(
                f"the adapter became non-finite at step {step} ({bad[0]}); no checkpoint was "
                "written: lower --lr, then resume"
            )
        trainer_state = {
            "answer_tokens": answer_tokens,
            "elapsed_s": elapsed_before + (time.perf_counter() - t_start),
            "order": order.state_dict(),
            "options": to_dict(options),
        }
        ckpt.save_checkpoint(
            out, step, state, optimizer.state_dict(), trainer_state, options.keep_last
        )

    # ------------------------------------------------------------------ loop
    progress = None
    if options.progress:
        from tqdm.auto import tqdm

        progress = tqdm(total=max_steps, initial=start_step, desc="finetune", unit="step")
    t_start = time.perf_counter()
    step_seconds: list[float] = []
    last_loss = float("nan")
    step = start_step
    try:
        for step in range(start_step + 1, max_steps + 1):
            t0 = time.perf_counter()
            lr = learning_rate(
                step,
                lr=options.lr,
                warmup_steps=options.warmup_steps,
                max_steps=max_steps,
                min_lr_ratio=options.min_lr_ratio,
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            batch = [data.examples[i] for i in order.next_batch(options.batch_size)]
            inputs, targets_ = collate(batch, pad_id=tokenizer.eos_id)
            inputs, targets_ = inputs.to(device), targets_.to(device)
            with autocast():
                loss = answer_loss(model, inputs, targets_)
            value = float(loss.detach())
            if not math.isfinite(value):
                optimizer.zero_grad(set_to_none=True)
                logger.log({"step": step, "event": "diverged", "loss": value})
                raise DivergenceError(
                    f"the loss became {value} at step {step}; the adapter was not updated. Lower "
                    "--lr or use --precision fp32, then --resume"
                )
            loss.backward()
            max_norm = options.grad_clip if options.grad_clip > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_([p for _, p in named], max_norm))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            n_answer = int((targets_ != -100).sum())
            answer_tokens += n_answer
            seconds = time.perf_counter() - t0
            step_seconds.append(seconds)
            last_loss = value
            logger.log(
                {
                    "step": step,
                    "loss": value,
                    "answer_tokens": n_answer,
                    "tokens": answer_tokens,
                    "lr": lr,
                    "grad_norm": grad_norm,
                    "epoch": order.epochs_done,
                    "step_s": seconds,
                    "elapsed_s": elapsed_before + time.perf_counter() - t_start,
                }
            )
            if progress is not None:
                progress.update(1)
                progress.set_postfix(loss=f"{value:.3f}", lr=f"{lr:.2e}")
            if (options.checkpoint_every and step % options.checkpoint_every == 0) or (
                step == max_steps
            ):
                save(step)
    finally:
        if progress is not None:
            progress.close()
        logger.close()

    # ------------------------------------------------------------------ the adapter
    peft_model.eval()
    _save_adapter(peft_model, out, {n: p.detach() for n, p in interface_params.items()})
    import tying

    record_out = {
        "base": record,
        "lora": {
            "rank": options.rank,
            "alpha": options.alpha,
            "dropout": options.dropout,
            "target_modules": targets,
            "modules": len(adapted),
        },
        "train_interface": options.train_interface,
        "interface_tensors": interface_names,
        "task": options.task,
        "steps": step,
        "tying_version": getattr(tying, "__version__", None),
    }
    write_adapter_record(out, record_out)
    seconds_per_step = sum(step_seconds) / len(step_seconds) if step_seconds else None
    summary = {
        "options": to_dict(options),
        "base": record,
        "adapter": {"folder": str(out), "record": ADAPTER_RECORD, **record_out["lora"]},
        "interface_tensors": interface_names,
        "trainable_parameters": n_trainable,
        "data": {"task": options.task, **data.summary(), "steps_per_epoch": steps_per_epoch},
        "steps": step,
        "max_steps": max_steps,
        "answer_tokens_seen": answer_tokens,
        "final_loss": last_loss if math.isfinite(last_loss) else None,
        "device": str(device),
        "precision": precision,
        "seconds": elapsed_before + time.perf_counter() - t_start,
        "seconds_per_step": seconds_per_step,
    }
    _write_json(out / SUMMARY_FILE, summary)
    return FinetuneResult(out, step, last_loss, seconds_per_step, summary)


def answer_loss(model: Any, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy (nats/token) of the positions whose target is not -100.

    The head runs on those positions only (`interface.loss` of the selected final hidden
    states): the prompt positions cost the trunk, not the V-wide head. Architectures that
    soft-cap their logits go through the model's own loss (every position, same value).

    Args:
        model: a `Decoder` or `HFCausalLM` (`final_hidden`, `interface`).
        inputs: (B, T) token ids.
        targets: (B, T) next tokens, -100 where no loss is taken.
    """
    if getattr(model, "logit_softcap", None):
        return model(inputs, targets)
    hidden = model.final_hidden(inputs)
    keep = targets != -100
    return model.interface.loss(hidden[keep], targets[keep])


def _interface_params(peft_model: Any, names: list[str]) -> list[tuple[str, torch.nn.Parameter]]:
    """The trained interface parameters by attribute name (in `names` order)."""
    if not names:
        return []
    from tying.adapters import interface_of

    own = dict(interface_of(peft_model).named_parameters())
    return [(n, own[n]) for n in names]
