"""Which token rows an update trains: `tying finetune --train-tokens none|new|all`.

    rows = select_token_rows(interface, "new", first_new=V_old)   # before the optimizer is built
    rows.names                                                     # interface tensors that train
    optimizer.register_step_post_hook(lambda *_: rows.after_step())

| mode | untied | TT | PIT |
|---|---|---|---|
| none | nothing (`--train-interface` decides) | | |
| new | rows ≥ V_old of E and W_out | rows ≥ V_old of the one matrix (both ends: the tie holds by construction) | rows ≥ V_old of Z, kept on the manifold, and L |
| all | E and W_out | the one matrix | Z (polar retraction after every step) and L |

`new` on a vocabulary tensor: the gradient of the old rows is zeroed by a tensor hook (so
gradient clipping sees the new rows' norm only) and, after every optimizer step, the old rows
are copied back from a saved copy, so they are bitwise unchanged whatever AdamW's weight decay
does. A manifold tensor (PIT's Z) cannot keep its old rows bitwise while the new rows N move
(docs/interface.md, "Adding tokens to PIT"): after every step its old rows are set to
Z₀ (I − NᵀN)^{1/2}, Z₀ = Z_old (Z_oldᵀ Z_old)^{-1/2} at the start (the symmetric completion: Zᵀ Z = I_d exactly, old rows moved by O(‖N‖²)).
The old rows of a non-manifold tensor never change; the interface's d-sized parameters (PIT's
L, an input bias) train with `new` as well, V-sized ones (an output bias) do not.

The module never branches on the tie: it reads `vocab_tensors` and `manifold_tensors` of the
interface.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from tying.errors import InvalidInputError
from tying.interface import TokenInterface

TRAIN_TOKENS = ("none", "new", "all")


@dataclass
class TokenRows:
    """The token rows an update trains, and what keeps the others fixed.

    Attributes:
        mode: none, new or all.
        first_new: the first new id (V_old), or None for all/none.
        names: the interface parameters that train (attribute names).
        fixes: run after every optimizer step (restore / project).
    """

    mode: str
    first_new: int | None
    names: list[str] = field(default_factory=list)
    fixes: list[Callable[[], None]] = field(default_factory=list)

    @torch.no_grad()
    def after_step(self) -> None:
        """Restore the old rows (re-project a manifold tensor)."""
        for fix in self.fixes:
            fix()


def _as_parameter(interface: TokenInterface, name: str) -> nn.Parameter:
    """The interface tensor `name` as a parameter (a frozen buffer becomes one, same key)."""
    tensor = getattr(interface, name)
    if isinstance(tensor, nn.Parameter):
        return tensor
    delattr(interface, name)
    parameter = nn.Parameter(tensor.detach().clone())
    interface.register_parameter(name, parameter)
    return parameter


def _sym_power(C: Tensor, power: float) -> Tensor:
    """C^power of a symmetric positive definite C (float64, by eigh)."""
    w, Q = torch.linalg.eigh((C + C.T) / 2)
    if bool((w <= 0).any()):
        raise FloatingPointError("the new rows of Z grew to norm >= 1: lower the learning rate")
    return (Q * w.pow(power)) @ Q.T


def _symmetric_completion(z0: Tensor, new_rows: Tensor) -> Tensor:
    """Z₀ (I − NᵀN)^{1/2} in float64 (Z₀ᵀZ₀ = I ⇒ the result stacked on N has Zᵀ Z = I), on
    `new_rows`' device."""
    N = new_rows.to(torch.float64)
    eye = torch.eye(N.shape[1], dtype=torch.float64, device=N.device)
    return z0.to(N.device) @ _sym_power(eye - N.T @ N, 0.5)


class _Follow:
    """A fixed tensor kept on the device of the tensor it is used with: the model may move
    (`.to(cuda)`) after its rows were selected, and the copy is made once per move."""

    def __init__(self, tensor: Tensor) -> None:
        self.tensor = tensor

    def on(self, like: Tensor) -> Tensor:
        if self.tensor.device != like.device:
            self.tensor = self.tensor.to(like.device)
        return self.tensor


def select_token_rows(
    interface: TokenInterface, mode: str, first_new: int | None = None
) -> TokenRows:
    """Make the rows of `mode` trainable on `interface` (in place) and return how to keep the
    rest fixed (see the module docstring).

    Args:
        interface: the model's token interface (its parameters frozen by LoRA before).
        mode: none, new or all.
        first_new: V_old, the first added id (needed by `new`).

    Raises:
        ValueError: an unknown mode, or `new` without added rows.
    """
    if mode not in TRAIN_TOKENS:
        raise InvalidInputError(f"train_tokens must be one of {TRAIN_TOKENS}, got {mode!r}")
    rows = TokenRows(mode, first_new if mode == "new" else None)
    if mode == "none":
        return rows
    V = interface.vocab_size
    if mode == "new" and (first_new is None or not 0 < first_new < V):
        raise InvalidInputError(
            f"train_tokens=new needs added tokens (rows {first_new}..{V - 1} of a model written "
            "by tying add-tokens)"
        )
    manifold = set(interface.manifold_tensors)
    for name in interface.vocab_tensors:
        parameter = _as_parameter(interface, name)
        parameter.requires_grad_(True)
        rows.names.append(name)
        if name in manifold:
            if mode == "all":
                rows.fixes.append(interface.retract_)
            else:
                old = parameter.detach()[:first_new].to(torch.float64)
                z0 = _Follow(old @ _sym_power(old.T @ old, -0.5))  # Z_old = z0 C^{1/2}

                def project(p: nn.Parameter = parameter, z0: _Follow = z0) -> None:
                    p[:first_new] = _symmetric_completion(z0.on(p), p[first_new:]).to(p.dtype)

                rows.fixes.append(project)
        elif mode == "new":
            old_rows = _Follow(parameter.detach()[:first_new].clone())

            def restore(p: nn.Parameter = parameter, old: _Follow = old_rows) -> None:
                p[:first_new] = old.on(p)

            rows.fixes.append(restore)
        if mode == "new":
            keep = torch.zeros(V, 1, dtype=parameter.dtype, device=parameter.device)
            keep[first_new:] = 1
            mask = _Follow(keep)
            parameter.register_hook(lambda grad, mask=mask: grad * mask.on(grad).to(grad.dtype))
    for name, parameter in interface.named_parameters():
        if name in rows.names or parameter.shape[:1] == (V,):
            continue
        parameter.requires_grad_(True)
        rows.names.append(name)
    return rows
