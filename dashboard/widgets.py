"""Widgets shared by the pages: header, empty states, charts and tables with downloads, number
formatting, and the row flatteners that turn an analysis result into the tables a page draws."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dashboard import downloads, navigation
from engine.errors import Unavailable, UserError

R = TypeVar("R")


def header(title: str, caption: str | None = None) -> None:
    st.title(title)
    if caption:
        st.caption(caption)


def safe(loader: Callable[..., R], *args: Any, _empty: str | None = None, **kwargs: Any) -> R | None:
    """``loader(*args, **kwargs)``, but a UserError (missing data, bad choice) becomes an info box."""
    try:
        return loader(*args, **kwargs)
    except Unavailable as exc:
        st.warning(f"Not available: {exc}")
    except UserError as exc:
        st.info((_empty + "\n\n" if _empty else "") + f"{exc}")
    return None


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_")[:80] or "figure"


def chart(fig, name: str, key: str | None = None) -> None:
    """Draw a Plotly figure with PNG / SVG / interactive-HTML downloads (generated on click)."""
    key = key or _slug(name)
    st.plotly_chart(fig, key=f"chart_{key}", config={"displaylogo": False})
    ok, why = downloads.static_export_status()
    row = st.container(horizontal=True, gap="small")
    cols = [row, row, row, row]
    base = _slug(name)
    cols[0].download_button("PNG", data=lambda: downloads.figure_bytes(fig, "png"), file_name=f"{base}.png",
                            mime=downloads.MIME["png"], key=f"png_{key}", on_click="ignore", disabled=not ok,
                            help=None if ok else why, icon=":material/image:")
    cols[1].download_button("SVG", data=lambda: downloads.figure_bytes(fig, "svg"), file_name=f"{base}.svg",
                            mime=downloads.MIME["svg"], key=f"svg_{key}", on_click="ignore", disabled=not ok,
                            help=None if ok else why, icon=":material/draw:")
    cols[2].download_button("HTML", data=lambda: downloads.figure_bytes(fig, "html"), file_name=f"{base}.html",
                            mime=downloads.MIME["html"], key=f"html_{key}", on_click="ignore",
                            icon=":material/code:")
    if not ok:
        cols[3].caption(why)


def table(df, name: str, key: str | None = None, **kwargs) -> None:
    """Draw a table with a CSV download."""
    key = key or _slug(name)
    st.dataframe(df, key=f"table_{key}", hide_index=True, **kwargs)
    st.download_button("CSV", data=lambda: downloads.table_csv(df), file_name=f"{_slug(name)}.csv",
                       mime=downloads.MIME["csv"], key=f"csv_{key}", on_click="ignore", icon=":material/download:")


def empty_state(message: str, page: str | None = None, label: str | None = None) -> None:
    """An info box that says what to do next, with a link to the page that does it."""
    st.info(message)
    if page:
        st.page_link(navigation.path(page), label=label or f"Go to {page}", icon=":material/arrow_forward:")


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


def accuracy_rows(res: dict):
    """Flatten benchmark_compare's accuracy_by_mode into rows (mode, model, mu, ci_low, ci_high, n, k)."""
    return pd.DataFrame([{"mode": mode, "model": m, **{k: v[k] for k in ("mu", "ci_low", "ci_high", "se", "n", "k")}}
                         for mode, per in res["accuracy_by_mode"].items() for m, v in per.items()])


def paired_rows(res: dict):
    """benchmark_compare's paired comparison (METHODS 7.1), one row per noise mode."""
    rows = []
    for mode, p in res["paired"].items():
        bt = p.get("bootstrap") or {}
        rows.append({"mode": mode, "diff A−B": p["diff"], "ci_low": p["ci_low"], "ci_high": p["ci_high"],
                     "p_value": p["p_value"], "SE": p["se"], "corr": p["corr"], "boot_ci_low": bt.get("ci_low"),
                     "boot_ci_high": bt.get("ci_high"), "MDE": p["mde"], "questions": p["n_questions"],
                     "repeats": p["n_repeats"]})
    return pd.DataFrame(rows)


def mcnemar_majority_rows(res: dict):
    """McNemar on one majority-vote outcome per question, one row per noise mode."""
    return pd.DataFrame([{"mode": mode, **v} for mode, v in res["mcnemar_majority"].items()])


def planner_rows(res: dict, kind: str = "mde_plans"):
    """The benchmark planner's rows ('mde_plans' or 'se_plans')."""
    return pd.DataFrame(res["planner"][kind])


def components_rows(res: dict):
    return pd.DataFrame([{"design": mode, **c} for mode, c in res["planner"]["components"].items()])


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


def rating_rows(res: dict):
    bt, elo = res["bradley_terry"], res["elo"]
    return pd.DataFrame([{"model": m, "bt_beta": bt["beta"][m], "bt_low": bt["ci"][m][0], "bt_high": bt["ci"][m][1],
                          "elo": elo["rating"][m], "elo_low": elo["ci"][m][0], "elo_high": elo["ci"][m][1]}
                         for m in res["models"]]).sort_values("bt_beta", ascending=False)


def flagged_ids(prompts) -> list[str]:
    return prompts.loc[prompts["flagged"], "prompt_id"].tolist() if not prompts.empty else []


def bootstrap_text(b: dict) -> str:
    parts = [f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in b.items()
             if not isinstance(v, (list, dict))]
    return ", ".join(parts)


def single_text(sg: dict) -> str:
    return ", ".join(f"{k} = {v:.3f}" if isinstance(v, float) else f"{k} = {v}" for k, v in sg.items()
                     if not isinstance(v, (list, dict)))
