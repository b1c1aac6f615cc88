"""Uploads of pairwise comparisons: every malformed file is rejected with a row-numbered message
and leaves the database exactly as it was; Arena files round-trip; sets are listed and deleted."""

from __future__ import annotations

import pandas as pd
import pytest

from engine import store
from engine.errors import UserError
from engine.tasks import comparisons as cmp
from tests.conftest import shared_path

HEADER = "prompt_id,model_a,model_b,winner\n"
GOOD = HEADER + "p1,m1,m2,model_a\np2,m2,m3,tie\np3,m1,m3,b\n"
MODELS = ["m1", "m2", "m3"]


def dump(db) -> dict:
    """Every row of every table, sorted (a full dump to compare before/after a failed upload)."""
    out = {}
    with store.reader(db) as con:
        for ddl in store.SCHEMA:
            name = ddl.split("EXISTS", 1)[1].split("(", 1)[0].strip()
            rows = con.execute(f'SELECT * FROM "{name}"').fetchall()  # table names from SCHEMA
            out[name] = sorted(map(repr, rows))
    return out


@pytest.fixture
def db_with_set(tmp_db, tmp_path):
    f = tmp_path / "good.csv"
    f.write_text(GOOD)
    cmp.import_comparisons(tmp_db, f, "existing")
    return tmp_db


MALFORMED = [  # (id, file bytes, expected (row, column, message regex))
    ("empty", b"", (None, None, "file is empty")),
    ("whitespace-only", b"  \n\n ", (None, None, "file is empty")),
    (
        "latin-1",
        (HEADER + "p1,m1,m2,tie\np2,caf\xe9,m2,a\n").encode("latin-1"),
        (None, None, r"not UTF-8 .*0xe9 at line 3"),
    ),
    ("utf-16-no-bom", GOOD.encode("utf-16-le"), (None, None, "not UTF-8|NUL")),
    (
        "missing-winner-column",
        b"prompt_id,model_a,model_b\np1,m1,m2\n",
        (None, "winner", "missing column 'winner'"),
    ),
    (
        "missing-label-column",
        b"prompt_id,model_a,model_b,label\np1,m1,m2,a\n",
        (None, "winner", "columns must include"),
    ),
    (
        "two-human-columns",
        b"model_a,model_b,winner,human_winner\nm1,m2,a,a\n",
        (None, "human_winner", "keep one"),
    ),
    ("header-only", HEADER.encode(), (None, None, "header but no data rows")),
    ("no-header", b"p1,m1,m2,model_a\n", (None, "model_b", "missing column")),
    (
        "duplicate-column",
        b"prompt_id,model_a,model_b,winner,winner\np1,m1,m2,a,a\n",
        (None, "winner", "more than once"),
    ),
    (
        "bad-winner",
        (HEADER + "p1,m1,m2,model_a\np2,m1,m2,model_c\n").encode(),
        (3, "winner", "bad winner value 'model_c'; allowed: a, model_a"),
    ),
    ("numeric-winner", (HEADER + "p1,m1,m2,1\n").encode(), (2, "winner", "bad winner value '1'")),
    ("blank-winner", (HEADER + "p1,m1,m2,\n").encode(), (2, "winner", "blank cell")),
    ("blank-model", (HEADER + "p1,,m2,a\n").encode(), (2, "model_a", "blank cell")),
    ("blank-prompt", (HEADER + "p1,m1,m2,a\n ,m1,m2,b\n").encode(), (3, "prompt_id", "blank cell")),
    ("same-model", (HEADER + "p1,m1,m1,a\n").encode(), (2, "model_b", "same model 'm1'")),
    (
        "unknown-model",
        (HEADER + "p1,m1,gpt-9,a\n").encode(),
        (2, "model_b", "unknown model 'gpt-9'; known models: m1, m2, m3"),
    ),
    (
        "duplicate-row",
        (HEADER + "p1,m1,m2,a\np2,m1,m2,b\np1,m1,m2,tie\n").encode(),
        (4, None, "duplicate of row 2"),
    ),
    (
        "duplicate-id",
        b"id,prompt_id,model_a,model_b,winner\n7,p1,m1,m2,a\n7,p1,m1,m2,b\n",
        (3, "id", "duplicate of row 2: same id '7'"),
    ),
    (
        "ragged-row",
        (HEADER + "p1,m1,m2,a\np2,m1,m2,a,extra\n").encode(),
        (3, None, "has 5 fields, the header has 4"),
    ),
    ("short-row", (HEADER + "p1,m1\n").encode(), (2, None, "has 2 fields")),
    (
        "bad-judge-winner",
        b"prompt_id,model_a,model_b,winner,judge_winner\np1,m1,m2,a,maybe\n",
        (2, "judge_winner", "bad winner value 'maybe'"),
    ),
    (
        "blank-both-labels",
        b"prompt_id,model_a,model_b,winner,judge_winner\np1,m1,m2,,\n",
        (2, "winner", "winner or a judge_winner"),
    ),
    (
        "json-given-as-csv",
        b'{"model_a": "m1", "model_b": "m2", "winner": "tie"}\n',
        (None, "model_a", "missing column"),
    ),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00\x00", (None, None, "not UTF-8|NUL bytes")),
    (
        "xlsx",
        b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256)),
        (None, None, "spreadsheet .Excel. or zip file"),
    ),
    (
        "semicolon-bad-row",
        b"prompt_id;model_a;model_b;winner\np1;m1;m2;a\np2;m1;m2\n",
        (3, None, "has 3 fields"),
    ),
]


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_csv_rejected_and_database_unchanged(case, db_with_set, tmp_path):
    _, content, (row, column, pattern) = case
    f = tmp_path / "upload.csv"
    f.write_bytes(content)
    _, problems = cmp.validate_comparisons_csv(f, known_models=MODELS)
    assert problems, "a malformed file must report at least one problem"
    hits = [
        p
        for p in problems
        if p.row == row and p.column == column and __import__("re").search(pattern, p.message)
    ]
    assert hits, [str(p) for p in problems]
    before = dump(db_with_set)
    with pytest.raises(cmp.InvalidUpload) as exc:
        cmp.import_comparisons(db_with_set, f, "new-set", known_models=MODELS)
    assert "nothing was written" in str(exc.value) and exc.value.problems == problems
    with pytest.raises(cmp.InvalidUpload):  # bytes (a dashboard upload) behave the same
        cmp.import_comparisons(db_with_set, content, "new-set", fmt="csv", known_models=MODELS)
    assert dump(db_with_set) == before


