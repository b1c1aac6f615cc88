"""``python -m engine generate ...`` (a resumable generation run) and ``export generations``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine import store
from engine.commands._groups import get_group
from engine.errors import UserError

EXPORT_FORMATS = ("csv", "parquet")


def register(sub) -> None:
    p = sub.add_parser("generate", help="coupled / independent generation for several models (resumable)")
    p.add_argument("--models", nargs="+", required=True, help="registry names, HF folders, .gguf files or hub ids")
    p.add_argument("--dataset", default="demo", help="built-in name (demo, ...) or a CSV/JSONL/TXT file or MMLU folder")
    p.add_argument("--limit", type=int, default=None, help="first N prompts only")
    p.add_argument("--subject", default=None, help="only prompts of this subject")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-k", type=int, default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1 = off")
    p.add_argument("--max-new-tokens", type=int, default=20)
    p.add_argument("--modes", nargs="+", default=["coupled", "independent"], help="coupled and/or independent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--traces", choices=["auto", "on", "off"], default="auto",
                   help="per-token traces (chosen token, top-k alternatives, Gumbel values); auto (default): "
                        "on for runs of at most 50,000 generations")
    p.add_argument("--no-traces", action="store_true", help="same as --traces off")
    p.add_argument("--trace-top-k", type=int, default=5, help="alternatives stored per token (0 = none)")
    p.add_argument("--run-id", default=None, help="default: derived from the settings (rerun = resume)")
    p.add_argument("--no-resume", action="store_true", help="fail instead of resuming an existing run")
    p.add_argument("--device", default=None, help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's choice; 1 is faster on a busy shared CPU)")
    p.add_argument("--db", default=str(store.DEFAULT_DB))
    p.add_argument("--progress-file", default=None, help="live progress as a JSON file")
    p.set_defaults(func=run_generate)

    exp = get_group(sub, "export", "export stored data to files")
    q = exp.add_parser("generations", help="generations as CSV (stdout by default) or Parquet")
    q.add_argument("--db", default=str(store.DEFAULT_DB))
    q.add_argument("--format", default="csv", help="csv or parquet")
    q.add_argument("--run", default=None, help="only this run id")
    q.add_argument("--out", default=None, help="output file (required for parquet)")
    q.set_defaults(func=run_export)


def run_generate(args) -> int:
    from engine.tasks import datasets
    from engine.generation import GenConfig, run_generation

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
                            resume=not args.no_resume, device=args.device)
    warnings = store.query_df(args.db, "SELECT warnings FROM runs WHERE run_id = ?", [run_id])
    for w in json.loads(warnings.iloc[0, 0] or "[]") if len(warnings) else []:
        print(f"warning: {w}", file=sys.stderr)
    print(run_id)
    return 0


def export_generations_df(db, run_id: str | None = None):
    """Generations joined with their prompt (columns: run_id, model, prompt_id, repeat, mode, seed,
    text, finish_reason, n_tokens, token_ids, subject, gold), ordered by run, model, mode, prompt, repeat."""
    sql = """SELECT g.run_id, g.model, g.prompt_id, g.repeat, g.mode, g.seed, g.text, g.finish_reason,
                    g.n_tokens, g.token_ids, p.subject, p.gold
             FROM generations g
             LEFT JOIN runs r USING (run_id)
             LEFT JOIN prompts p ON p.dataset_id = r.dataset_id AND p.prompt_id = g.prompt_id"""
    params: list = []
    if run_id is not None:
        with store.reader(db) as con:
            known = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        if run_id not in known:
            raise UserError(f"unknown run {run_id!r}; known runs: {', '.join(known) or '(none)'}")
        sql += " WHERE g.run_id = ?"
        params.append(run_id)
    sql += " ORDER BY g.run_id, g.model, g.mode, p.idx, g.prompt_id, g.repeat"
    return store.query_df(db, sql, params)


def run_export(args) -> int:
    if args.format not in EXPORT_FORMATS:
        raise UserError(f"unknown format {args.format!r}; allowed: {', '.join(EXPORT_FORMATS)}")
    if args.format == "parquet" and not args.out:
        raise UserError("--format parquet needs --out FILE (binary output is not written to stdout)")
    df = export_generations_df(args.db, args.run)
    if args.format == "csv":
        # CSV has no list type: token ids as one space-separated string
        df["token_ids"] = df["token_ids"].map(lambda v: " ".join(map(str, v)) if v is not None else "")
        if args.out:
            df.to_csv(args.out, index=False)
        else:
            df.to_csv(sys.stdout, index=False)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df["token_ids"] = df["token_ids"].map(lambda v: [int(t) for t in v] if v is not None else None)
        df.to_parquet(args.out, index=False)
    if args.out:
        print(f"wrote {len(df)} generations to {args.out}", file=sys.stderr)
    return 0
