"""``engine race``: a live race (engine/commands/_race.py) with tiny random models, its kill/resume,
its refusals (one line each, nothing written), and ``--replay`` on a stored run.

Model "b" is "a" with its weights perturbed a little (coupled, it writes a's text on about 80% of
the questions); "c" is another tiny network. The gold answer of every question is what "a" writes
(found by a first, plain run of the same settings: keyed noise does not depend on the batch
layout), so under the exact rule a is always right, b mostly and c almost never: c must leave
first, then b, and the race stops on its own with a.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from engine import generation as G
from engine import models, store
from engine.cli import main
from engine.commands._race import run_race
from engine.errors import UserError
from engine.generation.rounds import KeptBackends
from engine.generation.run import local_executor
from engine.stats.racing import race_scores
from engine.stats.sequential import question_order
from engine.tasks import datasets
from engine.testing import tiny_lm

CFG = G.GenConfig(temperature=1.0, max_new_tokens=4, batch_size=16, trace_top_k=0, record_traces=False)
N, SEED = 60, 3


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _perturbed(scale: float = 0.1):
    import torch

    m, tok = tiny_lm(0)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g) * p.abs().mean())
    return m, tok


def _models():
    return [
        models.from_objects("a", *tiny_lm(0)),
        models.from_objects("b", *_perturbed()),
        models.from_objects("c", *tiny_lm(1)),
    ]


def _prompts(golds=None, kind="multiple_choice"):
    return datasets.Dataset(
        "race-toy",
        kind,
        "memory",
        tuple(
            datasets.Prompt(
                prompt_id=f"q/{i:02d}",
                user_prompt=f"Say something about {i}.",
                gold=None if golds is None else golds[f"q/{i:02d}"],
            )
            for i in range(N)
        ),
        "Answer briefly.",
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """The toy dataset whose gold answers are model a's coupled texts."""
    db = tmp_path_factory.mktemp("gold") / "gold.duckdb"
    run = G.run_generation(db, _models()[:1], _prompts(), 1, ["coupled"], SEED, CFG, show_bar=False)
    g = store.query_df(db, "SELECT prompt_id, text FROM generations WHERE run_id = ?", [run])
    golds = {
        p: (t if isinstance(t, str) and t.strip() else "(none)")
        for p, t in zip(g["prompt_id"], g["text"])
    }
    return _prompts(golds)


def _race(db, ds, **kw):
    kw.setdefault("goal", "best")
    kw.setdefault("score_rule", "exact")
    kw.setdefault("round_size", 8)
    modes = kw.pop("modes", ["coupled"])
    return run_race(db, _models(), ds, 1, modes, SEED, CFG, show_bar=False, **kw)


def _gens(db):
    return store.query_df(
        db, "SELECT model, prompt_id, repeat, mode, text FROM generations ORDER BY ALL"
    )


REFERENCE_LOADS: list[int] = []  # the reference race's model loads (KeptBackends.loads)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, dataset):
    db = tmp_path_factory.mktemp("race") / "ref.duckdb"
    with KeptBackends() as kept:  # what run_race uses when given no executor, here to count its loads
        res = _race(db, dataset, executor=kept)
    REFERENCE_LOADS.append(kept.loads)
    return db, res


def test_the_race_stops_on_its_own_with_the_weak_model_out(reference):
    db, res = reference
    st = res.state.modes[0]
    assert st.mode == "coupled" and st.reason == "decided"
    assert st.answer == ("a",)
    assert [(lv.model, lv.status) for lv in st.leaves] == [("c", "eliminated"), ("b", "eliminated")]
    answered = {m.model: m.answered for m in st.models}
    assert answered["c"] < answered["b"] == answered["a"] == st.t < N
    # only the active models generated: the stored generations are what each answered
    g = _gens(db)
    assert g.groupby("model").size().to_dict() == answered
    assert st.generations == len(g) and st.saved == 3 * st.t - len(g) > 0
    # the stored race: order, goal, alpha; the run is done with n_units = what it planned
    cfg = json.loads(store.query_df(db, "SELECT CAST(config AS VARCHAR) FROM runs").iloc[0, 0])
    pids = [f"q/{i:02d}" for i in range(N)]
    assert cfg["race"]["order"] == [pids[i] for i in question_order(N, SEED)]
    assert cfg["race"]["goal"] == "best" and cfg["race"]["alpha"] == 0.05
    run = store.query_df(db, "SELECT status, n_units FROM runs").iloc[0]
    assert run["status"] == "done" and run["n_units"] == len(g)
    # an independent route: the stored scores in the stored order through the stats core
    sc = store.query_df(db, "SELECT model, prompt_id, score FROM scores")
    w = sc.pivot_table(index="prompt_id", columns="model", values="score").reindex(cfg["race"]["order"])
    M = w[["a", "b", "c"]].to_numpy(copy=True)
    M[np.isnan(M)] = 0.0  # c's unanswered questions: ignored once it has left
    race, rounds = race_scores(M, np.arange(N), "best", 0.05, round_size=8)
    assert (
        race.t == st.t and rounds == res.rounds and list(race.answered) == [answered[m] for m in "abc"]
    )


