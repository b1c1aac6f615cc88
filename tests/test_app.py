"""The dashboard under streamlit.testing.v1.AppTest: every page against a small database built here.

Checks per page: no exception, the expected elements present, and a widget change re-renders.
Also: the empty database shows empty states (no errors), and the read-side queries agree with a
naive pandas computation.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation, widgets
from engine import store
from engine.analysis import comparisons as acmp
from engine.analysis import overview, traces
from engine.store.db import insert_df

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("m-base", "m-int8", "m-int4")
MODES = ("coupled", "independent")
N_PROMPTS, N_REPEATS, N_STEPS = 40, 4, 8
TIMEOUT = 120


GEN_COLS = "run_id model prompt_id repeat mode seed text token_ids finish_reason n_tokens".split()
TRACE_COLS = (
    "run_id model prompt_id repeat mode step token_id token_text prob top_ids top_probs top_gumbels"
).split()
SCORE_COLS = "run_id model prompt_id repeat mode rule extracted score".split()
JUDGMENT_COLS = (
    "run_id judge prompt_id repeat mode model_a model_b presented judge_prompt_hash raw parsed winner"
).split()
LIST_CASTS = {
    "token_ids": "INTEGER[]",
    "top_ids": "INTEGER[]",
    "top_probs": "FLOAT[]",
    "top_gumbels": "FLOAT[]",
}


def _insert(con, table: str, columns: list[str], rows: list[tuple]) -> None:
    """Rows (tuples in ``columns`` order) into ``table`` in one statement."""
    insert_df(con, table, pd.DataFrame(rows, columns=columns), columns, casts=LIST_CASTS)


def build_small_db(path: Path, seed: int = 0, repeats: int = N_REPEATS) -> Path:
    """A small but complete database: 1 run, 3 models, 40 prompts x 4 repeats (or ``repeats``) x 2
    modes, traces, scores, LLM-judge verdicts and one uploaded comparison set with human + judge
    labels."""
    rng = np.random.default_rng(seed)
    run = "run-small"
    cfg = {
        "models": list(MODELS),
        "repeats": repeats,
        "temperature": 0.7,
        "max_new_tokens": N_STEPS,
        "modes": list(MODES),
        "seed": 7,
    }
    with store.writer(path) as con:
        con.begin()
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, code_version, key_mode, warnings, status, n_units) "
            "VALUES (?, 'ds-small', ?, 'test', 'token_id', '[]', 'done', ?)",
            [run, json.dumps(cfg), len(MODELS) * N_PROMPTS * repeats * len(MODES)],
        )
        for m in MODELS:
            con.execute(
                "INSERT INTO models (name, source, variant, vocab_id, vocab_size) VALUES (?, 'test', ?, 'v1', 100)",
                [m, m.split("-")[1]],
            )
        con.execute(
            "INSERT INTO datasets (dataset_id, source, kind, n_prompts) VALUES ('ds-small', 'test', "
            "'multiple_choice', ?)",
            [N_PROMPTS],
        )
        golds = rng.choice(list("ABCD"), N_PROMPTS)
        for i in range(N_PROMPTS):
            con.execute(
                "INSERT INTO prompts VALUES ('ds-small', ?, ?, ?, ?, ?, ?, ?)",
                [
                    f"q{i}",
                    i,
                    "algebra" if i % 2 else "history",
                    f"Question number {i}?",
                    json.dumps({k: f"option {k}" for k in "ABCD"}),
                    str(golds[i]),
                    f"Question number {i}? A B C D",
                ],
            )
        gens, traces, scores = [], [], []
        for mode in MODES:
            for i in range(N_PROMPTS):
                for r in range(repeats):
                    shared = rng.integers(3, 99, N_STEPS)  # the coupled path all models start on
                    diverge = int(rng.integers(1, N_STEPS))
                    for mi, m in enumerate(MODELS):
                        toks = shared.copy()
                        if mode == "independent" or mi > 0:
                            toks[diverge if mode == "coupled" else 0 :] = rng.integers(
                                3, 99, N_STEPS - (diverge if mode == "coupled" else 0)
                            )
                        text = "".join(chr(65 + t % 26) for t in toks)
                        seed_used = 7 if mode == "coupled" else 7 + 1000 * (mi + 1)
                        gens.append(
                            (run, m, f"q{i}", r, mode, seed_used, text, toks.tolist(), "length", N_STEPS)
                        )
                        for s, t in enumerate(toks):
                            top = [int(t), int((t + 1) % 100), int((t + 2) % 100)]
                            traces.append(
                                (
                                    run,
                                    m,
                                    f"q{i}",
                                    r,
                                    mode,
                                    s,
                                    int(t),
                                    chr(65 + int(t) % 26),
                                    float(rng.uniform(0.2, 0.9)),
                                    top,
                                    [0.5, 0.3, 0.2],
                                    [0.1, -0.4, 1.2],
                                )
                            )
                        correct = rng.random() < [0.7, 0.5, 0.3][mi]
                        scores.append(
                            (
                                run,
                                m,
                                f"q{i}",
                                r,
                                mode,
                                "paper",
                                str(golds[i]) if correct else "E",
                                1.0 if correct else 0.0,
                            )
                        )
        # set-based inserts (insert_df): executemany costs about a millisecond a row, 11 CPU-s for
        # this database, which 14 test modules build
        _insert(con, "generations", GEN_COLS, gens)
        _insert(con, "token_traces", TRACE_COLS, traces)
        _insert(con, "scores", SCORE_COLS, scores)
        judg = []
        for mode in MODES:
            for i in range(N_PROMPTS):
                for r in range(repeats):
                    for a in range(len(MODELS)):
                        for b in range(a + 1, len(MODELS)):
                            for order in ("ab", "ba"):
                                w = rng.choice(["a", "b", "tie"], p=[0.5, 0.3, 0.2])
                                judg.append(
                                    (
                                        run,
                                        "judge-x",
                                        f"q{i}",
                                        r,
                                        mode,
                                        MODELS[a],
                                        MODELS[b],
                                        order,
                                        "h",
                                        "raw",
                                        w,
                                        w,
                                    )
                                )
        _insert(con, "judgments", JUDGMENT_COLS, judg)
        con.commit()
    # An uploaded set, through the engine's own importer: 400 rows, 100 with human labels.
    rows = []
    strength = {"m-base": 0.6, "m-int8": 0.5, "m-int4": 0.3}
    for k in range(400):
        a, b = rng.choice(MODELS, 2, replace=False)
        pa = strength[a] / (strength[a] + strength[b])
        human = ("model_a" if rng.random() < pa else "model_b") if k < 100 else ""
        judge = "model_a" if rng.random() < pa else "model_b"
        rows.append(
            {"prompt_id": f"p{k}", "model_a": a, "model_b": b, "winner": human, "judge_winner": judge}
        )
    from engine.tasks import comparisons

    comparisons.import_comparisons(
        path, pd.DataFrame(rows).to_csv(index=False).encode(), "human-small", fmt="csv"
    )
    return path


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    return build_small_db(tmp_path_factory.mktemp("appdb") / "small.duckdb")


@pytest.fixture
def app(small_db, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    return at


def _page(at: AppTest, page: str) -> AppTest:
    at.run()
    assert not at.exception, at.exception
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _texts(at: AppTest) -> str:
    parts = (
        [m.value for m in at.markdown]
        + [m.value for m in at.caption]
        + [m.value for m in at.info]
        + [m.value for m in at.title]
        + [m.value for m in at.subheader]
        + [str(m.value) for m in at.metric]
        + [m.label for m in at.metric]
        + [m.value for m in at.warning]
        + [m.value for m in at.error]
    )
    # as a reader sees it: the backslash escapes that keep data inert Markdown (widgets.md_escape) removed
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", "\n".join(str(p) for p in parts))


def _n_charts(at: AppTest) -> int:
    return len(at.get("plotly_chart"))


def _n_downloads(at: AppTest) -> int:
    return len(at.get("download_button"))


def test_home_lists_what_is_stored(app, small_db):
    at = _page(app, navigation.path("home"))
    labels = {m.label: m.value for m in at.metric}
    assert labels["Runs"] == "1" and labels["Comparison sets"] == "1"
    assert labels["Token traces"] == f"{len(MODELS) * N_PROMPTS * N_REPEATS * len(MODES) * N_STEPS:,}"
    tables = [d.value for d in at.dataframe]
    assert any("run_id" in t and "run-small" in t["run_id"].tolist() for t in tables)
    # not an empty database: the demo stays reachable (in an expander), not the first-run box
    assert "First run: the demo" not in [h.value for h in at.subheader]
    assert at.button(key="run_demo").label == "Run the demo"
    # the headline findings of the newest scored run, with the same numbers as the CLI's summary
    from engine.analysis.summary import run_summary

    s = run_summary(small_db, "run-small")
    assert any("Headline findings" in h.value for h in at.subheader)
    assert at.selectbox(key="home_run").value == "run-small"
    acc = at.table[0].value
    assert len(acc) == len(s.accuracy) and acc["accuracy"].astype(float).tolist() == [
        round(r.accuracy, 3) for r in s.accuracy
    ]
    metrics = {m.label: m.value for m in at.metric}
    assert (
        metrics["Agreement, coupled"] == f"{100 * s.pairs[-1].agreement['coupled'].mean:.0f}%"
    )  # last pair last
    assert not at.warning  # 40 questions, intervals that vary: nothing to warn about


def _calls(fn: ast.FunctionDef) -> set[str]:
    return {
        c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
        for c in ast.walk(fn)
        if isinstance(c, ast.Call)
    }


@pytest.mark.parametrize(
    "page", ["app_pages/home.py", "dashboard/sequential_live.py", "dashboard/serve_panel.py"]
)
def test_no_report_button_inside_a_fragment_that_reruns_on_a_timer(page):
    """A Download button that a timed fragment re-renders while it is clicked loses the click (its
    file is registered anew on every re-run): the report's buttons (seconds to build) sit outside
    every ``st.fragment(run_every=...)``, also through the page's own functions that it calls."""
    tree = ast.parse((ROOT / page).read_text(encoding="utf-8"))
    funcs = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    timed = [
        f
        for f in funcs.values()
        for d in f.decorator_list
        if isinstance(d, ast.Call) and any(k.arg == "run_every" for k in d.keywords)
    ]
    assert timed or page != "app_pages/home.py"
    for frag in timed:
        seen, todo = set(), [frag.name]
        while todo:
            name = todo.pop()
            if name in seen or name not in funcs:
                continue
            seen.add(name)
            called = _calls(funcs[name])
            assert "report_button" not in called, f"{page}: {frag.name} -> {name} renders the report"
            todo += called


