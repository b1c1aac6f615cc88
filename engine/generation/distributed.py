"""Scale-out on Ray: one run's units sharded over N engine replicas (Ray actors); the driver writes.

Coupled generation is made for this: a unit's noise is keyed by (seed, prompt, repeat, step,
token), never by batch layout, worker or time, so units can run anywhere, in any order.

    driver (run_generation)                      Ray cluster (local: --workers N; or --ray-address)
    1. plan     units -> shards                  replica w0: backend(model) -> generate(shard) -> results
    2. submit   <= queue_depth shards/replica    replica w1: ...
    3. collect  ray.wait: first finished shard
    4. write    one DuckDB transaction/shard     (replicas never open the database)

* Shards (:func:`plan_shards`) are contiguous groups of one model's units in dataset order; a
  prompt's units (every repeat, both modes) stay in one shard so that they share one prefill.
* Each replica loads its own copy of a model through the one backend factory
  (:func:`engine.generation.run.open_backend`, the backend named in the RunSpec: our transformers
  loop, or vLLM) and keeps one model in memory; ``gpus_per_worker`` GPUs each. A model too big
  for one GPU is split inside its replica by vLLM's tensor parallelism (the run's
  ``tensor_parallel``, default GPUs per replica); vLLM's rank workers run on the replica's machine.
* Failures: a replica that dies is restarted by Ray and its in-flight shards retried
  (``max_restarts`` / ``max_task_retries``); a replica that is gone for good is replaced and its
  shards go back to the queue. A shard's results are yielded once (a set of done shards), so
  progress is never counted twice; the store ignores a row written twice anyway.
  A replica whose backend's engine died (:class:`~engine.generation.types.EngineDead`: one of
  vLLM's tensor-parallel rank workers was killed) ends its own process, so the same path applies.
* Replicas live as long as the executor while the settings stay the same (the rounds of
  ``--until`` or a race are calls with the same RunSpec): a round reuses the replicas of the round
  before, with their imports and the model each holds, instead of starting and loading again;
  other settings, an error or :meth:`RayExecutor.close` end them.
* Resume: the run id does not depend on the executor or the number of workers; a rerun after a
  killed driver, worker or cluster generates only what is not stored.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import engine.generation.ray_cluster as ray_cluster
from engine.errors import UserError
from engine.generation.types import Backend, EngineDead, ExecChunk, ModelTask, RunSpec, Unit

PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# environment a replica on another machine needs to load models like the driver would
_FORWARD_ENV = ("HF_", "TRANSFORMERS_", "COUPLED_EVAL_", "VLLM_")
EXIT_ENGINE_DEAD = 75  # a replica's exit status when its backend's engine died (Ray restarts it)


@dataclass(frozen=True)
class RayConfig:
    """How a run is spread over Ray (none of this enters the run id: results do not depend on it)."""

    workers: int = 1  # engine replicas (Ray actors)
    address: str | None = None  # None: start a local cluster; "auto" / "host:port" / "ray://host:port"
    shard_units: int = 256  # units per shard (a prompt's units are never split)
    cpus_per_worker: float | None = (
        None  # None: local cluster -> its CPUs / workers; existing cluster -> 1
    )
    gpus_per_worker: float | None = (
        None  # None: the run's tensor_parallel when the cluster has GPUs, else 0
    )
    threads_per_worker: int | None = None  # torch intra-op threads per replica (None: its CPUs)
    queue_depth: int = 2  # shards in flight per replica (one running, one waiting)
    max_restarts: int = 3  # Ray restarts of a dead replica (then it is replaced, as often)
    max_task_retries: int = 3  # Ray retries of a shard whose replica died
    num_cpus: int | None = None  # local cluster only: CPUs it offers (None: all)
    object_store_mb: int = 256  # local cluster only: shard results are small

    def __post_init__(self) -> None:
        for name in ("workers", "shard_units", "queue_depth"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise UserError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("cpus_per_worker", "gpus_per_worker"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
                raise UserError(f"{name} must be a number >= 0, got {v!r}")
        if self.threads_per_worker is not None and (
            not isinstance(self.threads_per_worker, int) or self.threads_per_worker < 1
        ):
            raise UserError(
                f"threads_per_worker must be an integer >= 1, got {self.threads_per_worker!r}"
            )
        if self.address is not None and not str(self.address).strip():
            raise UserError("ray address is empty; pass 'auto', 'host:port' or 'ray://host:port'")


@dataclass(frozen=True)
class Shard:
    """A contiguous group of one model's units; generated by one replica, written in one transaction."""

    shard_id: str  # "<model>#<k>": k-th shard of that model in this plan
    name: str  # the run's model name
    model: str  # what the replica loads (registry name / path)
    units: tuple[Unit, ...]


