"""The repository's docs stay true to their sources."""

from __future__ import annotations

import re

from tests.conftest import ROOT, shared_path


def test_methods_copy_is_identical_to_the_shared_specification():
    """docs/METHODS.md is the repository's copy of ../shared/docs/METHODS.md (the specification);
    the two stay byte-identical so the code's citations point at the real text."""
    spec = shared_path("docs", "METHODS.md")
    assert (ROOT / "docs" / "METHODS.md").read_bytes() == spec.read_bytes()


def test_every_docs_file_a_test_or_module_cites_exists():
    """A `docs/NAME.md` cited in the code or the tests is a file of the repository."""
    cited: set[str] = set()
    for folder in ("engine", "dashboard", "app_pages", "tests", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "test_docs.py":
                continue
            cited.update(re.findall(r"docs/([A-Za-z0-9_\-]+\.md)", path.read_text(encoding="utf-8")))
    assert cited, "no citation found: the pattern is wrong"
    missing = sorted(name for name in cited if not (ROOT / "docs" / name).is_file())
    assert not missing, f"cited but not in docs/: {missing}"


TRACKER = re.compile(r"\b[Ii]ssues? #?\d+|\(items? \d+[^)\n]*\)|#\s*-+\s*items? \d+")


def test_no_tracker_numbers_in_code_docs_or_config():
    """A reader of the repository has no issue tracker: code, docs and config say the reason or the
    guarantee (a test name, a docs section), never "issue 18 item 2" or a heading's "(item 14)"."""
    assert TRACKER.search("as issue 21 asked") and TRACKER.search(
        "### Elo (item 15)"
    )  # the pattern works
    files = [ROOT / name for name in ("README.md", "app.py", "pyproject.toml", "requirements.txt")]
    for folder, pattern in (
        ("engine", "*.py"),
        ("dashboard", "*.py"),
        ("app_pages", "*.py"),
        ("tests", "*.py"),
        ("bench", "*.py"),
        ("scripts", "*"),
        ("docs", "*.md"),
        (".ci", "*"),
    ):
        files += [
            p for p in (ROOT / folder).rglob(pattern) if p.is_file() and "__pycache__" not in p.parts
        ]
    hits = []
    for path in files:
        if path.name in ("METHODS.md", "test_docs.py") or not path.exists():
            continue  # METHODS.md: the shared specification's own text
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in TRACKER.finditer(text)]
    assert not hits, hits[:20]
