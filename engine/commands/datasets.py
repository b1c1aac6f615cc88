"""CLI layer of datasets: parse the command, call one engine function, print.

``python -m engine datasets [NAME_OR_PATH] [--subject S] [--limit N] [--json]``: the built-in
datasets, or a check of one dataset file (kind, size, subjects, gold balance, first prompt)."""

from __future__ import annotations

from engine.commands._common import add_output_args, emit
from engine.tasks import datasets


def register(sub) -> None:
    d = sub.add_parser(
        "datasets", help="list the built-in datasets, or check and summarise a dataset file"
    )
    d.add_argument(
        "dataset",
        nargs="?",
        default=None,
        help="built-in name, NAME:subject, a CSV/JSONL/TXT file, a folder of MMLU CSVs, or "
        "hf:REPO[:CONFIG][:SPLIT] (a hub id or a folder in the hub layout)",
    )
    d.add_argument("--subject", default=None)
    d.add_argument("--limit", type=int, default=None)
    add_column_args(d)
    add_output_args(d)
    d.set_defaults(func=run)


def add_column_args(p) -> None:
    """--prompt-column/--answer-column/--choices-column/--id-column for hf: layouts the registry does not
    know."""
    g = p.add_argument_group("hf: datasets of a layout the registry does not know")
    g.add_argument("--prompt-column", default=None, help="the question / prompt text")
    g.add_argument(
        "--answer-column", default=None, help="gold answer: an option index or letter, or a number"
    )
    g.add_argument("--choices-column", default=None, help="a list of options (multiple choice)")
    g.add_argument("--id-column", default=None, help="the dataset's own id (default: a content hash)")


def columns_from_args(args):
    """The Columns of the four flags (None when none is given)."""
    from engine.tasks.hf_datasets import Columns

    cols = Columns(args.prompt_column, args.answer_column, args.choices_column, args.id_column)
    return cols if cols.given() else None


def dataset_summary(ds: datasets.Dataset) -> dict:
    """Kind, size, subjects (with counts), gold-answer counts and the first user prompt."""
    subjects: dict[str, int] = {}
    golds: dict[str, int] = {}
    for p in ds.prompts:
        if p.subject:
            subjects[p.subject] = subjects.get(p.subject, 0) + 1
        if p.gold is not None and ds.kind == "multiple_choice":
            golds[p.gold] = golds.get(p.gold, 0) + 1
    return {
        "dataset_id": ds.dataset_id,
        "kind": ds.kind,
        "source": ds.source,
        "n_prompts": len(ds),
        "subjects": subjects,
        "gold_counts": dict(sorted(golds.items())),
        "system_prompt": ds.system_prompt,
        "first_prompt": ds.prompts[0].user_prompt if ds.prompts else None,
    }


def run(args) -> int:
    if args.dataset is None:
        data = [dataset_summary(datasets.load_dataset(n)) for n in datasets.list_datasets()]
    else:
        data = [
            dataset_summary(
                datasets.load_dataset(
                    args.dataset, limit=args.limit, subject=args.subject, columns=columns_from_args(args)
                )
            )
        ]
    return emit(args, data if args.dataset is None else data[0], lambda: summary(data))


def summary(data: list[dict]) -> str:
    lines = []
    for r in data:
        subs = ", ".join(f"{k} ({v})" for k, v in list(r["subjects"].items())[:8])
        more = f" ... {len(r['subjects'])} subjects" if len(r["subjects"]) > 8 else ""
        lines.append(f"{r['dataset_id']}: {r['kind']}, {r['n_prompts']} prompts ({r['source']})")
        if subs:
            lines.append(f"  subjects: {subs}{more}")
        if r["gold_counts"]:
            lines.append(f"  gold answers: {', '.join(f'{k}={v}' for k, v in r['gold_counts'].items())}")
        lines.append("  first prompt: " + (r["first_prompt"] or "").replace("\n", "\n    "))
    return "\n".join(lines)
