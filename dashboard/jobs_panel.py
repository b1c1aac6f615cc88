"""Starting background jobs from the pages (generate, score, judge, cluster, the demo) and the live
job panel (progress, tokens/s, ETA, cancel / resume). The jobs themselves: :mod:`dashboard.jobs`."""

from __future__ import annotations

import os
import shlex
import time
from typing import Any

import streamlit as st

from dashboard import jobs, refresh
from dashboard.loaders import db_path
from dashboard.widgets import fmt_seconds, md_code, md_escape
from engine.errors import UserError
from engine.tasks.judge_api import key_env_problem, shown_key_env
from engine.tasks.judge_parse import ARENA_HARD_HELP, FORMATS

JUDGE_KINDS = {
    "local": "Local model (transformers)",
    "vllm": "Local model (vLLM)",
    "openai": "API (OpenAI-compatible)",
}
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

DEMO_RUN = jobs.DEMO_RUN
DEMO_ARGS = jobs.DEMO_ARGS


def score_args(run_id: str, rule: str | None = None) -> list[str]:
    """Score a run; no rule = the rule that fits its dataset (numeric, lenient for the demo MC set,
    paper)."""
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


def generate_args(
    models: list[str],
    dataset: str,
    repeats: int,
    temperature: float,
    max_new_tokens: int,
    modes: list[str],
    seed: int,
    limit: int | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
    record_traces: bool = True,
    backend: str = "hf",
    workers: int = 0,
    tensor_parallel: int = 1,
    dtype: str = "auto",
    until: str | None = None,
    alpha: float | None = None,
    round_size: int | None = None,
    rule: str | None = None,
) -> list[str]:
    """The ``python -m engine generate`` arguments for the Generate form (``workers`` 0: this
    process; N: N Ray replicas on a local cluster; ``tensor_parallel``: vLLM's, per model copy;
    ``dtype``: auto or a --dtype override; ``until``: a stop rule, a sequential run with --alpha and
    --round-size (None: the engine's schedule, 16 questions then doubling) and ``rule``, the scoring
    rule its rounds score with (None: the dataset's))."""
    args = [
        "generate",
        "--models",
        *models,
        "--dataset",
        dataset,
        "--repeats",
        str(int(repeats)),
        "--temperature",
        str(float(temperature)),
        "--max-new-tokens",
        str(int(max_new_tokens)),
        "--modes",
        *modes,
        "--seed",
        str(int(seed)),
        "--top-k",
        str(int(top_k)),
        "--top-p",
        str(float(top_p)),
        "--db",
        str(db_path()),
    ]
    if limit:
        args += ["--limit", str(int(limit))]
    args += [
        "--traces",
        "on" if record_traces else "off",
    ]  # explicit: the checkbox is what the user sees
    if backend != "hf":
        args += ["--backend", backend]
    if workers:
        args += ["--workers", str(int(workers))]
    if tensor_parallel != 1:
        args += ["--tensor-parallel", str(int(tensor_parallel))]
    if dtype != "auto":
        args += ["--dtype", dtype]
    if until:
        args += ["--until", until] + (["--alpha", str(float(alpha))] if alpha is not None else [])
        args += ["--round-size", str(int(round_size))] if round_size else []
        args += ["--rule", rule] if rule else []  # the form's scoring rule decides when to stop too
    return args


def run_id_for_args(args: list[str]) -> str | None:
    """The run id a generate command will use (``--run-id`` if given), else None (derived by the
    engine)."""
    return args[args.index("--run-id") + 1] if "--run-id" in args else None


def start_generation(args: list[str], score_after: bool, rule: str | None = None) -> str | None:
    """Start a generate job; with ``score_after``, score the run (its id from ``--run-id`` or derived)
    after, with ``rule`` (None: the rule that fits the dataset)."""
    run_id = run_id_for_args(args)
    if score_after and run_id is None:
        run_id = f"ui-{time.strftime('%Y%m%d-%H%M%S')}"
        args = args + ["--run-id", run_id]
    try:
        job_id = jobs.start_job(
            args,
            kind="generate",
            db=db_path(),
            env={"COUPLED_EVAL_DB": str(db_path())},
            then=[score_args(run_id, rule)] if score_after and run_id else None,
        )
    except (UserError, OSError) as exc:
        st.error(f"Could not start the job: {md_escape(exc)}")
        return None
    st.session_state["last_job"] = job_id
    return job_id


