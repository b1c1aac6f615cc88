"""``python -m engine report``: one shareable file with a run's (or a comparison set's) findings, their
uncertainty and how they were made; or, given lm-eval / Inspect logs, import them and report in one step.

    python -m engine report --run RUN [--out FILE.html] [--models A,B] [--alpha 0.05]
    python -m engine report lm_eval_out/a lm_eval_out/b [--out F]     # import, then report
    python -m engine report --set NAME                                # a stored comparison set
    python -m engine report --run RUN --format md|latex|csv           # tables for a paper
    python -m engine report --run RUN --models A,B --gate-margin 0.01  # with the release gate of B vs A
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from engine import config
from engine.commands._common import add_db, csv_list
from engine.errors import UserError

FORMATS = ("html", "md", "latex", "csv")
EXT = {"html": "html", "md": "md", "latex": "tex", "csv": "csv"}


def register(sub) -> None:
    p = sub.add_parser(
        "report",
        help="one self-contained HTML report (or paper tables) of a run or comparison set; "
        "given lm-eval / Inspect logs, imports them first",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="lm-eval output folders / results_*.json or Inspect .eval/.json logs: imported as one run "
        "(several paths = several models, paired by sample id), then reported",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--run", help="a scored run in the database")
    src.add_argument("--set", dest="set_name", metavar="NAME", help="a stored comparison set")
    add_db(p)
    p.add_argument(
        "--out",
        metavar="FILE",
        help="where to write (default: a name that says what it is, e.g. "
        "report_run-RUN_A_vs_B_DATE.html, in the current folder); '-': to stdout",
    )
    p.add_argument(
        "--format",
        default="html",
        choices=FORMATS,
        help="html: the whole report (default); md, latex, csv: its headline and per-model tables",
    )
    p.add_argument(
        "--models", help="comma-separated models to feature (the first two are the headline pair)"
    )
    p.add_argument(
        "--alpha", type=float, default=0.05, help="error level of the rank-sets and tests (default 0.05)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every resampling (default 0)")
    p.add_argument(
        "--gate-margin",
        type=float,
        metavar="M",
        help="--run: add the release gate (engine gate) of the headline pair at margin M: is the second "
        "model (B, the candidate) non-inferior to the first (A, the baseline)? Name them with --models A,B",
    )
    p.add_argument(
        "--label", choices=config.RANK_LABELS, help="--set: whose labels (default: human when present)"
    )
    p.add_argument("--name", help="PATHs: the run id of the import (default: harness-<task>)")
    p.add_argument(
        "--images",
        action="store_true",
        help="also embed a static PNG of each figure for readers without JavaScript (needs kaleido and "
        "Chromium; slower). Without it every figure is followed by the table of its numbers",
    )
    p.add_argument(
        "--include-host",
        action="store_true",
        help="name the machines (the run's host in the design section, the report's in its footer); "
        "without it a report names no host, and never a filesystem path",
    )
    p.set_defaults(func=run)


def _source(args) -> tuple[str | None, str | None]:
    """(run, set) to report, importing PATHs first when given."""
    if args.paths:
        if args.run or args.set_name:
            raise UserError("give log PATHs or --run / --set, not both")
        from engine.tasks.harness_import import import_harness

        res = import_harness(args.db, args.paths, name=args.name)
        print(
            f"imported {res.n_generations:,} samples of {len(res.models)} model(s) from {res.harness} "
            f"into {args.db} as run {res.run_id}",
            file=sys.stderr if args.out == "-" else sys.stdout,  # stdout holds the report then
        )
        return res.run_id, None
    if not (args.run or args.set_name):
        raise UserError("nothing to report: give --run RUN, --set NAME, or lm-eval / Inspect log PATHs")
    return args.run, args.set_name


def _build(args, run_id: str | None, set_name: str | None):
    from engine.report.build import run_report, set_report

    models = csv_list(args.models)
    common = dict(alpha=args.alpha, seed=args.seed, db_label=args.db, include_host=args.include_host)
    if set_name:
        if args.gate_margin is not None:
            raise UserError("--gate-margin gates a run (--run or log PATHs), not a comparison set")
        return set_report(args.db, set_name, label=args.label, models=models, **common)
    assert run_id is not None
    if args.gate_margin is not None:
        from engine.stats.gate import check_margin

        check_margin(args.gate_margin)
    return run_report(args.db, run_id, models=models, gate_margin=args.gate_margin, **common)


def run(args) -> int:
    import dataclasses

    from engine.report.build import report_file_name
    from engine.report.paper import paper_text
    from engine.report.render_html import report_html, static_images

    t0 = time.perf_counter()
    out = None if args.out in (None, "-") else Path(args.out)
    if out is not None and out.parent and not out.parent.exists():
        raise UserError(f"--out folder does not exist: {out.parent}")
    run_id, set_name = _source(args)
    rep = _build(args, run_id, set_name)
    images = static_images(rep) if args.format == "html" and args.images and rep.n_figures else None
    # the footer's time is the command's: from its start to the page's last part
    rep = dataclasses.replace(rep, seconds=time.perf_counter() - t0)
    text = report_html(rep, images=images) if args.format == "html" else paper_text(rep, args.format)
    what = f"{len(rep.sections)} sections, {rep.n_figures} figures"
    if args.out == "-":  # the report on stdout for a pipe; the line about it on stderr
        sys.stdout.write(text)
        sys.stdout.flush()
        print(f"wrote the report to stdout ({what}) in {rep.seconds:.1f} s", file=sys.stderr)
        return 0
    out = out or Path(report_file_name(run_id, set_name, rep.models, EXT[args.format]))
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB, {what}) in {rep.seconds:.1f} s")
    return 0
