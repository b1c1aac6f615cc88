"""The Generate page's server section: start and stop ``python -m engine serve`` (an OpenAI-compatible
server whose noise is keyed by the request, docs/SERVE.md) as a background job, and watch it: its
address, requests, tokens, queue and the served run it stores, with the lm-eval and Inspect commands
that use it. The job machinery: :mod:`dashboard.jobs`."""

from __future__ import annotations

import shlex

import streamlit as st

from dashboard import jobs, jobs_panel, refresh
from dashboard.loaders import db_path
from engine.errors import UserError

SERVE_KIND = "serve"
NOISES = ("coupled", "independent")
DEFAULT_PORT = 8000


def serve_args(
    models: list[str],
    *,
    port: int = DEFAULT_PORT,
    run: str = "served",
    seed: int = 0,
    noise: str = "coupled",
    traces: bool = False,
    host: str = "127.0.0.1",
) -> list[str]:
    """The ``python -m engine serve`` arguments of the form (the database is the dashboard's)."""
    if not models:
        raise UserError("choose at least one model to serve")
    if noise not in NOISES:
        raise UserError(f"unknown noise {noise!r}; allowed: {', '.join(NOISES)}")
    if not run.strip():
        raise UserError("name the served run (e.g. served)")
    args = ["serve", "--models", *models, "--host", host, "--port", str(int(port))]
    args += ["--db", str(db_path()), "--run", run.strip(), "--seed", str(int(seed)), "--noise", noise]
    return args + (["--traces"] if traces else [])


def lm_eval_command(address: str, model: str) -> str:
    """lm-eval against the server (text prompts: the requests the import links back; docs/SERVE.md)."""
    args = (
        f"model={model},base_url={address}/completions,tokenizer_backend=none,tokenized_requests=False"
    )
    return (
        f"lm_eval --model local-completions --model_args {shlex.quote(args + ',num_concurrent=8')} "
        "--tasks TASK --log_samples --output_path out/" + shlex.quote(model)
    )


def inspect_command(address: str, model: str) -> str:
    return (
        f"SERVED_BASE_URL={shlex.quote(address)} SERVED_API_KEY=unused inspect eval TASK.py --model "
        + shlex.quote(f"openai-api/served/{model}")
    )


def _models_of(j: jobs.JobStatus) -> list[str]:
    args = list(j.args)
    if "--models" not in args:
        return []
    out = []
    for a in args[args.index("--models") + 1 :]:
        if a.startswith("--"):
            break
        out.append(a)
    return out


def _server_card(j: jobs.JobStatus) -> None:
    s = j.extra.get("serve") or {}
    address = s.get("address")
    state = "ready" if address and j.status == "running" else j.status
    st.markdown(f"**server** `{j.job_id}` · {state}" + (f" · `{address}`" if address else ""))
    if j.status == "running" and not address:
        st.caption("starting… (loading the models; the address shows once they answer)")
    if s:
        st.caption(
            f"requests {int(s.get('requests', 0)):,} · in flight {int(s.get('in_flight', 0)):,} · queued "
            f"{int(s.get('queued', 0)):,} · failed {int(s.get('failed', 0)):,} · tokens "
            f"{int(s.get('tokens', 0)):,} · stored {int(s.get('stored', 0)):,} generations in run "
            f"`{s.get('run', '?')}`"
        )
    if address and j.status == "running":
        model = (_models_of(j) or ["MODEL"])[0].rstrip("/").rsplit("/", 1)[-1]
        st.code(
            lm_eval_command(address, model) + "\n" + inspect_command(address, model), language="bash"
        )
        if st.button("Stop server", key=f"stop_{j.job_id}", icon=":material/stop:"):
            jobs.cancel_job(j.job_id, db_path())  # SIGTERM: in-flight requests finish, the store flushes
            st.rerun(scope="app")
    elif j.status in ("failed", "killed"):
        st.error(jobs.error_line(j) or "the server stopped", icon=":material/error:")


def _start(args: list[str]) -> str | None:
    try:
        job_id = jobs.start_job(
            args, kind=SERVE_KIND, db=db_path(), env={"COUPLED_EVAL_DB": str(db_path())}
        )
    except (UserError, OSError) as exc:
        st.error(f"Could not start the server: {exc}")
        return None
    st.toast(f"Started server job {job_id}")
    return job_id


def render(model_names: list[str]) -> None:
    """The form that starts a server, and the live cards of this database's recent servers."""
    with st.form("serve_form", border=True):
        c1, c2, c3 = st.columns([3, 1, 1])
        models = c1.multiselect(
            "Models to serve (requests choose one by name)",
            model_names,
            default=jobs_panel.default_models(model_names),
            key="serve_models",
        )
        port = c2.number_input("Port", 1, 65535, DEFAULT_PORT, key="serve_port")
        run = c3.text_input("Served run", "served", key="serve_run")
        extra = st.text_input(
            "Other models to serve (space-separated HF folders or .gguf files)", key="serve_extra"
        )
        d1, d2, d3 = st.columns(3)
        seed = d1.number_input("Seed (requests without one)", min_value=0, value=0, key="serve_seed")
        noise = d2.radio(
            "Noise",
            NOISES,
            key="serve_noise",
            horizontal=True,
            help="coupled: every model draws the request's noise; independent: a seed per model "
            "(the control)",
        )
        traces = d3.checkbox("Store token traces", key="serve_traces")
        start = st.form_submit_button("Start server", icon=":material/dns:")
    if start:
        try:
            chosen = list(models) + extra.split()
            args = serve_args(chosen, port=port, run=run, seed=seed, noise=noise, traces=traces)
        except UserError as exc:
            st.error(str(exc))
        else:
            if _start(args):
                st.success("Server starting: its address shows below once the models are loaded.")
    servers = jobs.list_jobs(db_path(), kind=SERVE_KIND)[:3]
    running = any(j.status == "running" for j in servers)

    @st.fragment(run_every=refresh.LIVE_S if running else None)
    def _cards():
        for j in jobs.list_jobs(db_path(), kind=SERVE_KIND)[:3]:
            with st.container(border=True):
                _server_card(j)

    if servers:
        _cards()
    else:
        st.caption("No server yet. Start one, then point lm-eval or Inspect at its address.")