def _job_row(j: jobs.JobStatus, allow_control: bool) -> None:
    icon = {
        "running": ":material/hourglass_top:",
        "done": ":green[:material/check_circle:]",
        "failed": ":red[:material/error:]",
        "cancelled": ":orange[:material/stop_circle:]",
        "killed": ":red[:material/dangerous:]",
    }[j.status]
    started = time.strftime("%H:%M:%S", time.localtime(j.started_at))
    st.markdown(
        f"{icon} **{j.kind}** `{j.job_id}` · {j.status} · started {started}"
        + (f" · resumed from `{j.resumed_from}`" if j.resumed_from else "")
    )
    if j.total:
        st.progress(
            j.fraction,
            text=f"{j.done}/{j.total} units · {j.tokens_per_s:.1f} tokens/s · "
            f"ETA {fmt_seconds(j.eta_s) if j.status == 'running' else '–'}"
            + (f" · {md_escape(j.message)}" if j.message else ""),
        )
    elif j.status == "running":
        st.caption("starting… (loading models)" if j.kind == "generate" else "running…")
    if j.extra.get("stats"):  # an API judge: requests/s, retries, token totals (never the key)
        st.caption(judge_stats_text(j.extra["stats"]))
    if j.extra.get("workers"):  # a distributed run (--workers): what each Ray replica has made
        st.caption(
            "workers: "
            + " · ".join(
                f"{w} {v.get('done', 0)} units, {v.get('tokens_per_s', 0.0):.1f} tok/s"
                for w, v in sorted(j.extra["workers"].items())
            )
        )
    st.caption("command: " + md_code("python -m engine " + shlex.join(j.args)))
    if allow_control:
        c1, c2, _ = st.columns([1, 1, 4])
        if j.status == "running":
            if c1.button("Cancel", key=f"cancel_{j.job_id}", icon=":material/stop:"):
                jobs.cancel_job(j.job_id, db_path())
                st.rerun(scope="app")
        elif jobs.resumable(j):
            if c2.button("Resume", key=f"resume_{j.job_id}", icon=":material/replay:"):
                jobs.resume_job(j.job_id, db_path())
                st.rerun(scope="app")
    if j.status in ("failed", "killed") and j.log_tail:
        why = jobs.error_line(j)
        if why:  # the reason on the card itself, wrapped (st.code would cut it at the right edge)
            fix = (
                ""
                if jobs.resumable(j)
                else " Fix the input and start a new job (resuming would fail the same way)."
            )
            st.error(md_escape(why) + fix, icon=":material/error:")
        with st.expander("log"):
            st.code(j.log_tail[-3000:], wrap_lines=True)


def stale_runs_notice(runs) -> None:
    """One warning per run whose driver died without finishing (``runs``: loaders.runs()), with the
    command that resumes it."""
    if "stale" not in runs:
        return
    for r in runs[runs["stale"]].itertuples():
        st.warning(
            f"Run `{r.run_id}` stopped without finishing ({r.n_generations:,}/{r.n_units:,} units "
            "stored; its process is gone). Rerun its command to resume it:",
            icon=":material/error:",
        )
        st.code(r.resume_command, language="bash")


def job_panel(kind: str | None = None, limit: int = 5, allow_control: bool = True) -> None:
    """Live list of recent jobs (of ``kind``): progress, tokens/s, ETA, cancel/resume.

    Re-runs itself every :data:`dashboard.refresh.LIVE_S` seconds while a job runs (st.fragment), so the
    page stays responsive; when the last running job finishes, the whole page reruns once to show the
    new data.
    """
    any_running = any(j.status == "running" for j in jobs.list_jobs(db_path(), kind=kind)[:limit])

    # Poll fast while something runs, slowly otherwise (a job started from another tab shows up).
    @st.fragment(run_every=refresh.period(any_running))
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


def start_job(args: list[str], kind: str, secret_env: dict | None = None) -> str | None:
    """Start a background job and remember it in the session; errors become messages. ``secret_env``:
    variables for the job's process only (:func:`dashboard.jobs.start_job`), e.g. a session's API key."""
    try:
        job_id = jobs.start_job(
            args,
            kind=kind,
            db=db_path(),
            env={"COUPLED_EVAL_DB": str(db_path())},
            progress=args[0] in jobs.PROGRESS_COMMANDS,
            secret_env=secret_env,
        )
    except (UserError, OSError) as exc:
        st.error(f"Could not start the job: {md_escape(exc)}")
        return None
    st.session_state["last_job"] = job_id
    st.toast(f"Started {kind} job {job_id}")
    return job_id


def default_models(names: list[str]) -> list[str]:
    """The packaged model and its int8 variant when registered (the demo pair), else the first two."""
    pair = [n for n in ("smollm2-135m", "smollm2-135m-int8") if n in names]
    return pair if len(pair) == 2 else names[:2]


# ------------------------------------------------------------------------------ judge form ----


def judge_args(
    run_id: str,
    kind: str,
    model: str,
    *,
    base_url: str = "",
    key_env: str = DEFAULT_KEY_ENV,
    concurrency: int = 8,
    judge_format: str = "paper",
) -> list[str]:
    """The ``python -m engine judge`` arguments of the judge form. The API key itself never appears:
    only the NAME of the variable holding it (the job inherits the dashboard's environment)."""
    if kind not in JUDGE_KINDS:
        raise UserError(f"unknown judge kind {kind!r}; allowed: {', '.join(JUDGE_KINDS)}")
    args = [
        "judge",
        "--db",
        str(db_path()),
        "--run",
        run_id,
        "--judge",
        model if kind == "local" else f"{kind}:{model}",
    ]
    if kind == "openai":
        args += (["--base-url", base_url.strip()] if base_url.strip() else []) + [
            "--api-key-env",
            key_env,
            "--concurrency",
            str(int(concurrency)),
        ]
    if judge_format != "paper":
        args += ["--judge-format", judge_format]
    return args


