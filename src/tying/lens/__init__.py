"""Lenses on the residual stream: logit lens, tuned lens, transition traces.

    from tying.loader import load_any
    from tying.lens import LogitLens, evaluate_lens, train_tuned_lens, transition_trace

    lm = load_any("smollm2")
    result = evaluate_lens(lm, LogitLens(), batches)     # KL(final ‖ lens), bits/token per entry
    lens, history = train_tuned_lens(lm, steps)          # affine translators, trained on KL
    trace = transition_trace(lm, ids, k=5)               # input- vs output-side anchors

Entries: 0 = embedding output, i = output of block i (before the final norm), L = last;
entry L is the model's own distribution (KL 0). See docs/lens.md.
"""

from tying.lens.evaluate import UNIT, Lens, LensKL, entry_labels, evaluate_lens
from tying.lens.kl import FinalDistribution, kl_bits, kl_nats
from tying.lens.logit_lens import LogitLens, logit_lens_kl
from tying.lens.plots import plot_lens_kl
from tying.lens.trace import Trace, TraceEntry, format_trace, plot_trace, transition_trace
from tying.lens.tuned_lens import (
    TrainingHistory,
    TunedLens,
    TunedLensTraining,
    train_tuned_lens,
    tuned_lens_kl,
)

__all__ = [
    "UNIT",
    "FinalDistribution",
    "Lens",
    "LensKL",
    "LogitLens",
    "Trace",
    "TraceEntry",
    "TrainingHistory",
    "TunedLens",
    "TunedLensTraining",
    "entry_labels",
    "evaluate_lens",
    "format_trace",
    "kl_bits",
    "kl_nats",
    "logit_lens_kl",
    "plot_lens_kl",
    "plot_trace",
    "train_tuned_lens",
    "transition_trace",
    "tuned_lens_kl",
]
