"""docs/CLI.md is the CLI's own parser, printed (engine/cli_docs.py): a new or changed option that is not
in the file fails here, with the command that rewrites it."""

from __future__ import annotations

from engine.cli_docs import cli_markdown
from tests.conftest import ROOT


def test_docs_cli_md_is_the_parser_s_help():
    want = cli_markdown()
    have = (ROOT / "docs" / "CLI.md").read_text(encoding="utf-8")
    assert have == want, "docs/CLI.md is out of date: run `python -m engine.cli_docs > docs/CLI.md`"


def test_every_command_and_sub_command_has_a_section():
    from engine.cli import build_parser
    from engine.cli_docs import _subparsers

    text = cli_markdown()
    for name, sp in _subparsers(build_parser(prog="python -m engine")):
        assert f"## `python -m engine {name}`" in text
        for sub, _ in _subparsers(sp):
            assert f"### `python -m engine {name} {sub}`" in text
    assert "/work/" not in text and str(ROOT) not in text  # no path of this machine


def test_paths_are_made_relative_before_argparse_wraps_them(monkeypatch):
    """A clone in a long folder: the default database path is wider than a help line, so argparse breaks it
    across two lines; the docs must still show `data/coupled_eval.duckdb` (CI clones into such a folder)."""
    import argparse

    from engine.cli_docs import _relative_defaults

    root = "/tmp/tmp.17tlJ5vCgm/a-rather-long-clone-folder-name/coupled-eval/"
    p = argparse.ArgumentParser(prog="x")
    p.add_argument(
        "--db", default=root + "data/coupled_eval.duckdb", help="database file (default: %(default)s)"
    )
    monkeypatch.setenv("COLUMNS", "100")
    _relative_defaults(p, root, root + "data/coupled_eval.duckdb")
    assert "(default: data/coupled_eval.duckdb)" in p.format_help()
