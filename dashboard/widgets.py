"""Widgets shared by the pages: header, empty states, charts and tables with downloads, number
formatting, and the row flatteners that turn an analysis result into the tables a page draws."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd
import streamlit as st

from dashboard import downloads, navigation
from engine.analysis.notices import plural  # noqa: F401  (pages: ui.plural(n, "repeat"))
from engine.errors import Unavailable, UserError

if TYPE_CHECKING:
    from engine.analysis.benchmark_result import BenchmarkComparison
    from engine.analysis.stats_records import BootstrapCI, SingleGeneration

R = TypeVar("R")


def header(title: str, caption: str | None = None) -> None:
    image_format_choice()
    st.title(title)
    if caption:
        st.caption(caption)


_MD_SPECIAL = re.compile(r"([\\`*_\[\]{}<>#|~:$!])")


def md_escape(text: object) -> str:
    """``text`` shown as written wherever Streamlit reads Markdown (markdown, caption, info, warning,
    subheader, labels, help): its special characters escaped. THE function every string from data
    (run, model, judge, set and dataset names, prompt text, notes that quote them) goes through there: a
    name such as ``![x](https://host/pixel.png)`` stays text and loads nothing, ``[..]`` is no link,
    ``:name[..]`` no directive, ``*..*`` no emphasis, ``<..>`` no tag, ``$..$`` no formula; a pattern
    such as ``hf:REPO[:CONFIG][:SPLIT]`` or ``results_*.json`` keeps its brackets, colons and stars."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def md_code(text: object) -> str:
    """``text`` as an inline code span (shown verbatim, nothing inside it is Markdown): fenced by one
    backtick more than the longest run of backticks in it, so a name with backticks cannot end the span
    early (CommonMark code spans)."""
    t = str(text).replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall(r"`+", t)), default=0) + 1)
    pad = " " if t.startswith("`") or t.endswith("`") else ""  # a space each side, stripped when shown
    return f"{fence}{pad}{t}{pad}{fence}"


def safe(loader: Callable[..., R], *args: Any, _empty: str | None = None, **kwargs: Any) -> R | None:
    """``loader(*args, **kwargs)``, but a UserError (missing data, bad choice) becomes an info box."""
    try:
        return loader(*args, **kwargs)
    except Unavailable as exc:
        st.warning(f"Not available: {md_escape(exc)}")
    except UserError as exc:  # its message quotes names from data
        st.info((_empty + "\n\n" if _empty else "") + md_escape(exc))
    return None


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")[:80] or "figure"


ExportContext = downloads.ExportContext
IMAGE_FORMAT_KEY = "export_image_format"


def export_context(
    page: str, run: str | None = None, set_name: str | None = None, models=()
) -> downloads.ExportContext:
    """What this page's downloads are about (run or set, models), from the page's widgets."""
    return downloads.ExportContext(
        page, run=run, set_name=set_name, models=tuple(str(m) for m in (models or ()) if m)
    )


def image_format_choice() -> None:
    """The sidebar choice of the chart camera button's format (PNG or SVG), one per page."""
    st.sidebar.segmented_control(
        "Chart camera button saves",
        ["png", "svg"],
        default="png",
        format_func=str.upper,
        key=IMAGE_FORMAT_KEY,
        help="The camera icon in a chart's toolbar downloads the chart as an image, "
        "named after the run, models and date.",
    )


def chart(fig, name: str, key: str | None = None, ctx: downloads.ExportContext | None = None) -> None:
    """Draw a Plotly figure. Its toolbar's camera button saves a PNG / SVG (the browser renders
    it: fast); an HTML button downloads the interactive figure. Files are named by
    :func:`dashboard.downloads.export_name` (``name``, then run / set, models, date)."""
    key = key or _slug(name)
    stem = downloads.export_name(name, "", ctx)
    fmt = st.session_state.get(IMAGE_FORMAT_KEY) or "png"
    st.plotly_chart(fig, key=f"chart_{key}", config=downloads.modebar_config(stem, fmt))
    row = st.container(horizontal=True, gap="small", vertical_alignment="center")
    row.download_button(
        "HTML",
        data=lambda: downloads.figure_bytes(fig, "html"),
        file_name=f"{stem}.html",
        mime=downloads.MIME["html"],
        key=f"html_{key}",
        on_click="ignore",
        icon=":material/code:",
        help="the interactive chart as one HTML file (works offline)",
    )
    row.caption(f"{fmt.upper()}: the camera icon in the chart's toolbar")


