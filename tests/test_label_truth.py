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
