"""``python -m engine generate ...``: a resumable coupled / independent generation run."""

from __future__ import annotations

import contextlib
import shlex
import sys
import time

from engine import config
from engine.commands._common import add_db, add_output_args, emit, table
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "generate", help="coupled / independent generation for several models (resumable)"
    )
    p.add_argument(
        "--models", nargs="+", required=True, help="registry names, HF folders, .gguf files or hub ids"
    )
    p.add_argument(
        "--dataset",
        default="demo",
        help="built-in name (demo, ...) or a CSV/JSONL/TXT file or MMLU folder, "
        "or hf:REPO[:CONFIG][:SPLIT]",
    )
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--subject", default=None, help="only prompts of this subject")
    from engine.commands.datasets import add_column_args

    add_column_args(p)
    p.add_argument("--repeats", type=int, default=config.DEFAULT_REPEATS)
    p.add_argument("--temperature", type=float, default=config.DEFAULT_TEMPERATURE)
    p.add_argument("--top-k", type=int, default=config.DEFAULT_TOP_K, help="0 = off")
    p.add_argument("--top-p", type=float, default=config.DEFAULT_TOP_P, help="1 = off")
    p.add_argument("--max-new-tokens", type=int, default=config.DEFAULT_MAX_NEW_TOKENS)
    p.add_argument("--modes", nargs="+", default=list(config.MODES), help="coupled and/or independent")
    p.add_argument("--seed", type=int, default=config.DEFAULT_SEED)
    p.add_argument("--batch-size", type=int, default=config.DEFAULT_BATCH_SIZE)
    p.add_argument(
        "--traces",
        choices=list(config.TRACES),
        default="auto",
        help="per-token traces (chosen token, top-k alternatives, Gumbel values); auto (default): "
        f"on for runs of at most {config.TRACES_AUTO_MAX_UNITS:,} generations",
    )
    p.add_argument("--no-traces", action="store_true", help="same as --traces off")
    p.add_argument(
        "--trace-top-k",
        type=int,
        default=config.DEFAULT_TRACE_TOP_K,
        help="alternatives stored per token (0 = none)",
    )
    p.add_argument("--run-id", default=None, help="default: derived from the settings (rerun = resume)")
    p.add_argument("--no-resume", action="store_true", help="fail instead of resuming an existing run")
    p.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument(
        "--backend",
        choices=list(config.BACKENDS),
        default=config.DEFAULT_BACKEND,
        help="hf (default): our transformers loop; vllm: vLLM with the same keyed noise "
        "(needs the vLLM venv: scripts/install_vllm.sh)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        help="auto (default: the checkpoint's own dtype on CUDA, float32 on CPU), float32, bfloat16 "
        "or float16; both backends; in the run id only when not auto",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is faster on a busy shared CPU)",
    )
    p.add_argument(
        "--drop-long-prompts",
        "--truncate-prompts",
        dest="drop_long_prompts",
        action="store_true",
        help="leave out the prompts whose chat-templated length + --max-new-tokens exceeds a model's "
        "context (listed in the run's warnings; prompts are never cut); default: such prompts "
        "are an error listing them",
    )
    add_db(p, None)
    p.add_argument("--progress-file", default=None, help="live progress as a JSON file")
    _add_scale_out_args(p)
    _add_until_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _add_scale_out_args(p) -> None:
    """Scale-out on Ray (engine.generation.distributed); none of these changes the run id or the results."""
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="engine replicas on Ray (a local cluster unless --ray-address); needs `pip install ray`",
    )
    p.add_argument(
        "--ray-address", default=None, help="an existing Ray cluster: auto, host:port or ray://host:port"
    )
    p.add_argument(
        "--shard-size",
        type=int,
        default=256,
        help="units per Ray shard (a prompt's units stay together)",
    )
    p.add_argument(
        "--gpus-per-worker",
        type=float,
        default=None,
        help="default: --tensor-parallel on GPU clusters, else 0",
    )
    p.add_argument(
        "--tensor-parallel",
        type=int,
        default=1,
        help="devices one model copy is split over (--backend vllm: its tensor parallelism; with "
        "--workers, inside each replica)",
    )


