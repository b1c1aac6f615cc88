"""The comparisons' optional provenance columns (repeat, mode, labeller, labelled_at, presented; schema
v4): the CSV validator, ``import comparisons``, ``comparisons export`` (an identical round trip),
``comparisons from-judge`` (the prompt is the cluster, the repeat its own column), the normalised
frames, and ``db migrate`` from schema version 3."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from engine import store
from engine.analysis.comparisons import load_comparisons, to_comparisons
from engine.cli import main
from engine.store.comparison_files import ALL_COLUMNS, validate_comparisons_csv
from engine.tasks.comparisons import export_comparison_set, import_comparisons, read_comparison_set

FULL = (
    "id,prompt_id,model_a,model_b,winner,judge_winner,repeat,mode,labeller,labelled_at,presented\n"
    "1,p1,m1,m2,a,,0,coupled,ann,2026-01-31 14:05:00,ab\n"
    "2,p1,m1,m2,b,,1,coupled,ann,2026-01-31 14:06:30.250000,ba\n"
    "3,p2,m2,m3,,tie,0,independent,,,\n"
    "4,p2,m2,m3,tie,,0,independent,bob,,ab\n"
)


def test_csv_with_every_optional_column_round_trips_identically(tmp_db):
    df, problems = validate_comparisons_csv(FULL.encode())
    assert problems == []
    assert list(df.columns) == list(ALL_COLUMNS)
    assert df.repeat.tolist() == [0, 1, 0, 0] and df.presented.tolist() == ["ab", "ba", None, "ab"]
    assert df.labelled_at[1] == pd.Timestamp("2026-01-31 14:06:30.25") and df.labelled_at[2] is None
    import_comparisons(tmp_db, FULL.encode(), "full", fmt="csv")
    stored = read_comparison_set(tmp_db, "full")
    assert stored.repeat.tolist() == [0, 1, 0, 0] and stored.labeller.tolist() == [
        "ann",
        "ann",
        None,
        "bob",
    ]
    assert stored["mode"].tolist() == ["coupled", "coupled", "independent", "independent"]
    text = export_comparison_set(tmp_db, "full")
    assert text.replace("\r\n", "\n") == FULL
    import_comparisons(tmp_db, text.encode(), "again", fmt="csv")
    assert export_comparison_set(tmp_db, "again") == text


def test_old_files_without_the_columns_keep_working(tmp_db):
    old = "prompt_id,model_a,model_b,winner\np1,m1,m2,a\np2,m1,m2,b\n"
    import_comparisons(tmp_db, old.encode(), "old", fmt="csv")
    stored = read_comparison_set(tmp_db, "old")
    assert (
        list(stored.columns) == list(ALL_COLUMNS) and stored[["repeat", "labeller"]].isna().all().all()
    )
    assert (
        export_comparison_set(tmp_db, "old").splitlines()[0]
        == "id,prompt_id,model_a,model_b,winner,judge_winner"
    )
    c = to_comparisons(stored)
    assert c.extra == {} and list(c.cluster) == ["p1", "p2"]


def test_bad_optional_values_are_each_a_problem_with_row_and_column():
    bad = (
        "prompt_id,model_a,model_b,winner,repeat,mode,labelled_at,presented\n"
        "p1,m1,m2,a,-1,coupled,2026-01-31,ab\n"
        "p1,m1,m2,a,1,sampled,yesterday,AB\n"
        "p2,m1,m2,a,x,,,both\n"
    )
    _, problems = validate_comparisons_csv(bad.encode())
    got = {(p.row, p.column) for p in problems}
    assert got == {(2, "repeat"), (3, "mode"), (3, "labelled_at"), (4, "repeat"), (4, "presented")}
    assert any("allowed: coupled, independent" in p.message for p in problems)


def test_rows_differing_only_in_repeat_or_labeller_are_not_duplicates():
    two = "prompt_id,model_a,model_b,winner,repeat,labeller\np1,m1,m2,a,0,ann\np1,m1,m2,b,1,ann\np1,m1,m2,b,1,bob\n"
    assert validate_comparisons_csv(two.encode())[1] == []
    same = "prompt_id,model_a,model_b,winner,repeat\np1,m1,m2,a,0\np1,m1,m2,b,0\n"
    assert [p.row for p in validate_comparisons_csv(same.encode())[1]] == [3]


def test_extra_columns_reach_the_stats_type_and_follow_subsets(tmp_path):
    f = tmp_path / "c.csv"
    f.write_text(FULL)
    c = to_comparisons(load_comparisons(f))
    assert set(c.extra) == {"repeat", "mode", "labeller", "labelled_at", "presented"}
    sub = c.subset(c.labelled("human"))
    assert list(sub.extra["repeat"]) == [0, 1, 0] and list(sub.cluster) == ["p1", "p1", "p2"]


def _judged_run(db: Path) -> None:
    """Run r1: 3 prompts x 2 repeats, models a and b, both orders judged by 'j'."""
    with store.transaction(db) as con:
        rows = [
            (
                "r1",
                "j",
                f"p{p}",
                r,
                "coupled",
                "a",
                "b",
                o,
                "h",
                None,
                "A" if (p + r) % 2 else "B",
                "a" if (p + r) % 2 else "b",
            )
            for p in range(3)
            for r in range(2)
            for o in ("ab", "ba")
        ]
        con.executemany(
            "INSERT INTO judgments (run_id, judge, prompt_id, repeat, mode, model_a, model_b, presented, "
            "judge_prompt_hash, raw, parsed, winner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def test_from_judge_keeps_the_prompt_as_cluster_and_the_repeat_in_its_own_column(tmp_db, capsys):
    _judged_run(tmp_db)
    assert (
        main(
            [
                "comparisons",
                "from-judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "j",
                "--mode",
                "coupled",
                "--name",
                "s",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_rows"] == 12
    df = read_comparison_set(tmp_db, "s")
    assert sorted(set(df.prompt_id)) == ["p0", "p1", "p2"]
    assert sorted(zip(df.prompt_id, df.repeat, df.presented))[:4] == [
        ("p0", 0, "ab"),
        ("p0", 0, "ba"),
        ("p0", 1, "ab"),
        ("p0", 1, "ba"),
    ]
    assert set(df.labeller) == {"j"} and set(df["mode"]) == {"coupled"}
    text = export_comparison_set(tmp_db, "s")
    assert text.splitlines()[0].endswith(",repeat,mode,labeller,presented")
    assert "p0:0" not in text
    # the CLI on the exported set and the win-rates source on the verdicts count the same prompts
    out = Path(tmp_db).parent / "s.csv"
    out.write_text(text)
    from engine.analysis.comparisons import cluster_ids, comparisons_for

    assert len(set(cluster_ids(load_comparisons(out)))) == 3
    assert len(set(cluster_ids(comparisons_for(tmp_db, "judgments", "r1")))) == 3
    from engine.analysis.winrates import winrates_for, winrates_view

    page = winrates_view(tmp_db, "judgments", "r1", reps=30, elo=False).results["coupled"].clustering
    stored = winrates_view(tmp_db, "set", "s", label="judge", reps=30, elo=False).results["s"].clustering
    cli = winrates_for(load_comparisons(out), label="judge", reps=30, elo=False).clustering
    assert page == stored == cli == "intervals clustered by prompt (3 prompts, 12 rows)"
    assert (
        main(
            [
                "comparisons",
                "from-judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                "j",
                "--mode",
                "coupled",
                "--name",
                "agree",
                "--combine",
                "agree",
                "--json",
            ]
        )
        == 0
    )
    agree = read_comparison_set(tmp_db, "agree")
    assert (
        len(agree) == 6 and agree.presented.isna().all() and sorted(agree.repeat) == [0, 0, 0, 1, 1, 1]
    )


def _make_v3(path: Path) -> None:
    """A schema-version-3 database (the v3 SCHEMA: this one without the v4 columns) with a comparison set."""
    from engine.store.schema import MIGRATIONS
    from tests.test_store_integrity import make_v1

    make_v1(path)
    con = duckdb.connect(str(path))
    for version, stmts in MIGRATIONS:
        if version < 3:
            for sql in stmts:
                con.execute(sql)
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    # a set `comparisons from-judge` made before v4: '<prompt_id>:<repeat>' as the prompt id
    con.execute("""INSERT INTO comparison_sets (name, source, n_rows, meta) VALUES ('j', 'judgments:r1:jd:coupled', 3,
                   '{"format": "judgments", "run": "r1", "judge": "jd", "mode": "coupled", "combine": "separate"}')""")
    con.execute("""INSERT INTO comparisons VALUES ('j', 0, 'p:1:0', 'a', 'b', NULL, 'a'),
                   ('j', 1, 'p:1:1', 'a', 'b', NULL, 'b'), ('j', 2, 'q:12', 'a', 'b', NULL, 'tie')""")
    con.close()


def test_db_migrate_from_v3_adds_the_columns_and_keeps_the_rows(tmp_path, capsys):
    db = tmp_path / "v3.duckdb"
    _make_v3(db)
    assert store.describe(db)["version"] == 3
    assert main(["db", "migrate", "--db", str(db), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["from_version"], res["to_version"]) == (3, store.SCHEMA_VERSION)
    df = read_comparison_set(db, "h")
    assert df.iloc[0].tolist() == ["p1", "a", "b", "a", None, None, None, None, None, None, None]
    j = read_comparison_set(
        db, "j"
    )  # the judge set's repeat split off its prompt id (a ':' inside an id stays)
    assert j.prompt_id.tolist() == ["p:1", "p:1", "q"] and j.repeat.tolist() == [0, 1, 12]
    assert set(j["mode"]) == {"coupled"} and set(j.labeller) == {"jd"}
    import_comparisons(db, FULL.encode(), "full", fmt="csv")
    assert export_comparison_set(db, "full").replace("\r\n", "\n") == FULL


@pytest.mark.parametrize("column", ["repeat", "mode", "labeller", "labelled_at", "presented"])
def test_schema_comments_every_new_column(column):
    from engine.store.schema import SCHEMA

    ddl = next(d for d in SCHEMA if "EXISTS comparisons" in d)
    line = next(ln for ln in ddl.splitlines() if ln.strip().startswith(column + " "))
    assert "-- v4:" in line