def plan_shards(tasks: Sequence[ModelTask], shard_units: int) -> list[Shard]:
    """Split each task's units into shards of <= ``shard_units`` units (more only when one prompt
    alone has more), keeping a prompt's units (all repeats, both modes) together, in task order.

    Deterministic: the same tasks give the same shards (a resumed run has fewer units, so its
    shards are those of what is left).
    """
    shards: list[Shard] = []
    for t in tasks:
        by_prompt: dict[str, list[Unit]] = {}
        for u in t.units:  # prompt-major, each prompt's units in their given (mode-major) order
            by_prompt.setdefault(u.prompt_id, []).append(u)
        cur: list[Unit] = []
        for us in by_prompt.values():
            if cur and len(cur) + len(us) > shard_units:
                shards.append(Shard(f"{t.name}#{len(shards)}", t.name, t.model, tuple(cur)))
                cur = []
            cur.extend(us)
        if cur:
            shards.append(Shard(f"{t.name}#{len(shards)}", t.name, t.model, tuple(cur)))
    return shards


# --------------------------------------------------------------------------- replicas (Ray actors)


class _Pieces:
    """Stands in for a tokenizer on the driver: the token texts a replica sent with its shard."""

    def __init__(self, pieces: dict[int, str]):
        self.pieces = pieces

    def convert_ids_to_tokens(self, ids):
        return [self.pieces[int(i)] for i in ids]


class Replica:
    """One engine replica (a Ray actor): one model in memory at a time, shards run in order."""

    def __init__(self, worker: str, spec: RunSpec, device: str | None, threads: int | None):
        import torch

        if threads:  # Ray sets OMP_NUM_THREADS to the actor's CPUs; torch's own pool is set here
            torch.set_num_threads(threads)
        self.worker, self.spec = worker, spec
        self.device = device
        self.name: str | None = None
        self.backend: Backend | None = None
        self.keys: Any = None

    def _load(self, model: str) -> Backend:
        from engine.generation.run import free_memory, open_backend, token_keys

        if self.name == model and self.backend is not None:
            return self.backend
        if self.backend is not None:  # one model at a time: free the previous one first
            self.backend.close()
        self.name, self.backend, self.keys = None, None, None
        free_memory()
        backend = open_backend(
            model,
            device=self.device,
            backend=self.spec.backend,
            tensor_parallel=self.spec.tensor_parallel,
            dtype=self.spec.dtype,
        )
        self.keys = token_keys(backend, self.spec.key_mode)
        self.name, self.backend = model, backend
        return backend

    def run(self, shard: Shard, prompts: dict[str, str]) -> dict:
        """Generate one shard (``prompts``: its prompts' texts) -> results, token texts, model row."""
        t0 = time.perf_counter()
        b, s = self._load(shard.model), self.spec
        try:
            results = [
                r
                for chunk in b.generate(prompts, shard.units, s.cfg, self.keys, s.system_prompt)
                for r in chunk
            ]
        except EngineDead as exc:
            # a dead engine (one of vLLM's rank workers died) makes this replica useless: end the
            # process, so that Ray treats it as a dead worker (restart it, retry the shard)
            print(
                f"replica {self.worker}: {exc}; exiting so that Ray restarts it",
                file=sys.stderr,
                flush=True,
            )
            os._exit(EXIT_ENGINE_DEAD)
        pieces = {}
        if self.spec.cfg.record_traces:
            ids = sorted({t for r in results for t in r.token_ids})
            pieces = dict(zip(ids, b.tokenizer.convert_ids_to_tokens(ids)))
        import ray

        return {
            "shard_id": shard.shard_id,
            "results": results,
            "pieces": pieces,
            "record": b.record(),
            "describe": b.describe(),
            "worker": self.worker,
            "pid": os.getpid(),
            "node": ray.util.get_node_ip_address(),
            "seconds": time.perf_counter() - t0,
        }

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        """Free the backend (a vLLM engine: its rank workers and its trace directory)."""
        if self.backend is not None:
            self.backend.close()
        self.name, self.backend, self.keys = None, None, None


