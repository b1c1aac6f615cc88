"""The command line: ``python -m engine <command> ...``.

Each command lives in a module of ``engine.commands`` named after it, with ``register(subparsers)``;
the parser it adds sets ``func`` (``args -> int`` exit code). Results go to stdout (JSON for
analyses), messages and errors to stderr. A :class:`~engine.errors.UserError` becomes one clear
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from engine.commands import COMMANDS
from engine.errors import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"engine.commands.{name}").register(sub)
    return parser


def _check_db(args) -> None:
    """Refuse a damaged, foreign or other-version --db before the command does anything (issue 13);
    ``db check`` / ``db migrate`` look at the file themselves."""
    db = getattr(args, "db", None)
    if db is None or args.command == "db":
        return
    from pathlib import Path

    if Path(db).exists():
        from engine import store

        store.verify(db)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        _check_db(args)
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: completed work is stored; rerun the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. `python -m engine export ... | head`): not an error of ours.
        # Point stdout at devnull so the interpreter's final flush does not raise again.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