def test_trailing_separators_give_ignored_blank_columns(tmp_path):
    f = tmp_path / "trailing.csv"
    f.write_text("prompt_id,model_a,model_b,winner,,\np1,m1,m2,a,,\n")
    df, problems = cmp.validate_comparisons_csv(f)
    assert problems == [] and df.human_winner.tolist() == ["a"]


def test_semicolon_and_tab_separated_files_are_read(tmp_path):
    for d in (";", "\t"):
        f = tmp_path / "sep.csv"
        f.write_text(GOOD.replace(",", d))
        df, problems = cmp.validate_comparisons_csv(f)
        assert problems == [] and df.human_winner.tolist() == ["a", "tie", "b"]


def test_every_problem_is_reported_with_row_numbers(tmp_path):
    f = tmp_path / "many.csv"
    f.write_text(HEADER + "p1,m1,m2,a\np2,m1,m1,a\np3,m1,m2,nope\np4,,m2,a\np1,m1,m2,b\n")
    _, problems = cmp.validate_comparisons_csv(f)
    assert sorted((p.row, p.column) for p in problems) == [
        (3, "model_b"),
        (4, "winner"),
        (5, "model_a"),
        (6, None),
    ]
    assert "row 4, column 'winner': bad winner value 'nope'" in str(problems[1])


def test_oversize_is_rejected_before_reading(tmp_path, monkeypatch, db_with_set):
    f = tmp_path / "big.csv"
    f.write_text(GOOD)
    read = []
    monkeypatch.setattr(type(f), "read_bytes", lambda self: read.append(self) or b"")
    _, problems = cmp.validate_comparisons_csv(f, max_bytes=10)
    assert not read and len(problems) == 1 and "over the limit" in problems[0].message
    # the real 200 MiB limit: a sparse file of 201 MiB is never read
    big = tmp_path / "huge.csv"
    with big.open("wb") as fh:
        fh.truncate(201 * 1024 * 1024)
    before = dump(db_with_set)
    with pytest.raises(cmp.InvalidUpload, match="201.0 MiB, over the limit of 200 MiB"):
        cmp.import_comparisons(db_with_set, big, "huge")
    assert not read and dump(db_with_set) == before


