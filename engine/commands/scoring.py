"""``score``, ``judge``, ``cluster``, ``comparisons list|delete|export`` and ``import comparisons``.

Thin: parse arguments, call engine.tasks.scoring / judge / clustering / comparisons, print JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine import store
from engine.commands._groups import get_group
from engine.errors import UserError


def _db(p) -> None:
    p.add_argument("--db", default=str(store.DEFAULT_DB), help="database file (default: %(default)s)")


def _read_file(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not UTF-8 text") from None


def _print(obj) -> int:
    print(json.dumps(obj, indent=2, default=str))
    return 0


def register(sub) -> None:
    from engine.tasks.clustering import DEFAULT_EMBEDDING_THRESHOLD, METHODS
    from engine.tasks.comparisons import FORMATS
    from engine.tasks.judge import ORDERS
    from engine.tasks.scoring import RULES

    p = sub.add_parser("score", help="score every generation of a run (answer extraction rule)")
    _db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--rule", default="paper", choices=RULES,
                   help="paper: the coupled-generation paper's exact rule; lenient: 'Answer: X', '(B)', option "
                        "text; numeric: GSM8K last number; exact: normalised exact match (default: paper)")
    p.set_defaults(func=run_score)

    p = sub.add_parser("judge", help="LLM-as-judge pairwise comparisons of a run's generations (resumable)")
    _db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--judge", required=True, help="judge model (any name engine.models can load)")
    p.add_argument("--judge-name", help="name stored for this judge (default: --judge)")
    p.add_argument("--orders", default="both", choices=ORDERS,
                   help="both presentation orders (default) or one seeded random order per pair")
    p.add_argument("--seed", type=int, default=0, help="seed of the random orders")
    p.add_argument("--prompt-file", help="system prompt for the judge (default: the paper's, Appendix C Table 2)")
    p.add_argument("--user-template-file",
                   help="user message template with {question}, {answer_a}, {answer_b} (default: Arena-Hard layout)")
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--judge-command",
                   help="optional external judge: a command reading one JSON chat per stdin line, writing one "
                        "reply per stdout line (instead of loading --judge locally)")
    p.add_argument("--replace", action="store_true", help="delete this judge's earlier verdicts on the run first")
    p.add_argument("--progress-file", help="write live progress (JSON) to this file")
    p.set_defaults(func=run_judge)

    p = sub.add_parser("cluster", help="semantic clusters of each prompt's generations (per model and mode)")
    _db(p)
    p.add_argument("--run", required=True)
    p.add_argument("--method", required=True, choices=METHODS,
                   help="answer: identical extracted answers; llm: bidirectional entailment by --model; "
                        "embedding: cosine similarity of all-MiniLM-L6-v2 embeddings (an approximation)")
    p.add_argument("--model", help="for --method llm: the local model asked about entailment")
    p.add_argument("--rule", choices=RULES, help="for --method answer (default by dataset kind)")
    p.add_argument("--threshold", type=float, default=DEFAULT_EMBEDDING_THRESHOLD,
                   help="for --method embedding: cosine threshold (default %(default)s)")
    p.add_argument("--progress-file", help="for --method llm: write live progress (JSON) to this file")
    p.set_defaults(func=run_cluster)

    p = sub.add_parser("comparisons", help="stored comparison sets: list, delete, export")
    inner = p.add_subparsers(dest="comparisons_command", metavar="ACTION")
    inner.required = True
    q = inner.add_parser("list", help="every stored set with its row and label counts")
    _db(q)
    q.set_defaults(func=run_list)
    q = inner.add_parser("delete", help="delete a set")
    q.add_argument("name")
    _db(q)
    q.set_defaults(func=run_delete)
    q = inner.add_parser("export", help="a set as CSV in the upload format (stdout or --out)")
    q.add_argument("name")
    q.add_argument("--out", help="file to write (default: stdout)")
    _db(q)
    q.set_defaults(func=run_export)
    q = inner.add_parser("from-judge", help="store a run's judge verdicts as a comparison set")
    _db(q)
    q.add_argument("--run", required=True)
    q.add_argument("--judge", required=True, help="the judge name stored in the judgments")
    q.add_argument("--mode", choices=store.MODES, required=True)
    q.add_argument("--name", required=True)
    q.add_argument("--combine", default="separate", choices=("separate", "agree"))
    q.add_argument("--replace", action="store_true")
    q.set_defaults(func=run_from_judge)

    imp = get_group(sub, "import", "import external data into the database")
    q = imp.add_parser("comparisons", help="validate and import pairwise comparisons (CSV or Arena JSON lines)")
    q.add_argument("file", nargs="?", help="CSV (prompt_id, model_a, model_b, winner[, judge_winner]) or Arena human file")
    q.add_argument("--judge-file", help="Arena format: the line-aligned judge file")
    _db(q)
    q.add_argument("--name", required=True, help="name of the comparison set")
    q.add_argument("--format", choices=FORMATS, help="default: arena for .json/.jsonl, else csv")
    q.add_argument("--models", help="comma-separated known models: any other model is a problem")
    q.add_argument("--replace", action="store_true", help="replace an existing set of that name")
    q.set_defaults(func=run_import)


def run_score(args) -> int:
    from engine.tasks.scoring import score_run
    return _print(score_run(args.db, args.run, args.rule))


def run_judge(args) -> int:
    from engine.tasks import judge as J
    kw = {}
    if args.prompt_file:
        kw["prompt_template"] = _read_file(args.prompt_file, "judge prompt file")
    if args.user_template_file:
        kw["user_template"] = _read_file(args.user_template_file, "judge user template file")
    cfg = J.JudgeConfig(judge_model=args.judge, orders=args.orders, seed=args.seed,
                        max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, **kw)
    fn = J.command_complete_fn(args.judge_command) if args.judge_command else None
    summary = J.judge_run(args.db, args.run, args.judge_name or args.judge, cfg, complete_fn=fn,
                          progress_file=args.progress_file, replace=args.replace)
    if summary["n_unparseable"]:
        print(f"note: {summary['n_unparseable']} judge outputs could not be parsed; they are stored with "
              "parsed = NULL and count as no label", file=sys.stderr)
    return _print(summary)


def run_cluster(args) -> int:
    from engine.tasks.clustering import cluster_run
    return _print(cluster_run(args.db, args.run, args.method, rule=args.rule, model=args.model,
                              threshold=args.threshold, progress_file=args.progress_file))


def run_list(args) -> int:
    from engine.tasks.comparisons import list_comparison_sets
    if not Path(args.db).exists():
        return _print([])
    df = list_comparison_sets(args.db)
    rows = df.to_dict("records")
    for r in rows:
        r["meta"] = json.loads(r["meta"]) if r.get("meta") else None
    return _print(rows)


def run_delete(args) -> int:
    from engine.tasks.comparisons import delete_comparison_set
    return _print({"deleted": args.name, "n_rows": delete_comparison_set(args.db, args.name)})


def run_export(args) -> int:
    from engine.tasks.comparisons import export_comparison_set
    text = export_comparison_set(args.db, args.name, args.out)
    if args.out:
        print(json.dumps({"exported": args.name, "out": args.out}), file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def run_from_judge(args) -> int:
    from engine.tasks.judge import judgments_to_set
    return _print(judgments_to_set(args.db, args.run, args.judge, args.mode, args.name,
                                   combine=args.combine, replace=args.replace))


def run_import(args) -> int:
    from engine.tasks.comparisons import import_comparisons
    if args.file is None and args.judge_file is None:
        raise UserError("give the file to import (and/or --judge-file for the Arena format)")
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    return _print(import_comparisons(args.db, args.file, args.name, judge_file=args.judge_file, fmt=args.format,
                                     known_models=models, replace=args.replace))
