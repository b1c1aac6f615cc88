"""``python -m engine cluster --run RUN --method M``: semantic clusters of each prompt's generations."""

from __future__ import annotations

from engine import config
from engine.commands._common import add_db, print_json


def register(sub) -> None:
    p = sub.add_parser("cluster", help="semantic clusters of each prompt's generations (per model and mode)")
    add_db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--method", required=True, choices=config.CLUSTER_METHODS,
                   help="answer: identical extracted answers; llm: bidirectional entailment by --model; "
                        "embedding: cosine similarity of all-MiniLM-L6-v2 embeddings (an approximation)")
    p.add_argument("--model", help="for --method llm: the local model asked about entailment")
    p.add_argument("--rule", choices=config.RULES, help="for --method answer (default by dataset kind)")
    p.add_argument("--threshold", type=float, default=config.DEFAULT_EMBEDDING_THRESHOLD,
                   help="for --method embedding: cosine threshold (default %(default)s)")
    p.add_argument("--progress-file", help="for --method llm: write live progress (JSON) to this file")
    p.set_defaults(func=run)


def run(args) -> int:
    from engine.tasks.clustering import cluster_run
    return print_json(cluster_run(args.db, args.run, args.method, rule=args.rule, model=args.model,
                              threshold=args.threshold, progress_file=args.progress_file))
