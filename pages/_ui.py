"""Shared Streamlit helpers for the pages (not a page itself: app.py lists the pages explicitly).

* :func:`db_path` -- the database the dashboard reads (``COUPLED_EVAL_DB`` or the default).
* :func:`q` -- one cached read-side call (``engine.queries`` or a named engine function) keyed on
  the database path + its modification time + the parameters: a write by a job invalidates it.
* :func:`safe` -- the same, turning a UserError into an explanatory empty state instead of a
  traceback.
* :func:`chart` / :func:`table` -- draw a figure / table with PNG, SVG, HTML / CSV downloads; the
  downloads are generated only when clicked (deferred callables), so pages stay fast.
* :func:`job_panel` -- live progress of background jobs (a fragment re-run every second).
"""

from __future__ import annotations

import importlib
import os
import re
import time
from pathlib import Path

import streamlit as st

from engine import export, jobs, queries, store
from engine.errors import UserError

PAGES = {
    "home": "pages/1_Home.py", "generate": "pages/2_Generate.py", "traces": "pages/3_Token_traces.py",
    "benchmark": "pages/4_Benchmark.py", "winrates": "pages/5_Win_rates.py", "ranksets": "pages/6_Rank_sets.py",
    "datamap": "pages/7_Data_map.py", "upload": "pages/8_Upload.py",
}


def db_path() -> Path:
    """The database the dashboard reads: $COUPLED_EVAL_DB or engine.store.DEFAULT_DB."""
    return Path(os.environ.get("COUPLED_EVAL_DB", str(store.DEFAULT_DB)))


def _resolve(fn: str):
    # "name" -> engine.queries.name; "module:name" -> engine.module.name
    if ":" in fn:
        mod, name = fn.split(":", 1)
        return getattr(importlib.import_module(f"engine.{mod}"), name)
    return getattr(queries, fn)


@st.cache_data(show_spinner=False, max_entries=512, ttl=3600)
def _cached(fn: str, sig: tuple[str, float], args: tuple, kwargs: tuple):
    return _resolve(fn)(sig[0], *args, **dict(kwargs))


def q(fn: str, *args, **kwargs):
    """Call ``fn(db, *args, **kwargs)`` through st.cache_data (key: db path, mtime, parameters)."""
    return _cached(fn, queries.db_signature(db_path()), tuple(args), tuple(sorted(kwargs.items())))


def safe(fn: str, *args, _empty: str | None = None, **kwargs):
    """:func:`q`, but a UserError (missing data, missing module, bad choice) becomes an info box."""
    try:
        return q(fn, *args, **kwargs)
    except queries.Unavailable as exc:
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
    ok, why = export.static_export_status()
    row = st.container(horizontal=True, gap="small")
    cols = [row, row, row, row]
    base = _slug(name)
    cols[0].download_button("PNG", data=lambda: export.figure_bytes(fig, "png"), file_name=f"{base}.png",
                            mime=export.MIME["png"], key=f"png_{key}", on_click="ignore", disabled=not ok,
                            help=None if ok else why, icon=":material/image:")
    cols[1].download_button("SVG", data=lambda: export.figure_bytes(fig, "svg"), file_name=f"{base}.svg",
                            mime=export.MIME["svg"], key=f"svg_{key}", on_click="ignore", disabled=not ok,
                            help=None if ok else why, icon=":material/draw:")
    cols[2].download_button("HTML", data=lambda: export.figure_bytes(fig, "html"), file_name=f"{base}.html",
                            mime=export.MIME["html"], key=f"html_{key}", on_click="ignore",
                            icon=":material/code:")
    if not ok:
        cols[3].caption(why)


def table(df, name: str, key: str | None = None, **kwargs) -> None:
    """Draw a table with a CSV download."""
    key = key or _slug(name)
    st.dataframe(df, key=f"table_{key}", hide_index=True, **kwargs)
    st.download_button("CSV", data=lambda: export.table_csv(df), file_name=f"{_slug(name)}.csv",
                       mime=export.MIME["csv"], key=f"csv_{key}", on_click="ignore", icon=":material/download:")


def empty_state(message: str, page: str | None = None, label: str | None = None) -> None:
    """An info box that says what to do next, with a link to the page that does it."""
    st.info(message)
    if page:
        st.page_link(PAGES[page], label=label or f"Go to {page}", icon=":material/arrow_forward:")


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(s)
    return f"{s // 3600}h {s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m {s % 60:02d}s"


