"""`ModelConfig`: every number that fixes the shape of the decoder, validated once.

Derived sizes (defaults, when a field is left `None`):

- n_heads = d_model / head_dim (head_dim = 64 unless set);
- n_kv_heads = max(1, n_heads // 4) (grouped-query attention, 4 query heads per key/value head);
- d_ff = ceil(8/3 · d_model / 256) · 256 (SwiGLU width, a multiple of 256).

The dataclass is JSON-able through `to_dict()` / `from_dict()`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from tying.errors import InvalidInputError
from tying.interface.pit import DIAG_ACTIVATIONS
from tying.interface.registry import check_interface_options, interface_options, ties

NORMS = ("rms", "layer")
#: SwiGLU widths are rounded up to a multiple of this.
D_FF_MULTIPLE = 256


def swiglu_width(d_model: int, multiple: int = D_FF_MULTIPLE) -> int:
    """The 8/3 rule: ceil(8/3 · d / multiple) · multiple (integer arithmetic, no float rounding)."""
    return -(-8 * d_model // (3 * multiple)) * multiple


@dataclass
class ModelConfig:
    """Shape and options of the decoder (see the module docstring for the derived defaults).

    Attributes:
        vocab_size: V, number of tokens.
        d_model: d, width of the residual stream.
        n_layers: number of parallel blocks.
        n_heads: query heads (default d_model // head_dim); n_heads · head_dim must equal d_model.
        n_kv_heads: key/value heads (default max(1, n_heads // 4)); must divide n_heads.
        head_dim: width of one attention head (even, for the rotary embedding).
        d_ff: SwiGLU hidden width (default: the 8/3 rule rounded up to a multiple of 256).
        norm: "rms" (RMSNorm) or "layer" (LayerNorm without bias).
        norm_eps: epsilon of the norms.
        tie: token interface, "untied", "tt" or "pit".
        max_seq_len: longest sequence (the rotary tables are precomputed up to it).
        rope_theta: base of the rotary frequencies, θ_i = rope_theta^(-2i/head_dim).
        init_std: standard deviation of the Gaussian init of linears and of E/U (untied, TT).
        input_grad_scale: TT only: scale of the gradient reaching E through the input lookup.
        pit_trainable_z: PIT only: train Z (retract after each step) instead of freezing it.
        pit_diag_activation: PIT only: "exp" or "softplus" for L's diagonal.
        pit_diag_clamp: PIT only: optional (min, max) range of L's diagonal.
    """

    vocab_size: int = 50257
    d_model: int = 256
    n_layers: int = 4
    n_heads: int | None = None
    n_kv_heads: int | None = None
    head_dim: int = 64
    d_ff: int | None = None
    norm: str = "rms"
    norm_eps: float = 1e-5
    tie: str = "tt"
    max_seq_len: int = 1024
    rope_theta: float = 10000.0
    init_std: float = 0.02
    input_grad_scale: float = 1.0
    pit_trainable_z: bool = False
    pit_diag_activation: str = "exp"
    pit_diag_clamp: tuple[float, float] | None = field(default=None)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "head_dim", "max_seq_len"):
            _check_positive_int(name, getattr(self, name))
        if self.head_dim % 2:
            raise InvalidInputError(f"head_dim must be even (rotary pairs), got {self.head_dim}")
        if self.n_heads is None:
            if self.d_model % self.head_dim:
                raise InvalidInputError(
                    f"d_model={self.d_model} is not divisible by head_dim={self.head_dim}: "
                    "choose a d_model that is a multiple of head_dim, or set head_dim and n_heads "
                    "with n_heads * head_dim == d_model"
                )
            self.n_heads = self.d_model // self.head_dim
        _check_positive_int("n_heads", self.n_heads)
        if self.n_heads * self.head_dim != self.d_model:
            raise InvalidInputError(
                f"n_heads * head_dim must equal d_model, got {self.n_heads} * {self.head_dim} "
                f"= {self.n_heads * self.head_dim} != {self.d_model}"
            )
        if self.n_kv_heads is None:
            self.n_kv_heads = max(1, self.n_heads // 4)
        _check_positive_int("n_kv_heads", self.n_kv_heads)
        if self.n_heads % self.n_kv_heads:
            raise InvalidInputError(
                f"n_heads={self.n_heads} is not divisible by n_kv_heads={self.n_kv_heads}: "
                "set n_kv_heads to a divisor of n_heads"
            )
        if self.d_ff is None:
            self.d_ff = swiglu_width(self.d_model)
        _check_positive_int("d_ff", self.d_ff)
        if self.norm not in NORMS:
            raise InvalidInputError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if self.tie not in ties():
            raise InvalidInputError(f"tie must be one of {ties()}, got {self.tie!r}")
        for name in ("norm_eps", "rope_theta", "init_std"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InvalidInputError(f"{name} must be a positive finite number, got {value!r}")
        if not math.isfinite(self.input_grad_scale):
            raise InvalidInputError(f"input_grad_scale must be finite, got {self.input_grad_scale}")
        if self.pit_diag_activation not in DIAG_ACTIVATIONS:
            raise InvalidInputError(
                f"pit_diag_activation must be one of {DIAG_ACTIVATIONS}, got {self.pit_diag_activation!r}"
            )
        if self.pit_diag_clamp is not None:
            clamp = tuple(float(v) for v in self.pit_diag_clamp)
            if len(clamp) != 2 or not (0 < clamp[0] < clamp[1]):
                raise InvalidInputError(
                    f"pit_diag_clamp must be (min, max) with 0 < min < max, got {self.pit_diag_clamp!r}"
                )
            self.pit_diag_clamp = clamp  # type: ignore[assignment]
        if self.tie == "pit" and self.vocab_size < self.d_model:
            raise InvalidInputError(
                f"tie='pit' needs vocab_size >= d_model (Z has orthonormal columns), "
                f"got V={self.vocab_size} < d={self.d_model}"
            )
        check_interface_options(self, self.tie)

    # ------------------------------------------------------------------ derived
    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: n_kv_heads · head_dim."""
        return int(self.n_kv_heads) * self.head_dim  # type: ignore[arg-type]

    def interface_options(self) -> dict[str, Any]:
        """Constructor keywords of the chosen interface from this config (its `config_options`)."""
        return interface_options(self, self.tie)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict[str, Any]:
        """All fields, resolved (no `None` for derived sizes), JSON-able (tuples as lists)."""
        out = dataclasses.asdict(self)
        if out["pit_diag_clamp"] is not None:
            out["pit_diag_clamp"] = list(out["pit_diag_clamp"])
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        """Inverse of `to_dict`; unknown keys raise ValueError naming the valid ones."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise InvalidInputError(f"unknown ModelConfig keys {unknown}; valid keys are {names}")
        values = dict(data)
        if values.get("pit_diag_clamp") is not None:
            values["pit_diag_clamp"] = tuple(values["pit_diag_clamp"])
        return cls(**values)


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(f"{name} must be a positive integer, got {value!r}")