def test_valid_csv_normalises_winners_and_tolerates_bom_spaces_crlf(tmp_db, tmp_path):
    f = tmp_path / "ok.csv"
    f.write_bytes(
        (
            "\ufeffprompt_id , model_a,model_b,winner,judge_winner,extra\r\n"
            "p1, m1 ,m2,Model_A,b,x\r\np2,m2,m3,tie (bothbad),,y\r\n\r\np3,m1,m3,,tie,z\r\n"
        ).encode()
    )
    df, problems = cmp.validate_comparisons_csv(f, known_models=MODELS)
    assert problems == []
    df = df.astype(object).where(df.notna(), None)
    assert df[list(cmp.OPTIONAL_COLUMNS)].isna().all().all()  # none given: all None
    assert df[list(cmp.NORMALISED_COLUMNS)].to_dict("records") == [
        {"prompt_id": "p1", "model_a": "m1", "model_b": "m2", "human_winner": "a", "judge_winner": "b"},
        {
            "prompt_id": "p2",
            "model_a": "m2",
            "model_b": "m3",
            "human_winner": "tie",
            "judge_winner": None,
        },
        {
            "prompt_id": "p3",
            "model_a": "m1",
            "model_b": "m3",
            "human_winner": None,
            "judge_winner": "tie",
        },
    ]
    summary = cmp.import_comparisons(tmp_db, f, "s1")
    assert summary["n_rows"] == 3 and summary["n_human_labels"] == 2 and summary["n_judge_labels"] == 2
    assert cmp.read_comparison_set(tmp_db, "s1").to_dict("records") == df.to_dict("records")


def test_sets_are_named_listed_replaced_exported_and_deleted(db_with_set, tmp_path):
    before = dump(db_with_set)
    with pytest.raises(UserError, match="named 'existing' already exists.*--replace"):
        cmp.import_comparisons(db_with_set, GOOD.encode(), "existing", fmt="csv")
    assert dump(db_with_set) == before
    f = tmp_path / "two.csv"
    f.write_text(HEADER + "q,m1,m3,a\n")
    assert cmp.import_comparisons(db_with_set, f, "existing", replace=True)["replaced"] is True
    assert cmp.read_comparison_set(db_with_set, "existing").prompt_id.tolist() == ["q"]
    cmp.import_comparisons(db_with_set, GOOD.encode(), "second", fmt="csv")
    sets = cmp.list_comparison_sets(db_with_set)
    assert sets.name.tolist() == ["existing", "second"] and sets.n_rows.tolist() == [1, 3]
    assert sets.n_human.tolist() == [1, 3] and sets.n_models.tolist() == [2, 3]
    # export -> re-import gives the same rows (two implementations of the format agree)
    out = tmp_path / "export.csv"
    cmp.export_comparison_set(db_with_set, "second", out)
    cmp.import_comparisons(db_with_set, out, "copy")
    assert cmp.read_comparison_set(db_with_set, "copy").equals(
        cmp.read_comparison_set(db_with_set, "second")
    )
    assert cmp.delete_comparison_set(db_with_set, "second") == 3
    with pytest.raises(UserError, match="unknown comparison set 'second'; stored sets: copy, existing"):
        cmp.delete_comparison_set(db_with_set, "second")
    assert (
        store.query_df(
            db_with_set, "SELECT count(*) AS n FROM comparisons WHERE set_name = ?", ["second"]
        ).n[0]
        == 0
    )


def test_bad_name_and_format(tmp_db):
    with pytest.raises(UserError, match="non-blank --name"):
        cmp.import_comparisons(tmp_db, GOOD.encode(), "  ", fmt="csv")
    with pytest.raises(UserError, match="unknown format 'xlsx'; allowed: csv, arena"):
        cmp.import_comparisons(tmp_db, GOOD.encode(), "x", fmt="xlsx")
    with pytest.raises(UserError, match="file not found"):
        cmp.import_comparisons(tmp_db, "/nonexistent/file.csv", "x")


ARENA_LINE = (
    '{{"num": {n}, "question_id": "q{n}", "model_a": "{a}", "model_b": "{b}", "winner": "{w}"}}\n'
)


def _arena(rows):
    return "".join(ARENA_LINE.format(n=i, a=a, b=b, w=w) for i, (a, b, w) in enumerate(rows)).encode()


