"""CLI layer of LLM judging: parse the command, call one engine function, print.

``python -m engine judge --run RUN --judge JUDGE``: pairwise LLM-as-judge on a run (resumable).

JUDGE is ``MODEL`` (a local model, our transformers loop), ``vllm:MODEL_OR_FOLDER`` (a batched
local judge on our vLLM backend) or ``openai:MODEL`` (any OpenAI-compatible server; the key is
read from the environment variable named by --api-key-env and never stored or shown).
"""

from __future__ import annotations

import sys

from engine import config
from engine.commands._common import add_db, add_output_args, emit, read_text_file, table
from engine.tasks.judge_api import DEFAULT_KEY_ENV
from engine.tasks.judge_parse import ARENA_HARD_HELP, FORMATS
from engine.tasks.judge_summary import JudgeSummary

EPILOG = (
    "--judge-format arena-hard reads Arena-Hard-Auto's five labels and maps them to win/tie: "
    f"{ARENA_HARD_HELP} (a strong and a slight preference are both one win). The API key is read from "
    "the environment only (--api-key-env names the variable); it is never stored, logged or shown."
)


def register(sub) -> None:
    p = sub.add_parser(
        "judge",
        help="LLM-as-judge pairwise comparisons of a run's generations (resumable)",
        epilog=EPILOG,
    )
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument(
        "--judge",
        required=True,
        help="MODEL (local, transformers), vllm:MODEL_OR_FOLDER (local, vLLM) or openai:MODEL "
        "(an OpenAI-compatible server)",
    )
    p.add_argument("--judge-name", help="name stored for this judge (default: --judge)")
    p.add_argument(
        "--base-url",
        help="openai: the server's URL, e.g. http://127.0.0.1:8000/v1 "
        "(default: $OPENAI_BASE_URL, else OpenAI's)",
    )
    p.add_argument(
        "--api-key-env",
        default=DEFAULT_KEY_ENV,
        help="openai: the NAME of the environment variable holding the key (default %(default)s)",
    )
    p.add_argument(
        "--concurrency", type=int, default=8, help="openai: requests in flight (default %(default)s)"
    )
    p.add_argument(
        "--max-retries",
        type=int,
        default=5,
        help="openai: retries of a request on 429/5xx/timeouts (default %(default)s)",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, help="openai: seconds per request (default %(default)s)"
    )
    p.add_argument(
        "--max-retry-wait",
        type=float,
        default=60.0,
        help="openai: longest wait in seconds a server's Retry-After can ask for (default %(default)s)",
    )
    p.add_argument(
        "--stop-after-failures",
        type=int,
        default=5,
        help="openai: stop the run after this many hard failures in a row (401/403/404, server "
        "unreachable after all retries); 0 never stops (default %(default)s)",
    )
    p.add_argument(
        "--no-retry-failed",
        action="store_true",
        help="keep stored verdicts whose request failed for good (default: a rerun sends them again; "
        "answered verdicts, parsed or not, are never re-sent)",
    )
    p.add_argument(
        "--judge-format",
        default="paper",
        choices=FORMATS,
        help=f"paper: A / B / Tie (default); arena-hard: [[A>B]]-style labels ({ARENA_HARD_HELP})",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print requests, estimated input tokens and (with prices) the cost, and (openai:) whether "
        "the server lists the model; sends no chat request",
    )
    p.add_argument("--price-in", type=float, help="USD per million input tokens (for --dry-run)")
    p.add_argument("--price-out", type=float, help="USD per million output tokens (for --dry-run)")
    p.add_argument("--max-requests", type=int, help="judge at most this many missing comparisons now")
    p.add_argument(
        "--orders",
        default="both",
        choices=config.JUDGE_ORDERS,
        help="both presentation orders (default) or one seeded random order per pair",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random orders")
    p.add_argument(
        "--prompt-file",
        help="system prompt for the judge (default: the paper's, Appendix C Table 2; "
        "with --judge-format arena-hard an Arena-Hard-style prompt)",
    )
    p.add_argument(
        "--user-template-file",
        help="user message template with {question}, {answer_a}, {answer_b} (default: Arena-Hard layout)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        help="reply length limit (default: 8 for local judges, 16 for API judges; 1024 with arena-hard)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="local judges: prompts per batch")
    p.add_argument(
        "--judge-command",
        help="optional external judge: a command reading one JSON chat per stdin line, writing one "
        "reply per stdout line (instead of loading --judge locally)",
    )
    p.add_argument(
        "--replace", action="store_true", help="delete this judge's earlier verdicts on the run first"
    )
    p.add_argument("--progress-file", help="write live progress (JSON) to this file")
    add_output_args(p)
    p.set_defaults(func=run)


def _config(args, provider: str):
    from engine.tasks import judge as J

    kw = {}
    if args.prompt_file:
        kw["prompt_template"] = read_text_file(args.prompt_file, "judge prompt file")
    elif args.judge_format == "arena-hard":
        kw["prompt_template"] = J.ARENA_HARD_PROMPT
    if args.user_template_file:
        kw["user_template"] = read_text_file(args.user_template_file, "judge user template file")
    default_tokens = 1024 if args.judge_format == "arena-hard" else 16 if provider == "openai" else 8
    return J.JudgeConfig(
        judge_model=args.judge,
        orders=args.orders,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens or default_tokens,
        batch_size=args.batch_size,
        judge_format=args.judge_format,
        **kw,
    )


def _build_judge(args, spec, cfg):
    """(complete_fn, api): the judge the task calls; an API judge passes its preflight first."""
    from engine.commands import _judges
    from engine.tasks import judge as J
    from engine.tasks.judge_api import ApiJudge

    if args.judge_command:
        return J.command_complete_fn(args.judge_command), None
    if spec.provider == "openai":
        api = ApiJudge(_api_config(args, spec, cfg), seed=cfg.seed)
        api.preflight()
        return None, api
    if spec.provider == "vllm":
        return _judges.vllm_complete_fn(spec.model, max_new_tokens=cfg.max_new_tokens), None
    return _judges.model_complete_fn(
        spec.model, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, seed=cfg.seed
    ), None


def _api_config(args, spec, cfg):
    from engine.tasks.judge_api import ApiJudgeConfig

    return ApiJudgeConfig(
        spec.model,
        args.base_url,
        args.api_key_env,
        args.concurrency,
        args.max_retries,
        args.timeout,
        cfg.max_new_tokens,
        max_retry_wait_s=args.max_retry_wait,
        breaker_after=args.stop_after_failures,
    )


def _model_check(args, spec, cfg) -> str | None:
    """A dry run's model check for an API judge (GET /models only, no chat request); None otherwise."""
    if spec.provider != "openai" or args.judge_command:
        return None
    from engine.tasks.judge_api import ApiJudge

    return ApiJudge(_api_config(args, spec, cfg), require_key=False).model_check()


def run(args) -> int:
    from engine.commands._judges import parse_judge_spec
    from engine.tasks import judge as J

    spec = parse_judge_spec(args.judge)
    cfg = _config(args, spec.provider)
    if spec.provider == "openai" and not args.judge_command:
        _api_config(args, spec, cfg)  # a bad --base-url / --api-key-env: one line before anything else
    judge = args.judge_name or args.judge
    retry = not args.no_retry_failed
    plan = J.plan_judging(
        args.db,
        args.run,
        judge,
        cfg,
        replace=args.replace,
        max_requests=args.max_requests,
        retry_failed=retry,
    )
    if args.dry_run:
        from engine.tasks.judge_cost import estimate_cost

        est = estimate_cost(
            (chat for _, chat in J.message_stream(args.db, plan)),
            spec.model,
            cfg.max_new_tokens,
            price_in=args.price_in,
            price_out=args.price_out,
        )
        res = {
            "run": args.run,
            "judge": judge,
            "n_tasks": len(plan.tasks),
            "n_stored": plan.n_stored,
            "n_capped": plan.n_capped,
            "n_retry_failed": plan.n_retry_failed,
            **est.to_dict(),
            "model_check": _model_check(args, spec, cfg),
        }
        return emit(args, res, lambda: dry_run_text(res))
    with J.judge_lock(args.db, args.run, judge):  # a second process exits 2 here, before any request
        summary = _judge(args, spec, cfg, judge, plan, retry)
    if summary.n_unparseable:
        print(
            f"note: {summary.n_unparseable} judge outputs could not be parsed or their requests failed; "
            "they are stored with parsed = NULL and count as no label",
            file=sys.stderr,
        )
    return emit(args, summary.to_dict(), lambda: summary_text(summary))


def _judge(args, spec, cfg, judge: str, plan, retry: bool) -> JudgeSummary:
    from engine.tasks import judge as J

    complete_fn, api = _build_judge(args, spec, cfg) if plan.pending else (None, None)
    try:
        return J.judge_run(
            args.db,
            args.run,
            judge,
            cfg,
            complete_fn=complete_fn,
            api=api,
            progress_file=args.progress_file,
            replace=args.replace,
            max_requests=args.max_requests,
            retry_failed=retry,
        )
    finally:
        backend = getattr(complete_fn, "backend", None)
        if backend is not None:
            backend.close()


def dry_run_text(res: dict) -> str:
    text = (
        f"dry run: judge {res['judge']} on run {res['run']}: {res['n_requests']:,} requests to send "
        f"({res['n_stored']:,} of {res['n_tasks']:,} already stored"
        + (
            f", {res['n_retry_failed']:,} of them failed before and are sent again"
            if res.get("n_retry_failed")
            else ""
        )
        + (f", {res['n_capped']:,} left for later by --max-requests" if res["n_capped"] else "")
        + ")\n"
        f"estimated input tokens: {res['input_tokens']:,} ({res['method']}); output at most "
        f"{res['max_output_tokens']:,} tokens"
    )
    if res.get("model_check"):
        text += f"\nmodel check: {res['model_check']}"
    if res["cost"] is not None:
        text += (
            f"\nestimated cost: at most ${res['cost']:,.4f} (input ${res['price_in'] or 0}/M tokens, "
            f"output ${res['price_out'] or 0}/M tokens)"
        )
    return text


def summary_text(res: JudgeSummary) -> str:
    """Work done, requests (API judges), then the stored verdicts per mode (A / B / tie /
    unparseable)."""
    head = (
        f"judge {res.judge} on run {res.run} ({len(res.models)} models, orders: {res.orders}): "
        f"{res.n_judged_now:,} judged now, {res.n_skipped_existing:,} already stored, "
        f"{res.n_pairs_missing_generation:,} pairs missing a generation"
    )
    if res.n_retried_failed:
        head += f", {res.n_retried_failed:,} failed requests sent again"
    if res.n_capped:
        head += f", {res.n_capped:,} left for a later run (--max-requests)"
    req = res.requests_now
    if req:
        head += (
            f"\nrequests: {req['requests']:,} sent ({req['retries']:,} retries, {req['failed']:,} "
            f"failed for good), {req['requests_per_s']:.1f}/s"
        )
    u = res.stored_usage
    lat = "–" if u.mean_latency_s is None else f"{u.mean_latency_s:.2f} s"
    head += (
        f"\nstored totals: {u.prompt_tokens:,} prompt + {u.completion_tokens:,} completion tokens, "
        f"{u.attempts:,} attempts, {u.n_failed_requests:,} failed requests, mean latency {lat}"
    )
    rows = [{"mode": m, **v} for m, v in res.stored_verdicts_by_mode.items()]
    rows.append({"mode": "all", **res.stored_verdicts})
    return head + "\nstored verdicts:\n" + table(rows, ["mode", "A", "B", "tie", "unparseable"])
