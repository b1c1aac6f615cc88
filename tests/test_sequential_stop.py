"""One stop, one set of words (engine/analysis/sequential_stop.py, docs/METHODS.md 8.2-8.3): a missed
sequence is never decided (8.2), a stop at t = N is "all N questions used: Δ_N" (8.3, the two
targets), the rule that fired is named; the same through the CLI, JSON, report and pages."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine import store
from engine.analysis.sequential import live_stop, sequential_replay
from engine.analysis.sequential_stop import THIS_BENCHMARK, pair_text, stop_state, stop_text
from engine.cli import main
from engine.stats.sequential import StopRule
from engine.tasks import scoring
from tests.test_summary import make_numeric_run

N_MISS = 40
SORTED_D = np.array(
    [1.0] * 12 + [-1.0] * 28
)  # sorted: the CS concentrates on +1, then misses Δ_N = −0.4


def _scores(d) -> np.ndarray:
    """(N, 2) 0/1 scores whose difference is d ∈ {−1, 0, 1}."""
    d = np.asarray(d)
    return np.stack([(d > 0).astype(float), (d < 0).astype(float)], axis=1)


def test_a_miss_is_never_decided_and_shows_the_current_interval():
    st = stop_state(_scores(SORTED_D), N_MISS, StopRule.parse("budget:36"), 0.05)
    # the running intersection is empty there with lower > 0 > upper: the old code said "decided" and
    # inverted the rank-sets to [[2, 1], [2, 1]]
    assert st.n_stop == 36 and st.missed == (True,) and st.decided == (False,)
    assert st.outcome == "stopped" and not st.all_decided
    assert st.lower[0] <= st.upper[0]  # the current C_t, never an empty interval
    assert st.ranksets == ((1, 2), (1, 2))
    text = stop_text(st, ["a - b"])
    assert "missed" in text and "budget:36 held at question 36" in text and "decided:" not in text
    assert pair_text(st, 0, "a", "b").startswith("missed:")


def test_a_stop_at_N_is_all_questions_used_never_decided():
    """One +1 among 30 questions: the CS excludes 0 only at t = N, through its logical bounds (the old
    replay said "decided in 20 of 20 orders, median 30 of 30")."""
    d = np.zeros(30)
    d[7] = 1.0
    st = stop_state(_scores(d), 30, StopRule.parse("decided"), 0.05)
    assert st.n_stop == 30 and st.outcome == "full" and st.decided == (False,) and not st.all_decided
    assert st.lower == st.upper == pytest.approx((1 / 30,))
    text = stop_text(st, ["a - b"])
    assert text.startswith("all 30 questions used: full-run difference Δ_N = +0.0333")
    assert "logical bounds are what exclude 0" in text and THIS_BENCHMARK in text
    assert "decided:" not in text
    assert pair_text(st, 0, "a", "b").startswith("all 30 questions used")


def test_a_stop_decided_by_the_logical_bounds_says_so():
    """Two +1 among 30: with both seen and one question left, no unseen question can flip the sign."""
    d = np.zeros(30)
    d[[3, 9]] = 1.0
    st = stop_state(_scores(d), 30, StopRule.parse("decided"), 0.05)
    assert st.n_stop == 29 and st.outcome == "decided" and st.logical == (True,)
    assert "the logical bounds alone exclude 0" in stop_text(st, ["a - b"])
    assert "by the logical bounds" in pair_text(st, 0, "a", "b")


def test_the_stop_names_the_rule_that_fired():
    rng = np.random.default_rng(3)
    d = rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.05, 0.55, 0.4])
    st = stop_state(_scores(d), 400, StopRule.parse("decided,width:0.6"), 0.05)
    assert st.fired and st.n_stop is not None and st.n_stop < 400
    assert f"{' and '.join(st.fired)} held at question {st.n_stop}" in stop_text(st, ["a - b"])


# ----------------------------------------------------------------------------- a replay


@pytest.fixture
def one_diff_db(tmp_db):
    """30 questions, coupled: m1 and m2 agree on all but one (m1 right, m2 wrong)."""
    gold = {f"p{i:02d}": str(i) for i in range(30)}
    right = np.array(list(gold.values()))[:, None]
    m2 = right.copy()
    m2[7, 0] = "x"
    make_numeric_run(tmp_db, {("m1", "coupled"): right, ("m2", "coupled"): m2}, gold)
    scoring.score_run(tmp_db, "r1")
    return tmp_db


def test_a_replay_counts_orders_decided_before_N(one_diff_db, capsys):
    res = sequential_replay(one_diff_db, "r1", seeds=list(range(5)))
    sm = res.modes[0].summary()
    assert sm["median"] == 30 and sm["decided"] == 0 and sm["all_used"] == 5
    assert main(["sequential", "--db", str(one_diff_db), "--run", "r1", "--seeds", "0..4"]) == 0
    out = capsys.readouterr().out
    assert "decided before N in 0 of 5 orders; all 30 questions used in 5" in out
    assert THIS_BENCHMARK in out
    assert main(["sequential", "--db", str(one_diff_db), "--run", "r1", "--seed", "0", "--json"]) == 0
    stop = json.loads(capsys.readouterr().out)["modes"]["coupled"]["stops"][0]
    assert stop["decided"] is False and stop["outcome"] == "full" and stop["n"] == 30


# ----------------------------------------------------------------------------- a stored run that missed


SORTED_SEQ = {
    "until": "budget:36",
    "alpha": 0.05,
    "mode_stop": "coupled",
    "round_size": "auto",
    "score_rule": "numeric",
    "order_seed": 0,
}


def make_sorted_run(db) -> list[str]:
    """A scored numeric run r1 of 40 questions: m1 right / m2 wrong on the first 12, the other way
    round on the last 28; returns the questions in file order (sorted by d, largest first)."""
    gold = {f"p{i:02d}": str(i) for i in range(N_MISS)}
    g = np.array(list(gold.values()))[:, None]
    wrong = np.full_like(g, "x")
    m1 = np.where(np.arange(N_MISS)[:, None] < 12, g, wrong)
    m2 = np.where(np.arange(N_MISS)[:, None] < 12, wrong, g)
    make_numeric_run(db, {("m1", "coupled"): m1, ("m2", "coupled"): m2}, gold)
    scoring.score_run(db, "r1")
    cfg = {"models": ["m1", "m2"], "modes": ["coupled"], "repeats": 1}
    with store.writer(db) as con:
        con.execute(
            "UPDATE runs SET config = ?, n_units = ? WHERE run_id = 'r1'", [json.dumps(cfg), 2 * N_MISS]
        )
    return list(gold)


def mark_sorted_until(db, order: list[str]) -> None:
    """Make r1 a ``generate --until budget:36`` run (as stored) whose stored order is sorted, so that
    its sequence misses."""
    with store.writer(db) as con:
        cfg = json.loads(
            con.execute("SELECT CAST(config AS VARCHAR) FROM runs WHERE run_id = 'r1'").fetchone()[0]
        )
        cfg["sequential"] = {**SORTED_SEQ, "order": order}
        con.execute("UPDATE runs SET config = ? WHERE run_id = 'r1'", [json.dumps(cfg)])


def make_sorted_until_run(db) -> None:
    mark_sorted_until(db, make_sorted_run(db))


def test_a_stored_miss_through_the_cli_and_json(tmp_db, capsys):
    make_sorted_until_run(tmp_db)
    assert main(["sequential", "--db", str(tmp_db), "--run", "r1", "--stored"]) == 0
    out = capsys.readouterr().out
    assert "missed: the running intersection of m1 − m2 is empty at question 36 of 40" in out
    assert "budget:36 held at question 36" in out and "decided:" not in out
    assert main(["sequential", "--db", str(tmp_db), "--run", "r1", "--stored", "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["modes"]["coupled"]
    assert m["decided"] is False and m["missed"] is True and m["pair_decided"] == [False]
    assert m["lower"][0] <= m["upper"][0] and m["ranksets"] == [[1, 2], [1, 2]]
    assert main(["sequential", "--db", str(tmp_db), "--run", "r1", "--stored", "--stop", "decided"]) == 2
    assert "--stored reads the run's own" in capsys.readouterr().err


def test_a_stored_miss_in_the_report(tmp_db):
    from engine.report.build import run_report

    make_sorted_until_run(tmp_db)
    sec = run_report(tmp_db, "r1").section("sequential")
    text = " ".join(sec.paragraphs)
    assert "missed" in text and "decided:" not in text and THIS_BENCHMARK in text
    # the share of questions used is of the benchmark's N (the run's own count is the questions used)
    assert "40 questions generated in this mode (100.0% of the benchmark's 40)" in text, text
    cells = {c.key: c.text for row in sec.tables[0].rows for c in row if c.key}
    assert cells["seq/coupled/m1 - m2/verdict"] == "missed: current C_t shown"
    lo, up = cells["seq/coupled/m1 - m2/lower"], cells["seq/coupled/m1 - m2/upper"]
    assert float(lo) <= float(up)
    ls = live_stop(tmp_db, "r1")
    assert ls.modes[0].state.ranksets == ((1, 2), (1, 2))
