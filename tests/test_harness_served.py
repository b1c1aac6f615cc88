"""`import harness` of logs made through `engine serve`: each sample linked to the served generation of
its request (the key rule's prompt id, then the answer's text), with the served unit, mode, seed,
tokens and traces; unmatched samples reported and left out (engine/tasks/harness_served.py). Exact
tiny cases on a served run written through the store; the real clients: tests/clients/."""

from __future__ import annotations

import json

import pytest

from engine.analysis.run_design import run_design
from engine.analysis.summary import run_summary
from engine.errors import UserError
from engine.serving import keys
from engine.store import served as srv
from engine.store.db import query_df, transaction
from engine.store.generations import GenerationRow, TraceRow
from engine.store.runs import PromptRow
from engine.tasks.harness_import import import_harness
from engine.tasks.harness_requests import exact_match, inspect_request

QUESTIONS = ["Q0:", "Q1:", "Q2:"]
SEED = 1234  # lm-eval's default request seed


def pid(question: str) -> str:
    return keys.questions({"prompt": question, "temperature": 1.0}, "completions")[0].prompt_id


def served_text(run: str, model: str, q: int, r: int) -> str:
    """What the served run stored: both models of the coupled run agree on repeat 0."""
    if run.startswith("cpl") and r == 0:
        return f"same{q}"
    return f"{run}-{model}-{q}-{r}"


def write_served_run(db, run: str, mode: str, models=("a", "b")) -> None:
    cfg = {"served": {"rule": keys.KEY_RULE}, "seed": SEED, "models": list(models), "modes": [mode]}
    srv.open_served_run(db, run, cfg, "token_id", "v", "h")
    for m in models:
        seed = keys.model_seed(SEED, m, mode)
        for q, question in enumerate(QUESTIONS):
            for r in range(2):
                p, text = pid(question), served_text(run, m, q, r)
                body = {"prompt": question, "temperature": 1.0, "seed": SEED}
                srv.write_served(
                    db,
                    run,
                    [PromptRow("", p, -1, "completions", question, None, None, question)],
                    [GenerationRow(run, m, p, r, mode, seed, text, [7, 8], "length", 2)],
                    [
                        srv.ServedRow(
                            run,
                            m,
                            p,
                            r,
                            mode,
                            f"cmpl-{m}{q}{r}",
                            0,
                            "completions",
                            False,
                            json.dumps(body),
                            3,
                            [0.5, 0.5],
                            [-0.7, -0.7],
                            0.01,
                        )
                    ],
                    [
                        TraceRow(run, m, p, r, mode, s, 7 + s, "x", 0.5, None, None, None)
                        for s in range(2)
                    ],
                )


def write_lm_eval(folder, model: str, run: str, extra_doc: bool = False):
    """An lm-eval local-completions log of task `gen` (repeats 2, exact_match against 'same0'),
    answers logged in the reverse of the served repeats' order."""
    folder.mkdir(parents=True)
    stamp = "2026-01-01T00-00-00.000000"
    docs = list(range(3)) + ([3] if extra_doc else [])
    lines, firsts = [], []
    for d in docs:
        question = QUESTIONS[d] if d < 3 else "never asked:"
        answers = [served_text(run, model, d, r) for r in (1, 0)] if d < 3 else ["zz", "zz"]
        score = exact_match(answers[0], "same0", {})
        firsts.append(score)
        lines.append(
            {
                "doc_id": d,
                "target": "same0",
                "arguments": {"gen_args_0": {"arg_0": question, "arg_1": {"temperature": 1.0}}},
                "resps": [answers],
                "filtered_resps": [answers[0]],
                "filter": "none",
                "exact_match": score,
            }
        )
    (folder / f"samples_gen_{stamp}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    res = {
        "lm_eval_version": "0.4.13",
        "model_name": model,
        "config": {"model": "local-completions", "model_args": f"model={model},base_url=http://x"},
        "results": {"gen": {"exact_match,none": sum(firsts) / len(firsts)}},
        "configs": {"gen": {"repeats": 2, "metric_list": [{"metric": "exact_match"}]}},
    }
    (folder / f"results_{stamp}.json").write_text(json.dumps(res))
    return folder


@pytest.fixture
def served_db(tmp_db):
    write_served_run(tmp_db, "cpl", "coupled")
    write_served_run(tmp_db, "ind", "independent")
    return tmp_db


