"""Home: what is in the database, links to every analysis, a one-click first-run demo and the
headline findings of the latest scored run (updated live while a job runs, no reload needed)."""

import shlex

import streamlit as st

from dashboard import jobs_panel, navigation, refresh
from dashboard import loaders as L
from dashboard import summary_view as sv
from dashboard import widgets as ui
from engine.analysis.notices import Notice
from engine.analysis.overview import Overview

ui.header("Coupled Eval", "Evaluate and rank LLMs with coupled token generation and honest uncertainty.")


def _counters(counts: Overview) -> None:
    cols = st.columns(6)
    for col, (label, n) in zip(
        cols,
        [
            ("Runs", counts.runs),
            ("Models", counts.models),
            ("Generations", counts.generations),
            ("Token traces", counts.token_traces),
            ("Scores", counts.scores),
            ("Comparison sets", counts.comparison_sets),
        ],
    ):
        col.metric(label, f"{n:,}")


def _demo_text() -> None:
    st.markdown(
        "The demo asks the packaged **SmolLM2-135M-Instruct** and its **int8** variant 40 everyday "
        'numeric questions ("How many legs does a spider have?"), in **coupled** mode (both models '
        "share the same Gumbel noise) and **independent** mode, 3 repeats each, then scores the answers "
        "with the numeric rule (the last number in the reply). It runs in the background, about 2 minutes "
        "on 2 idle CPU cores including the one-time model conversion (measured on this project's 2-core "
        "CI-class machine, otherwise idle); follow it below."
    )
    st.code(" ".join(["python -m engine", *jobs_panel.DEMO_ARGS]), language="bash")


def _demo_button(label: str, demo_running: bool) -> None:
    if st.button(
        label,
        type="primary",
        icon=":material/rocket_launch:",
        key="run_demo",
        disabled=demo_running,
        help="a demo is running" if demo_running else None,
    ):
        jobs_panel.start_demo()
        st.rerun()


def _demo_box(counts: Overview, demo_running: bool, demo_stored: bool) -> None:
    """The demo: a box of its own on an empty database or while it runs; otherwise it stays
    reachable in an expander and can be run again (the same command: a finished demo is re-scored,
    an interrupted one resumes where it stopped)."""
    if counts.generations == 0 or demo_running:
        with st.container(border=True):
            st.subheader("First run: the demo")
            if counts.generations == 0 and not demo_running:
                st.markdown("The database is empty.")
            _demo_text()
            _demo_button("Run the demo", demo_running)
        return
    with st.expander("The demo: SmolLM2 vs its int8 variant on 40 everyday questions"):
        _demo_text()
        if demo_stored:
            st.caption(
                f"Its run `{jobs_panel.DEMO_RUN}` is stored and scored: choose it below to see its "
                "findings. Running it again resumes it if it was interrupted and scores it again."
            )
        _demo_button("Run the demo again" if demo_stored else "Run the demo", demo_running)


def _choose_run(runs: list[str]) -> str | None:
    """The run whose findings Home shows: the newest scored run unless the user picks another."""
    if not runs:
        return None
    if st.session_state.get("home_run") not in runs:
        # a run that is gone (or none chosen yet): the newest run whose findings Home can show, never
        # one it can only show as an error (scores without gold answers, a rule without scores)
        st.session_state["home_run"] = next((r for r in runs if L.summary_problem(r) is None), runs[0])
    return st.selectbox(
        "Headline findings of run",
        runs,
        key="home_run",
        format_func=lambda r: f"{r} (newest scored)" if r == runs[0] else r,
        help="every scored run, newest first",
    )


def _warnings(s) -> None:
    """The analysis' typed warnings next to the numbers they qualify (a small sample first)."""
    for w in s.warnings:
        if w.kind is Notice.SMALL_SAMPLE:
            st.warning(
                f"**Small sample.** {ui.md_escape(w.message[0].upper() + w.message[1:])}.",
                icon=":material/warning:",
            )
    for w in s.warnings:
        if w.kind is not Notice.SMALL_SAMPLE:
            st.warning(
                ui.md_escape(w.message[0].upper() + w.message[1:]) + ".", icon=":material/warning:"
            )


