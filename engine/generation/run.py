"""A resumable generation run: plan, resume, store writes, progress.

Deterministic run id from the settings (rerunning the same command resumes), vocabulary check
and prompt-length check up front, one driver per run (a lock file with pid, host and heartbeat),
one DuckDB transaction per chunk, skip what is stored; SIGTERM / Ctrl-C mark the run cancelled
and keep every stored chunk; the end status comes from what is stored (all units -> done).

Where the units are generated is an executor: :func:`local_executor` (this process, one model
at a time) or ``engine.generation.distributed.RayExecutor`` (Ray replicas). Either way the driver
is the only database writer; backends come from the one factory :func:`open_backend`.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import engine
from engine import store
from engine.config import DEFAULT_BACKEND, MODES, SEED_MAX, TRACES_AUTO_MAX_UNITS
from engine.errors import UserError
from engine.generation.backends import check_run, load_backend
from engine.generation.types import Backend, ExecChunk, GenConfig, GenResult, ModelTask, RunSpec, Unit
from engine.progress import Progress
from engine.sampling import noise
from engine.store import runs as store_runs
from engine.store.generations import GenerationRow, TraceRow, stored_units, write_chunk
from engine.store.runs import DatasetRecord, PromptRow


def code_version() -> str:
    """engine.__version__ plus the git commit when available."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"{engine.__version__}+{rev}" if rev else engine.__version__


def _model_name(m) -> str:
    return m if isinstance(m, str) else m.name


def _vocab_ids(model_list: Sequence, trust_remote_code: bool = False) -> dict[str, str]:
    """vocab_id per model from its tokenizer alone (loaded models: their own id; never weights)."""
    from engine import models

    return {
        _model_name(m): (
            m.vocab_id
            if not isinstance(m, str)
            else models.vocab_id_of(m, trust_remote_code=trust_remote_code)
        )
        for m in model_list
    }


