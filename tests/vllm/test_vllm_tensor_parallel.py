"""Tensor parallelism inside one engine: vLLM with ``tensor_parallel_size=2`` on CPU (two
rank processes, one core each, bound by engine.generation.vllm_backend.cpu_threads_bind).

The logits processor then runs in vLLM's rank processes, not in ours: the keys reach it and its
step records come back through the backend's TraceSink (only rank 0 writes). Checked here:

(a) the TP = 2 backend against the transformers loop, unit by unit (token ids, texts, trace
    alternatives and Gumbel values; probabilities to float tolerance; one process wrote the traces)
    on a tiny fp32 Llama; the same for TP = 1 with vLLM's engine core in its own process
    (VLLM_ENABLE_V1_MULTIPROCESSING=1), the other way the processor can end up outside our process;
(b) a whole run on a Ray replica whose engine is split over 2 ranks, killed twice (the replica, then
    one of its rank workers), equals the single-process transformers run of the same settings (rows
    and token traces), and records tensor_parallel = 2.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from vllm_testlib import ENGINE_KWARGS, needs_vllm

from engine import models, store
from engine.generation import GenConfig, as_units, generate_units, run_generation
from engine.sampling import noise
from engine.tasks import datasets
from engine.testing import tiny_lm

pytestmark = [pytest.mark.vllm, needs_vllm]

PROMPTS = {
    f"t{i}": "Hello there! " * (i + 1) + "What is " + str(i) * (i % 3 + 1) + "?" for i in range(6)
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    f = tmp_path_factory.mktemp("tiny-llama-tp")
    model, tok = tiny_lm(seed=0, hidden=128)  # 4 heads, 2 KV heads: split over 2 ranks
    model.save_pretrained(f)
    tok.save_pretrained(f)
    return f


@pytest.mark.parametrize("tp, engine_core_process", [(2, "0"), (1, "1")])
def test_out_of_process_processor_equals_the_transformers_loop(
    folder, monkeypatch, tp, engine_core_process
):
    from engine.generation.vllm_backend import VllmBackend

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", engine_core_process)
    lm = models.load_model(str(folder), device="cpu")
    cfg = GenConfig(temperature=1.0, top_k=8, max_new_tokens=12, batch_size=8, trace_top_k=4)
    base = [(p, r) for p in PROMPTS for r in range(2)]
    units, seeds = base + base, [77] * len(base) + [noise.independent_seed(77, lm.name)] * len(base)
    hf = generate_units(lm, PROMPTS, units, seeds, cfg)
    be = VllmBackend(
        str(folder),
        dtype="float32",
        max_model_len=512,
        engine_kwargs={**ENGINE_KWARGS, "tensor_parallel_size": tp},
    )
    sink = be.sink.path
    try:
        assert be.describe()["tensor_parallel"] == tp
        got = {}
        for chunk in be.generate(PROMPTS, as_units(units, seeds), cfg):
            got.update({(r.prompt_id, r.repeat, r.seed): r for r in chunk})
        writers = {p.name.split("-")[0] for p in sink.glob("*.trace")}
    finally:
        be.close()
    assert not sink.exists()  # the trace directory goes with the backend
    assert (
        len(writers) == 1
    )  # one process wrote (with TP = 2 both ranks run the processor: rank 0 writes)
    assert len(got) == len(units)
    for h in hf:
        v = got[(h.prompt_id, h.repeat, h.seed)]
        key = (h.prompt_id, h.repeat, h.seed)
        assert (v.token_ids, v.text, v.finish_reason) == (h.token_ids, h.text, h.finish_reason), key
        assert v.top_ids == h.top_ids and v.top_gumbels == h.top_gumbels, key
        np.testing.assert_allclose(v.probs, h.probs, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(np.array(v.top_probs), np.array(h.top_probs), rtol=1e-4, atol=1e-6)


def test_a_tensor_parallel_run_on_a_ray_replica_survives_a_killed_replica_and_a_killed_rank(
    folder, tmp_path, monkeypatch
):
    """One TP = 2 run on one Ray replica (one cluster, one transformers reference run), killed twice:
    after the first stored shard the replica itself is SIGKILLed (the process that owns the vLLM engine
    and its trace directory: Ray restarts it, the new engine, 2 ranks again, redoes the lost shards and
    removes the killed backend's orphaned trace directory); after the restarted replica's first shard
    one of its engine's rank workers is SIGKILLed (the engine dies, the backend says so, EngineDead,
    the replica ends its process and Ray restarts it). The run ends ``done`` with the rows of the
    single-process transformers run (24, none lost or duplicated), records tensor_parallel = 2 and as
    many trace rows; the last replica's trace directory goes when the executor closes its backend.
    (Three tests before, each with its own cluster and engines: the vLLM stage's slowest minutes.)"""
    pytest.importorskip("ray", reason="needs ray in the vLLM venv (scripts/install_vllm.sh installs it)")
    import os
    import signal
    import tempfile
    from pathlib import Path

    from engine.generation.distributed import RayConfig, RayExecutor
    from engine.generation.vllm_traces import SINK_PREFIX
    from engine.testing import descendants

    # eager engines in the replica too ($COUPLED_EVAL_VLLM_ARGS is forwarded to Ray replicas)
    monkeypatch.setenv("COUPLED_EVAL_VLLM_ARGS", json.dumps(ENGINE_KWARGS))
    ps = tuple(
        datasets.Prompt(prompt_id=f"k/{i}", user_prompt=f"Item {i}: " + "xy" * i + "?") for i in range(6)
    )
    ds = datasets.Dataset("kill", "prompts", "memory", ps, "Be brief.")
    db = tmp_path / "kill.duckdb"
    cfg = GenConfig(temperature=1.0, top_k=8, max_new_tokens=5, batch_size=4, trace_top_k=4)
    kw = dict(repeats=2, modes=["coupled", "independent"], seed=3, cfg=cfg, show_bar=False, device="cpu")
    hf = run_generation(db, [str(folder)], ds, backend="hf", **kw)
    ex = RayExecutor(RayConfig(workers=1, shard_units=4, num_cpus=2))
    killed: dict = {}

    def replica_pid() -> int:
        return next(iter(ex.worker_info.values()))["pid"]

    def kill_twice(results):
        if "replica" not in killed:  # 1. the replica, after the first stored shard
            killed.update(replica=replica_pid(), stored=store.table_counts(db)["generations"])
            os.kill(killed["replica"], signal.SIGKILL)
        elif "rank" not in killed and replica_pid() != killed["replica"]:  # 2. a rank of the new one
            pid = killed["restarted"] = replica_pid()
            ranks = [p for p in descendants(pid) if "Worker_TP" in open(f"/proc/{p}/comm").read()]
            assert len(ranks) == 2, ranks  # the replica's engine: 2 tensor-parallel rank processes
            killed.update(rank=ranks[0], stored_at_rank=store.table_counts(db)["generations"])
            os.kill(ranks[0], signal.SIGKILL)

    with ex:
        vl = run_generation(
            db,
            [str(folder)],
            ds,
            backend="vllm",
            tensor_parallel=2,
            executor=ex,
            _after_chunk=kill_twice,
            **kw,
        )
        last = replica_pid()
    # both kills happened mid-run: vLLM rows stored at each, after the first shard, before the last
    assert "rank" in killed, killed
    assert 0 < killed["stored"] - 24 < killed["stored_at_rank"] - 24 < 24, killed
    assert last not in (killed["replica"], killed["restarted"])  # the last shards: a third replica
    # the SIGKILLed replica's orphaned trace directory was removed by the next backend, and the last
    # replica's by the executor, which closed its backend before ending it
    for pid in (killed["replica"], last):
        assert not list(Path(tempfile.gettempdir()).glob(f"{SINK_PREFIX}{pid}-*")), pid
    runs = store.query_df(db, "SELECT run_id, config, status FROM runs").set_index("run_id")
    assert runs.loc[vl, "status"] == "done"
    c = json.loads(runs.loc[vl, "config"])
    assert c["tensor_parallel"] == 2 and c["backends"][str(folder)]["tensor_parallel"] == 2
    q = "SELECT mode, prompt_id, repeat, token_ids, text FROM generations WHERE run_id = ? ORDER BY 1, 2, 3"
    a, b = store.query_df(db, q, [hf]), store.query_df(db, q, [vl])
    assert len(a) == len(b) == 24  # nothing lost, nothing twice
    assert [list(x) for x in a["token_ids"]] == [list(x) for x in b["token_ids"]]
    assert list(a["text"]) == list(b["text"])
    # the token traces of the TP = 2 engine against the transformers loop's: chosen and alternative
    # ids and their Gumbel values exactly, probabilities to float tolerance
    q = (
        "SELECT mode, prompt_id, repeat, step, token_id, prob, top_ids, top_probs, top_gumbels "
        "FROM token_traces WHERE run_id = ? ORDER BY mode, prompt_id, repeat, step"
    )
    ta, tb = store.query_df(db, q, [hf]), store.query_df(db, q, [vl])
    assert len(ta) == len(tb) > 0
    for col in ("mode", "prompt_id", "repeat", "step", "token_id"):
        assert ta[col].tolist() == tb[col].tolist(), col
    for col in ("top_ids", "top_gumbels"):
        assert [list(x) for x in ta[col]] == [list(x) for x in tb[col]], col
    np.testing.assert_allclose(tb["prob"], ta["prob"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(
        np.array([list(x) for x in tb["top_probs"]]),
        np.array([list(x) for x in ta["top_probs"]]),
        rtol=1e-4,
        atol=1e-6,
    )
