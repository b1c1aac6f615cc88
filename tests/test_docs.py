"""The repository's docs stay true to their sources."""

from __future__ import annotations

import re

import pytest

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


_NUM = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
NUMBER = re.compile(rf"{_NUM}(?:\s?[-–]\s?{_NUM})?")


def _measured_rows(readme: str) -> list[tuple[str, str, str]]:
    """(what, figure, linked doc) of each row of the README's "Measured" table."""
    section = readme.split("\n## Measured", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        link = re.search(r"\]\((docs/[A-Z_]+\.md)\)", line)
        if len(cells) == 3 and link:
            rows.append((cells[0], cells[1], link.group(1)))
    return rows


def _numbers(text: str) -> set[str]:
    return {re.sub(r"\s", "", m.group(0)).replace("–", "-") for m in NUMBER.finditer(text)}


def test_the_readmes_measured_figures_are_the_documents_figures():
    """Every number of a figure in the README's "Measured" table appears, as written, in the document
    the row links to (docs/BENCHMARKS.md or docs/REPRODUCTION.md): a figure re-measured there and
    not in the README (or rounded differently) fails here."""
    assert _numbers("0.97-0.98 at batch 64, 45.6 s, 14,042") == {"0.97-0.98", "64", "45.6", "14,042"}
    rows = _measured_rows((ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(rows) >= 5, rows
    missing = []
    for what, figure, doc in rows:
        have = _numbers((ROOT / doc).read_text(encoding="utf-8"))
        missing += [f"{what!r}: {n} not in {doc}" for n in sorted(_numbers(figure) - have)]
    assert not missing, "\n".join(missing)


DIARY = re.compile(r"\b(?:round \d+|this session|previous commit|this round|last session)\b", re.I)


@pytest.mark.parametrize("doc", ["docs/BENCHMARKS.md", "docs/REPRODUCTION.md"])
def test_benchmarks_and_reproduction_read_as_references(doc):
    """The reference documents state current figures; how a figure got there goes to the changelog
    at the end (everything from a "## Changelog" heading on), never "round 6" or "previous commit"."""
    assert DIARY.search("as in round 6") and DIARY.search("the previous commit")
    text = (ROOT / doc).read_text(encoding="utf-8").split("\n## Changelog", 1)[0]
    hits = [m.group(0) for m in DIARY.finditer(text)]
    assert not hits, hits


CITED_PATH = re.compile(
    r"(?<![\w/.])((?:engine|dashboard|app_pages|bench|tests|scripts)/[\w/.\-]+\.(?:py|sh|md|json|csv|sql))"
)
CITED_NAME = re.compile(r"(?<![\w/])(engine(?:\.[A-Za-z_]\w*)+)")
CITED_TEST = re.compile(r"(tests/[\w/]+\.py)::(test_\w+)")


def _defines(path, name: str) -> bool:
    """Whether a module's text defines (or imports) ``name`` at any indentation."""
    text = path.read_text(encoding="utf-8")
    pattern = rf"^\s*(?:async def|def|class) {name}\b|^\s*{name}\s*[:=]|^from \S+ import .*\b{name}\b|^\s+{name},$"
    return re.search(pattern, text, re.M) is not None


def _resolves(ref: str) -> bool:
    """``engine.pkg.module[.name[.member]]``: the longest prefix that is a module of the repository,
    and a name it defines (a method's class is enough for ``Class.method``)."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base.with_suffix(".py")
        module = module if module.is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[i:]
            return not rest or (len(rest) <= 2 and _defines(module, rest[0]))
    return False


def test_the_docs_cite_only_code_that_exists():
    """A file path (``engine/tasks/importers.py``), a dotted name (``engine.tasks.scoring.score_run``) or
    a test (``tests/test_docs.py::test_name``) in the README, CONTRIBUTING.md or docs/ names code that
    exists today: a renamed module, function or test is renamed in the docs too."""
    assert _resolves("engine.tasks.scoring.score_run") and not _resolves("engine.stats_io")
    bad = []
    for doc in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if doc.name == "METHODS.md":
            continue  # the shared specification's own text
        text = doc.read_text(encoding="utf-8")
        bad += [f"{doc.name}: {m}" for m in CITED_PATH.findall(text) if not (ROOT / m).exists()]
        bad += [f"{doc.name}: {m}" for m in CITED_NAME.findall(text) if not _resolves(m.rstrip("."))]
        for path, name in CITED_TEST.findall(text):
            if (ROOT / path).exists() and not _defines(ROOT / path, name):
                bad.append(f"{doc.name}: {path}::{name}")
    assert not bad, "\n".join(sorted(set(bad)))
