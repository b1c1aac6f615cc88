"""``python -m engine generate ...``: a resumable coupled / independent generation run."""

from __future__ import annotations

import sys

from engine import config
from engine.commands._common import add_db
from engine.errors import UserError


def register(sub) -> None:
    p = sub.add_parser("generate", help="coupled / independent generation for several models (resumable)")
    p.add_argument("--models", nargs="+", required=True, help="registry names, HF folders, .gguf files or hub ids")
    p.add_argument("--dataset", default="demo", help="built-in name (demo, ...) or a CSV/JSONL/TXT file or MMLU folder")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--subject", default=None, help="only prompts of this subject")
    p.add_argument("--repeats", type=int, default=config.DEFAULT_REPEATS)
    p.add_argument("--temperature", type=float, default=config.DEFAULT_TEMPERATURE)
    p.add_argument("--top-k", type=int, default=config.DEFAULT_TOP_K, help="0 = off")
    p.add_argument("--top-p", type=float, default=config.DEFAULT_TOP_P, help="1 = off")
    p.add_argument("--max-new-tokens", type=int, default=config.DEFAULT_MAX_NEW_TOKENS)
    p.add_argument("--modes", nargs="+", default=list(config.MODES), help="coupled and/or independent")
    p.add_argument("--seed", type=int, default=config.DEFAULT_SEED)
    p.add_argument("--batch-size", type=int, default=config.DEFAULT_BATCH_SIZE)
    p.add_argument("--traces", choices=list(config.TRACES), default="auto",
                   help="per-token traces (chosen token, top-k alternatives, Gumbel values); auto (default): "
                        f"on for runs of at most {config.TRACES_AUTO_MAX_UNITS:,} generations")
    p.add_argument("--no-traces", action="store_true", help="same as --traces off")
    p.add_argument("--trace-top-k", type=int, default=config.DEFAULT_TRACE_TOP_K, help="alternatives stored per token (0 = none)")
    p.add_argument("--run-id", default=None, help="default: derived from the settings (rerun = resume)")
    p.add_argument("--no-resume", action="store_true", help="fail instead of resuming an existing run")
    p.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--backend", choices=list(config.BACKENDS), default=config.DEFAULT_BACKEND,
                   help="hf (default): our transformers loop; vllm: vLLM with the same keyed noise "
                        "(needs the vLLM venv: scripts/install_vllm.sh)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is faster on a busy shared CPU)")
    add_db(p, None)
    p.add_argument("--progress-file", default=None, help="live progress as a JSON file")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine import store
    from engine.generation import GenConfig, run_generation
    from engine.tasks import datasets

    cfg = GenConfig(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                    max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                    trace_top_k=args.trace_top_k, record_traces=False if args.no_traces else
                    {"auto": None, "on": True, "off": False}[args.traces])
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        import torch
        torch.set_num_threads(args.threads)
    if args.device is not None:
        from engine.models import resolve_device
        resolve_device(args.device)  # UserError before any work
    ds = datasets.load_dataset(args.dataset, limit=args.limit, subject=args.subject)
    run_id = run_generation(args.db, args.models, ds, args.repeats, args.modes, args.seed, cfg,
                            progress_file=args.progress_file, run_id=args.run_id,
                            resume=not args.no_resume, device=args.device, backend=args.backend)
    for w in store.run_warnings(args.db, run_id):
        print(f"warning: {w}", file=sys.stderr)
    print(run_id)
    return 0
