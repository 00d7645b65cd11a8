"""LoRA through peft on any model of this project, and what else an update may train.

    peft_model, interface_names = add_lora(causal_lm, targets, rank=8, alpha=16, dropout=0.05)

LoRA (Hu et al. 2021) replaces the output of each target linear layer W (out × in) by

    y = W x + (alpha / r) · B A dropout(x),      A: r × in, B: out × r

with A initialised at random (peft's default, Kaiming-uniform) and B = 0, so the updated model
starts as the base model exactly. W stays frozen; only A and B train. The token interface is
frozen too, unless `train_interface`: then every interface parameter trains except those the
interface constrains to a manifold (`TokenInterface.manifold_tensors`):

| interface | trained with train_interface | frozen |
|---|---|---|
| untied | E (`weight_in`), W_out (`weight_out`), output bias | — |
| tt | the shared matrix E = W_outᵀ (`weight`), output bias | — |
| pit | the Cholesky factor L of T (`l_param`), output bias | Z (its columns stay orthonormal, W_out·E = I_d holds after every step) |
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from tying.adapters import interface_of, quiet_peft


def interface_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """The interface parameters an update with train_interface trains, by attribute name: every
    parameter of the model's interface except its `manifold_tensors`."""
    interface = interface_of(model)
    frozen = set(interface.manifold_tensors)
    return {n: p for n, p in interface.named_parameters() if n not in frozen}


def add_lora(
    model: nn.Module,
    targets: Sequence[str],
    *,
    rank: int = 8,
    alpha: float = 16.0,
    dropout: float = 0.05,
    train_interface: bool = False,
) -> tuple[nn.Module, list[str]]:
    """Wrap a transformers causal LM with fresh LoRA layers (peft's `get_peft_model`).

    The LoRA layers are injected into `model` in place (the `Decoder` or `HFCausalLM` that
    `model` came from sees them too); every other parameter is frozen, then the interface
    parameters of `interface_parameters` are unfrozen when `train_interface`.

    Args:
        model: the causal LM (`tying.adapters.causal_lm_of`).
        targets: leaf names of the linear layers to adapt (`default_target_modules`).
        rank: r.
        alpha: LoRA alpha; the update is scaled by alpha / r.
        dropout: dropout probability on the LoRA branch's input.
        train_interface: also train the interface (see the module docstring).

    Returns:
        (the peft model, names of the trained interface parameters).
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=int(rank),
        lora_alpha=float(alpha),
        lora_dropout=float(dropout),
        target_modules=list(targets),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with quiet_peft():
        peft_model = get_peft_model(model, config)
    names: list[str] = []
    if train_interface:
        for name, parameter in interface_parameters(model).items():
            parameter.requires_grad_(True)
            names.append(name)
    return peft_model, names


def trainable_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) of every parameter that trains, in module order."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]
