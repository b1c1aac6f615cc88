"""Human labels on a run's own comparisons: the sampler (METHODS 9.1), the label log (durable,
no duplicates, one unit per session), the CLI (`engine label sample | import | status | sync`) and
the comparison set the labels form (export / import round trip)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from engine import store
from engine.cli import main as cli
from engine.errors import UserError
from engine.stats.label_sample import draw_label_sample
from engine.store import label_log as LL
from engine.tasks import label_sets as S
from engine.tasks import labels as T
from engine.tasks.comparisons import export_comparison_set, import_comparisons, read_comparison_set

ROOT = Path(__file__).resolve().parent.parent
RUN = "run-lab"


def build_label_db(
    path: Path,
    n_prompts: int = 8,
    models=("m1", "m2", "m3"),
    repeats: int = 2,
    run: str = RUN,
    modes=("coupled",),
) -> Path:
    """A run with generations only: ``n_prompts`` x ``repeats`` x C(len(models), 2) units per mode."""
    cfg = {"models": list(models), "repeats": repeats, "modes": list(modes), "seed": 1}
    with store.transaction(path) as con:
        con.execute(
            "INSERT INTO runs (run_id, dataset_id, config, status, n_units) VALUES (?, 'ds', ?, 'done', 0)",
            [run, json.dumps(cfg)],
        )
        con.execute(
            "INSERT OR IGNORE INTO datasets (dataset_id, source, kind, n_prompts) VALUES ('ds', 't', 'prompts', ?)",
            [n_prompts],
        )
        prompts = pd.DataFrame(
            {
                "dataset_id": "ds",
                "prompt_id": [f"p{i:05d}" for i in range(n_prompts)],
                "idx": range(n_prompts),
            }
        )
        prompts["user_prompt"] = [
            f"Question {i}: explain **markdown** and <b>bold</b>?" for i in range(n_prompts)
        ]
        store.insert_df(
            con,
            "prompts",
            prompts,
            ["dataset_id", "prompt_id", "idx", "user_prompt"],
            conflict="OR IGNORE",
        )
        gens = pd.DataFrame(
            [
                (run, m, f"p{i:05d}", r, mo, 1, f"answer of {m} to {i}/{r} <script>alert(1)</script>")
                for mo in modes
                for m in models
                for i in range(n_prompts)
                for r in range(repeats)
            ],
            columns=["run_id", "model", "prompt_id", "repeat", "mode", "seed", "text"],
        )
        store.insert_df(con, "generations", gens, list(gens.columns))
    return path


@pytest.fixture
def db(tmp_path):
    return build_label_db(tmp_path / "lab.duckdb")


# ------------------------------------------------------------------------------------ the sampler


def test_sampler_exact_tiny_case():
    idx, swap, overlap = draw_label_sample(4, 4, seed=5)
    assert sorted(idx.tolist()) == [0, 1, 2, 3]  # n = N: a permutation
    assert idx.tolist() == np.random.default_rng(5).permutation(4).tolist()
    assert not overlap.any()  # share 0: nobody doubles
    small, swap2, _ = draw_label_sample(4, 2, seed=5)
    assert (
        small.tolist() == idx[:2].tolist() and swap2.tolist() == swap[:2].tolist()
    )  # a prefix of the larger draw
    again = draw_label_sample(4, 2, seed=5)
    assert [a.tolist() for a in again] == [small.tolist(), swap2.tolist(), [False, False]]
    assert draw_label_sample(4, 4, 5, share=1.0)[2].all()
    for bad in [(0, 1), (3, 4), (3, 0)]:
        with pytest.raises(UserError):
            draw_label_sample(*bad, seed=1)


def test_sampler_is_uniform():
    """Over 4,000 seeds: each of 6 units is drawn with probability n/N, each is equally likely to
    come first, and the left/right coin is fair (chi-square tests at the 0.1% level)."""
    n_units, n, reps = 6, 2, 4000
    inc = np.zeros(n_units)
    first = np.zeros(n_units)
    swaps = 0
    for seed in range(reps):
        idx, swap, _ = draw_label_sample(n_units, n, seed)
        inc[idx] += 1
        first[idx[0]] += 1
        swaps += int(swap.sum())
    assert stats.chisquare(inc).pvalue > 1e-3 and abs(inc.sum() / reps - n) < 1e-9
    assert stats.chisquare(first).pvalue > 1e-3
    assert stats.binomtest(swaps, reps * n).pvalue > 1e-3


# ---------------------------------------------------------------------- samples and the label log


def test_sample_units_and_bad_input(db, tmp_path):
    models, units = T.run_units(db, RUN, "coupled")
    assert models == ["m1", "m2", "m3"] and len(units) == 8 * 2 * 3
    assert T.label_choices(db) == {RUN: {"coupled": 48}}
    s = T.make_sample(db, RUN, "coupled", 10, seed=3)
    assert [tuple(u[:4]) for u in s["units"]] == [units[i] for i in draw_label_sample(48, 10, 3)[0]]
    assert T.make_sample(db, RUN, "coupled", 10, seed=3) == s  # recorded once, reused
    one = build_label_db(tmp_path / "one.duckdb", models=("solo",), run="solo-run")
    cases = [
        (lambda: T.make_sample(one, "solo-run", "coupled", 2, 0), "at least 2"),
        (lambda: T.make_sample(db, RUN, "coupled", 49, 0), "larger than"),
        (lambda: T.make_sample(db, "nope", "coupled", 2, 0), "unknown run"),
        (lambda: T.make_sample(db, RUN, "independent", 2, 0), "0 model"),
        (lambda: T.next_unit(db, s["sample_id"], "ann\x1b[31m", "t"), "control characters"),
    ]
    before = sorted(p.name for p in LL.labels_dir(db).iterdir())
    for fn, words in cases:
        with pytest.raises(UserError, match=words) as e:
            fn()
        assert "\n" not in str(e.value)
    assert sorted(p.name for p in LL.labels_dir(db).iterdir()) == before  # nothing written


def test_sessions_never_share_a_unit_and_labels_never_duplicate(db):
    s = T.make_sample(db, RUN, "coupled", 6, seed=1)
    sid = s["sample_id"]
    a, b = T.next_unit(db, sid, "ann", "tab1"), T.next_unit(db, sid, "ann", "tab2")
    c = T.next_unit(db, sid, "bob", "tab3")
    assert len({a, b, c}) == 3
    assert T.next_unit(db, sid, "ann", "tab1") == a  # a rerun shows the same unit
    late = T.next_unit(db, sid, "cid", "tab4", now=__import__("time").time() + 2 * T.CLAIM_TTL_S)
    assert late == a  # an expired claim is released
    with pytest.raises(T.LateVote, match="unit .* was not recorded: it is now on screen in another tab"):
        T.record(db, sid, a, "first", "ann", "tab1")  # the old tab's late vote: cid holds the unit now
    assert T.next_unit(db, sid, "ann", "tab1") not in (a, b, c)  # and the old tab moves on
    d = T.next_unit(db, sid, "ann", "tab1")
    assert T.record(db, sid, d, "first", "ann", "tab1") is not None
    assert T.record(db, sid, d, "second", "ann", "tab2") is None  # no duplicate
    assert T.record(db, sid, b, "skip", "ann", "tab2")["winner"] is None
    st = S.sample_status(db, s)
    assert (st.labelled, st.skipped, st.remaining) == (1, 1, 4)
    ev = LL.read_events(db, sid)
    first_shown = s["units"][d][4]
    assert [e["winner"] for e in ev if e["event"] == "label"][0] == ("a" if first_shown == "ab" else "b")
    assert T.undo_last(db, sid, "ann", "tab2") == b  # the latest answer
    assert T.next_unit(db, sid, "ann", "tab2") == b  # shown again
    assert S.sample_status(db, s).skipped == 0
    assert T.undo_last(db, sid, "zed", "tab9") is None


def test_overlap_goes_to_a_second_labeller_only(db):
    s = T.make_sample(db, RUN, "coupled", 8, seed=2, share=1.0)
    sid = s["sample_id"]
    for who in ("ann", "bob"):
        while (i := T.next_unit(db, sid, who, f"tab-{who}")) is not None:
            T.record(db, sid, i, "tie", who, f"tab-{who}")
    assert T.next_unit(db, sid, "cid", "tab-c") is None  # two labellers each, then full
    rows = S.label_rows(db, sid)
    assert len(rows) == 16 and rows.iloc[:8].labeller.tolist() == ["ann"] * 8
    both = LL.run_label_rows(db, RUN)  # what an analysis reads: the logs, synced or not
    assert (
        len(both) == 16
        and set(both.sample_id) == {sid}
        and LL.run_label_rows(db, RUN, "independent").empty
    )
    assert S.sample_status(db, s).double_labelled == 8


_WORKER = """
import os, signal, sys
from engine.tasks import labels as T
db, sid, who, mode = sys.argv[1:5]
n = 0
while (i := T.next_unit(db, sid, who, who)) is not None:
    T.record(db, sid, i, "first", who, who)
    n += 1
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
print(n)
"""


def test_a_label_survives_sigkill(db):
    s = T.make_sample(db, RUN, "coupled", 5, seed=4)
    p = subprocess.run(
        [sys.executable, "-c", _WORKER, str(db), s["sample_id"], "ann", "kill"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == -signal.SIGKILL
    assert S.sample_status(db, s).labelled == 1


def test_two_processes_lose_and_duplicate_nothing(db):
    s = T.make_sample(db, RUN, "coupled", 40, seed=5)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(db), s["sample_id"], who, "run"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for who in ("ann", "bob")
    ]
    counts = [int(p.communicate(timeout=300)[0]) for p in procs]
    assert sum(counts) == 40
    labels = [e for e in LL.read_events(db, s["sample_id"]) if e["event"] == "label"]
    assert len(labels) == 40 and len({e["idx"] for e in labels}) == 40
    st = S.sample_status(db, s)
    assert (st.labelled, st.remaining) == (40, 0)


def test_labelling_needs_no_database_writer(db):
    """While another connection holds the database read-write (a judge job), votes still land."""
    s = T.make_sample(db, RUN, "coupled", 3, seed=7)
    with store.writer(db) as con:
        con.execute("BEGIN TRANSACTION")
        i = T.next_unit(db, s["sample_id"], "ann", "tab")
        assert T.record(db, s["sample_id"], i, "first", "ann", "tab") is not None
        assert S.sample_status(db, s).labelled == 1
        con.execute("ROLLBACK")


def test_a_torn_last_line_is_ignored_and_terminated(db):
    s = T.make_sample(db, RUN, "coupled", 3, seed=6)
    T.record(db, s["sample_id"], 0, "tie", "ann")
    with LL.log_path(db, s["sample_id"]).open("a") as fh:
        fh.write('{"event": "label", "idx": 1, "win')  # killed mid-write
    T.record(db, s["sample_id"], 2, "tie", "ann")
    assert S.sample_status(db, s).labelled == 2


# --------------------------------------------------------------------------------------- the CLI


def test_cli_sample_import_status_sync_and_round_trip(db, tmp_path, capsys):
    out = tmp_path / "sample.csv"
    assert (
        cli(
            [
                "label",
                "sample",
                "--db",
                str(db),
                "--run",
                RUN,
                "--mode",
                "coupled",
                "--n",
                "6",
                "--seed",
                "9",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    s = T.make_sample(db, RUN, "coupled", 6, seed=9)
    csv = pd.read_csv(out, dtype=str, keep_default_na=False)
    assert list(csv.columns) == list(S.SAMPLE_CSV_COLUMNS) and (csv.winner == "").all()
    shown_first = [u[2] if u[4] == "ab" else u[3] for u in s["units"]]
    assert csv.model_a.tolist() == shown_first and csv.prompt_id.tolist() == [u[0] for u in s["units"]]
    csv["winner"] = ["a", "b", "tie", "skip", "", "a"]
    csv.to_csv(out, index=False)
    assert cli(["label", "import", str(out), "--db", str(db), "--run", RUN, "--labeller", "ann"]) == 0
    assert (
        cli(["label", "import", str(out), "--db", str(db), "--run", RUN, "--labeller", "ann"]) == 0
    )  # idempotent
    assert "imported 0 answers" in capsys.readouterr().out.split("imported")[-1].join(["imported", ""])
    assert cli(["label", "status", "--db", str(db), "--run", RUN, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(r["labelled"], r["skipped"], r["remaining"]) for r in status] == [(4, 1, 1)]
    rows = read_comparison_set(db, s["sample_id"])  # synced by the import
    expected = []
    for u, w in zip(s["units"], csv.winner):
        if w in ("a", "b", "tie"):  # in the file's (presentation) terms; back in model_a/model_b terms
            expected.append(w if w == "tie" or u[4] == "ab" else {"a": "b", "b": "a"}[w])
    assert rows.human_winner.tolist() == expected  # skip and blank: no row
    assert rows.prompt_id.tolist() == [
        u[0] for u, w in zip(s["units"], csv.winner) if w in ("a", "b", "tie")
    ]
    assert set(rows.labeller) == {"ann"} and rows["mode"].tolist() == ["coupled"] * len(rows)
    answered = [u for u, w in zip(s["units"], csv.winner) if w in ("a", "b", "tie")]
    assert rows.repeat.tolist() == [int(u[1]) for u in answered]
    assert rows.presented.tolist() == [u[4] for u in answered]  # the file's order, as recorded
    assert rows.model_a.tolist() == [u[2] for u in answered]  # the run's model order
    assert all(r.labelled_at is not None for r in rows.itertuples())
    text = export_comparison_set(db, s["sample_id"])
    again = tmp_path / "again.csv"
    again.write_text(text)
    import_comparisons(db, again, "copy")
    pd.testing.assert_frame_equal(read_comparison_set(db, "copy"), rows)


def test_cli_refusals_write_nothing(db, tmp_path, capsys):
    sample = T.make_sample(db, RUN, "coupled", 5, seed=1)
    T.record(db, sample["sample_id"], 0, "tie", "ann")
    good = pd.read_csv(__import__("io").StringIO(S.sample_csv(sample)), dtype=str, keep_default_na=False)
    good["winner"] = "a"
    before = {p.name: p.read_bytes() for p in LL.labels_dir(db).iterdir()}
    bad_files = {
        "not a sample": good.assign(prompt_id=["p99999"] + good.prompt_id.tolist()[1:]),
        "zz-model": good.assign(model_b=good.model_b.tolist()[:-1] + ["zz-model"]),
        "is not one of": good.assign(winner=["a", "b", "left", "a", "a"]),
        "control characters": good.assign(labeller="bob\x07"),
    }
    for words, frame in bad_files.items():
        path = tmp_path / "bad.csv"
        frame.to_csv(path, index=False)
        assert (
            cli(["label", "import", str(path), "--db", str(db), "--run", RUN, "--labeller", "ann"]) == 2
        )
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
    assert cli(["label", "import", str(path), "--db", str(db), "--run", "run-other"]) == 2  # another run
    assert "no label sample" in capsys.readouterr().err
    assert (
        cli(
            [
                "label",
                "sample",
                "--db",
                str(db),
                "--run",
                RUN,
                "--mode",
                "coupled",
                "--n",
                "500",
                "--seed",
                "1",
            ]
        )
        == 2
    )
    assert "larger than" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in LL.labels_dir(db).iterdir()} == before


def test_the_audit_reads_labels_still_in_the_log_and_a_synced_copy_once(db):
    """The judge audit, a run's PPR rank-sets and the planner read human labels through
    analysis.run_units.human_labels: votes only in the label log count at once (no sync needed), and after
    `label sync` the set is the log's copy, never counted twice."""
    from engine.analysis.run_units import human_labels, label_count

    s = T.make_sample(db, RUN, "coupled", 5, seed=3)
    sid = s["sample_id"]
    votes = ["first", "second", "tie", "skip"]
    for v in votes:
        i = T.next_unit(db, sid, "ann", "tab1")
        T.record(db, sid, i, v, "ann", "tab1")
    got = human_labels(db, RUN)
    assert len(got) == 3 and set(got["set_name"]) == {sid} and label_count(db, RUN) == 3
    assert set(got["human_winner"]) <= {"a", "b", "tie"} and (got["labeller"] == "ann").all()
    S.sync_labels(db, RUN)
    again = human_labels(db, RUN)
    assert len(again) == 3 and label_count(db, RUN) == 3
    i = T.next_unit(db, sid, "ann", "tab1")  # a vote after the sync: in the log only
    T.record(db, sid, i, "first", "ann", "tab1")
    assert len(human_labels(db, RUN)) == 4 and label_count(db, RUN) == 4
    assert len(human_labels(db, RUN, set_name=sid)) == 4


