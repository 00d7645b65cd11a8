"""How far does each conversion move a pretrained teacher before any training?

For a teacher causal LM and held-out text, the loss (nats/token) and the KL
divergence KL(teacher ‖ converted) (nats/token, averaged over positions) right
after conversion (step 0), for TT and for PIT with each `t_init`.

PIT forces W_out E = I_d, so it cannot keep both the teacher's embedding and
its head: "output" keeps the head (W_out = E0^T) and replaces the embedding by
pinv(E0^T) = E0 (E0^T E0)^{-1}; "input" keeps the embedding and replaces the
head; "identity" replaces both by the orthonormal polar factor U of E0.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VARIANTS: tuple[tuple[str, str, str | None], ...] = (
    ("tt", "tt", None),
    ("pit/identity", "pit", "identity"),
    ("pit/output", "pit", "output"),
    ("pit/input", "pit", "input"),
)


@torch.no_grad()
def loss_and_kl(
    logits_fn: Callable[[Tensor], Tensor],
    teacher_logits: list[Tensor],
    batches: list[tuple[Tensor, Tensor]],
) -> dict[str, float]:
    """Mean next-token loss and KL(teacher ‖ model), both in nats per token."""
    loss_sum = kl_sum = 0.0
    count = 0
    for (inputs, targets), t_logits in zip(batches, teacher_logits, strict=True):
        logp = F.log_softmax(logits_fn(inputs).float(), dim=-1)
        t_logp = F.log_softmax(t_logits.float(), dim=-1)
        loss_sum += float(F.nll_loss(logp.flatten(0, 1), targets.flatten(), reduction="sum"))
        kl_sum += float((t_logp.exp() * (t_logp - logp)).sum())
        count += targets.numel()
    return {"loss": loss_sum / count, "kl": kl_sum / count}


def conversion_table(
    teacher: nn.Module,
    batches: Iterable[tuple[Tensor, Tensor]],
    convert: Callable[..., Any],
    wrap: Callable[[nn.Module], nn.Module],
) -> dict[str, Any]:
    """Loss and KL to the teacher at step 0 for each conversion in `VARIANTS`.

    Args:
        teacher: an unconverted transformers causal LM (left unchanged).
        batches: (inputs, targets) pairs of shape (B, T), targets shifted by one.
        convert: `tying.hf.convert`.
        wrap: builds a model with `forward(ids) -> logits (B, T, V)` from a converted model
            (`tying.hf.HFCausalLM`).

    Returns:
        {"teacher": {"loss", "ppl"}, "variants": {name: {"loss", "ppl", "kl", "tie", "t_init"}},
         "tokens": n}
    """
    batches = list(batches)
    teacher.eval()
    teacher_logits = [teacher(input_ids=x).logits for x, _ in batches]
    base = loss_and_kl(lambda x: teacher(input_ids=x).logits, teacher_logits, batches)
    rows: dict[str, Any] = {}
    for name, tie, t_init in VARIANTS:
        model = copy.deepcopy(teacher)
        options = {"t_init": t_init} if t_init else {}
        convert(model, tie=tie, **options)
        wrapped = wrap(model).eval()
        result = loss_and_kl(lambda x, m=wrapped: m(x), teacher_logits, batches)
        rows[name] = {
            **result,
            "ppl": math.exp(min(result["loss"], 700)),
            "tie": tie,
            "t_init": t_init,
        }
        del model, wrapped
    return {
        "teacher": {"loss": base["loss"], "ppl": math.exp(base["loss"])},
        "variants": rows,
        "tokens": sum(t.numel() for _, t in batches),
        "unit": "nats/token",
    }