def test_samples_link_to_their_served_units_modes_and_traces(served_db, tmp_path):
    paths = [
        write_lm_eval(tmp_path / f"{run}-{m}", m, run, extra_doc=(run, m) == ("cpl", "a"))
        for run in ("cpl", "ind")
        for m in ("a", "b")
    ]
    res = import_harness(served_db, [str(p) for p in paths], name="h")
    # the doc nobody served: one line for model a, its 2 answers left out
    assert res.unmatched == (
        "model 'a': 2 of 14 samples match no generation of served run 'cpl' (coupled), e.g. gen/3 "
        "repeat 0; left out",
    )
    assert sorted((d["model"], d["served_run"], d["mode"], d["matched"]) for d in res.served) == [
        ("a", "cpl", "coupled", 6),
        ("a", "ind", "independent", 6),
        ("b", "cpl", "coupled", 6),
        ("b", "ind", "independent", 6),
    ]
    g = query_df(
        served_db,
        "SELECT g.model, g.prompt_id, g.repeat, g.mode, g.seed, g.text, g.token_ids, s.score, s.extracted "
        "FROM generations g JOIN scores s USING (run_id, model, prompt_id, repeat, mode) "
        "WHERE run_id = 'h' ORDER BY 1, 2, 3, 4",
    )
    assert len(g) == 24 and set(g["prompt_id"]) == {pid(q) for q in QUESTIONS}
    # the served repeat, not the log's order: repeat 0 holds the text the server gave repeat 0
    for row in g.itertuples():
        q = [pid(x) for x in QUESTIONS].index(row.prompt_id)
        run = "cpl" if row.mode == "coupled" else "ind"
        assert row.text == row.extracted == served_text(run, row.model, q, row.repeat)
        assert row.score == float(row.text == "same0")
        assert row.seed == keys.model_seed(SEED, row.model, row.mode)
        assert list(row.token_ids) == [7, 8]
    traces = query_df(served_db, "SELECT count(*) AS n FROM token_traces WHERE run_id = 'h'")
    assert int(traces["n"].iloc[0]) == 24 * 2
    cfg = json.loads(
        query_df(served_db, "SELECT CAST(config AS VARCHAR) c FROM runs WHERE run_id='h'")["c"][0]
    )
    assert cfg["modes"] == ["coupled", "independent"] and cfg["seed"] == SEED
    assert cfg["imported"]["coupled"] is True
    assert run_design(served_db, "h").served == (
        "served coupled, seed 1234 (run cpl); served independent, a seed per model (run ind)"
    )
    # analysed like a generated run: coupled agreement (repeat 0 identical) above independent
    s = run_summary(served_db, "h")
    ag = s.pairs[0].agreement
    assert ag["coupled"].mean == pytest.approx(0.5) and ag["independent"].mean == 0.0


def test_a_log_matching_two_served_runs_equally_needs_served(served_db, tmp_path):
    # a third served run that stored exactly what "cpl" stored: the link is ambiguous
    write_served_run(served_db, "cpl2", "coupled")
    with transaction(served_db) as con:  # its texts as cpl's
        con.execute("UPDATE generations SET text = replace(text, 'cpl2-', 'cpl-') WHERE run_id = 'cpl2'")
    log = write_lm_eval(tmp_path / "a", "a", "cpl")
    with pytest.raises(UserError, match="--served RUN"):
        import_harness(served_db, [str(log)], name="h")
    res = import_harness(served_db, [str(log)], name="h", served=["cpl"])
    assert [d["served_run"] for d in res.served] == ["cpl"]
    with pytest.raises(UserError, match="not a served run"):
        import_harness(served_db, [str(log)], name="h", served=["nope"])


def test_logs_without_a_served_run_import_as_before(tmp_db, tmp_path):
    log = write_lm_eval(tmp_path / "a", "a", "cpl")
    res = import_harness(tmp_db, [str(log)], name="h")
    assert res.served == () and res.unmatched == ()
    g = query_df(tmp_db, "SELECT DISTINCT mode, prompt_id FROM generations WHERE run_id = 'h'")
    assert set(g["mode"]) == {"independent"} and set(g["prompt_id"]) == {"gen/0", "gen/1", "gen/2"}


def test_lm_eval_repeats_are_scored_and_checked_against_the_first_answer(tmp_db, tmp_path):
    log = write_lm_eval(tmp_path / "a", "a", "cpl")
    path = next(log.glob("samples_*.jsonl"))
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines[0]["exact_match"] = 1.0 - lines[0]["exact_match"]  # lm-eval's logged score disagrees
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(UserError, match="exact_match of the first answer"):
        import_harness(tmp_db, [str(log)], name="h")


@pytest.mark.parametrize(
    "args, pred, ref, want",
    [
        ({}, "Paris", "Paris", 1.0),
        ({}, "paris", "Paris", 0.0),
        ({"ignore_case": True}, "paris", "Paris", 1.0),
        ({"ignore_punctuation": True}, "Paris.", "Paris", 1.0),
        ({"ignore_numbers": True}, "a1", "a", 1.0),
        ({"regexes_to_ignore": ["[A-Za-z ]"]}, "ab c", "letters", 1.0),
        ({"regexes_to_ignore": ["[A-Za-z ]"]}, "ab!", "letters", 0.0),
    ],
)
def test_exact_match_is_lm_evals_rule(args, pred, ref, want):
    assert exact_match(pred, ref, args) == want


def test_inspect_requests_are_rebuilt_from_its_condensed_call_pool():
    """Inspect logs a model call's messages once per sample (events_data.calls) and refers to them by
    [start, end) ranges (call_refs); the request the server saw is those messages with the call's fields."""
    sample = {
        "events_data": {"calls": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]},
        "events": [
            {"event": "span_begin"},
            {
                "event": "model",
                "call": {
                    "request": {"model": "m", "temperature": 1.0},
                    "call_refs": [[0, 2]],
                    "call_key": "messages",
                },
            },
        ],
    }
    endpoint, body = inspect_request(sample)
    assert endpoint == "chat" and body == {
        "temperature": 1.0,
        "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
    }
    # as logged in full (older Inspect, or inspect_ai's own reader), the same request
    full = {
        "events": [
            {"event": "model", "call": {"request": {"temperature": 1.0, "messages": body["messages"]}}}
        ]
    }
    assert inspect_request(full) == ("chat", body)
    assert (
        inspect_request({"events": [{"event": "model", "call": {"request": {}, "call_refs": [[5, 6]]}}]})
        is None
    )
