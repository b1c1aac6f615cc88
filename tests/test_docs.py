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
