"""Real harnesses against `engine serve` (docs/SERVE.md): lm-evaluation-harness 0.4
(`local-completions`, `local-chat-completions`) and Inspect AI (`openai-api` provider), unchanged,
from their own venv (tests/clients/conftest.py), on two tiny models that differ a little.

A coupled server and a `--noise independent` server, up at once on the same database, answer the
same tasks (tests/data/clients: a generative task at temperature 1 with 4 repeats / epochs, a
multiple-choice task scored by log-likelihood), asked by both clients at once: the fewest processes
that cover every client (their wall and CPU times go to test-artifacts/clients-timings.txt). Their logs go through `engine import harness`, which
links every sample to its served generation; the coupled logs must agree (same answer on the same
unit) far more often than the independent ones. The multiple-choice accuracy through the server must
equal lm-eval's own `hf` model's on the same model and task.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.analysis.summary import run_summary
from engine.analysis.traces import trace_view
from engine.cli import main
from engine.store.db import query_df
from engine.tasks.harness_import import import_harness
from engine.testing import tiny_pair
from tests.clients.conftest import (
    ROOT,
    TASKS,
    Client,
    Clock,
    Server,
    lm_eval_results,
    lm_eval_timings,
    needs_clients,
)
from tests.conftest import ARTIFACTS

pytestmark = [pytest.mark.clients, pytest.mark.slow, needs_clients]
NAMES = ("tiny-a", "tiny-b")
LM_TASKS = str(TASKS / "lm_eval")


def lm_eval_argv(
    url: str, model: str, out: Path, *, chat: bool = False, task: str = "serve_gen", extra: str = ""
):
    """An `lm_eval` command line against the server (docs/SERVE.md's recipe), after `lm_eval`."""
    endpoint = "chat/completions" if chat else "completions"
    args = f"model={model},base_url={url}/{endpoint},num_concurrent=8,max_retries=3,timeout=600"
    if not chat and not extra:
        args += ",tokenizer_backend=none,tokenized_requests=False"  # the recipe: text prompts
    argv = ["--model", "local-chat-completions" if chat else "local-completions"]
    argv += ["--model_args", args + extra, "--tasks", task, "--include_path", LM_TASKS]
    argv += ["--log_samples", "--output_path", str(out)]
    if chat:
        # a system instruction: these chats are not the questions Inspect asks the same server at the
        # same time (the key is the messages; the k-th identical request gets repeat k, whichever
        # client sends it, so two clients asking the same question at once would share its repeats)
        argv += ["--apply_chat_template", "--system_instruction", "Answer in one word."]
    return argv


def inspect_argv(urls: list[str], out: Path) -> list[str]:
    """One `inspect eval` of both models on every server: a --model-spec per (server, model), all
    named as the server names them (openai-api/served/<model>), each with its server's base URL."""
    # a task path relative to the working folder (Inspect refuses absolute ones)
    task = str((TASKS / "inspect_task.py").relative_to(ROOT))
    argv = ["inspect", "eval", task]
    for url in urls:
        for m in NAMES:
            argv += ["--model-spec", json.dumps({"model": f"openai-api/served/{m}", "base_url": url})]
    argv += ["--log-dir", str(out), "--log-format", "eval", "--max-tasks", str(2 * len(urls))]
    return argv + ["--max-connections", "8", "--display", "plain"]


def _lm_eval_spec(root: Path, a: Path, cpl: str, ind: str) -> tuple[dict, dict]:
    """The lm-eval runs (tests/clients/lm_eval_driver.py) and their output folders: first lm-eval's own
    `hf` model, which needs no server (it runs while the servers load their models), then two lanes
    side by side."""
    out = {
        **{("gen", mode, m): root / f"gen-{mode}-{m}" for mode in ("cpl", "ind") for m in NAMES},
        **{("chat", "cpl", m): root / f"chat-cpl-{m}" for m in NAMES},
        "mc-served": root / "mc-served",
        "mc-hf": root / "mc-hf",
    }
    run = lambda name, argv, url: {"name": name, "argv": argv, "wait_for": url}
    gen = lambda mode, url, m: run(f"gen {mode} {m}", lm_eval_argv(url, m, out[("gen", mode, m)]), url)
    chat = lambda m: run(f"chat cpl {m}", lm_eval_argv(cpl, m, out[("chat", "cpl", m)], chat=True), cpl)
    hf = ["--model", "hf", "--model_args", f"pretrained={a},dtype=float32", "--device", "cpu"]
    hf += [
        "--tasks",
        "serve_mc",
        "--include_path",
        LM_TASKS,
        "--log_samples",
        "--output_path",
        str(out["mc-hf"]),
    ]
    # multiple choice by log-likelihood: token-id requests with `echo`, as lm-eval sends them
    mc = lm_eval_argv(cpl, "tiny-a", out["mc-served"], task="serve_mc", extra=f",tokenizer={a}")
    lanes = [
        [gen("cpl", cpl, "tiny-a"), gen("cpl", cpl, "tiny-b"), chat("tiny-a"), chat("tiny-b")],
        [gen("ind", ind, "tiny-a"), gen("ind", ind, "tiny-b"), run("mc served tiny-a", mc, cpl)],
    ]
    first = [run("mc hf tiny-a (lm-eval's own model)", hf, None)]
    spec = {"include_path": LM_TASKS, "timings": str(root / "lm-eval-timings.jsonl")}
    return {**spec, "first": first, "lanes": lanes}, out


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """Every client run, once. A coupled and a `--noise independent` server on one database, both up
    at once; lm-eval (every run in one process, tests/clients/lm_eval_driver.py) and Inspect (one call,
    all four (server, model) pairs) against them side by side. Each process's wall and CPU time is
    logged."""
    clock = Clock()
    root = tmp_path_factory.mktemp("clients")
    a, _ = tiny_pair(root / "models")
    db = root / "served.duckdb"
    procs: list = []
    try:
        # 1. both servers; --seed 1234: lm-eval's request seed, so that Inspect's requests (no seed: the
        # server's) share it (a served run holds one seed per prompt id; another gets a 409)
        for run, noise in (("cpl", "coupled"), ("ind", "independent")):
            procs.append(
                Server.start(clock, root / "models", db, run, noise, "--traces", "--seed", "1234")
            )
        servers = list(procs)
        cpl, ind = (s.url for s in servers)
        # 2. lm-eval at once: its imports and its `hf` reference run need no server
        spec, out = _lm_eval_spec(root, a, cpl, ind)
        (root / "lm-eval.json").write_text(json.dumps(spec))
        driver = ["python", str(Path(__file__).parent / "lm_eval_driver.py"), str(root / "lm-eval.json")]
        procs.append(Client.start(clock, "lm-eval (all runs, one process)", driver, root / "lm-eval"))
        # 3. Inspect once both servers answer
        for s in servers:
            s.wait_ready(clock)
        inspect = inspect_argv([cpl, ind], root / "inspect")
        env = {"SERVED_API_KEY": "unused"}
        procs.append(Client.start(clock, "inspect eval (4 models)", inspect, root / "inspect", env))
        # 4. the clients end, then the servers (SIGTERM: the store flushed)
        for c in reversed(procs[2:]):
            c.finish(clock)
        for s in servers:
            s.stop(clock)
    finally:
        for p in procs:
            p.kill()
        if len(procs) > 2 and (root / "lm-eval-timings.jsonl").exists():
            lm_eval_timings(root / "lm-eval-timings.jsonl", clock, procs[2].started)
        _report_times(request, clock)
    return {**out, "db": db, "a": a, "inspect": root / "inspect"}


def _report_times(request, clock: Clock) -> None:
    """The breakdown, on the terminal and in test-artifacts/clients-timings.txt."""
    load = f"load average {clock.load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text = f"real clients: each process's wall and CPU seconds ({load})\n{clock.table()}"
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "clients-timings.txt").write_text(text + "\n")
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    cap = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is not None and cap is not None:
        with cap.global_and_fixture_disabled():
            tr.write_line("\n" + text)


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
    logs = sorted(str(p) for p in runs["inspect"].glob("*.eval"))
    assert len(logs) == 4  # one per (server, model)
    res = import_harness(runs["db"], logs, name="inspect-gen")
    assert res.unmatched == ()
    assert sorted((d["served_model"], d["served_run"], d["mode"]) for d in res.served) == [
        ("tiny-a", "cpl", "coupled"),
        ("tiny-a", "ind", "independent"),
        ("tiny-b", "cpl", "coupled"),
        ("tiny-b", "ind", "independent"),
    ]
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