def _job_row(j: jobs.JobStatus, allow_control: bool) -> None:
    icon = {"running": ":material/hourglass_top:", "done": ":green[:material/check_circle:]",
            "failed": ":red[:material/error:]", "cancelled": ":orange[:material/stop_circle:]",
            "killed": ":red[:material/dangerous:]"}[j.status]
    started = time.strftime("%H:%M:%S", time.localtime(j.started_at))
    st.markdown(f"{icon} **{j.kind}** `{j.job_id}` · {j.status} · started {started}"
                + (f" · resumed from `{j.resumed_from}`" if j.resumed_from else ""))
    if j.total:
        st.progress(j.fraction, text=f"{j.done}/{j.total} units · {j.tokens_per_s:.1f} tokens/s · "
                                     f"ETA {fmt_seconds(j.eta_s) if j.status == 'running' else '–'}"
                                     + (f" · {j.message}" if j.message else ""))
    elif j.status == "running":
        st.caption("starting… (loading models)" if j.kind == "generate" else "running…")
    st.caption("command: `python -m engine " + " ".join(j.args) + "`")
    if allow_control:
        c1, c2, _ = st.columns([1, 1, 4])
        if j.status == "running":
            if c1.button("Cancel", key=f"cancel_{j.job_id}", icon=":material/stop:"):
                jobs.cancel_job(j.job_id, db_path())
                st.rerun(scope="app")
        elif j.status in ("cancelled", "killed", "failed") and j.kind in ("generate", "score", "judge", "cluster"):
            if c2.button("Resume", key=f"resume_{j.job_id}", icon=":material/replay:"):
                jobs.resume_job(j.job_id, db_path())
                st.rerun(scope="app")
    if j.status in ("failed", "killed") and j.log_tail:
        with st.expander("log"):
            st.code(j.log_tail[-3000:])


def job_panel(kind: str | None = None, limit: int = 5, allow_control: bool = True) -> None:
    """Live list of recent jobs (of ``kind``): progress, tokens/s, ETA, cancel/resume.

    Re-runs itself every second while a job runs (st.fragment), so the page stays responsive;
    when the last running job finishes, the whole page reruns once to show the new data.
    """
    any_running = any(j.status == "running" for j in jobs.list_jobs(db_path(), kind=kind)[:limit])

    # Poll fast while something runs, slowly otherwise (a job started from another tab shows up).
    @st.fragment(run_every=1.0 if any_running else 5.0)
    def _panel():
        all_jobs = jobs.list_jobs(db_path(), kind=kind)[:limit]
        running = any(j.status == "running" for j in all_jobs)
        was_running = st.session_state.get(f"_jobs_running_{kind}", False)
        st.session_state[f"_jobs_running_{kind}"] = running
        if was_running and not running:
            st.rerun(scope="app")  # a job just finished: refresh the data on the page
        if not all_jobs:
            st.caption("No jobs yet.")
            return
        for j in all_jobs:
            with st.container(border=True):
                _job_row(j, allow_control)

    _panel()


def start_job(args: list[str], kind: str) -> str | None:
    """Start a background job and remember it in the session; errors become messages."""
    try:
        job_id = jobs.start_job(args, kind=kind, db=db_path(), env={"COUPLED_EVAL_DB": str(db_path())},
                                progress=args[0] in jobs.PROGRESS_COMMANDS)
    except (UserError, OSError) as exc:
        st.error(f"Could not start the job: {exc}")
        return None
    st.session_state["last_job"] = job_id
    st.toast(f"Started {kind} job {job_id}")
    return job_id


def ensure_app_navigation() -> None:
    """Make sure the page runs under app.py's st.navigation, not Streamlit's legacy pages/ mode.

    With a ``pages/`` folder next to app.py, Streamlit starts in its legacy multipage mode until
    app.py has called st.navigation once in this server process. A first request straight to a
    page URL (a bookmark after a restart) would then run the page file alone: no shared sidebar,
    and ``_ui.py`` listed as a page. Switch the mode off (it is process-wide) and rerun: app.py
    then runs as usual.
    """
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a future Streamlit without this class: nothing to fix
        return
    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        # Rerun only on a session's first run: a later run may carry a widget event (a click)
        # that a rerun would drop; it finishes in the legacy mode and the next run is normal.
        if not st.session_state.get("_app_navigation_seen"):
            st.session_state["_app_navigation_seen"] = True
            st.rerun()
    st.session_state["_app_navigation_seen"] = True


