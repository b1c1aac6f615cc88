"""Datasets: built-in demo sets, MMLU-layout / numeric / prompt-list loaders, malformed input."""

from __future__ import annotations

import collections
import csv
import json

import pytest

from engine.errors import UserError
from engine.tasks import datasets as D
from tests.conftest import shared_path


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


# --- exact tiny cases -------------------------------------------------------------------------


def test_format_mc_prompt_exact():
    got = D.format_mc_prompt("What is 2 + 2?", {"A": "3", "B": "4", "C": "5", "D": "22"})
    assert got == "What is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer:"
    with pytest.raises(UserError, match="lack C, D"):
        D.format_mc_prompt("q", {"A": "x", "B": "y"})


def test_demo_is_balanced_and_well_formed():
    ds = D.load_dataset("demo")
    assert ds.kind == "multiple_choice" and ds.dataset_id == "demo" and len(ds) == 40
    assert ds.system_prompt == D.MMLU_SYSTEM_PROMPT
    assert collections.Counter(p.gold for p in ds.prompts) == {"A": 10, "B": 10, "C": 10, "D": 10}
    assert len(ds.subjects()) >= 5
    assert len({p.prompt_id for p in ds.prompts}) == 40
    for p in ds.prompts:
        assert p.user_prompt == D.format_mc_prompt(p.question, p.choices)
        assert len(set(p.choices.values())) == 4, p  # four distinct options
    assert D.list_datasets()[0] == "demo"


def test_demo_chat_and_gsm():
    chat = D.load_dataset("demo-chat")
    assert chat.kind == "prompts" and len(chat) == 10 and chat.system_prompt == D.CHAT_SYSTEM_PROMPT
    assert all(p.gold is None and p.user_prompt for p in chat.prompts)
    gsm = D.load_dataset("demo-gsm")
    assert gsm.kind == "numeric" and len(gsm) == 10
    assert all(float(p.gold) == float(p.gold) for p in gsm.prompts)


def test_subject_filter_and_limit_keep_ids_stable():
    full = D.load_dataset("demo")
    sci = D.load_dataset("demo", subject="science", limit=3)
    assert sci.dataset_id == "demo:science" and len(sci) == 3
    assert all(p.subject == "science" for p in sci.prompts)
    by_id = {p.prompt_id: p for p in full.prompts}
    assert all(by_id[p.prompt_id] == p for p in sci.prompts)  # same ids, same prompts
    assert D.load_dataset("demo:science").prompts == D.load_dataset("demo", subject="science").prompts
    with pytest.raises(UserError, match="unknown subject 'nope'.*arithmetic"):
        D.load_dataset("demo", subject="nope")
    with pytest.raises(UserError, match="limit must be a positive integer"):
        D.load_dataset("demo", limit=0)


# --- file layouts -------------------------------------------------------------------------------


def test_mmlu_csv_without_header(tmp_path):
    f = _write(
        tmp_path / "algebra_test.csv",
        '"What is x, if x + 1 = 3?",1,2,3,4,B\nSecond question,a,b,c,d,d\n',
    )
    ds = D.load_dataset(str(f))
    assert ds.dataset_id == "algebra_test" and ds.kind == "multiple_choice"
    assert [p.prompt_id for p in ds.prompts] == ["algebra_test/0", "algebra_test/1"]
    assert ds.prompts[0].question == "What is x, if x + 1 = 3?"
    assert ds.prompts[0].choices == {"A": "1", "B": "2", "C": "3", "D": "4"}
    assert [p.gold for p in ds.prompts] == ["B", "D"]  # lower-case letters accepted
    assert ds.prompts[0].subject == "algebra"  # from "<subject>_test.csv"


def test_csv_with_header_and_ids(tmp_path):
    f = _write(
        tmp_path / "quiz.csv",
        "id,subject,Question,A,B,C,D,Answer\nq1,math,1+1?,1,2,3,4,B\n"
        "q2,art,Colour of grass?,red,green,blue,pink,B\n",
    )
    ds = D.load_dataset(str(f))
    assert [p.prompt_id for p in ds.prompts] == ["q1", "q2"]
    assert ds.subjects() == ["math", "art"]
    assert D.load_dataset(f"{f}:art").prompts[0].prompt_id == "q2"


