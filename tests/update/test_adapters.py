"""`tying.adapters`: default LoRA targets by family, the base-model fingerprint, refusing an adapter
on another base (other weights, the PIT conversion of the same teacher, another width), accepting
it on its base in bfloat16, plain peft adapters."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from tying.adapters import (
    ADAPTER_RECORD,
    apply_adapter,
    base_record,
    causal_lm_of,
    check_adapter_base,
    default_target_modules,
    structure_hash,
    weights_hash,
)
from tying.loader import load_any, wrap_model
from tying.update import finetune

from .test_finetune import LLAMA_TARGETS, options


def test_default_targets_per_family(tiny_base: Path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    llama = load_any(str(tiny_base))
    assert default_target_modules(llama.model.blocks) == LLAMA_TARGETS
    gpt2 = wrap_model(GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=64)))
    assert default_target_modules(gpt2.model.blocks) == ["c_attn", "c_proj", "c_fc"]
    with pytest.raises(ValueError, match="no linear layer"):
        default_target_modules([torch.nn.LayerNorm(4)])


def test_fingerprint_is_the_hash_of_the_state_dict(tiny_base: Path) -> None:
    model = causal_lm_of(load_any(str(tiny_base)).model)
    state = model.state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name]
        digest.update(f"{name}:{tuple(t.shape)}:{t.dtype};".encode())
        digest.update(t.contiguous().numpy().tobytes())
    assert weights_hash(model) == digest.hexdigest()
    shapes = "".join(f"{n}:{tuple(state[n].shape)};" for n in sorted(state))
    assert structure_hash(model) == hashlib.sha256(shapes.encode()).hexdigest()
    record = base_record(model, spec="x")
    assert record["spec"] == "x" and record["dtype"] == "float32"
    assert record["tensors"] == len(state) and record["tie"] == "tt"
    bf16 = causal_lm_of(load_any(str(tiny_base), torch.bfloat16).model)
    assert weights_hash(bf16) != record["weights_sha256"]
    assert weights_hash(bf16, torch.bfloat16) == record["weights_bf16_sha256"]


@pytest.fixture(scope="module")
def trained_adapter(tiny_base: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("adapters") / "a"
    finetune(options(tiny_base, out, max_steps=1))
    return out


def test_accepted_on_its_base_also_in_bfloat16(tiny_base: Path, trained_adapter: Path) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        model = causal_lm_of(load_any(str(tiny_base), dtype).model)
        record = check_adapter_base(trained_adapter, model)
        assert record is not None and record["base"]["spec"] == str(tiny_base)
        apply_adapter(model, trained_adapter)


def test_refused_on_other_weights(tiny_base: Path, trained_adapter: Path) -> None:
    model = causal_lm_of(load_any(str(tiny_base)).model)
    with torch.no_grad():
        model.model.norm.weight[0] += 1e-3  # one entry of a tensor LoRA never touches
    with pytest.raises(ValueError, match=r"another base model \(other weights"):
        check_adapter_base(trained_adapter, model)


def test_refused_on_the_pit_conversion_of_its_base(tiny_base: Path, trained_adapter: Path) -> None:
    from transformers import AutoModelForCausalLM

    from tying.hf import convert

    pit = AutoModelForCausalLM.from_pretrained(tiny_base)
    convert(pit, tie="pit")  # same blocks, another interface
    with pytest.raises(ValueError, match=r"another base model \(tie 'tt', this model has 'pit'"):
        check_adapter_base(trained_adapter, pit)


def test_refused_on_another_width(trained_adapter: Path, tmp_path: Path) -> None:
    from ..evaluation._harness_models import save_tiny_model, train_tokenizer

    other = save_tiny_model(tmp_path / "other", train_tokenizer(), hidden=48)
    model = causal_lm_of(load_any(str(other)).model)
    with pytest.raises(ValueError, match=r"another base model \(d_model 32, this model has 48"):
        check_adapter_base(trained_adapter, model)


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing`:FutureWarning")  # peft itself
def test_plain_peft_adapter_gets_the_shape_check(tiny_base: Path, tmp_path: Path) -> None:
    import peft
    from transformers import AutoModelForCausalLM

    lora = peft.LoraConfig(r=2, target_modules=["q_proj"])
    peft.get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_base), lora).save_pretrained(
        tmp_path / "plain"
    )
    assert not (tmp_path / "plain" / ADAPTER_RECORD).exists()
    model = causal_lm_of(load_any(str(tiny_base)).model)
    assert check_adapter_base(tmp_path / "plain", model) is None


def test_malformed_record(trained_adapter: Path, tmp_path: Path, tiny_base: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(trained_adapter, copy)
    (copy / ADAPTER_RECORD).write_text(json.dumps({"format": 1}))
    model = causal_lm_of(load_any(str(tiny_base)).model)
    with pytest.raises(ValueError, match="has no 'base' record"):
        check_adapter_base(copy, model)
    (copy / ADAPTER_RECORD).write_text("{")
    with pytest.raises(ValueError, match="not valid JSON"):
        check_adapter_base(copy, model)


def test_peft_wraps_keep_transformers_chatter_off_the_terminal(
    tiny_base: Path, trained_adapter: Path
) -> None:
    """peft reads `is_gradient_checkpointing`, which transformers deprecates: an expected
    FutureWarning on every wrap, sent to the debug log (`quiet_peft`), while any other warning
    still reaches the caller."""
    import warnings

    from tying.adapters import quiet_peft
    from tying.update.lora import add_lora

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        apply_adapter(causal_lm_of(load_any(str(tiny_base)).model), trained_adapter)
        add_lora(causal_lm_of(load_any(str(tiny_base)).model), LLAMA_TARGETS)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_peft():
            warnings.warn("`is_gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1)
            warnings.warn("something else", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something else"]