def test_home_chooses_the_run_and_warns_on_a_small_sample(tmp_path, monkeypatch, small_db):
    """Home shows the newest scored run by default, lets the user choose another,
    and a 5-question run's collapsed interval and 100% saving come with the analysis' warnings."""
    import shutil

    import numpy as np

    from engine.tasks import scoring
    from tests.test_summary import make_numeric_run

    db = tmp_path / "two.duckdb"
    shutil.copy(small_db, db)
    same = np.array([["4", "4"], ["7", "1"], ["2", "2"], ["9", "3"], ["5", "5"]])
    other = np.array([["4", "1"], ["7", "7"], ["1", "2"], ["9", "9"], ["5", "0"]])
    make_numeric_run(
        db,
        {
            ("m1", "coupled"): same,
            ("m2", "coupled"): same,
            ("m1", "independent"): same,
            ("m2", "independent"): other,
        },
        {f"p{i}": g for i, g in enumerate("47295")},
        run="tiny",
    )
    scoring.score_run(db, "tiny", "exact")
    scoring.score_run(db, "tiny")  # numeric: the dataset's rule
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    reports: list[tuple] = []  # the Download report buttons the page renders: (run, models, key)
    monkeypatch.setattr(
        widgets, "report_button", lambda run, models=(), key="": reports.append((run, models, key))
    )
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    sel = at.selectbox(key="home_run")
    assert sel.options[:2] == ["tiny (newest scored)", "run-small"] and sel.value == "tiny"
    assert reports == [("tiny", ("m1", "m2"), "home_report")]
    # as shown: Markdown's backslash escapes of the analysis' text (widgets.md_escape) removed
    warnings = [re.sub(r"\\(.)", r"\1", w.value) for w in at.warning]
    assert warnings[0].startswith("**Small sample.** Small sample: 5 questions")
    assert any("interval [+0.000, +0.000] (SE 0) is a single point" in w for w in warnings)
    assert any("variance saving reads 100%" in w for w in warnings)
    sel.set_value("run-small").run()
    assert not at.exception
    assert any("run `run-small`" in h.value for h in at.subheader) and not at.warning
    assert reports[-1][::2] == ("run-small", "home_report")  # the button follows the chosen run
    # the Data map starts from the rule the run was scored with, not the first listed
    at.switch_page(navigation.path("datamap")).run()
    at.selectbox(key="dm_run").set_value("tiny").run()
    assert not at.exception
    assert (
        at.selectbox(key="dm_rule").options == ["exact", "numeric"]
        and at.selectbox(key="dm_rule").value == "numeric"
    )


