"""plan_run -> RunPlan (checked, frozen, writes nothing) then drive(plan, executor); the units are
named Units end to end; the generation side's SQL lives in engine/store (generations, runs)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from engine import generation as G
from engine import models, store
from engine.generation import run as R
from engine.generation.types import Unit
from engine.sampling import noise
from engine.store import generations as sg
from engine.store import runs as sr
from engine.tasks import datasets
from engine.testing import tiny_lm

ROOT = Path(__file__).resolve().parent.parent
CFG = G.GenConfig(temperature=1.0, max_new_tokens=3, batch_size=4, trace_top_k=2)


def _dataset() -> datasets.Dataset:
    ps = tuple(datasets.Prompt(prompt_id=f"q/{i}", user_prompt=f"Say {i}") for i in range(3))
    return datasets.Dataset("plan-toy", "prompts", "memory", ps, "Be brief.")


@pytest.fixture(scope="module")
def lm():
    return models.from_objects("tiny-a", *tiny_lm(0))


def test_plan_writes_nothing_and_drive_gives_the_run_generation_rows(lm, tmp_path):
    db, ref = tmp_path / "p.duckdb", tmp_path / "ref.duckdb"
    plan = R.plan_run(db, [lm], _dataset(), 2, ["coupled", "independent"], seed=7, cfg=CFG)
    assert not db.exists()  # planning touches no database
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 8  # type: ignore[misc]
    assert plan.n_units == 1 * 3 * 2 * 2 and plan.key_mode == "token_id"
    (task,) = plan.tasks(set())
    ind = noise.independent_seed(7, "tiny-a")
    assert task.units == tuple(
        Unit(f"q/{i}", r, sd) for sd in (7, ind) for i in range(3) for r in range(2)
    )
    assert all(isinstance(u, Unit) for u in task.units)
    # what is stored is left out; a model with nothing left gets no task
    assert len(plan.tasks({("tiny-a", "coupled", "q/0", 0)})[0].units) == 11
    assert (
        plan.tasks(
            {("tiny-a", md, f"q/{i}", r) for md in plan.modes for i in range(3) for r in range(2)}
        )
        == []
    )
    run_id = R.drive(plan, show_bar=False)
    assert (
        run_id
        == plan.run_id
        == G.run_generation(
            ref, [lm], _dataset(), 2, ["coupled", "independent"], seed=7, cfg=CFG, show_bar=False
        )
    )
    q = "SELECT * EXCLUDE (created_at) FROM generations ORDER BY ALL"
    assert store.query_df(db, q).equals(store.query_df(ref, q))
    with store.reader(db) as con:
        assert sg.count_generations(con, run_id) == 12 and len(sg.stored_units(con, run_id)) == 12
        assert sr.stored_config(con, run_id)["backends"]["tiny-a"]["backend"] == "hf"
    rec = sr.run_record(db, run_id)
    assert (rec.status, rec.n_units, rec.config["seed"]) == ("done", 12, 7)
    counts = sg.per_model_counts(db, run_id)
    assert [(c.model, c.mode, c.units) for c in counts] == [
        ("tiny-a", "coupled", 6),
        ("tiny-a", "independent", 6),
    ]


def test_store_generation_rows_round_trip(tmp_path):
    db = tmp_path / "s.duckdb"
    with store.writer(db) as con:
        store.init_schema(con)
    gens = [
        sg.GenerationRow("run-x", "m", "p", r, "coupled", 5, f"t{r}", [1, 2], "length", 2)
        for r in range(2)
    ]
    traces = [
        sg.TraceRow("run-x", "m", "p", 0, "coupled", s, 1 + s, f"w{s}", 0.5, [1, 3], [0.5, 0.25], None)
        for s in range(2)
    ]
    sg.write_chunk(db, gens, traces)
    sg.write_chunk(db, gens[:1], [])  # a chunk written twice (a retried shard) changes nothing
    with store.reader(db) as con:
        assert sg.stored_units(con, "run-x") == {("m", "coupled", "p", 0), ("m", "coupled", "p", 1)}
        assert sg.count_generations(con, "run-x") == 2 and sg.count_generations(con, "other") == 0
    t = store.query_df(
        db, "SELECT step, token_id, token_text, top_ids, top_gumbels FROM token_traces ORDER BY step"
    )
    assert t["token_text"].tolist() == ["w0", "w1"] and list(t["top_ids"][0]) == [1, 3]
    assert t["top_gumbels"].isna().all()
    with store.transaction(db) as con:
        sr.create_run(con, "run-x", "ds", {"models": ["m"]}, "v", "token_id", ["w"], 3)
    assert sr.finish_run(db, "run-x", "cancelled", 3) == "cancelled"  # 2 of 3 stored
    assert sr.finish_run(db, "run-x", "cancelled", 2) == "done"  # all stored: done whatever stopped it
    assert sg.per_model_counts(db, "run-x") == [sg.ModelModeCount("m", "coupled", 2, 4, 1.0)]


def test_no_sql_outside_the_store_on_the_generation_side():
    for f in (
        "engine/generation/run.py",
        "engine/generation/distributed.py",
        "engine/commands/generate.py",
    ):
        text = (ROOT / f).read_text()
        assert not re.findall(r"\b(SELECT|INSERT|UPDATE|DELETE)\b", text), f


def test_overview_lists_a_run_that_died_before_its_first_chunk(tmp_path):
    """A run row with no generation yet (its driver was killed before the first chunk) is listed with the
    models and modes of its config, and does not break Home (DuckDB gives NA, not a list, for them)."""
    from engine.analysis.overview import runs

    db = tmp_path / "dead.duckdb"
    with store.transaction(db) as con:
        sr.create_run(
            con, "run-dead", "ds", {"models": ["a", "b"], "modes": ["coupled"]}, "v", "token_id", [], 4
        )
    df = runs(db)
    row = df[df["run_id"] == "run-dead"].iloc[0]
    assert row["models"] == ["a", "b"] and row["modes"] == ["coupled"] and row["n_generations"] == 0
