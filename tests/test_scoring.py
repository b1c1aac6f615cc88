"""Scoring rules (paper / lenient / numeric / exact) and score_run on a small stored run."""

from __future__ import annotations

import json

import pytest

from engine import store
from engine.errors import UserError
from engine.tasks import scoring
from tests.conftest import shared_path

CHOICES = {"A": "London", "B": "Paris", "C": "Rome", "D": "Berlin"}


def make_run(db, gens, prompts, run="r1", dataset="ds", models=("m1", "m2")):
    """Store a run: prompts = [(prompt_id, gold, choices|None, question)], gens = [(model, prompt_id, repeat, mode, text)]."""
    with store.writer(db) as con:
        con.begin()
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status) VALUES (?, ?, ?, 'done')",
            [run, dataset, json.dumps({"models": list(models)})],
        )
        for i, (pid, gold, choices, question) in enumerate(prompts):
            con.execute(
                "INSERT OR REPLACE INTO prompts (dataset_id, prompt_id, idx, question, choices, gold, user_prompt) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [
                    dataset,
                    pid,
                    i,
                    question,
                    None if choices is None else json.dumps(choices),
                    gold,
                    question,
                ],
            )
        for model, pid, rep, mode, text in gens:
            con.execute(
                "INSERT INTO generations (run_id, model, prompt_id, repeat, mode, seed, text) VALUES (?, ?, ?, ?, ?, 0, ?)",
                [run, model, pid, rep, mode, text],
            )
        con.commit()


@pytest.mark.parametrize(
    "text,expected",
    [
        ("A. Wrong, No", "A"),
        ("(A", "E"),
        ("A\nB", "A"),
        ("Constructing the truth table", "E"),
        (None, "E"),
        ("B", "B"),
        ("C)", "C"),
        ('"D",', "D"),
        ("a", "E"),
        ("E", "E"),
        ("", "E"),
        (" A", "E"),
        ("A;", "A"),
        ("B\n\nBecause", "B"),
        ("AB", "E"),
    ],
)
def test_paper_rule_tricky_cases(text, expected):
    assert scoring.extract_paper(text) == expected
    assert scoring.score_generation(text, {"gold": "A"}, "paper") == (expected, float(expected == "A"))


def _paper_reference(text):
    """The notebook's get_choice written out again independently (two implementations agree)."""
    if text is None:
        return "E"
    c = text.split(" ")[0]
    for ch in [".", '"', ",", ")", ";"]:
        c = c.replace(ch, "")
    c = c.strip()
    if c not in ["A", "B", "C", "D"]:
        c = c.split("\n")[0]
    return c if c in ["A", "B", "C", "D"] else "E"


def test_paper_rule_agrees_with_reference_on_random_strings():
    import numpy as np

    rng = np.random.default_rng(0)
    alphabet = list('ABCDEab .",);\n()x:')
    for _ in range(3000):
        s = "".join(rng.choice(alphabet, size=rng.integers(0, 8)))
        assert scoring.extract_paper(s) == _paper_reference(s), repr(s)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("A. Wrong, No", "A"),
        ("(A", "A"),
        ("The answer is (C).", "C"),
        ("Answer: D", "D"),
        ("I would pick (B) because", "B"),
        ("Paris", "B"),
        ("It is Rome, clearly.", "C"),
        ("the answer is a bit unclear; maybe D", "D"),
        ("Constructing the truth table", "E"),
        (None, "E"),
        ("London or Paris", "E"),
        ("**B**", "B"),
        ("A good answer is B", "B"),
        ("To answer this, C", "C"),
        ("answer: d", "E"),
        ("A,B,D", "E"),
        ("Constructing the truth table:\n\n| C | D | ~C |", "E"),
        ("I'd say **C**, not the others", "C"),
    ],
)
def test_lenient_rule(text, expected):
    assert scoring.extract_lenient(text, CHOICES) == expected
    assert scoring.score_generation(text, {"gold": "C", "choices": json.dumps(CHOICES)}, "lenient")[
        1
    ] == float(expected == "C")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("She has 1,234 apples", "1234"),
        ("Total: $18.00", "18"),
        ("3 then 4 then 72.50", "72.5"),
        ("steps 5 and 6\n#### 72\nextra 9", "72"),
        ("no number here", None),
        ("it is −3", "-3"),
        ("0.50", "0.5"),
        ("007", "7"),
        ("The answer is 42.", "42"),
        (None, None),
    ],
)
def test_numeric_rule(text, expected):
    assert scoring.extract_numeric(text) == expected


def test_numeric_scores_against_gsm8k_gold():
    assert scoring.score_generation("so $1,000.00 total", {"gold": "#### 1000"}, "numeric") == (
        "1000",
        1.0,
    )
    assert scoring.score_generation("so 999", {"gold": "1000"}, "numeric") == ("999", 0.0)
    assert scoring.score_generation("nothing", {"gold": "1000"}, "numeric") == (None, 0.0)
    with pytest.raises(UserError, match="holds no number"):
        scoring.score_generation("7", {"gold": "seven"}, "numeric")


