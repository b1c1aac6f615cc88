"""The CLI's help is plain text (no reStructuredText markup) and every command has a description."""

from __future__ import annotations

import re

import pytest

from engine import cli


@pytest.mark.parametrize("rst, text", [
    ("``python -m engine score``: score a run", "python -m engine score: score a run"),
    ("see :func:`~engine.tasks.scoring.score_run`", "see score_run"),
    ("see :func:`engine.tasks.scoring.score_run`", "see engine.tasks.scoring.score_run"),
    ("a :ref:`guide <methods-7>` and :class:`~engine.errors.UserError`", "a guide and UserError"),
    ("the `default role` and **strong** or *emphasised* words", "the default role and strong or emphasised words"),
    ("2 * 3 * 4 and P(correct) <= 0.1 stay", "2 * 3 * 4 and P(correct) <= 0.1 stay"),
])
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
