"""``python -m engine serve ...``: an OpenAI-compatible server whose noise is keyed by the request
(docs/METHODS.md 1.6); every completion it answers is stored as a generation of a served run."""

from __future__ import annotations

import os
import shlex
import sys

from engine import config
from engine.commands._common import add_db, emit
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="OpenAI-compatible server, coupled sampling keyed by the request (lm-eval, Inspect, ...)",
    )
    p.add_argument(
        "--models", nargs="+", required=True, help="registry names, HF folders, .gguf files or hub ids"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)"
    )
    p.add_argument("--port", type=int, default=8000)
    add_db(p, None)
    p.add_argument(
        "--run",
        default="served",
        help="the served run (default: %(default)s); a restarted server on the same run continues its "
        "repeat counters",
    )
    p.add_argument(
        "--seed", type=int, default=config.DEFAULT_SEED, help="noise seed of requests that send none"
    )
    p.add_argument(
        "--noise",
        choices=["coupled", "independent"],
        default="coupled",
        help="coupled (default): every model draws the request's noise; independent: a seed per model "
        "(the control)",
    )
    p.add_argument(
        "--backend", choices=["hf", "vllm"], default="hf", help="hf (default): our transformers loop"
    )
    p.add_argument(
        "--api-key-env",
        default=None,
        metavar="VAR",
        help="require Authorization: Bearer <the value of $VAR> (the key itself is never stored)",
    )
    p.add_argument(
        "--traces", action="store_true", help="store per-token traces (top alternatives, Gumbel values)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=config.DEFAULT_BATCH_SIZE,
        help="rows decoded at once per model",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=256,
        help="choices waiting per model beyond the batch; more get 429 with Retry-After",
    )
    p.add_argument(
        "--commit-every",
        type=float,
        default=config.SERVE_COMMIT_EVERY_S,
        metavar="S",
        help="seconds between commits of the journaled answers to the database (answers never wait "
        "for a commit; readers see the run at most about this far behind; default "
        f"{config.SERVE_COMMIT_EVERY_S})",
    )
    p.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (default), float32, bfloat16 or float16")
    p.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    p.add_argument(
        "--progress-file", default=None, help="live figures as a JSON file (requests, tokens/s, queue)"
    )
    p.add_argument("--progress-every", type=float, default=10.0, help="seconds between progress lines")
    p.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds SIGTERM / Ctrl-C waits for requests in flight before cancelling them",
    )
    p.add_argument(
        "--json", action="store_true", help="print the final figures as JSON when the server stops"
    )
    p.set_defaults(func=run)


def _api_key(var: str | None) -> str | None:
    if var is None:
        return None
    key = os.environ.get(var, "")
    if not key.strip():
        raise UserError(f"--api-key-env {var}: the environment variable {var} is not set or empty")
    return key.strip()


def run(args) -> int:
    from engine.serving.core import ServeConfig
    from engine.serving.server import serve

    key = _api_key(args.api_key_env)
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in [0, 65535], got {args.port}")
    cfg = ServeConfig(
        run_id=args.run,
        db=args.db,
        seed=args.seed,
        noise=args.noise,
        traces=args.traces,
        batch_size=args.batch_size,
        max_queue=args.max_queue,
        commit_every_s=args.commit_every,
        command=tuple(["python", "-m", "engine", *sys.argv[1:]]) if sys.argv[1:2] == ["serve"] else None,
    )

    def ready(url: str) -> None:
        auth = f" (Authorization: Bearer ${args.api_key_env})" if key else ""
        print(
            f"serving {', '.join(args.models)} at {url}{auth}; run {args.run} in {args.db}",
            file=sys.stderr,
        )
        print(f"  e.g. curl {url}/models", file=sys.stderr, flush=True)

    res = serve(
        cfg,
        args.models,
        host=args.host,
        port=args.port,
        api_key=key,
        backend=args.backend,
        device=args.device,
        dtype=None if args.dtype == "auto" else args.dtype,
        progress_file=args.progress_file,
        progress_every_s=args.progress_every,
        shutdown_timeout_s=args.shutdown_timeout,
        on_ready=ready,
    )
    return emit(
        args,
        res,
        lambda: (
            f"stopped: {res.get('requests', 0):,} requests, {res.get('stored', 0):,} generations stored "
            f"in run {args.run}\n  next: python -m engine export generations --run "
            f"{shlex.quote(args.run)} --db {shlex.quote(str(args.db))}"
        ),
    )
