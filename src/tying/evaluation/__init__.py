"""Evaluation of models and updates: loss on a text, tasks from local files, answer extraction,
sandboxed code, statistics, lm-evaluation-harness.

Modules: `text_loss` (`tying eval`: loss of any model on a text), `tasks` (GSM8K, SVAMP, MBPP,
HumanEval readers and prompt templates), `answers` (final numbers, code extraction),
`sandbox` (running model-written programs), `stats` (Wilson interval, exact McNemar test,
paired bootstrap), `generate` (batched greedy generation), `harness` / `evaluate` (the lm-eval
model "tying" and `tying evaluate`). docs/evaluation.md and docs/lm-eval.md define each.
"""