def test_models_stay_loaded_between_rounds_and_the_rows_are_those_of_a_reload_each_round(
    tmp_path, dataset, reference
):
    """The race's executor (engine.generation.rounds.KeptBackends) opens each model once for the whole
    race; the plain executor, which opens every racing model again every round, stores the same rows;
    so does KeptBackends on a device with no room to keep anything (each model freed after its round)."""
    ref_db, ref = reference
    per_round: list[int] = []

    def plain(tasks, spec):  # the single-process executor, counting the models it opens
        tasks = list(tasks)
        per_round.append(len(tasks))
        yield from local_executor(tasks, spec)

    _race(tmp_path / "plain.duckdb", dataset, executor=plain)
    with KeptBackends(headroom=float("inf")) as no_room:
        _race(tmp_path / "no_room.duckdb", dataset, executor=no_room)
        assert not no_room._kept
    assert REFERENCE_LOADS == [3] and ref.rounds >= 3
    assert len(per_round) == ref.rounds and no_room.loads == sum(per_round) > 3
    ref_rows = _gens(ref_db)
    for name in ("plain", "no_room"):
        pd.testing.assert_frame_equal(_gens(tmp_path / f"{name}.duckdb"), ref_rows)


def test_a_kept_model_is_weighed_by_its_weights_against_its_own_device():
    """What KeptBackends compares: the model's parameter bytes (float32 here: 4 a number) against the
    free memory of the device the model is on (this machine: MemAvailable, at most its RAM)."""
    import os

    from engine.generation.hf import HFBackend
    from engine.generation.rounds import _free_bytes, _weight_bytes

    lm = models.from_objects("a", *tiny_lm(0))
    b = HFBackend(lm)
    assert _weight_bytes(b) == 4 * sum(p.numel() for p in lm.model.parameters()) > 0
    assert _weight_bytes(object()) == 0  # nothing to weigh (e.g. a vLLM backend): never kept
    ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert str(b.device) == "cpu" and 0 < _free_bytes(b.device) <= ram


def test_a_killed_race_resumes_to_the_same_race(tmp_path, dataset, reference):
    ref_db, ref = reference
    db = tmp_path / "killed.duckdb"
    seen = []

    class Boom(RuntimeError):
        pass

    def die_in_round_2(chunk):
        seen.append(chunk)
        if sum(len(c) for c in seen) > 8 * 3 + 5:  # past round 1, inside round 2
            raise Boom("killed")

    with pytest.raises(Boom):
        _race(db, dataset, _after_chunk=die_in_round_2)
    assert 0 < len(_gens(db)) < len(_gens(ref_db))
    again = _race(db, dataset)
    assert again.to_dict() == ref.to_dict()
    assert _gens(db).equals(_gens(ref_db))
    assert _race(db, dataset).to_dict() == ref.to_dict()  # a finished race, rerun: the same, no work


def test_a_race_stopped_by_its_budget_continues_with_a_new_one(tmp_path, dataset, reference):
    _, ref = reference
    db = tmp_path / "budget.duckdb"
    first = _race(db, dataset, budget=16)
    assert first.state.modes[0].reason == "budget" and first.state.modes[0].t == 16
    again = _race(db, dataset)  # no budget now: the race goes on to its own stop
    assert again.to_dict() == ref.to_dict()


def test_both_modes_race_on_their_own(tmp_path, dataset):
    res = _race(
        tmp_path / "both.duckdb", dataset, modes=["coupled", "independent"], goal="best", budget=40
    )
    d = res.to_dict()
    assert set(d["modes"]) == {"coupled", "independent"} and d["k"] == 3
    coupled = d["modes"]["coupled"]
    assert coupled["reason"] == "budget" and set(coupled["answer"]) == {"a", "b"}
    assert [lv["model"] for lv in coupled["leaves"]] == ["c"]


# ----------------------------------------------------------------------------- refusals


