"""Lazy package exports (PEP 562): a package's ``__init__`` names what it exports and from which
module, and a name's module is imported on its first use, so ``import engine.models`` or
``import engine.generation`` stays cheap (no torch until a model or a loop is asked for)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(
    package: str, exports: dict[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """The package's module-level ``__getattr__``: ``exports[name]``'s ``name``, imported on first
    use and kept in ``namespace`` (the package's ``globals()``); AttributeError for any other name."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
