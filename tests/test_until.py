"""``generate --until``: a live sequential run (engine/commands/_until.py, docs/SEQUENTIAL.md) with
tiny random models: rounds, the stored order, the stop, and kill/resume reaching the same stop."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import generation as G
from engine import models, store
from engine.cli import main
from engine.commands._until import round_ends, run_until, summary_text
from engine.errors import UserError
from engine.stats.sequential import StopRule, confidence_sequence, first_stop, question_order
from engine.tasks import datasets
from engine.testing import tiny_lm

CFG = G.GenConfig(temperature=1.0, max_new_tokens=3, batch_size=8, trace_top_k=0, record_traces=False)
N = 40


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread: the tiny models are too small to gain from more, and the CI machine has 2 cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _models():
    return [models.from_objects("a", *tiny_lm(0)), models.from_objects("b", *tiny_lm(1))]


def _dataset(kind="numeric"):
    ps = tuple(
        datasets.Prompt(
            prompt_id=f"q/{i:02d}",
            user_prompt=f"What is {i} + 1?",
            gold=None if kind == "prompts" else str(i + 1),
        )
        for i in range(N)
    )
    return datasets.Dataset("until-toy", kind, "memory", ps, "Answer with a number.")


def _run(db, **kw):
    kw.setdefault("stop", StopRule.parse("width:0.5"))
    kw.setdefault("round_size", 8)
    return run_until(
        db,
        _models(),
        _dataset(),
        1,
        ["coupled", "independent"],
        4,
        CFG,
        show_bar=False,
        **kw,
    )


def _gens(db):
    return store.query_df(
        db, "SELECT model, prompt_id, repeat, mode, text FROM generations ORDER BY ALL"
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    db = tmp_path_factory.mktemp("until") / "ref.duckdb"
    return db, _run(db)


def test_rounds_stop_and_stored_order(reference):
    db, res = reference
    # an independent route to the stop: the stored scores in the stored order, then the stats functions
    cfg = json.loads(store.query_df(db, "SELECT CAST(config AS VARCHAR) AS c FROM runs").iloc[0, 0])
    seq = cfg["sequential"]
    pids = [f"q/{i:02d}" for i in range(N)]
    assert seq["order"] == [pids[i] for i in question_order(N, 4)] and seq["order_seed"] == 4
    sc = store.query_df(db, "SELECT model, prompt_id, mode, score FROM scores WHERE mode = 'coupled'")
    w = sc.pivot_table(index="prompt_id", columns="model", values="score").reindex(
        seq["order"][: res.modes[0].n_seen]
    )
    lo, up = confidence_sequence((w["a"] - w["b"]).to_numpy(), N, alpha=0.05)
    n = first_stop(StopRule.parse("width:0.5"), lo, up)
    coupled = res.modes[0]
    assert coupled.mode == "coupled" and coupled.n_stop == n is not None
    assert (
        coupled.n_seen == 8 * res.rounds and coupled.n_seen - 8 < n <= coupled.n_seen < N
    )  # stopped early
    g = _gens(db)
    assert len(g) == coupled.n_seen * 2 * 2 and set(g["prompt_id"]) == set(
        seq["order"][: coupled.n_seen]
    )
    run = store.query_df(db, "SELECT status, n_units FROM runs").iloc[0]
    assert run["status"] == "done" and run["n_units"] == len(g)
    d = res.to_dict()["modes"]["coupled"]
    assert d["questions_used"] == coupled.n_seen and d["full_run_units"] == N * 2


def test_killed_run_resumes_to_the_same_stop(tmp_db, reference):
    ref_db, ref = reference
    seen = []

    class Boom(RuntimeError):
        pass

    def die_in_round_2(chunk):
        seen.append(chunk)
        if sum(len(c) for c in seen) > 8 * 2 * 2 + 5:  # past round 1, inside round 2
            raise Boom("killed")

    with pytest.raises(Boom):
        _run(tmp_db, _after_chunk=die_in_round_2)
    assert 0 < len(_gens(tmp_db)) < len(_gens(ref_db))
    again = _run(tmp_db)
    assert again.rounds == ref.rounds and [m.n_stop for m in again.modes] == [
        m.n_stop for m in ref.modes
    ]
    assert again.modes[0].state == ref.modes[0].state
    assert _gens(tmp_db).equals(_gens(ref_db))


def test_mode_stop_each_and_budget(tmp_db):
    """A round never crosses the budget (before: rounds of 8 took 16 questions for budget:12)."""
    res = _run(tmp_db, stop=StopRule.parse("budget:12"), mode_stop="each")
    assert (
        [m.n_stop for m in res.modes] == [12, 12]
        and res.rounds == 2
        and all(m.n_seen == 12 for m in res.modes)
    )
    assert set(_gens(tmp_db)["prompt_id"]) == set(
        json.loads(store.query_df(tmp_db, "SELECT CAST(config AS VARCHAR) FROM runs").iloc[0, 0])[
            "sequential"
        ]["order"][:12]
    )


def test_default_rounds_double_from_16_and_never_cross_the_budget():
    assert round_ends(40) == [16, 32, 40]
    assert round_ends(14_042)[:7] == [16, 32, 64, 128, 256, 512, 768]
    assert round_ends(14_042)[-1] == 14_042 and np.all(np.diff(round_ends(14_042)) <= 256)
    assert round_ends(40, budget=8) == [8] and round_ends(40, 16, budget=20) == [16, 20]
    assert round_ends(40, 256) == [40]


def test_budget_is_never_exceeded_with_the_default_rounds(tmp_db):
    """generate --until budget:8 on 40 questions generated all 40 (the first round was 256)."""
    res = _run(tmp_db, stop=StopRule.parse("budget:8"), round_size=None)
    assert [m.n_seen for m in res.modes] == [8, 8] and res.rounds == 1
    assert len(_gens(tmp_db)) == 8 * 2 * 2


def test_no_resume_continues_its_own_run_after_round_1(tmp_db):
    """--no-resume refused round 2 ("run already exists") after round 1 was generated and paid for."""
    res = _run(tmp_db, stop=StopRule.parse("budget:20"), resume=False)
    assert res.rounds == 3 and [m.n_seen for m in res.modes] == [20, 20]
    with pytest.raises(UserError, match="already exists"):  # a second --no-resume run is refused
        _run(tmp_db, stop=StopRule.parse("budget:20"), resume=False)


def test_the_stop_line_names_the_rule_that_fired(reference):
    _, res = reference
    n = res.modes[0].n_stop
    text = summary_text(res)
    assert f"coupled: stopped at question {n} of {N} (width:0.5 held at question {n})" in text
    assert "this benchmark's full-run difference" in text
    d = res.to_dict()["modes"]["coupled"]
    assert d["fired"] == ["width:0.5"] and d["n"] == n and d["target"].startswith("this benchmark")


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"stop": StopRule.parse("width:0.6")}, "--until budget:8 (asked: width:0.6)"),
        ({"alpha": 0.5}, "--alpha 0.05 (asked: 0.5)"),
        ({"mode_stop": "each"}, "--mode-stop coupled (asked: each)"),
        ({"score_rule": "exact"}, "--rule numeric (asked: exact)"),
    ],
)
def test_a_resumed_run_refuses_a_changed_stop(tmp_db, change, needle):
    """A rerun with another rule, α, mode-stop or scoring rule reused the questions already seen under the
    old one (shopping for a stop); refused in one line that says how to start a new run."""
    _run(tmp_db, stop=StopRule.parse("budget:8"))
    before = len(_gens(tmp_db))
    with pytest.raises(UserError) as exc:
        _run(tmp_db, **{"stop": StopRule.parse("budget:8"), **change})
    msg = str(exc.value)
    assert needle in msg and "--run-id NEW_ID" in msg and "\n" not in msg
    assert len(_gens(tmp_db)) == before  # nothing generated


def test_a_plain_run_cannot_continue_with_until(tmp_db):
    from engine.generation.run import drive, plan_run

    plan = plan_run(tmp_db, _models(), _dataset(), 1, ["coupled", "independent"], 4, CFG)
    drive(plan, show_bar=False)
    with pytest.raises(UserError, match="plain run .* cannot continue with --until; start a new run"):
        _run(tmp_db)


def test_a_changed_stored_order_is_refused(tmp_db):
    _run(tmp_db, stop=StopRule.parse("budget:8"))
    with store.writer(tmp_db) as con:
        cfg = json.loads(con.execute("SELECT CAST(config AS VARCHAR) FROM runs").fetchone()[0])
        cfg["sequential"]["order"] = sorted(cfg["sequential"]["order"])
        con.execute("UPDATE runs SET config = ?", [json.dumps(cfg)])
    with pytest.raises(UserError, match="stored question order differs"):
        _run(tmp_db, stop=StopRule.parse("budget:8"))


def test_the_run_records_its_driver_host_and_a_resume_fills_a_missing_one(reference, tmp_path):
    """runs.host (the design's "machine" row) is the driver's host name; a run stored without one (made
    before hosts were recorded) gets it from the next drive."""
    import shutil
    import socket

    from engine.analysis.run_design import run_design
    from engine.generation.run import drive, plan_run

    db, res = reference
    host = socket.gethostname()
    assert run_design(db, res.run_id).host == host
    old = tmp_path / "old.duckdb"
    shutil.copy(db, old)
    with store.transaction(old) as con:
        con.execute("UPDATE runs SET host = NULL")
    assert run_design(old, res.run_id).host is None
    drive(plan_run(old, _models(), _dataset(), 1, ["coupled", "independent"], 4, CFG), show_bar=False)
    assert run_design(old, res.run_id).host == host


def test_a_stopped_run_continued_without_until_plans_the_whole_run(tmp_db):
    """Resuming a stopped --until run as a plain run (the same settings) generates the rest, and the
    run's planned units become the whole run's (before: the rounds taken, so '160 of 64 units')."""
    from engine.generation.run import drive, plan_run

    res = _run(tmp_db, stop=StopRule.parse("budget:12"))
    planned = lambda: int(store.query_df(tmp_db, "SELECT n_units FROM runs").iloc[0, 0])  # noqa: E731
    assert planned() == 12 * 2 * 2  # 12 questions, 2 models, 1 repeat, 2 modes (the rounds taken)
    plan = plan_run(tmp_db, _models(), _dataset(), 1, ["coupled", "independent"], 4, CFG)
    assert plan.run_id == res.run_id
    drive(plan, show_bar=False)
    assert planned() == N * 2 * 2 == len(_gens(tmp_db))
    assert store.query_df(tmp_db, "SELECT status FROM runs").iloc[0, 0] == "done"


def test_refusals(tmp_db, capsys):
    with pytest.raises(UserError, match="no automatic scoring rule"):
        run_until(
            tmp_db, _models(), _dataset("prompts"), 1, ["coupled"], 0, CFG, stop=StopRule(decided=True)
        )
    with pytest.raises(UserError, match="2 or more"):
        run_until(tmp_db, _models()[:1], _dataset(), 1, ["coupled"], 0, CFG, stop=StopRule(decided=True))
    with pytest.raises(UserError, match="budget:99 exceeds"):
        run_until(tmp_db, _models(), _dataset(), 1, ["coupled"], 0, CFG, stop=StopRule(budget=99))
    assert not tmp_db.exists() or store.table_counts(tmp_db)["generations"] == 0
    for extra, needle in (
        (["--until", "width:0"], "width:0"),
        (["--until", "decided", "--alpha", "2"], "alpha"),
        (["--alpha", "0.1"], "only apply with --until"),
    ):
        assert main(["generate", "--models", "x", "y", "--db", str(tmp_db), *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err, err


_CHILD = """
import sys, time
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(1)
from tests.test_until import _run
_run({db!r}, progress_file={prog!r}, _after_chunk=lambda chunk: time.sleep(0.3))
"""


@pytest.mark.slow
def test_sigkilled_process_resumes_to_the_same_stop(tmp_path, reference):
    """A real kill (SIGKILL inside round 2, no cleanup at all), then the same call: same stop, same rows."""
    import signal
    import subprocess
    import sys
    import time

    from engine.progress import read_progress
    from tests.conftest import ROOT

    ref_db, ref = reference
    db, prog = tmp_path / "k.duckdb", tmp_path / "progress.json"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT), db=str(db), prog=str(prog))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        p = read_progress(prog)
        if p and p["done"] > 8 * 2 * 2 and p["total"] == 16 * 2 * 2:  # inside round 2
            break
        if child.poll() is not None:
            pytest.fail(f"child exited early: {child.stderr.read().decode()[-2000:]}")
        time.sleep(0.05)
    else:
        child.kill()
        pytest.fail("child made no progress in time")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    assert 8 * 2 * 2 < len(_gens(db)) < 16 * 2 * 2  # killed inside round 2, rounds 1's rows stored
    again = _run(db)
    assert again.rounds == ref.rounds and [m.n_stop for m in again.modes] == [
        m.n_stop for m in ref.modes
    ]
    assert _gens(db).equals(_gens(ref_db))
