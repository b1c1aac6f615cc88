"""Real harnesses against `engine serve` (docs/SERVE.md): lm-evaluation-harness 0.4
(`local-completions`, `local-chat-completions`) and Inspect AI (`openai-api` provider), unchanged,
from their own venv (tests/clients/conftest.py), on two tiny models that differ a little.

One coupled server and then one `--noise independent` server on the same database answer the same
tasks (tests/data/clients: a generative task at temperature 1 with 4 repeats / epochs, a
multiple-choice task scored by log-likelihood). Their logs go through `engine import harness`, which
links every sample to its served generation; the coupled logs must agree (same answer on the same
unit) far more often than the independent ones. The multiple-choice accuracy through the server must
equal lm-eval's own `hf` model's on the same model and task.
"""

from __future__ import annotations

import json

import pytest

from engine.analysis.summary import run_summary
from engine.analysis.traces import trace_view
from engine.cli import main
from engine.store.db import query_df
from engine.tasks.harness_import import import_harness
from engine.testing import tiny_pair
from tests.clients.conftest import ROOT, TASKS, client, engine_serve, lm_eval_results, needs_clients

pytestmark = [pytest.mark.clients, pytest.mark.slow, needs_clients]
NAMES = ("tiny-a", "tiny-b")
LM_TASKS = str(TASKS / "lm_eval")


def lm_eval(url: str, model: str, out, *, chat: bool = False, task: str = "serve_gen", extra: str = ""):
    endpoint = "chat/completions" if chat else "completions"
    args = f"model={model},base_url={url}/{endpoint},num_concurrent=8,max_retries=3,timeout=600"
    if not chat and not extra:
        args += ",tokenizer_backend=none,tokenized_requests=False"  # the recipe: text prompts
    cmd = ["lm_eval", "--model", "local-chat-completions" if chat else "local-completions"]
    cmd += ["--model_args", args + extra, "--tasks", task, "--include_path", LM_TASKS]
    cmd += ["--log_samples", "--output_path", str(out)] + (["--apply_chat_template"] if chat else [])
    return client(cmd, out)


