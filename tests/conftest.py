"""Shared test fixtures. Tests never need ../shared: those that do are marked and skip with a reason."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

# One OpenMP / BLAS thread per test process (and the processes it starts: CLI runs, the dashboard's
# server, its jobs), before anything imports torch. Two workers on two cores with torch's default
# of one thread per core oversubscribe the machine, and OpenMP's waiting threads then spin: a demo-
# sized generation took 126 CPU-s instead of 29 (docs/BENCHMARKS.md, "The test suite"). An exported
# value wins.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# Triton's interpreter on a machine without an NVIDIA GPU, set before anything imports triton
# (transformers' Llama import does): Triton decides compiled vs interpreted for its own reductions
# (tl.max, tl.argmax) when it is imported, and tests/test_noise_kernel.py runs the fused kernels on
# CPU in the interpreter. Without this, a worker that imported triton compiled re-ran each of those
# tests in a child pytest (about 50 CPU-s of interpreter start-ups on two cores). The engine's
# dispatch never sends CPU tensors to Triton, so no other test runs differently. An exported value
# wins.
if not any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0")):
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("COUPLED_EVAL_SHARED", ROOT.parent / "shared"))
ARTIFACTS = ROOT / "test-artifacts"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the calling test with a reason when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs {p} (the project's ../shared data), which is not present here")
    return p


# `pytest --quick` (scripts/test.sh --quick): the fast subset for iterating. Leaves out the marked
# slow, browser and vLLM tests and these modules, which load real models, start Ray clusters,
# spawn and kill generation processes, generate whole runs or run the Triton kernels in Triton's
# interpreter (test_noise_kernel.py: run it when touching engine/sampling/triton_noise.py); each
# takes tens of seconds to minutes on a 2-core machine. CI runs everything.
QUICK_SKIP_MODULES = {
    "test_models.py",
    "test_distributed.py",
    "test_generation.py",
    "test_generation_dtype.py",
    "test_cuda_backend.py",
    "test_browser.py",
    "test_packaging.py",
    "test_next_commands.py",
    "test_resume.py",
    "test_run_driver.py",
    "test_until.py",
    "test_sequential_pages.py",
    "test_race_live.py",
    "test_race_pages.py",
    "test_report_sections.py",
    "test_noise_kernel.py",
    "test_serve_process.py",
}
QUICK_SKIP_MARKS = ("slow", "browser", "vllm", "clients")


def pytest_addoption(parser):
    parser.addoption(
        "--quick",
        action="store_true",
        help="the fast subset: no slow / browser / vllm / clients tests, no model-loading modules",
    )


# On two workers (`pytest -n 2 --dist loadgroup`, what scripts/test.sh runs) every module is one unit
# of work, so its module-scoped fixtures (a loaded model, a generated run, a dashboard server) are
# built once; and the modules that must not run beside each other share a group, which runs its
# modules one after the other on one worker: those that spawn, kill and resume generation processes
# (their timing is what they test), and those that drive the dashboard in Chromium (a Streamlit server
# and a browser each). Ray's module is a group of its own already.
SERIAL_GROUPS = {
    "processes": {
        "test_resume.py",
        "test_run_driver.py",
        "test_until.py",
        "test_disk_full.py",
        "test_store_concurrency.py",
    },
    "browser": {
        "test_browser.py",
        "test_browser_views.py",
        "test_browser_walk.py",
        "test_label_browser.py",
    },
}
# The units of work that take longest go first, longest first (longest processing time first: the
# last unit started is then a short one and the two workers end together). Seconds on one worker of
# two, the main suite alone on XEON-512 (docs/BENCHMARKS.md, "The test suite"): browser 555,
# test_distributed 188, processes 102, test_race_live 72, test_models 53, test_race_models 50,
# test_report 45, test_bench_smoke 40; every other module takes under 30 s and keeps its file order.
# Right after the first three, the short modules that mostly wait (on sleeping fake jobs, killed
# and restarted processes, retry back-offs: 3-9 s idle of their 11-19 s each, the main suite alone on
# EPYC-512): early on, the side stages' installs and tests use the cores they leave idle; at the end
# of the run nothing else would (docs/BENCHMARKS.md, "The test suite").
HEAVY_FIRST = (
    "browser",
    "test_distributed.py",
    "processes",
    "test_jobs.py",
    "test_judge_hardening.py",
    "test_judge_api.py",
    "test_serve_process.py",
    "test_race_live.py",
    "test_models.py",
    "test_race_models.py",
    "test_report.py",
    "test_bench_smoke.py",
)


def xdist_group(path_name: str) -> str:
    """The unit of work a test module belongs to on two workers: a serial group, else its own name."""
    for group, modules in SERIAL_GROUPS.items():
        if path_name in modules or (group == "browser" and "browser" in path_name):
            return group
    return path_name


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the browser group's last test on this process (its fixtures torn down): close the one
    Chromium its modules shared (tests/browser_session.py)."""
    yield
    if xdist_group(item.path.name) == "browser" and (
        nextitem is None or xdist_group(nextitem.path.name) != "browser"
    ):
        shared = sys.modules.get("tests.browser_session")
        if shared is not None:
            shared.close_shared_browser()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: xdist's scope scheduler with :func:`xdist_group` as the scope. (xdist 3.8's
    own loadgroup marks a group by rewriting ``item._nodeid``, which pytest 9 no longer reads, so its
    groups silently fall apart: tests/test_quick_selection.py checks the grouping on real workers.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist otherwise reorders the units by their number of tests (--loadscope-reorder, its default),
    # which put the browser group, a few long tests, in the middle of a worker's list: the units go
    # in collection order, which pytest_collection_modifyitems sorts by HEAVY_FIRST
    config.option.loadscopereorder = False

    class ModuleGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(Path(nodeid.split("::", 1)[0]).name)

    return ModuleGroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    if config.getoption("--quick"):
        keep, drop = [], []
        for item in items:
            heavy = item.path.name in QUICK_SKIP_MODULES or any(
                item.get_closest_marker(m) for m in QUICK_SKIP_MARKS
            )
            (drop if heavy else keep).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
    rank = {g: i for i, g in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda it: rank.get(xdist_group(it.path.name), len(rank)))  # stable: file order kept


