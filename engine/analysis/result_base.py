"""``to_dict()`` for the analyses' frozen result dataclasses: the fields in declaration order, nested
results converted, so that ``--json`` output keeps its keys while code reads attributes."""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def plain(x: Any) -> Any:
    """JSON-ready copy: results through their ``to_dict()``, dicts / lists / tuples element-wise
    (tuples become lists, as JSON has them)."""
    if hasattr(x, "to_dict"):
        return x.to_dict()
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    return x


class ToDict:
    """Mixin for a frozen dataclass: ``to_dict()`` = its fields in order, nested results converted."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]