@pytest.mark.parametrize(
    "human,judge,pattern",
    [
        (
            b'{"num": 0, "model_a": "m1", "model_b": "m2", "winner": "tie"}\nnot json\n',
            None,
            r"line 2: not valid JSON",
        ),
        (
            b'{"num": 0, "model_a": "m1", "winner": "tie"}\n',
            None,
            r"line 1, column 'model_b': missing field",
        ),
        (b"[1, 2]\n", None, "must be a JSON object"),
        (_arena([("m1", "m2", "model_c")]), None, "bad winner value 'model_c'"),
        (_arena([("m1", "m1", "tie")]), None, "same model 'm1'"),
        (
            _arena([("m1", "m2", "tie"), ("m1", "m3", "tie")]),
            _arena([("m1", "m2", "tie")]),
            "not line-aligned: 2 vs 1",
        ),
        (_arena([("m1", "m2", "tie")]), _arena([("m2", "m1", "tie")]), "disagree on the models"),
        (_arena([("m1", "m2", "tie")]).replace(b"}\n", b"}\n") * 2, None, "duplicate num 0"),
        (b"\n\n", None, "file is empty"),
        # reliability: never a crash, one problem naming the line and the field
        (
            _arena([("m1", "m2", "tie")]).replace(b'"num": 0', b'"num": [1, 2]'),
            None,
            r"line 1, column 'num': must be an integer or a string, got an array",
        ),
        (
            _arena([("m1", "m2", "tie")]).replace(b'"num": 0', b'"num": {"a": 1}'),
            None,
            r"line 1, column 'num': must be an integer or a string, got an object",
        ),
        (
            b'{"num": 0, "model_a": "m1", "model_b": "m2", "winner": "tie", "x": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}\n",
            None,
            r"line 1: JSON nested too deeply",
        ),
        (
            b'{"num": ' + b"9" * 5000 + b', "model_a": "m1", "model_b": "m2", "winner": "tie"}\n',
            None,
            r"line 1: a number has too many digits",
        ),
        (
            '{"num": 0, "model_a": "caf\xe9", "model_b": "m2", "winner": "tie"}\n'.encode("latin-1"),
            None,
            r"not UTF-8 text \(byte 0xe9 at line 1\)",
        ),
        (
            b'{"num": 0, "model_a": 3, "model_b": "m2", "winner": "tie"}\n',
            None,
            r"line 1, column 'model_a': must be non-blank text, got a number \(3\)",
        ),
        (
            b'{"num": 0, "question_id": ["q"], "model_a": "m1", "model_b": "m2", "winner": "tie"}\n',
            None,
            r"line 1, column 'question_id': must be an integer or a string, got an array",
        ),
        (
            b'{"num": 0, "model_a": "m1", "model_b": "m2", "winner": null}\n',
            None,
            r"line 1, column 'winner': must be non-blank text, got null",
        ),
    ],
)
def test_malformed_arena_rejected(human, judge, pattern, db_with_set):
    before = dump(db_with_set)
    with pytest.raises(cmp.InvalidUpload, match=pattern):
        cmp.import_comparisons(db_with_set, human, "arena-bad", judge_file=judge, fmt="arena")
    assert dump(db_with_set) == before


def test_arena_utf16_with_bom_reads_like_utf8(tmp_path):
    text = _arena([("m1", "m2", "model_a"), ("m2", "m3", "tie")]).decode()
    utf8 = tmp_path / "utf8.json"
    utf8.write_text(text, encoding="utf-8")
    for enc in ("utf-16", "utf-16-be", "utf-16-le"):
        raw = text.encode(enc)
        if enc != "utf-16":
            raw = ("\ufeff").encode(enc) + raw  # explicit byte-order mark
        f = tmp_path / f"{enc}.json"
        f.write_bytes(raw)
        pd.testing.assert_frame_equal(cmp.read_arena(f), cmp.read_arena(utf8))
        rows, problems = cmp.validate_arena(raw)
        assert problems == [] and rows["human_winner"].tolist() == ["a", "tie"]


def test_arena_json_string_with_line_separator_is_one_line(tmp_path):
    """U+2028 inside a JSON string is legal: the file is split on newlines only."""
    f = tmp_path / "ls.json"
    f.write_text(
        '{"num": 0, "question_id": "a\u2028b", "model_a": "m1", "model_b": "m2", "winner": "tie"}\n'.replace(
            "\\u2028", "\u2028"
        ),
        encoding="utf-8",
    )
    df = cmp.read_arena(f)
    assert len(df) == 1 and df.prompt_id[0] == "a\u2028b"


