"""The judge audit of a run (engine/analysis/judge_audit.py, ``engine judge-audit``): a stored run with
verdicts of two judges in both orders and a human comparison set naming the run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine.analysis import judge_audit as JA
from engine.analysis import run_units as U
from engine.analysis.audit_sim import simulated_run
from engine.analysis.notices import Notice
from engine.errors import UserError
from engine.store import comparisons as SC
from engine.store import runs as RS
from engine.store.db import insert_df, transaction
from engine.store.verdicts import VerdictRow, insert_verdicts

RUN = "run-x"
PARSED = {("a", "ab"): "A", ("b", "ab"): "B", ("a", "ba"): "B", ("b", "ba"): "A"}


def _verdicts(units: pd.DataFrame, judge: str) -> list[VerdictRow]:
    rows = []
    for r in units.itertuples(index=False):
        for order, code in (("ab", r.w_ab), ("ba", r.w_ba)):
            w = ["a", "b", "tie"][code]
            rows.append(
                VerdictRow(
                    RUN,
                    judge,
                    r.prompt_id,
                    int(r.repeat),
                    r.mode,
                    r.model_a,
                    r.model_b,
                    order,
                    "h",
                    None,
                    PARSED.get((w, order), "tie"),
                    w,
                )
            )
    return rows


def make_db(path, n_prompts=40, k=3, n_labels=60, seed=0):
    units, labels = simulated_run(n_prompts, k, n_labels, np.random.default_rng(seed))
    other = units.copy()
    flip = np.random.default_rng(seed + 1).random(len(other)) < 0.2
    other.loc[flip, ["w_ab", "w_ba", "judge"]] = 2
    models = sorted(set(units.model_a) | set(units.model_b))
    gens = pd.DataFrame(
        [(RUN, m, p, 0, "coupled", 1, f"{m} on {p}") for m in models for p in units.prompt_id.unique()],
        columns=["run_id", "model", "prompt_id", "repeat", "mode", "seed", "text"],
    )
    with transaction(path) as con:
        RS.create_run(
            con,
            RUN,
            "ds",
            {"models": models, "modes": ["coupled"], "repeats": 1},
            "v",
            "token_id",
            [],
            len(units),
        )
        insert_df(con, "generations", gens, list(gens.columns))
    insert_verdicts(path, _verdicts(units, "j1") + _verdicts(other, "j2"))
    # stored with model_a / model_b swapped on half the rows: the reader puts them back in canonical order
    lab = labels.copy()
    sw = np.arange(len(lab)) % 2 == 1
    lab.loc[sw, ["model_a", "model_b"]] = lab.loc[sw, ["model_b", "model_a"]].to_numpy()
    lab.loc[sw, "human_winner"] = lab.loc[sw, "human_winner"].map({"a": "b", "b": "a", "tie": "tie"})
    SC.write_set(
        path,
        lab.assign(judge_winner=None),
        "labels-x",
        "labels",
        {"run_id": RUN, "mode": "coupled"},
        False,
    )
    # a set named by a label sample ("run" key) and a set of another run: the first is read too, the second not
    SC.write_set(
        path, lab.iloc[:0].assign(judge_winner=None), "labels-run-key", "labels", {"run": RUN}, False
    )
    SC.write_set(
        path, lab.iloc[:5].assign(judge_winner=None), "labels-other", "labels", {"run": "other"}, False
    )
    return units, labels, other


def test_db_audit_equals_frame_audit_and_swapped_rows_are_put_back(tmp_db):
    units, labels, other = make_db(tmp_db)
    read = U.judge_units(tmp_db, RUN, "j1")
    pd.testing.assert_frame_equal(
        read[U.KEY + ["w_ab", "w_ba", "judge"]].reset_index(drop=True),
        units.sort_values(U.KEY, ignore_index=True)[U.KEY + ["w_ab", "w_ba", "judge"]],
        check_dtype=False,
    )
    from engine.store.run_labels import run_label_sets

    assert [n for n, _ in run_label_sets(tmp_db, RUN)] == ["labels-x", "labels-run-key"]
    hl = U.human_labels(tmp_db, RUN)
    assert len(hl) == len(labels)
    cols = U.KEY + ["human_winner"]
    assert sorted(map(tuple, hl[cols].astype(str).to_numpy())) == sorted(
        map(tuple, labels[cols].astype(str).to_numpy())
    )
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=200, seed=3)
    ref = JA.audit_units(RUN, "j1", units, labels, n_boot=200, seed=3, panel={"j1": units, "j2": other})
    assert res.agreement == ref.agreement and res.kappa == ref.kappa and res.bias == ref.bias
    assert res.effective_judges == ref.effective_judges
    assert res.judges == ["j1", "j2"] and "j1 | j2" in res.error_correlation
    e = res.agreement
    assert e.lower <= e.estimate <= e.upper and e.n == 60


def test_needs_labels_says_how_many(tmp_db):
    make_db(tmp_db, n_labels=12)
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=50)
    need = {x.figure: x for x in res.needs}
    assert (
        need["agreement and kappa"].have == 12 and need["agreement and kappa"].more == JA.MIN_UNITS - 12
    )
    assert any(w.kind is Notice.NEEDS_LABELS for w in res.warnings)


def test_bad_input_one_line(tmp_db):
    make_db(tmp_db)
    with pytest.raises(UserError, match="no verdicts of judge 'nope'"):
        JA.judge_audit(tmp_db, RUN, "nope")
    with pytest.raises(UserError, match="unknown run"):
        JA.judge_audit(tmp_db, "other-run", "j1")
    with pytest.raises(UserError, match="unknown comparison set"):
        JA.judge_audit(tmp_db, RUN, "j1", human="missing")


def test_labels_naming_other_models_are_refused(tmp_db):
    units, labels, _ = make_db(tmp_db)
    bad = labels.assign(model_b="intruder")
    with pytest.raises(UserError, match="intruder"):
        JA.audit_units(RUN, "j1", units, bad, n_boot=10)


def test_cli_json_keys(tmp_db, capsys):
    from engine.cli import main

    make_db(tmp_db)
    assert (
        main(
            [
                "judge-audit",
                "--db",
                str(tmp_db),
                "--run",
                RUN,
                "--judge",
                "j1",
                "--boot",
                "100",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    for key in (
        "agreement",
        "kappa",
        "position_consistency",
        "first_position_preference",
        "human_agreement",
    ):
        assert set(d[key]) >= {"estimate", "lower", "upper"}
    assert set(d["bias"]) == {"m0", "m1", "m2"}
    assert (
        main(["judge-audit", "--db", str(tmp_db), "--run", RUN, "--judge", "j1", "--boot", "100"]) == 0
    )
    assert "Cohen's kappa" in capsys.readouterr().out


def test_run_ranksets_cli_with_plan(tmp_db, capsys):
    from engine.cli import main

    make_db(tmp_db, n_prompts=60, n_labels=100)
    assert (
        main(
            [
                "run-ranksets",
                "--db",
                str(tmp_db),
                "--run",
                RUN,
                "--judge",
                "j1",
                "--procedure",
                "chi2",
                "--plan-width",
                "1",
                "--plan-ci",
                "0.3",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert set(d["results"]) == {"ppr", "judge", "human"} and d["results"]["ppr"]["n"] == 100
    assert d["plan"]["n_labelled"] == 100 and "more labels" in d["plan"]["text"]
    assert (
        main(
            [
                "run-ranksets",
                "--db",
                str(tmp_db),
                "--run",
                RUN,
                "--judge",
                "j1",
                "--procedure",
                "chi2",
                "--plan-width",
                "1",
            ]
        )
        == 0
    )
    assert "planner:" in capsys.readouterr().out


def test_position_consistency_agrees_with_paired_tests_position_bias():
    """Two implementations: 1 - flip rate of engine.stats.paired_tests.position_bias (rows per order)."""
    from engine.stats.paired_tests import position_bias

    units, labels = simulated_run(50, 3, 10, np.random.default_rng(4))
    res = JA.audit_units(RUN, "j1", units, labels, n_boot=20)
    n = len(units)
    a = np.concatenate([np.zeros(n), np.ones(n)]).astype(int)  # shown first: model_a (ab) / model_b (ba)
    b = 1 - a
    # outcome in presentation terms: 0 = first shown wins, 1 = second, 2 = tie
    ab, ba = units.w_ab.to_numpy(), units.w_ba.to_numpy()
    out = np.concatenate([ab, np.where(ba == 2, 2, 1 - ba)])
    pb = position_bias(a, b, out, np.concatenate([np.arange(n), np.arange(n)]))
    assert res.position_consistency.estimate == pytest.approx(pb["consistency"])
    assert res.first_position_preference.estimate == pytest.approx(pb["first_win_share"] - 0.5)


def test_doubly_labelled_needs_another_labeller():
    key = dict(prompt_id="p1", repeat=0, mode="coupled", model_a="m0", model_b="m1")
    lab = pd.DataFrame(
        [
            {**key, "human_winner": "a", "labeller": "ann", "labelled_at": pd.Timestamp(2)},
            {**key, "human_winner": "b", "labeller": "ann", "labelled_at": pd.Timestamp(1)},
            {**key, "human_winner": "tie", "labeller": "bob", "labelled_at": pd.Timestamp(3)},
        ]
    )
    first, second = U.first_labels(lab)
    assert first.human_winner.tolist() == ["b"]  # the earliest label
    assert second.human_winner.tolist() == ["tie"]  # ann's second label is not a second labeller


def test_the_docs_commands_run_verbatim(tmp_path, monkeypatch, capsys):
    """docs/JUDGE_AUDIT.md's "Try it now" block, each command in this process (the folder /tmp/ja moved
    to a temporary one; the Streamlit line is left out): every command exits 0."""
    import runpy
    import shlex
    import sys

    from engine.cli import main
    from tests.conftest import ROOT

    text = (ROOT / "docs" / "JUDGE_AUDIT.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.replace("/tmp/ja", str(tmp_path / "ja")) for ln in block.strip().splitlines()]
    (tmp_path / "ja").mkdir()
    ran = 0
    for line in lines:
        argv = shlex.split(line.split("#", 1)[0])
        if argv[0] in ("mkdir", "rm") or "streamlit" in line:
            continue
        assert argv[:2] in (
            [".venv/bin/python", "-m"],
            [".venv/bin/python", "bench/bench_judge_audit.py"],
        ), line
        if argv[1] == "-m":
            assert argv[2] == "engine" and main(argv[3:]) == 0, line
        else:
            monkeypatch.setattr(sys, "argv", argv[1:])
            monkeypatch.syspath_prepend(str(ROOT / "bench"))
            try:
                runpy.run_path(str(ROOT / argv[1]), run_name="__main__")
            except SystemExit as exc:
                assert exc.code in (0, None), line
        ran += 1
    assert ran == 4
    assert "planner:" in capsys.readouterr().out


def test_skip_rate_of_the_label_samples_is_reported_and_warned(tmp_db, capsys):
    """METHODS 9.1: a skipped unit stays in the sample as missing; the audit reports the skip rate of the
    run's label samples and warns when it is high (a selection risk)."""

    from engine.tasks import labels as T

    make_db(tmp_db)
    assert JA.judge_audit(tmp_db, RUN, "j1", n_boot=50).skip_rate is None  # no label sample yet
    s = T.make_sample(tmp_db, RUN, "coupled", 10, seed=1)
    for k in range(10):
        i = T.next_unit(tmp_db, s["sample_id"], "ann", "tab")
        T.record(tmp_db, s["sample_id"], i, "skip" if k < 3 else "first", "ann", "tab")
    res = JA.judge_audit(tmp_db, RUN, "j1", n_boot=50)
    assert (res.n_skipped, res.skip_rate) == (3, 0.3)
    assert any(
        w.kind == Notice.HIGH_SKIP_RATE and "3 of 10 sampled units were skipped" in w
        for w in res.warnings
    )
    assert res.to_dict()["skip_rate"] == 0.3
    from engine.cli import main

    assert main(["judge-audit", "--run", RUN, "--judge", "j1", "--boot", "50", "--db", str(tmp_db)]) == 0
    assert "3 sampled units skipped (30.0% of the answers)" in capsys.readouterr().out
