"""Distillation from a frozen teacher during training (the `distill` section of a run).

    loss = (1 − α)·CE + α·τ²·KL(teacher_τ ‖ student_τ)

CE is the student's next-token cross-entropy, KL the divergence of the
student's tempered next-token distribution from the teacher's, both means over
the tokens of the batch (nats). The teacher runs on the same inputs, frozen
(`requires_grad=False`, eval mode), under bf16 autocast when the run uses bf16;
it is not a submodule of the objective, so it is in neither the optimizer nor
the checkpoints. Both heads' logits are formed chunk by chunk
(`TokenInterface.distillation_loss`), never the N×V logits at once.

`teacher: initial` is the run's own `model` spec loaded again, unconverted:
the pretrained model as it was before its interface was re-expressed.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tying.config import ConfigError
from tying.train.config import INITIAL, DistillConfig
from tying.train.resolve import as_interface_model, resolve_model

__all__ = [
    "INITIAL",
    "DistillConfig",
    "DistillationObjective",
    "load_teacher",
    "strip_student_prefix",
]


def _freeze(model: nn.Module) -> nn.Module:
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def load_teacher(cfg: DistillConfig, model_spec: str | None) -> nn.Module:
    """The frozen teacher: any model SPEC (`tying.train.resolve.resolve_model`: a transformers
    model, converted with unchanged logits and wrapped in `HFCausalLM`, or a training run's
    model), with `final_hidden` and `interface`.

    Args:
        cfg: the `distill` section (its teacher must be set).
        model_spec: the run's `model` spec (needed for `teacher: initial`).

    Raises:
        ConfigError: `teacher: initial` in scratch mode (there is no pretrained model).
    """
    spec = cfg.teacher
    if spec is None:
        raise ConfigError("distill.teacher is not set")
    if spec == INITIAL:
        if model_spec is None:
            raise ConfigError(
                "distill.teacher=initial needs teacher mode (model=SPEC): a scratch run has no "
                "model before conversion; name a teacher spec instead"
            )
        spec = model_spec
    return _freeze(as_interface_model(resolve_model(spec).model))


class DistillationObjective(nn.Module):
    """The training objective with distillation: `forward(inputs, targets) -> (loss, ce, kl)`.

    The student is the only submodule (its parameters and state dict are the
    objective's, under the prefix `student.`; use `.student` for checkpoints);
    the teacher is held outside the module tree.

    Args:
        student: a model with `final_hidden(ids) -> (B, T, d)` and `interface`.
        teacher: a frozen model with the same methods and vocabulary.
        alpha: α of `DistillConfig`.
        temperature: τ of `DistillConfig`.
        teacher_autocast: bf16 autocast for the teacher's forward pass.
    """

    def __init__(
        self,
        student: nn.Module,
        teacher: nn.Module,
        alpha: float,
        temperature: float,
        teacher_autocast: bool = True,
    ) -> None:
        super().__init__()
        self.student = student
        object.__setattr__(self, "_teacher", teacher)
        self.alpha = float(alpha)
        self.temperature = float(temperature)
        self.teacher_autocast = bool(teacher_autocast)
        if teacher.interface.vocab_size != student.interface.vocab_size:
            raise ConfigError(
                f"the distillation teacher has V={teacher.interface.vocab_size} but the student "
                f"V={student.interface.vocab_size}: distillation needs the same tokenizer"
            )

    @property
    def teacher(self) -> nn.Module:
        """The frozen teacher (not a submodule)."""
        return self._teacher

    @property
    def interface(self) -> Any:
        """The student's token interface."""
        return self.student.interface

    @property
    def blocks(self) -> nn.ModuleList:
        """The student's blocks (FSDP units)."""
        return self.student.blocks

    def teacher_hidden(self, input_ids: Tensor) -> Tensor:
        """The teacher's final hidden states (B, T, d_t), without gradient."""
        device = input_ids.device.type
        context = (
            torch.autocast(device, dtype=torch.bfloat16) if self.teacher_autocast else nullcontext()
        )
        with torch.no_grad(), context:
            return self._teacher.final_hidden(input_ids)

    def forward(self, input_ids: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor] | Tensor:
        """(loss, ce, kl) for next-token targets (B, T) (`-100` skipped); only loss has a gradient.

        In eval mode (validation) it returns the student's mean cross-entropy alone, so
        that validation losses compare across runs with and without distillation.
        """
        if not self.training:
            return self.student(input_ids, targets)
        hidden = self.student.final_hidden(input_ids)
        t_hidden = self.teacher_hidden(input_ids)
        if _softcap(self.student) is None and _softcap(self._teacher) is None:
            d, d_t = hidden.shape[-1], t_hidden.shape[-1]
            return self.student.interface.distillation_loss(
                hidden.reshape(-1, d),
                targets.reshape(-1),
                self._teacher.interface,
                t_hidden.reshape(-1, d_t),
                alpha=self.alpha,
                temperature=self.temperature,
            )
        return self._full_logits_loss(hidden, t_hidden, targets)

    def _full_logits_loss(
        self, hidden: Tensor, t_hidden: Tensor, targets: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The same loss on full logits, for soft-capped heads (Gemma 3)."""
        s = self.student.logits(hidden).float().flatten(0, -2)
        with torch.no_grad():
            t = self._teacher.logits(t_hidden).float().flatten(0, -2)
        y = targets.reshape(-1)
        valid = y != -100
        ce = F.cross_entropy(s, y, ignore_index=-100)
        tau = self.temperature
        kl = F.kl_div(
            F.log_softmax(s[valid] / tau, -1),
            F.log_softmax(t[valid] / tau, -1),
            log_target=True,
            reduction="batchmean",
        )
        loss = (1 - self.alpha) * ce + self.alpha * tau**2 * kl
        return loss, ce.detach(), kl.detach()


#: Prefix of the student's parameter names inside a `DistillationObjective`.
STUDENT_PREFIX = "student."


def strip_student_prefix(state: dict[str, Any]) -> dict[str, Any]:
    """A model state dict of the objective as the student's own (keys without `student.`)."""
    return {k.removeprefix(STUDENT_PREFIX): v for k, v in state.items()}


def add_student_prefix(state: dict[str, Any]) -> dict[str, Any]:
    """The student's model state dict as the objective's (keys with `student.`)."""
    return {STUDENT_PREFIX + k: v for k, v in state.items()}


def rename_optimizer_state(state: dict[str, Any], rename: Any) -> dict[str, Any]:
    """An optimizer state dict (`get_optimizer_state_dict` layout, keyed by parameter names)
    with every parameter name passed through `rename`."""
    out = dict(state)
    out["state"] = {rename(k): v for k, v in state.get("state", {}).items()}
    out["param_groups"] = [
        {**g, "params": [rename(n) for n in g.get("params", [])]}
        for g in state.get("param_groups", [])
    ]
    return out


def _softcap(model: nn.Module) -> float | None:
    cap = getattr(model, "logit_softcap", None)
    return float(cap) if cap else None
