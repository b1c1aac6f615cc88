"""The layout rules of docs/ARCHITECTURE.md, checked on the code itself.

The layer table: which engine packages a package may import, besides itself and the leaf modules
``engine.config``, ``engine.errors``, ``engine.progress``, ``engine.filehash``, ``engine.csvsafe`` and
``engine.lazy``. Imports inside functions count too (a lazy import is still a dependency). ``engine``
never imports the dashboard, its pages or Streamlit.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

LEAVES = {"config", "errors", "progress", "filehash", "csvsafe", "lazy"}
ALLOWED: dict[str, set[str]] = {
    "sampling": set(),
    "stats": set(),
    "store": set(),
    "models": {"sampling"},
    # serving: the key rule, which `import harness` applies to link logs to a served run's generations
    "tasks": {"store", "stats", "models", "sampling", "serving"},
    "generation": {"sampling", "models", "store"},
    "analysis": {"store", "stats", "sampling", "figures"},
    "figures": set(),  # presentation: plain data in, Plotly figures out
    # the shareable report: analysis results -> HTML / paper tables
    "report": {"analysis", "figures"},
    # the OpenAI-compatible server (engine serve): requests -> keyed units on the generation engine
    "serving": {"generation", "models", "sampling", "store"},
}
FORBIDDEN_EVERYWHERE = ("dashboard", "app_pages", "streamlit")
# measured on code as `ruff format` writes it (line length 105): let a function or a file grow or
# split, never pack lines to fit
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 800
LIMITED = ("engine", "dashboard", "app_pages")


def _imports(path: Path, members: bool = False) -> list[tuple[int, str]]:
    """(line, dotted module) of every import in a file, relative ones resolved. ``members``: also
    ``pkg.name`` for each name of ``from pkg import name`` (a submodule when it is one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # `from engine import stats` names a package, not a symbol
            if mod == "engine" or members:
                out += [(node.lineno, f"{mod}.{a.name}") for a in node.names]
    return out


def _engine_files() -> list[Path]:
    return sorted((ROOT / "engine").rglob("*.py"))


def test_layer_table_names_real_packages():
    for name in ALLOWED:
        assert (ROOT / "engine" / name / "__init__.py").is_file(), name


def test_no_engine_module_imports_against_the_layer_table():
    bad = []
    for path in _engine_files():
        parts = path.relative_to(ROOT / "engine").parts
        layer = parts[0] if len(parts) > 1 else None
        for line, mod in _imports(path):
            top = mod.split(".")[0]
            if top in FORBIDDEN_EVERYWHERE:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {mod}")
                continue
            if layer not in ALLOWED or top != "engine" or mod == "engine":
                continue
            target = mod.split(".")[1]
            if target == layer or target in LEAVES:
                continue
            if target not in ALLOWED[layer]:
                bad.append(f"{path.relative_to(ROOT)}:{line} ({layer}) imports {mod}")
    assert not bad, "imports against the layer table (docs/ARCHITECTURE.md):\n" + "\n".join(bad)


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """The checker is not vacuous: an upward import in a stats-like file is found."""
    src = "from engine.store import db\nimport streamlit\n"
    f = ROOT / "engine" / "stats" / "__probe_layout__.py"
    try:
        f.write_text(src)
        with pytest.raises(AssertionError, match="__probe_layout__"):
            test_no_engine_module_imports_against_the_layer_table()
    finally:
        f.unlink()


def _too_long() -> tuple[list[str], list[str]]:
    funcs, mods = [], []
    for folder in LIMITED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            n = len(text.splitlines())
            if n > MAX_MODULE_LINES:
                mods.append(f"{path.relative_to(ROOT)}: {n} lines")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = node.end_lineno - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        funcs.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {length} lines"
                        )
    return funcs, mods


