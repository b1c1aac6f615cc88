"""Every bench script runs in its ``--smoke`` mode (tiny sizes, seconds), so a
refactor that breaks one fails CI. Parametrised over the folder: a new script without ``--smoke``
fails here. Helper modules (no ``__main__`` block: ``_smoke.py``, ``llama_shapes.py``, ...) are
imported by the scripts, not run.

Scripts run in this process (``runpy``, ``sys.argv = [script, "--smoke"]``): torch and the engine
are imported once for all of them, which keeps the whole file within seconds per script.
"""

from __future__ import annotations

import os
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


SLOW_SMOKE = {"bench_gpu_generation.py", "bench_ray.py"}  # 10-19 s each on 2 cores: left out of --quick


@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SMOKE else s for s in SCRIPTS]
)
def test_bench_script_smoke(script, monkeypatch, tmp_path, capsys):
    path = BENCH / script
    assert "--smoke" in path.read_text(), f"bench/{script} has no --smoke mode"
    monkeypatch.setattr(sys, "argv", [str(path), "--smoke"])
    monkeypatch.syspath_prepend(str(BENCH))
    monkeypatch.chdir(tmp_path)  # anything a script writes to its working folder lands here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    env = dict(
        os.environ
    )  # a script may set variables (winrates_page: COUPLED_EVAL_SHARED): never past this test
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (0, None), f"bench/{script} --smoke exited with {exc.code}"
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert capsys.readouterr().out.strip(), f"bench/{script} --smoke printed nothing"


def test_a_smoke_run_leaves_the_environment_as_it_was(monkeypatch, tmp_path, capsys):
    """winrates_page --smoke points COUPLED_EVAL_SHARED at synthetic data; later tests (and the
    browser tests' Streamlit server, which inherits this process's environment) must not see it."""
    before = os.environ.get("COUPLED_EVAL_SHARED")
    test_bench_script_smoke("winrates_page.py", monkeypatch, tmp_path, capsys)
    assert os.environ.get("COUPLED_EVAL_SHARED") == before
