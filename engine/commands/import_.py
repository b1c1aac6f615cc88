"""``python -m engine import paper-mmlu | comparisons | harness``: import external data into the
database."""

from __future__ import annotations

import time

from engine import config
from engine.commands._common import add_db, add_output_args, csv_list, emit, table
from engine.errors import UserError


def register(sub) -> None:
    parser = sub.add_parser("import", help="import external data into the database")
    imp = parser.add_subparsers(dest="import_command", metavar="WHAT")
    imp.required = True
    p = imp.add_parser(
        "paper-mmlu", help="the coupled-generation paper's MMLU responses (+ MMLU answers)"
    )
    p.add_argument("--responses", required=True, help="folder with one sub-folder per model")
    p.add_argument("--questions", required=True, help="folder with <subject>_test.csv files")
    add_db(p, None)
    p.add_argument("--models", default=None, help="comma-separated model folder names (default: all)")
    p.add_argument("--subjects", default=None, help="comma-separated subjects (default: all)")
    p.add_argument("--run-id", default="paper-mmlu")
    add_output_args(p)
    p.set_defaults(func=run_paper_mmlu)

    q = imp.add_parser(
        "comparisons", help="validate and import pairwise comparisons (CSV or Arena JSON lines)"
    )
    q.add_argument(
        "file",
        nargs="?",
        help="CSV (prompt_id, model_a, model_b, winner[, judge_winner]) or Arena human file",
    )
    q.add_argument("--judge-file", help="Arena format: the line-aligned judge file")
    add_db(q)
    q.add_argument("--name", required=True, help="name of the comparison set")
    q.add_argument(
        "--format", choices=config.COMPARISON_FORMATS, help="default: arena for .json/.jsonl, else csv"
    )
    q.add_argument("--models", help="comma-separated known models: any other model is a problem")
    q.add_argument("--replace", action="store_true", help="replace an existing set of that name")
    add_output_args(q)
    q.set_defaults(func=run_comparisons)

    h = imp.add_parser(
        "harness",
        help="per-sample results of lm-evaluation-harness (--log_samples) or Inspect AI "
        "(.eval/.json): several paths = several models in one run, paired by sample id",
    )
    h.add_argument(
        "paths", nargs="+", metavar="PATH", help="lm-eval output folder / results_*.json, Inspect log"
    )
    add_db(h)
    h.add_argument("--name", default=None, help="run id (default: harness-<task or group>)")
    h.add_argument(
        "--model-names",
        nargs="+",
        metavar="NAME",
        default=None,
        help="the model name of each PATH, in order (default: the harness's name; two checkpoints of "
        "one name are told apart by their model arguments, e.g. hf/local@step-1000)",
    )
    h.add_argument(
        "--served",
        nargs="+",
        metavar="RUN",
        default=None,
        help="logs made through `engine serve`: link their samples only to these served runs of --db "
        "(default: to whichever served run's generations match them; see docs/SERVE.md)",
    )
    add_output_args(h)
    h.set_defaults(func=run_harness)


def run_paper_mmlu(args) -> int:
    from engine.tasks.importers import import_paper_mmlu

    t0 = time.perf_counter()
    out = import_paper_mmlu(
        args.db,
        args.responses,
        args.questions,
        models=csv_list(args.models),
        subjects=csv_list(args.subjects),
        run_id=args.run_id,
    )
    out["seconds"] = round(time.perf_counter() - t0, 2)
    files: dict[str, list[str]] = {}
    for f in out["files"]:
        files.setdefault(f["model"], []).append(f"{f['mode']} (seed {f['seed']})")
    rows = [{"model": m, "files": ", ".join(v)} for m, v in files.items()]
    return emit(
        args,
        out,
        lambda: (
            f"imported {out['n_generations']:,} generations of {len(out['models'])} models "
            f"({out['n_prompts']:,} prompts, {len(out['subjects'])} subjects) into {args.db} as run "
            f"{out['run_id']} in {out['seconds']} s\n" + table(rows)
        ),
    )


def run_comparisons(args) -> int:
    from engine.tasks.comparisons import import_comparisons

    if args.file is None and args.judge_file is None:
        raise UserError("give the file to import (and/or --judge-file for the Arena format)")
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else None
    res = import_comparisons(
        args.db,
        args.file,
        args.name,
        judge_file=args.judge_file,
        fmt=args.format,
        known_models=models,
        replace=args.replace,
    )
    return emit(
        args,
        res,
        lambda: (
            f"{'replaced' if res['replaced'] else 'stored'} comparison set {res['name']} "
            f"({res['format']}): {res['n_rows']:,} comparisons between {len(res['models'])} models, "
            f"{res['n_human_labels']:,} human labels, {res['n_judge_labels']:,} judge labels"
            + (f", {res['n_categories']:,} categories" if res.get("n_categories") else "")
            + f"\nmodels: {', '.join(res['models'])}"
        ),
    )


def run_harness(args) -> int:
    from engine.tasks.harness_import import import_harness

    res = import_harness(
        args.db, args.paths, name=args.name, model_names=args.model_names, served=args.served
    )
    rows = [
        {"model": m, "harness accuracy": res.headline.get(m), "our accuracy": res.ours.get(m)}
        for m in res.models
    ]
    served = [
        f"{d['model']} on {d['task']}: served run {d['served_run']} ({d['mode']}, seed "
        f"{', '.join(map(str, d['seeds']))}), {d['matched']:,} samples linked"
        for d in res.served
    ]
    how = (
        "sampled by engine serve: " + "; ".join(served)
        if served
        else "imported: not coupled, not generated here"
    )
    return emit(
        args,
        res.to_dict(),
        lambda: (
            f"imported {res.n_generations:,} samples of {len(res.models)} model(s) from {res.harness} "
            f"({res.n_prompts:,} prompts, {res.n_common:,} shared by every model; tasks "
            f"{', '.join(res.tasks)}) into {args.db} as run {res.run_id} ({how})\n"
            + "".join(f"unmatched: {line}\n" for line in res.unmatched)
            + table(rows, digits=4)
        ),
    )