def report_button(run: str, models=(), key: str = "report") -> None:
    """ "Download report": the run's shareable HTML report (one offline file; ``python -m engine
    report``), built when clicked (seconds; about a minute for the paper's MMLU run), named after run,
    models and date."""
    from dashboard import loaders

    models = tuple(str(m) for m in models if m)
    st.download_button(
        "Download report",
        data=lambda: loaders.report_html(run, models),
        file_name=downloads.report_name(run, models),
        mime=downloads.MIME["html"],
        key=key,
        on_click="ignore",
        icon=":material/summarize:",
        help="one HTML file with the headline, design, every analysis this run supports, methods "
        "and references; opens offline. Same as: python -m engine report --run " + run,
    )


def table(
    df,
    name: str,
    key: str | None = None,
    ctx: downloads.ExportContext | None = None,
    wrap: int = 0,
    na_rep: str | None = None,
    **kwargs,
):
    """Draw a table with a CSV download (named like the charts; floats without noise). Returns
    what ``st.dataframe`` returns (the selection, with ``on_select``). ``wrap=N``: a static table
    of the first N rows whose long cells wrap instead of being cut (the CSV has every row).
    ``na_rep``: what an empty cell shows (e.g. "–" instead of "None"; numbers to 4 decimals)."""
    key = key or _slug(name)
    if wrap:
        shown = st.table(df.head(wrap).reset_index(drop=True).style.hide(axis="index"))
        if len(df) > wrap:
            st.caption(f"First {wrap:,} of {len(df):,} rows; the CSV has all of them.")
    else:
        data = df.style.format(na_rep=na_rep, precision=4) if na_rep is not None else df
        shown = st.dataframe(data, key=f"table_{key}", hide_index=True, **kwargs)
    st.download_button(
        "CSV",
        data=lambda: downloads.table_csv(df),
        file_name=downloads.export_name(name, "csv", ctx),
        mime=downloads.MIME["csv"],
        key=f"csv_{key}",
        on_click="ignore",
        icon=":material/download:",
    )
    return shown


def unit_from_selection(selection, units) -> tuple[str, int] | None:
    """(prompt_id, repeat) of the selected row of a table of units (a dataframe selection:
    ``{"selection": {"rows": [i]}}``), None when nothing is selected."""
    rows = ((selection or {}).get("selection") or {}).get("rows") or []
    if not rows or rows[0] >= len(units):
        return None
    rec = units.iloc[int(rows[0])]
    return str(rec["prompt_id"]), int(rec["repeat"])


def open_unit_on_select(
    table_key: str, units, prompt_key: str, repeat_key: str, clear_keys=()
) -> Callable[[], None]:
    """An ``on_select`` callback for ``table(..., key=table_key)``: the selected unit's prompt and
    repeat go into the unit widgets (callbacks run before the page, so the widgets can be set)."""

    def select() -> None:
        unit = unit_from_selection(st.session_state.get(f"table_{table_key}"), units)
        if unit is None:
            return
        for k in clear_keys:
            st.session_state[k] = ""
        st.session_state[prompt_key], st.session_state[repeat_key] = unit

    return select


def decision_rows(decisions: pd.DataFrame) -> pd.DataFrame:
    """engine.analysis.traces.step_decisions as the table the Token traces page shows."""
    d = decisions
    return pd.DataFrame(
        {
            "model": d["model"],
            "chosen": d["chosen"],
            "log p": d["logp_chosen"],
            "g": d["g_chosen"],
            "log p + g": d["s_chosen"],
            "runner-up (top-K)": d["runner_up"],
            "runner-up log p": d["logp_runner_up"],
            "runner-up g": d["g_runner_up"],
            "runner-up log p + g": d["s_runner_up"],
            "margin": d["margin"],
        }
    ).round(4)