def test_exact_rule_normalises_case_space_punctuation():
    assert scoring.score_generation("  Paris!  ", {"gold": "paris"}, "exact") == ("paris", 1.0)
    assert scoring.score_generation("New   York, NY.", {"gold": "new york ny"}, "exact")[1] == 1.0
    assert scoring.score_generation("Paris, France", {"gold": "Paris"}, "exact")[1] == 0.0


def test_no_gold_gives_null_score_and_bad_rule_is_user_error():
    assert scoring.score_generation("A", {"gold": None}, "paper") == ("A", None)
    with pytest.raises(UserError, match="allowed: paper, lenient, numeric, exact"):
        scoring.score_generation("A", {"gold": "A"}, "fuzzy")


def test_score_run_stores_idempotently_and_keeps_other_rules(tmp_db):
    prompts = [("q1", "A", CHOICES, "Capital?"), ("q2", "B", CHOICES, "Capital 2?")]
    gens = [
        ("m1", "q1", 0, "coupled", "A"),
        ("m1", "q1", 1, "coupled", "(A"),
        ("m1", "q2", 0, "coupled", "Paris"),
        ("m2", "q1", 0, "coupled", "B. no"),
        ("m2", "q2", 0, "independent", "B"),
        ("m2", "q2", 1, "independent", None),
    ]
    make_run(tmp_db, gens, prompts)
    s1 = scoring.score_run(tmp_db, "r1", "paper")
    assert s1["n_scored"] == 6 and s1["n_no_answer"] == 3  # "(A", "Paris", None -> E
    s2 = scoring.score_run(tmp_db, "r1", "lenient")
    again = scoring.score_run(tmp_db, "r1", "paper")
    assert again == s1
    df = store.query_df(tmp_db, "SELECT * FROM scores ORDER BY rule, model, mode, prompt_id, repeat")
    assert len(df) == 12
    paper = df[df.rule == "paper"]
    assert paper.score.tolist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    lenient = df[df.rule == "lenient"]
    assert lenient.extracted.tolist() == ["A", "A", "B", "B", "B", "E"]
    assert lenient.score.tolist() == [1.0, 1.0, 1.0, 0.0, 1.0, 0.0]
    # per-row scores equal score_generation applied one by one (vectorised store vs naive loop)
    texts = {(m, p, r, mo): t for m, p, r, mo, t in gens}
    gold = {p: g for p, g, *_ in prompts}
    for row in lenient.itertuples():
        e, s = scoring.score_generation(
            texts[(row.model, row.prompt_id, row.repeat, row.mode)],
            {"gold": gold[row.prompt_id], "choices": CHOICES},
            "lenient",
        )
        assert (row.extracted, row.score) == (e, s)
    assert s2["rule"] == "lenient"


def test_score_run_unknown_run_and_rule(tmp_db):
    make_run(tmp_db, [("m1", "q1", 0, "coupled", "A")], [("q1", "A", None, "Q")])
    with pytest.raises(UserError, match="unknown run 'nope'"):
        scoring.score_run(tmp_db, "nope", "paper")
    with pytest.raises(UserError, match="unknown scoring rule"):
        scoring.score_run(tmp_db, "r1", "bogus")
    before = store.table_counts(tmp_db)
    assert before["scores"] == 0


@pytest.mark.shared
def test_score_run_reproduces_the_paper_importers_scores(tmp_db):
    """Two implementations agree: score_run(rule='paper') over the published responses equals the
    scores the paper importer stores (vectorised over distinct texts) for one subject."""
    from engine.tasks import importers

    responses = shared_path("data", "coupled-mmlu")
    questions = shared_path("data", "mmlu")
    importers.import_paper_mmlu(tmp_db, responses, questions, subjects=["college_computer_science"])
    run = store.query_df(tmp_db, "SELECT run_id FROM runs").run_id[0]
    sql = "SELECT model, prompt_id, repeat, mode, extracted, score FROM scores WHERE rule = 'paper' ORDER BY ALL"
    imported = store.query_df(tmp_db, sql)
    summary = scoring.score_run(tmp_db, run, "paper")
    assert summary["n_scored"] == len(imported) == 3 * 2 * 100 * 10
    assert store.query_df(tmp_db, sql).equals(imported)


def test_score_command_summary_is_a_table():
    from engine.commands import score as cmd

    text = cmd.summary(
        {
            "run": "r",
            "rule": "paper",
            "n_scored": 1200,
            "n_no_gold": 0,
            "n_no_answer": 3,
            "mean_score": [
                {"model": "a", "mode": "coupled", "score": 0.16999999999999998},
                {"model": "bb", "mode": "independent", "score": 0.5},
            ],
        }
    )
    lines = text.splitlines()
    assert (
        lines[0]
        == "scored 1,200 generations of run r with rule paper (3 without an extractable answer, "
        "0 without a gold answer)"
    )
    assert lines[1:] == [
        "model  mode         mean score",
        "-----  -----------  ----------",
        "a      coupled           0.170",
        "bb     independent       0.500",
    ]