def test_generate_page_form_and_validation(app):
    at = _page(app, navigation.path("generate"))
    assert at.multiselect(key="gen_models") is not None
    assert at.number_input(key="gen_repeats").value == 5
    # Submitting with no modes is refused with a message, and no job starts.
    at.multiselect(key="gen_modes").set_value([])
    at.multiselect(key="gen_modes").set_value(["coupled"]).run()
    assert not at.exception
    assert "Runs" in _texts(at)
    # the backend selector: without vLLM here it is greyed at "hf" and says how to install vLLM
    from engine.generation.vllm_backend import installed_vllm_version

    if installed_vllm_version() is None:
        sel = at.selectbox(key="gen_backend")
        assert sel.value == "hf" and sel.disabled
        assert "scripts/install_vllm.sh" in _texts(at) + " ".join(c.value for c in at.caption)


@pytest.mark.parametrize(
    "field,value,expected",
    [
        # tensor parallel > 1 with the transformers backend: an error naming the allowed value
        ("gen_tp", 2, ("Tensor parallel 2 needs the vllm backend", "allowed: 1")),
        # Ray workers without `ray` installed are refused before a job starts
        ("gen_workers", 2, ("Ray workers 2: Ray workers need the `ray` package", "allowed here: 0")),
    ],
)
def test_generate_page_refuses_before_a_job_starts(app, small_db, monkeypatch, field, value, expected):
    """A setting this environment cannot run: one error, and no job is started."""
    from dashboard import jobs

    monkeypatch.setattr(jobs, "ray_unavailable", lambda: "Ray workers need the `ray` package (test)")
    at = _page(app, navigation.path("generate"))
    at.multiselect(key="gen_models").set_value([at.multiselect(key="gen_models").options[0]])
    at.number_input(key=field).set_value(value)
    n_jobs = len(jobs.list_jobs(small_db))
    next(b for b in at.button if b.label == "Start generation").click().run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert all(e in errors for e in expected), errors
    assert len(jobs.list_jobs(small_db)) == n_jobs


@pytest.mark.parametrize("rule", ["the dataset's rule", "numeric"])
def test_generate_page_scores_with_the_rule_its_label_names(app, small_db, rule):
    """ "Score when done" scores with the rule the page names: the dataset's own
    rule (as `score` without --rule) or the one chosen."""
    from dashboard import jobs

    at = _page(app, navigation.path("generate"))
    assert at.checkbox(key="gen_score").label == "Score when done"
    at.multiselect(key="gen_models").set_value([at.multiselect(key="gen_models").options[0]])
    at.selectbox(key="gen_dataset").set_value("demo-numbers")
    at.selectbox(key="gen_score_rule").set_value(rule)
    before = {j.job_id for j in jobs.list_jobs(small_db)}
    next(b for b in at.button if b.label == "Start generation").click().run()
    assert not at.exception
    started = [j for j in jobs.list_jobs(small_db) if j.job_id not in before]
    try:
        assert len(started) == 1
        meta = json.loads((jobs.jobs_dir(small_db) / f"{started[0].job_id}.meta.json").read_text())
        score = meta["then"][0]
        assert score[0] == "score"
        success = " ".join(m.value for m in at.success)
        if rule == "numeric":
            assert score[score.index("--rule") + 1] == "numeric" and "with the numeric rule" in success
        else:
            assert "--rule" not in score and "the rule that fits the dataset" in success
    finally:
        for j in started:
            jobs.cancel_job(j.job_id, small_db)


def test_generate_args_pass_the_backend():
    from dashboard import jobs_panel

    base = (["m"], "demo", 1, 0.7, 5, ["coupled"], 0)
    assert "--backend" not in jobs_panel.generate_args(*base)
    args = jobs_panel.generate_args(*base, backend="vllm")
    assert args[args.index("--backend") + 1] == "vllm"
    assert "--workers" not in args and "--tensor-parallel" not in args
    args = jobs_panel.generate_args(*base, backend="vllm", workers=2, tensor_parallel=4)
    assert args[args.index("--workers") + 1] == "2" and args[args.index("--tensor-parallel") + 1] == "4"
    # the command line the job runs parses (same parser as the CLI)
    from engine.cli import build_parser

    ns = build_parser().parse_args(args)
    assert (ns.workers, ns.tensor_parallel, ns.backend) == (2, 4, "vllm")


def test_token_traces_page_shows_alignment_and_reacts(app):
    at = _page(app, navigation.path("traces"))
    text = _texts(at)
    assert "Coupled generation" in text and "Independent generation" in text
    assert "First divergence" in text
    n_before = _n_charts(at)
    assert n_before >= 2 and _n_downloads(at) >= 6
    # change the prompt: re-renders with the other unit
    at.selectbox(key="tr_prompt").set_value("q3").run()
    assert not at.exception
    assert at.dataframe[-1].value["text"].notna().all()
    at.multiselect(key="tr_models_run-small").set_value(["m-base", "m-int8"]).run()
    assert not at.exception and _n_charts(at) == n_before


