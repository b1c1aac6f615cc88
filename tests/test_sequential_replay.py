"""``engine sequential``: replay of stored runs (engine/analysis/sequential.py, docs/SEQUENTIAL.md)
on a generated run, an imported harness run and an ``import paper-mmlu`` run."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from engine.analysis.sequential import sequential_replay
from engine.cli import main
from engine.errors import UserError
from engine.stats.sequential import StopRule, confidence_sequence, first_stop, question_order
from engine.tasks import scoring
from engine.tasks.harness_import import import_harness
from engine.tasks.importers import import_paper_mmlu
from tests.conftest import ROOT
from tests.test_importers import _write_layout
from tests.test_summary import make_numeric_run

Q, R = 80, 2


@pytest.fixture
def gen_db(tmp_db):
    """A generated-like numeric run: m1 right 90%, m2 right 40%; coupled answers share the draw."""
    rng = np.random.default_rng(11)
    gold = {f"p{i:03d}": str(i) for i in range(Q)}
    u = rng.random((Q, R))
    right = lambda p, uu: np.where(uu < p, np.array(list(gold.values()))[:, None], "x")  # noqa: E731
    make_numeric_run(
        tmp_db,
        {
            ("m1", "coupled"): right(0.9, u),
            ("m2", "coupled"): right(0.4, u),
            ("m1", "independent"): right(0.9, rng.random((Q, R))),
            ("m2", "independent"): right(0.4, rng.random((Q, R))),
        },
        gold,
    )
    scoring.score_run(tmp_db, "r1")
    return tmp_db


def _direct(tmp_db, mode, seed, repeat=None, alpha=0.05, rule="decided"):
    """An independent route: scores straight from the answers' correctness, then the stats functions."""
    from engine.store.scores import per_question_scores

    df = per_question_scores(tmp_db, "r1")
    df = df[df["mode"] == mode]
    if repeat is not None:
        df = df[df["repeat"] == repeat]
    w = df.groupby(["prompt_id", "model"])["score"].mean().unstack("model").sort_index()
    d = (w["m1"] - w["m2"]).to_numpy()
    order = question_order(len(d), seed)
    lo, up = confidence_sequence(d[order], len(d), alpha=alpha)
    return first_stop(StopRule.parse(rule), lo, up), lo, up, d.mean()


def test_replay_matches_a_direct_computation(gen_db):
    res = sequential_replay(gen_db, "r1", seeds=[0, 1, 2], repeat=None)
    assert [m.mode for m in res.modes] == ["coupled", "independent"] and res.pairs == ("m1 - m2",)
    for m in res.modes:
        for s in m.stops:
            n, lo, up, full = _direct(gen_db, m.mode, s.seed)
            assert s.n == n and m.full[0] == pytest.approx(full)
            at = (n or Q) - 1
            assert (s.lower[0], s.upper[0]) == pytest.approx((lo[at], up[at]))
            # decided: the CS excludes 0 before N, and never on a miss (METHODS 8.2, 8.3)
            assert s.decided == bool((lo[at] > 0 or up[at] < 0) and lo[at] <= up[at] and at + 1 < Q)
    one = sequential_replay(gen_db, "r1", seeds=[4], repeat=1, mode="coupled", stop="width:0.9")
    n, *_ = _direct(gen_db, "coupled", 4, repeat=1, rule="width:0.9")
    assert one.modes[0].stops[0].n == n and one.modes[0].n_repeats == 1


def test_cli_json_shape(gen_db, capsys):
    assert (
        main(
            [
                "sequential",
                "--db",
                str(gen_db),
                "--run",
                "r1",
                "--model-a",
                "m1",
                "--model-b",
                "m2",
                "--seeds",
                "0..3",
                "--stop",
                "decided",
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    for mode in ("coupled", "independent"):
        m = out["modes"][mode]
        assert isinstance(m["full"], float) and len(m["stops"]) == 4
        assert [s["seed"] for s in m["stops"]] == [0, 1, 2, 3]
        for s in m["stops"]:
            assert set(s) >= {"seed", "n", "lower", "upper", "decided"}
            assert s["n"] is None or 1 <= s["n"] <= Q
            assert s["lower"] <= s["upper"]
    assert (
        main(
            [
                "sequential",
                "--db",
                str(gen_db),
                "--run",
                "r1",
                "--seed",
                "3",
                "--mode",
                "coupled",
                "--stop",
                "budget:10",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "coupled: median stop 10 of 80 questions" in text and "not valid for stopping" in text


def test_bad_input_one_line(gen_db, capsys):
    with pytest.raises(UserError, match="width:0"):
        sequential_replay(gen_db, "r1", stop="width:0")
    with pytest.raises(UserError, match="alpha"):
        sequential_replay(gen_db, "r1", alpha=1.5)
    with pytest.raises(UserError, match="2 or more models"):
        sequential_replay(gen_db, "r1", models=["m1"])
    with pytest.raises(UserError, match="unknown model 'zz'"):
        sequential_replay(gen_db, "r1", models=["m1", "zz"])
    with pytest.raises(UserError, match="--repeat 7"):
        sequential_replay(gen_db, "r1", repeat=7)
    with pytest.raises(UserError, match="budget:500 exceeds"):
        sequential_replay(gen_db, "r1", stop="budget:500")
    for extra, needle in (
        (["--stop", "width:0"], "width:0"),
        (["--alpha", "0"], "alpha"),
        (["--seeds", "5..1"], "--seeds"),
        (["--model-a", "m1"], "--model-b"),
    ):
        assert main(["sequential", "--db", str(gen_db), "--run", "r1", *extra]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err, err
    # and through a real process: one line on stderr, exit 2, no traceback
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "sequential",
            "--db",
            str(gen_db),
            "--run",
            "r1",
            "--mode",
            "coupled",
            "--stop",
            "budget:0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "budget:0" in r.stderr, (
        r.stderr
    )


def test_harness_import_single_mode(tmp_db):
    from tests.test_harness_import import LM_QA

    import_harness(tmp_db, [str(LM_QA)], name="h")
    res = sequential_replay(tmp_db, "h", seeds=[0, 1])
    assert [m.mode for m in res.modes] == ["independent"] and res.modes[0].n_questions == 8
    with pytest.raises(UserError, match="no coupled scores"):
        sequential_replay(tmp_db, "h", mode="coupled")


def test_paper_mmlu_import(tmp_path, tmp_db):
    rdir, qdir, golds = _write_layout(tmp_path, np.random.default_rng(0))
    import_paper_mmlu(tmp_db, rdir, qdir)
    res = sequential_replay(tmp_db, "paper-mmlu", seeds=[0], repeat=3, stop="budget:2")
    for m in res.modes:
        assert m.n_questions == len(golds) and m.stops[0].n == 2 and m.n_repeats == 1


def test_three_models_pairs_at_alpha_over_P(tmp_path):
    from tests.test_app import build_small_db

    db = build_small_db(tmp_path / "three.duckdb")
    res = sequential_replay(db, "run-small", seeds=[0, 1], rule="paper", stop="budget:25")
    assert res.pairs == ("m-base - m-int4", "m-base - m-int8", "m-int4 - m-int8")
    assert res.pair_alpha == pytest.approx(0.05 / 3)
    d = res.to_dict()["modes"]["coupled"]
    assert len(d["full"]) == 3 and all(len(s["lower"]) == 3 and s["n"] == 25 for s in d["stops"])
    for s in res.modes[0].stops:  # rank-sets from the CSs at the stop: each a valid [best, worst]
        assert all(1 <= lo <= hi <= 3 for lo, hi in s.ranksets)