def _summary(s) -> None:
    with st.container(border=True):
        st.subheader(f"Headline findings: run {ui.md_code(s.run)}")
        st.caption(
            f"{ui.md_escape(', '.join(s.models))} · dataset {ui.md_code(s.dataset_id)} · rule `{s.rule}` · "
            f"{ui.plural(s.n_questions, 'question')} × {ui.plural(s.n_repeats, 'repeat')} · "
            f"{sv.chance_text(s)}"
            + (
                f" · {s.n_generations:,} generations in {ui.fmt_seconds(s.generation_s)}"
                if s.generation_s
                else ""
            )
        )
        _warnings(s)
        st.table(sv.accuracy_rows(s))  # static: a few rows, readable as text
        for p in s.pairs:
            c1, c2, c3 = st.columns(3)
            c1.metric(
                "Agreement, coupled",
                sv.pct(sv.agreement(p, "coupled")),
                help="share of units (question, repeat) where both models give the same answer",
            )
            c2.metric("Agreement, independent", sv.pct(sv.agreement(p, "independent")))
            c3.metric("Variance saving of coupling", sv.pct(p.variance_saving), help=sv.saving_help(p))
            st.caption(sv.pair_caption(p))
        ls = ui.safe(L.live_stop, s.run) if s.run in L.sequential_runs() else None
        for line in sv.sequential_lines(ls) if ls else []:
            st.caption(ui.md_escape(line))
        st.caption(
            "Accuracy CI: 95% t interval over questions (questions are clusters, repeats dependent). "
            "Same numbers from the CLI: "
            + ui.md_code(f"python -m engine summary --run {shlex.quote(s.run)}")
            + "."
        )
        c1, c2, c3 = st.columns(3)
        for col, key in zip((c1, c2, c3), ("benchmark", "traces", "datamap")):
            page = navigation.BY_KEY[key]
            col.page_link(page.path, label=page.link_label, icon=page.icon)


# Counters, the demo box and the summary live in one fragment that re-runs every 2 s while a job
# runs (every 10 s otherwise), so they follow the run with no page reload. The report's Download
# button sits below it, outside: a button that the fragment re-renders while it is clicked loses the
# click (its file is registered anew on every re-run); the fragment says which run it is for, and
# re-runs the page when that changes.
@st.fragment(run_every=refresh.period(jobs_panel.any_job_running()))
def _live() -> None:
    running = jobs_panel.any_job_running()
    demo_running = jobs_panel.demo_running()
    counts = L.overview_live()
    _counters(counts)
    scored = L.scored_runs_live()
    _demo_box(counts, demo_running, jobs_panel.DEMO_RUN in scored)
    run = _choose_run(scored)
    s = L.summary_of(run) if run else None
    report: tuple[str, tuple[str, ...]] | None = None  # the run (and models) the report button is for
    if s is not None:
        _summary(s)
        report = (s.run, tuple(s.models))
    elif run and (why := L.summary_problem(run)):  # chosen, but not showable: say why, never a blank
        st.info(f"Run {ui.md_code(run)} has no headline findings to show: {ui.md_escape(why)}.")
        if any(a.run == run for a in L.audit_sources()):  # judged: its report reads the verdicts
            report = (run, ())
    st.session_state["_home_report"] = report
    if (
        not st.session_state.get("_home_page_run")
        and st.session_state.get("_home_report_shown") != report
    ):
        st.rerun(scope="app")  # the fragment alone re-ran and chose another run: the button follows
    was_running = st.session_state.get("_home_running", False)
    st.session_state["_home_running"] = running
    if was_running and not running:
        st.rerun(scope="app")  # the last job finished: refresh the tables below (and the poll rate)


st.session_state["_home_page_run"] = True  # the whole page runs (not the fragment alone)
_live()
st.session_state["_home_report_shown"] = st.session_state.get("_home_report")
st.session_state["_home_page_run"] = False
if st.session_state["_home_report_shown"] is not None:
    ui.report_button(*st.session_state["_home_report_shown"], key="home_report")

st.subheader("Jobs")
jobs_panel.job_panel(limit=3)

st.subheader("What is stored")
ctx = ui.export_context("home")
t_runs, t_models, t_data, t_sets = st.tabs(["Runs", "Models", "Datasets", "Comparison sets"])
with t_runs:
    runs = L.runs()
    jobs_panel.stale_runs_notice(runs)
    if runs.empty:
        ui.empty_state(
            "No generation runs yet: start one on the Generate page (or run the demo above).",
            "generate",
            "Generate",
        )
    else:
        ui.table(runs, "runs", ctx=ctx)
with t_models:
    models = L.models_table()
    if models.empty:
        st.info("No models stored yet; models are recorded when a run uses them.")
    else:
        ui.table(models, "models", ctx=ctx)
with t_data:
    ds = L.datasets_table()
    if ds.empty:
        st.info("No datasets stored yet; a run stores the prompts of its dataset.")
    else:
        ui.table(ds, "datasets", ctx=ctx)
with t_sets:
    sets = ui.safe(L.comparison_sets)
    if sets is None or sets.empty:
        ui.empty_state(
            "No comparison sets yet: upload human or judge preferences on the Upload page.",
            "upload",
            "Upload",
        )
    else:
        ui.table(sets, "comparison_sets", ctx=ctx)

st.subheader("Analyses")
links = [p for p in navigation.PAGES if p.key != "home"]
cols = st.columns(2)
for i, p in enumerate(links):
    cols[0 if i < (len(links) + 1) // 2 else 1].page_link(p.path, label=p.link_label, icon=p.icon)
