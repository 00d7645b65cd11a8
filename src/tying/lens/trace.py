"""Transition trace (PIT paper §3.1, Figure 2): where a token's state sits, layer by layer.

For one position of a prompt (by default the last, the "medium" token whose next token is
being predicted), at every residual entry i = 0..L (0 = embedding output, i = output of
block i, all before the final norm), two top-k token lists:

- input-side anchors: the k tokens v whose embedding row E_v (rows of
  `interface.embedding_matrix()`) has the largest cosine similarity to the raw residual
  state x_i, cos(x_i, E_v) = x_i·E_v / (‖x_i‖ ‖E_v‖). The raw state, not the final-normed
  one, is compared: the input side reads the stream as the embedding wrote it. (For an RMS
  final norm with gain g the difference is a per-dimension rescaling by g.)
- output-side anchors: the k tokens with the largest probability under the logit lens,
  softmax(head(final_norm(x_i))).

Agreement at entry i: `overlap` = |top-k input ∩ top-k output| / k, and `top1_agree` =
whether both top-1 tokens are the same. At entry L the output side is the model's own
prediction. The trace shows the state moving from near its input token's embedding
(input-side anchors) towards the next token's unembedding (output-side anchors).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tying.errors import InvalidInputError
from tying.lens.evaluate import entry_labels
from tying.loader import LoadedModel


@dataclass
class TraceEntry:
    """The anchors of one residual entry.

    Attributes:
        index: entry index (0 = embedding output, i = output of block i).
        label: "emb" or the block number.
        input_ids: top-k token ids by cosine to the rows of E, best first.
        input_cosines: their cosine similarities, in [−1, 1].
        output_ids: top-k token ids by logit-lens probability, best first.
        output_probs: their probabilities.
        overlap: |input_ids ∩ output_ids| / k.
        top1_agree: input_ids[0] == output_ids[0].
    """

    index: int
    label: str
    input_ids: list[int]
    input_cosines: list[float]
    output_ids: list[int]
    output_probs: list[float]
    overlap: float
    top1_agree: bool


@dataclass
class Trace:
    """A transition trace of one position.

    Attributes:
        model: the model's name.
        prompt_ids: the prompt's token ids.
        position: the traced position (non-negative).
        token_id: the token at that position.
        k: anchors per side.
        entries: L + 1 `TraceEntry`, entry 0 first.
    """

    model: str
    prompt_ids: list[int]
    position: int
    token_id: int
    k: int
    entries: list[TraceEntry]

    @property
    def predicted_id(self) -> int:
        """The model's own top-1 next token (output side of the last entry)."""
        return self.entries[-1].output_ids[0]

    def to_dict(self, decode: Callable[[int], str] | None = None) -> dict[str, Any]:
        """JSON-able dict; with `decode`, token texts are added next to the ids."""
        record = asdict(self)
        record["predicted_id"] = self.predicted_id
        if decode is not None:
            record["token"] = decode(self.token_id)
            record["predicted"] = decode(self.predicted_id)
            for entry in record["entries"]:
                entry["input_tokens"] = [decode(i) for i in entry["input_ids"]]
                entry["output_tokens"] = [decode(i) for i in entry["output_ids"]]
        return record


@torch.no_grad()
def transition_trace(
    model: LoadedModel,
    input_ids: Tensor,
    *,
    k: int = 5,
    position: int = -1,
    candidates: int | None = None,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
) -> Trace:
    """The transition trace of one position (see the module docstring).

    Args:
        model: the model.
        input_ids: the prompt, (T,) or (1, T) token ids.
        k: anchors per side (1 <= k <= candidates).
        position: the traced position (default −1, the last token).
        candidates: only ids < candidates are ranked (e.g. the tokenizer's size, to leave out
            padded rows no text produces); default all V rows.
        autocast: factory of the precision context of the forward pass (cosines and
            softmax run in float32).

    Returns:
        The `Trace`.

    Raises:
        ValueError: an empty prompt, a bad k or candidates count, a position outside the
            prompt.
    """
    ids = input_ids.reshape(1, -1) if input_ids.dim() == 1 else input_ids
    if ids.dim() != 2 or ids.shape[0] != 1 or ids.shape[1] == 0:
        raise InvalidInputError(
            f"input_ids must be one non-empty prompt, (T,) or (1, T), got {tuple(input_ids.shape)}"
        )
    T = ids.shape[1]
    if not -T <= position < T:
        raise InvalidInputError(
            f"position {position} is outside the prompt of {T} tokens: choose one in "
            f"[{-T}, {T - 1}] (-1 = the last token)"
        )
    position %= T
    V = model.vocab_size
    n = V if candidates is None else int(candidates)
    if not 1 <= n <= V:
        raise InvalidInputError(f"candidates must be in [1, V={V}], got {candidates}")
    if not 1 <= k <= n:
        raise InvalidInputError(f"k must be in [1, {n}] (the ranked vocabulary), got {k}")
    ids = ids.to(model.device)
    with autocast():
        states, _ = model.states_and_final(ids)
    E = F.normalize(model.interface.embedding_matrix()[:n].float(), dim=-1)
    labels = entry_labels(len(states))
    entries = []
    for i, state in enumerate(states):
        x = state[0, position]
        cos = E @ F.normalize(x.float(), dim=-1)
        in_vals, in_ids = cos.topk(k)
        with autocast():
            logits = model.lens_logits(x)
        probs = torch.softmax(logits.float()[:n], dim=-1)
        out_vals, out_ids = probs.topk(k)
        a, b = in_ids.tolist(), out_ids.tolist()
        entries.append(
            TraceEntry(
                index=i,
                label=labels[i],
                input_ids=a,
                input_cosines=in_vals.tolist(),
                output_ids=b,
                output_probs=out_vals.tolist(),
                overlap=len(set(a) & set(b)) / k,
                top1_agree=a[0] == b[0],
            )
        )
    return Trace(
        model=model.name,
        prompt_ids=ids[0].tolist(),
        position=position,
        token_id=int(ids[0, position]),
        k=k,
        entries=entries,
    )