def test_benchmark_page_metrics_and_widget(app):
    at = _page(app, navigation.path("benchmark"))
    text = _texts(at)
    assert "Mean per-question covariance" in text and "Sample saving" in text
    # the saving's interval, error level, n and scoring rule are in the visible text, not only a tooltip
    assert "95% CI **[" in text and "at error ε = " in text and "scoring rule **paper**" in text
    # one headline saving, every other figure labelled with its definition
    assert (
        "1 − SE²_coupled / SE²_independent" in text
        and "paper's method" in text
        and "predicted at error ε" in text
    )
    assert _n_charts(at) >= 4
    tables = [d.value for d in at.dataframe]
    paired = next(t for t in tables if "diff A−B" in t.columns)
    assert paired["mode"].tolist() == ["coupled", "independent"]
    assert {"ci_low", "ci_high", "p_value", "corr", "boot_ci_low", "MDE"} <= set(paired.columns)
    # McNemar only on one majority-vote outcome per question; never over (question, repeat) pairs
    assert "one majority-vote outcome per question" in text
    assert not any(
        "outcomes" in t.columns or (t.get("outcome") is not None and (t["outcome"] == "pairs").any())
        for t in tables
    )
    # the planner says the dataset is too small for an MDE of 0.05
    assert any(f"questions; this dataset has {N_PROMPTS}" in w.value for w in at.warning)
    at.number_input(key="bm_mde").set_value(1.0).run()
    assert not at.exception and any(f"this dataset has {N_PROMPTS}" in s.value for s in at.success)
    at.number_input(key="bm_se").set_value(0.5).run()  # a loose SE: every SE plan fits
    assert not at.exception and "For a target standard error **0.5000** (given)" in _texts(at)
    se_plans = next(
        d.value for d in at.dataframe if "fits" in d.value.columns and "power" not in d.value.columns
    )
    assert se_plans["fits"].all()
    at.selectbox(key="bm_subject").set_value("algebra").run()
    assert not at.exception
    assert f"{N_PROMPTS // 2} × {N_REPEATS}" in _texts(at)  # the algebra half of the questions


def _option(at, key: str, needle: str) -> int:
    opts = at.selectbox(key=key).options
    hits = [i for i, o in enumerate(opts) if needle in o]
    assert hits, opts
    return hits[0]


def test_winrates_page_judgments_and_set(app):
    at = _page(app, navigation.path("winrates"))
    at.selectbox(key="wr_source").set_value(_option(at, "wr_source", "run run-small")).run()
    assert not at.exception
    assert _n_charts(at) >= 3
    table = at.dataframe[0].value
    assert {
        "coupled_winrate",
        "independent_winrate",
        "coupled_rank",
        "independent_rank",
        "coupled_rank_set",
    } <= set(table.columns)
    text = _texts(at)
    assert f"intervals clustered by prompt ({N_PROMPTS} prompts" in text and "1000 resamples" in text
    assert "Position bias (coupled)" in text and "Holm" in text
    pairs = at.dataframe[1].value
    assert {"diff", "p", "p_holm", "stars", "coupled_low", "coupled_high"} <= set(pairs.columns)
    at.selectbox(key="wr_source").set_value(
        _option(at, "wr_source", "human-small")
    ).run()  # the uploaded set
    assert not at.exception
    text = _texts(at)
    assert "human labels (uploaded preferences" in text and "coupled" not in " ".join(
        str(c) for c in at.dataframe[0].value.columns
    )
    pairs = at.dataframe[1].value
    assert "diff" not in pairs.columns and {"human-small_low", "human-small_high"} <= set(pairs.columns)


