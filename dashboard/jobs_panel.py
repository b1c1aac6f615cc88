"""Starting background jobs from the pages (generate, score, judge, cluster, the demo) and the live
job panel (progress, tokens/s, ETA, cancel / resume). The jobs themselves: :mod:`dashboard.jobs`."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import jobs
from dashboard.loaders import db_path
from dashboard.widgets import fmt_seconds
from engine.errors import UserError

DEMO_RUN = jobs.DEMO_RUN
DEMO_ARGS = jobs.DEMO_ARGS


def score_args(run_id: str, rule: str | None = None) -> list[str]:
    """Score a run; no rule = the rule that fits its dataset (numeric, lenient for the demo MC set, paper)."""
    return jobs.score_args(run_id, db_path(), rule)


def start_demo() -> str | None:
    """The first-run demo: generation on the packaged default models, then scoring, as one chain
    (the generate job starts the scoring itself when it ends: no page needs to stay open)."""
    try:
        job_id = jobs.start_demo(db_path())
    except (UserError, OSError) as exc:
        st.error(f"Could not start the demo: {exc}")
        return None
    st.session_state["last_job"] = job_id
    return job_id


def any_job_running() -> bool:
    return any(j.status == "running" for j in jobs.list_jobs(db_path()))


def demo_running() -> bool:
    return jobs.demo_running(db_path())


def generate_args(models: list[str], dataset: str, repeats: int, temperature: float, max_new_tokens: int,
                  modes: list[str], seed: int, limit: int | None = None, top_k: int = 0, top_p: float = 1.0,
                  record_traces: bool = True, backend: str = "hf", workers: int = 0,
                  tensor_parallel: int = 1) -> list[str]:
    """The ``python -m engine generate`` arguments for the Generate form (``workers`` 0: this
    process; N: N Ray replicas on a local cluster; ``tensor_parallel``: vLLM's, per model copy)."""
    args = ["generate", "--models", *models, "--dataset", dataset, "--repeats", str(int(repeats)),
            "--temperature", str(float(temperature)), "--max-new-tokens", str(int(max_new_tokens)),
            "--modes", *modes, "--seed", str(int(seed)), "--top-k", str(int(top_k)), "--top-p", str(float(top_p)),
            "--db", str(db_path())]
    if limit:
        args += ["--limit", str(int(limit))]
    args += ["--traces", "on" if record_traces else "off"]  # explicit: the checkbox is what the user sees
    if backend != "hf":
        args += ["--backend", backend]
    if workers:
        args += ["--workers", str(int(workers))]
    if tensor_parallel != 1:
        args += ["--tensor-parallel", str(int(tensor_parallel))]
    return args


def run_id_for_args(args: list[str]) -> str | None:
    """The run id a generate command will use (``--run-id`` if given), else None (derived by the engine)."""
    return args[args.index("--run-id") + 1] if "--run-id" in args else None


def start_generation(args: list[str], score_after: bool, rule: str | None = None) -> str | None:
    """Start a generate job; with ``score_after``, score the run (its id from ``--run-id`` or derived)
    after, with ``rule`` (None: the rule that fits the dataset)."""
    run_id = run_id_for_args(args)
    if score_after and run_id is None:
        run_id = f"ui-{time.strftime('%Y%m%d-%H%M%S')}"
        args = args + ["--run-id", run_id]
    try:
        job_id = jobs.start_job(args, kind="generate", db=db_path(), env={"COUPLED_EVAL_DB": str(db_path())},
                                then=[score_args(run_id, rule)] if score_after and run_id else None)
    except (UserError, OSError) as exc:
        st.error(f"Could not start the job: {exc}")
        return None
    st.session_state["last_job"] = job_id
    return job_id


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
    if j.extra.get("workers"):  # a distributed run (--workers): what each Ray replica has made
        st.caption("workers: " + " · ".join(f"{w} {v.get('done', 0)} units, {v.get('tokens_per_s', 0.0):.1f} tok/s"
                                            for w, v in sorted(j.extra["workers"].items())))
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


def stale_runs_notice(runs) -> None:
    """One warning per run whose driver died without finishing (``runs``: loaders.runs()), with the
    command that resumes it."""
    if "stale" not in runs:
        return
    for r in runs[runs["stale"]].itertuples():
        st.warning(f"Run `{r.run_id}` stopped without finishing ({r.n_generations:,}/{r.n_units:,} units stored; "
                   "its process is gone). Rerun its command to resume it:", icon=":material/error:")
        st.code(r.resume_command, language="bash")


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


def default_models(names: list[str]) -> list[str]:
    """The packaged model and its int8 variant when registered (the demo pair), else the first two."""
    pair = [n for n in ("smollm2-135m", "smollm2-135m-int8") if n in names]
    return pair if len(pair) == 2 else names[:2]