def show_token(text: str, width: int = 12) -> str:
    """A token's text for tables: quoted, whitespace escaped, cut to `width` characters."""
    shown = repr(text)
    return shown if len(shown) <= width else shown[: width - 1] + "…"


def format_trace(trace: Trace, decode: Callable[[int], str], width: int = 12) -> str:
    """The trace as a plain-text table, one row per entry.

    Columns: entry, input-side top-k (cosine), output-side top-k (probability), overlap,
    whether top-1 agrees.
    """

    def cells(ids: list[int], values: list[float]) -> str:
        return " ".join(f"{show_token(decode(t), width)}:{v:.2f}" for t, v in zip(ids, values))

    rows = [
        (
            e.label,
            cells(e.input_ids, e.input_cosines),
            cells(e.output_ids, e.output_probs),
            f"{e.overlap:.2f}",
            "yes" if e.top1_agree else "no",
        )
        for e in trace.entries
    ]
    header = (
        "entry",
        f"input side: top-{trace.k} by cos(x, E_v)",
        f"output side: top-{trace.k} by logit lens p",
        "overlap",
        "top-1",
    )
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(r: tuple[str, ...]) -> str:
        return " | ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip()

    title = (
        f"{trace.model}: position {trace.position} token {show_token(decode(trace.token_id), 40)}"
        f" -> predicted {show_token(decode(trace.predicted_id), 40)}"
    )
    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([title, line(header), rule, *(line(r) for r in rows)])


def plot_trace(
    trace: Trace, decode: Callable[[int], str], path: str | Path, width: int = 10
) -> Path:
    """A figure of the trace: one row per entry, k input-side then k output-side cells.

    A cell shows the token and its cosine (input side) or probability (output side); it is
    coloured when the token is also among the other side's top-k (agreement), grey
    otherwise. The right column shows the overlap fraction. Written as PNG (a matplotlib
    `Figure`, no pyplot state). Characters the default font lacks (e.g. CJK) render as boxes.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    k, n = trace.k, len(trace.entries)
    fig_w = 1.6 + 2 * k * 1.05 + 0.9
    fig_h = 1.2 + 0.42 * n
    fig = Figure(figsize=(fig_w, fig_h))
    ax = fig.subplots()
    for row, e in enumerate(trace.entries):
        y = n - 1 - row
        both = set(e.input_ids) & set(e.output_ids)
        for col, (tok, value, side) in enumerate(
            [(t, v, "in") for t, v in zip(e.input_ids, e.input_cosines)]
            + [(t, v, "out") for t, v in zip(e.output_ids, e.output_probs)]
        ):
            x = col + (0.3 if side == "out" else 0.0)
            agree = tok in both
            face = ("#9ecae1" if side == "in" else "#fdae6b") if agree else "#eeeeee"
            ax.add_patch(Rectangle((x, y), 1, 1, facecolor=face, edgecolor="white"))
            ax.text(
                x + 0.5,
                y + 0.5,
                f"{show_token(decode(tok), width)}\n{value:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                fontweight="bold" if col in (0, k) else "normal",
            )
        ax.text(2 * k + 0.5, y + 0.5, f"{e.overlap:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xlim(0, 2 * k + 1)
    ax.set_ylim(0, n)
    ax.set_yticks([n - 1 - r + 0.5 for r in range(n)])
    ax.set_yticklabels([e.label for e in trace.entries], fontsize=7)
    ax.set_xticks([k / 2, k + 0.3 + k / 2, 2 * k + 0.5])
    ax.set_xticklabels(
        ["input side: top-k cos(x, E_v)", "output side: top-k logit lens", "overlap"],
        fontsize=8,
    )
    ax.xaxis.tick_top()
    ax.set_ylabel("entry (emb = embedding output, i = block i)")
    for side in ("right", "bottom", "left", "top"):
        ax.spines[side].set_visible(False)
    ax.tick_params(length=0)
    ax.set_title(
        f"{trace.model}: transition trace of {show_token(decode(trace.token_id), 30)} "
        f"(position {trace.position}) -> {show_token(decode(trace.predicted_id), 30)}",
        fontsize=9,
        pad=22,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    return path