@pytest.fixture
def tmp_db(tmp_path) -> Path:
    return tmp_path / "test.duckdb"


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(autouse=True)
def _keep_the_main_module():
    """Streamlit's AppTest installs the script it runs as ``sys.modules["__main__"]`` and leaves it
    there; a later test that starts a ``spawn`` child (as vLLM starts its workers) then makes the
    child re-run that temporary script, which fails (``NameError: __args``). Every test ends with
    the process's own ``__main__``."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True, scope="session")
def _apptest_overheads():
    """Two costs of Streamlit's AppTest that are not the page's own work, taken out for the session
    (only where a test module imported Streamlit's testing API: the side stages never do):

    - its first run of an app scans every installed distribution for component manifests (0.11
      CPU-s; about a hundred AppTests a run). The installed packages do not change during a session,
      so the first scan's result serves them all.
    - it waits for a script run by polling every millisecond whether the run's events so far include
      the end, a scan of every event (one per element the page sent) a thousand times a second,
      beside the script's own thread. The script thread ends right after that event, so joining it
      is the same wait; a run past the timeout is stopped and raises as AppTest's own wait does.

    Five AppTest modules alone: busy 64-65 CPU-s as Streamlit has it, 55-57 without the scans
    (docs/BENCHMARKS.md, "The test suite")."""
    if "streamlit.testing.v1" not in sys.modules:
        yield
        return
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import local_script_runner as lsr

    def wait_for_the_run(runner, timeout: float = 3) -> None:
        thread = runner._script_thread
        if thread is not None:
            thread.join(timeout)
        if runner.script_stopped():
            return
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")

    scan, wait = manifest_scanner.scan_component_manifests, lsr.require_widgets_deltas
    manifest_scanner.scan_component_manifests = functools.cache(scan)
    lsr.require_widgets_deltas = wait_for_the_run
    yield
    manifest_scanner.scan_component_manifests, lsr.require_widgets_deltas = scan, wait


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """Freeze what collection built (torch, transformers, Streamlit, pandas, the test modules: millions
    of objects that live as long as the process) out of the cyclic garbage collector, so that each
    full collection, automatic or the engine's own between two models (engine.generation.run.
    free_memory), scans only what the tests create: in a test process that scan took half a second."""
    import gc

    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    """Give the frozen objects back to the collector before the interpreter tears down (extension
    modules such as DuckDB's report what is still referenced at exit as leaks)."""
    import gc

    gc.unfreeze()
