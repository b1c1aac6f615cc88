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
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

import engine
from engine import store
from engine.config import DEFAULT_BACKEND, MODES, SEED_MAX, TRACES_AUTO_MAX_UNITS
from engine.errors import UserError
from engine.generation.backends import check_run, load_backend
from engine.generation.types import Backend, ExecChunk, GenConfig, GenResult, ModelTask, RunSpec
from engine.progress import Progress
from engine.sampling import noise


def code_version() -> str:
    """engine.__version__ plus the git commit when available."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        rev = ""
    return f"{engine.__version__}+{rev}" if rev else engine.__version__


def _model_name(m) -> str:
    return m if isinstance(m, str) else m.name


def _vocab_ids(model_list: Sequence, trust_remote_code: bool = False) -> dict[str, str]:
    """vocab_id per model from its tokenizer alone (loaded models: their own id; never weights)."""
    from engine import models

    return {_model_name(m): (m.vocab_id if not isinstance(m, str)
                             else models.vocab_id_of(m, trust_remote_code=trust_remote_code))
            for m in model_list}


def run_id_for(settings: dict) -> str:
    """Deterministic run id: blake2b of the result-determining settings (model order ignored)."""
    blob = json.dumps(settings, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return "run-" + hashlib.blake2b(blob, digest_size=6).hexdigest()


def _dataset_rows(dataset) -> tuple[dict, list[tuple]]:
    prompts = list(dataset.prompts)  # all of them (also any left out by --drop-long-prompts): idx = position
    ds = {"dataset_id": dataset.dataset_id, "source": str(getattr(dataset, "source", "")),
          "kind": getattr(dataset, "kind", "prompts"), "n_prompts": len(prompts)}
    rows = []
    for i, p in enumerate(prompts):
        choices = getattr(p, "choices", None)
        rows.append((dataset.dataset_id, p.prompt_id, i, getattr(p, "subject", None),
                     getattr(p, "question", None), json.dumps(choices) if choices else None,
                     None if getattr(p, "gold", None) is None else str(p.gold), p.user_prompt))
    return ds, rows


def _write_chunk(db, run_id: str, model: str, mode_of: dict[int, str], results: list[GenResult],
                 tokenizer, record_traces: bool) -> None:
    """One transaction: the chunk's generations and token traces (all or nothing).

    ``mode_of`` maps each noise seed to its mode (coupled: the run seed; independent: per model).
    """
    gens = pd.DataFrame({
        "run_id": run_id, "model": model, "prompt_id": [r.prompt_id for r in results],
        "repeat": [r.repeat for r in results], "mode": [mode_of[r.seed] for r in results],
        "seed": [r.seed for r in results],
        "text": [r.text for r in results], "token_ids": [list(r.token_ids) for r in results],
        "finish_reason": [r.finish_reason for r in results],
        "n_tokens": [len(r.token_ids) for r in results]})
    tr = []
    if record_traces:
        for r in results:
            pieces = tokenizer.convert_ids_to_tokens(list(r.token_ids))
            for s, (t, p) in enumerate(zip(r.token_ids, r.probs)):
                tr.append((run_id, model, r.prompt_id, r.repeat, mode_of[r.seed], s, t, pieces[s], p,
                           list(r.top_ids[s]) if r.top_ids else None,
                           list(r.top_probs[s]) if r.top_probs else None,
                           list(r.top_gumbels[s]) if r.top_gumbels else None))
    traces = pd.DataFrame(tr, columns=["run_id", "model", "prompt_id", "repeat", "mode", "step", "token_id",
                                       "token_text", "prob", "top_ids", "top_probs", "top_gumbels"])
    with store.transaction(db) as con:
        store.insert_df(con, "generations", gens, list(gens.columns), casts={"token_ids": "INTEGER[]"},
                        conflict="OR IGNORE")
        if len(traces):
            store.insert_df(con, "token_traces", traces, list(traces.columns),
                            casts={"top_ids": "INTEGER[]", "top_probs": "FLOAT[]", "top_gumbels": "FLOAT[]"},
                            conflict="OR IGNORE")


def _record_backend(con, run_id: str, model: str, desc: dict) -> None:
    """The run config's ``backends[model]``: backend, its version, dtype and device of this model."""
    cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    cfg.setdefault("backends", {})[model] = desc
    con.execute("UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(cfg), run_id])


# ---- backends and executors: where the units of a run are generated

def open_backend(model, *, device: str | None = None, backend: str = "hf", tensor_parallel: int = 1,
                 dtype: str | None = None) -> Backend:
    """The backend factory the executors call (this process, each Ray replica): backends.load_backend."""
    return load_backend(backend, model, device=device, tensor_parallel=tensor_parallel, dtype=dtype)


def dtype_name(dtype: str | None) -> str | None:
    """A ``--dtype`` value as its canonical name ("float32", ...), None for auto; UserError for a bad one."""
    from engine.models import parse_dtype

    dt = parse_dtype(dtype)
    return None if dt is None else str(dt).removeprefix("torch.")


def token_keys(b, key_mode: str):
    """The noise keys of a backend's vocabulary (token ids, or hashes of token byte strings)."""
    return noise.token_keys_for(b.tokenizer, key_mode, vocab_size=getattr(b, "vocab_size", None),
                                device=getattr(b, "device", "cpu"))


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def local_executor(tasks: Sequence[ModelTask], spec: RunSpec) -> Iterator[ExecChunk]:
    """The single-process executor: each model loaded here in turn, one in memory at a time."""
    for t in tasks:
        b = open_backend(t.model, device=spec.device, backend=spec.backend, tensor_parallel=spec.tensor_parallel,
                         dtype=spec.dtype)
        yield ExecChunk(t.name, [], b.tokenizer, b.record(), describe=b.describe())
        keys = token_keys(b, spec.key_mode)
        for chunk in b.generate(spec.prompts, [(p, r) for p, r, _ in t.units], [sd for _, _, sd in t.units],
                                spec.cfg, keys, spec.system_prompt):
            yield ExecChunk(t.name, chunk, b.tokenizer)
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


def _final_status(db, run_id: str, status: str, n_units: int) -> str:
    """Store the run's end status from what is stored: every unit stored -> 'done', whatever ended
    the driver (a signal after the last chunk must not leave a complete run 'cancelled')."""
    with store.writer(db) as con:
        n = con.execute("SELECT count(*) FROM generations WHERE run_id = ?", [run_id]).fetchone()[0]
        final = "done" if n >= n_units else status
        con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [final, run_id])
    return final


