"""Command groups shared by several command modules (e.g. ``import paper-mmlu`` and ``import comparisons``)."""

from __future__ import annotations

_HELP = {"import": "import external data into the database"}


def get_group(sub, name: str, help: str | None = None):
    """The sub-subparsers of group ``name`` (``python -m engine NAME ...``), created on first use."""
    groups = getattr(sub, "_coupled_eval_groups", None)
    if groups is None:
        groups = {}
        sub._coupled_eval_groups = groups
    if name not in groups:
        parser = sub.add_parser(name, help=help or _HELP.get(name, name))
        inner = parser.add_subparsers(dest=f"{name}_command", metavar="WHAT")
        inner.required = True
        groups[name] = inner
    return groups[name]
