"""The command line: ``python -m engine <command> ...``, or ``coupled-eval <command> ...`` (the console
script; usage and help name the program the way it was started, :func:`prog_name`).

Each command lives in a module of ``engine.commands`` named after it, with ``register(subparsers)``;
the parser it adds sets ``func`` (``args -> int`` exit code). Results go to stdout (a short
summary; the full result as JSON with ``--json``), messages and errors to stderr. Help text is
plain: :func:`plain` strips the reStructuredText of docstrings and help strings. A
:class:`~engine.errors.UserError` becomes one clear line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from engine.commands import COMMANDS
from engine.errors import UserError

_ROLE = re.compile(
    r":[a-z]+(?::[a-z]+)?:`~?([^`<]*?)\s*(?:<[^`>]*>)?`"
)  # :func:`~a.b.c` / :ref:`text <t>`
_LITERAL = re.compile(r"``(.+?)``")
_DEFAULT = re.compile(r"(?<![`\w])`([^`\n]+)`(?![`\w])")  # `text` (the default role)
_EMPH = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")


def plain(text: str | None) -> str:
    """reStructuredText markup -> plain text for ``--help``: ``code`` -> code,
    :func:`~engine.x.f` -> f (the last component when ``~``), :role:`text <target>` -> text,
    `text` -> text, *emphasis* / **strong** -> the words."""
    if not text:
        return text or ""

    def role(m: re.Match) -> str:
        body = m.group(1)
        return body.rsplit(".", 1)[-1] if m.group(0).split("`", 1)[1].startswith("~") else body

    text = _ROLE.sub(role, text)
    text = _LITERAL.sub(r"\1", text)
    text = _DEFAULT.sub(r"\1", text)
    return _EMPH.sub(r"\1", text)


class PlainFormatter(argparse.RawDescriptionHelpFormatter):
    """Help without reStructuredText markup; descriptions keep their line breaks (docstrings)."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        try:
            text = super()._expand_help(action)
        except (
            ValueError,
            TypeError,
            KeyError,
        ):  # a bare '%' ("95% CI") in a help string: show it as written
            text = action.help or ""
        return plain(text)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose help (and every sub-parser's) is plain text."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", PlainFormatter)
        super().__init__(*args, **kwargs)


def _describe(sub: argparse._SubParsersAction, names: list[str], doc: str | None) -> None:
    """Give the command parsers ``names`` a description: the module docstring (plain text on
    output) without its first paragraph when that names the layer ("CLI layer of ...", a note for
    the reader of the code), else the command's help line."""
    helps = {a.dest: a.help for a in sub._choices_actions}
    text = (doc or "").strip()
    if text.startswith("CLI layer"):
        text = text.partition("\n\n")[2].strip()
    for name in names:
        p = sub.choices[name]
        if p.description is None:
            p.description = text or helps.get(name)


SCRIPT = "coupled-eval"  # pyproject's console script (engine.cli:main)
MODULE_PROG = "python -m engine"


def prog_name(argv0: str | None = None) -> str:
    """The program name help and usage show, following how the CLI was started: ``coupled-eval``
    when ``argv0`` (default ``sys.argv[0]``) is the console script (any folder; pip's launcher may
    leave a ``.exe``), else ``python -m engine`` (``sys.argv[0]`` is then engine/__main__.py)."""
    import os

    base = os.path.basename(sys.argv[0] if argv0 is None else argv0)
    return SCRIPT if base.removesuffix(".exe") == SCRIPT else MODULE_PROG


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; ``prog``: the name in usage and help (default :func:`prog_name`)."""
    prog = prog_name() if prog is None else prog
    parser = Parser(
        prog=prog,
        description=f"Coupled Eval from the command line. {prog} COMMAND --help describes one command.",
        epilog="Commands print a short summary by default; --json prints the full result "
        "(and --out FILE writes it, where offered).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in COMMANDS:
        module = importlib.import_module(f"engine.commands.{name}")
        before = set(sub.choices)
        module.register(sub)
        _describe(sub, [k for k in sub.choices if k not in before], module.__doc__)
    return parser


def _check_db(args) -> None:
    """Refuse a damaged, foreign or other-version --db before the command does anything
    (tests/test_store_integrity.py); ``db check`` / ``db migrate`` look at the file themselves."""
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
