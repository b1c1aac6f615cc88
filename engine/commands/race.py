"""CLI layer of racing many models: parse the command, call one engine function, print.

``python -m engine race``: race many models, generating only for those not yet beaten
(docs/METHODS.md 8.4); ``--replay --run RUN``: what a race would have spent on a stored run."""

from __future__ import annotations

import sys

from engine import config
from engine.commands._common import add_db, add_output_args, emit, table
from engine.errors import UserError

MODE_CHOICES = ("coupled", "independent", "both")


def register(sub) -> None:
    p = sub.add_parser(
        "race",
        help="race 3+ models: stop generating for each as soon as another is shown better "
        "(anytime-valid); --replay: what a race would have spent on a stored run",
    )
    p.add_argument("--models", nargs="+", default=None, help="3 or more models (--replay: a subset)")
    p.add_argument("--dataset", default=None, help="as for generate (needs a scoring rule)")
    p.add_argument(
        "--goal",
        default="best",
        help="best (default): the models not shown worse than any other; top:M: the top M; "
        "ranked: every pair decided",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="every pair's confidence sequence holds at every question, simultaneously, with "
        "probability >= 1 - alpha (default: %(default)s)",
    )
    p.add_argument(
        "--budget", type=int, default=None, help="at most N questions (the last round is cut at N)"
    )
    p.add_argument(
        "--round-size",
        type=int,
        default=None,
        help="questions per round (default: 16, 32, 64, 128, then 256)",
    )
    p.add_argument(
        "--mode",
        default=None,
        choices=MODE_CHOICES,
        help="noise mode(s): each mode races on its own (default: coupled; --replay: both)",
    )
    p.add_argument("--rule", default=None, help="scoring rule (default: the dataset's / the run's)")
    _add_generation_args(p)
    _add_replay_args(p)
    add_db(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _add_generation_args(p) -> None:
    """A live race generates like ``generate`` (same options, same defaults but one repeat)."""
    from engine.commands.datasets import add_column_args
    from engine.commands.generate import _add_scale_out_args

    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--subject", default=None, help="only prompts of this subject")
    add_column_args(p)
    p.add_argument("--repeats", type=int, default=1, help="generations per question (default: 1)")
    p.add_argument("--temperature", type=float, default=config.DEFAULT_TEMPERATURE)
    p.add_argument("--top-k", type=int, default=config.DEFAULT_TOP_K, help="0 = off")
    p.add_argument("--top-p", type=float, default=config.DEFAULT_TOP_P, help="1 = off")
    p.add_argument("--max-new-tokens", type=int, default=config.DEFAULT_MAX_NEW_TOKENS)
    p.add_argument("--seed", type=int, default=config.DEFAULT_SEED, help="noise and question order")
    p.add_argument("--batch-size", type=int, default=config.DEFAULT_BATCH_SIZE)
    p.add_argument("--traces", choices=list(config.TRACES), default="auto")
    p.add_argument("--run-id", default=None, help="default: derived from the settings (rerun = resume)")
    p.add_argument("--no-resume", action="store_true", help="fail instead of resuming an existing race")
    p.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--backend", choices=list(config.BACKENDS), default=config.DEFAULT_BACKEND)
    p.add_argument("--dtype", default="auto", help="auto, float32, bfloat16 or float16")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--drop-long-prompts", action="store_true", help="as for generate")
    p.add_argument("--progress-file", default=None, help="live progress as a JSON file")
    _add_scale_out_args(p)


def _add_replay_args(p) -> None:
    p.add_argument(
        "--replay",
        action="store_true",
        help="replay a stored run (generated, harness-imported or paper-MMLU) as a race over seeded "
        "orders: no generation",
    )
    p.add_argument("--run", default=None, help="with --replay: the stored run")
    p.add_argument(
        "--seeds", default=None, metavar="A..B", help="with --replay: question orders (default 0..19)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        metavar="R",
        help="with --replay: one stored repeat per question (default: the mean over the repeats)",
    )


def _checks(args):
    """One-line errors before anything is loaded or written; returns the goal."""
    from engine.analysis.race import check_models
    from engine.stats.racing import Goal
    from engine.stats.sequential import check_alpha

    goal = Goal.parse(args.goal)
    check_alpha(args.alpha)
    if args.replay:
        if args.run is None:
            raise UserError("--replay needs --run RUN (a stored run with every model's answers)")
        if args.dataset is not None:
            raise UserError("--replay reads a stored run: drop --dataset (it is the run's)")
        return goal
    if args.run is not None or args.seeds is not None or args.repeat is not None:
        raise UserError("--run / --seeds / --repeat only apply with --replay")
    if not args.models or args.dataset is None:
        raise UserError("a live race needs --models (3 or more) and --dataset; or --replay --run RUN")
    check_models(args.models)
    goal.check(len(set(args.models)))
    if args.budget is not None:  # below one round: one line before any model is loaded
        from engine.stats.racing import round_ends

        round_ends(max(args.budget, args.round_size or 0, 16), args.round_size, args.budget)
    return goal


def run(args) -> int:
    goal = _checks(args)
    if args.replay:
        return _replay(args, goal)
    return _live(args, goal)


def _replay(args, goal) -> int:
    from engine.analysis.race import race_replay
    from engine.commands.sequential import parse_seeds

    seeds = parse_seeds(None, args.seeds) if args.seeds else list(range(20))
    res = race_replay(
        args.db,
        args.run,
        models=args.models,
        goal=goal,
        alpha=args.alpha,
        mode=args.mode or "both",
        repeat=args.repeat,
        seeds=seeds,
        round_size=args.round_size,
        budget=args.budget,
        rule=args.rule,
    )
    return emit(args, res.to_dict(), lambda: replay_text(res))


def _live(args, goal) -> int:
    import contextlib

    from engine.commands._race import run_race, summary_text
    from engine.commands.datasets import columns_from_args
    from engine.commands.generate import multi_turn_note, require_ray
    from engine.generation import GenConfig
    from engine.tasks import datasets

    if args.workers is not None or args.ray_address is not None:
        require_ray()
    cfg = GenConfig(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        record_traces={"auto": None, "on": True, "off": False}[args.traces],
    )
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
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
    mode = args.mode or "coupled"
    with executor as ex:
        res = run_race(
            args.db,
            args.models,
            ds,
            args.repeats,
            list(config.MODES) if mode == "both" else [mode],
            args.seed,
            cfg,
            goal=goal,
            alpha=args.alpha,
            budget=args.budget,
            round_size=args.round_size,
            score_rule=args.rule,
            executor=ex,
            progress_file=args.progress_file,
            run_id=args.run_id,
            resume=not args.no_resume,
            device=args.device,
            drop_long_prompts=args.drop_long_prompts,
            backend=args.backend,
            tensor_parallel=args.tensor_parallel,
            dtype=args.dtype,
            command=["python", "-m", "engine", *sys.argv[1:]] if sys.argv[1:2] == ["race"] else None,
        )
    return emit(args, res.to_dict(), lambda: summary_text(res))


def replay_text(res) -> str:
    lines = [
        f"race replay  run {res.run}  {len(res.models)} models  goal {res.goal}  alpha {res.alpha:g}  "
        f"{'repeat ' + str(res.repeat) if res.repeat is not None else 'mean over repeats'}",
        "",
    ]
    rows = []
    for m in res.modes:
        sm = m.summary()
        lines.append(
            f"{m.mode}: median {sm['median_generations']:,.0f} generations (race) vs "
            f"{sm['median_joint_stop_generations']:,.0f} (8.3 joint stop) vs {sm['fixed_generations']:,.0f} "
            f"(fixed, N = {m.N:,}); decided in {sm['decided']} of {len(m.orders)} orders"
        )
        for o in m.orders:
            rows.append(
                {
                    "mode": m.mode,
                    "seed": o.seed,
                    "answer": ", ".join(o.answer),
                    "end": o.reason,
                    "questions": o.questions,
                    "race": o.generations,
                    "joint stop": o.joint_stop_generations,
                    "fixed": o.fixed_generations,
                }
            )
    return "\n".join([*lines, "", table(rows)])