def _add_until_args(p) -> None:
    """A sequential run (engine.commands._until; docs/SEQUENTIAL.md)."""
    p.add_argument(
        "--until",
        default=None,
        metavar="RULE",
        help="stop when the answer is known: decided | width:W | budget:N (comma-separated: the first "
        "that holds). Questions are taken in a random order from --seed (stored with the run); "
        "--limit / --subject define the population. Rounds of questions are generated and scored "
        "(the dataset's rule or --rule) until the rule holds; a resumed run keeps its rule, --alpha, "
        "--mode-stop and --rule",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="with --until: the confidence sequences hold at every "
        "question with probability >= 1 - alpha (default 0.05)",
    )
    p.add_argument(
        "--mode-stop",
        default=None,
        choices=("coupled", "each"),
        help="with --until and both modes: coupled (default) stops the run when the coupled mode's rule "
        "holds (independent units are generated alongside, not past it); each: every mode runs "
        "until its own rule holds",
    )
    p.add_argument(
        "--round-size",
        type=int,
        default=None,
        help="with --until: questions per round (default: 16, then double the questions taken, at most "
        "256 more per round, so a small decision is not overshot; never past budget:N)",
    )
    p.add_argument("--rule", default=None, help="with --until: scoring rule (default: the dataset's)")


def _until_flags(args) -> None:
    """--alpha / --mode-stop / --round-size / --rule only with --until (with Ray too: each round is
    sharded over the replicas); the rule and α checked before anything is loaded."""
    if args.until is None:
        given = [
            f
            for f, v in (
                ("--alpha", args.alpha),
                ("--mode-stop", args.mode_stop),
                ("--round-size", args.round_size),
                ("--rule", args.rule),
            )
            if v is not None
        ]
        if given:
            raise UserError(f"{', '.join(given)} only apply with --until RULE")
        return
    from engine.stats.sequential import StopRule, check_alpha

    StopRule.parse(args.until)  # one-line errors before anything is loaded
    if args.alpha is not None:
        check_alpha(args.alpha)
    if args.round_size is not None and args.round_size < 1:
        raise UserError(f"--round-size must be an integer >= 1, got {args.round_size}")


def run_sequential(args, ds, cfg, executor=None) -> int:
    """generate --until: rounds until the stop rule holds (engine.commands._until)."""
    from engine.commands._until import run_until, summary_text
    from engine.stats.sequential import StopRule

    res = run_until(
        args.db,
        args.models,
        ds,
        args.repeats,
        args.modes,
        args.seed,
        cfg,
        stop=StopRule.parse(args.until),
        alpha=0.05 if args.alpha is None else args.alpha,
        score_rule=args.rule,
        mode_stop=args.mode_stop or "coupled",
        round_size=args.round_size,
        progress_file=args.progress_file,
        run_id=args.run_id,
        resume=not args.no_resume,
        device=args.device,
        drop_long_prompts=args.drop_long_prompts,
        backend=args.backend,
        tensor_parallel=args.tensor_parallel,
        dtype=args.dtype,
        executor=executor,
        command=["python", "-m", "engine", *sys.argv[1:]] if sys.argv[1:2] == ["generate"] else None,
    )
    return emit(args, res.to_dict(), lambda: summary_text(res))


def require_ray() -> None:
    """``--workers`` / ``--ray-address`` without the ``ray`` package: one line naming what to install,
    raised before the dataset, the models, the database folder or a run lock are touched (the
    executor's own check, ``RayExecutor.prepare``, runs only after the run is planned and locked)."""
    from engine.generation.ray_cluster import ray_installed

    if not ray_installed():
        raise UserError(
            "--workers / --ray-address need the 'ray' package, which is not installed here; "
            "install it with: pip install ray (or run without --workers / --ray-address)"
        )


def run(args) -> int:
    _until_flags(args)
    if args.workers is not None or args.ray_address is not None:
        require_ray()
    from engine import store
    from engine.generation import GenConfig, run_generation
    from engine.tasks import datasets

    cfg = GenConfig(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        trace_top_k=args.trace_top_k,
        record_traces=False if args.no_traces else {"auto": None, "on": True, "off": False}[args.traces],
    )
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    if args.device is not None:
        from engine.models import resolve_device

        resolve_device(args.device)  # UserError before any work
    from engine.commands.datasets import columns_from_args

    ds = datasets.load_dataset(
        args.dataset, limit=args.limit, subject=args.subject, columns=columns_from_args(args)
    )
    multi_turn_note(ds.source)
    executor: contextlib.AbstractContextManager = contextlib.nullcontext()
    if args.workers is not None or args.ray_address is not None:
        from engine.generation.distributed import RayConfig, RayExecutor

        executor = RayExecutor(
            RayConfig(
                workers=1 if args.workers is None else args.workers,
                address=args.ray_address,
                shard_units=args.shard_size,
                gpus_per_worker=args.gpus_per_worker,
                threads_per_worker=args.threads,
            )
        )
    if args.until is not None:
        with executor as ex:  # each round's units are sharded over the replicas like any run's
            return run_sequential(args, ds, cfg, ex)
    t0 = time.perf_counter()
    with executor as ex:
        run_id = run_generation(
            args.db,
            args.models,
            ds,
            args.repeats,
            args.modes,
            args.seed,
            cfg,
            progress_file=args.progress_file,
            run_id=args.run_id,
            resume=not args.no_resume,
            device=args.device,
            backend=args.backend,
            executor=ex,
            drop_long_prompts=args.drop_long_prompts,
            tensor_parallel=args.tensor_parallel,
            dtype=args.dtype,
            command=["python", "-m", "engine", *sys.argv[1:]] if sys.argv[1:2] == ["generate"] else None,
        )
    seconds = time.perf_counter() - t0
    warnings = store.run_warnings(args.db, run_id)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    result = run_summary(args.db, run_id)
    result.update(
        seconds=round(seconds, 3),
        warnings=warnings,
        next=next_commands(run_id, args.db, result["models"] or [], kind=ds.kind, modes=args.modes),
    )
    return emit(args, result, lambda: summary_text(result))