def test_jsonl_letters_and_choice_lists(tmp_path):
    rows = [
        {"question": "Q1", "A": "a", "B": "b", "C": "c", "D": "d", "answer": "C"},
        {"question": "Q2", "choices": ["w", "x", "y", "z"], "answer": 3},
    ]
    f = _write(tmp_path / "mc.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n\n")
    ds = D.load_dataset(str(f))
    assert [p.gold for p in ds.prompts] == ["C", "D"]
    assert ds.prompts[1].choices == {"A": "w", "B": "x", "C": "y", "D": "z"}


def test_numeric_and_prompt_lists(tmp_path):
    num = _write(
        tmp_path / "arith.csv",
        'question,answer\nTwo plus two?,4\nHalf of 5?,2.50\nTotal?,"She pays 3 + 4 = 7. #### 1,007"\n',
    )
    ds = D.load_dataset(str(num))
    assert ds.kind == "numeric" and [p.gold for p in ds.prompts] == ["4", "2.5", "1007"]
    assert ds.system_prompt == D.NUMERIC_SYSTEM_PROMPT
    txt = _write(tmp_path / "chat.txt", "Hello there\n\n  Tell me a joke  \n")
    ds = D.load_dataset(str(txt))
    assert ds.kind == "prompts" and [p.user_prompt for p in ds.prompts] == [
        "Hello there",
        "Tell me a joke",
    ]
    assert [p.prompt_id for p in ds.prompts] == ["chat/0", "chat/1"]
    pj = _write(tmp_path / "p.jsonl", '{"prompt": "Hi", "id": "x"}\n{"prompt": "Yo"}\n')
    assert [p.prompt_id for p in D.load_dataset(str(pj)).prompts] == ["x", "p/1"]
    pc = _write(tmp_path / "pc.csv", 'prompt\nFirst\n"Second, with comma"\n')
    assert D.load_dataset(str(pc)).prompts[1].user_prompt == "Second, with comma"


@pytest.mark.parametrize(
    "name,content,match",
    [
        ("empty.csv", "", "is empty"),
        ("blank.jsonl", "\n  \n", "is empty"),
        ("hdr.csv", "question,A,B,C,D,answer\n", "has a header but no rows"),
        ("cols.csv", "q,1,2,3,4,A\nq2,1,2,3,A\n", "row 2: 5 columns, expected 6"),
        ("five.csv", "q,1,2,3,4\n", "no header and 5 columns in row 1"),
        ("letter.csv", "q,1,2,3,4,A\nq2,1,2,3,4,E\n", "row 2: answer 'E' is not one of A, B, C, D"),
        ("missing.csv", "question,A,B,answer\nq,1,2,A\n", "missing choice columns C, D"),
        ("nocols.jsonl", '{"text": "a"}\n', "cannot tell the layout"),
        ("badjson.jsonl", '{"prompt": "a"}\n{oops\n', "line 2: not valid JSON"),
        ("list.jsonl", "[1, 2]\n", "line 1: each line must be a JSON object"),
        ("num.csv", "question,answer\nq1,4\nq2,many\n", "row 3: answer 'many' is not a number"),
        ("emptyq.csv", "question,A,B,C,D,answer\n,1,2,3,4,A\n", "row 2: empty 'question'"),
        (
            "dup.jsonl",
            '{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n',
            "duplicate prompt id 'a'",
        ),
        (
            "choices.jsonl",
            '{"question": "q", "choices": ["a", "b"], "answer": 0}\n',
            "row 1: 'choices' must be a list of 4",
        ),
        ("data.xlsx", "x", "unsupported dataset file type '.xlsx'"),
    ],
)
def test_malformed_files_raise_clear_errors(tmp_path, name, content, match):
    f = _write(tmp_path / name, content)
    with pytest.raises(UserError, match=match):
        D.load_dataset(str(f))


def test_unknown_and_missing(tmp_path):
    with pytest.raises(UserError, match="unknown dataset 'nope'.*demo, demo-chat, demo-gsm"):
        D.load_dataset("nope")
    with pytest.raises(UserError, match="no such file"):
        D.load_dataset(str(tmp_path / "absent.csv"))
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(UserError, match="not UTF-8"):
        D.load_dataset(str(tmp_path / "bin.csv"))
    with pytest.raises(UserError, match="has no subjects"):
        D.load_dataset("demo-chat", subject="x")


def test_folder_of_mmlu_files(tmp_path):
    _write(tmp_path / "b_test.csv", "qb,1,2,3,4,A\n")
    _write(tmp_path / "a_test.csv", "qa0,1,2,3,4,B\nqa1,1,2,3,4,C\n")
    ds = D.load_dataset(str(tmp_path))
    assert [p.prompt_id for p in ds.prompts] == [
        f"{tmp_path.name}/a/0",
        f"{tmp_path.name}/a/1",
        f"{tmp_path.name}/b/0",
    ]
    assert ds.subjects() == ["a", "b"] and ds.dataset_id == tmp_path.name


