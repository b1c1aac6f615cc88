"""Tables for papers: a report's headline and per-model tables as Markdown, LaTeX (booktabs) or CSV,
every estimate with its interval (``0.612 [0.598, 0.627]``) and significance marks explained in a
footnote. They are the report's own tables (:class:`~engine.report.model.Table`), never recomputed."""

from __future__ import annotations

import csv
import io
import unicodedata

from engine.csvsafe import csv_cell
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


def md_escape(text: str) -> str:
    """Text safe in a Markdown table cell or heading: one line (newlines as spaces), ``\\`` and ``|``
    escaped (the cell stays one cell), ``<`` / ``>`` escaped (no HTML tag, no autolink) and ``](``
    broken (no inline link or image: a name cannot load a remote image where the file is viewed)."""
    out = " ".join(str(text).splitlines()).replace("\\", "\\\\")
    for ch in "|<>":
        out = out.replace(ch, "\\" + ch)
    return out.replace("](", "]\\(")


def _md(t: Table) -> str:
    esc = [md_escape(c) for c in t.columns]
    lines = [
        f"**{md_escape(t.caption)}**",
        "",
        "| " + " | ".join(esc) + " |",
        "|" + "---|" * len(t.columns),
    ]
    lines += ["| " + " | ".join(md_escape(c.text) for c in row) + " |" for row in t.rows]
    if t.footnote:
        lines += ["", f"_{md_escape(t.footnote)}_"]
    return "\n".join(lines)


LATEX_SPECIAL = {
    "\\": r"$\backslash$",
    "&": r"\&",
    "%": r"\%",
    "$": r"$\$$",  # math: the text dollar of OT1 fonts needs a bitmap TS1 font
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\~{}",
    "^": r"\^{}",
    "<": r"$<$",
    ">": r"$>$",
    "|": r"$|$",
    '"': "''",
    "−": "$-$",
    "²": "$^2$",
    "×": r"$\times$",
    "–": "--",
    "—": "---",
    "·": r"$\cdot$",
    "±": r"$\pm$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≈": r"$\approx$",
    "→": r"$\rightarrow$",
    "…": r"\ldots{}",
    "√": r"$\surd$",
    "‘": "`",
    "’": "'",
    "“": "``",
    "”": "''",
    "\u00a0": "~",
    "ß": r"\ss{}",
    "ø": r"\o{}",
    "Ø": r"\O{}",
    "æ": r"\ae{}",
    "Æ": r"\AE{}",
    "œ": r"\oe{}",
    "Œ": r"\OE{}",
    "å": r"\aa{}",
    "Å": r"\AA{}",
    "ł": r"\l{}",
    "Ł": r"\L{}",
    "ı": r"\i{}",
}
# Greek letters as math (Δ, α, θ, σ, ... in captions and names); capitals drawn like Latin letters as those
_GREEK = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega"
).split()
_LATIN_LOOKING = dict(
    zip("Alpha Beta Epsilon Zeta Eta Iota Kappa Mu Nu Omicron Rho Tau Chi".split(), "ABEZHIKMNOPTX")
)
for _i, _name in enumerate(_GREEK):  # U+03A2 and U+03C2 (final sigma) sit between rho and sigma
    _cap = _name.capitalize()
    LATEX_SPECIAL[chr(0x3B1 + _i + (_i > 16))] = "o" if _name == "omicron" else rf"$\{_name}$"
    LATEX_SPECIAL[chr(0x391 + _i + (_i > 16))] = _LATIN_LOOKING.get(_cap, rf"$\{_cap}$")
LATEX_SPECIAL["ς"] = r"$\varsigma$"
# combining accents (a letter + accent after NFD) -> LaTeX accent commands that pdflatex's OT1/T1 fonts draw
_ACCENTS = {
    "\u0300": "`",
    "\u0301": "'",
    "\u0302": "^",
    "\u0303": "~",
    "\u0304": "=",
    "\u0306": "u",
    "\u0307": ".",
    "\u0308": '"',
    "\u030a": "r",
    "\u030b": "H",
    "\u030c": "v",
    "\u0327": "c",
    "\u0328": "k",
}


def _latex_char(ch: str) -> str:
    """One character LaTeX-safe (pdflatex, any input encoding): ASCII as is or escaped, known signs
    and Greek letters as commands, an accented letter as an accent command over its base letter, and
    anything else (CJK, emoji, ...) as a visible ``[U+XXXX]`` code point, so a table always compiles."""
    if ch in LATEX_SPECIAL:
        return LATEX_SPECIAL[ch]
    if ch.isascii():
        return ch if ch.isprintable() else " "
    parts = unicodedata.normalize("NFD", ch)
    base, marks = parts[0], parts[1:]
    if base.isascii() and base.isalpha() and marks and all(m in _ACCENTS for m in marks):
        out = "\\i" if base == "i" else "\\j" if base == "j" else base  # dotless under an accent
        for m in marks:
            out = f"\\{_ACCENTS[m]}{{{out}}}"
        return out
    return f"[U+{ord(ch):04X}]"


def latex_escape(text: str) -> str:
    """Text safe inside a LaTeX table cell, compiled by pdflatex: the special characters escaped, Greek
    letters and math signs as math, accented letters as accent commands, any other non-ASCII
    character as its code point (:func:`_latex_char`)."""
    return "".join(_latex_char(ch) for ch in str(text))


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
    (column ``<name> (value)``), so a script gets both the text and the number. Every cell goes through
    :func:`engine.csvsafe.csv_cell`: a name or an estimate that starts like a formula opens as text."""
    rows: list[list[str]] = []
    for i, t in enumerate(tables):
        if i:
            rows.append([])
        rows.append(["table", *t.columns, *[f"{c} (value)" for c in t.columns]])
        for row in t.rows:
            rows.append(
                [
                    t.caption,
                    *[c.text for c in row],
                    *["" if c.value is None else repr(c.value) for c in row],
                ]
            )
        if t.footnote:
            rows.append(["note", t.footnote])
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[csv_cell(c) for c in r] for r in rows])
    return buf.getvalue()


def paper_text(report: Report, fmt: str) -> str:
    """The report's tables in ``fmt`` ('md', 'latex' or 'csv')."""
    tables = paper_tables(report)
    if fmt == "md":
        return f"# {md_escape(report.title)}\n\n" + "\n\n".join(_md(t) for t in tables) + "\n"
    if fmt == "latex":
        return (
            "% "
            + latex_escape(report.title)  # one line: a newline in a name would end the comment
            + " (needs \\usepackage{booktabs})\n"
            + "\n\n".join(_latex(t) for t in tables)
            + "\n"
        )
    if fmt == "csv":
        return _csv(tables)
    raise UserError(f"unknown table format {fmt!r}; allowed: {', '.join(PAPER_FORMATS)}")