def run_summary(db, run_id: str) -> dict:
    """Per model and mode: units stored, tokens; the run's status and expected units."""
    from engine.store.generations import per_model_counts
    from engine.store.runs import run_record

    run, per = run_record(db, run_id), per_model_counts(db, run_id)
    conf = run.config
    return {
        "run_id": run_id,
        "status": run.status,
        "n_units": run.n_units,
        "units": sum(c.units for c in per),
        "tokens": sum(c.tokens for c in per),
        "models": conf.get("models"),
        "dataset_id": conf.get("dataset_id"),
        "repeats": conf.get("repeats"),
        "per_model": [c._asdict() for c in per],
    }


def next_commands(
    run_id: str, db, models: list[str], kind: str = "multiple_choice", modes: list[str] | None = None
) -> list[str]:
    """What one usually runs next on a finished run, each runnable as printed (``--db`` when not the
    default). A scored dataset: score, its summary, compare two models, export (every command then uses
    the rule the run was scored with). A prompt list (kind ``prompts``, no gold answers): judge the
    pairs (the first model as an example judge), store one mode's verdicts as a set, then win-rates and
    judge-only rank-sets on it."""
    d = "" if str(db) == str(config.DEFAULT_DB) else f" --db {shlex.quote(str(db))}"
    run = shlex.quote(run_id)
    export = f"python -m engine export generations --run {run}{d} --out {shlex.quote(run_id + '.csv')}"
    if kind == "prompts":
        judge = shlex.quote(models[0]) if models else "MODEL"
        mode = next((m for m in config.MODES if m in (modes or config.MODES)), config.MODES[0])
        name = shlex.quote(f"{run_id}-{mode}")
        out = [f"python -m engine judge --run {run} --judge {judge}{d}"]
        if len(models) >= 2:
            out += [
                f"python -m engine comparisons from-judge --run {run} --judge {judge} --mode {mode} "
                f"--name {name}{d}",
                f"python -m engine winrates --set {name} --label judge{d}",
                f"python -m engine ranksets --set {name} --method judge{d}",
            ]
        return out + [export]
    out = [f"python -m engine score --run {run}{d}", f"python -m engine summary --run {run}{d}"]
    if len(models) >= 2:
        out.append(
            f"python -m engine benchmark-compare --run {run} --model-a {shlex.quote(models[0])} "
            f"--model-b {shlex.quote(models[1])}{d}"
        )
    out.append(export)
    return out


def summary_text(r: dict) -> str:
    lines = [
        f"run {r['run_id']}: {r['status']}, {r['units']:,}/{r['n_units']:,} units, {r['tokens']:,} "
        f"tokens in {r['seconds']:.1f} s ({r['dataset_id']}, {r['repeats']} repeats)",
        "",
        table(r["per_model"], ["model", "mode", "units", "tokens", "cut_at_max"]),
        "",
        "next:",
    ]
    lines += [f"  {c}" for c in r["next"]]
    return "\n".join(lines)


def multi_turn_note(source: str | None) -> None:
    """A multi-turn prompt set (MT-Bench): say on stderr that only turn 1 is generated (the dataset's
    stored source records it as ``turns_used``)."""
    import json

    try:
        src = json.loads(source or "")
    except (TypeError, ValueError):
        return
    if isinstance(src, dict) and src.get("turns_used") == 1:
        print(
            f"note: {src.get('multi_turn_prompts')} prompts of this dataset have several turns; only "
            "turn 1 is generated and judged (later turns are dropped; docs/JUDGES.md)",
            file=sys.stderr,
        )
