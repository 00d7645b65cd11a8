"""Rebuild a trained model from a checkpoint folder: `load_trained`, which lives with the one
model resolver (`tying.train.resolve`); kept importable here."""

from tying.train.resolve import load_trained

__all__ = ["load_trained"]