def test_refusals_nothing_written(tmp_path, dataset, reference, capsys):
    db = tmp_path / "refused.duckdb"
    with pytest.raises(UserError, match=r"3 or more models.*--until"):
        run_race(db, _models()[:2], dataset, 1, ["coupled"], SEED, CFG, goal="best")
    with pytest.raises(UserError, match="no automatic scoring rule.*a race needs"):
        run_race(db, _models(), _prompts(kind="prompts"), 1, ["coupled"], SEED, CFG, goal="best")
    with pytest.raises(UserError, match="top:3 with 3 models"):
        _race(db, dataset, goal="top:3")
    with pytest.raises(UserError, match="below one round"):
        _race(db, dataset, budget=5)
    assert not db.exists()
    ref_db, _ = reference
    before = _gens(ref_db)
    with pytest.raises(UserError, match="exists with another goal"):
        _race(ref_db, dataset, goal="top:2")
    with pytest.raises(UserError, match="exists with another alpha"):
        _race(ref_db, dataset, alpha=0.1)
    with pytest.raises(UserError, match="exists with another round_size"):
        _race(ref_db, dataset, round_size=16)
    assert _gens(ref_db).equals(before)
    for argv, needle in (
        (["--models", "x", "y", "--dataset", "demo"], "--until"),
        (["--models", "x", "y", "z", "--dataset", "demo", "--goal", "top:3"], "top:3"),
        (["--models", "x", "y", "z", "--dataset", "demo", "--budget", "3"], "below one round"),
        (["--models", "x", "y", "z", "--dataset", "demo", "--goal", "fastest"], "unknown goal"),
        (["--replay"], "--run"),
        (["--models", "x", "y", "z", "--dataset", "demo", "--run", "r"], "only apply with --replay"),
    ):
        assert main(["race", "--db", str(db), *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert not db.exists()


# ----------------------------------------------------------------------------- replay


def test_replay_of_a_stored_run(tmp_path, dataset, capsys):
    """A plain run of the three models, scored; race --replay gives the issue's JSON shape and what
    the stats core gives on the same scores and orders."""
    from engine.tasks.scoring import score_run

    db = tmp_path / "full.duckdb"
    run = G.run_generation(
        db, _models(), dataset, 1, ["coupled", "independent"], SEED, CFG, show_bar=False
    )
    score_run(db, run, "exact")
    assert main(["race", "--replay", "--run", run, "--db", str(db), "--seeds", "0..2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["k"] == 3 and out["N"] == N and set(out["modes"]) == {"coupled", "independent"}
    orders = out["modes"]["coupled"]["orders"]
    assert [o["seed"] for o in orders] == [0, 1, 2]
    sc = store.query_df(db, "SELECT model, prompt_id, score FROM scores WHERE mode = 'coupled'")
    M = sc.pivot_table(index="prompt_id", columns="model", values="score").sort_index()[["a", "b", "c"]]
    for o in orders:
        assert {"seed", "answer", "generations", "joint_stop_generations", "fixed_generations"} <= set(o)
        race, _ = race_scores(M.to_numpy(), question_order(N, o["seed"]), "best", 0.05)
        joint, _ = race_scores(M.to_numpy(), question_order(N, o["seed"]), "best", 0.05, eliminate=False)
        assert o["answer"] == [["a", "b", "c"][i] for i in race.active]
        assert o["generations"] == int(race.answered.sum()) and o["fixed_generations"] == 3 * N
        assert o["joint_stop_generations"] == 3 * (joint.t if joint.reason == "decided" else N)
    assert (
        main(["race", "--replay", "--run", run, "--db", str(db), "--seeds", "0", "--models", "a,b"]) == 2
    )


def test_a_race_on_ray_workers_is_the_single_process_race(tmp_path, dataset):
    """engine race with Ray: each round's units are sharded over 2 replicas (models by path); the
    driver scores and decides, so the race and the stored rows equal the single-process race's."""
    ray = pytest.importorskip("ray")
    import logging
    import os

    from engine.generation.distributed import RayConfig, RayExecutor

    paths = []
    for name, (m, tok) in zip("abc", (tiny_lm(0), _perturbed(), tiny_lm(1))):
        m.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
        paths.append(str(tmp_path / name))
    golds = {p.prompt_id: p.gold for p in dataset.prompts}
    ds = _prompts(golds)

    def race(db, executor=None):
        return run_race(
            db,
            paths,
            ds,
            1,
            ["coupled"],
            SEED,
            CFG,
            goal="best",
            score_rule="exact",
            round_size=8,
            budget=24,
            show_bar=False,
            device="cpu",
            executor=executor,
        )

    local = race(tmp_path / "local.duckdb")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=128 * 2**20,
    )
    try:
        with RayExecutor(RayConfig(workers=2, shard_units=4)) as ex:
            dist = race(tmp_path / "ray.duckdb", ex)
    finally:
        ray.shutdown()
    assert dist.to_dict() == local.to_dict() and local.state.modes[0].leaves  # someone left
    assert _gens(tmp_path / "ray.duckdb").equals(_gens(tmp_path / "local.duckdb"))
