"""Convert a `transformers` causal LM to a token interface built from its own weights.

`convert(model, tie)` replaces, in place, the input embedding and the output
head by an `InterfaceEmbedding` and an `InterfaceHead` around ONE
`TokenInterface` registered as `model.tying_interface`. The rest of the
model is untouched, so `forward`, `generate`, `save_pretrained` and peft keep
working.

Teacher matrices: E0 = the input embedding weight (V×d, without any
embed_scale), U0 = the output head weight (V×d, `nn.Linear` layout); for a
tied teacher E0 and U0 are one tensor.

- "untied": Untied(E0, U0): logits unchanged (a tied teacher gets two copies).
- "tt": TransposeTying(E0) (or U0 with `source="output"`): unchanged logits
  for a tied teacher; an untied one loses the other matrix.
- "pit": PseudoInverseTying.from_teacher(M, t_init) with M = U0 or E0 by
  `source`. Since W_out·E = I_d, PIT keeps exactly one side of the teacher
  unless M has orthonormal columns: t_init="output" keeps the head
  (W_out = U0^T when M = U0), "input" keeps the embedding (E = E0 when M = E0),
  "identity" takes Z = polar factor of M and T = I. By default M follows
  t_init: U0 for "output", E0 for "input" and "identity".

transformers 5 ties `lm_head.weight` to the embedding by parameter name
(`_tied_weights_keys`, applied when `config.tie_word_embeddings` is true, in
`post_init`, `tie_weights` and `from_pretrained`). A converted model has
`config.tie_word_embeddings = False` and an empty instance-level
`_tied_weights_keys` (and `all_tied_weights_keys`), so those calls find
nothing to tie, even if the flag is switched back on. The wrappers own no
`weight` parameter that could be re-pointed, and `resize_token_embeddings`,
which would swap in a plain `nn.Embedding`, raises instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from torch import Tensor, nn

from tying.hf.adapters import Adapter, get_adapter
from tying.hf.modules import INTERFACE_ATTR, InterfaceEmbedding, InterfaceHead
from tying.hf.state import CONFIG_KEY, interface_record
from tying.interface import TokenInterface, interface_class, tie_of
from tying.interface.base import SOURCES
from tying.interface.pit import DEFAULT_T_INIT
from tying.interface.registry import check_options

__all__ = ["DEFAULT_T_INIT", "SOURCES", "ConversionReport", "convert", "install_interface"]
#: Attribute of a converted model holding its ConversionReport.
REPORT_ATTR = "tying_report"


@dataclass
class ConversionReport:
    """What `convert` did, for logs and `config.tying["report"]`.

    Attributes:
        model_type: `config.model_type` of the converted model.
        family: the adapter family ("llama", "gpt2", ...).
        tie: "untied", "tt" or "pit".
        t_init: PIT's t_init, else None.
        source: the teacher matrix the interface was built from: "input" (E0),
            "output" (U0) or "both" (untied).
        teacher_tied: whether the teacher's E0 and U0 were one tensor.
        vocab_rows: V, rows of the embedding (= of the head).
        d_model: d.
        tokenizer_vocab: len(tokenizer), or None when no tokenizer was given.
        padded_rows: V - tokenizer_vocab: rows no tokenizer id reaches (kept,
            not dropped), or None.
        zero_rows: rows of the source matrix that are exactly zero.
        embed_scale: constant multiplier applied to embedding rows (Gemma3: sqrt(d)).
        output_bias: whether the head has a bias (carried by the interface).
        logit_softcap: soft-capping applied after the head, or None.
        dtype: dtype of the interface's tensors.
        notes: human-readable remarks (e.g. what an untied teacher loses under TT).
    """

    model_type: str
    family: str
    tie: str
    t_init: str | None
    source: str
    teacher_tied: bool
    vocab_rows: int
    d_model: int
    tokenizer_vocab: int | None
    padded_rows: int | None
    zero_rows: int
    embed_scale: float
    output_bias: bool
    logit_softcap: float | None
    dtype: str
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of the fields."""
        return asdict(self)