def header(title: str, caption: str | None = None) -> None:
    ensure_app_navigation()
    st.title(title)
    if caption:
        st.caption(caption)


DEMO_RUN = "demo-smollm2"
DEMO_ARGS = ["generate", "--models", "smollm2-135m", "smollm2-135m-int8", "--dataset", "demo",
             "--repeats", "5", "--modes", "coupled", "independent", "--run-id", DEMO_RUN]


def score_args(run_id: str, rule: str = "paper") -> list[str]:
    return ["score", "--db", str(db_path()), "--run", run_id, "--rule", rule]


def start_demo() -> str | None:
    """The first-run demo: generation on the packaged default models, then scoring, as one chain."""
    try:
        job_id = jobs.start_job(DEMO_ARGS + ["--db", str(db_path())], kind="generate", db=db_path(),
                                env={"COUPLED_EVAL_DB": str(db_path())}, then=[score_args(DEMO_RUN)])
    except (UserError, OSError) as exc:
        st.error(f"Could not start the demo: {exc}")
        return None
    st.session_state["last_job"] = job_id
    return job_id


@st.cache_data(show_spinner=False, ttl=600)
def available_models() -> list[dict]:
    """engine.models.list_models() as dicts (name, variant, vocab), or [] when unavailable."""
    try:
        from engine.models import list_models, spec_vocab_id
    except ImportError:
        return []
    out = []
    for s in list_models():
        try:
            vocab = spec_vocab_id(s)
        except Exception:  # vocab detection needs the tokenizer; the list still works without it
            vocab = None
        out.append({"name": s.name, "variant": getattr(s, "variant", ""), "vocab": vocab})
    return out


@st.cache_data(show_spinner=False, ttl=600)
def available_datasets() -> list[str]:
    try:
        from engine.tasks.datasets import list_datasets
    except ImportError:
        return []
    return list(list_datasets())


def generate_args(models: list[str], dataset: str, repeats: int, temperature: float, max_new_tokens: int,
                  modes: list[str], seed: int, limit: int | None = None, top_k: int = 0, top_p: float = 1.0,
                  record_traces: bool = True) -> list[str]:
    """The ``python -m engine generate`` arguments for the Generate form."""
    args = ["generate", "--models", *models, "--dataset", dataset, "--repeats", str(int(repeats)),
            "--temperature", str(float(temperature)), "--max-new-tokens", str(int(max_new_tokens)),
            "--modes", *modes, "--seed", str(int(seed)), "--top-k", str(int(top_k)), "--top-p", str(float(top_p)),
            "--db", str(db_path())]
    if limit:
        args += ["--limit", str(int(limit))]
    args += ["--traces", "on" if record_traces else "off"]  # explicit: the checkbox is what the user sees
    return args


def run_id_for_args(args: list[str]) -> str | None:
    """The run id a generate command will use (``--run-id`` if given), else None (derived by the engine)."""
    return args[args.index("--run-id") + 1] if "--run-id" in args else None


def start_generation(args: list[str], score_after: bool) -> str | None:
    """Start a generate job; with ``score_after``, score the run (its id from ``--run-id`` or derived) after."""
    run_id = run_id_for_args(args)
    if score_after and run_id is None:
        run_id = f"ui-{time.strftime('%Y%m%d-%H%M%S')}"
        args = args + ["--run-id", run_id]
    try:
        job_id = jobs.start_job(args, kind="generate", db=db_path(), env={"COUPLED_EVAL_DB": str(db_path())},
                                then=[score_args(run_id)] if score_after else None)
    except (UserError, OSError) as exc:
        st.error(f"Could not start the job: {exc}")
        return None
    st.session_state["last_job"] = job_id
    return job_id


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
    import pandas as pd
    return pd.DataFrame(list(rows))


def accuracy_rows(res: dict):
    """Flatten benchmark_compare's accuracy_by_mode into rows (mode, model, mu, ci_low, ci_high, n, k)."""
    import pandas as pd
    return pd.DataFrame([{"mode": mode, "model": m, **{k: v[k] for k in ("mu", "ci_low", "ci_high", "se", "n", "k")}}
                         for mode, per in res["accuracy_by_mode"].items() for m, v in per.items()])


