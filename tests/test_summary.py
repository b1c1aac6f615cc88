"""Headline summary of a run (engine/analysis/summary.py, `python -m engine summary`) and the
scoring rule chosen per dataset."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine import store
from engine.analysis.notices import Notice
from engine.analysis.summary import latest_scored_run, run_summary
from engine.errors import UserError
from engine.stats.multigen import score_variance
from engine.stats.paired_difference import paired_diff_ci
from engine.tasks import scoring
from tests.conftest import ROOT

MODELS = ("m1", "m2")


def make_numeric_run(db, answers: dict, gold: dict, run="r1", dataset="nums", kind="numeric"):
    """answers[(model, mode)] = (Q, R) array of answer strings; gold = {prompt_id: answer}."""
    with store.writer(db) as con:
        con.begin()
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status) VALUES (?, ?, '{}', 'done')",
            [run, dataset],
        )
        con.execute(
            "INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, 'test', ?, ?)",
            [dataset, kind, len(gold)],
        )
        for i, (pid, g) in enumerate(gold.items()):
            con.execute(
                "INSERT INTO prompts (dataset_id, prompt_id, idx, question, gold, user_prompt) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [dataset, pid, i, f"q{i}", g, f"q{i}"],
            )
        for (model, mode), arr in answers.items():
            for q, pid in enumerate(gold):
                for r, text in enumerate(arr[q]):
                    con.execute(
                        "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text, n_tokens) "
                        "VALUES (?, ?, ?, ?, ?, 0, ?, 3)",
                        [run, model, pid, r, mode, text],
                    )
        con.commit()


def test_default_rule_fits_the_dataset():
    assert scoring.default_rule("numeric", "demo-numbers") == "numeric"
    assert scoring.default_rule("multiple_choice", "demo") == "lenient"
    assert scoring.default_rule("multiple_choice", "demo:science") == "lenient"
    assert (
        scoring.default_rule("multiple_choice", "mmlu") == "paper"
    )  # paper reproduction keeps its rule
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
    make_numeric_run(
        tmp_db,
        {
            ("m1", "coupled"): c,
            ("m2", "coupled"): c,
            ("m1", "independent"): i1,
            ("m2", "independent"): i2,
        },
        gold,
    )
    with pytest.raises(UserError, match="no scores yet"):
        run_summary(tmp_db, "r1")
    scoring.score_run(tmp_db, "r1")  # no rule: numeric, from the dataset kind
    s = run_summary(tmp_db, "r1")
    assert (
        s.rule == "numeric"
        and s.chance == pytest.approx(1 / 3)
        and s.n_questions == 3
        and s.n_repeats == 2
    )
    acc = {(r.model, r.mode): r for r in s.accuracy}
    Y = np.array([[1, 1], [1, 0], [0, 1]], float)
    assert acc[("m1", "coupled")].accuracy == pytest.approx(4 / 6)
    sv = score_variance(Y)
    assert acc[("m1", "coupled")].ci_low == pytest.approx(max(sv["ci_low"], 0.0))
    assert acc[("m1", "coupled")].ci_high == pytest.approx(min(sv["ci_high"], 1.0))
    pair = s.pairs[0]
    assert pair.agreement["coupled"].mean == 1.0 and pair.agreement["independent"].mean == pytest.approx(
        3 / 6
    )
    A = np.array([[1, 0], [1, 1], [1, 0]], float)
    B = np.array([[1, 1], [0, 1], [0, 0]], float)
    ref = paired_diff_ci(A, B)
    assert pair.diff["independent"].se == pytest.approx(ref["se"])
    assert pair.diff["coupled"].se == 0.0 and pair.variance_saving == 1.0
    # 3 questions, a collapsed coupled interval and a saving of 100% from SE 0: each says so
    kinds = [w.kind for w in s.warnings]
    assert kinds == [Notice.SMALL_SAMPLE, Notice.DEGENERATE_INTERVAL, Notice.DEGENERATE_SAVING]
    assert s.small_sample and "3 questions" in s.warnings[0].message
    d = s.to_dict()  # the JSON keeps its keys
    assert d["pairs"][0]["agreement_coupled"] == 1.0 and d["pairs"][0]["diff_coupled"]["se"] == 0.0
    assert d["warnings"][0]["kind"] == "small_sample" and d["accuracy"][0]["model"] == "m1"
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
    assert "warning: small sample: 2 questions" in out.stdout
    js = subprocess.run(cmd + ["--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    res = json.loads(js.stdout)
    assert (
        res["accuracy"][0]["accuracy"] == pytest.approx(0.75)
        and res["pairs"][0]["agreement_coupled"] == 1.0
    )
    bad = subprocess.run(cmd[:-1] + ["nope"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown run" in bad.stderr


def test_commands_use_the_rule_the_run_was_scored_with(tmp_db):
    """No --rule = the rule the run was scored with (its dataset kind's rule)."""
    from engine.analysis.multigen import multigen_summary
    from engine.store.scores import run_rule

    gold = {"p1": "4", "p2": "7", "p3": "2"}
    a = np.array([["4", "4"], ["7", "1"], ["2", "5"]])
    make_numeric_run(tmp_db, {(m, mode): a for m in MODELS for mode in ("coupled", "independent")}, gold)
    assert run_rule(tmp_db, "r1") == "numeric"  # nothing scored yet: the dataset's rule
    scoring.score_run(tmp_db, "r1", "exact")
    assert run_rule(tmp_db, "r1") == "exact"  # the only rule it was scored with
    scoring.score_run(tmp_db, "r1")
    assert (
        run_rule(tmp_db, "r1") == run_rule(tmp_db, None, list(MODELS)) == "numeric"
    )  # the dataset's, preferred
    assert run_rule(tmp_db, "r1", rule="exact") == "exact"
    assert run_summary(tmp_db, "r1").rule == "numeric"
    assert multigen_summary(tmp_db, "r1", "m1", rule=run_rule(tmp_db, "r1")).rule == "numeric"
    with pytest.raises(UserError, match="unknown run"):
        run_rule(tmp_db, "nope")


def test_data_map_no_answer_is_its_own_category_never_flagged(tmp_db):
    """ "How many legs does a dog have?" (gold 4) answered with no number at all is
    neither one shared answer (perfectly consistent) nor a label-error candidate; a prompt answered
    "8" every time is."""
    from engine.analysis.multigen import multigen_summary

    gold = {"dog": "4", "spider": "8", "week": "7"}
    texts = np.array(
        [
            ["Woof!", "A dog is a good boy.", "Dogs are mammals."],
            ["It has 6.", "6", "six legs: 6"],  # consistently the wrong answer 6
            ["7", "7 days", "seven, so 7"],
        ]
    )
    make_numeric_run(tmp_db, {("m1", "coupled"): texts}, gold)
    with store.writer(tmp_db) as con:
        con.execute(
            "UPDATE prompts SET question = 'How many legs does a dog have?' WHERE prompt_id = 'dog'"
        )
    scoring.score_run(tmp_db, "r1")
    res = multigen_summary(tmp_db, "r1", "m1", rule="numeric")
    by = {p.prompt_id: p for p in res.prompts}
    assert by["dog"].p_correct == 0.0 and by["dog"].no_answer == 1.0
    assert by["dog"].consistency == pytest.approx(
        -np.log(3)
    )  # three categories of one, not one shared answer
    assert not by["dog"].flagged
    assert by["spider"].flagged and by["spider"].consistency == pytest.approx(0.0)
    assert not by["week"].flagged and res.n_flagged == 1 and res.flagged == ["spider"]
    assert res.n_no_answer == 3 and res.to_dict()["prompts"][0]["no_answer"] == 1.0
    # with two repeats, two non-answers (S = -log 2 > -0.8) are still not a candidate
    res2 = multigen_summary(tmp_db, "r1", "m1", rule="numeric", s_min=-3.0)
    assert not {p.prompt_id: p for p in res2.prompts}["dog"].flagged
