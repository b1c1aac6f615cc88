"""The Label page under AppTest: start a sample, vote with the buttons, undo, progress, refusals."""

from __future__ import annotations

import re
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


# ------------------------------------------------ the sample on screen, ended tabs, late votes, text


def _unit_headings(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown if m.value.startswith("**Unit")]


def test_the_page_shows_only_the_selected_runs_sample(tmp_path, monkeypatch):
    """With a sample of run A in progress, selecting run B shows no unit of A's sample (a vote would
    go to A); leaving the page and coming back puts the selectors back on the sample shown."""
    db = build_label_db(tmp_path / "two.duckdb", n_prompts=4, repeats=1)
    build_label_db(db, n_prompts=4, repeats=1, run="run-b")
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(navigation.path("label")).run()
    at.selectbox(key="label_run").set_value(RUN).run()
    _start(at, n=3)
    assert _unit_headings(at) and T.get_sample(db, at.session_state["label_sample"])["run"] == RUN
    at.selectbox(key="label_run").set_value("run-b").run()
    assert not at.exception, at.exception
    assert not _unit_headings(at) and not [b for b in at.button if b.key.startswith("label_vote")]
    assert any("not the sample in progress" in m.value for m in at.info)
    at.selectbox(key="label_run").set_value(RUN).run()
    assert _unit_headings(at)  # the same selection: the same sample again
    at.switch_page(navigation.path("home")).run()
    at.switch_page(navigation.path("label")).run()
    assert not at.exception, at.exception
    assert at.selectbox(key="label_run").value == RUN and _unit_headings(at)


def test_a_reloaded_tab_gets_its_unit_back_and_the_page_says_what_holds_it(page):
    """A reload is a new session: while the old one still beats, the page says the unit is in another
    open tab of yours (not "other labellers"); when its beats have stopped, that it comes back, and
    once it is released, the unit is shown here."""
    import time

    from engine.store import label_log as LL

    at, db = page
    _start(at, n=1)
    old = at.session_state["label_session"]
    sid = at.session_state["label_sample"]
    reloaded = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    reloaded.switch_page(navigation.path("label")).run()
    _start(reloaded, n=1)
    assert not _unit_headings(reloaded)
    notes = " ".join(m.value for m in reloaded.info)
    assert "1 on screen in another open tab of yours" in notes and "other labellers" not in notes
    LL.beat(db, old, sid, "ann", now=time.time() - 3 * T.HEARTBEAT_S)
    reloaded.run()
    notes = " ".join(m.value for m in reloaded.info)
    assert "in a tab of yours that has gone quiet" in notes and "back here within" in notes
    LL.beat(db, old, sid, "ann", now=time.time() - T.SESSION_DEAD_S - 1)
    reloaded.run()
    assert _unit_headings(reloaded) == [
        "**Unit 1 of 1** (prompt " + _unit_headings(at)[0].split("(prompt ")[1]
    ]


def test_a_late_vote_is_refused_in_the_page(page):
    """This tab kept its unit past CLAIM_TTL_S and another labeller has it now: the vote is not
    recorded, the page says so, and shows the next unit."""
    import time

    at, db = page
    _start(at, n=3)
    sid = at.session_state["label_sample"]
    shown = _unit_headings(at)[0]
    later = time.time() + 2 * T.CLAIM_TTL_S
    held = T.next_unit(db, sid, "bob", "bob-cli", now=later)
    assert f"Unit {held + 1} of 3" in shown
    at.button(key="label_vote_first").click().run()
    assert not at.exception, at.exception
    warned = " ".join(w.value for w in at.warning)
    assert "was not recorded" in warned and "Here is your next unit" in warned
    assert S.sample_status(db, T.get_sample(db, sid)).labelled == 0
    assert _unit_headings(at) and _unit_headings(at)[0] != shown


def test_model_output_is_text_and_names_are_escaped(tmp_path, monkeypatch):
    """Model output with a Markdown image, an <img> and a reference-style image: shown as text (never
    Markdown) by default; the Markdown view escapes every image. Hostile model names and prompt ids in
    the headings and the reveal are escaped."""
    from engine import store

    pixel = "http://127.0.0.1:9/pixel.png"
    hostile = f"m![x]({pixel})"
    db = build_label_db(tmp_path / "px.duckdb", n_prompts=3, repeats=1, models=("m1", hostile))
    with store.transaction(db) as con:
        con.execute(
            "UPDATE generations SET text = text || ? ",
            [f"\n\n![pixel]({pixel}) <img src='{pixel}'> ![ref][r]\n\n[r]: {pixel}"],
        )
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page(navigation.path("label")).run()
    _start(at, n=2)
    texts = [t.value for t in at.text]
    assert sum(f"![pixel]({pixel})" in t for t in texts) == 2  # both responses, verbatim, as text
    md = [m.value for m in list(at.markdown) + list(at.caption)]
    assert not any("![" in m for m in md), md  # no Markdown image anywhere
    at.toggle(key="label_markdown").set_value(True).run()
    md = [m.value for m in at.markdown]
    assert sum("\\![pixel]" in m and "\\![ref][r]" in m for m in md) == 2
    assert not any(re.search(r"(?<!\\)!\[", m) for m in md), md
    at.button(key="label_vote_tie").click().run()
    reveal = " ".join(c.value for c in at.caption if "A was" in c.value)
    assert "m\\!\\[x\\](http\\://127.0.0.1\\:9/pixel.png)" in reveal, reveal