def test_ranksets_page_methods_and_covariance(app):
    at = _page(app, navigation.path("ranksets"))
    assert not at.exception
    at.selectbox(key="rs_source").set_value(_option(at, "rs_source", "human-small")).run()
    at.radio(key="rs_method").set_value("human").run()
    assert not at.exception
    assert any("procedure maxt" in c.value and "human-labelled" in c.value for c in at.caption)
    assert any("strict win-rate" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert {"rank", "lower", "upper", "theta", "theta_low", "theta_high"} <= set(table.columns)
    assert (table["rank"] == table["lower"]).all()
    at.radio(key="rs_procedure").set_value("chi2").run()
    assert any("procedure chi2" in c.value for c in at.caption)
    at.radio(key="rs_method").set_value("judge").run()
    assert any("inherit its biases" in w.value for w in at.warning)
    at.radio(key="rs_method").set_value("ppr").run()
    assert not at.exception
    cmp_ = at.dataframe[0].value
    assert cmp_["method"].nunique() == 2 and any(
        "the same n = 100 human labels" in m for m in cmp_["method"]
    )
    at.radio(key="rs_cov").set_value("paper").run()
    assert any("paper's covariance" in w.value for w in at.warning)
    at.number_input(key="rs_n").set_value(30)
    at.number_input(key="rs_reps").set_value(10)
    at.toggle(key="rs_run_draws").set_value(True).run()
    assert not at.exception
    assert _n_charts(at) >= 3
    assert "Baseline" in _texts(at)


def test_datamap_page_flags_and_slider(app, small_db):
    at = _page(app, navigation.path("datamap"))
    text = _texts(at)
    assert "Flagged prompts" in text and "Score μ̂" in text and "95% t CI" in text
    assert "within-prompt" in text and "between-prompt" in text and "σ̂²/n" in text
    assert _n_charts(at) >= 3
    at.slider(key="dm_pmax").set_value(1.0)
    at.slider(key="dm_smin").set_value(-3.0).run()
    assert not at.exception
    flagged = {m.label: m.value for m in at.metric}["Flagged prompts"]
    # the whole square is flagged, except prompts without a repeated answer: generations with no
    # extractable answer ("E" here) are each their own category, never a label-error candidate
    sel = {k: at.selectbox(key=k).value for k in ("dm_model", "dm_mode", "dm_rule")}
    repeated = store.query_df(
        small_db,
        """
        SELECT count(*) FROM (SELECT prompt_id FROM scores WHERE run_id = 'run-small' AND model = ? AND mode = ?
                              AND rule = ? AND extracted <> 'E' GROUP BY prompt_id, extracted HAVING count(*) >= 2)""",
        [sel["dm_model"], sel["dm_mode"], sel["dm_rule"]],
    ).iloc[0, 0]
    assert 0 < int(flagged) == int(repeated) < N_PROMPTS


def test_upload_page_lists_sets(app):
    at = _page(app, navigation.path("upload"))
    assert "human-small" in at.dataframe[0].value["name"].tolist()
    assert at.button(key="up_delete").disabled  # needs the confirmation first
    at.checkbox(key="up_delete_sure").check().run()
    assert not at.button(key="up_delete").disabled


@pytest.mark.parametrize("page", [p.path for p in navigation.PAGES])
def test_every_page_on_an_empty_database_shows_an_empty_state(page, tmp_path, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("COUPLED_EVAL_SHARED", str(tmp_path / "no-shared"))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at = _page(at, page)
    assert not at.error, [e.value for e in at.error]
    assert at.info or at.warning or page.endswith(("2_Generate.py", "8_Upload.py"))
    assert not (tmp_path / "none.duckdb").exists()  # the dashboard never creates or writes the database


# --------------------------------------------------------------------------- queries vs naive


def test_align_traces_matches_a_naive_loop(small_db):
    steps = traces.trace_steps(small_db, "run-small", "q1", 0, "coupled", list(MODELS))
    al = traces.align_traces(steps, list(MODELS))
    naive_agree = []
    for s in sorted(steps["step"].unique()):
        toks = [steps[(steps.step == s) & (steps.model == m)]["token_id"].iloc[0] for m in MODELS]
        naive_agree.append(len(set(toks)) == 1)
    assert al.agree == naive_agree
    first = next((i for i, a in enumerate(naive_agree) if not a), None)
    assert al.first_divergence == first
    assert al.n_agree == sum(naive_agree)


def test_trace_paging_covers_every_step_once(small_db):
    pages = [
        traces.trace_steps(
            small_db, "run-small", "q2", 1, "independent", list(MODELS), max_steps=3, step_offset=o
        )
        for o in range(0, N_STEPS, 3)
    ]
    allp = pd.concat(pages)
    assert len(allp) == N_STEPS * len(MODELS)
    assert not allp.duplicated(["model", "step"]).any()


def test_recomputed_gumbels_match_engine_noise(small_db):
    torch = pytest.importorskip("torch")
    from engine.sampling import noise

    steps = traces.trace_steps(small_db, "run-small", "q0", 2, "coupled", ["m-base"])
    g = traces.recompute_gumbels(small_db, "run-small", "q0", 2, steps)
    for rec in g.itertuples():
        full = noise.gumbel(7, torch.tensor([noise.unit_key("q0", 2)]), rec.step, torch.arange(100))
        assert g.loc[rec.Index, "gumbel"] == pytest.approx(float(full[0, rec.token_id]), abs=0)
        # the alternatives too, in their stored order
        assert rec.top_gumbels_recomputed == pytest.approx(
            [float(full[0, i]) for i in rec.top_ids], abs=0
        )
    # the test database stores made-up alternative Gumbel values: the check must notice
    assert traces.gumbel_check(g) > 0.1


def test_runs_and_overview_agree_with_table_counts(small_db):
    runs = overview.runs(small_db)
    assert runs.loc[0, "n_generations"] == len(MODELS) * N_PROMPTS * N_REPEATS * len(MODES)
    assert sorted(runs.loc[0, "models"]) == sorted(MODELS)
    assert overview.overview(small_db).comparisons == 400
    assert overview.overview(small_db.parent / "missing.duckdb").runs == 0
    # one field per table, in the schema's order: the typed counts are the store's counts
    assert overview.overview(small_db).to_dict() == store.table_counts(small_db)
    assert list(overview.overview(small_db).to_dict()) == list(store.TABLES)


def test_keep_human_labels_exact_and_seeded():
    df = pd.DataFrame(
        {
            "model_a": ["a"] * 6,
            "model_b": ["b"] * 6,
            "human_winner": ["a", None, "b", "tie", "a", "b"],
            "judge_winner": ["a"] * 6,
        }
    )
    out = acmp.keep_human_labels(df, 2, seed=3)
    assert out["human_winner"].notna().sum() == 2
    assert set(np.flatnonzero(out["human_winner"].notna())) <= {0, 2, 3, 4, 5}  # only rows that had one
    assert out.equals(acmp.keep_human_labels(df, 2, seed=3))  # seeded
    assert acmp.keep_human_labels(df, 10).equals(df)  # n >= available: unchanged
    assert (out["judge_winner"] == "a").all()


def test_export_html_and_csv_and_bad_format():
    from dashboard import downloads as export
    from engine.errors import UserError
    from engine.figures.multigen import histogram_figure

    fig = histogram_figure([0, 0.5, 1], [3, 1, 2], title="P(correct) hist")
    html = export.figure_bytes(fig, "html").decode()
    assert "plotly" in html.lower() and "P(correct) hist" in html
    csv = export.table_csv(pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})).decode()
    assert csv.splitlines() == ["a,b", "1,x", "2,y"]
    with pytest.raises(UserError, match="allowed: png, svg, html"):
        export.figure_bytes(fig, "jpeg")
    ok, why = export.static_export_status()
    assert isinstance(ok, bool) and why


