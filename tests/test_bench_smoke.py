"""Issue 21 item 12: every bench script runs in its ``--smoke`` mode (tiny sizes, seconds), so a
refactor that breaks one fails CI. Parametrised over the folder: a new script without ``--smoke``
fails here. Helper modules (no ``__main__`` block: ``_smoke.py``, ``llama_shapes.py``, ...) are
imported by the scripts, not run.

Scripts run in this process (``runpy``, ``sys.argv = [script, "--smoke"]``): torch and the engine
are imported once for all of them, which keeps the whole file within seconds per script.
"""

from __future__ import annotations

import runpy
import sys

import pytest

from tests.conftest import ROOT

BENCH = ROOT / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if 'if __name__ == "__main__"' in p.read_text())
# vLLM's scripts need .venv-vllm; in this venv they must still run and skip their vLLM rows (or
# their smoke runs under .venv-vllm in tests/vllm)


def test_every_script_is_found():
    assert "bench_hf_generate.py" in SCRIPTS and "_smoke.py" not in SCRIPTS and len(SCRIPTS) >= 15


@pytest.mark.parametrize("script", SCRIPTS)
def test_bench_script_smoke(script, monkeypatch, tmp_path, capsys):
    path = BENCH / script
    assert "--smoke" in path.read_text(), f"bench/{script} has no --smoke mode"
    monkeypatch.setattr(sys, "argv", [str(path), "--smoke"])
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.chdir(tmp_path)  # anything a script writes to its working folder lands here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), f"bench/{script} --smoke exited with {exc.code}"
    assert capsys.readouterr().out.strip(), f"bench/{script} --smoke printed nothing"
