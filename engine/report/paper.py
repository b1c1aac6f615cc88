"""Tables for papers: a report's headline and per-model tables as Markdown, LaTeX (booktabs) or CSV,
every estimate with its interval (``0.612 [0.598, 0.627]``) and significance marks explained in a
footnote. They are the report's own tables (:class:`~engine.report.model.Table`), never recomputed."""

from __future__ import annotations

import csv
import io

from engine.errors import UserError
from engine.report.model import Report, Table

PAPER_FORMATS = ("md", "latex", "csv")


def _first_figure_table(report: Report, section: str) -> list[Table]:
    sec = report.section(section)
    if sec is None or not sec.figures or sec.figures[0].table is None:
        return []
    return [sec.figures[0].table]


def paper_tables(report: Report) -> list[Table]:
    """The headline section's tables; the rank-sets per model; the sequential section's table (a live
    run: each pair's CS at the stop; a replay: the stopping question over orders); the judge audit's
    tables (each judge's agreement figures with their intervals) — each when the report has it."""
    head = report.section("headline")
    out = list(head.tables) if head else []
    out += _first_figure_table(report, "ranksets")
    seq = report.section("sequential")
    if seq is not None:
        out += list(seq.tables) or _first_figure_table(report, "sequential")
    audit = report.section("judge_audit")
    if audit is not None:
        out += list(audit.tables)
    return out


def _md(t: Table) -> str:
    esc = [c.replace("|", "\\|") for c in t.columns]
    lines = [f"**{t.caption}**", "", "| " + " | ".join(esc) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(c.text.replace("|", "\\|") for c in row) + " |" for row in t.rows]
    if t.footnote:
        lines += ["", f"_{t.footnote}_"]
    return "\n".join(lines)


LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "−": "$-$",
    "²": "$^2$",
    "×": r"$\times$",
    "α": r"$\alpha$",
    "β": r"$\beta$",
    "–": "--",
}


def latex_escape(text: str) -> str:
    """Text safe inside a LaTeX table cell (the ten special characters and a few Unicode signs)."""
    return "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def _latex(t: Table) -> str:
    ncol = len(t.columns)
    lines = [
        r"\begin{table}[ht]",
        r"\centering",
        rf"\caption{{{latex_escape(t.caption)}}}",
        r"\begin{tabular}{" + "l" * ncol + "}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in t.columns) + r" \\",
        r"\midrule",
    ]
    lines += [" & ".join(latex_escape(c.text) for c in row) + r" \\" for row in t.rows]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if t.footnote:
        lines += [r"\par\smallskip", rf"{{\footnotesize {latex_escape(t.footnote)}}}"]
    lines.append(r"\end{table}")
    return "\n".join(lines)


def _csv(tables: list[Table]) -> str:
    """One tidy CSV: table, then the table's columns as written, then the raw value of each numeric cell
    (column ``<name> (value)``), so a script gets both the text and the number."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for i, t in enumerate(tables):
        if i:
            w.writerow([])
        w.writerow(["table", *t.columns, *[f"{c} (value)" for c in t.columns]])
        for row in t.rows:
            w.writerow(
                [
                    t.caption,
                    *[c.text for c in row],
                    *["" if c.value is None else repr(c.value) for c in row],
                ]
            )
        if t.footnote:
            w.writerow(["note", t.footnote])
    return buf.getvalue()


def paper_text(report: Report, fmt: str) -> str:
    """The report's tables in ``fmt`` ('md', 'latex' or 'csv')."""
    tables = paper_tables(report)
    if fmt == "md":
        return f"# {report.title}\n\n" + "\n\n".join(_md(t) for t in tables) + "\n"
    if fmt == "latex":
        return (
            "% "
            + report.title
            + " (needs \\usepackage{booktabs})\n"
            + "\n\n".join(_latex(t) for t in tables)
            + "\n"
        )
    if fmt == "csv":
        return _csv(tables)
    raise UserError(f"unknown table format {fmt!r}; allowed: {', '.join(PAPER_FORMATS)}")
