"""Every `python -m engine ...` command written in the README and docs/ parses with the CLI's own parser:
a renamed or removed option, a wrong choice or a missing required argument in the docs fails here.

Lines written as reference syntax (``[--opt X]``, ``a|b`` alternatives, ``...``) are usage summaries, not
commands, and are skipped; placeholders such as ``RUN`` parse like any value. Commands that are also run
verbatim are tested where they run (tests/test_report.py, tests/test_judge_audit.py, tests/test_labels.py,
tests/test_next_commands.py)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from engine.cli import build_parser
from tests.conftest import ROOT

PREFIXES = (
    ".venv/bin/python -m engine ",
    "python -m engine ",
    ".venv/bin/coupled-eval ",
    "coupled-eval ",
    ".venv-vllm/bin/python -m engine ",
)


def _commands() -> list[tuple[str, str]]:
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name in ("CLI.md", "METHODS.md"):  # the parser's own help text; the specification
            continue
        for block in re.findall(
            r"```(?:bash|sh|console)?\n(.*?)```", path.read_text(encoding="utf-8"), re.S
        ):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.strip()
                for pre in PREFIXES:
                    if line.startswith(pre):
                        cmd = line[len(pre) :].split("  #")[0].split(" # ")[0].strip()
                        if not re.search(r"\[|\||\.\.\.|…|<[A-Za-z]", cmd):
                            out.append((f"{path.name}: {line[:90]}", cmd))
    return out


COMMANDS = _commands()


def test_the_docs_have_commands_to_check():
    assert len(COMMANDS) >= 30, (
        COMMANDS
    )  # the pattern finds them (a broken pattern would pass vacuously)


@pytest.mark.parametrize("where,cmd", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_documented_command_parses(where, cmd):
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(shlex.split(cmd))
        except SystemExit as exc:
            pytest.fail(
                f"{where}: `{cmd}` does not parse (exit {exc.code}): {err.getvalue().strip()[-300:]}"
            )
