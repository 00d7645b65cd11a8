"""The token matrices of a loaded model, materialized once for the probe.

For any `tying.loader.LoadedModel` (a training run, a converted or plain transformers model):

    E        (V, d)  input embedding, `interface.embedding_matrix()`
    U        (V, d)  unembedding W_out^T, `interface.unembedding_matrix()` (`nn.Linear` layout)
    gain     (d,)    g, the elementwise gain of the final norm (None when it has none)
    scale    s       a constant multiplier of the embedding rows (sqrt(d) in Gemma, else 1)

The effective maps (what the network really applies) are E_eff = s·E and U_eff = U diag(g)
(docs/metrics.md §1). Matrices are float32 for stored weights (bf16/fp16 weights are upcast)
and float64 for a pseudo-inverse-tied interface, whose E = Z T^{-1} and U = Z T are computed
from Z and L by triangular solves and products run in float64 (so that raw PIT consistency is
zero to float64 precision, not float32).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from tying.interface.base import TokenInterface

#: The two views of the interface maps a comparison can use.
MAPS = ("raw", "effective")


def materialize(interface: TokenInterface) -> tuple[Tensor, Tensor]:
    """(E, U), each (V, d), detached on the CPU, float32 (float64 for PIT, see module docstring).

    `TokenInterface.analysis_matrices`: for a transpose-tied interface the two are the same
    tensor object (U is E); stored float32 CPU weights are returned without a copy.
    """
    return interface.analysis_matrices()


def final_norm_gain(model: nn.Module) -> Tensor | None:
    """g, (d,) float64: `model.final_norm_gain()` when the model has it (HF models: Gemma's
    1 + weight), else the final norm's `.weight`, else None (a norm without a gain)."""
    getter = getattr(model, "final_norm_gain", None)
    if callable(getter):
        gain = getter()
    else:
        gain = getattr(getattr(model, "final_norm", None), "weight", None)
    if not isinstance(gain, Tensor):
        return None
    return gain.detach().cpu().to(torch.float64)


def embed_scale(model: nn.Module) -> float:
    """s: `model.embed_scale` when the model defines one, else 1.0."""
    value = getattr(model, "embed_scale", 1.0)
    return float(value() if callable(value) else value)


def parameter_total(model: nn.Module, interface: TokenInterface) -> int:
    """All free parameters: the model's tensors outside the interface (each storage once) plus
    `interface.num_parameters()` (a tied matrix once; PIT counts Z and the d(d+1)/2 of L)."""
    inside = {id(t) for t in interface.parameters()} | {id(t) for t in interface.buffers()}
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in inside:
            continue
        key = id(p) if p.is_meta else p.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += p.numel()
    return total + interface.num_parameters()


@dataclass
class InterfaceMatrices:
    """The interface of one model as plain tensors (see the module docstring).

    Attributes:
        E: (V, d) input embedding.
        U: (V, d) unembedding W_out^T.
        gain: (d,) float64 final-norm gain g, or None.
        scale: embedding multiplier s.
        tie: "untied", "tt" or "pit".
        tokens: token string of each row (None for rows without a token), or None when the
            model has no tokenizer.
    """

    E: Tensor
    U: Tensor
    gain: Tensor | None
    scale: float
    tie: str
    tokens: list[str | None] | None = field(default=None, repr=False)

    @property
    def vocab_size(self) -> int:
        """V."""
        return int(self.E.shape[0])

    @property
    def d_model(self) -> int:
        """d."""
        return int(self.E.shape[1])

    def maps(self, which: str = "raw") -> tuple[Tensor, Tensor]:
        """(input, output) maps as (V, d) matrices: raw (E, U) or effective (s·E, U diag(g)).

        Raw maps of a transpose-tied model are one tensor object (input is output).

        Raises:
            ValueError: `which` is not "raw" or "effective".
        """
        if which not in MAPS:
            raise ValueError(f"maps must be one of {MAPS}, got {which!r}")
        if which == "raw":
            return self.E, self.U
        E = self.E if self.scale == 1.0 else self.E * self.scale
        U = self.U if self.gain is None else self.U * self.gain.to(self.U.dtype)
        return E, U


def interface_matrices(loaded: Any) -> InterfaceMatrices:
    """The `InterfaceMatrices` of a `tying.loader.LoadedModel`.

    Token strings come from `tying.loader.vocabulary_strings` (one per interface row; rows
    past the tokenizer or ids without a token get None).
    """
    from tying.loader import vocabulary_strings

    E, U = materialize(loaded.interface)
    tokens = None
    if loaded.tokenizer is not None:
        tokens = [t or None for t in vocabulary_strings(loaded.tokenizer, E.shape[0])]
    return InterfaceMatrices(
        E=E,
        U=U,
        gain=final_norm_gain(loaded.model),
        scale=embed_scale(loaded.model),
        tie=loaded.interface.tie,
        tokens=tokens,
    )


def model_info(loaded: Any, mats: InterfaceMatrices) -> dict[str, Any]:
    """`probe.json["model"]`: what was probed (spec, name, kind, V, d, tie, ...)."""
    info: dict[str, Any] = {
        "spec": loaded.spec,
        "name": loaded.name,
        "kind": loaded.kind,
        "vocab_size": mats.vocab_size,
        "d_model": mats.d_model,
        "tie": mats.tie,
        "shares_matrix": mats.E is mats.U,
        "n_layers": len(getattr(loaded.model, "blocks", [])),
        "interface": type(loaded.interface).__name__,
        "embed_scale": mats.scale,
        "final_norm_gain": mats.gain is not None,
        "tokenizer": None,
        "tokenizer_vocab_size": None,
        "checkpoint": str(loaded.checkpoint) if loaded.checkpoint is not None else None,
    }
    if loaded.tokenizer is not None:
        info["tokenizer"] = loaded.tokenizer.name
        info["tokenizer_vocab_size"] = loaded.tokenizer.vocab_size
    if loaded.checkpoint is not None:
        info["step"] = checkpoint_step(loaded.checkpoint)
    return info


def checkpoint_step(folder: Any) -> int:
    """The step of a checkpoint folder named ``step-0000100``.

    Raises:
        ValueError: the folder name has no step number.
    """
    name = str(getattr(folder, "name", folder))
    try:
        return int(name.split("-")[1])
    except (IndexError, ValueError):
        raise ValueError(f"{folder} is not a checkpoint folder named step-N") from None
