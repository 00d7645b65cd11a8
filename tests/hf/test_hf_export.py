"""export(): standard transformers checkpoints that load without tying and give the same logits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from tying.hf import convert, export, interface_of

# Run in a child process where `import tying` fails: what a user without tying sees.
_PLAIN_LOAD = textwrap.dedent(
    """
    import json, sys
    sys.modules["tying"] = None  # any import of tying now raises ImportError
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    errors = {}
    for folder in sys.argv[1:]:
        data = load_file(folder + "/expected.safetensors")
        model = AutoModelForCausalLM.from_pretrained(folder).eval()
        with torch.no_grad():
            logits = model(data["ids"]).logits
        ref = data["logits"]
        errors[folder] = [
            float((logits - ref).abs().max() / ref.abs().max()),
            type(model.get_input_embeddings()).__name__,
            len(AutoTokenizer.from_pretrained(folder)),
        ]
    print(json.dumps(errors))
    """
)


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _weight_keys(folder: Path) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        return set(f.keys())


def test_export_reloads_in_plain_transformers(family: str, tiny, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids = tiny.ids()
    for tie in ("pit", "tt"):
        model = tiny.model(family, tied=True)
        convert(model, tie)
        ref = _logits(model, ids)
        out = export(model, tmp_path / tie)
        config = json.loads((out / "config.json").read_text())
        assert "tying" not in config
        reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
        assert reloaded.config.tie_word_embeddings is (tie == "tt")
        assert not type(reloaded.get_input_embeddings()).__module__.startswith("tying")
        assert tiny.rel(_logits(reloaded, ids), ref) < 1e-4
        keys = _weight_keys(out)
        assert not any(k.startswith("tying_interface") for k in keys)
        # TT stores one matrix (tied); PIT two (untied).
        assert len([k for k in keys if "embed" in k or "wte" in k or "lm_head" in k]) == (
            1 if tie == "tt" else 2
        )
        # the converted model is untouched by the export
        assert "tying" in model.config.to_dict() and model.config.tie_word_embeddings is False
        assert tiny.rel(_logits(model, ids), ref) == 0.0


def test_export_untied_of_untied_teacher_is_the_teacher(tiny, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    ids = tiny.ids()
    teacher = tiny.model("olmo2", tied=False)
    model = tiny.model("olmo2", tied=False)
    convert(model, "untied")
    reloaded = AutoModelForCausalLM.from_pretrained(export(model, tmp_path / "u")).eval()
    for (name, a), (_, b) in zip(teacher.state_dict().items(), reloaded.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert tiny.rel(_logits(reloaded, ids), _logits(teacher, ids)) == 0.0


def test_export_loads_with_tying_not_installed(tiny, tmp_path: Path) -> None:
    """A subprocess that cannot import tying loads the exports (and tokenizer) with the same logits."""
    ids = tiny.ids()
    folders = []
    for family, tie in (("llama", "pit"), ("gpt2", "tt"), ("gemma3", "pit")):
        model = tiny.model(family, tied=True)
        convert(model, tie)
        out = export(model, tmp_path / f"{family}-{tie}", tokenizer=tiny.tokenizer())
        save_file(
            {"ids": ids, "logits": _logits(model, ids).contiguous()}, out / "expected.safetensors"
        )
        folders.append(str(out))
    result = subprocess.run(
        [sys.executable, "-c", _PLAIN_LOAD, *folders], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    for folder in folders:
        err, embedding_class, n_tokens = errors[folder]
        assert err < 1e-4, folder
        assert "Interface" not in embedding_class
        assert n_tokens == tiny.VOCAB
    assert errors[folders[2]][1] == "Gemma3TextScaledWordEmbedding"


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_export_refuses_peft_and_unconverted(tiny, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    with pytest.raises(ValueError, match="convert it first"):
        export(tiny.model("llama"), tmp_path / "a")
    model = tiny.model("llama")
    convert(model, "pit")
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="merge_and_unload"):
        export(peft_model, tmp_path / "b")
    merged = peft_model.merge_and_unload()
    assert interface_of(merged) is interface_of(model)
    export(merged, tmp_path / "c")
