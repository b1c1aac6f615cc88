"""The Label page under AppTest: start a sample, vote with the buttons, undo, progress, refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.store import label_log as LL
from engine.tasks import label_sets as S
from engine.tasks import labels as T
from tests.test_labels import RUN, build_label_db

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def page(tmp_path, monkeypatch):
    db = build_label_db(tmp_path / "page.duckdb", n_prompts=6, repeats=1)
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(navigation.path("label")).run()
    assert not at.exception, at.exception
    return at, db


def _start(at: AppTest, name: str = "ann", n: int = 5, share: float = 0.0) -> AppTest:
    at.text_input(key="label_name").set_value(name)
    at.number_input(key="label_n").set_value(n)
    at.slider(key="label_share").set_value(share)
    at.button(key="label_start").click().run()
    assert not at.exception, at.exception
    return at


def _all_text(at: AppTest) -> str:
    return " ".join(str(m.value) for m in list(at.markdown) + list(at.caption) + list(at.text))


def test_votes_undo_and_progress(page):
    at, db = page
    _start(at)
    sid = at.session_state["label_sample"]
    sample = T.get_sample(db, sid)
    assert "Unit 1 of 5" in _all_text(at)
    u0 = sample["units"][0]
    first, second = (u0[2], u0[3]) if u0[4] == "ab" else (u0[3], u0[2])
    assert first not in " ".join(m.value for m in at.markdown if "Unit" in m.value)  # names hidden
    at.button(key="label_vote_first").click().run()
    assert f"A was **{first}**, B was **{second}**" in _all_text(at)  # revealed after the vote
    assert "Unit 2 of 5" in _all_text(at)
    at.button(key="label_vote_skip").click().run()
    at.button(key="label_vote_tie").click().run()
    assert "2 labelled, 1 skipped, of a sample of 5" in at.get("progress")[0].proto.text
    at.button(key="label_undo").click().run()
    assert "Unit 3 of 5" in _all_text(at)  # the undone unit again
    assert S.sample_status(db, sample).labelled == 1
    rows = S.label_rows(db, sid)
    assert rows.human_winner.tolist() == ["a" if u0[4] == "ab" else "b"] and rows.labeller.tolist() == [
        "ann"
    ]
    for _ in range(3):
        at.button(key="label_vote_second").click().run()
    assert any("Nothing left for ann" in s.value for s in at.success)
    assert not at.exception


def test_two_tabs_get_different_units(page, tmp_path, monkeypatch):
    at, db = page
    _start(at, "ann")
    other = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    other.switch_page(navigation.path("label")).run()
    _start(other, "bob")
    texts = [next(m.value for m in t.markdown if m.value.startswith("**Unit")) for t in (at, other)]
    assert texts[0] != texts[1]


def test_bad_labeller_and_too_large_sample_write_nothing(page):
    at, db = page
    _start(at, "ann\x07")
    assert "control characters" in at.error[0].value and "label_sample" not in at.session_state
    _start(at, "ann", n=500)
    assert "larger than" in at.error[0].value
    assert not LL.labels_dir(db).exists()
    assert RUN in at.selectbox(key="label_run").options


def test_labelling_a_stored_comparison_set(tmp_path, monkeypatch):
    """The page's second source: a comparison set made from the run; the sample is drawn from its rows."""
    import pandas as pd

    from engine.store import comparisons as SC

    db = build_label_db(tmp_path / "page.duckdb", n_prompts=6, repeats=1)
    rows = pd.DataFrame(
        [
            {
                "prompt_id": f"p{i:05d}",
                "model_a": "m1",
                "model_b": "m3",
                "human_winner": None,
                "judge_winner": "b",
                "repeat": 0,
                "mode": "coupled",
            }
            for i in range(4)
        ]
    )
    SC.write_set(
        db, rows, "verdicts", "judge", {"format": "judgments", "run": RUN, "mode": "coupled"}, False
    )
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(navigation.path("label")).run()
    at.radio(key="label_source").set_value("a comparison set").run()
    assert at.selectbox(key="label_set").value == "verdicts"
    _start(at, n=4)
    sample = T.get_sample(db, at.session_state["label_sample"])
    assert sample["source_set"] == "verdicts" and sample["n_units"] == 4
    assert {(u[2], u[3]) for u in sample["units"]} == {("m1", "m3")}
    assert "Unit 1 of 4" in _all_text(at)


def test_an_empty_database_gets_one_note_saying_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(navigation.path("label")).run()
    assert not at.exception, at.exception
    notes = [m.value for m in at.info]
    assert len(notes) == 1 and "No run with two models yet" in notes[0], notes
    assert not (tmp_path / "none.duckdb").exists()
