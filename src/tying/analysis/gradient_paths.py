"""The gradient that reaches the token interface from each side.

For a tied matrix E (TT), dL/dE = G_in + G_out: G_in is the sparse input-side
part (only the rows of tokens looked up receive gradient, through the
embedding lookup) and G_out the dense output-side part (every row, through the
head). Both are measured here as gradients of the same V×d weight, summed over
all micro-batches of an optimizer step (not the activation gradient at the
input, and not only the last micro-batch), before clipping, and averaged over
data-parallel processes like the parameter gradient itself.

For PIT the same split applies to the Cholesky parameter L (through the
embedding's triangular solves vs through the head) and to Z when trainable;
for untied models the "input" side is E and the "output" side is U. Which parameters are
split is the interface's own answer (`TokenInterface.gradient_splits`, `rows_parameter`).

Per optimizer step, `GradientPathTracker.finish_step()` returns (Frobenius norms):

    grad_in_norm      ||G_in||          of the primary matrix (TT: E; PIT: L; untied: E)
    grad_out_norm     ||G_out||         (untied: ||dL/dU||)
    grad_total_norm   ||G_in + G_out||  (untied: sqrt(||G_in||² + ||G_out||²))
    grad_out_share    ||G_out|| / (||G_in|| + ||G_out||), in [0, 1]
    rows_touched_in   rows of the V×d input gradient that are non-zero
                      (TT, untied, and PIT with trainable Z)

and, for PIT, the same four norms per parameter as `grad_L_*` and `grad_Z_*`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from tying.interface import TokenInterface


def _split_norms(g_in: Tensor | None, g_out: Tensor | None, same_matrix: bool) -> dict[str, float]:
    n_in = float(g_in.norm()) if g_in is not None else 0.0
    n_out = float(g_out.norm()) if g_out is not None else 0.0
    if same_matrix:
        if g_in is None:
            total = n_out
        elif g_out is None:
            total = n_in
        else:
            total = float((g_in + g_out).norm())
    else:
        total = (n_in**2 + n_out**2) ** 0.5
    share = n_out / (n_in + n_out) if (n_in + n_out) > 0 else float("nan")
    return {"in_norm": n_in, "out_norm": n_out, "total_norm": total, "out_share": share}


class GradientPathTracker:
    """Accumulates each side's gradient of the interface parameters over one optimizer step.

    Usage:
        tracker = GradientPathTracker(interface)
        tracker.start_step()
        for micro_batch in ...: loss.backward()
        row = tracker.finish_step()     # before clipping / optimizer.step()
        tracker.close()

    Args:
        interface: the model's token interface.
    """

    def __init__(self, interface: TokenInterface) -> None:
        self.interface = interface
        self.parts: dict[tuple[str, str], Tensor] = {}
        interface.set_path_hook(self._record)

    def _record(self, side: str, name: str, grad: Tensor) -> None:
        key = (name, side)
        g = grad.detach()
        if key in self.parts:
            self.parts[key].add_(g.to(self.parts[key].dtype))
        else:
            self.parts[key] = g.to(
                torch.float64 if g.dtype == torch.float64 else torch.float32
            ).clone()

    def start_step(self) -> None:
        """Forget the previous step's parts."""
        self.parts.clear()

    def part(self, name: str, side: str) -> Tensor | None:
        """The accumulated gradient of parameter `name` along `side` ("input"/"output"), or None."""
        return self.parts.get((name, side))

    def _all_reduce(self) -> None:
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            world = dist.get_world_size()
            for t in self.parts.values():
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                t.div_(world)

    def finish_step(self) -> dict[str, Any]:
        """Metrics of the step just accumulated (see the module docstring)."""
        self._all_reduce()
        iface = self.interface
        row: dict[str, Any] = {}
        for split in iface.gradient_splits():
            norms = _split_norms(
                self.part(split.input_name, "input"),
                self.part(split.output_name, "output"),
                split.shared,
            )
            prefix = f"grad_{split.prefix}_" if split.prefix else "grad_"
            for key, value in norms.items():
                row[prefix + key] = value
        rows_name = iface.rows_parameter()
        rows_source = self.part(rows_name, "input") if rows_name is not None else None
        if rows_source is not None:
            row["rows_touched_in"] = int((rows_source != 0).any(dim=1).sum())
        return row

    def close(self) -> None:
        """Remove the hook from the interface."""
        self.interface.set_path_hook(None)
        self.parts.clear()
