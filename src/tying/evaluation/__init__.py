"""Evaluation of models and updates: tasks from local files, answer extraction, sandboxed code, statistics.

Modules: `tasks` (GSM8K, SVAMP, MBPP, HumanEval readers and prompt templates), `answers` (final
numbers, code extraction), `sandbox` (running model-written programs), `stats` (Wilson interval,
exact McNemar test, paired bootstrap). docs/evaluation.md defines each.
"""