def test_export_names_carry_run_models_and_date():
    import datetime

    from dashboard import downloads as export
    from engine.errors import UserError

    day = datetime.date(2026, 11, 24)
    ctx = export.ExportContext("benchmark", run="run-ab12", models=("smollm2-135m", "smollm2-135m-int8"))
    assert (
        export.export_name("covariance_kde", "png", ctx, day)
        == "benchmark_covariance_kde_run-ab12_smollm2-135m_vs_int8_2026-11-24.png"
    )
    # a comparison set; unrelated model names stay whole; more than three -> "+N"; unsafe characters go
    ctx = export.ExportContext(
        "ranksets", set_name="arena gpt/4", models=("gpt-4", "claude-v1", "vicuna", "alpaca")
    )
    assert (
        export.export_name("ranksets", "csv", ctx, day)
        == "ranksets_ranksets_set-arena-gpt-4_gpt-4_vs_claude-v1_vs_vicuna_+1_2026-11-24.csv"
    )
    assert export.export_name("runs", "csv", None, day) == "runs_2026-11-24.csv"
    assert (
        export.export_name("accuracy", "", export.ExportContext("benchmark", run="my run_1"), day)
        == "benchmark_accuracy_run-my-run-1_2026-11-24"
    )
    cfg = export.modebar_config("benchmark_accuracy_2026-11-24", "svg")
    assert cfg["toImageButtonOptions"] == {
        "format": "svg",
        "filename": "benchmark_accuracy_2026-11-24",
        "scale": 1,
    }
    with pytest.raises(UserError, match="allowed: png, svg"):
        export.modebar_config("x", "jpeg")


def test_csv_export_has_no_float_noise():
    from dashboard import downloads as export

    df = pd.DataFrame(
        {
            "mu": [0.16999999999999998, 0.1 + 0.2, 1 / 3],
            "n": [1200, 3, 7],
            "big": [123456789.125, 1e-12, float("nan")],
            "name": ["a", "b", "c"],
        }
    )
    lines = export.table_csv(df).decode().splitlines()
    assert lines == ["mu,n,big,name", "0.17,1200,123456789.1,a", "0.3,3,1e-12,b", "0.3333333333,7,,c"]
    back = pd.read_csv(__import__("io").StringIO("\n".join(lines)))
    assert np.allclose(back["mu"], df["mu"], rtol=1e-9) and back["n"].tolist() == [1200, 3, 7]


def test_upload_problems_table_names_the_file_and_counts_the_header(tmp_path):
    from dashboard import uploads

    bad = b"prompt_id,model_a,model_b,winner\np1,x,x,model_a\np2,x,y,maybe\n"
    _, problems = uploads.validate_upload("csv", bad, None, "my prefs.csv")
    t = uploads.problems_table(problems, "csv")
    assert list(t.columns) == ["file", "line (line 1 is the header)", "column", "problem"]
    assert t["file"].tolist() == ["my prefs.csv"] * 2 and t.iloc[:, 1].tolist() == ["2", "3"]
    long = "x" * 300
    _, problems = uploads.validate_upload(
        "csv", f"prompt_id,model_a,model_b,winner\np1,{long},{long},a\n".encode(), None, "long.csv"
    )
    assert long in uploads.problems_table(problems, "csv")["problem"].iloc[0]  # never cut
    _, problems = uploads.validate_upload("arena", b"{not json\n", None, "human.jsonl")
    t = uploads.problems_table(problems, "arena")
    assert t["file"].tolist() == ["human.jsonl"] and t["line"].tolist() == ["1"]
    _, problems = uploads.validate_upload("csv", b"", None)
    assert uploads.problems_table(problems)["file"].tolist() == [
        "<upload>"
    ]  # no name given: the old label


def test_demo_button_starts_the_demo_job_on_an_empty_database(tmp_path, monkeypatch):
    from dashboard import jobs

    db = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    assert not at.exception
    at.button(key="run_demo").click().run()
    assert not at.exception
    started = jobs.list_jobs(db)
    try:
        assert len(started) == 1 and started[0].kind == "generate"
        args = list(started[0].args)
        assert args[:4] == ["generate", "--models", "smollm2-135m", "smollm2-135m-int8"]
        assert "--db" in args and args[args.index("--db") + 1] == str(db)
        meta = json.loads((jobs.jobs_dir(db) / f"{started[0].job_id}.meta.json").read_text())
        assert meta["then"][0][:1] == ["score"]  # scoring follows the generation
    finally:
        for j in started:
            jobs.cancel_job(j.job_id, db)
    assert jobs.list_jobs(db)[0].status in ("cancelled", "failed", "done")


def test_cancel_and_resume_buttons_drive_the_job(tmp_path, monkeypatch, small_db):
    """A running job shows progress and a Cancel button; cancelling it offers Resume, which restarts it."""
    import sys

    from dashboard import jobs
    from tests.test_jobs import FAKE_ENGINE

    script = tmp_path / "fake_engine.py"
    script.write_text(FAKE_ENGINE.format(root=str(ROOT)))
    exe = tmp_path / "fakepython"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    job = jobs.start_job(
        ["generate", "--units", "200", "--sleep", "0.1"], kind="generate", db=small_db, python=str(exe)
    )
    try:
        deadline = time.monotonic() + 60
        while jobs.job_status(job, small_db).done < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        at = _page(
            AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("generate")
        )
        bars = at.get("progress")
        assert bars and any("tokens/s" in b.proto.text and "/200 units" in b.proto.text for b in bars)
        assert any(f"`{job}` · running" in m.value for m in at.markdown)
        at.button(key=f"cancel_{job}").click().run()
        assert not at.exception
        assert jobs.job_status(job, small_db).status == "cancelled"
        at.button(key=f"resume_{job}").click().run()
        assert not at.exception
        newest = jobs.list_jobs(small_db)[0]
        assert newest.resumed_from == job and newest.status == "running"
    finally:
        for j in jobs.list_jobs(small_db):
            if j.status == "running":
                jobs.cancel_job(j.job_id, small_db)


@pytest.mark.shared
def test_ranksets_page_on_the_chatbot_arena_files(small_db, monkeypatch):
    from tests.conftest import shared_path

    shared_path("data", "arena", "human.json")
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    at = _page(
        AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("ranksets")
    )
    src = at.selectbox(key="rs_source")
    arena = [i for i, label in enumerate(src.options) if "Arena" in label and "gpt-4-0125" in label]
    assert arena, src.options
    src.set_value(arena[0]).run()
    assert not at.exception
    assert at.dataframe, [m.value for m in list(at.info) + list(at.warning) + list(at.error)]
    table = at.dataframe[0].value  # PPR vs human-only on the same 990 human labels
    assert len(table) == 24 and (table["lower"] <= table["upper"]).all()
    assert any(
        "ppr: n = 990 human-labelled, N = 13,957 judge-only" in c.value and "human: n = 990" in c.value
        for c in at.caption
    )
    assert "the paper's 12 models of the 20" in _texts(at)