def run_id_for(settings: dict) -> str:
    """Deterministic run id: blake2b of the result-determining settings (model order ignored)."""
    blob = json.dumps(settings, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "run-" + hashlib.blake2b(blob, digest_size=6).hexdigest()


def _dataset_rows(dataset) -> tuple[DatasetRecord, tuple[PromptRow, ...]]:
    prompts = list(
        dataset.prompts
    )  # all of them (also any left out by --drop-long-prompts): idx = position
    ds = DatasetRecord(
        dataset.dataset_id,
        str(getattr(dataset, "source", "")),
        getattr(dataset, "kind", "prompts"),
        len(prompts),
    )
    rows = []
    for i, p in enumerate(prompts):
        choices = getattr(p, "choices", None)
        rows.append(
            PromptRow(
                dataset.dataset_id,
                p.prompt_id,
                i,
                getattr(p, "subject", None),
                getattr(p, "question", None),
                json.dumps(choices) if choices else None,
                None if getattr(p, "gold", None) is None else str(p.gold),
                p.user_prompt,
            )
        )
    return ds, tuple(rows)


def _write_chunk(
    db,
    run_id: str,
    model: str,
    mode_of: dict[int, str],
    results: list[GenResult],
    tokenizer,
    record_traces: bool,
) -> None:
    """One transaction: the chunk's generations and token traces (all or nothing).

    ``mode_of`` maps each noise seed to its mode (coupled: the run seed; independent: per model).
    """
    gens = [
        GenerationRow(
            run_id,
            model,
            r.prompt_id,
            r.repeat,
            mode_of[r.seed],
            r.seed,
            r.text,
            list(r.token_ids),
            r.finish_reason,
            len(r.token_ids),
        )
        for r in results
    ]
    traces = []
    if record_traces:
        for r in results:
            pieces = tokenizer.convert_ids_to_tokens(list(r.token_ids))
            for s, (t, p) in enumerate(zip(r.token_ids, r.probs)):
                traces.append(
                    TraceRow(
                        run_id,
                        model,
                        r.prompt_id,
                        r.repeat,
                        mode_of[r.seed],
                        s,
                        t,
                        pieces[s],
                        p,
                        list(r.top_ids[s]) if r.top_ids else None,
                        list(r.top_probs[s]) if r.top_probs else None,
                        list(r.top_gumbels[s]) if r.top_gumbels else None,
                    )
                )
    write_chunk(db, gens, traces)


# ---- backends and executors: where the units of a run are generated


def open_backend(
    model,
    *,
    device: str | None = None,
    backend: str = "hf",
    tensor_parallel: int = 1,
    dtype: str | None = None,
) -> Backend:
    """The backend factory the executors call (this process, each Ray replica): backends.load_backend."""
    return load_backend(backend, model, device=device, tensor_parallel=tensor_parallel, dtype=dtype)


def dtype_name(dtype: str | None) -> str | None:
    """A ``--dtype`` value as its canonical name ("float32", ...), None for auto; UserError for a bad
    one."""
    from engine.models import parse_dtype

    dt = parse_dtype(dtype)
    return None if dt is None else str(dt).removeprefix("torch.")


def token_keys(b, key_mode: str):
    """The noise keys of a backend's vocabulary (token ids, or hashes of token byte strings)."""
    if key_mode not in ("token_id", "bytes"):
        raise ValueError(f"unknown key_mode {key_mode!r}; allowed: token_id, bytes")
    return noise.token_keys_for(
        b.tokenizer,
        "bytes" if key_mode == "bytes" else "token_id",
        vocab_size=getattr(b, "vocab_size", None),
        device=getattr(b, "device", "cpu"),
    )


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def open_task_backend(t: ModelTask, spec: RunSpec) -> Backend:
    """The backend of one model's task, loaded in this process with the run's settings."""
    return open_backend(
        t.model,
        device=spec.device,
        backend=spec.backend,
        tensor_parallel=spec.tensor_parallel,
        dtype=spec.dtype,
    )


def task_chunks(b: Backend, t: ModelTask, spec: RunSpec, keys) -> Iterator[ExecChunk]:
    """What an in-process executor hands the driver for one task on a loaded backend: the model's row
    (an empty chunk with ``record``), then each generated chunk."""
    yield ExecChunk(t.name, [], b.tokenizer, b.record(), describe=b.describe())
    for chunk in b.generate(spec.prompts, t.units, spec.cfg, keys, spec.system_prompt):
        yield ExecChunk(t.name, chunk, b.tokenizer)


def local_executor(tasks: Sequence[ModelTask], spec: RunSpec) -> Iterator[ExecChunk]:
    """The single-process executor: each model loaded here in turn, one in memory at a time."""
    for t in tasks:
        b = open_task_backend(t, spec)
        keys = token_keys(b, spec.key_mode)
        yield from task_chunks(b, t, spec, keys)
        b.close()
        del b, keys
        free_memory()


class _SigtermAsInterrupt:
    """SIGTERM -> KeyboardInterrupt in the main thread, so a cancelled job unwinds cleanly."""

    def __enter__(self):
        self.old = None
        if threading.current_thread() is threading.main_thread():

            def handler(signum, frame):
                raise KeyboardInterrupt("SIGTERM")

            self.old = signal.signal(signal.SIGTERM, handler)
        return self

    def __exit__(self, *exc):
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)
        return False


# ---- the plan: everything checked and derived before the database is touched