def judge_stats_text(stats: dict) -> str:
    """One line of an API judge's live counters from its progress file."""
    return (
        f"requests {int(stats.get('requests', 0)):,} ({float(stats.get('requests_per_s', 0.0)):.1f}/s) "
        f"· retries {int(stats.get('retries', 0)):,} · failed {int(stats.get('failed', 0)):,} · tokens "
        f"{int(stats.get('prompt_tokens', 0)):,} in / {int(stats.get('completion_tokens', 0)):,} out"
    )


def key_status(key_env: str, session_key: str) -> str:
    """What the form says about the key: set in the dashboard's environment, typed for this session, or
    how to set it for a dashboard that is already running (never echoing a key)."""
    name = shown_key_env(key_env)
    if session_key:
        return (
            f"The key typed here is used for this session's judge jobs: handed to the job's process "
            f"environment as {name}, never written to a file, a log, the job's arguments or the process "
            "list (a resumed job needs it typed again)."
        )
    if os.environ.get(key_env):
        return f"{name} is set in the dashboard's environment."
    return (
        f"{name} is not set in the dashboard's environment. A running dashboard does not see a "
        f"variable exported later: stop it, `export {key_env if key_env.isidentifier() else 'NAME'}=…` "
        "in its shell and start it again (`python -m streamlit run app.py`), or type the key here for "
        "this session only."
    )


def _api_fields() -> tuple[str, str, str, str, int, Any]:
    """The API judge's fields at the page's width (the base URL two thirds of it: its placeholder is
    not cut off), and the column left for the verdict format."""
    b1, b2 = st.columns([2, 1])
    base_url = b1.text_input(
        "Base URL",
        key="judge_base_url",
        placeholder="http://127.0.0.1:8000/v1 (empty: $OPENAI_BASE_URL, else OpenAI)",
    )
    model = b2.text_input(
        "Judge model (as the server names it)", key="judge_api_model", placeholder="e.g. gpt-4o-mini"
    )
    k1, k2, k3 = st.columns([2, 3, 1])
    key_env = k1.text_input(
        "API key variable (its name)",
        value=DEFAULT_KEY_ENV,
        key="judge_key_env",
        help="The NAME of the environment variable holding the key; the job reads the key from it.",
    ).strip()
    session_key = k2.text_input(
        "…or the key, for this session only",
        type="password",
        key="judge_session_key",
        help="Kept in this browser session's memory only and handed to the judge job's environment "
        "under the variable's name: never written to a file, a log, the job's arguments or the "
        "process list. Gone when the session ends.",
    )
    concurrency = int(k3.number_input("Concurrency", 1, 256, 8, key="judge_concurrency"))
    st.caption(key_status(key_env, session_key))
    return base_url, str(model), key_env, session_key, concurrency, st.columns([1, 2])[0]


def judge_form(run_id: str, model_names: list[str]) -> str | None:
    """The judge job form, meant for the page's full width: a local model (transformers or vLLM) or an
    OpenAI-compatible API judge (base URL, model, the NAME of the key variable or the key for this
    session only, concurrency); the verdict format. Starts the job."""
    kind = st.radio(
        "Judge", list(JUDGE_KINDS), format_func=JUDGE_KINDS.get, key="judge_kind", horizontal=True
    )
    base_url, key_env, session_key, concurrency = "", DEFAULT_KEY_ENV, "", 8
    if kind == "openai":
        base_url, model, key_env, session_key, concurrency, fmt_col = _api_fields()
    else:
        f1, fmt_col = st.columns([3, 2])
        model = f1.selectbox("Judge model", model_names or ["(none)"], key="act_judge")
    fmt = fmt_col.selectbox(
        "Verdict format",
        list(FORMATS),
        key="judge_format",
        help=f"paper: A / B / Tie. arena-hard: [[A>B]]-style labels ({ARENA_HARD_HELP}).",
    )
    if not st.button(
        "Judge pairs",
        key="act_judge_btn",
        icon=":material/gavel:",
        disabled=kind != "openai" and not model_names,
    ):
        return None
    if kind == "openai" and not (model or "").strip():
        st.error("Name the judge model the server serves.")
        return None
    secret = {key_env: session_key} if kind == "openai" and session_key else {}
    if kind == "openai" and (
        problem := key_env_problem(key_env, {**os.environ, **secret})
    ):  # never echoes a key typed as the name
        st.error(f"Not started: {problem}.")
        return None
    return start_job(
        judge_args(
            run_id,
            kind,
            str(model).strip(),
            base_url=base_url,
            key_env=key_env,
            concurrency=concurrency,
            judge_format=fmt,
        ),
        kind="judge",
        secret_env=secret,
    )
