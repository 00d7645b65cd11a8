"""LoRA adapters and the base model they belong to: the one place `tying.update` (which writes
adapters) and `tying.evaluation` (which applies them) share.

An adapter folder written by `tying finetune` holds peft's own files and ours:

    adapter_config.json          peft's LoRA configuration (`save_pretrained`)
    adapter_model.safetensors    the LoRA matrices A (r × in) and B (out × r)
    tying_adapter.json           the record of the base model (`ADAPTER_RECORD`, below)
    interface.safetensors        only with --train-interface: the trained interface tensors

The record says which base model the adapter was trained on: its spec, kind, tie, V, d,
number of blocks, and a fingerprint of its weights,

    structure_sha256     sha256 over the state dict's (name, shape) pairs, names sorted
    weights_sha256       sha256 over (name, shape, dtype, raw bytes) of every tensor, names sorted
    weights_bf16_sha256  the same with every floating tensor rounded to bfloat16 first

The state dict is the transformers model's (`causal_lm_of`), before the adapter is applied: it
holds the token interface (TT's matrix, PIT's Z and L), the blocks and the norms, so an adapter
trained on a TT model is refused on the PIT conversion of the same teacher, whose blocks are
identical. `check_adapter_base` compares the record with the model it is about to be applied
to: the structure, tie, V and d, then the weights (exactly when the model is held in the dtype
the adapter was trained in, else through the bfloat16 rounding, so that a float32-trained
adapter is accepted on its base loaded in bfloat16). Adapters without a record (written by
peft elsewhere) get the shape check only: every LoRA matrix must name a module of the model
with matching sizes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from tying.decoder import Decoder
from tying.errors import InvalidInputError, MissingFileError
from tying.hf import HFCausalLM, TyingForCausalLM
from tying.interface import TokenInterface
from tying.outputs import write_text_atomic

log = logging.getLogger(__name__)

#: The record of the base model, in the adapter folder.
ADAPTER_RECORD = "tying_adapter.json"
#: Trained interface tensors (only with --train-interface), in the adapter folder.
INTERFACE_FILE = "interface.safetensors"
#: Version of the record's layout.
RECORD_FORMAT = 1


# ----------------------------------------------------------------------------- the model peft sees
def causal_lm_of(module: nn.Module, eos_token_id: int | None = None) -> nn.Module:
    """The transformers causal LM behind a model that `tying.loader.load_any` returned.

    Args:
        module: an `HFCausalLM` (its `hf_model` is returned), a `Decoder` (wrapped in a
            `TyingForCausalLM` that shares its tensors), or already a transformers causal LM.
        eos_token_id: end-of-sequence id written into a new `TyingForCausalLM`'s config.

    Raises:
        ValueError: a module of another kind.
    """
    if isinstance(module, HFCausalLM):
        return module.hf_model
    if isinstance(module, Decoder):
        wrapper = TyingForCausalLM.from_decoder(
            module, eos_token_id=eos_token_id, pad_token_id=eos_token_id
        )
        return wrapper.eval()
    if hasattr(module, "generate") and hasattr(module, "config"):
        return module
    raise InvalidInputError(
        f"cannot use a {type(module).__name__} here: expected a tying Decoder, an HFCausalLM or "
        "a transformers causal LM"
    )


def interface_of(model: nn.Module) -> TokenInterface:
    """The token interface of a transformers causal LM of this project (also under peft).

    `TyingForCausalLM.get_input_embeddings()` is the interface itself; a converted transformers
    model's is an `InterfaceEmbedding` reading it from the model.

    Raises:
        ValueError: the model has no token interface (not converted).
    """
    embedding = model.get_input_embeddings()
    if isinstance(embedding, TokenInterface):
        return embedding
    interface = getattr(embedding, "interface", None)
    if isinstance(interface, TokenInterface):
        return interface
    raise InvalidInputError(
        f"{type(model).__name__} has no token interface: load it with tying.loader.load_any"
    )


#: Module classes LoRA adapts by default: torch's linear layer and GPT-2's Conv1D (a linear
#: layer with its weight transposed), matched by class name so transformers is not imported.
LINEAR_CLASSES = ("Linear", "Conv1D")


def default_target_modules(blocks: Iterable[nn.Module]) -> list[str]:
    """The module names LoRA adapts by default: the attention and MLP projections.

    Derived from the model, not from a table per family: the leaf names (the last component of
    the module path) of every linear layer (`nn.Linear`, or transformers' `Conv1D` for GPT-2)
    inside the decoder blocks, in order of first appearance. The blocks hold the attention and
    MLP of each layer and nothing of the token interface, so this gives q/k/v/o_proj and
    gate/up/down_proj for our decoder and for Llama-family models, c_attn/c_proj/c_fc for
    GPT-2. peft matches a leaf name against every module whose path ends with it.

    Args:
        blocks: the decoder blocks (`LoadedModel.model.blocks`).

    Raises:
        ValueError: the blocks hold no linear layer.
    """
    names: dict[str, None] = {}
    for block in blocks:
        for path, module in block.named_modules():
            if path and type(module).__name__ in LINEAR_CLASSES:
                names[path.rsplit(".", 1)[-1]] = None
    if not names:
        raise InvalidInputError(
            "the model's blocks hold no linear layer for LoRA: set target_modules to the names of its linear layers"
        )
    return list(names)


def check_target_modules(model: nn.Module, targets: Iterable[str]) -> list[str]:
    """The full paths of the modules of `model` that the leaf names `targets` select.

    Raises:
        ValueError: a target that matches no module, or matches a module LoRA cannot adapt
            (not a linear layer).
    """
    modules = dict(model.named_modules())
    found: list[str] = []
    for target in targets:
        paths = [p for p in modules if p == target or p.endswith("." + target)]
        if not paths:
            raise InvalidInputError(
                f"no module of the model is called {target!r}: choose target_modules among "
                "the linear layers of its blocks (e.g. q_proj, v_proj)"
            )
        bad = [p for p in paths if type(modules[p]).__name__ not in LINEAR_CLASSES]
        if bad:
            raise InvalidInputError(
                f"module {bad[0]!r} is a {type(modules[bad[0]]).__name__}, not a linear layer: "
                "LoRA targets must be linear layers (e.g. q_proj, v_proj)"
            )
        found += paths
    return found


# ----------------------------------------------------------------------------- fingerprint
def _tensor_bytes(tensor: Tensor) -> memoryview:
    """The raw bytes of a tensor (CPU, contiguous), any dtype."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy())


def _state(model: nn.Module) -> dict[str, Tensor]:
    return {k: v for k, v in model.state_dict().items() if isinstance(v, Tensor)}


def model_dtype(model: nn.Module) -> str:
    """The dtype of the model's floating-point weights ("float32", "bfloat16", ...; "mixed"
    when they differ)."""
    dtypes = {
        str(t.dtype).removeprefix("torch.") for t in _state(model).values() if t.is_floating_point()
    }
    return dtypes.pop() if len(dtypes) == 1 else "mixed"


def structure_hash(model: nn.Module) -> str:
    """sha256 over the state dict's (name, shape) pairs, names sorted (hex)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(_state(model).items()):
        digest.update(f"{name}:{tuple(tensor.shape)};".encode())
    return digest.hexdigest()


def weights_hash(model: nn.Module, round_to: torch.dtype | None = None) -> str:
    """sha256 over (name, shape, dtype, bytes) of every tensor of the state dict, names sorted.

    Args:
        model: the model.
        round_to: cast every floating tensor to this dtype first (e.g. torch.bfloat16, so that
            the same weights held in float32 or bfloat16 give one hash).
    """
    digest = hashlib.sha256()
    for name, tensor in sorted(_state(model).items()):
        if round_to is not None and tensor.is_floating_point():
            tensor = tensor.detach().to(round_to)
        digest.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def base_record(model: nn.Module, **about: Any) -> dict[str, Any]:
    """The record of a base model: what it is and the fingerprint of its weights.

    Args:
        model: the transformers causal LM the adapter is trained on (`causal_lm_of`), before
            LoRA is injected.
        about: further entries (spec, name, kind, ...).

    Returns:
        {**about, "model_class", "model_type", "tie", "vocab_size", "d_model", "n_layers",
        "dtype", "tensors", "structure_sha256", "weights_sha256", "weights_bf16_sha256"}.
    """
    interface = interface_of(model)
    config = getattr(model, "config", None)
    state = _state(model)
    return {
        **about,
        "model_class": type(model).__name__,
        "model_type": getattr(config, "model_type", None),
        "tie": interface.tie,
        "vocab_size": interface.vocab_size,
        "d_model": interface.d_model,
        "n_layers": getattr(config, "num_hidden_layers", None),
        "dtype": model_dtype(model),
        "tensors": len(state),
        "structure_sha256": structure_hash(model),
        "weights_sha256": weights_hash(model),
        "weights_bf16_sha256": weights_hash(model, torch.bfloat16),
    }


# ----------------------------------------------------------------------------- files
def read_adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """The `adapter_config.json` of a peft adapter folder.

    Raises:
        FileNotFoundError: no such folder, or no adapter_config.json in it.
        ValueError: the file is not a JSON object.
    """
    folder = Path(adapter_dir).expanduser()
    if not folder.is_dir():
        raise MissingFileError(
            f"adapter folder {folder} does not exist: pass a peft adapter folder"
        )
    path = folder / "adapter_config.json"
    if not path.is_file():
        raise MissingFileError(
            f"{folder} has no adapter_config.json: pass a folder written by peft's save_pretrained"
        )
    return _read_json_object(path)


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InvalidInputError(
            f"{path} is not valid JSON ({e.msg} at line {e.lineno}): rewrite it"
        ) from e
    if not isinstance(value, dict):
        raise InvalidInputError(f"{path} must hold a JSON object, got {type(value).__name__}")
    return value


def write_adapter_record(folder: str | Path, record: dict[str, Any]) -> Path:
    """Write `record` as folder/tying_adapter.json (a temporary file, then a rename)."""
    text = json.dumps({"format": RECORD_FORMAT, **record}, indent=2) + "\n"
    return write_text_atomic(Path(folder) / ADAPTER_RECORD, text)


def read_adapter_record(adapter_dir: str | Path) -> dict[str, Any] | None:
    """The tying_adapter.json of an adapter folder, or None when it has none (plain peft).

    Raises:
        ValueError: the file is not a JSON object with a "base" record.
    """
    path = Path(adapter_dir).expanduser() / ADAPTER_RECORD
    if not path.is_file():
        return None
    record = _read_json_object(path)
    if not isinstance(record.get("base"), dict):
        raise InvalidInputError(f"{path} has no 'base' record: rewrite it with tying finetune")
    return record


def _adapter_tensor_shapes(adapter_dir: Path) -> dict[str, tuple[int, ...]]:
    """Shapes of the tensors in adapter_model.safetensors (read from its header), or {}."""
    path = adapter_dir / "adapter_model.safetensors"
    if not path.is_file():
        return {}
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}  # noqa: SIM118


# ----------------------------------------------------------------------------- checks
def _short(digest: Any) -> str:
    return str(digest)[:12]


def check_record(record: dict[str, Any], model: nn.Module, where: str | Path) -> None:
    """Refuse `model` unless it is the base model `record` (tying_adapter.json) describes.

    Raises:
        ValueError: another architecture, tie, V or d, or other weights (one line naming the
            base the adapter belongs to).
    """
    base = record["base"]
    trained_on = f"{base.get('spec') or base.get('name') or 'its base'}"
    hint = f"apply it to its own base model ({trained_on})"
    interface = interface_of(model)
    for key, value in (
        ("tie", interface.tie),
        ("vocab_size", interface.vocab_size),
        ("d_model", interface.d_model),
    ):
        if key in base and base[key] != value:
            raise InvalidInputError(
                f"adapter {where} was trained on another base model ({key} {base[key]!r}, this "
                f"model has {value!r}): {hint}"
            )
    structure = structure_hash(model)
    if base.get("structure_sha256") not in (None, structure):
        raise InvalidInputError(
            f"adapter {where} was trained on another base model (other tensor names or shapes: "
            f"structure {_short(base['structure_sha256'])} vs {_short(structure)}): {hint}"
        )
    dtype = model_dtype(model)
    if dtype == base.get("dtype") and "weights_sha256" in base:
        key, digest = "weights_sha256", weights_hash(model)
    else:
        key, digest = "weights_bf16_sha256", weights_hash(model, torch.bfloat16)
    if base.get(key) not in (None, digest):
        raise InvalidInputError(
            f"adapter {where} was trained on another base model (other weights: {key} "
            f"{_short(base[key])} vs {_short(digest)}): {hint}"
        )


def check_adapter_base(adapter_dir: str | Path, model: nn.Module) -> dict[str, Any] | None:
    """Refuse an adapter that was not trained on `model`; returns its record (None: plain peft).

    With a tying_adapter.json: `check_record` (architecture, tie, V, d, weights). Always: every
    LoRA matrix in adapter_model.safetensors names a module of `model` whose sizes match it
    (lora_A: (r, in_features), lora_B: (out_features, r)).

    Args:
        adapter_dir: a peft adapter folder (adapter_config.json, adapter_model.safetensors).
        model: the transformers model the adapter is about to be applied to (no adapter yet).

    Raises:
        FileNotFoundError / ValueError: see `read_adapter_config`.
        ValueError: the adapter belongs to another base model.
    """
    folder = Path(adapter_dir).expanduser()
    read_adapter_config(folder)
    record = read_adapter_record(folder)
    if record is not None:
        check_record(record, model, folder)
    modules = dict(model.named_modules())
    for key, shape in _adapter_tensor_shapes(folder).items():
        for side in ("lora_A", "lora_B"):
            marker = f".{side}."
            if marker not in key:
                continue
            name = key.split(marker)[0].removeprefix("base_model.model.")
            module = modules.get(name)
            if module is None:
                raise InvalidInputError(
                    f"adapter {folder} has weights for module {name!r}, which the model lacks: "
                    "it was trained on another base model; evaluate it with its own base"
                )
            expected = getattr(module, "in_features" if side == "lora_A" else "out_features", None)
            if expected is None and type(module).__name__ == "Conv1D":  # weight (in, out)
                expected = module.weight.shape[0 if side == "lora_A" else 1]
            got = shape[1] if side == "lora_A" else shape[0]
            if expected is not None and got != expected:
                raise InvalidInputError(
                    f"adapter {folder} does not fit module {name!r} ({side} has size {got}, the "
                    f"model's is {expected}): it was trained on another base model"
                )
    return record


# ----------------------------------------------------------------------------- applying
def load_interface_tensors(model: nn.Module, adapter_dir: str | Path) -> list[str]:
    """Copy the trained interface tensors of an adapter folder (interface.safetensors) into
    the model's interface; returns their names ([] when the folder has none).

    Raises:
        ValueError: a tensor the interface lacks, or of another shape.
    """
    path = Path(adapter_dir).expanduser() / INTERFACE_FILE
    if not path.is_file():
        return []
    from safetensors.torch import load_file

    tensors = load_file(str(path))
    interface = interface_of(model)
    own = {**dict(interface.named_buffers()), **dict(interface.named_parameters())}  # PIT's z
    with torch.no_grad():
        for name, value in tensors.items():
            target = own.get(name)
            if target is None or target.shape != value.shape:
                raise InvalidInputError(
                    f"{path} holds {name} {tuple(value.shape)}, which the model's "
                    f"{type(interface).__name__} does not have: it was trained on another base"
                )
            target.copy_(value.to(target.dtype))
    return sorted(tensors)


#: A warning peft triggers on every wrap (PeftModel reads `model.is_gradient_checkpointing`,
#: which transformers 5 deprecates): expected, not ours to fix, so logged at debug level.
_PEFT_CHATTER = "is_gradient_checkpointing"


@contextlib.contextmanager
def quiet_peft() -> Iterator[None]:
    """Run a peft wrap (`get_peft_model`, `PeftModel.from_pretrained`) with its expected
    transformers FutureWarning sent to the debug log; every other warning is re-emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        yield
    for w in caught:
        if issubclass(w.category, FutureWarning) and _PEFT_CHATTER in str(w.message):
            log.debug("peft: %s", w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def apply_adapter(model: nn.Module, adapter_dir: str | Path) -> nn.Module:
    """`model` under the adapter in `adapter_dir`, in eval mode (checked by `check_adapter_base`
    first; the LoRA layers are injected into `model` in place, and trained interface tensors,
    if any, copied into its interface).

    Raises:
        FileNotFoundError / ValueError: see `check_adapter_base`; also a ValueError when peft
            cannot load the adapter.
    """
    from peft import PeftModel

    folder = Path(adapter_dir).expanduser()
    check_adapter_base(folder, model)
    try:
        with quiet_peft():
            wrapped = PeftModel.from_pretrained(model, str(folder), is_trainable=False)
    except (RuntimeError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InvalidInputError(
            f"could not apply adapter {folder} ({first}): is it for this base model?"
        ) from e
    load_interface_tensors(model, folder)
    return wrapped.eval()
