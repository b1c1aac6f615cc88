"""The comparison-source arguments shared by ``ranksets`` and ``winrates`` (one source: a CSV, Arena
JSON lines, or a stored set) and their loader."""

from __future__ import annotations

from engine.commands._common import add_db


def add_source(p) -> None:
    src = p.add_argument_group("comparisons (one source)")
    src.add_argument(
        "--comparisons",
        metavar="FILE",
        help="CSV with model_a, model_b, human_winner, judge_winner (+ optional prompt_id); "
        "winners a, b, tie, or empty for no label",
    )
    src.add_argument("--human", metavar="FILE", help="Chatbot Arena JSON lines with the human labels")
    src.add_argument(
        "--judge", metavar="FILE", help="Chatbot Arena JSON lines with the judge labels (line-aligned)"
    )
    src.add_argument(
        "--set", dest="set_name", metavar="NAME", help="a comparison set stored in the database"
    )
    add_db(src, "database for --set")
    p.add_argument("--models", help="comma-separated models to keep (only comparisons between them)")


def models_arg(args) -> list[str] | None:
    if not args.models:
        return None
    return [m.strip() for m in args.models.split(",") if m.strip()]


def load(args):
    from engine.analysis.comparisons import load_comparisons

    return load_comparisons(
        args.comparisons,
        human=args.human,
        judge=args.judge,
        db=args.db,
        set_name=args.set_name,
        models=models_arg(args),
    )
