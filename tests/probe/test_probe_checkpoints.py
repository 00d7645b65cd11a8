"""A checkpoint of another model is bad input (ValueError, one line in the CLI), not a bug."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from tying.decoder import Decoder, ModelConfig
from tying.probe.checkpoints import checkpoint_matrices


def test_a_checkpoint_of_another_model_is_a_value_error(tmp_path: Path) -> None:
    model = Decoder(ModelConfig(vocab_size=64, d_model=64, n_layers=1, max_seq_len=16))
    folder = tmp_path / "step_00000010"
    folder.mkdir()
    save_file({"something.else": torch.zeros(2)}, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match="not written by the probed model"):
        next(checkpoint_matrices(model, model.interface, [folder]))
