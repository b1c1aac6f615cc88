"""Resumable runs: an interrupted run, restarted, ends with exactly the rows of an uninterrupted one."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from engine import generation as G
from engine import models, store
from engine.errors import UserError
from engine.progress import read_progress
from engine.tasks import datasets
from engine.testing import tiny_lm

ROOT = Path(__file__).resolve().parent.parent
CFG = G.GenConfig(temperature=1.0, max_new_tokens=6, batch_size=3, trace_top_k=3)


def _models():
    return [models.from_objects("a", *tiny_lm(0)), models.from_objects("b", *tiny_lm(1))]


def _dataset():
    ps = tuple(datasets.Prompt(prompt_id=f"r/{i}", user_prompt=f"Say {i} " + "z" * i) for i in range(4))
    return datasets.Dataset("resume-toy", "prompts", "memory", ps, "Be brief.")


def _rows(db) -> tuple[pd.DataFrame, pd.DataFrame]:
    g = store.query_df(db, "SELECT * EXCLUDE (created_at) FROM generations ORDER BY ALL")
    t = store.query_df(db, "SELECT * FROM token_traces ORDER BY ALL")
    return g, t


def _run(db, **kw):
    return G.run_generation(
        db, _models(), _dataset(), 2, ["coupled", "independent"], seed=4, cfg=CFG, show_bar=False, **kw
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    db = tmp_path_factory.mktemp("ref") / "ref.duckdb"
    run = _run(db)
    return run, _rows(db)


def _assert_same(db, reference):
    run_ref, (g_ref, t_ref) = reference
    g, t = _rows(db)
    pd.testing.assert_frame_equal(g, g_ref)
    pd.testing.assert_frame_equal(t, t_ref)
    assert store.query_df(db, "SELECT status FROM runs WHERE run_id = ?", [run_ref]).iloc[0, 0] == "done"


class Boom(RuntimeError):
    pass


def test_injected_failure_then_resume_gives_uninterrupted_rows(tmp_db, reference):
    seen = []

    def fail_after_3(chunk):
        seen.append(chunk)
        if len(seen) == 3:
            raise Boom("injected")

    with pytest.raises(Boom):
        _run(tmp_db, _after_chunk=fail_after_3)
    assert store.query_df(tmp_db, "SELECT status FROM runs").iloc[0, 0] == "failed"
    assert store.table_counts(tmp_db)["generations"] == sum(len(c) for c in seen)  # stored chunks stay
    run = _run(tmp_db)  # same settings -> same run id -> resume
    assert run == reference[0]
    _assert_same(tmp_db, reference)
    assert _run(tmp_db) == run  # a finished run reruns as a no-op
    _assert_same(tmp_db, reference)


def test_changed_settings_under_same_run_id_is_refused(tmp_db):
    run = G.run_generation(
        tmp_db, _models()[:1], _dataset(), 1, ["coupled"], seed=4, cfg=CFG, show_bar=False
    )
    with pytest.raises(UserError, match="different settings"):
        G.run_generation(
            tmp_db,
            _models()[:1],
            _dataset(),
            2,
            ["coupled"],
            seed=4,
            cfg=CFG,
            run_id=run,
            show_bar=False,
        )
    with pytest.raises(UserError, match="already exists"):
        G.run_generation(
            tmp_db,
            _models()[:1],
            _dataset(),
            1,
            ["coupled"],
            seed=4,
            cfg=CFG,
            resume=False,
            show_bar=False,
        )


_CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from tests.test_resume import _run
    def slow(chunk):
        time.sleep(0.4)  # give the parent time to kill us between / inside chunks
    try:
        _run({db!r}, progress_file={prog!r}, _after_chunk=slow)
    except KeyboardInterrupt:
        sys.exit(130)
""")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killed_process_then_resume_gives_uninterrupted_rows(tmp_path, reference, sig):
    db, prog = tmp_path / "k.duckdb", tmp_path / "progress.json"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT), db=str(db), prog=str(prog))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        p = read_progress(prog)
        if p and p["done"] >= 6:
            break
        if child.poll() is not None:
            pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    else:
        child.kill()
        pytest.fail("child made no progress in time")
    child.send_signal(sig)
    rc = child.wait(timeout=60)
    n_before = store.table_counts(db)["generations"]
    assert 0 < n_before < 32  # interrupted mid-run, with completed chunks stored
    if sig == signal.SIGTERM:  # a clean cancel: status and progress file say so
        assert rc == 130
        assert store.query_df(db, "SELECT status FROM runs").iloc[0, 0] == "cancelled"
        assert read_progress(prog)["status"] == "cancelled"
    else:
        assert rc == -signal.SIGKILL
    # every stored generation has all its traces (chunks are all-or-nothing)
    per_gen = store.query_df(
        db,
        "SELECT model, prompt_id, repeat, mode, any_value(g.n_tokens) AS n_tokens, "
        "count(t.step) AS n FROM generations g LEFT JOIN token_traces t "
        "USING (run_id, model, prompt_id, repeat, mode) GROUP BY model, prompt_id, repeat, mode",
    )
    assert (per_gen["n_tokens"] == per_gen["n"]).all()
    _run(db)
    _assert_same(db, reference)
