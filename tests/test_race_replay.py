"""``engine race --replay`` on imported runs: the coupled-generation paper's MMLU layout (three models,
both modes, 10 repeats: a stand-in written here, imported by ``import paper-mmlu``) and a harness
import (lm-eval logs of two models: refused in one line, a race needs three)."""

from __future__ import annotations

import json

import numpy as np

from engine.analysis.race import race_replay
from engine.cli import main
from engine.stats.racing import race_scores
from engine.stats.sequential import question_order
from engine.store.scores import per_question_scores
from tests.conftest import ROOT


def test_replay_of_a_paper_mmlu_import(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    from race_mmlu import smoke_db

    monkeypatch.setattr("tempfile.mkdtemp", lambda prefix="": str(tmp_path))
    db, run = smoke_db()
    assert (
        main(
            ["race", "--replay", "--run", run, "--db", db, "--seeds", "0..3", "--repeat", "0", "--json"]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["k"] == 3 and out["N"] == 200 and set(out["modes"]) == {"coupled", "independent"}
    df = per_question_scores(db, run)
    for mode, res in out["modes"].items():
        sub = df[(df["mode"] == mode) & (df["repeat"] == 0)]
        M = sub.pivot_table(index="prompt_id", columns="model", values="score").sort_index()
        M = M[sorted(M.columns)].to_numpy()
        for o in res["orders"]:
            race, _ = race_scores(M, question_order(200, o["seed"]), "best", 0.05)
            assert o["generations"] == int(race.answered.sum()) and o["fixed_generations"] == 600
            assert o["answer"] == [out["models"][i] for i in race.active]
    # the mean of the 10 repeats: every question costs 10 generations per model
    rep = race_replay(db, run, mode="coupled", seeds=(0,))
    assert rep.modes[0].repeats == 10 and rep.modes[0].orders[0].fixed_generations == 3 * 200 * 10
    assert rep.modes[0].orders[0].generations % 10 == 0


def test_a_harness_import_of_two_models_is_refused_in_one_line(tmp_path, capsys):
    from engine.tasks.harness_import import import_harness

    db = tmp_path / "h.duckdb"
    lm = ROOT / "tests" / "data" / "harness" / "lm_eval" / "tinyqa"
    import_harness(db, [str(lm / "dummy-a"), str(lm / "dummy-b")], name="h")
    capsys.readouterr()
    assert main(["race", "--replay", "--run", "h", "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "3 or more models" in err and "engine sequential" in err
    assert np.isfinite(per_question_scores(db, "h")["score"]).all()
