"""Import aiogram without building all of its pydantic models up front.

`aiogram.types` declares its ~300 models with `defer_build=True`, then calls `model_rebuild`
on every one of them at import (to hand them each other's names), which builds them all:
about 2.3 s and 100 MB of the daemon's start, for a channel that uses a dozen (measured in
docs/benchmarks.md). Here those calls are held back while aiogram imports, and each model
module is handed the names the call would have given it, so pydantic builds each model,
complete, the first time it is used (a model nested in another resolves its names in its own
module's globals, so that is where they go).

Its ~170 API methods (`aiogram.methods`) are pydantic models too, built as each class is
declared: ~5 % of a worker's import instructions (callgrind, docs/benchmarks.md). Their base
class is given `defer_build` as its module finishes loading, so each method builds when first
called; the channel's own methods are built ahead by `pin_response_models`.

If a later aiogram stops calling `model_rebuild` this way, or renames its methods' base class,
nothing is deferred and the import is just slow again; `tests/unit/test_aiogram_import.py`
notices.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

TYPES_PACKAGE = "aiogram.types."
METHODS_BASE = "aiogram.methods.base"  # declares TelegramMethod, every API method's base


def import_aiogram() -> int:
    """Import aiogram (once per process, before anything else imports it). Returns how many
    modules' models were left to build on first use (0 when aiogram was already imported)."""
    if "aiogram" in sys.modules:
        return 0
    from pydantic import BaseModel

    rebuild = BaseModel.__dict__["model_rebuild"]  # the classmethod itself
    held: dict[str, dict[str, Any]] = {}  # module name -> the names its models were handed

    def hold_back(
        cls: type[BaseModel], *args: Any, _types_namespace: Any = None, **kwargs: Any
    ) -> bool | None:
        if cls.__module__.startswith(TYPES_PACKAGE) and _types_namespace is not None:
            held[cls.__module__] = _types_namespace
            return None
        return rebuild.__func__(cls, *args, _types_namespace=_types_namespace, **kwargs)

    BaseModel.model_rebuild = classmethod(hold_back)  # type: ignore[assignment,method-assign]
    deferring = _DeferMethods()
    sys.meta_path.insert(0, deferring)
    try:
        import aiogram  # noqa: F401
    finally:
        BaseModel.model_rebuild = rebuild  # type: ignore[method-assign]
        if deferring in sys.meta_path:
            sys.meta_path.remove(deferring)
    for module, namespace in held.items():
        add_missing_names(vars(sys.modules[module]), namespace)
    return len(held)


def add_missing_names(names: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Give `names` (a module's globals) each name of `namespace` it lacks, never replacing one
    it defines itself. (A set difference: ~300 modules of ~600 names each, and one setdefault
    per name cost ~40 ms of every start.)"""
    names.update({name: namespace[name] for name in namespace.keys() - names.keys()})


class _DeferMethods(importlib.abc.MetaPathFinder):
    """Finds `aiogram.methods.base` as Python would, and once the module has run (before any
    method subclasses its `TelegramMethod`), gives that class `defer_build`, which pydantic
    hands on to each subclass's config. Removes itself once used."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != METHODS_BASE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            base = getattr(module, "TelegramMethod", None)
            if base is not None:
                base.model_config = {**base.model_config, "defer_build": True}

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
