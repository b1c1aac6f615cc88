"""CLI layer of the sequential evaluation: parse the command, call one engine function, print.

``python -m engine sequential --run RUN``: replay a stored run as an anytime-valid sequential
evaluation: at which question would each stop rule have fired, coupled vs independent
(docs/SEQUENTIAL.md; docs/METHODS.md section 8)."""

from __future__ import annotations

from engine.commands._common import add_db, add_output_args, csv_list, emit, table
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "sequential",
        help="replay a stored run as an anytime-valid sequential evaluation: "
        "when each stop rule fires, coupled vs independent",
    )
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--model-a", default=None, help="first model of the pair (with --model-b)")
    p.add_argument("--model-b", default=None)
    p.add_argument(
        "--models",
        default=None,
        help="comma-separated models (2 or more; one CS per pair at "
        "alpha/P); default: every model of the run",
    )
    p.add_argument(
        "--stored",
        action="store_true",
        help="a generate --until run's own stop: its stored question order, rule and alpha (what its "
        "report and the Generate page show), instead of a replay over seeded orders",
    )
    p.add_argument(
        "--mode",
        default=None,
        choices=("coupled", "independent", "both"),
        help="noise mode(s) to replay (both: the modes the run has; default: both)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        metavar="R",
        help="use one stored repeat per question, as a live run with --repeats 1 would see it "
        "(default: the mean over the stored repeats)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=None,
        help="the CS holds at every question simultaneously with probability >= 1 - alpha (default: 0.05)",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--seed", type=int, default=None, help="seed of the random question order (default: 0)"
    )
    g.add_argument(
        "--seeds", default=None, metavar="A..B", help="several orders: a range 0..19 or a list 0,3,7"
    )
    p.add_argument(
        "--stop",
        default=None,
        help="stop rule: decided | width:W | budget:N, comma-separated "
        "(the first that holds stops; default: decided)",
    )
    p.add_argument(
        "--rule", default=None, help="scoring rule (default: the run's only rule; harness for imports)"
    )
    add_output_args(p)
    p.set_defaults(func=run)


def parse_seeds(seed: int | None, seeds: str | None) -> list[int]:
    """--seed S -> [S]; --seeds 'A..B' -> A..B inclusive; --seeds 'a,b,c' -> the list; default [0]."""
    if seeds is None:
        return [0 if seed is None else int(seed)]
    text = seeds.strip()
    try:
        if ".." in text:
            a, b = (int(v) for v in text.split("..", 1))
            if b < a:
                raise ValueError
            return list(range(a, b + 1))
        return [int(v) for v in csv_list(text) or []]
    except ValueError:
        raise UserError(
            f"bad --seeds {seeds!r}; allowed: a range like 0..19 or a list like 0,3,7"
        ) from None


def _models(args) -> list[str] | None:
    if (args.model_a is None) != (args.model_b is None):
        raise UserError("--model-a and --model-b go together (or use --models A,B,...)")
    if args.model_a is not None:
        if args.models is not None:
            raise UserError("use either --model-a/--model-b or --models, not both")
        return [args.model_a, args.model_b]
    return csv_list(args.models)


def summary_text(res) -> str:
    from engine.analysis.sequential_stop import LIKE_THESE, OUTCOME_WORDS, THIS_BENCHMARK, fired_words

    head = (
        f"sequential replay  run {res.run}  {', '.join(res.pairs)}  stop {res.rule}  alpha {res.alpha:g}"
        + (f" (per pair {res.pair_alpha:.4g})" if len(res.pairs) > 1 else "")
        + f"  {'repeat ' + str(res.repeat) if res.repeat is not None else 'mean over repeats'}"
    )
    lines = [head, f"target: {THIS_BENCHMARK} (the t interval: {LIKE_THESE})", ""]
    rows = []
    for m in res.modes:
        sm = m.summary()
        for s in m.stops:
            st = s.state
            rows.append(
                {
                    "mode": m.mode,
                    "seed": s.seed,
                    "stop at": s.n if s.n is not None else f"never ({m.n_questions})",
                    "of N": m.n_questions,
                    "rule held": fired_words(st),
                    "CS": "; ".join(f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in zip(s.lower, s.upper))
                    + (" (missed: current C_t)" if s.missed else ""),
                    "outcome": OUTCOME_WORDS[st.outcome],
                    "full-run diff": "; ".join(f"{v:+.4f}" for v in m.full),
                    "t interval (not valid for stopping)": "; ".join(
                        f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in zip(s.t_low, s.t_high)
                    ),
                }
            )
        lines.append(
            f"{m.mode}: median stop {sm['median']:g} of {m.n_questions:,} questions "
            f"({sm['fraction_of_N']:.2%}), quartiles [{sm['q1']:g}, {sm['q3']:g}]; "
            f"decided before N in {sm['decided']} of {len(m.stops)} orders"
            + (f"; all {m.n_questions:,} questions used in {sm['all_used']}" if sm["all_used"] else "")
            + (f"; the sequence missed in {sm['missed']}" if sm["missed"] else "")
        )
    lines += ["", table(rows, digits=4)]
    return "\n".join(lines)


def stored_text(ls) -> str:
    """``--stored``: a --until run's stop per mode (one sentence with its target) and each pair there."""
    lines = [
        f"run {ls.run}: generate --until {ls.rule} (alpha {ls.alpha:g}"
        + (f", per pair {ls.pair_alpha:.4g}" if len(ls.pairs) > 1 else "")
        + f"; stop on {'each mode' if ls.mode_stop == 'each' else 'the coupled mode'}), question order "
        f"seed {ls.order_seed}, N = {ls.N:,}"
    ]
    for lm in ls.modes:
        lines.append(f"  {lm.mode}: {ls.text(lm.mode)}")
        for p, tl, th in zip(range(len(ls.pairs)), lm.state.t_low, lm.state.t_high):
            t_int = f"[{tl:+.4f}, {th:+.4f}]" if tl == tl else "-"
            lines.append(
                f"    {ls.pairs[p]}: {ls.pair_text(lm.mode, p)}; t interval {t_int} (about questions "
                "like these; not valid for the stopping decision)"
            )
    return "\n".join(lines)


def run(args) -> int:
    from engine.analysis.sequential import live_stop, sequential_replay

    if args.stored:
        given = [
            flag
            for flag, v in (
                ("--model-a/--model-b/--models", args.model_a or args.model_b or args.models),
                ("--mode", args.mode),
                ("--repeat", args.repeat),
                ("--alpha", args.alpha),
                ("--seed/--seeds", args.seed is not None or args.seeds),
                ("--stop", args.stop),
                ("--rule", args.rule),
            )
            if v is not None and v is not False
        ]
        if given:
            raise UserError(
                f"--stored reads the run's own models, order, rule and alpha; drop {', '.join(given)} "
                "(or replay without --stored)"
            )
        ls = live_stop(args.db, args.run)
        return emit(args, ls.to_dict(), lambda: stored_text(ls))
    res = sequential_replay(
        args.db,
        args.run,
        models=_models(args),
        mode=args.mode or "both",
        repeat=args.repeat,
        alpha=0.05 if args.alpha is None else args.alpha,
        seeds=parse_seeds(args.seed, args.seeds),
        stop=args.stop or "decided",
        rule=args.rule,
    )
    return emit(args, res.to_dict(), lambda: summary_text(res))
