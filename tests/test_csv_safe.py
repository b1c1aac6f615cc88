"""Exports that open safely: every CSV the product writes neutralises a cell that a
spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``), through one function
(engine/csvsafe.py), and the product reads its own exports back to the same names: the dashboard's
table downloads, a comparison set's export (re-imported), a label sample's CSV (filled and imported),
exported generations; ``label sample --out -`` writes the CSV to stdout like every ``--out -``."""

from __future__ import annotations

import csv
import io
import random
import re

import pandas as pd
import pytest

from engine import cli
from engine.csvsafe import FORMULA_STARTS, csv_cell, csv_frame, csv_read_cell
from tests.test_labels import build_label_db

HOSTILE = ["=cmd|' /C calc'!A0", "@SUM(1+1)", "-2+3", "+x", "'=already"]
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]")


def _live(cell: str) -> bool:
    """What a spreadsheet would run: a formula start that is not a plain number."""
    return cell[:1] in FORMULA_STARTS and not PLAIN_NUMBER.fullmatch(cell)


def _cells(text: str) -> list[str]:
    return [c for row in csv.reader(io.StringIO(text)) for c in row]


def test_csv_cell_exact_cases():
    assert csv_cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert (
        csv_cell("@SUM(A1)") == "'@SUM(A1)" and csv_cell("+x") == "'+x" and csv_cell("\t=1") == "'\t=1"
    )
    assert csv_cell("-0.25") == "-0.25" and csv_cell("+1e-3") == "+1e-3" and csv_cell("-") == "-"
    assert csv_cell("-2+3") == "'-2+3"  # not a plain number: a formula
    assert csv_cell("m-base") == "m-base" and csv_cell("'abc") == "'abc"
    assert csv_cell("'=x") == "''=x"  # quoted once more, so reading back gives it unchanged
    assert csv_cell(3.5) == 3.5 and csv_cell(None) is None


def test_reading_back_inverts_writing_on_random_strings():
    rng = random.Random(0)
    alphabet = "=+-@'\t a1.e"
    for _ in range(20_000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 5)))
        w = csv_cell(s)
        assert csv_read_cell(w) == s, s
        assert not _live(w), s  # what is written never runs


def test_a_dashboard_table_download_runs_no_formula():
    from dashboard.downloads import table_csv

    df = pd.DataFrame({"model": HOSTILE, "=col": range(5), "x": [-0.5, 1.0, 2.0, 3.0, 4.0]})
    text = table_csv(df).decode()
    assert not [c for c in _cells(text) if _live(c)]
    back = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False).map(csv_read_cell)
    assert back["model"].tolist() == HOSTILE and "=col" in [csv_read_cell(c) for c in back.columns]


def test_a_comparison_set_export_runs_no_formula_and_reimports_the_same_names(tmp_path):
    from engine.tasks.comparisons import export_comparison_set, import_comparisons, read_comparison_set

    db = tmp_path / "c.duckdb"
    rows = pd.DataFrame(
        {
            "prompt_id": [f"=p{i}" for i in range(8)],
            "model_a": [HOSTILE[i % 5] for i in range(8)],
            "model_b": [HOSTILE[(i + 1) % 5] for i in range(8)],
            "winner": ["model_a", "model_b"] * 4,
        }
    )
    import_comparisons(db, rows.to_csv(index=False).encode(), "s1", fmt="csv")
    text = export_comparison_set(db, "s1")
    assert not [c for c in _cells(text) if _live(c)]
    import_comparisons(db, text.encode(), "s2", fmt="csv")
    a, b = read_comparison_set(db, "s1"), read_comparison_set(db, "s2")
    pd.testing.assert_frame_equal(a, b)
    # read as the product reads any CSV: a leading ' before a formula start is the guard's, dropped
    assert sorted(set(a.model_a)) == sorted({csv_read_cell(h) for h in HOSTILE})
    assert export_comparison_set(db, "s2") == text


def test_a_label_sample_csv_runs_no_formula_and_imports_back(tmp_path, capsys):
    from engine.tasks import label_sets as S
    from engine.tasks import labels as T

    db = build_label_db(tmp_path / "l.duckdb", models=tuple(HOSTILE[:3]))
    sample = T.make_sample(db, "run-lab", "coupled", 6, seed=1)
    text = S.sample_csv(sample)
    assert not [c for c in _cells(text) if _live(c)]
    filled = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    filled["winner"] = "a"
    path = tmp_path / "filled.csv"
    path.write_text(filled.to_csv(index=False))
    res = S.import_labels(db, path, "run-lab", labeller="ann")
    assert res["answers"] == 6
    # --out -: the CSV on stdout, the line about it elsewhere
    capsys.readouterr()
    args = ["label", "sample", "--db", str(db), "--run", "run-lab", "--mode", "coupled", "--n", "6"]
    assert cli.main([*args, "--seed", "1", "--out", "-"]) == 0
    out = capsys.readouterr()
    assert out.out == text and not (tmp_path / "-").exists()


def test_exported_generations_run_no_formula(tmp_path, capsys):
    db = build_label_db(tmp_path / "g.duckdb", models=tuple(HOSTILE[:3]))
    capsys.readouterr()
    assert cli.main(["export", "generations", "--db", str(db), "--run", "run-lab", "--out", "-"]) == 0
    text = capsys.readouterr().out
    cells = _cells(text)
    assert not [c for c in cells if _live(c)] and "'" + HOSTILE[0] in cells


@pytest.mark.parametrize("value", HOSTILE)
def test_csv_frame_leaves_numbers_and_dates_alone(value):
    df = pd.DataFrame({"s": [value], "n": [-1.5], "t": [pd.Timestamp("2026-01-01")]})
    out = csv_frame(df)
    assert out["n"].tolist() == [-1.5] and out["t"].tolist() == [pd.Timestamp("2026-01-01")]
    assert csv_read_cell(out["s"].iloc[0]) == value and not _live(out["s"].iloc[0])