def test_no_function_over_120_lines_and_no_module_over_800():
    funcs, mods = _too_long()
    assert not funcs and not mods, "\n".join(funcs + mods)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _engine_cycles(package: str = "engine") -> list[list[str]]:
    """Strongly connected components (> 1 module) of a package's module import graph (``engine`` or
    ``dashboard``)."""
    names = {_module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {n: set() for n in names}
    for name, path in names.items():
        for _, mod in _imports(
            path, members=True
        ):  # `from engine.store import runs` imports engine.store.runs
            while mod and mod not in names:  # `from engine.x.y import f`: f is not a module
                mod = mod.rpartition(".")[0]
            # a module importing its own package (`from engine.generation import lengths` inside
            # engine.generation) goes through the package face, which imports the module back
            if mod and mod != name and mod != package:
                graph[name].add(mod)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", ["engine", "dashboard"])
def test_no_import_circle(package):
    cycles = _engine_cycles(package)
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_checker_sees_a_module_importing_its_own_package_face(tmp_path):
    """A package's modules import each other, never the package face: ``from engine.pkg import b``
    inside engine.pkg.a runs engine/pkg/__init__.py, which (re-exporting) imports a back."""
    pkg = ROOT / "engine" / "__probe_face__"
    try:
        pkg.mkdir()
        (pkg / "__init__.py").write_text("from engine.__probe_face__.a import x\n")
        (pkg / "a.py").write_text("from engine.__probe_face__ import b\n\nx = b\n")
        (pkg / "b.py").write_text("")
        assert ["engine.__probe_face__", "engine.__probe_face__.a"] in _engine_cycles()
    finally:
        for f in ("__init__.py", "a.py", "b.py"):
            (pkg / f).unlink(missing_ok=True)
        if pkg.exists():
            pkg.rmdir()


def test_the_cycle_checker_sees_a_circle_through_from_package_imports():
    """`from engine.stats import b` in a and `from engine.stats import a` in b is a circle (the
    checker once attributed both imports to the package engine.stats and missed it)."""
    a, b = (ROOT / "engine" / "stats" / f"__probe_cycle_{x}__.py" for x in "ab")
    try:
        a.write_text("from engine.stats import __probe_cycle_b__\n")
        b.write_text("from engine.stats import __probe_cycle_a__\n")
        assert ["engine.stats.__probe_cycle_a__", "engine.stats.__probe_cycle_b__"] in _engine_cycles()
    finally:
        a.unlink(missing_ok=True)
        b.unlink(missing_ok=True)


def _unused_private_constants() -> list[str]:
    """Module-level ``_UPPER_CASE = ...`` names in engine/ that nothing in their module reads."""
    out = []
    for path in _engine_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {
            t.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)
            and t.id.startswith("_")
            and t.id[1:2].isupper()
            and t.id.isupper()
        }
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        out += [f"{path.relative_to(ROOT)}: {name}" for name in sorted(defined - read)]
    return out


def test_no_unused_private_constant_in_the_engine():
    """A private constant nobody reads is a second, unchecked copy of something (the Triton module once
    kept the hash constants its kernels write as literals)."""
    assert _unused_private_constants() == []


@pytest.mark.parametrize(
    "package",
    ["stats", "tasks", "store", "report", "analysis", "generation", "sampling", "models", "figures"],
)
def test_each_package_docstring_names_its_modules(package):
    """docs/ARCHITECTURE.md is a one-page map; the list of a package's modules and what each does is its
    ``__init__`` docstring, next to the code. A module the docstring does not name fails here."""
    folder = ROOT / "engine" / package
    doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text(encoding="utf-8"))) or ""
    missing = [
        p.stem for p in sorted(folder.glob("*.py")) if p.stem != "__init__" and f".{p.stem}`" not in doc
    ]
    assert not missing, f"engine/{package}/__init__.py does not name: {missing}"


LAYER_WORD = {
    "stats": "Statistics",
    "analysis": "Analysis",
    "figures": "Figures",
    "commands": "CLI",
    "store": "Store",
    "tasks": "Task",
    "report": "Report",
    "generation": "Generation",
    "models": "Models",
    "sampling": "Sampling",
}


def _shared_name_modules() -> list[Path]:
    """Modules of engine/'s packages whose file name is also a module of another package."""
    by_name: dict[str, list[Path]] = {}
    for path in sorted((ROOT / "engine").glob("*/*.py")):
        if path.stem != "__init__":
            by_name.setdefault(path.stem, []).append(path)
    return [p for paths in by_name.values() if len(paths) > 1 for p in paths]


def test_a_module_sharing_its_name_with_another_layer_says_its_layer_first():
    """``stats/sequential.py``, ``analysis/sequential.py``, ``commands/sequential.py`` ...: each one's
    docstring starts with "<Layer> layer of <topic>: <what that layer does>" (docs/ARCHITECTURE.md, "One
    name, several layers"), so a reader opening one knows which job it does."""
    modules = _shared_name_modules()
    assert any(p.parent.name == "stats" and p.stem == "sequential" for p in modules)
    bad = []
    for path in modules:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        if not doc.startswith(f"{LAYER_WORD[path.parent.name]} layer of "):
            bad.append(f"{path.relative_to(ROOT)}: {doc.splitlines()[0] if doc else '(no docstring)'}")
    assert not bad, "\n".join(bad)
