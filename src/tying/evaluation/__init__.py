"""Evaluating models: loss on a text (`text_loss`), and downstream tasks (see the submodules)."""