@dataclass(frozen=True)
class RunPlan:
    """A checked run: its id, what it stores about itself, and the units it consists of.

    Made by :func:`plan_run` without writing anything; :func:`drive` generates it.
    """

    db: str | os.PathLike
    run_id: str
    settings: dict[str, Any]  # the result-determining settings (hashed into the run id)
    config: dict[str, Any]  # stored with the run: settings + batch size, device, backend, ...
    dataset: DatasetRecord
    prompt_rows: tuple[PromptRow, ...]  # every prompt of the dataset (stored with it)
    prompts: dict[str, str]  # prompt_id -> user prompt, of the prompts this run generates
    models: tuple  # registry names / paths, or models.LoadedModel objects
    names: tuple[str, ...]  # the run's name of each model
    modes: tuple[str, ...]
    repeats: int
    seed: int
    cfg: GenConfig  # record_traces resolved (never None)
    key_mode: str  # 'token_id' | 'bytes'
    warnings: tuple[str, ...]
    system_prompt: str | None = None
    device: str | None = None
    backend: str = DEFAULT_BACKEND
    tensor_parallel: int = 1
    resume: bool = True
    command: tuple[str, ...] | None = None

    @property
    def n_units(self) -> int:
        return len(self.names) * len(self.prompts) * self.repeats * len(self.modes)

    def mode_of(self, name: str) -> dict[int, str]:
        """noise seed -> mode, for one model (coupled: the run seed; independent: one per model)."""
        return {
            self.seed if md == "coupled" else noise.independent_seed(self.seed, name): md
            for md in self.modes
        }

    def tasks(self, stored: set[tuple[str, str, str, int]]) -> list[ModelTask]:
        """Per model, the units not in ``stored`` ((model, mode, prompt_id, repeat)); both modes in
        one task, so that a prompt's coupled and independent units share a prefill."""
        tasks = []
        for m, name in zip(self.models, self.names):
            units = tuple(
                Unit(p, r, sd)
                for sd, md in self.mode_of(name).items()
                for p in self.prompts
                for r in range(self.repeats)
                if (name, md, p, r) not in stored
            )
            if units:
                tasks.append(ModelTask(m, name, units))
        return tasks

    def spec(self) -> RunSpec:
        return RunSpec(
            dict(self.prompts),
            self.system_prompt,
            self.cfg if self.cfg.record_traces else replace(self.cfg, trace_top_k=0),
            self.key_mode,
            self.device,
            self.backend,
            self.tensor_parallel,
            self.settings.get("dtype"),
        )


