"""The CLI's help is plain text (no reStructuredText markup) and every command has a description."""

from __future__ import annotations

import re

import pytest

from engine import cli


@pytest.mark.parametrize(
    "rst, text",
    [
        ("``python -m engine score``: score a run", "python -m engine score: score a run"),
        ("see :func:`~engine.tasks.scoring.score_run`", "see score_run"),
        ("see :func:`engine.tasks.scoring.score_run`", "see engine.tasks.scoring.score_run"),
        ("a :ref:`guide <methods-7>` and :class:`~engine.errors.UserError`", "a guide and UserError"),
        (
            "the `default role` and **strong** or *emphasised* words",
            "the default role and strong or emphasised words",
        ),
        ("2 * 3 * 4 and P(correct) <= 0.1 stay", "2 * 3 * 4 and P(correct) <= 0.1 stay"),
    ],
)
def test_plain_strips_rst_exactly(rst, text):
    assert cli.plain(rst) == text


MARKUP = re.compile(r"``|:[a-z]+:`|(?<![\w`])`[^`\n]+`")


def _helps(parser, prefix=()):
    """(command path, help text) for the parser and every sub-parser, recursively."""
    yield prefix, parser.format_help()
    for action in parser._actions:
        if getattr(action, "choices", None) and isinstance(action.choices, dict):
            for name, sub in action.choices.items():
                yield from _helps(sub, prefix + (name,))


def test_a_bare_percent_in_a_help_string_does_not_break_help():
    parser = cli.Parser(prog="x")
    sub = parser.add_subparsers(parser_class=cli.Parser)
    sub.add_parser("acc", help="accuracy with 95% CI, default %(default)s")
    assert "accuracy with 95% CI" in parser.format_help()


def test_every_help_is_plain_and_described():
    helps = list(_helps(cli.build_parser()))
    assert len(helps) > 15  # every command and sub-command
    for path, text in helps:
        assert not MARKUP.search(text), (path, MARKUP.search(text).group(0))
    top = dict(helps)[()]
    assert "--json" in top
    score = dict(helps)[("score",)]
    assert "score every generation of a run" in score and "--json" in score


@pytest.mark.parametrize(
    "argv0, prog",
    [
        ("/work/main/.venv/bin/coupled-eval", "coupled-eval"),
        ("coupled-eval", "coupled-eval"),
        ("C:\\venv\\Scripts\\coupled-eval.exe".replace("\\", "/"), "coupled-eval"),
        ("/repo/engine/__main__.py", "python -m engine"),
        ("-c", "python -m engine"),
        ("/usr/bin/coupled-eval-old", "python -m engine"),
    ],
)
def test_prog_name_follows_how_the_cli_was_started(argv0, prog):
    assert cli.prog_name(argv0) == prog


@pytest.mark.parametrize(
    "argv0, prog",
    [("/some/venv/bin/coupled-eval", "coupled-eval"), ("/repo/engine/__main__.py", "python -m engine")],
)
def test_help_and_usage_name_the_program_as_started(argv0, prog, monkeypatch, capsys):
    """main() with a patched sys.argv[0]: the console script's help says ``usage: coupled-eval``, both in
    the top-level help and a command's, and so does a usage error; ``python -m engine`` keeps its name."""
    monkeypatch.setattr("sys.argv", [argv0])
    for argv in (["--help"], ["score", "--help"]):
        with pytest.raises(SystemExit) as exc:
            cli.main(argv)
        assert exc.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {prog} {' '.join(argv[:-1])}".rstrip()), out[:80]
    with pytest.raises(SystemExit) as exc:
        cli.main(["no-such-command"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: {prog} ") and f"{prog}: error: argument COMMAND" in err
    other = "python -m engine" if prog == "coupled-eval" else "coupled-eval"
    assert other not in cli.build_parser().format_help()


def test_python_dash_m_engine_says_so():
    import subprocess
    import sys

    from tests.conftest import ROOT

    r = subprocess.run(
        [sys.executable, "-m", "engine", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.startswith("usage: python -m engine "), (
        r.stdout[:200] + r.stderr[-500:]
    )
