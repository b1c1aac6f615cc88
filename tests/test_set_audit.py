"""The judge audit of a comparison set (engine/analysis/set_audit.py, ``engine judge-audit --set``), the
agreement figures beyond kappa and the judge biases in a run's audit (engine/analysis/judge_biases.py),
and ``--human SET`` reads the named set."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine.analysis import judge_audit as JA
from engine.analysis import set_audit as SA
from engine.analysis.audit_sim import WIN, simulated_run
from engine.analysis.judge_biases import family
from engine.analysis.notices import Notice
from engine.cli import main as cli
from engine.errors import UserError
from engine.store import comparisons as SC


def _set_rows(n_prompts=40, seed=0, ties=True):
    """One row per unit with both labels (no provenance columns): judge = the unit's combined verdict,
    human = a simulated label (every unit labelled)."""
    units, _ = simulated_run(n_prompts, 3, 0, np.random.default_rng(seed))
    rng = np.random.default_rng(seed + 1)
    agree = rng.random(len(units)) < 0.7
    h = np.where(agree, units["judge"], rng.integers(0, 3, len(units)))
    j = units["judge"].to_numpy()
    if not ties:
        j = np.where(j == 2, 0, j)
        h = np.where(h == 2, 1, h)
    return pd.DataFrame(
        {
            "prompt_id": units["prompt_id"],
            "model_a": units["model_a"],
            "model_b": units["model_b"],
            "human_winner": WIN[h],
            "judge_winner": WIN[j],
        }
    )


def test_set_audit_equals_a_hand_computation_and_clusters_by_prompt(tmp_db):
    rows = _set_rows()
    SC.write_set(tmp_db, rows, "both", "csv", {"judge": "gpt-x"}, False)
    res = SA.set_judge_audit(tmp_db, "both", n_boot=300, seed=1)
    agree = (rows.human_winner == rows.judge_winner).mean()
    assert res.set_name == "both" and res.run is None and res.judge == "gpt-x"
    assert res.n_audited == len(rows) and res.agreement.estimate == pytest.approx(agree)
    assert res.n_clusters == rows.prompt_id.nunique()
    # Cohen's kappa by hand over a / b / tie
    px = rows.judge_winner.value_counts(normalize=True)
    py = rows.human_winner.value_counts(normalize=True)
    pe = sum(px.get(c, 0) * py.get(c, 0) for c in ("a", "b", "tie"))
    assert res.kappa.estimate == pytest.approx((agree - pe) / (1 - pe))
    for e in (res.agreement, res.kappa, res.gwet_ac1, res.krippendorff_alpha):
        assert e.lower <= e.estimate <= e.upper
    assert not res.binary and res.sensitivity.estimate is None  # ties: not binary


def test_binary_set_gets_sensitivity_and_specificity(tmp_db):
    rows = _set_rows(ties=False)
    SC.write_set(tmp_db, rows, "bin", "csv", {}, False)
    res = SA.set_judge_audit(tmp_db, "bin", n_boot=200)
    pos = rows[rows.human_winner == "a"]
    neg = rows[rows.human_winner == "b"]
    assert res.binary
    assert res.sensitivity.estimate == pytest.approx((pos.judge_winner == "a").mean())
    assert res.specificity.estimate == pytest.approx((neg.judge_winner == "b").mean())
    table = res.figures_table()
    assert "sensitivity, P(judge a | human a)" in set(table["figure"])


def test_rows_of_one_unit_in_both_orders_are_one_unit_with_one_human_label():
    """Provenance (presented): the two order rows of a unit are one unit (judge: the common winner,
    else tie) and the human label repeated on both rows is one label; a second labeller's is a second."""
    rows = pd.DataFrame(
        {
            "prompt_id": ["p1", "p1", "p1", "p2", "p2"],
            "model_a": ["x", "y", "x", "x", "y"],
            "model_b": ["y", "x", "y", "y", "x"],
            "human_winner": ["a", "b", None, "b", "a"],
            "judge_winner": ["a", "b", None, "a", "a"],  # p1: x in both orders; p2: x then y -> tie
            "presented": ["ab", "ab", None, "ab", "ab"],
            "labeller": ["h1", "h1", "h2", None, None],
        }
    )
    rows.loc[2, "human_winner"] = "tie"  # h2 on p1: a second label of the same unit
    units, labels, grouped = SA.set_frames(rows, "s")
    assert grouped
    # row 1 (y vs x, y shown first) is order "ba" of the canonical pair (x, y): the same unit as row 0
    assert units[["prompt_id", "judge"]].values.tolist() == [["p1", 0], ["p2", 2]]
    assert sorted(labels["labeller"].fillna("-").tolist()) == ["-", "h1", "h2"]


def test_rows_without_provenance_are_separate_comparisons_and_missing_prompts_own_clusters():
    rows = pd.DataFrame(
        {
            "prompt_id": ["q", "q", None, None],
            "model_a": ["x", "x", "x", "x"],
            "model_b": ["y", "y", "y", "y"],
            "human_winner": ["a", "b", "a", "a"],
            "judge_winner": ["a", "a", "b", "a"],
        }
    )
    units, labels, grouped = SA.set_frames(rows, "s")
    assert not grouped and len(units) == 4 and len(labels) == 4
    assert units["prompt_id"].nunique() == 3  # q, and each row without a prompt id on its own
    res = JA.audit_units(None, "j", units, labels, n_boot=50)
    assert res.n_audited == 4 and res.agreement.estimate == pytest.approx(0.5)


def test_a_set_without_judge_labels_names_the_run_audit(tmp_db):
    rows = _set_rows().assign(judge_winner=None)
    SC.write_set(tmp_db, rows, "humans", "labels", {"run_id": "r1"}, False)
    with pytest.raises(UserError, match="needs both.*judge-audit --run r1 --judge JUDGE --human humans"):
        SA.set_judge_audit(tmp_db, "humans")
    with pytest.raises(UserError, match="unknown comparison set 'nope'"):
        SA.set_judge_audit(tmp_db, "nope")


def test_cli_set_json_and_summary(tmp_db, capsys):
    SC.write_set(tmp_db, _set_rows(), "both", "csv", {}, False)
    assert cli(["judge-audit", "--db", str(tmp_db), "--set", "both", "--boot", "100", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["set_name"] == "both" and d["run"] is None
    for k in ("agreement", "kappa", "gwet_ac1", "krippendorff_alpha", "sensitivity", "biases"):
        assert k in d
    assert cli(["judge-audit", "--db", str(tmp_db), "--set", "both", "--boot", "100"]) == 0
    out = capsys.readouterr().out
    assert "set both" in out and "Gwet's AC1" in out and "Krippendorff" in out
    assert cli(["judge-audit", "--db", str(tmp_db), "--boot", "100"]) == 2
    assert "--run RUN --judge J, or --set NAME" in capsys.readouterr().err


def test_family():
    assert family("gpt-4o-mini") == "gpt" and family("meta-llama/Llama-3.1-8B") == "llama"
    assert family("claude-3-opus") == "claude" and family("Qwen2.5-7B") == "qwen"


def test_notice_kinds_exist():
    assert (
        Notice.JUDGE_DRIFT.value == "judge_drift" and Notice.NO_JUDGE_LABELS.value == "no_judge_labels"
    )