@pytest.mark.shared
def test_winrates_page_sees_the_chatbot_arena_files(small_db, monkeypatch):
    from tests.conftest import shared_path

    shared_path("data", "arena", "human.json")
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    at = _page(
        AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("winrates")
    )
    at.selectbox(key="wr_source").set_value(
        _option(at, "wr_source", "Chatbot Arena (built-in) · human + judge gpt-4-0125")
    ).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert len(table) == 20 and "arena (human)_rank_set" in table.columns
    assert (
        table["arena (human)_rank"] == table["arena (human)_rank_set"].str.split("–").str[0].astype(int)
    ).all()
    text = _texts(at)
    assert (
        "intervals clustered by prompt (26,910 prompts, 26,919 rows)" in text and "coupled" not in text
    )


def test_divergence_summary_sql_matches_alignment_per_unit(small_db):
    summary = traces.divergence_summary(small_db, "run-small", MODELS)
    assert len(summary) == N_PROMPTS * N_REPEATS
    for rec in summary.sample(12, random_state=0).itertuples():
        steps = traces.trace_steps(
            small_db, "run-small", rec.prompt_id, int(rec.repeat), "coupled", list(MODELS)
        )
        first = traces.align_traces(steps, list(MODELS)).first_divergence
        assert (None if pd.isna(rec.first_divergence) else int(rec.first_divergence)) == first
        assert rec.n_steps == N_STEPS
    with pytest.raises(Exception, match="at least two models"):
        traces.divergence_summary(small_db, "run-small", ("m-base",))


@pytest.mark.shared
def test_benchmark_page_shows_the_papers_numbers_on_its_published_outputs(tmp_path, monkeypatch):
    from engine.tasks.importers import import_paper_mmlu
    from tests.conftest import shared_path

    responses, questions = shared_path("data", "coupled-mmlu"), shared_path("data", "mmlu")
    db = tmp_path / "paper.duckdb"
    import_paper_mmlu(db, responses, questions, subjects=["college_computer_science"])
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = _page(
        AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("benchmark")
    )
    at.selectbox(key="bm_a").set_value("Llama-3.2-3B-Instruct").run()
    at.selectbox(key="bm_b").set_value("Llama-3.2-1B-Instruct").run()
    at.selectbox(key="bm_subject").set_value("college_computer_science").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Questions × repeats"] == "100 × 10"
    assert metrics["Mean per-question covariance"] == "0.0850"  # paper: about 0.085
    assert metrics["Median Var(diff) c / i"] == "0.178 / 0.278"  # paper: 0.178 vs 0.278
    # auto error level (the coupled error at n = 120): the saving with its bootstrap interval
    assert metrics["Sample saving"].endswith("%")
    assert any(m.value.startswith("95% CI **[") and m.value.count("%") == 3 for m in at.markdown)


def test_upload_helpers_validate_then_import_as_a_job(tmp_path, monkeypatch):
    """The Upload page's path without a browser: validate (pure read), save, import job, delete job."""
    from dashboard import jobs
    from dashboard import uploads as ui
    from engine.tasks import comparisons

    db = tmp_path / "up.duckdb"
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    bad = b"prompt_id,model_a,model_b,winner\np1,x,x,model_a\np2,x,y,maybe\n"
    rows, problems = ui.validate_upload("csv", bad, None)
    assert [p["column"] for p in problems] == ["model_b", "winner"] and not db.exists()
    human = (
        b'{"num": 0, "question_id": "q0", "model_a": "x", "model_b": "y", "winner": "model_a"}\n'
        b'{"num": 1, "question_id": "q1", "model_a": "y", "model_b": "x", "winner": "tie (bothbad)"}\n'
    )
    judge = human.replace(b'"model_a"}', b'"model_b"}')
    rows, problems = ui.validate_upload("arena", human, judge)
    assert (
        problems == []
        and rows["human_winner"].tolist() == ["a", "tie"]
        and rows["judge_winner"].tolist() == ["b", "tie"]
    )
    job = ui.start_import("arena", "human.json", human, "judge.json", judge, "arena-mini", False)
    st = jobs.wait_job(job, db, timeout_s=120)
    assert st.status == "done", st.log_tail
    stored = comparisons.read_comparison_set(db, "arena-mini")
    assert stored["human_winner"].tolist() == ["a", "tie"] and stored["judge_winner"].tolist() == [
        "b",
        "tie",
    ]
    assert len(list(ui.uploads_dir().glob("*.json"))) == 2
    delete = jobs.start_job(
        ["comparisons", "delete", "arena-mini", "--db", str(db)], kind="delete", db=db, progress=False
    )
    assert jobs.wait_job(delete, db, timeout_s=120).status == "done"
    assert comparisons.list_comparison_sets(db).empty


# --------------------------------------------------------------------------- the deciding quantity


def _two_model_step():
    """One coupled step: model A picks token 1, model B token 2; shared noise g(1)=0.2, g(2)=0.6, g(3)=-1."""
    return pd.DataFrame(
        [
            {
                "model": "A",
                "step": 4,
                "token_id": 1,
                "token_text": "·yes",
                "prob": 0.5,
                "top_ids": [1, 2, 3],
                "top_probs": [0.5, 0.3, 0.2],
                "top_gumbels": [0.2, 0.6, -1.0],
                "gumbel": 0.2,
            },
            {
                "model": "B",
                "step": 4,
                "token_id": 2,
                "token_text": "·no",
                "prob": 0.4,
                "top_ids": [2, 1, 3],
                "top_probs": [0.4, 0.4, 0.2],
                "top_gumbels": [0.6, 0.2, -1.0],
                "gumbel": 0.6,
            },
        ]
    )


