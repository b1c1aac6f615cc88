"""docs/CLI.md, the command reference, generated from the CLI's own parser (so it cannot drift:
``tests/test_cli_docs.py`` fails when the file is not what this prints).

    python -m engine.cli_docs > docs/CLI.md
"""

from __future__ import annotations

import argparse
import os
import sys

WIDTH = "100"  # the help text's line width, fixed so the file does not depend on the terminal

HEAD = """# Command reference

Every command of `python -m engine` (also installed as `coupled-eval`), with its options, as
`--help` prints them. Generated from the parser itself: `python -m engine.cli_docs > docs/CLI.md`
(`tests/test_cli_docs.py` fails when this file is out of date). Paths are shown relative to the
repository (the default database is `data/coupled_eval.duckdb`, or `$COUPLED_EVAL_DB`).
"""


def _subparsers(p: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            seen = set()
            for name, sp in a.choices.items():
                if id(sp) not in seen:
                    seen.add(id(sp))
                    out.append((name, sp))
    return out


def _relative_defaults(p: argparse.ArgumentParser, root: str, db: str) -> None:
    """Show this machine's paths relative to the repository in every default, before argparse formats
    (and wraps) the help: replacing them in the wrapped text missed a path broken across two lines when
    the clone's folder name was long."""
    for a in p._actions:
        if isinstance(a.default, str):
            a.default = a.default.replace(db, "data/coupled_eval.duckdb").replace(root, "")
    for _, sp in _subparsers(p):
        _relative_defaults(sp, root, db)


def _walk(p: argparse.ArgumentParser, path: list[str], level: int, out: list[str]) -> None:
    out += [f"{'#' * level} `{' '.join(path)}`", "", "```text", p.format_help().rstrip(), "```", ""]
    for name, sp in _subparsers(p):
        _walk(sp, [*path, name], min(level + 1, 4), out)


def cli_markdown() -> str:
    """The whole of docs/CLI.md."""
    from engine import config
    from engine.cli import MODULE_PROG, build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_parser(prog=MODULE_PROG)  # a parser of its own: its defaults may be rewritten
        _relative_defaults(parser, str(config.PROJECT_ROOT) + os.sep, str(config.DEFAULT_DB))
        out = [HEAD, "## Commands", ""]
        out += [
            f"- [`{name}`](#{('python -m engine ' + name).replace(' ', '-')})"
            for name, _ in _subparsers(parser)
        ]
        out.append("")
        for name, sp in _subparsers(parser):
            _walk(sp, [MODULE_PROG, name], 2, out)
        text = "\n".join(out)
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old
    text = text.replace(str(config.DEFAULT_DB), "data/coupled_eval.duckdb")
    return text.replace(str(config.PROJECT_ROOT) + os.sep, "").rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(cli_markdown())
