"""What a teacher predicts on calibration text, and how far a conversion moves it (step 0).

On token windows (inputs, targets) of calibration text:

- `capture_teacher(model, batches)` runs the unconverted model once and keeps what its head
  reads: the final hidden states (B, T, d) per window and the head (weight, bias,
  soft-capping). No V-sized logits are stored.
- `step0_kl(model, captured)` is the damage of a conversion: the mean over tokens of
  KL(teacher ‖ converted) = Σ_v p_v (log p_v − log q_v) in nats/token, with the converted
  model's loss and the teacher's on the same targets.

Logits are formed chunk by chunk; nothing holds N×V. Both take any model a
`tying.conversion.model` kind reads: a transformers causal LM (once `tying.hf` is imported,
also inside an HFCausalLM or peft wrapper) or an `InterfaceModel` such as our decoder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tying.conversion.model import evaluating, parts_of, softcapped

Batch = tuple[Tensor, Tensor]


@dataclass
class TeacherCapture:
    """What a teacher predicts on calibration windows, without its N×V logits.

    Attributes:
        batches: the (inputs, targets) windows, (B, T) each, targets shifted by one.
        hidden: the teacher's final hidden states per window, (B, T, d) float32.
        weight: the teacher's head weight (V, d) (`nn.Linear` layout), detached.
        bias: the head bias (V,) or None.
        softcap: the logit soft-capping c (logits <- c·tanh(logits/c)) or None.
    """

    batches: list[Batch]
    hidden: list[Tensor]
    weight: Tensor
    bias: Tensor | None
    softcap: float | None

    @property
    def tokens(self) -> int:
        """Number of target tokens."""
        return sum(int(t.numel()) for _, t in self.batches)

    def subset(self, max_tokens: int) -> TeacherCapture:
        """The first windows holding at most `max_tokens` targets (at least one window)."""
        n, count = 0, 0
        for _, t in self.batches:
            if n and count + t.numel() > max_tokens:
                break
            n, count = n + 1, count + int(t.numel())
        return TeacherCapture(
            self.batches[:n], self.hidden[:n], self.weight, self.bias, self.softcap
        )

    def split(self, first_tokens: int) -> tuple[TeacherCapture, TeacherCapture]:
        """(the first windows up to `first_tokens` targets, the rest)."""
        head = self.subset(first_tokens)
        n = len(head.batches)
        rest = TeacherCapture(
            self.batches[n:], self.hidden[n:], self.weight, self.bias, self.softcap
        )
        return head, rest


@torch.no_grad()
def capture_teacher(model: nn.Module, batches: Sequence[Batch]) -> TeacherCapture:
    """Run a model (before its conversion) on `batches` and keep what its head reads.

    Args:
        model: a transformers causal LM of a supported family or an InterfaceModel
            (converted or not: its head as it is now is the teacher).
        batches: (inputs, targets) windows of shape (B, T).

    Raises:
        ValueError: no batches.
    """
    batches = list(batches)
    if not batches:
        raise ValueError("no calibration windows: give at least one (inputs, targets) batch")
    parts = parts_of(model)
    with evaluating(parts.inner):
        hidden = [parts.trunk(x).float() for x, _ in batches]
    return TeacherCapture(
        batches=batches,
        hidden=hidden,
        weight=parts.head_weight,
        bias=parts.head_bias,
        softcap=parts.softcap,
    )


def _kl_and_ce_sums(
    hidden: Tensor,
    head: Callable[[Tensor], Tensor],
    t_hidden: Tensor,
    capture: TeacherCapture,
    targets: Tensor,
    chunk: int = 256,
) -> tuple[float, float, float]:
    """Sums over tokens of KL(teacher ‖ model), the model's CE and the teacher's CE (no grad)."""
    kl = ce = t_ce = 0.0
    h2 = hidden.reshape(-1, hidden.shape[-1])
    t2 = t_hidden.reshape(-1, t_hidden.shape[-1])
    y = targets.reshape(-1)
    for i in range(0, h2.shape[0], chunk):
        s = head(h2[i : i + chunk]).float()
        t = t2[i : i + chunk].float() @ capture.weight.float().T
        if capture.bias is not None:
            t = t + capture.bias.float()
        t = softcapped(t, capture.softcap)
        log_q = torch.log_softmax(s, dim=-1)
        log_p = torch.log_softmax(t, dim=-1)
        kl += float((log_p.exp() * (log_p - log_q)).sum())
        yi = y[i : i + chunk]
        ce += float(torch.nn.functional.nll_loss(log_q, yi, reduction="sum"))
        t_ce += float(torch.nn.functional.nll_loss(log_p, yi, reduction="sum"))
    return kl, ce, t_ce


@torch.no_grad()
def step0_kl(model: nn.Module, capture: TeacherCapture) -> dict[str, float]:
    """The damage of a conversion: KL(teacher ‖ converted) and both losses on the captured windows.

    Args:
        model: the converted model (transformers, also inside an HFCausalLM / peft wrapper,
            or an InterfaceModel).
        capture: `capture_teacher` of the same model before conversion.

    Returns:
        {"kl", "loss", "teacher_loss"} in nats/token (means over tokens) and "tokens".
    """
    parts = parts_of(model)
    kl = ce = t_ce = 0.0
    with evaluating(parts.inner):
        for (x, y), th in zip(capture.batches, capture.hidden, strict=True):
            h = parts.trunk(x)
            k, c, tc = _kl_and_ce_sums(h, parts.head, th, capture, y)
            kl, ce, t_ce = kl + k, ce + c, t_ce + tc
    n = capture.tokens
    return {"kl": kl / n, "loss": ce / n, "teacher_loss": t_ce / n, "tokens": n}