def _unwrap(model: nn.Module) -> nn.Module:
    """The transformers model inside a peft model or an HFCausalLM."""
    for _ in range(8):
        if callable(getattr(model, "get_base_model", None)):
            inner = model.get_base_model()
        else:
            inner = getattr(model, "hf_model", None)
        if not isinstance(inner, nn.Module) or inner is model:
            return model
        model = inner
    return model


def is_converted(model: nn.Module) -> bool:
    """Whether `model` (or the transformers model inside it) carries a token interface."""
    return isinstance(getattr(_unwrap(model), INTERFACE_ATTR, None), TokenInterface)


def interface_of(model: nn.Module) -> TokenInterface:
    """The `TokenInterface` of a converted model (also through peft or HFCausalLM wrappers).

    Raises:
        ValueError: the model was not converted.
    """
    inner = _unwrap(model)
    interface = getattr(inner, INTERFACE_ATTR, None)
    if not isinstance(interface, TokenInterface):
        raise ValueError(
            f"{type(inner).__name__} has no token interface: convert it first with "
            "tying.hf.convert(model, tie=...) or load a converted folder with tying.hf.from_pretrained"
        )
    return interface


def conversion_report(model: nn.Module) -> ConversionReport | None:
    """The ConversionReport of a converted model (None if it has none)."""
    return getattr(_unwrap(model), REPORT_ATTR, None)


def _teacher_matrices(adapter: Adapter, model: nn.Module) -> tuple[Tensor, Tensor, Tensor | None]:
    """E0 (V×d), U0 (V×d) and the head bias (V,) or None, detached."""
    embedding = adapter.input_embedding(model)
    head = adapter.output_head(model)
    E0 = getattr(embedding, "weight", None)
    U0 = getattr(head, "weight", None)
    if not isinstance(E0, Tensor) or E0.dim() != 2:
        raise ValueError(
            f"the input embedding {type(embedding).__name__} has no (V, d) weight to convert"
        )
    if not isinstance(U0, Tensor) or U0.shape != E0.shape:
        raise ValueError(
            f"the output head {type(head).__name__} must have a weight of shape {tuple(E0.shape)} "
            f"(the embedding's), got {None if U0 is None else tuple(U0.shape)}"
        )
    if E0.device.type == "meta":
        raise ValueError("the model's weights are on the meta device: load real weights first")
    bias = getattr(head, "bias", None)
    return E0.detach(), U0.detach(), (bias.detach() if isinstance(bias, Tensor) else None)


def install_interface(
    model: nn.Module, interface: TokenInterface, adapter: Adapter, embed_scale: float
) -> None:
    """Put `interface` in `model` in place of its embedding and head, and switch off HF tying.

    Registers the interface once as `model.tying_interface`, installs the two
    wrappers through the model's set_input_embeddings/set_output_embeddings,
    sets `config.tie_word_embeddings = False` and empties the tied-weight
    mappings transformers 5 consults (`_tied_weights_keys`, `all_tied_weights_keys`).
    """
    setattr(model, INTERFACE_ATTR, interface)
    interface._is_hf_initialized = True
    adapter.set_input_embedding(model, InterfaceEmbedding(model, embed_scale))
    adapter.set_output_head(model, InterfaceHead(model))
    model.config.tie_word_embeddings = False
    text_config = (
        model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    )
    if text_config is not None and text_config is not model.config:
        text_config.tie_word_embeddings = False
    for module in model.modules():
        if hasattr(module, "all_tied_weights_keys"):
            module.all_tied_weights_keys = {}
    model._tied_weights_keys = {}
    # transformers' resize would put a plain nn.Embedding back and silently drop the interface.
    model.resize_token_embeddings = _resize_unsupported


def _resize_unsupported(*args: Any, **kwargs: Any) -> None:
    """Stands in for `resize_token_embeddings` on converted models."""
    raise NotImplementedError(
        "resize_token_embeddings is not supported on a model converted by tying.hf: resize the "
        "teacher before converting (model.resize_token_embeddings(n), then tying.hf.convert)"
    )


