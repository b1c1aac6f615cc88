"""Headline summary of a run (engine/analysis/summary.py, `python -m engine summary`) and the
scoring rule chosen per dataset."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine import store
from engine.analysis.summary import latest_scored_run, run_summary
from engine.errors import UserError
from engine.stats.benchmark import paired_diff_ci
from engine.stats.multigen import score_variance
from engine.tasks import scoring
from tests.conftest import ROOT

MODELS = ("m1", "m2")


def make_numeric_run(db, answers: dict, gold: dict, run="r1", dataset="nums", kind="numeric"):
    """answers[(model, mode)] = (Q, R) array of answer strings; gold = {prompt_id: answer}."""
    with store.writer(db) as con:
        con.begin()
        con.execute("INSERT INTO runs (run_id, dataset_id, config, status) VALUES (?, ?, '{}', 'done')", [run, dataset])
        con.execute("INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, 'test', ?, ?)",
                    [dataset, kind, len(gold)])
        for i, (pid, g) in enumerate(gold.items()):
            con.execute("INSERT INTO prompts (dataset_id, prompt_id, idx, question, gold, user_prompt) "
                        "VALUES (?, ?, ?, ?, ?, ?)", [dataset, pid, i, f"q{i}", g, f"q{i}"])
        for (model, mode), arr in answers.items():
            for q, pid in enumerate(gold):
                for r, text in enumerate(arr[q]):
                    con.execute("INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, n_tokens) "
                                "VALUES (?, ?, ?, ?, ?, 0, ?, 3)", [run, model, pid, r, mode, text])
        con.commit()


def test_default_rule_fits_the_dataset():
    assert scoring.default_rule("numeric", "demo-numbers") == "numeric"
    assert scoring.default_rule("multiple_choice", "demo") == "lenient"
    assert scoring.default_rule("multiple_choice", "demo:science") == "lenient"
    assert scoring.default_rule("multiple_choice", "mmlu") == "paper"  # paper reproduction keeps its rule
    assert scoring.default_rule("prompts", "demo-chat") == "exact"
    # "1. 17 + 26 = 43" for option B = 43 is correct under the demo's rule, wrong under the paper's
    row = {"gold": "B", "choices": {"A": "33", "B": "43", "C": "42", "D": "53"}}
    assert scoring.score_generation("1. 17 + 26 = 43", row, "lenient") == ("B", 1.0)
    assert scoring.score_generation("1. 17 + 26 = 43", row, "paper") == ("E", 0.0)


def test_summary_exact_tiny_case(tmp_db):
    gold = {"p1": "4", "p2": "7", "p3": "2"}
    # coupled: both models answer alike on every unit; independent: they differ on 3 of 6 units
    c = np.array([["4", "4"], ["7", "9"], ["1", "2"]])
    i1 = np.array([["4", "5"], ["7", "7"], ["2", "1"]])
    i2 = np.array([["4", "4"], ["8", "7"], ["1", "1"]])
    make_numeric_run(tmp_db, {("m1", "coupled"): c, ("m2", "coupled"): c,
                              ("m1", "independent"): i1, ("m2", "independent"): i2}, gold)
    with pytest.raises(UserError, match="no scores yet"):
        run_summary(tmp_db, "r1")
    scoring.score_run(tmp_db, "r1")  # no rule: numeric, from the dataset kind
    s = run_summary(tmp_db, "r1")
    assert s["rule"] == "numeric" and s["chance"] == pytest.approx(1 / 3) and s["n_questions"] == 3 and s["n_repeats"] == 2
    acc = {(r["model"], r["mode"]): r for r in s["accuracy"]}
    Y = np.array([[1, 1], [1, 0], [0, 1]], float)
    assert acc[("m1", "coupled")]["accuracy"] == pytest.approx(4 / 6)
    sv = score_variance(Y)
    assert acc[("m1", "coupled")]["ci_low"] == pytest.approx(max(sv["ci_low"], 0.0))
    assert acc[("m1", "coupled")]["ci_high"] == pytest.approx(min(sv["ci_high"], 1.0))
    pair = s["pairs"][0]
    assert pair["agreement_coupled"] == 1.0 and pair["agreement_independent"] == pytest.approx(3 / 6)
    A = np.array([[1, 0], [1, 1], [1, 0]], float)
    B = np.array([[1, 1], [0, 1], [0, 0]], float)
    ref = paired_diff_ci(A, B)
    assert pair["diff_independent"]["se"] == pytest.approx(ref["se"])
    assert pair["diff_coupled"]["se"] == 0.0 and pair["variance_saving"] == 1.0
    assert latest_scored_run(tmp_db) == "r1"
    with pytest.raises(UserError, match="scored rules: numeric"):
        run_summary(tmp_db, "r1", rule="paper")
    with pytest.raises(UserError, match="unknown run"):
        run_summary(tmp_db, "nope")


def test_summary_cli_table_and_json(tmp_db):
    gold = {"p1": "4", "p2": "7"}
    a = np.array([["4", "4"], ["7", "1"]])
    make_numeric_run(tmp_db, {(m, mode): a for m in MODELS for mode in ("coupled", "independent")}, gold)
    scoring.score_run(tmp_db, "r1")
    cmd = [sys.executable, "-m", "engine", "summary", "--db", str(tmp_db), "--run", "r1"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "agree coupled" in out.stdout and "95% CI" in out.stdout and "m1" in out.stdout
    js = subprocess.run(cmd + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    res = json.loads(js.stdout)
    assert res["accuracy"][0]["accuracy"] == pytest.approx(0.75) and res["pairs"][0]["agreement_coupled"] == 1.0
    bad = subprocess.run(cmd[:-1] + ["nope"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown run" in bad.stderr