def test_step_decisions_exact_tiny_case():
    import math

    d = traces.step_decisions(_two_model_step(), 4, ["A", "B"], temperature=0.7).set_index("model")
    # A: s(1) = log .5 + .2, s(2) = log .3 + .6, s(3) = log .2 - 1 -> chosen 1, runner-up 2
    assert d.loc["A", "chosen"] == "·yes" and d.loc["A", "runner_up"] == "·no"
    assert d.loc["A", "s_chosen"] == pytest.approx(math.log(0.5) + 0.2)
    assert d.loc["A", "s_runner_up"] == pytest.approx(math.log(0.3) + 0.6)
    assert d.loc["A", "margin"] == pytest.approx(math.log(0.5 / 0.3) - 0.4)
    # B: s(2) = log .4 + .6 beats s(1) = log .4 + .2 by exactly the noise gap 0.4
    assert d.loc["B", "runner_up_id"] == 1 and d.loc["B", "margin"] == pytest.approx(0.4)
    assert d["consistent"].all()
    # greedy (T = 0): no noise, the margin is the log-probability gap
    g = traces.step_decisions(_two_model_step(), 4, ["A"], temperature=0).set_index("model")
    assert g.loc["A", "g_chosen"] == 0 and g.loc["A", "margin"] == pytest.approx(math.log(0.5 / 0.3))


def test_divergence_explanation_exact_tiny_case():
    import math

    e = traces.divergence_explanation(_two_model_step(), 4, ["A", "B"], temperature=0.7)
    assert e.models == ("A", "B") and e.tokens == ("·yes", "·no") and e.complete
    assert e.threshold == pytest.approx(0.4)  # g(no) - g(yes)
    assert e.log_odds == pytest.approx((math.log(0.5 / 0.3), 0.0))
    assert e.margins == pytest.approx((math.log(0.5 / 0.3) - 0.4, 0.4))
    assert e.probability_shift == pytest.approx(0.1)  # p(yes): 0.5 in A, 0.4 in B
    assert "A probability shift of 0.1 in p(·yes)" in e.text and "crossed a margin of 0.111" in e.text
    # B's probability of A's token is not stored: the text says what is missing instead of guessing
    steps = _two_model_step()
    steps.at[1, "top_ids"], steps.at[1, "top_probs"], steps.at[1, "top_gumbels"] = (
        [2, 3],
        [0.4, 0.2],
        [0.6, -1.0],
    )
    e = traces.divergence_explanation(steps, 4, ["A", "B"], temperature=0.7)
    assert not e.complete and "p_B(·yes)" in e.text and "--trace-top-k" in e.text
    # no divergence at that step
    assert traces.divergence_explanation(steps[steps.model == "A"], 4, ["A"]).models is None


def test_trace_view_has_the_deciding_quantity(small_db):
    view = traces.trace_view(small_db, "run-small", "q1", 0, "coupled", MODELS)
    assert view.temperature == 0.7
    first = view.alignment.first_divergence
    assert first is not None and list(view.decisions["model"]) == list(MODELS)
    assert view.explanation.text.startswith(f"At step {first}")


def test_divergence_table_selection_opens_the_unit(app, small_db):
    from dashboard import widgets

    units = pd.DataFrame({"prompt_id": ["q0", "q7"], "repeat": [0, 3], "first_divergence": [2, None]})
    assert widgets.unit_from_selection({"selection": {"rows": [1], "columns": []}}, units) == ("q7", 3)
    assert widgets.unit_from_selection({"selection": {"rows": []}}, units) is None
    assert widgets.unit_from_selection(None, units) is None
    # on the page: what the on_select callback does for a click on row 5 (clear the search, set the
    # unit widgets) re-renders that unit
    at = _page(app, navigation.path("traces"))
    div = traces.divergence_summary(small_db, "run-small", MODELS)
    prompt, repeat = widgets.unit_from_selection({"selection": {"rows": [5]}}, div)
    at.session_state["tr_search"], at.session_state["tr_prompt"], at.session_state["tr_repeat"] = (
        "",
        prompt,
        repeat,
    )
    at.run()
    assert not at.exception
    assert (
        at.selectbox(key="tr_prompt").value == prompt and at.selectbox(key="tr_repeat").value == repeat
    )
    assert "What decided step" in _texts(at)


def test_trace_figure_boxes_hold_whole_tokens():
    from engine.figures.traces import trace_figure

    steps = _two_model_step()
    steps = pd.concat(
        [steps, steps.assign(step=5, token_id=9, token_text=" number", gumbel=0.0)], ignore_index=True
    )
    fig = trace_figure(steps, ["A", "B"], agree=[False, True], first_divergence=4)
    bars = [t for t in fig.data if t.type == "bar"]
    texts = [t for t in fig.data if t.type == "scatter"]
    assert [b.name for b in bars] == ["A", "B"] and len(texts) == 2
    for bar, text in zip(bars, texts):
        assert list(text.text) == ["·yes" if bar.name == "A" else "·no", "·number"]  # whole, never cut
        assert all(
            w >= len(t) + 1 for w, t in zip(bar.x, text.text)
        )  # each box as wide as its longest token
        assert list(bar.base) == [0, 5] and list(bar.x) == [5, 8]  # side by side, aligned across models
        assert list(text.x) == [2.5, 9]  # each text centred in its box
    assert fig.layout.shapes[0].x0 == 0  # the first-divergence line at the left edge of step 4


def test_demo_button_is_disabled_while_a_demo_runs(tmp_path, monkeypatch):
    from dashboard import jobs

    db = tmp_path / "fresh.duckdb"
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    sleeper = tmp_path / "sleeper"
    sleeper.write_text("#!/bin/sh\nsleep 30\n")
    sleeper.chmod(0o755)
    job = jobs.start_job(jobs.DEMO_ARGS + ["--db", str(db)], kind="generate", db=db, python=str(sleeper))
    try:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
        assert not at.exception
        assert at.button(key="run_demo").disabled
        assert all(
            m.value == "0" for m in at.metric
        )  # nothing stored yet, and no error while the job runs
    finally:
        jobs.cancel_job(job, db)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT).run()
    assert not at.button(key="run_demo").disabled  # the demo stopped: it can be started again
