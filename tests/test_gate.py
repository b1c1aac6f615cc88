"""``engine gate`` (engine/stats/gate.py, engine/analysis/gate.py): exact decisions and planner, exit
codes 0 / 1 / 3 on stored runs and harness logs, the anytime-valid decision on a ``--until`` run against
a direct confidence sequence, and seeded simulations of the wrong-decision rates (fixed-n at the margin;
a live run polled after every question, against a t interval polled the same way)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as st

from engine.analysis.gate import ANYTIME, FIXED, gate
from engine.cli import main
from engine.errors import UserError
from engine.stats import gate as G
from engine.stats.sequential import SequentialCS
from engine.store import transaction
from engine.store.db import insert_df
from tests.conftest import ROOT


def test_decide_and_planner_exact():
    assert G.decide(-0.005, 0.02, 0.01) == G.NON_INFERIOR
    assert G.decide(-0.05, -0.02, 0.01) == G.WORSE
    assert G.decide(-0.02, 0.01, 0.01) == G.UNDECIDED
    assert G.EXIT_CODES == {G.NON_INFERIOR: 0, G.WORSE: 1, G.UNDECIDED: 3}
    z = st.norm.ppf(0.975)
    assert G.questions_needed(0.01, 0.04, 0.02, 0.05) == int(np.ceil(z * z * 0.04 / 0.03**2))
    assert G.questions_needed(-0.02, 0.04, 0.02, 0.05) is None  # on the margin
    with pytest.raises(UserError, match="--margin must be a number >= 0"):
        G.decide(0, 0, -0.1)


def _write_run(db, run, base, cand, order=None, seen=None, models=("base", "cand")):
    """A run scored with rule 'exact' (one repeat, coupled); with ``order`` a --until run whose first
    ``seen`` questions of the order are scored."""
    cfg = {"models": list(models), "modes": ["coupled"], "repeats": 1}
    if order is not None:
        cfg["sequential"] = {"order": order, "alpha": 0.05, "until": "decided", "order_seed": 1,
                             "score_rule": "exact"}  # fmt: skip
    ids = [f"q{i:04d}" for i in range(len(base))]
    keep = set(order[:seen]) if order is not None else set(ids)
    rows = [
        (run, m, p, 0, "coupled", "exact", float(s))
        for m, sc in zip(models, (base, cand))
        for p, s in zip(ids, sc)
        if p in keep
    ]
    with transaction(db) as con:
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status, n_units) VALUES (?, 'ds', ?, 'done', 0)",
            [run, json.dumps(cfg)],
        )
        cols = ["run_id", "model", "prompt_id", "repeat", "mode", "rule", "score"]
        insert_df(con, "scores", pd.DataFrame(rows, columns=cols), cols)  # one statement, not a row each
    return ids


def test_exit_codes_on_stored_runs(tmp_db, capsys):
    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.7).astype(float)
    same = np.where(rng.random(400) < 0.02, 1 - base, base)  # a quantization that changes 2% of answers
    worse = np.where((base == 1) & (rng.random(400) < 0.3), 0.0, base)  # loses 30% of its right answers
    _write_run(tmp_db, "same", base, same)
    _write_run(tmp_db, "worse", base, worse)
    _write_run(tmp_db, "few", base[:12], worse[:12])
    argv = ["gate", "--db", str(tmp_db), "--baseline", "base", "--candidate", "cand", "--margin", "0.05"]
    assert main([*argv, "--run", "same"]) == 0
    assert "PASS: cand is non-inferior to base" in capsys.readouterr().out
    assert main([*argv, "--run", "worse"]) == 1
    assert "FAIL" in capsys.readouterr().out
    assert main([*argv, "--run", "few", "--json"]) == 3
    d = json.loads(capsys.readouterr().out)
    assert d["decision"] == "undecided" and d["method"] == FIXED and d["more_questions"] > 0
    ref = st.ttest_rel(worse[:12], base[:12])
    assert d["difference"] == pytest.approx(np.mean(worse[:12] - base[:12]))
    half = st.t.ppf(0.975, 11) * np.std(worse[:12] - base[:12], ddof=1) / np.sqrt(12)
    assert d["upper"] - d["difference"] == pytest.approx(half) and ref.pvalue > 0
    assert main([*argv, "--run", "same", "--candidate", "nope"]) == 2


def test_live_until_run_decides_with_its_confidence_sequence(tmp_db):
    rng = np.random.default_rng(1)
    N = 300
    base = (rng.random(N) < 0.6).astype(float)
    cand = np.where(rng.random(N) < 0.03, 1 - base, base)
    order = [f"q{i:04d}" for i in rng.permutation(N)]
    _write_run(tmp_db, "live", base, cand, order=order, seen=120)
    res = gate(tmp_db, "live", "base", "cand", 0.05)
    assert res.method == ANYTIME and res.n_questions == 120 and res.n_total == N
    idx = [int(p[1:]) for p in order[:120]]
    cs = SequentialCS(N, 0.05)
    cs.update(cand[idx] - base[idx])
    assert (res.lower, res.upper) == pytest.approx(cs.current)
    assert res.decision == G.decide(*cs.current, 0.05)
    fixed = gate(tmp_db, "live", "base", "cand", 0.05, anytime=False)
    assert fixed.method == FIXED and fixed.upper - fixed.lower < res.upper - res.lower


def test_harness_paths_are_imported_then_gated(tmp_db, capsys):
    data = ROOT / "tests" / "data" / "harness" / "lm_eval" / "tinyqa"
    code = main(["gate", str(data / "dummy-a"), str(data / "dummy-b"), "--db", str(tmp_db), "--baseline",
                 "dummy-a", "--candidate", "dummy-b", "--margin", "0.01", "--json"])  # fmt: skip
    out = capsys.readouterr().out
    d = json.loads(out[out.index("{") :])
    assert code == d["exit_code"] and d["run"].startswith("harness-")
    from engine.analysis.accuracy_ranks import paired_accuracy

    ref = paired_accuracy(tmp_db, d["run"], "dummy-a", "dummy-b")  # A − B of the same questions
    assert d["difference"] == pytest.approx(-ref.paired.diff)
    assert (d["lower"], d["upper"]) == pytest.approx((-ref.paired.ci_high, -ref.paired.ci_low))


def test_wrong_decisions_are_rare_at_the_margin():
    """Seeded: the true difference sits exactly at −M. Fixed-n (400 questions, 2000 replications): a
    wrong PASS in <= α/2 + 2 MC s.e. A live run polled after every question (N = 400, 300 random orders of
    one finite population with Δ_N = −M): the confidence sequence ever passes in <= α/2 + 2 MC s.e.,
    where a t interval polled after every 10 questions passes wrongly several times as often."""
    rng = np.random.default_rng(7)
    M, alpha = 0.05, 0.05
    p = np.array([0.20, 0.65, 0.15])  # P(d = -1, 0, 1): E d = 0.15 - 0.20 = -M
    wrong = 0
    reps = 2000
    for _ in range(reps):
        d = rng.choice([-1.0, 0.0, 1.0], 400, p=p)
        half = st.t.ppf(1 - alpha / 2, 399) * d.std(ddof=1) / 20
        wrong += G.decide(d.mean() - half, d.mean() + half, M) == G.NON_INFERIOR
    assert wrong / reps <= alpha / 2 + 2 * np.sqrt(alpha / 2 * (1 - alpha / 2) / reps)
    N = 400
    pop = np.repeat([-1.0, 0.0, 1.0], [80, 260, 60])  # Δ_N = (60 - 80) / 400 = −M
    assert pop.mean() == pytest.approx(-M, abs=1e-9)
    cs_wrong = t_wrong = 0
    orders = 300
    for _ in range(orders):
        d = pop[rng.permutation(N)]
        lo, _ = SequentialCS(N, alpha).update(d)
        cs_wrong += bool(np.any(lo[:-1] > -M))  # before the last question (at t = N: the point Δ_N)
        for t in range(20, N, 10):
            x = d[:t]
            if x.mean() - st.t.ppf(1 - alpha / 2, t - 1) * x.std(ddof=1) / np.sqrt(t) > -M:
                t_wrong += 1
                break
    bound = alpha / 2 + 2 * np.sqrt(alpha / 2 * (1 - alpha / 2) / orders)
    assert cs_wrong / orders <= bound, cs_wrong / orders
    assert t_wrong / orders > 2 * alpha / 2, t_wrong / orders


def test_figure_colours_the_decision_and_marks_the_margin(tmp_db):
    from engine.figures.gate import COLOURS, gate_figure

    rng = np.random.default_rng(3)
    base = (rng.random(200) < 0.7).astype(float)
    _write_run(tmp_db, "fig", base, base.copy())  # identical answers: B − A = 0 exactly
    res = gate(tmp_db, "fig", "base", "cand", 0.02)
    fig = gate_figure(res)
    (trace,) = fig.data
    assert trace.marker.color == COLOURS[G.NON_INFERIOR] and list(trace.x) == [0.0]
    assert [s.x0 for s in fig.layout.shapes if s.type == "line"] == [-0.02, 0]  # −M, then 0
    assert "PASS" in fig.layout.title.text and "200 questions" in fig.layout.title.text
    cmd = res.command("e.duckdb")
    assert cmd.split() == ["python", "-m", "engine", "gate", "--run", "fig", "--baseline", "base",
                           "--candidate", "cand", "--margin", "0.02", "--mode", "coupled", "--rule",
                           "exact", "--db", "e.duckdb"]  # fmt: skip
    row = res.frame().iloc[0]
    assert row["decision"] == G.NON_INFERIOR and row["exit_code"] == 0 and "text" not in res.frame()


def test_report_gate_section_is_the_gate_command_s_decision(tmp_path, capsys):
    """``report --gate-margin``: the section holds exactly ``engine gate``'s decision for the pair
    (B = the second of --models against A = the first); without a margin there is no such section."""
    from engine.report.build import run_report
    from tests.test_app import MODELS, build_small_db

    db = build_small_db(tmp_path / "g.duckdb")
    a, b = MODELS[0], MODELS[1]
    rep = run_report(db, "run-small", models=[a, b], gate_margin=0.1)
    (sec,) = [s for s in rep.sections if s.key == "gate"]
    ref = gate(db, "run-small", a, b, 0.1, rule=run_report_rule(db))
    assert sec.paragraphs == [ref.text] and sec.code == [ref.command("g.duckdb")]
    (fig,) = sec.figures
    vals = dict(zip(fig.table.columns, fig.table.rows[0]))  # header -> cell
    assert vals["B − A"].value == pytest.approx(ref.difference)
    assert (vals["lower"].value, vals["upper"].value) == pytest.approx((ref.lower, ref.upper))
    assert vals["decision"].text == ref.decision
    assert "gate" not in [s.key for s in run_report(db, "run-small", models=[a, b]).sections]
    # the CLI: a set has no gate; a negative margin is bad input
    argv = ["report", "--db", str(db), "--out", str(tmp_path / "r.html")]
    assert main([*argv, "--set", "anything", "--gate-margin", "0.01"]) == 2
    assert "--gate-margin gates a run" in capsys.readouterr().err
    assert main([*argv, "--run", "run-small", "--gate-margin", "-1"]) == 2
    assert main([*argv, "--run", "run-small", "--models", f"{a},{b}", "--gate-margin", "0.1"]) == 0
    assert "Release gate" in (tmp_path / "r.html").read_text()


def run_report_rule(db) -> str:
    from engine.analysis.summary import run_summary

    return run_summary(db, "run-small").rule