def mcnemar_rows(res: dict):
    import pandas as pd
    return pd.DataFrame([{"mode": mode, "outcomes": kind, **v} for mode, per in res["mcnemar"].items()
                         for kind, v in per.items()])


def planner_rows(res: dict):
    import pandas as pd
    return pd.DataFrame([{"mode": mode, **row} for mode, plans in res["planner"]["plans"].items() for row in plans])


def unique_by(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    seen, out = set(), []
    for r in rows:
        k = tuple(r[x] for x in keys)
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def matrix(res: dict, key: str):
    return queries.matrix_of(res, key)


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
    import pandas as pd
    bt, elo = res["bradley_terry"], res["elo"]
    return pd.DataFrame([{"model": m, "bt_beta": bt["beta"][m], "bt_low": bt["ci"][m][0], "bt_high": bt["ci"][m][1],
                          "elo": elo["rating"][m], "elo_low": elo["ci"][m][0], "elo_high": elo["ci"][m][1]}
                         for m in res["models"]]).sort_values("bt_beta", ascending=False)


ARENA_JUDGES = queries.ARENA_JUDGES


def default_rank_models(available: list[str]) -> list[str]:
    """The paper's 12 Arena models when present, else the first 12."""
    from engine.ranking_io import default_models

    return default_models(available)


def arena_available() -> bool:
    return queries.arena_dir() is not None


def flagged_ids(prompts) -> list[str]:
    return prompts.loc[prompts["flagged"], "prompt_id"].tolist() if not prompts.empty else []


def bootstrap_text(b: dict) -> str:
    parts = [f"{k} = {v:.4f}" if isinstance(v, float) else f"{k} = {v}" for k, v in b.items()
             if not isinstance(v, (list, dict))]
    return ", ".join(parts)


def single_text(sg: dict) -> str:
    return ", ".join(f"{k} = {v:.3f}" if isinstance(v, float) else f"{k} = {v}" for k, v in sg.items()
                     if not isinstance(v, (list, dict)))


@st.cache_data(show_spinner="Validating…", max_entries=8)
def validate_upload(fmt: str, main: bytes, judge: bytes | None):
    """(normalised rows, problems as dicts) from engine.tasks.comparisons' validators (a pure read)."""
    from engine.tasks import comparisons
    if fmt == "csv":
        rows, problems = comparisons.validate_comparisons_csv(main)
    else:
        rows, problems = comparisons.validate_arena(main, judge)
    return rows, [{"file": p.file, "row": p.row, "column": p.column, "problem": p.message} for p in problems]


def problems_table(problems: list[dict]):
    import pandas as pd
    return pd.DataFrame(problems)


def n_models(rows) -> int:
    return len(set(rows["model_a"]) | set(rows["model_b"]))


def default_set_name(filename: str) -> str:
    stem = Path(filename).stem
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-")[:60] or "upload"


def uploads_dir() -> Path:
    return db_path().resolve().parent / "uploads"


def save_upload(filename: str, data: bytes) -> Path:
    """Save a validated upload under data/uploads/ (timestamped, sanitised name)."""
    d = uploads_dir()
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{time.strftime('%Y%m%d-%H%M%S')}-{default_set_name(filename)}{Path(filename).suffix.lower()}"
    p.write_bytes(data)
    return p


def start_import(fmt: str, main_name: str, main: bytes, judge_name: str | None, judge: bytes | None,
                 name: str, replace: bool) -> str | None:
    """Save the files and run ``python -m engine import comparisons`` as a job."""
    main_path = save_upload(main_name, main)
    args = ["import", "comparisons", str(main_path), "--db", str(db_path()), "--name", name, "--format", fmt]
    if judge is not None:
        args += ["--judge-file", str(save_upload(judge_name or "judge.json", judge))]
    if replace:
        args.append("--replace")
    try:
        job_id = jobs.start_job(args, kind="import", db=db_path(), progress=False,
                                env={"COUPLED_EVAL_DB": str(db_path())})
    except (UserError, OSError) as exc:
        st.error(f"Could not start the import: {exc}")
        return None
    return job_id


def default_models(names: list[str]) -> list[str]:
    """The packaged model and its int8 variant when registered (the demo pair), else the first two."""
    pair = [n for n in ("smollm2-135m", "smollm2-135m-int8") if n in names]
    return pair if len(pair) == 2 else names[:2]
