"""Which human labels count, and who may answer a unit (docs/LABELS.md): one source of truth for every
reader (the label log, never a stale synced copy), a vote only from the session that holds the unit,
claims of a session that ended released, and sample files written by two tabs at once."""

from __future__ import annotations

import json

import pytest

from engine.analysis import run_units as U
from engine.analysis.judge_audit import judge_audit
from engine.analysis.run_ranksets import run_ranksets
from engine.cli import main as cli
from engine.store.verdicts import VerdictRow, insert_verdicts
from engine.tasks import label_sets as S
from engine.tasks import labels as T
from tests.test_labels import RUN, build_label_db

JUDGE = "j"


@pytest.fixture
def judged(tmp_path):
    """A run of 3 models x 8 prompts x 2 repeats (48 units), every unit judged in both orders."""
    db = build_label_db(tmp_path / "judged.duckdb")
    _models, units = T.run_units(db, RUN, "coupled")
    rows = [
        VerdictRow(
            RUN, JUDGE, p, r, "coupled", a, b, order, "h", None, "A", "a" if order == "ab" else "b"
        )
        for i, (p, r, a, b) in enumerate(units)
        for order in ("ab", "ba")
        if (i % 3 != 0 or order == "ab")
    ]
    insert_verdicts(db, rows)
    return db


def _counts(db) -> tuple[int, int, int, int]:
    """What each reader says: human_labels rows, label_count, the audit's labelled units, PPR's."""
    audit = judge_audit(db, RUN, JUDGE, n_boot=20)
    ranks = run_ranksets(db, RUN, JUDGE)
    return len(U.human_labels(db, RUN)), U.label_count(db, RUN), audit.n_audited, ranks.n_labelled


def _vote(db, sid, who, choice="first", session="tab"):
    i = T.next_unit(db, sid, who, session)
    assert T.record(db, sid, i, choice, who, session) is not None
    return i