# --------------------------------------------------------------------------- the executor (driver side)


def _import_ray():
    try:
        import ray
    except ImportError as exc:
        raise UserError(
            "--workers / --ray-address need the 'ray' package, which is not installed "
            f"({exc}); install it with: pip install ray"
        ) from exc
    return ray


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail fast with one line when nothing listens at host:port (ray.init would wait for minutes)."""
    if address in ("auto", "local"):
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(
            f"bad Ray address {address!r}; allowed: 'auto', 'host:port' or 'ray://host:port'"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UserError(
            f"cannot reach the Ray cluster at {address!r} ({exc.strerror or exc}); start one with "
            "`ray start --head`, or omit --ray-address to start a local cluster"
        ) from exc


class RayExecutor:
    """Generates a run's units on Ray replicas; an executor for engine.generation.run.run_generation.

    Use as a context manager (the local cluster it starts is shut down on exit)::

        with RayExecutor(RayConfig(workers=2)) as ex:
            run_generation(db, models, dataset, ..., executor=ex)

    ``worker_info`` maps each replica name to its pid and node (from the shards it returned).
    """

    _SYSTEM_ERRORS: tuple = ()

    def __init__(self, cfg: RayConfig = RayConfig()):
        self.cfg = cfg
        self.ray: Any = None  # the ray module once connected
        self._owns_cluster = False
        self.cpus_per_worker: float | None = None
        self.gpus_per_worker: float | None = None
        self.threads: int | None = None
        self.tensor_parallel = 1  # the run's (prepare)
        self.worker_info: dict[str, dict] = {}
        self.actors: list = []  # the replicas, kept between calls with the same settings
        self._actors_for: tuple | None = None  # (RunSpec without prompts, device) they were made for
        self.replicas_started = 0  # actors created, replacements included (what the tests count)
        self._record: Path | None = None  # the local cluster's record and watchdog (ray_cluster)
        self._watchdog: subprocess.Popen | None = None
        self._stdout: contextlib.AbstractContextManager | None = (
            None  # sys.stdout -> sys.stderr while connected
        )

    # ---- 0. connect and validate (before run_generation writes anything)
    def prepare(self, models: Sequence = (), backend: str = "hf", tensor_parallel: int = 1) -> None:
        cfg = self.cfg
        mem = [getattr(m, "name", repr(m)) for m in models if not isinstance(m, (str, os.PathLike))]
        if mem:
            raise UserError(
                f"a distributed run loads models by name or path on each worker; got in-memory "
                f"model(s) {mem}: save them with save_pretrained and pass the folder"
            )
        if tensor_parallel != 1 and backend == "hf":
            raise UserError(
                f"tensor_parallel={tensor_parallel} needs a backend with tensor parallelism "
                "(vLLM); the transformers backend allows 1"
            )
        self.tensor_parallel = tensor_parallel
        if self.ray is not None:
            return
        ray = _import_ray()
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no network calls home
        ray_cluster.reap_dead()  # what a killed driver's local cluster left (its watchdog died too)
        if cfg.address is not None:
            _check_reachable(cfg.address)
        if not ray.is_initialized():  # else: this process's session (e.g. a test's) is used as it is
            quiet = dict(
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
                configure_logging=True,
            )
            if cfg.address is not None:
                try:
                    ray.init(address=cfg.address, **quiet)
                except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ... by case
                    raise UserError(
                        f"cannot connect to the Ray cluster at {cfg.address!r}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                    ) from exc
            else:
                ray.init(
                    address="local",
                    num_cpus=cfg.num_cpus,
                    object_store_memory=cfg.object_store_mb * 2**20,
                    **quiet,
                )
                # its agents outlive a SIGKILLed driver: record the cluster, a watchdog reaps it
                self._record = ray_cluster.record_cluster()
                self._watchdog = ray_cluster.start_watchdog(self._record)
            self._owns_cluster = True
        self.ray = ray
        # Ray's driver prints raylet messages (e.g. a retried task's "worker died") on sys.stdout from a
        # thread: stdout is for our own output (--json), so they go to stderr while Ray is connected
        self._stdout = contextlib.redirect_stdout(sys.stderr)
        self._stdout.__enter__()
        try:
            self._check_resources()
        except UserError:
            self.close()
            raise
        from ray import exceptions as rex

        self._SYSTEM_ERRORS = tuple(
            getattr(rex, n)
            for n in ("RayActorError", "WorkerCrashedError", "ObjectLostError", "NodeDiedError")
            if hasattr(rex, n)
        )

    def _check_resources(self) -> None:
        cfg, res = self.cfg, self.ray.cluster_resources()
        cpus, gpus = float(res.get("CPU", 0)), float(res.get("GPU", 0))
        gpw = (
            cfg.gpus_per_worker
            if cfg.gpus_per_worker is not None
            else (self.tensor_parallel if gpus else 0)
        )
        if gpus and gpw < self.tensor_parallel:
            raise UserError(
                f"tensor_parallel={self.tensor_parallel} splits each model over {self.tensor_parallel} "
                f"GPUs but --gpus-per-worker is {gpw:g}; allowed: >= {self.tensor_parallel}"
            )
        cpw = (
            cfg.cpus_per_worker
            if cfg.cpus_per_worker is not None
            else (max(1, int(cpus // cfg.workers)) if self._owns_cluster and not gpw else 1)
        )
        where = (
            "the local Ray cluster" if self._owns_cluster and cfg.address is None else "the Ray cluster"
        )
        if cfg.workers * cpw > cpus:
            raise UserError(
                f"--workers {cfg.workers} needs {cfg.workers * cpw:g} CPUs ({cpw:g} per worker) but "
                f"{where} has {cpus:g}; allowed: --workers <= {int(cpus // cpw) if cpw else 0}"
            )
        if cfg.workers * gpw > gpus:
            raise UserError(
                f"--workers {cfg.workers} needs {cfg.workers * gpw:g} GPUs ({gpw:g} per worker) but "
                f"{where} has {gpus:g}; allowed: --workers <= {int(gpus // gpw) if gpw else 0}"
            )
        self.cpus_per_worker, self.gpus_per_worker = cpw, gpw
        self.threads = cfg.threads_per_worker or max(1, int(cpw))

    def describe(self) -> dict[str, Any]:
        return {
            "executor": "ray",
            "workers": self.cfg.workers,
            "shard_units": self.cfg.shard_units,
            "cpus_per_worker": self.cpus_per_worker,
            "gpus_per_worker": self.gpus_per_worker,
            "threads_per_worker": self.threads,
            "tensor_parallel": self.tensor_parallel,
        }

    def _new_actor(self, i: int, spec: RunSpec, device):
        env = {k: v for k, v in os.environ.items() if k.startswith(_FORWARD_ENV)}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH")) if p)
        self.replicas_started += 1
        actor = self.ray.remote(Replica).options(
            num_cpus=self.cpus_per_worker,
            num_gpus=self.gpus_per_worker,
            max_restarts=self.cfg.max_restarts,
            max_task_retries=self.cfg.max_task_retries,
            runtime_env={"env_vars": env},
        )
        return actor.remote(f"w{i}", spec, device, self.threads)

    # ---- 1-4. plan, submit, collect, hand to the driver
    def __call__(self, tasks: Sequence[ModelTask], spec: RunSpec) -> Iterator[ExecChunk]:
        if self.ray is None:
            self.prepare([t.model for t in tasks], spec.backend, spec.tensor_parallel)
        ray, cfg = self.ray, self.cfg
        shards = plan_shards(tasks, cfg.shard_units)
        if not shards:
            return
        # Ray gives each replica its own GPUs (CUDA_VISIBLE_DEVICES): "cuda:N" means "cuda" there
        device = "cuda" if spec.device and str(spec.device).startswith("cuda") else spec.device
        # replicas get the settings once (small); each shard carries the texts of its own prompts
        spec_small = replace(spec, prompts={})
        n = min(cfg.workers, len(shards))
        if self._actors_for != (spec_small, device):  # other settings: fresh replicas
            _release(ray, self.actors)
            self.actors, self._actors_for = [], (spec_small, device)
        while len(self.actors) < n:  # the first call, or more shards than the last call had
            self.actors.append(self._new_actor(len(self.actors), spec_small, device))
        replaced: Counter[int] = Counter()
        attempts: Counter[str] = Counter()
        queue = deque(shards)
        inflight: dict = {}  # ObjectRef -> (shard, slot, the actor handle it went to)
        load: Counter[int] = Counter()  # shards in flight per slot
        done: set[str] = set()
        recorded: set[str] = set()
        try:
            while queue or inflight:
                for i, a in enumerate(self.actors[:n]):
                    while queue and load[i] < cfg.queue_depth:
                        sh = queue.popleft()
                        texts = {
                            p: spec.prompts[p] for p in dict.fromkeys(u.prompt_id for u in sh.units)
                        }
                        inflight[a.run.remote(sh, texts)] = (sh, i, a)
                        load[i] += 1
                [ref], _ = ray.wait(list(inflight), num_returns=1)
                sh, i, a = inflight.pop(ref)
                load[i] -= 1
                try:
                    out = ray.get(ref)
                except self._SYSTEM_ERRORS as exc:
                    # the replica died and Ray's restarts/retries did not save this shard: requeue it on
                    # a fresh replica in the same slot (once per dead handle), up to max_restarts times
                    attempts[sh.shard_id] += 1
                    if attempts[sh.shard_id] > cfg.max_task_retries + cfg.max_restarts:
                        raise RuntimeError(
                            f"shard {sh.shard_id} failed {attempts[sh.shard_id]} times "
                            f"(its worker died each time): {exc}"
                        ) from exc
                    queue.appendleft(sh)
                    if self.actors[i] is a:
                        replaced[i] += 1
                        if replaced[i] > cfg.max_restarts:
                            raise RuntimeError(
                                f"worker w{i} died {replaced[i]} times; last error: {exc}"
                            ) from exc
                        _kill(ray, a)
                        self.actors[i] = self._new_actor(i, spec_small, device)
                    continue
                except ray.exceptions.RayTaskError as exc:  # an error in the backend: the original one
                    cause = getattr(exc, "cause", None)
                    raise (cause if isinstance(cause, UserError) else exc) from None
                if sh.shard_id in done:  # a shard is handed over once, whatever Ray retried
                    continue
                done.add(sh.shard_id)
                self.worker_info[out["worker"]] = {"pid": out["pid"], "node": out["node"]}
                first = sh.name not in recorded
                recorded.add(sh.name)
                yield ExecChunk(
                    sh.name,
                    out["results"],
                    _Pieces(out["pieces"]),
                    {**out["record"]} if first else None,
                    out["worker"],
                    out["describe"] if first else None,
                )
        except BaseException:  # an error, or the consumer stopped early: no replica is reused
            _release(ray, self.actors)
            self.actors, self._actors_for = [], None
            raise

    def close(self) -> None:
        try:
            if self.ray is not None:
                _release(self.ray, self.actors)
                self.actors, self._actors_for = [], None
                if self._owns_cluster:
                    self.ray.shutdown()
        finally:
            ray_cluster.release(self._record)  # anything of our cluster that shutdown left (its agents)
            if self._watchdog is not None:  # it sees the record gone and exits (reaped here, no zombie)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._watchdog.wait(timeout=10)
            if self._stdout is not None:
                self._stdout.__exit__(None, None, None)
            self.ray, self._owns_cluster = None, False
            self._record = self._watchdog = self._stdout = None

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _release(ray, actors, timeout_s: float = 30.0) -> None:
    """Ask every replica to close its backend (bounded wait: a dead or stuck one is not waited
    for), then end them."""
    refs = []
    for a in actors:
        try:
            refs.append(a.close.remote())
        except Exception:  # already gone
            pass
    if refs:
        try:
            ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        except Exception:
            pass
    for a in actors:
        _kill(ray, a)


def _kill(ray, actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone
        pass


__all__ = ["RayConfig", "RayExecutor", "Shard", "plan_shards", "Replica"]