def empty_state(message: str, page: str | None = None, label: str | None = None) -> None:
    """An info box that says what to do next, with a link to the page that does it."""
    st.info(message)
    if page:
        st.page_link(
            navigation.path(page), label=label or f"Go to {page}", icon=":material/arrow_forward:"
        )


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(s)
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def prompt_labels(prompts) -> dict[str, str]:
    """prompt_id -> 'id · first 80 characters of the question' for select boxes."""
    out = {}
    for pid, qtext in zip(prompts["prompt_id"], prompts.get("question", [None] * len(prompts))):
        text = "" if qtext is None or (isinstance(qtext, float)) else str(qtext).replace("\n", " ")
        out[pid] = f"{pid} · {text[:80]}" if text else str(pid)
    return out


def page_offset(page: int, size: int) -> int:
    return (int(page) - 1) * int(size)


def fmt(v, spec: str) -> str:
    """Format a number, '–' for None/NaN."""
    if v is None or (isinstance(v, float) and v != v):
        return "–"
    return format(v, spec)


def records(rows):
    return pd.DataFrame(list(rows))


def accuracy_rows(res: BenchmarkComparison) -> pd.DataFrame:
    """Flatten benchmark_compare's accuracy_by_mode into rows (mode, model, mu, ci_low, ci_high, n,
    k)."""
    return pd.DataFrame(
        [
            {
                "mode": mode,
                "model": m,
                "mu": v.mu,
                "ci_low": v.ci_low,
                "ci_high": v.ci_high,
                "se": v.se,
                "n": v.n,
                "k": v.k,
            }
            for mode, per in res.accuracy_by_mode.items()
            for m, v in per.items()
        ]
    )


def paired_rows(res: BenchmarkComparison) -> pd.DataFrame:
    """benchmark_compare's paired comparison (docs/METHODS.md 7.1), one row per noise mode."""
    rows = []
    for mode, p in res.paired.items():
        bt = p.bootstrap
        rows.append(
            {
                "mode": mode,
                "diff A−B": p.diff,
                "ci_low": p.ci_low,
                "ci_high": p.ci_high,
                "p_value": p.p_value,
                "SE": p.se,
                "corr": p.corr,
                "boot_ci_low": None if bt is None else bt.ci_low,
                "boot_ci_high": None if bt is None else bt.ci_high,
                "MDE": p.mde,
                "questions": p.n_questions,
                "repeats": p.n_repeats,
            }
        )
    return pd.DataFrame(rows)


def mcnemar_majority_rows(res: BenchmarkComparison) -> pd.DataFrame:
    """McNemar on one majority-vote outcome per question, one row per noise mode."""
    return pd.DataFrame([{"mode": mode, **v.to_dict()} for mode, v in res.mcnemar_majority.items()])


def planner_rows(res: BenchmarkComparison, kind: str = "mde_plans") -> pd.DataFrame:
    """The benchmark planner's rows ('mde_plans' or 'se_plans')."""
    return pd.DataFrame(getattr(res.planner, kind))


def components_rows(res: BenchmarkComparison) -> pd.DataFrame:
    return pd.DataFrame([{"design": mode, **c.to_dict()} for mode, c in res.planner.components.items()])


def unique_by(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        k = tuple(r[x] for x in keys)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def avg_interval_args(t, modes):
    """(labels, values, lows, highs, groups) for interval_figure from winrates_view's table."""
    labels, vals, lo, hi, groups = [], [], [], [], []
    for mode in modes:
        labels += t["model"].tolist()
        vals += t[f"{mode}_winrate"].tolist()
        lo += t[f"{mode}_ci_low"].tolist()
        hi += t[f"{mode}_ci_high"].tolist()
        groups += [mode] * len(t)
    return labels, vals, lo, hi, groups


def flagged_ids(prompts) -> list[str]:
    return prompts.loc[prompts["flagged"], "prompt_id"].tolist() if not prompts.empty else []


def bootstrap_text(b: BootstrapCI) -> str:
    """'se = …, ci_low = …, ci_high = …' (the bootstrap's fields, in order)."""
    return ", ".join(
        f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in b.to_dict().items()
    )


def single_text(sg: SingleGeneration) -> str:
    """'best = …, worst = …, spread = …' (the scalar fields; the k scores are in the JSON)."""
    return ", ".join(
        f"{k} = {v:.3f}" if isinstance(v, float) else f"{k} = {v}"
        for k, v in sg.to_dict().items()
        if not isinstance(v, (list, dict))
    )