def test_undone_labels_stay_undone_after_a_sync(judged, capsys):
    """Label, sync, undo: every reader (the audit, `judge-audit`, the rank-sets, the report's count)
    says the same, and the undone answer is not read back from the stale synced copy."""
    db = judged
    sid = T.make_sample(db, RUN, "coupled", 6, seed=1)["sample_id"]
    _vote(db, sid, "ann")
    _vote(db, sid, "ann", "tie")
    assert _counts(db) == (2, 2, 2, 2)
    S.sync_labels(db, RUN)
    assert _counts(db) == (2, 2, 2, 2)
    assert T.undo_last(db, sid, "ann", "tab") is not None
    assert _counts(db) == (1, 1, 1, 1)
    assert T.undo_last(db, sid, "ann", "tab") is not None
    assert _counts(db) == (0, 0, 0, 0)  # the synced copy still holds 2 rows: not read
    assert U.human_labels(db, RUN, set_name=sid).empty
    assert (
        cli(["judge-audit", "--db", str(db), "--run", RUN, "--judge", JUDGE, "--boot", "20", "--json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_audited"] == 0
    _vote(db, sid, "ann", "second")
    assert _counts(db) == (1, 1, 1, 1)
    S.sync_labels(db, RUN)
    assert _counts(db) == (1, 1, 1, 1)


def test_a_stored_set_that_is_not_a_sample_still_counts(judged):
    """An uploaded set naming the run is a source of its own, next to the label samples' logs."""
    import pandas as pd

    from engine.store import comparisons as SC

    db = judged
    _m, units = T.run_units(db, RUN, "coupled")
    up = pd.DataFrame(
        [
            {
                "prompt_id": p,
                "model_a": a,
                "model_b": b,
                "human_winner": "a",
                "judge_winner": None,
                "repeat": r,
                "mode": "coupled",
            }
            for p, r, a, b in units[:3]
        ]
    )
    SC.write_set(db, up, "upload", "csv", {"run_id": RUN, "mode": "coupled"}, False)
    sid = T.make_sample(db, RUN, "coupled", 6, seed=1)["sample_id"]
    _vote(db, sid, "ann")
    src = U.label_sources(db, RUN)
    assert src.samples == (sid,) and [n for n, _ in src.sets] == ["upload"]
    assert _counts(db)[:2] == (4, 4)
    S.sync_labels(db, RUN)
    T.undo_last(db, sid, "ann", "tab")
    assert _counts(db)[:2] == (3, 3)


# ----------------------------------------------------------------- one unit, the labellers it takes


def test_a_stale_tab_cannot_vote_on_a_unit_another_session_holds(judged):
    """ann's tab left unit `a` for over CLAIM_TTL_S; bob's tab got it. ann's late vote is refused
    (nothing written) and the unit, drawn for one labeller, is counted once everywhere."""
    import time

    from engine.store import label_log as LL
    from engine.tasks.comparisons import read_comparison_set

    db = judged
    s = T.make_sample(db, RUN, "coupled", 3, seed=2)
    sid = s["sample_id"]
    assert not any(u[5] for u in s["units"])  # one labeller per unit
    a = T.next_unit(db, sid, "ann", "tab-ann")
    later = time.time() + 2 * T.CLAIM_TTL_S
    assert T.next_unit(db, sid, "bob", "tab-bob", now=later) == a
    before = LL.log_path(db, sid).read_bytes()
    with pytest.raises(T.UserError, match="not recorded: it is now on screen in another tab"):
        T.record(db, sid, a, "first", "ann", "tab-ann")
    assert LL.log_path(db, sid).read_bytes() == before  # nothing written
    assert T.record(db, sid, a, "second", "bob", "tab-bob", now=later) is not None
    with pytest.raises(T.UserError, match="already has its answer from another labeller"):
        T.record(db, sid, a, "first", "ann", "tab-ann")
    S.sync_labels(db, RUN)
    rows = read_comparison_set(db, sid)
    assert len(rows) == 1 and rows.labeller.tolist() == ["bob"]
    assert len(U.human_labels(db, RUN)) == 1 and S.sample_status(db, s).double_labelled == 0


def test_an_old_log_with_two_answers_on_a_single_unit_counts_one(judged):
    """A log written before votes were checked against claims may hold two labellers' answers on a
    unit drawn for one: only the first is read (rows, status, the audit's labels)."""
    import uuid

    from engine.store import label_log as LL

    db = judged
    s = T.make_sample(db, RUN, "coupled", 4, seed=3, share=0.0)
    sid = s["sample_id"]
    T.record(db, sid, 0, "first", "ann")
    late = {
        "event": "label",
        "id": uuid.uuid4().hex,
        "idx": 0,
        "winner": "b",
        "presented": "ab",
        "labeller": "bob",
        "session": "old-tab",
        "at": "2026-01-01T00:00:00.000+00:00",
    }
    with LL.log_path(db, sid).open("a") as fh:
        fh.write(json.dumps(late) + "\n")
    assert LL.label_rows(db, sid).labeller.tolist() == ["ann"]
    st = S.sample_status(db, s)
    assert (st.labelled, st.double_labelled, st.labellers) == (1, 0, ("ann",))
    assert U.label_count(db, RUN) == 1 == len(U.human_labels(db, RUN))


def test_a_unit_for_two_labellers_takes_two_and_an_import_adds_no_third(judged, tmp_path):
    import io

    import pandas as pd

    db = judged
    s = T.make_sample(db, RUN, "coupled", 2, seed=4, share=1.0)
    sid = s["sample_id"]
    for who in ("ann", "bob"):
        assert T.record(db, sid, 0, "tie", who, f"tab-{who}") is not None
    with pytest.raises(T.UserError, match="already has its answer"):
        T.record(db, sid, 0, "tie", "cid", "tab-cid")
    filled = pd.read_csv(io.StringIO(S.sample_csv(s)), dtype=str, keep_default_na=False)
    filled["winner"] = "a"
    path = tmp_path / "cid.csv"
    filled.to_csv(path, index=False)
    res = S.import_labels(db, path, RUN, "cid")
    assert (res["written"], res["answered_by_others"], res["already_there"]) == (1, 1, 0)
    rows = S.label_rows(db, sid)  # unit 0: ann and bob; cid's import only on unit 1
    assert sorted(zip(rows.prompt_id, rows.labeller)) == sorted(
        [(s["units"][0][0], "ann"), (s["units"][0][0], "bob"), (s["units"][1][0], "cid")]
    )


def test_two_tabs_drawing_one_sample_at_once_use_their_own_temp_files(tmp_path, monkeypatch):
    """Two tabs of one server are threads of one process: a second write of the same sample file
    between the first's temp write and its rename must not take the first's temp file away."""
    import os

    from engine.store import label_log as LL

    db = build_label_db(tmp_path / "two.duckdb")
    real, calls = os.replace, []

    def replace(src, dst):
        if not calls:  # the other tab draws the same sample now
            calls.append(src)
            T.make_sample(db, RUN, "coupled", 4, seed=1)
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    s = T.make_sample(db, RUN, "coupled", 4, seed=1)
    monkeypatch.undo()
    assert calls and T.get_sample(db, s["sample_id"]) == s
    assert sorted(p.name for p in LL.labels_dir(db).iterdir()) == [
        LL.sample_path(db, s["sample_id"]).name
    ]


# ------------------------------------------------------------------- sessions that have ended


def test_a_tab_that_stopped_beating_gives_its_unit_back(judged):
    """ann's tab shows unit `a` and beats; the server is killed (or the page reloaded): the beats stop,
    and within SESSION_DEAD_S (not CLAIM_TTL_S) a new session of ann gets `a` back. The waiting page
    is told who holds what. A session that moves to another sample lets its claim go at once; one
    that never beats (the CLI) keeps it for CLAIM_TTL_S."""
    import time

    from engine.store import label_log as LL

    db = judged
    sid = T.make_sample(db, RUN, "coupled", 2, seed=5)["sample_id"]
    t0 = time.time()
    LL.beat(db, "tab1", sid, "ann", now=t0)
    a = T.next_unit(db, sid, "ann", "tab1", now=t0)
    b = T.next_unit(db, sid, "bob", "tab-bob", now=t0 + 1)
    assert b != a
    assert T.next_unit(db, sid, "ann", "tab2", now=t0 + 5) is None  # tab1 is alive: a is its
    h = {x.idx: x for x in T.holds(db, sid, "tab2", now=t0 + 5)}
    assert (h[a].labeller, h[a].stopped, h[b].labeller) == ("ann", False, "bob")
    late = t0 + T.SESSION_DEAD_S - 10  # tab1 quiet for a while: said to have stopped, not yet released
    h = {x.idx: x for x in T.holds(db, sid, "tab2", now=late)}
    assert h[a].stopped and h[a].back_in_s == pytest.approx(10)
    assert T.peek_unit(db, sid, "ann", "tab2", now=t0 + 5) is None
    assert T.peek_unit(db, sid, "ann", "tab2", now=t0 + T.SESSION_DEAD_S + 1) == a  # claims nothing
    assert T.next_unit(db, sid, "ann", "tab2", now=t0 + T.SESSION_DEAD_S + 1) == a  # released
    with pytest.raises(T.UserError, match="not recorded"):
        T.record(db, sid, a, "tie", "ann", "tab1", now=t0 + T.SESSION_DEAD_S + 2)  # the old tab, if back
    # moving to another sample lets the claim go; the CLI's claim (no beats) is kept
    sid2 = T.make_sample(db, RUN, "coupled", 3, seed=6)["sample_id"]
    LL.beat(db, "tab-bob", sid2, "bob", now=t0 + 2)
    assert T.next_unit(db, sid, "cid", "tab-cid", now=t0 + 3) == b
    c = T.next_unit(db, sid2, "ann", "cli", now=t0)
    assert T.next_unit(db, sid2, "bob", "tab-bob", now=t0 + T.SESSION_DEAD_S + 1) != c
