"""A run's judge audit with the bias figures (engine/analysis/judge_biases.py): length bias from the
stored responses' lengths, self-preference, drift between two judges on the same units with its paired
test, the warning when the provider reported more than one model; and ``--human SET``
reads the named set, not the label log."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.analysis import judge_audit as JA
from engine.analysis import run_units as U
from engine.analysis.notices import Notice
from engine.cli import main as cli
from engine.store.db import transaction
from tests.test_judge_audit import RUN, make_db


def _with_lengths(path):
    """make_db's run, with token counts: m2 answers longest, m0 shortest (plus noise), so the judge's
    bias towards m2 is partly a length preference."""
    units, labels, other = make_db(path)
    rng = np.random.default_rng(5)
    with transaction(path) as con:
        rows = con.execute("SELECT model, prompt_id FROM generations WHERE run_id = ?", [RUN]).fetchall()
        for m, p in rows:
            n = 20 + 10 * int(m[1:]) + int(rng.integers(0, 15))
            con.execute(
                "UPDATE generations SET n_tokens = ? WHERE run_id = ? AND model = ? AND prompt_id = ?",
                [n, RUN, m, p],
            )
    return units, labels, other


def test_length_bias_equals_a_hand_computation(tmp_db):
    _with_lengths(tmp_db)
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=200, seed=1)
    L = res.biases.length
    assert L is not None and L.unit == "tokens"
    from engine.store.judge_facts import generation_lengths

    g = generation_lengths(tmp_db, RUN).set_index(["model", "prompt_id"])["n_tokens"]
    df = U.merge_labels(U.judge_units(tmp_db, RUN, "j1"), U.first_labels(U.human_labels(tmp_db, RUN))[0])
    la = np.array([g[(a, p)] for a, p in zip(df.model_a, df.prompt_id)])
    lb = np.array([g[(b, p)] for b, p in zip(df.model_b, df.prompt_id)])
    longer = np.where(la > lb, 0, np.where(lb > la, 1, -1))
    h = U.codes(df.human_winner)
    j = df.judge.to_numpy()
    both = (longer >= 0) & (h >= 0)
    assert L.judge.n == both.sum()
    assert L.judge.estimate == pytest.approx((j[both] == longer[both]).mean())
    assert L.human.estimate == pytest.approx((h[both] == longer[both]).mean())
    assert L.difference.estimate == pytest.approx(L.judge.estimate - L.human.estimate)
    allj = longer >= 0
    assert L.judge_all.estimate == pytest.approx((j[allj] == longer[allj]).mean())
    assert sum(b.judge.n for b in L.bins) == L.judge_all.n and len(L.bins) >= 2
    for e in (L.judge, L.human, L.difference, L.judge_all):
        assert e.lower <= e.estimate <= e.upper


def test_self_preference_and_drift(tmp_db):
    _, _, other = _with_lengths(tmp_db)
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=200, drift=["j2"], self_models=["m2"])
    (sp,) = res.biases.self_preference
    b = {m: e.estimate for m, e in res.bias.items()}
    assert sp.model == "m2" and sp.bias.estimate == pytest.approx(b["m2"])
    assert sp.difference.estimate == pytest.approx(b["m2"] - (b["m0"] + b["m1"]) / 2)
    (d,) = res.biases.drift
    u1 = U.judge_units(tmp_db, RUN, "j1")
    u2 = U.judge_units(tmp_db, RUN, "j2")
    m = u1.merge(u2, on=U.KEY)
    assert d.first == "j1" and d.second == "j2" and d.n == len(m)
    assert d.changed.estimate == pytest.approx((m.judge_x != m.judge_y).mean())
    assert d.shift_tie.estimate == pytest.approx((m.judge_y == 2).mean() - (m.judge_x == 2).mean())
    assert d.p_value < 0.05  # j2 turned verdicts into ties only: a systematic change (p = 0.025)


def test_reported_model_not_constant_is_warned(tmp_db, capsys):
    _with_lengths(tmp_db)
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=100)
    assert not [w for w in res.warnings if w.kind == Notice.JUDGE_DRIFT]
    with transaction(tmp_db) as con:
        con.execute(
            "UPDATE judgments SET reported_model = CASE WHEN prompt_id < 'p2' THEN 'gpt-x-0513' "
            "ELSE 'gpt-x-0806' END WHERE judge = 'j1'"
        )
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=100)
    (w,) = [w for w in res.warnings if w.kind == Notice.JUDGE_DRIFT]
    assert "gpt-x-0513" in w and "gpt-x-0806" in w
    assert set(res.biases.reported_models) == {"gpt-x-0513", "gpt-x-0806"}
    assert cli(["judge-audit", "--db", str(tmp_db), "--run", RUN, "--judge", "j1", "--boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "WARNING: the provider reported more than one model" in out and "length bias (tokens)" in out


def test_human_set_named_is_the_set_read_not_the_label_log(tmp_db, capsys):
    """A named source is the source used: a label sample synced into a set, then one more vote in the log: ``--human SID``
    audits the stored set's labels (before the fix it read the log's)."""
    from engine.tasks import label_sets as S
    from engine.tasks import labels as T

    make_db(tmp_db)
    s = T.make_sample(tmp_db, RUN, "coupled", 6, seed=3)
    sid = s["sample_id"]
    for v in ("first", "second", "tie"):
        T.record(tmp_db, sid, T.next_unit(tmp_db, sid, "ann", "t"), v, "ann", "t")
    S.sync_labels(tmp_db, RUN)
    T.record(tmp_db, sid, T.next_unit(tmp_db, sid, "ann", "t"), "first", "ann", "t")  # log only
    assert len(U.human_labels(tmp_db, RUN, sid)) == 4  # the log: the truth of the sample
    res = JA.judge_audit(tmp_db, RUN, "j1", human=sid, n_boot=50)
    assert res.n_labelled == 3 and res.human_sets == [sid]
    assert (
        cli(
            [
                "judge-audit",
                "--db",
                str(tmp_db),
                "--run",
                RUN,
                "--judge",
                "j1",
                "--human",
                sid,
                "--boot",
                "50",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_labelled"] == 3