def test_records_match_store_prompts_table():
    ds = D.load_dataset("demo", limit=2)
    recs = ds.records()
    assert [r["idx"] for r in recs] == [0, 1]
    assert json.loads(recs[0]["choices"]) == ds.prompts[0].choices
    assert set(recs[0]) == {
        "dataset_id",
        "prompt_id",
        "idx",
        "subject",
        "question",
        "choices",
        "gold",
        "user_prompt",
    }


# --- real MMLU data (../shared) ---------------------------------------------------------------------


@pytest.mark.shared
def test_real_mmlu_file_agrees_with_plain_csv_reader():
    f = shared_path("data", "mmlu", "abstract_algebra_test.csv")
    ds = D.load_dataset(str(f))
    with open(f, newline="", encoding="utf-8") as fh:
        raw = list(csv.reader(fh))
    assert len(ds) == len(raw) == 100
    assert [p.question for p in ds.prompts] == [r[0].strip() for r in raw]
    assert [p.gold for p in ds.prompts] == [r[5].strip() for r in raw]
    assert [list(p.choices.values()) for p in ds.prompts] == [[c.strip() for c in r[1:5]] for r in raw]
    assert ds.subjects() == ["abstract_algebra"]


@pytest.mark.shared
def test_real_mmlu_folder_has_all_questions():
    folder = shared_path("data", "mmlu")
    ds = D.load_dataset(str(folder))
    assert len(ds) == 14042 and len(ds.subjects()) == 57  # docs/METHODS.md section 6
    assert ds.subjects() == sorted(ds.subjects())
    assert set(p.gold for p in ds.prompts) == {"A", "B", "C", "D"}
    sub = D.load_dataset(str(folder), subject="anatomy", limit=5)
    assert sub.dataset_id == "mmlu:anatomy" and len(sub) == 5


@pytest.mark.shared
def test_real_mmlu_folder_matches_the_paper_importer():
    """Two implementations: this loader and engine.tasks.importers give the same ids and exact prompts, so
    runs generated on the MMLU folder line up with the imported paper data prompt by prompt."""
    from engine.tasks import importers

    folder = shared_path("data", "mmlu")
    ds = D.load_dataset(str(folder))
    q = importers.read_mmlu_questions(folder)
    assert [p.prompt_id for p in ds.prompts] == list(q["prompt_id"])
    assert [p.gold for p in ds.prompts] == list(q["gold"])
    want = list(
        q["question"]
        + "\nA. "
        + q["A"]
        + "\nB. "
        + q["B"]
        + "\nC. "
        + q["C"]
        + "\nD. "
        + q["D"]
        + "\nAnswer:"
    )  # docs/METHODS.md 1.4, strings verbatim
    assert [p.user_prompt for p in ds.prompts] == want
    assert ds.dataset_id == importers.PAPER_DATASET_ID


def test_datasets_command(tmp_path, capsys):
    from engine.cli import main

    assert main(["datasets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["dataset_id"] for r in rows] == D.list_datasets()
    assert rows[0]["gold_counts"] == {"A": 10, "B": 10, "C": 10, "D": 10} and rows[0]["n_prompts"] == 40
    f = _write(tmp_path / "quiz.csv", "q1,a,b,c,d,A\nq2,a,b,c,d,C\n")
    assert main(["datasets", str(f), "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "quiz: multiple_choice, 1 prompts" in out and "gold answers: A=1" in out
    bad = _write(tmp_path / "bad.csv", "q1,a,b,c,d,Z\n")
    assert main(["datasets", str(bad)]) == 2
    assert "row 1: answer 'Z' is not one of A, B, C, D" in capsys.readouterr().err


@pytest.mark.parametrize(
    "line, problem",
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"question": "q", "A": ' + "9" * 5000 + "}", "too many digits"),
        ("[1, 2]", "must be a JSON object, got list"),
        ("{not json", "not valid JSON"),
    ],
)
def test_jsonl_dataset_bad_lines_are_one_line_errors(tmp_path, line, problem):
    """Datasets share the Arena files' JSON-lines parser: deep nesting, huge numbers and non-objects
    are one UserError with the line number, never a traceback."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "What is 2+2?", "answer": "4"}\n' + line + "\n")
    with pytest.raises(UserError, match=rf"line 2: .*{problem}"):
        D.load_dataset(str(path))
