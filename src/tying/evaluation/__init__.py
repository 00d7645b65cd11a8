"""Evaluation of models and updates: loss on a text, tasks from local files, answer extraction,
sandboxed code, statistics, lm-evaluation-harness.

Modules: `text_loss` (`tying eval`: loss of any model on a text), `tasks` (GSM8K, SVAMP, MBPP,
HumanEval readers and prompt templates), `answers` (final numbers, code extraction),
`sandbox` (running model-written programs), `stats` (Wilson interval, exact McNemar test,
paired bootstrap), `generate` (batched greedy generation), `harness` / `evaluate` (the lm-eval
model "tying" and `tying evaluate`), `divergence` / `side_effects` (`tying side-effects`: what an
update changed besides its target). docs/evaluation.md, docs/lm-eval.md, docs/updates.md and
docs/metrics.md §5 define each.
"""