def inspect(url: str, model: str, out):
    # a task path relative to the working folder (Inspect refuses absolute ones)
    task = str((TASKS / "inspect_task.py").relative_to(ROOT))
    cmd = ["inspect", "eval", task, "--model", f"openai-api/served/{model}"]
    cmd += [
        "--log-dir",
        str(out),
        "--log-format",
        "eval",
        "--max-connections",
        "4",
        "--display",
        "plain",
    ]
    return client(cmd, out, env={"SERVED_BASE_URL": url, "SERVED_API_KEY": "unused"})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every client run, once: the coupled server, then the independent one, on one database."""
    root = tmp_path_factory.mktemp("clients")
    a, b = tiny_pair(root)
    db = root / "served.duckdb"
    out: dict = {"db": db, "a": a}
    # --seed 1234: lm-eval's request seed, so that Inspect's requests (no seed: the server's) asking the
    # same questions share it (a served run holds one seed per prompt id; another gets a 409)
    with engine_serve([a, b], db, "cpl", "coupled", "--traces", "--seed", "1234") as url:
        for m in NAMES:
            out[("gen", "cpl", m)] = lm_eval(url, m, root / f"gen-cpl-{m}")
            out[("inspect", "cpl", m)] = inspect(url, m, root / f"inspect-cpl-{m}")
            out[("chat", "cpl", m)] = lm_eval(url, m, root / f"chat-cpl-{m}", chat=True)
        # multiple choice by log-likelihood: token-id requests with `echo`, as lm-eval sends them
        out["mc-served"] = lm_eval(
            url, "tiny-a", root / "mc-served", task="serve_mc", extra=f",tokenizer={a}"
        )
    with engine_serve([a, b], db, "ind", "independent", "--traces", "--seed", "1234") as url:
        for m in NAMES:
            out[("gen", "ind", m)] = lm_eval(url, m, root / f"gen-ind-{m}")
            out[("inspect", "ind", m)] = inspect(url, m, root / f"inspect-ind-{m}")
    hf_args = f"pretrained={a},dtype=float32"
    out["mc-hf"] = client(
        ["lm_eval", "--model", "hf", "--model_args", hf_args, "--device", "cpu", "--tasks", "serve_mc"]
        + ["--include_path", LM_TASKS, "--log_samples", "--output_path", str(root / "mc-hf")],
        root / "mc-hf",
    )
    return out


def _coupled_beats_independent(db, run: str, n_models: int = 2):
    s = run_summary(db, run)
    assert s.modes == ["coupled", "independent"] and len(s.models) == n_models
    ag = s.pairs[0].agreement
    # well above: the coupled interval lies above the independent one
    assert ag["coupled"].ci_low > ag["independent"].ci_high, ag
    return s


def test_lm_eval_completions_coupled_against_independent(runs):
    logs = [str(runs[("gen", mode, m)]) for mode in ("cpl", "ind") for m in NAMES]
    res = import_harness(runs["db"], logs, name="lm-gen")
    assert res.unmatched == ()
    assert sorted((d["model"], d["served_run"], d["mode"]) for d in res.served) == [
        ("tiny-a", "cpl", "coupled"),
        ("tiny-a", "ind", "independent"),
        ("tiny-b", "cpl", "coupled"),
        ("tiny-b", "ind", "independent"),
    ]
    # every answer of every repeat was linked: 8 documents x 4 repeats per model and mode
    assert all(d["matched"] == 32 for d in res.served)
    assert {tuple(d["seeds"]) for d in res.served if d["mode"] == "coupled"} == {(1234,)}
    s = _coupled_beats_independent(runs["db"], "lm-gen")
    assert s.n_repeats == 4
    # the Traces page's view of an imported unit: the stored Gumbel values are the ones its key gives
    g = query_df(runs["db"], "SELECT prompt_id, repeat FROM generations WHERE run_id = 'lm-gen' LIMIT 1")
    tv = trace_view(runs["db"], "lm-gen", g["prompt_id"][0], int(g["repeat"][0]), "coupled", NAMES)
    assert len(tv.steps) and tv.gumbel_recomputed and tv.gumbel_check < 1e-5
    # the paired analyses, the replayed sequential evaluation, the rank-sets and the report run on it
    # as on a generated run
    db = str(runs["db"])
    assert main(["benchmark-compare", "--run", "lm-gen", "--db", db, "--json"]) == 0
    assert main(["sequential", "--run", "lm-gen", "--db", db, "--mode", "both", "--json"]) == 0
    assert main(["accuracy-ranks", "--run", "lm-gen", "--db", db, "--mode", "coupled", "--json"]) == 0
    report = runs["db"].parent / "lm-gen.html"
    assert main(["report", "--run", "lm-gen", "--db", db, "--out", str(report)]) == 0
    assert "served coupled, seed 1234 (run cpl)" in report.read_text()


def test_lm_eval_chat_completions_link_to_the_coupled_run(runs):
    logs = [str(runs[("chat", "cpl", m)]) for m in NAMES]
    res = import_harness(runs["db"], logs, name="lm-chat")
    assert res.unmatched == ()
    assert [(d["mode"], d["matched"]) for d in res.served] == [("coupled", 32), ("coupled", 32)]


def test_inspect_epochs_coupled_against_independent(runs):
    logs = [
        str(next(runs[("inspect", mode, m)].glob("*.eval"))) for mode in ("cpl", "ind") for m in NAMES
    ]
    res = import_harness(runs["db"], logs, name="inspect-gen")
    assert res.unmatched == ()
    assert all(d["matched"] == 32 for d in res.served)  # 8 samples x 4 epochs
    _coupled_beats_independent(runs["db"], "inspect-gen")


def test_multiple_choice_accuracy_through_the_server_equals_lm_evals_hf_model(runs):
    served, hf = lm_eval_results(runs["mc-served"]), lm_eval_results(runs["mc-hf"])
    acc = [r["results"]["serve_mc"]["acc,none"] for r in (served, hf)]
    assert acc[0] == acc[1]
    # and per option: the same log-likelihoods, to float32 rounding of a different batch shape
    per = []
    for folder in (runs["mc-served"], runs["mc-hf"]):
        lines = [
            json.loads(x)
            for x in next(folder.rglob("samples_serve_mc_*.jsonl")).read_text().splitlines()
        ]
        per.append({x["doc_id"]: [float(r[0][0]) for r in x["resps"]] for x in lines})  # logged as text
    assert per[0].keys() == per[1].keys()
    for d in per[0]:
        assert per[0][d] == pytest.approx(per[1][d], rel=1e-4, abs=1e-4)
