"""The tuned lens (Belrose et al. 2023): one affine translator per residual entry.

For entry i = 0..L−1 (0 = embedding output, i = output of block i), the translator

    τ_i(h) = h + h A_iᵀ + b_i          A_i (d×d), b_i (d,), both initialised at 0

is applied before the model's final norm and head, so an untrained tuned lens is the logit
lens. Entry L is the model's own output and keeps the identity (no translator). The
translators are trained, with the model frozen, to minimise the mean over tokens of
KL(final ‖ lens) (nats while training, reported in bits), each position matched to the
model's distribution at the same position.

Training follows the tuned-lens library's recipe: SGD with Nesterov momentum β = 0.9 at
learning rate (1 − β) (PyTorch's momentum sums gradients with weight 1/(1 − β), so this is
an effective step of 1), weight decay 1e-3, linear decay to 0, gradient-norm clipping at 1;
or Adam (β₁ = 0.9, lr 1e-3, amsgrad, linear warm-up over min(1000, steps/5) steps). The
budget is `steps` × `tokens_per_step` tokens.

A lens is saved as a folder: ``lens.safetensors`` (``weight`` (L, d, d) = A, ``bias``
(L, d) = b) and ``config.json`` (format, d_model, n_entries, model name, training record).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from tying.errors import InvalidInputError, MissingFileError, read_json
from tying.lens.evaluate import LensKL, evaluate_lens
from tying.lens.head import LensHead
from tying.lens.kl import LN2
from tying.loader import LoadedModel

#: `config.json` "format" of a saved tuned lens.
FORMAT = "tying.tuned_lens"
FORMAT_VERSION = 1
WEIGHTS_FILE = "lens.safetensors"
CONFIG_FILE = "config.json"
OPTIMIZERS = ("sgd", "adam")


class TunedLens(nn.Module):
    """Affine translators τ_i(h) = h + h A_iᵀ + b_i for entries 0..L−1 (identity at entry L).

    Args:
        d_model: d.
        n_entries: L + 1, the number of residual entries of the model.
        model_name: name of the model the lens belongs to (checked on load, informative).

    Attributes:
        weight: (L, d, d) parameter, A_i = weight[i], zero-initialised.
        bias: (L, d) parameter, b_i = bias[i], zero-initialised.
        training_record: how it was trained (steps, tokens, optimizer, final KL), JSON-able.
    """

    kind = "tuned"

    def __init__(self, d_model: int, n_entries: int, model_name: str = "") -> None:
        super().__init__()
        if d_model < 1 or n_entries < 2:
            raise ValueError(
                f"a tuned lens needs d_model >= 1 and n_entries >= 2 (embedding + one block), "
                f"got d_model={d_model}, n_entries={n_entries}"
            )
        self.d_model = int(d_model)
        self.n_entries = int(n_entries)
        self.model_name = model_name
        self.weight = nn.Parameter(torch.zeros(n_entries - 1, d_model, d_model))
        self.bias = nn.Parameter(torch.zeros(n_entries - 1, d_model))
        self.training_record: dict[str, Any] = {}

    @classmethod
    def for_model(cls, model: LoadedModel) -> TunedLens:
        """A zero (= logit lens) tuned lens shaped for `model`, on the model's device."""
        return cls(model.d_model, model.n_entries, model.name).to(model.device)

    def _index(self, index: int) -> int:
        if not -self.n_entries <= index < self.n_entries:
            raise IndexError(
                f"entry {index} is out of range for a lens of {self.n_entries} entries "
                f"(0 = embedding output .. {self.n_entries - 1} = last block)"
            )
        return index % self.n_entries

    def translate(self, state: Tensor, index: int) -> Tensor:
        """τ_index(state) = state + state A_indexᵀ + b_index: (..., d) -> (..., d).

        Entry L (the last) is returned unchanged. The translator is cast to the state's dtype
        (under autocast, F.linear runs in the autocast dtype).
        """
        index = self._index(index)
        if index == self.n_entries - 1:
            return state
        if state.shape[-1] != self.d_model:
            raise ValueError(
                f"state has width {state.shape[-1]}, the lens was built for d={self.d_model}"
            )
        A, b = self.weight[index], self.bias[index]
        return state + F.linear(state, A.to(state.dtype), b.to(state.dtype))

    def check_compatible(self, model: LoadedModel) -> None:
        """Raise ValueError unless the lens fits `model` (same d and number of entries)."""
        if (self.d_model, self.n_entries) != (model.d_model, model.n_entries):
            raise InvalidInputError(
                f"the tuned lens (model {self.model_name!r}: d={self.d_model}, "
                f"{self.n_entries} entries) does not fit model {model.name!r} (d={model.d_model}, "
                f"{model.n_entries} entries): train a lens for this model"
            )

    # ------------------------------------------------------------ persistence
    def save(self, folder: str | Path) -> Path:
        """Write ``lens.safetensors`` and ``config.json`` into `folder`; returns the folder."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {
            "weight": self.weight.detach().float().cpu().contiguous(),
            "bias": self.bias.detach().float().cpu().contiguous(),
        }
        save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": FORMAT})
        config = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "d_model": self.d_model,
            "n_entries": self.n_entries,
            "model": self.model_name,
            "translator": "h + h A^T + b per entry 0..L-1, identity at entry L",
            "training": self.training_record,
        }
        (folder / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path, map_location: str | torch.device = "cpu") -> TunedLens:
        """A lens saved by `save`.

        Raises:
            FileNotFoundError: the folder lacks lens.safetensors or config.json.
            ValueError: not a tuned-lens folder, or tensors of the wrong shape.
        """
        folder = Path(folder)
        for name in (WEIGHTS_FILE, CONFIG_FILE):
            if not (folder / name).is_file():
                raise MissingFileError(
                    f"{folder / name} is missing: {folder} is not a tuned lens saved by "
                    "TunedLens.save (expected lens.safetensors and config.json)"
                )
        config = read_json(folder / CONFIG_FILE, "tuned lens config")
        if config.get("format") != FORMAT:
            raise InvalidInputError(
                f"{folder / CONFIG_FILE} has format {config.get('format')!r}, expected {FORMAT!r}"
            )
        lens = cls(int(config["d_model"]), int(config["n_entries"]), str(config.get("model", "")))
        tensors = load_file(str(folder / WEIGHTS_FILE), device=str(map_location))
        expected = {"weight": tuple(lens.weight.shape), "bias": tuple(lens.bias.shape)}
        got = {k: tuple(v.shape) for k, v in tensors.items()}
        if got != expected:
            raise InvalidInputError(
                f"{folder / WEIGHTS_FILE} holds tensors {got}, expected {expected} from its config"
            )
        with torch.no_grad():
            lens.weight.copy_(tensors["weight"])
            lens.bias.copy_(tensors["bias"])
        lens.training_record = dict(config.get("training") or {})
        return lens.to(map_location)


@dataclass
class TunedLensTraining:
    """Settings of `train_tuned_lens` (defaults: the tuned-lens library's SGD recipe).

    Attributes:
        steps: optimizer steps.
        tokens_per_step: tokens per optimizer step (the caller's batches hold them; recorded).
        optimizer: "sgd" (Nesterov) or "adam".
        lr: learning rate; None: 1 − momentum for SGD, 1e-3 for Adam.
        momentum: SGD momentum, or Adam's β₁.
        weight_decay: on A and b (pulls the lens towards the logit lens).
        grad_clip: max gradient norm over all translators (0: no clipping).
        warmup_steps: linear warm-up; None: 0 for SGD, min(1000, steps // 5) for Adam.
        seed: order of the training windows (recorded).
    """

    steps: int = 250
    tokens_per_step: int = 4096
    optimizer: str = "sgd"
    lr: float | None = None
    momentum: float = 0.9
    weight_decay: float = 1e-3
    grad_clip: float = 1.0
    warmup_steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise InvalidInputError(
                f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}"
            )
        if self.steps < 1 or self.tokens_per_step < 1:
            raise InvalidInputError(
                f"steps and tokens_per_step must be >= 1, got {self.steps}, {self.tokens_per_step}"
            )
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")

    def resolved_lr(self) -> float:
        """The learning rate actually used."""
        if self.lr is not None:
            return float(self.lr)
        return 1.0 - self.momentum if self.optimizer == "sgd" else 1e-3

    def resolved_warmup(self) -> int:
        """Warm-up steps actually used."""
        if self.warmup_steps is not None:
            return int(self.warmup_steps)
        return 0 if self.optimizer == "sgd" else min(1000, self.steps // 5)


@dataclass
class TrainingHistory:
    """Per-step mean KL(final ‖ tuned lens) over the translated entries 0..L−1 (bits/token),
    measured on the training tokens before each step's update."""

    kl: list[float] = field(default_factory=list)
    tokens: int = 0


def _make_optimizer(params: list[Tensor], cfg: TunedLensTraining) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            params,
            lr=cfg.resolved_lr(),
            momentum=cfg.momentum,
            nesterov=cfg.momentum > 0,
            weight_decay=cfg.weight_decay,
        )
    return torch.optim.Adam(
        params,
        lr=cfg.resolved_lr(),
        betas=(cfg.momentum, 0.999),
        amsgrad=True,
        weight_decay=cfg.weight_decay,
    )


def _lr_factor(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up over `warmup` steps, then linear decay to 0 at `steps` (step is 0-based)."""
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (steps - step) / max(1, steps - warmup))


@contextmanager
def _frozen(module: nn.Module):
    """Turn off requires_grad on every parameter of `module` for the block, then restore it."""
    flags = [(p, p.requires_grad) for p in module.parameters()]
    for p, _ in flags:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)


def train_tuned_lens(
    model: LoadedModel,
    steps: Iterable[list[Tensor]],
    config: TunedLensTraining | None = None,
    *,
    lens: TunedLens | None = None,
    precision: str = "fp32",
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    device: torch.device | str | None = None,
    chunk_tokens: int = 1024,
    progress: bool = False,
) -> tuple[TunedLens, TrainingHistory]:
    """Train a tuned lens on `model` (frozen) to minimise mean KL(final ‖ lens).

    Args:
        model: the model.
        steps: one item per optimizer step: the list of micro-batches (B, T) of that step
            (see `tying.lens.data.training_steps`); exactly `config.steps` items are used.
        config: optimizer settings (default `TunedLensTraining()`).
        lens: a lens to continue training (default: a zero lens = the logit lens).
        precision: dtype of the head products ("fp32", "bf16" or "auto", as in
            `evaluate_lens`); the gradient ∂KL/∂h = (q − p) U is a second product in the same
            dtype, computed in the forward pass (`LensHead.kl_with_grad`). The translators,
            the targets, log-sum-exp and KL stay in float32.
        autocast: factory of the precision context of the model's forward pass (default:
            none, the model's own dtype).
        device: where batches go (default: the model's device).
        chunk_tokens: positions per head product and backward pass (memory O(chunk × V)).
        progress: show a progress bar.

    Returns:
        (the trained lens in eval mode, its TrainingHistory).

    Raises:
        ValueError: fewer step items than config.steps, or a lens that does not fit the model.
    """
    cfg = config or TunedLensTraining()
    device = model.device if device is None else torch.device(device)
    lens = lens if lens is not None else TunedLens.for_model(model)
    lens.check_compatible(model)
    lens.to(device).train()
    params = [p for p in lens.parameters() if p.requires_grad]
    optimizer = _make_optimizer(params, cfg)
    warmup = cfg.resolved_warmup()
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: _lr_factor(s, cfg.steps, warmup)
    )
    head = LensHead.of(model, precision)
    history = TrainingHistory()
    bar = tqdm(total=cfg.steps, disable=not progress, desc="tuned lens")
    done = 0
    with _frozen(model.model):
        for micro_batches in steps:
            if done == cfg.steps:
                break
            n_step = sum(ids.numel() for ids in micro_batches)
            step_kl = 0.0
            optimizer.zero_grad(set_to_none=True)
            for ids in micro_batches:
                step_kl += _accumulate(
                    model, lens, head, ids.to(device), n_step, autocast, chunk_tokens
                )
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            optimizer.step()
            scheduler.step()
            done += 1
            history.kl.append(step_kl / LN2)
            history.tokens += n_step
            bar.update(1)
            bar.set_postfix(kl_bits=f"{history.kl[-1]:.3f}")
    bar.close()
    if done < cfg.steps:
        raise ValueError(f"the step iterator ended after {done} of {cfg.steps} steps")
    lens.eval()
    lens.training_record = {
        **asdict(cfg),
        "lr": cfg.resolved_lr(),
        "warmup_steps": warmup,
        "tokens": history.tokens,
        "final_train_kl_bits_per_token": history.kl[-1],
        "objective": "mean over tokens of KL(final || lens), per entry 0..L-1",
    }
    return lens, history


def _accumulate(
    model: LoadedModel,
    lens: TunedLens,
    head: LensHead,
    ids: Tensor,
    n_step: int,
    autocast: Callable[[], AbstractContextManager],
    chunk_tokens: int,
) -> float:
    """Backward of Σ_chunks Σ_i KL_i(chunk) / n_step over the translated entries i = 0..L−1 of
    one micro-batch; returns that KL sum (nats) averaged over the entries."""
    n_translated = model.n_entries - 1
    with torch.no_grad(), autocast():
        states, final = model.states_and_final(ids)
    n = ids.numel()
    flat = [s.reshape(n, s.shape[-1]).float() for s in states[:n_translated]]
    final = final.reshape(n, final.shape[-1])
    total = 0.0
    for start in range(0, n, chunk_tokens):
        stop = min(start + chunk_tokens, n)
        target = head.target(final[start:stop])
        loss = 0.0
        for i, state in enumerate(flat):
            hidden = model.final_norm(lens.translate(state[start:stop], i))
            loss = loss + head.kl_with_grad(hidden, target).sum()
        loss = loss / n_step
        loss.backward()
        total += float(loss.detach()) / n_translated
    return total


def tuned_lens_kl(
    model: LoadedModel, lens: TunedLens, batches: Iterable[Tensor], **options: Any
) -> LensKL:
    """Per-entry KL(final ‖ tuned lens) in bits/token; `options` as in `evaluate_lens`."""
    lens.check_compatible(model)
    return evaluate_lens(model, lens, batches, **options)


def describe_training(cfg: TunedLensTraining) -> str:
    """One line describing the optimizer settings, for logs."""
    return (
        f"{cfg.optimizer} lr={cfg.resolved_lr():.3g} momentum={cfg.momentum} "
        f"weight_decay={cfg.weight_decay} warmup={cfg.resolved_warmup()} clip={cfg.grad_clip}"
    )