def test_a_sample_from_a_stored_comparison_set_of_the_run(db, tmp_path, capsys):
    """The Label page and `label sample --set` draw from a stored comparison set made from a run (here as
    `comparisons from-judge` stores one: meta names the run and mode): only the set's units, the responses
    from the run; sets that do not come from a run, or name units the run lacks, are one line, nothing written."""
    from engine.store import comparisons as SC

    rows = pd.DataFrame(
        [
            {
                "prompt_id": f"p{i:05d}",
                "model_a": "m2",
                "model_b": "m1",
                "human_winner": None,
                "judge_winner": "a",
                "repeat": r,
                "mode": None,
            }
            for i in range(3)
            for r in range(2)
        ]
    )
    SC.write_set(
        db, rows, "judge-set", "judge", {"format": "judgments", "run": RUN, "mode": "coupled"}, False
    )
    assert T.label_set_choices(db) == {"judge-set": 6}
    s = T.make_sample(db, None, None, 6, seed=2, set_name="judge-set")
    assert (
        s["run"] == RUN
        and s["mode"] == "coupled"
        and s["n_units"] == 6
        and s["source_set"] == "judge-set"
    )
    assert sorted((u[0], u[1], u[2], u[3]) for u in s["units"]) == sorted(
        (f"p{i:05d}", r, "m1", "m2") for i in range(3) for r in range(2)
    )  # the run's canonical pair order
    unit = T.block_view(db, s["sample_id"], 0)[0]  # what the page shows: the run's prompt and responses
    assert unit.prompt and unit.first_text and unit.second_text
    assert s["sample_id"] != T.make_sample(db, RUN, "coupled", 6, seed=2)["sample_id"]
    with pytest.raises(UserError, match="larger than comparison set 'judge-set''s 6"):
        T.make_sample(db, None, None, 7, seed=2, set_name="judge-set")
    SC.write_set(db, rows.iloc[:2], "upload", "csv", {"format": "csv"}, False)
    with pytest.raises(UserError, match="does not come from a run"):
        T.make_sample(db, None, None, 1, seed=0, set_name="upload")
    bad = rows.assign(prompt_id="nope")
    SC.write_set(
        db, bad, "stray", "judge", {"format": "judgments", "run": RUN, "mode": "coupled"}, False
    )
    before = sorted(p.name for p in LL.labels_dir(db).iterdir())
    with pytest.raises(UserError, match="did not generate"):
        T.make_sample(db, None, None, 1, seed=0, set_name="stray")
    assert sorted(p.name for p in LL.labels_dir(db).iterdir()) == before
    assert (
        cli(
            [
                "label",
                "sample",
                "--set",
                "judge-set",
                "--n",
                "4",
                "--seed",
                "9",
                "--db",
                str(db),
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n"] == 4
    assert (
        cli(
            [
                "label",
                "sample",
                "--set",
                "judge-set",
                "--run",
                RUN,
                "--n",
                "4",
                "--seed",
                "9",
                "--db",
                str(db),
            ]
        )
        == 2
    )
    assert "takes its run and mode from the set" in capsys.readouterr().err
    assert cli(["label", "sample", "--n", "4", "--seed", "9", "--db", str(db)]) == 2
    assert "give --run RUN and --mode MODE, or --set NAME" in capsys.readouterr().err
