"""Old import paths kept for one release (0.2), each with a DeprecationWarning.

Modules that moved are aliased by a meta-path finder: `import tying.model.decoder` returns the
module `tying.decoder.decoder` itself (one module object, two names) after warning once.
Names that moved between modules are served by `moved_attribute` from a module `__getattr__`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any

#: Moved modules: old dotted name -> new dotted name (submodules follow their package).
MOVED_MODULES: dict[str, str] = {
    "tying.models": "tying.loader",
    "tying.model": "tying.decoder",
    "tying.model.hf": "tying.hf.decoder_lm",
    "tying.experiments": "tying.teacher",
    "tying.experiments.teacher_init": "tying.teacher.step0",
    "tying.interface.factory": "tying.interface.registry",
    "tying.hf.calibrate": "tying.conversion",
    "tying.hf.adapters": "tying.hf.families",
}

#: Names that `tying.model` exported and that now live outside `tying.decoder`.
_MODEL_PACKAGE_EXTRAS = {
    "TyingConfig": "tying.hf.decoder_lm",
    "TyingForCausalLM": "tying.hf.decoder_lm",
    "register_auto": "tying.hf.decoder_lm",
}


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"{old} moved to {new}; the old name will be removed in tying 0.3",
        DeprecationWarning,
        stacklevel=3,
    )


def _target(name: str) -> str | None:
    """The new dotted name of an old module name, or None if it did not move."""
    if name in MOVED_MODULES:
        return MOVED_MODULES[name]
    parent, _, leaf = name.rpartition(".")
    while parent:
        if parent in MOVED_MODULES:
            return f"{MOVED_MODULES[parent]}.{leaf}"
        parent, _, head = parent.rpartition(".")
        leaf = f"{head}.{leaf}"
    return None


class _AliasLoader(importlib.abc.Loader):
    """Loads an old module name as the module at its new name."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        _warn(self.old, self.new)
        module = importlib.import_module(self.new)
        if self.old == "tying.model":
            return _model_package(module)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: the new module is already executed; give it back its own spec."""
        spec = getattr(self, "_spec", None)
        if spec is not None:
            module.__spec__ = spec


def _model_package(decoder: types.ModuleType) -> types.ModuleType:
    """`tying.model` as it was: the decoder package plus the transformers wrapper's names."""
    shim = types.ModuleType("tying.model", decoder.__doc__)
    shim.__path__ = []  # a package, so `tying.model.decoder` & co. resolve through the finder

    def module_getattr(name: str) -> Any:
        if name in _MODEL_PACKAGE_EXTRAS:
            return getattr(importlib.import_module(_MODEL_PACKAGE_EXTRAS[name]), name)
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return getattr(decoder, name)
        except AttributeError:
            return importlib.import_module(f"tying.model.{name}")

    shim.__getattr__ = module_getattr  # type: ignore[method-assign]
    return shim


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds old module names and hands them to `_AliasLoader`."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = _target(fullname)
        if new is None:
            return None
        is_package = fullname in MOVED_MODULES and fullname in ("tying.model", "tying.experiments")
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(fullname, new), is_package=is_package
        )


def install() -> None:
    """Put the finder first on `sys.meta_path` (idempotent)."""
    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModuleFinder())


def moved_attribute(old_module: str, name: str, new_module: str) -> Any:
    """`new_module.name`, with a DeprecationWarning saying it moved away from `old_module`."""
    return moved_name(f"{old_module}.{name}", new_module, name)


def moved_name(old: str, new_module: str, name: str) -> Any:
    """`new_module.name`, with a DeprecationWarning saying that `old` (a dotted name: a module
    attribute or a method) moved there.

    Shims of a lower layer reach the new place through `importlib`, never an import statement,
    so that the layering of docs/architecture.md holds; they go in 0.3.
    """
    _warn(old, f"{new_module}.{name}")
    return getattr(importlib.import_module(new_module), name)
