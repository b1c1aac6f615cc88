"""Helpers shared by the command modules: the --db argument, JSON output, small argument parsers."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from engine.config import DEFAULT_DB
from engine.errors import UserError


def add_db(p, help: str | None = "database file (default: %(default)s)") -> None:
    p.add_argument("--db", default=str(DEFAULT_DB), help=help)


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _clean(o):
    """NaN/inf -> null so the output is strict JSON."""
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def print_analysis(obj) -> int:
    """An analysis result as strict JSON (NaN -> null, numpy -> Python), indent 1."""
    try:
        print(json.dumps(_clean(obj), default=_json_default, indent=1))
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader has gone, nothing to report
        sys.stdout = None
    return 0


def print_json(obj) -> int:
    """A task summary as JSON, indent 2 (values JSON does not know are printed with str)."""
    print(json.dumps(obj, indent=2, default=str))
    return 0


def csv_list(s: str | None) -> list[str] | None:
    """'a, b,c' -> ['a', 'b', 'c']; None stays None; an empty list is a UserError."""
    if s is None:
        return None
    items = [x.strip() for x in s.split(",") if x.strip()]
    if not items:
        raise UserError(f"empty list {s!r}")
    return items


def read_text_file(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{what} not found: {p}")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} {p} is not UTF-8 text") from None


# --------------------------------------------------------------------------- human summaries


def add_output_args(p) -> None:
    """--json (full result on stdout) and --out FILE (full result to a file); default: a summary."""
    p.add_argument(
        "--json", action="store_true", help="print the full result as JSON instead of the summary"
    )
    p.add_argument(
        "--out",
        metavar="FILE",
        help="write the full result as JSON to FILE (the summary still prints); "
        "'-': the JSON to stdout, as --json",
    )


def _strict_json(obj) -> str:
    return json.dumps(_clean(obj), default=_json_default, indent=1)


def emit(args, result, summary) -> int:
    """Print ``summary`` (a string, or a callable returning one) or, with --json, the full result.

    With --out the full result is also written to that file (strict JSON: NaN -> null); ``--out -``
    means stdout, as everywhere in the CLI: the full result instead of the summary, as with --json.
    """
    out = getattr(args, "out", None)
    if out == "-":
        return print_analysis(result)
    if out:
        path = Path(out)
        if path.parent and not path.parent.exists():
            raise UserError(f"--out folder does not exist: {path.parent}")
        path.write_text(_strict_json(result) + "\n", encoding="utf-8")
    if getattr(args, "json", False):
        return print_analysis(result)
    text = summary() if callable(summary) else str(summary)
    try:
        print(text + (f"\n(full result: {out})" if out else "\n(full result: --json or --out FILE)"))
        sys.stdout.flush()
    except BrokenPipeError:
        sys.stdout = None
    return 0


def fmt(x, digits: int = 3) -> str:
    """A number for a summary table: ints with separators, floats rounded, None/NaN as '-'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def table(rows: list[dict], columns: list[str] | None = None, digits: int = 3) -> str:
    """A plain-text table (left-aligned text, right-aligned numbers) for CLI summaries."""
    if not rows:
        return "(no rows)"
    cols = columns or list(rows[0])
    cells = [[fmt(r.get(c), digits) for c in cols] for r in rows]
    num = [all(isinstance(r.get(c), (int, float)) or r.get(c) is None for r in rows) for c in cols]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]

    def line(vals):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(vals, widths, num)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths]), *(line(r) for r in cells)])


def add_run_label_args(p, judge_help: str) -> None:
    """--run, --judge, --human SET, --mode: a judged run and its human labels (judge-audit,
    run-ranksets)."""
    p.add_argument("--run", required=True)
    p.add_argument("--judge", required=True, help=judge_help)
    p.add_argument(
        "--human",
        metavar="SET",
        help="the comparison set with the human labels (default: every set whose meta names the run)",
    )
    p.add_argument(
        "--mode", default=None, choices=("coupled", "independent"), help="default: both modes"
    )