def _check_args(
    model_names: Sequence, modes: Sequence[str], repeats: int, seed: int, dataset
) -> list[str]:
    """UserError for a bad argument; returns the models' names."""
    if not model_names:
        raise UserError("no models given; pass at least one model name")
    names = [_model_name(m) for m in model_names]
    if len(set(names)) != len(names):
        raise UserError(f"model names must be distinct, got {names}")
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"unknown mode(s) {bad or list(modes)}; allowed: {', '.join(MODES)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"repeats must be an integer >= 1, got {repeats!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_MAX:
        raise UserError(f"seed must be an integer in [0, 2^63), got {seed!r}")
    pids = [p.prompt_id for p in dataset.prompts]
    if not pids:
        raise UserError(f"dataset {dataset.dataset_id!r} has no prompts")
    if len(set(pids)) != len(pids):
        raise UserError(f"dataset {dataset.dataset_id!r} has duplicate prompt ids")
    return names


def _key_mode(model_names: Sequence, warnings: list[str]) -> str:
    """One shared vocabulary -> token-id keys; else byte-string keys (with a warning)."""
    vids = _vocab_ids(model_names)
    if len(set(vids.values())) == 1:
        return "token_id"
    warnings.append(
        "models do not share one vocabulary ("
        + ", ".join(f"{n}: {v}" for n, v in vids.items())
        + "); noise is keyed by token byte strings, so coupling only holds where the "
        "tokenizers produce the same strings (expect weaker coupling)"
    )
    return "bytes"


def _fitting_prompts(
    model_names: Sequence,
    dataset,
    system_prompt: str | None,
    max_new_tokens: int,
    drop_long_prompts: bool,
    warnings: list[str],
) -> list:
    """The dataset's prompts whose chat-templated length + max_new_tokens fits every model's context
    (tokenizers and configs only, no weights); a UserError listing the others unless they may be
    dropped."""
    from engine.generation.lengths import offenders_message, too_long

    prompts = list(dataset.prompts)
    over = too_long(
        model_names, {p.prompt_id: p.user_prompt for p in prompts}, system_prompt, max_new_tokens
    )
    long_ids = {p for _, _, o in over.values() for p in o}
    if not long_ids:
        return prompts
    msg = offenders_message(over)
    if not drop_long_prompts:
        raise UserError(
            msg + "; lower --max-new-tokens, shorten those prompts, or pass --drop-long-prompts "
            "to leave them out"
        )
    prompts = [p for p in prompts if p.prompt_id not in long_ids]
    if not prompts:
        raise UserError(f"no prompt fits ({msg})")
    warnings.append(f"{len(long_ids)} prompt(s) left out (--drop-long-prompts): {msg}")
    return prompts


def plan_run(
    db,
    model_names: Sequence,
    dataset,
    repeats: int,
    modes: Sequence[str] = ("coupled",),
    seed: int = 0,
    cfg: GenConfig = GenConfig(),
    *,
    run_id: str | None = None,
    resume: bool = True,
    device: str | None = None,
    drop_long_prompts: bool = False,
    command: Sequence[str] | None = None,
    backend: str = DEFAULT_BACKEND,
    tensor_parallel: int = 1,
    dtype: str | None = None,
) -> RunPlan:
    """Check a run and derive everything about it, writing nothing (arguments: :func:`run_generation`).

    1. arguments, backend and models (backends.check_run); 2. the vocabulary check: one shared
    vocabulary -> token-id keys, else byte-string keys; 3. prompt lengths vs each model's context;
    4. the run id from the result-determining settings (so rerunning the same command resumes).
    """
    from engine import models as models_mod
    from engine.store.db import ensure_db_folder

    ensure_db_folder(db)
    if isinstance(
        dataset, (str, Path)
    ):  # generation never imports tasks (layer rule): the caller loads it
        raise TypeError(
            "plan_run takes a loaded dataset (engine.tasks.datasets.load_dataset), not a name or path"
        )
    modes = list(dict.fromkeys(modes))
    names = _check_args(model_names, modes, repeats, seed, dataset)
    system_prompt = getattr(dataset, "system_prompt", None)
    dtype = dtype_name(dtype)
    backend_version = check_run(backend, list(model_names), cfg, tensor_parallel)
    warnings: list[str] = []
    key_mode = _key_mode(model_names, warnings)
    prompts = _fitting_prompts(
        model_names, dataset, system_prompt, cfg.max_new_tokens, drop_long_prompts, warnings
    )
    pids = [p.prompt_id for p in prompts]
    n_units = len(names) * len(prompts) * repeats * len(modes)
    if cfg.record_traces is None:  # auto: resolved from the run's size, so a rerun resolves the same
        cfg = replace(cfg, record_traces=n_units <= TRACES_AUTO_MAX_UNITS)
        if not cfg.record_traces:
            warnings.append(
                f"token traces are off for this run ({n_units:,} generations > "
                f"{TRACES_AUTO_MAX_UNITS:,}); pass --traces on to store them"
            )
    settings = {
        "models": sorted(names),
        "dataset_id": dataset.dataset_id,
        "prompt_ids_hash": hashlib.blake2b("\x00".join(pids).encode(), digest_size=8).hexdigest(),
        "system_prompt": system_prompt,
        "repeats": repeats,
        "modes": sorted(modes),
        "seed": seed,
        "temperature": cfg.temperature,
        "top_k": cfg.top_k,
        "top_p": cfg.top_p,
        "max_new_tokens": cfg.max_new_tokens,
        "record_traces": cfg.record_traces,
        "trace_top_k": cfg.trace_top_k,
        "key_mode": key_mode,
    }
    if backend != DEFAULT_BACKEND:  # so that runs of the default backend keep their ids
        settings["backend"] = backend
    if dtype is not None:  # likewise: auto runs keep their ids
        settings["dtype"] = dtype
    config = {
        **settings,
        "models": names,
        "modes": modes,
        "batch_size": cfg.batch_size,
        "device": str(device or models_mod.default_device()),
        "n_prompts": len(prompts),
        "backend": backend,
        "backend_version": backend_version,
        "tensor_parallel": tensor_parallel,
        "dtype": dtype or "auto",
    }
    if command:
        config["command"] = list(command)
    ds_row, prompt_rows = _dataset_rows(dataset)
    return RunPlan(
        db,
        run_id or run_id_for(settings),
        settings,
        config,
        ds_row,
        prompt_rows,
        {p.prompt_id: p.user_prompt for p in prompts},
        tuple(model_names),
        tuple(names),
        tuple(modes),
        repeats,
        seed,
        cfg,
        key_mode,
        tuple(warnings),
        system_prompt,
        device,
        backend,
        tensor_parallel,
        resume,
        tuple(command) if command else None,
    )


# ---- the drive: lock, record, generate, end status


# what a resumed ``--until`` run must keep: what it decides (the rule, α, which mode stops) and what it
# decides on (the scores, the order); --round-size is free (it changes how far a round overshoots the
# stop, never the stop itself)
SEQUENTIAL_KEPT = (
    ("until", "--until"),
    ("alpha", "--alpha"),
    ("mode_stop", "--mode-stop"),
    ("score_rule", "--rule"),
    ("order_seed", "--seed"),
)


def check_sequential_resume(run_id: str, stored: dict | None, now: dict) -> None:
    """A resumed ``generate --until`` run continues only with the stop it started with, else one line.

    Reusing the questions already seen under another rule, α, mode-stop or scoring rule would shop for
    a stop (the confidence sequence is valid for one rule fixed before the data); a plain run has no
    recorded question order; the stored order must be the one recomputed from the seed (METHODS 8.1).
    """
    new_run = "start a new run with --run-id NEW_ID"
    if not stored:
        raise UserError(
            f"run {run_id!r} exists as a plain run (no recorded question order), so it cannot continue "
            f"with --until; {new_run}, or continue it without --until"
        )
    diff = [
        f"{flag} {stored.get(key)} (asked: {now.get(key)})"
        for key, flag in SEQUENTIAL_KEPT
        if stored.get(key) != now.get(key)
    ]
    if diff:
        raise UserError(
            f"run {run_id!r} was started with {', '.join(diff)}: a sequential run keeps its stop rule, "
            f"alpha, mode-stop and scoring rule once questions are seen; {new_run}, or rerun with the "
            "stored settings"
        )
    if list(stored.get("order") or []) != list(now.get("order") or []):
        raise UserError(
            f"run {run_id!r}: the stored question order differs from the one recomputed from seed "
            f"{now.get('order_seed')} (a changed question set or random generator), so its confidence "
            f"sequence cannot continue; {new_run}"
        )


def _record_run(plan: RunPlan) -> set[tuple[str, str, str, int]]:
    """Record the run (new, or resumed with the same settings), its dataset and prompts; return
    what is already stored as (model, mode, prompt_id, repeat). One transaction."""
    with store.transaction(plan.db) as con:
        prev = store_runs.stored_config(con, plan.run_id)
        if prev is not None:
            prev_id = {k: prev.get(k) for k in plan.settings}
            prev_id["models"], prev_id["modes"] = (
                sorted(prev_id["models"] or []),
                sorted(prev_id["modes"] or []),
            )
            if prev_id != plan.settings:
                diff = sorted(k for k in plan.settings if prev_id.get(k) != plan.settings[k])
                raise UserError(
                    f"run {plan.run_id!r} exists with different settings ({', '.join(diff)}); "
                    "use another --run-id or the original settings"
                )
            if not plan.resume:
                raise UserError(
                    f"run {plan.run_id!r} already exists; resume it or pass another --run-id"
                )
            if plan.config.get("sequential"):
                check_sequential_resume(plan.run_id, prev.get("sequential"), plan.config["sequential"])
            store_runs.update_status(con, plan.run_id, "running")
            # what this drive plans: the whole run, or a --until round's share (a stopped sequential run
            # continued as a plain run would otherwise keep the rounds' count)
            store_runs.set_n_units(con, plan.run_id, plan.n_units)
            store_runs.record_host(con, plan.run_id, socket.gethostname())
        else:
            store_runs.create_run(
                con,
                plan.run_id,
                plan.dataset.dataset_id,
                plan.config,
                code_version(),
                plan.key_mode,
                plan.warnings,
                plan.n_units,
                host=socket.gethostname(),
            )
        store_runs.save_dataset(con, plan.dataset, plan.prompt_rows)
        return stored_units(con, plan.run_id)


def drive(
    plan: RunPlan, executor=None, *, progress_file=None, show_bar: bool = True, after_chunk=None
) -> str:
    """Generate what of ``plan`` is not stored yet; the database's only writer; returns the run id.

    ``executor``: where the units are generated (None: :func:`local_executor`; or a callable
    (tasks, spec) -> ExecChunk iterator whose ``prepare(models, backend, tensor_parallel)``, if
    any, runs before anything is written). ``after_chunk``: a test hook called after each stored chunk.
    """
    from engine.store.runlock import RunLock

    # ---- 5. one driver per run (lock file next to the database, with pid, host and heartbeat)
    with RunLock(plan.db, plan.run_id, list(plan.command) if plan.command else None) as lock:
        if executor is not None and hasattr(executor, "prepare"):  # e.g. Ray reachable, enough resources
            executor.prepare(list(plan.models), plan.backend, plan.tensor_parallel)
        # ---- 6. record the run and its prompts; read what is already stored (one transaction)
        have = _record_run(plan)
        n_done = sum(
            1
            for m in plan.names
            for md in plan.modes
            for p in plan.prompts
            for r in range(plan.repeats)
            if (m, md, p, r) in have
        )
        prog = Progress(
            plan.n_units,
            kind="generate",
            job=plan.run_id,
            path=progress_file,
            done=n_done,
            show_bar=show_bar,
        )
        # ---- 7. generate what is missing (this process or Ray replicas); one transaction per chunk
        status = "failed"
        try:
            with _SigtermAsInterrupt():
                _generate(plan, executor or local_executor, have, lock, prog, after_chunk)
                status = "done"
        except KeyboardInterrupt:
            status = "cancelled"
        finally:
            # ---- 8. the end status from what is stored (complete -> done, whatever stopped the driver)
            try:
                status = store_runs.finish_run(plan.db, plan.run_id, status, plan.n_units)
            except Exception as exc:  # never mask the original error (e.g. the file stayed locked)
                print(f"warning: could not mark run {plan.run_id} as {status}: {exc}", file=sys.stderr)
            prog.finish(
                status, "" if status == "done" else f"{status}: rerun the same command to resume"
            )
    if status == "cancelled":
        raise KeyboardInterrupt(f"run {plan.run_id} cancelled")
    return plan.run_id


def _generate(plan: RunPlan, executor, have, lock, prog: Progress, after_chunk) -> None:
    """Step 7 of :func:`drive`: store each chunk the executor hands over (and each model's row)."""
    mode_of = {name: plan.mode_of(name) for name in plan.names}
    for out in executor(plan.tasks(have), plan.spec()):
        if out.record is not None:
            store_runs.save_model(plan.db, out.record, plan.run_id, out.name, out.describe)
        if not out.results:
            continue
        _write_chunk(
            plan.db,
            plan.run_id,
            out.name,
            mode_of[out.name],
            out.results,
            out.tokenizer,
            bool(plan.cfg.record_traces),
        )
        lock.beat()
        prog.update(
            len(out.results),
            tokens=sum(len(r.token_ids) for r in out.results),
            message=out.name,
            worker=out.worker,
        )
        if after_chunk is not None:
            after_chunk(out.results)


def run_generation(
    db,
    model_names: Sequence,
    dataset,
    repeats: int,
    modes: Sequence[str] = ("coupled",),
    seed: int = 0,
    cfg: GenConfig = GenConfig(),
    progress_file=None,
    run_id: str | None = None,
    resume: bool = True,
    device: str | None = None,
    show_bar: bool = True,
    executor=None,
    drop_long_prompts: bool = False,
    command: Sequence[str] | None = None,
    _after_chunk=None,
    backend: str = DEFAULT_BACKEND,
    tensor_parallel: int = 1,
    dtype: str | None = None,
) -> str:
    """Generate every (model, prompt, repeat, mode) of a run into ``db``; resumable; returns run_id.

    :func:`plan_run` (check, derive, write nothing), then :func:`drive` (lock, record, generate).

    Args:
        db: DuckDB file path (its folder must exist, except the default location's). model_names:
        registry names / paths (loaded one at a time), or models.LoadedModel objects. dataset: a loaded
        dataset (``engine.tasks.datasets.load_dataset``: the caller loads a name or path). repeats:
        generations per prompt (repeat indices 0..repeats-1). modes: subset of config.MODES ("coupled",
        "independent"). Coupled: every model uses ``seed``;
            independent: each model uses noise.independent_seed(seed, model name).
        seed: noise seed in [0, config.SEED_MAX) = [0, 2^63).
        cfg: sampling/batching settings.
        progress_file: JSON progress file (engine.progress), optional.
        run_id: explicit id; default: derived from the settings, so rerunning resumes.
        resume: when False, refuse to touch a run id that already has rows.
        executor: where units are generated: None = :func:`local_executor` (this process), or a
            callable (tasks, spec) -> ExecChunk iterator, e.g. generation.distributed.RayExecutor;
            its ``prepare(models, backend, tensor_parallel)`` (if any) runs before anything is written.
        drop_long_prompts: leave out the prompts whose chat-templated length + max_new_tokens exceeds
            a model's context (listed in the run's warnings); default: such prompts are a UserError.
        command: the command line that started the run (stored in its config and lock file: the
            dashboard's resume command for a dead run).
        _after_chunk: test hook called after each stored chunk (e.g. to inject a failure).
        backend: config.BACKENDS ("hf": our transformers loop; "vllm"). Checked with the models
            (engine.generation.backends.check_run) before anything is written.
        tensor_parallel: devices each model copy is split over (vLLM only; in every Ray replica
            too). Recorded in the run's config, not in its id: like the device, it changes the
            arithmetic, not the design.
        dtype: "auto"/None (ModelRef.default_dtype: the checkpoint's own on CUDA, float32 on CPU),
            "float32", "bfloat16" or "float16", for every model and both backends; in the run id
            only when not auto (so auto runs keep their ids), like ``backend``.

    Returns:
        The run id. The run's status is 'done' when every unit is stored, else 'cancelled'
        (SIGTERM / Ctrl-C; re-raised as KeyboardInterrupt) or 'failed' (exception re-raised);
        stored chunks always stay. A second driver of the same run is a UserError (run lock).
    """
    plan = plan_run(
        db,
        model_names,
        dataset,
        repeats,
        modes,
        seed,
        cfg,
        run_id=run_id,
        resume=resume,
        device=device,
        drop_long_prompts=drop_long_prompts,
        command=command,
        backend=backend,
        tensor_parallel=tensor_parallel,
        dtype=dtype,
    )
    return drive(
        plan, executor, progress_file=progress_file, show_bar=show_bar, after_chunk=_after_chunk
    )
