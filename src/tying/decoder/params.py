"""Parameter accounting of the decoder in closed form (nothing is instantiated).

With d = d_model, h = n_heads · head_dim (= d), k = n_kv_heads · head_dim,
f = d_ff, L = n_layers and V = vocab_size, one parallel block holds

    attention   q: d·h   k: d·k   v: d·k   o: h·d   gate: h
    MLP         3·d·f    (gate, up and down projections of SwiGLU)
    norm        d        (one norm per parallel block; RMSNorm weight, or LayerNorm weight: no biases)

and the model adds a final norm (d) and the token interface:

    untied  2·V·d                 (E and U)
    tt      V·d                   (one E, counted once)
    pit     V·d + d(d+1)/2        (Z and the free entries of the triangular L)

total = L·block + d + interface. For PIT the module stores L's parameter as a
full d×d matrix whose strict upper triangle is unused, so the stored element
count (`stored_total`) exceeds `total` by d(d-1)/2.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from tying.decoder.config import ModelConfig
from tying.interface import interface_class
from tying.options.params import ParamsOptions as ParamsOptions


def interface_parameters(tie: str, vocab_size: int, d_model: int) -> int:
    """Free parameters of a token interface (as `TokenInterface.num_parameters()` counts them)."""
    return interface_class(tie).count_parameters(vocab_size, d_model)


def parameter_counts(config: ModelConfig) -> dict[str, Any]:
    """Closed-form parameter counts of `Decoder(config)` (see the module docstring).

    Returns:
        dict with
            total: all free parameters, the interface counted once when tied;
            embedding: parameters of the token interface;
            non_embedding: total - embedding;
            embedding_share: embedding / total (a fraction in [0, 1]);
            tying_saves: parameters saved versus the untied interface (2·V·d - embedding);
            stored_total: elements stored in the state dict (PIT: + d(d-1)/2 unused entries of L);
            per_layer: {"attention", "mlp", "norm", "total"} of one block;
            components: {"attention", "mlp", "norms", "embedding"} summed over the model
                (norms include the final norm).
    """
    d, h, k, f = config.d_model, config.n_heads * config.head_dim, config.kv_dim, config.d_ff
    attention = d * h + 2 * d * k + h * d + h
    mlp = 3 * d * f
    norm = d
    block = attention + mlp + norm
    L = config.n_layers
    embedding = interface_parameters(config.tie, config.vocab_size, d)
    non_embedding = L * block + norm
    total = non_embedding + embedding
    untied = interface_parameters("untied", config.vocab_size, d)
    cls = interface_class(config.tie)
    unused = cls.stored_elements(config.vocab_size, d) - embedding
    return {
        "total": total,
        "embedding": embedding,
        "non_embedding": non_embedding,
        "embedding_share": embedding / total,
        "tying_saves": untied - embedding,
        "stored_total": total + unused,
        "per_layer": {"attention": attention, "mlp": mlp, "norm": norm, "total": block},
        "components": {
            "attention": L * attention,
            "mlp": L * mlp,
            "norms": (L + 1) * norm,
            "embedding": embedding,
        },
    }


def count_stored(module: nn.Module) -> int:
    """Elements a module stores: parameters and floating-point persistent buffers, shared storage once.

    Works on the meta device (storage identity is taken from the tensor objects there).
    """
    seen: set[int] = set()
    total = 0
    persistent = {name for name in module.state_dict(keep_vars=True)}
    tensors = list(module.parameters())
    tensors += [
        b for name, b in module.named_buffers() if name in persistent and b.is_floating_point()
    ]
    for t in tensors:
        key = id(t) if t.device.type == "meta" else t.untyped_storage().data_ptr()
        if key in seen:
            continue
        seen.add(key)
        total += t.numel()
    return total


def format_count(n: float) -> str:
    """Human form of a count: 133.1M, 1.167B, 12.3K."""
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.4g}{unit}"
    return str(int(n))


def preset_parameters(options: ParamsOptions) -> dict[str, Any]:
    """The shape of a preset and its closed-form parameter counts (`parameter_counts`).

    Returns:
        {"preset", "vocab_size", "tie", "n_layers", "d_model", "n_heads", "n_kv_heads",
        "head_dim", "d_ff", "norm", **parameter_counts(config)}.
    """
    from tying.decoder.presets import preset_config

    config = preset_config(
        options.preset, vocab_size=options.vocab, tie=options.tie, norm=options.norm
    )
    shape = {
        "preset": options.preset,
        "vocab_size": config.vocab_size,
        "tie": config.tie,
        "n_layers": config.n_layers,
        "d_model": config.d_model,
        "n_heads": config.n_heads,
        "n_kv_heads": config.n_kv_heads,
        "head_dim": config.head_dim,
        "d_ff": config.d_ff,
        "norm": config.norm,
    }
    return {**shape, **parameter_counts(config)}