@pytest.mark.shared
def test_arena_round_trip_equals_read_arena(tmp_db):
    human = shared_path("data", "arena", "human.json")
    judge = shared_path("data", "arena", "gpt-4-0125-preview.json")
    summary = cmp.import_comparisons(tmp_db, human, "arena-gpt4", judge_file=judge)
    assert summary["format"] == "arena" and summary["n_rows"] == 26919
    back = cmp.read_comparison_set(tmp_db, "arena-gpt4")
    expected = cmp.read_arena(human, judge)
    assert back.equals(expected.astype(object))
    assert (back.human_winner == "tie").sum() == 2880 + 5132


def test_cli_import_list_export_delete(tmp_db, tmp_path, capsys):
    import json

    from engine.cli import main

    good = tmp_path / "good.csv"
    good.write_text(GOOD)
    assert (
        main(
            [
                "import",
                "comparisons",
                str(good),
                "--db",
                str(tmp_db),
                "--name",
                "s",
                "--models",
                "m1,m2,m3",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["n_rows"] == 3
    before = dump(tmp_db)
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "p1,m1,m1,a\np2,m1,m2,who\n")
    assert main(["import", "comparisons", str(bad), "--db", str(tmp_db), "--name", "t"]) == 2
    err = capsys.readouterr().err
    assert "2 problems" in err and "row 2, column 'model_b'" in err and "row 3, column 'winner'" in err
    assert dump(tmp_db) == before
    assert main(["comparisons", "list", "--db", str(tmp_db), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in listed] == ["s"] and listed[0]["meta"]["format"] == "csv"
    assert main(["comparisons", "list", "--db", str(tmp_db)]) == 0
    summary = capsys.readouterr().out.splitlines()
    assert summary[0].split()[:3] == ["name", "n_rows", "n_models"] and summary[2].split()[:3] == [
        "s",
        "3",
        "3",
    ]
    assert main(["comparisons", "export", "s", "--db", str(tmp_db)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "id,prompt_id,model_a,model_b,winner,judge_winner"
    assert main(["comparisons", "delete", "s", "--db", str(tmp_db)]) == 0
    assert capsys.readouterr().out.startswith("deleted comparison set s (3 rows)")
    assert main(["comparisons", "delete", "s", "--db", str(tmp_db)]) == 2
    assert "unknown comparison set 's'" in capsys.readouterr().err


def test_one_validator_one_policy_both_spellings_optional_prompt_id_utf16(tmp_path):
    """The CLI's spelling (human_winner) and the upload's (winner) read the same;
    without a prompt_id column rows carry None (each its own cluster); UTF-16 with a byte-order mark
    reads like UTF-8 for CSV as for JSON; the CLI's reader lists every problem."""
    from engine.tasks.comparisons import read_comparisons_file

    upload = GOOD
    analysis = GOOD.replace("winner", "human_winner")
    a, pa = cmp.validate_comparisons_csv(upload.encode())
    b, pb = cmp.validate_comparisons_csv(analysis.encode())
    assert pa == pb == [] and a.equals(b) and a.human_winner.tolist() == ["a", "tie", "b"]
    for enc in ("utf-16", "utf-8-sig"):
        c, pc = cmp.validate_comparisons_csv(GOOD.encode(enc))
        assert pc == [] and c.equals(a), enc
    noid = "model_a,model_b,winner,judge_winner\nm1,m2,a,\nm2,m1,,b\nm1,m2,a,a\n"
    d, pd_ = cmp.validate_comparisons_csv(noid.encode())
    assert (
        pd_ == []
        and d.prompt_id.tolist() == [None, None, None]
        and d.judge_winner.tolist() == [None, "b", "a"]
    )
    f = tmp_path / "bad.csv"
    f.write_text("model_a,model_b,human_winner\nx,x,a\ny,z,maybe\n,z,a\n")
    with pytest.raises(UserError) as info:
        read_comparisons_file(f)
    msg = str(info.value)
    assert "3 problems" in msg and "row 2" in msg and "row 3" in msg and "row 4" in msg


@pytest.mark.parametrize("what", ["folder", "device"])
def test_a_folder_or_a_device_says_what_it_is(tmp_path, tmp_db, what, capsys):
    from engine.cli import main

    src = tmp_path if what == "folder" else "/dev/zero"
    assert main(["import", "comparisons", str(src), "--name", "x", "--db", str(tmp_db)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not found" not in err
    assert ("is a folder" if what == "folder" else "is a character device") in err
    assert main(["ranksets", "--comparisons", str(src), "--method", "human"]) == 2
    assert ("is a folder" if what == "folder" else "is a character device") in capsys.readouterr().err
