"""First loads stay light: drawing the Generate or the Home page in a fresh process
imports no torch, transformers or model backend (they cost tens of seconds on a loaded machine: the
Generate page listed the registry through engine.models, which imports torch, and loaded each
model's tokenizer for a vocabulary id it never showed). The timings are bench/bench_dashboard.py's
(docs/BENCHMARKS.md); this test checks only what is imported, never how long it takes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.parametrize("page", ["generate", "home"])
def test_a_first_page_load_imports_no_torch(page, tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_dashboard.py"),
            "--db",
            str(tmp_path / "pages.duckdb"),
            "--traces",
            "2000",
            "--first-load",
            page,
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["page"] == page and row["title"]  # the page was drawn
    assert row["heavy_imports"] == [], row


def test_the_model_registry_lists_models_without_torch():
    code = (
        "import sys; from engine.models.registry import list_models; import engine.generation.backends; "
        "list_models(); print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_lazy_packages_export_every_name():
    """engine.models and engine.generation load their names on first use: each one in __all__
    resolves to its module's object."""
    import importlib

    for name in ("engine.models", "engine.generation"):
        pkg = importlib.import_module(name)
        assert set(pkg.__all__) == set(pkg._EXPORTS)
        for attr in pkg.__all__:
            assert getattr(pkg, attr) is getattr(importlib.import_module(pkg._EXPORTS[attr]), attr)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        importlib.import_module("engine.models").nope  # noqa: B018