def run_generation(db, model_names: Sequence, dataset, repeats: int, modes: Sequence[str] = ("coupled",),
                   seed: int = 0, cfg: GenConfig = GenConfig(), progress_file=None, run_id: str | None = None,
                   resume: bool = True, device: str | None = None, show_bar: bool = True,
                   executor=None, drop_long_prompts: bool = False, command: Sequence[str] | None = None,
                   _after_chunk=None, backend: str = DEFAULT_BACKEND, tensor_parallel: int = 1,
                   dtype: str | None = None) -> str:
    """Generate every (model, prompt, repeat, mode) of a run into ``db``; resumable; returns run_id.

    Args:
        db: DuckDB file path (its folder must exist, except the default location's).
        model_names: registry names / paths (loaded one at a time), or models.LoadedModel objects.
        dataset: a datasets.Dataset, or a name/path for datasets.load_dataset.
        repeats: generations per prompt (repeat indices 0..repeats-1).
        modes: subset of config.MODES ("coupled", "independent"). Coupled: every model uses ``seed``;
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
    from engine import models as models_mod
    from engine.generation import lengths
    from engine.store.db import ensure_db_folder
    from engine.store.runlock import RunLock

    # ---- 1. validate everything before touching the database
    ensure_db_folder(db)
    if isinstance(dataset, (str, Path)):
        from engine.tasks import datasets as datasets_mod
        dataset = datasets_mod.load_dataset(str(dataset))
    if not model_names:
        raise UserError("no models given; pass at least one model name")
    names = [_model_name(m) for m in model_names]
    if len(set(names)) != len(names):
        raise UserError(f"model names must be distinct, got {names}")
    modes = list(dict.fromkeys(modes))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise UserError(f"unknown mode(s) {bad or modes}; allowed: {', '.join(MODES)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise UserError(f"repeats must be an integer >= 1, got {repeats!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEED_MAX:
        raise UserError(f"seed must be an integer in [0, 2^63), got {seed!r}")
    prompts = list(dataset.prompts)
    if not prompts:
        raise UserError(f"dataset {dataset.dataset_id!r} has no prompts")
    pids = [p.prompt_id for p in prompts]
    if len(set(pids)) != len(pids):
        raise UserError(f"dataset {dataset.dataset_id!r} has duplicate prompt ids")
    system_prompt = getattr(dataset, "system_prompt", None)
    dtype = dtype_name(dtype)
    backend_version = check_run(backend, list(model_names), cfg, tensor_parallel)

    # ---- 2. vocabulary check: one shared vocabulary -> token-id keys; else byte-string keys
    vids = _vocab_ids(model_names)
    warnings: list[str] = []
    if len(set(vids.values())) == 1:
        key_mode = "token_id"
    else:
        key_mode = "bytes"
        warnings.append("models do not share one vocabulary (" + ", ".join(f"{n}: {v}" for n, v in vids.items())
                        + "); noise is keyed by token byte strings, so coupling only holds where the "
                        "tokenizers produce the same strings (expect weaker coupling)")

    # ---- 3. prompt lengths vs each model's context (tokenizers and configs only, no weights)
    over = lengths.too_long(model_names, {p.prompt_id: p.user_prompt for p in prompts}, system_prompt,
                            cfg.max_new_tokens)
    long_ids = {p for _, _, o in over.values() for p in o}
    if long_ids:
        msg = lengths.offenders_message(over)
        if not drop_long_prompts:
            raise UserError(msg + "; lower --max-new-tokens, shorten those prompts, or pass --drop-long-prompts "
                            "to leave them out")
        prompts = [p for p in prompts if p.prompt_id not in long_ids]
        pids = [p.prompt_id for p in prompts]
        if not prompts:
            raise UserError(f"no prompt fits ({msg})")
        warnings.append(f"{len(long_ids)} prompt(s) left out (--drop-long-prompts): {msg}")

    n_units = len(names) * len(prompts) * repeats * len(modes)
    if cfg.record_traces is None:  # auto: resolved from the run's size, so a rerun resolves the same
        cfg = replace(cfg, record_traces=n_units <= TRACES_AUTO_MAX_UNITS)
        if not cfg.record_traces:
            warnings.append(f"token traces are off for this run ({n_units:,} generations > "
                            f"{TRACES_AUTO_MAX_UNITS:,}); pass --traces on to store them")

    settings = {"models": sorted(names), "dataset_id": dataset.dataset_id,
                "prompt_ids_hash": hashlib.blake2b("\x00".join(pids).encode(), digest_size=8).hexdigest(),
                "system_prompt": system_prompt, "repeats": repeats, "modes": sorted(modes), "seed": seed,
                "temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                "max_new_tokens": cfg.max_new_tokens, "record_traces": cfg.record_traces,
                "trace_top_k": cfg.trace_top_k, "key_mode": key_mode}
    if backend != DEFAULT_BACKEND:  # so that runs of the default backend keep their ids
        settings["backend"] = backend
    if dtype is not None:  # likewise: auto runs keep their ids
        settings["dtype"] = dtype
    run_id = run_id or run_id_for(settings)
    config = {**settings, "models": names, "modes": modes, "batch_size": cfg.batch_size,
              "device": str(device or models_mod.default_device()), "n_prompts": len(prompts),
              "backend": backend, "backend_version": backend_version, "tensor_parallel": tensor_parallel,
              "dtype": dtype or "auto"}
    if command:
        config["command"] = list(command)
    ds_row, prompt_rows = _dataset_rows(dataset)

    # ---- 4. one driver per run (lock file next to the database, with pid, host and heartbeat)
    with RunLock(db, run_id, list(command) if command else None) as lock:
        if executor is not None and hasattr(executor, "prepare"):
            # e.g. Ray reachable, enough resources: before any write
            executor.prepare(list(model_names), backend, tensor_parallel)
        return _drive(db, lock, run_id, settings, config, dataset, ds_row, prompt_rows, prompts, pids, names,
                      model_names, modes, repeats, seed, cfg, key_mode, warnings, n_units, system_prompt,
                      device, resume, progress_file, show_bar, executor, _after_chunk, backend)


def _drive(db, lock, run_id, settings, config, dataset, ds_row, prompt_rows, prompts, pids, names, model_names,
           modes, repeats, seed, cfg, key_mode, warnings, n_units, system_prompt, device, resume, progress_file,
           show_bar, executor, _after_chunk, backend) -> str:
    """Steps 5-7 of :func:`run_generation`, with the run lock held."""
    # ---- 5. record the run and its prompts; read what is already stored (one transaction)
    with store.transaction(db) as con:
        old = con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if old is not None:
            prev = json.loads(old[0])
            prev_id = {k: prev.get(k) for k in settings}
            prev_id["models"], prev_id["modes"] = sorted(prev_id["models"] or []), sorted(prev_id["modes"] or [])
            if prev_id != settings:
                diff = sorted(k for k in settings if prev_id.get(k) != settings[k])
                raise UserError(f"run {run_id!r} exists with different settings ({', '.join(diff)}); "
                                "use another --run-id or the original settings")
            if not resume:
                raise UserError(f"run {run_id!r} already exists; resume it or pass another --run-id")
            con.execute("UPDATE runs SET status = 'running' WHERE run_id = ?", [run_id])
        else:
            con.execute("""INSERT INTO runs (run_id, dataset_id, config, code_version, key_mode, warnings,
                           status, n_units) VALUES (?, ?, ?, ?, ?, ?, 'running', ?)""",
                        [run_id, dataset.dataset_id, json.dumps(config), code_version(), key_mode,
                         json.dumps(warnings), n_units])
        con.execute("INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES (?, ?, ?, ?)",
                    [ds_row["dataset_id"], ds_row["source"], ds_row["kind"], ds_row["n_prompts"]])
        cols = ["dataset_id", "prompt_id", "idx", "subject", "question", "choices", "gold", "user_prompt"]
        new_prompts = pd.DataFrame(prompt_rows, columns=cols).astype(
            {"subject": "object", "question": "object", "choices": "object", "gold": "object"})
        store.insert_df(con, "prompts", new_prompts, cols, conflict="OR IGNORE",
                        casts={"subject": "VARCHAR", "question": "VARCHAR", "choices": "JSON", "gold": "VARCHAR"})
        # a --limit run stores a subset of the dataset's prompts: count what is stored
        con.execute("UPDATE datasets SET n_prompts = (SELECT count(*) FROM prompts WHERE dataset_id = ?) "
                    "WHERE dataset_id = ?", [dataset.dataset_id, dataset.dataset_id])
        stored = con.execute("SELECT model, mode, prompt_id, repeat FROM generations WHERE run_id = ?",
                             [run_id]).fetchall()
    have = {(m, md, p, r) for m, md, p, r in stored}
    all_units = [(p, r) for p in pids for r in range(repeats)]
    n_done = sum(1 for m in names for md in modes for p, r in all_units if (m, md, p, r) in have)
    prog = Progress(n_units, kind="generate", job=run_id, path=progress_file, done=n_done, show_bar=show_bar)

    # ---- 6. generate what is missing (this process or Ray replicas); one transaction per chunk
    status, mode_of = "failed", {}
    try:
        with _SigtermAsInterrupt():
            tasks = []
            for m in model_names:
                name = _model_name(m)
                # both modes in one task: a prompt's coupled and independent units share a prefill
                mode_of[name] = {seed if md == "coupled" else noise.independent_seed(seed, name): md for md in modes}
                units = tuple((p, r, sd) for sd, md in mode_of[name].items()
                              for p, r in all_units if (name, md, p, r) not in have)
                if units:
                    tasks.append(ModelTask(m, name, units))
            spec = RunSpec({p.prompt_id: p.user_prompt for p in prompts}, system_prompt,
                           cfg if cfg.record_traces else replace(cfg, trace_top_k=0), key_mode, device, backend,
                           config.get("tensor_parallel", 1), settings.get("dtype"))
            for out in (executor or local_executor)(tasks, spec):
                if out.record is not None:
                    rec = out.record
                    with store.writer(db) as con:
                        con.execute("INSERT OR REPLACE INTO models (name, source, variant, vocab_id, vocab_size, "
                                    "config) VALUES (?, ?, ?, ?, ?, ?)",
                                    [rec["name"], rec["source"], rec["variant"], rec["vocab_id"],
                                     rec["vocab_size"], rec["config"]])
                        if out.describe is not None:
                            _record_backend(con, run_id, out.name, out.describe)
                if not out.results:
                    continue
                _write_chunk(db, run_id, out.name, mode_of[out.name], out.results, out.tokenizer, cfg.record_traces)
                lock.beat()
                prog.update(len(out.results), tokens=sum(len(r.token_ids) for r in out.results),
                            message=out.name, worker=out.worker)
                if _after_chunk is not None:
                    _after_chunk(out.results)
            status = "done"
    except KeyboardInterrupt:
        status = "cancelled"
    finally:
        # ---- 7. the end status from what is stored (complete -> done, whatever stopped the driver)
        try:
            status = _final_status(db, run_id, status, n_units)
        except Exception as exc:  # never mask the original error (e.g. the file stayed locked)
            print(f"warning: could not mark run {run_id} as {status}: {exc}", file=sys.stderr)
        prog.finish(status, "" if status == "done" else f"{status}: rerun the same command to resume")
    if status == "cancelled":
        raise KeyboardInterrupt(f"run {run_id} cancelled")
    return run_id
