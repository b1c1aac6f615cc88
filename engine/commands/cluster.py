"""``python -m engine cluster --run RUN --method M``: semantic clusters of each prompt's generations."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, add_output_args, emit
from engine.commands._judges import model_complete_fn


def register(sub) -> None:
    p = sub.add_parser(
        "cluster", help="semantic clusters of each prompt's generations (per model and mode)"
    )
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument(
        "--method",
        required=True,
        choices=config.CLUSTER_METHODS,
        help="answer: identical extracted answers; llm: bidirectional entailment by --model; "
        "embedding: cosine similarity of all-MiniLM-L6-v2 embeddings (an approximation)",
    )
    p.add_argument("--model", help="for --method llm: the local model asked about entailment")
    p.add_argument("--rule", choices=config.RULES, help="for --method answer (default by dataset kind)")
    p.add_argument(
        "--threshold",
        type=float,
        default=config.DEFAULT_EMBEDDING_THRESHOLD,
        help="for --method embedding: cosine threshold (default %(default)s)",
    )
    p.add_argument("--progress-file", help="for --method llm: write live progress (JSON) to this file")
    add_output_args(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.tasks.clustering import cluster_run

    fn = (
        model_complete_fn(args.model, max_new_tokens=8, batch_size=16)
        if args.method == "llm" and args.model
        else None
    )
    res = cluster_run(
        args.db,
        args.run,
        args.method,
        rule=args.rule,
        complete_fn=fn,
        threshold=args.threshold,
        progress_file=args.progress_file,
    )
    return emit(args, res, lambda: summary(res))


def summary(res: dict) -> str:
    extra = ", ".join(f"{k} {res[k]}" for k in ("rule", "threshold") if k in res)
    text = (
        f"clustered {res['n_generations']:,} generations of run {res['run']} into {res['n_groups']:,} "
        f"groups (prompt x model x mode) with method {res['method']}" + (f" ({extra})" if extra else "")
    )
    text += (
        f"\nclusters per group: mean {res['mean_clusters']:.2f}, max {res['max_clusters']}; "
        f"mean semantic consistency S = {res['mean_consistency']:.3f}"
    )
    return text + (f"\nnote: {res['note']}" if res.get("note") else "")