def convert(
    model: nn.Module,
    tie: str = "pit",
    *,
    source: str | None = None,
    tokenizer: Any = None,
    **interface_options: Any,
) -> ConversionReport:
    """Replace, in place, the embedding and head of a transformers causal LM by a token interface.

    Args:
        model: a `transformers` causal LM of a supported architecture
            (`tying.hf.adapters.supported_model_types()`), not yet converted.
        tie: a registered interface name ("untied", "tt", "pit").
        source: TT/PIT only: the teacher matrix the interface is built from,
            "input" (E0) or "output" (U0). Default: "input" for TT; for PIT
            "output" when t_init="output", else "input". Irrelevant for tied teachers.
        tokenizer: optional tokenizer; len(tokenizer) is checked against the
            embedding rows and padded rows are reported.
        interface_options: the interface's conversion options, the keywords of its
            `from_teacher_matrices` (PIT: t_init ("output" keeps the teacher's head, "input"
            its embedding, "identity" T = I; default `DEFAULT_T_INIT`), trainable_z,
            diag_activation, diag_clamp, retraction_eps, rank_rtol, loss_chunk_size; TT:
            input_grad_scale, loss_chunk_size; untied: loss_chunk_size); one that does not
            apply raises ValueError.

    Returns:
        The ConversionReport (also kept as `model.tying_report` and, as a dict,
        in `model.config.tying["report"]`).

    Raises:
        ValueError: unsupported architecture, model already converted, bad
            option, a tokenizer larger than the embedding, or (PIT) a
            rank-deficient teacher matrix.
    """
    cls = interface_class(tie)
    adapter = get_adapter(model)
    if is_converted(model):
        raise ValueError(
            "this model is already converted (it has model.tying_interface); export it with "
            "tying.hf.export and reload it to convert again"
        )
    options = {k: v for k, v in interface_options.items() if v is not None}
    check_options(tie, cls.from_teacher_matrices, options, "conversion")

    E0, U0, bias = _teacher_matrices(adapter, model)
    V, d = E0.shape
    teacher_tied = E0.data_ptr() == U0.data_ptr()
    embed_scale = adapter.scale_fn(model, adapter.input_embedding(model))
    notes: list[str] = []

    tokenizer_vocab = len(tokenizer) if tokenizer is not None else None
    padded_rows = None
    if tokenizer_vocab is not None:
        if tokenizer_vocab > V:
            raise ValueError(
                f"the tokenizer has {tokenizer_vocab} tokens but the embedding has only {V} rows: "
                "ids past row V-1 cannot be embedded; pass the tokenizer that belongs to this model"
            )
        padded_rows = V - tokenizer_vocab
        if padded_rows:
            notes.append(
                f"{padded_rows} padded rows (ids {tokenizer_vocab}..{V - 1}) are not produced by the "
                "tokenizer; they are kept so every model id stays valid"
            )

    built = cls.from_teacher_matrices(
        E0, U0, bias=bias, teacher_tied=bool(teacher_tied), source=source, **options
    )
    interface, used = built.interface, built.used
    notes += built.notes
    zero_rows = int((used == 0).all(dim=1).sum()) if used.numel() else 0

    report = ConversionReport(
        model_type=model.config.model_type,
        family=adapter.family,
        tie=tie_of(interface),
        t_init=built.settings.get("t_init"),
        source=built.source,
        teacher_tied=bool(teacher_tied),
        vocab_rows=int(V),
        d_model=int(d),
        tokenizer_vocab=tokenizer_vocab,
        padded_rows=padded_rows,
        zero_rows=zero_rows,
        embed_scale=float(embed_scale),
        output_bias=bias is not None,
        logit_softcap=adapter.logit_softcap(model),
        dtype=str(interface.embedding_matrix().dtype).removeprefix("torch."),
        notes=notes,
    )
    install_interface(model, interface, adapter, embed_scale)
    record = interface_record(interface, embed_scale)
    record["report"] = report.to_dict()
    setattr(model.config, CONFIG_KEY, record)
    setattr(model, REPORT_ATTR, report)
    return report
