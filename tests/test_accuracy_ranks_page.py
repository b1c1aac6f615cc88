"""The Accuracy ranks page (AppTest) on a database with imported harness runs, and the Upload page's
harness helpers (AppTest cannot drive a file uploader: the save/preview/job path is tested directly)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import navigation
from engine.errors import UserError
from engine.tasks.harness_import import import_harness
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "harness"


@pytest.fixture(scope="module")
def harness_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("hdb") / "h.duckdb"
    import_harness(db, [str(DATA / "inspect" / "tinyqa")], name="insp")
    import_harness(db, [str(DATA / "lm_eval" / "tinyqa")], name="lm")
    return db


def _open(db, monkeypatch, page: str) -> AppTest:
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(navigation.path(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_accuracy_ranks_page_shows_the_harness_numbers(harness_db, monkeypatch):
    at = _open(harness_db, monkeypatch, "accuracy_ranks")
    assert at.selectbox(key="ar_run").value == "insp"
    df = at.dataframe[0].value
    assert df["model"].tolist() == ["mockllm/alpha", "mockllm/beta"]
    assert df["accuracy"].tolist() == df["harness reported"].tolist() == [0.75, 0.375]
    assert any("imported from a harness log" in m.value for m in at.markdown)
    at.selectbox(key="ar_run").set_value("lm").run()
    assert not at.exception
    df = at.dataframe[0].value
    assert sorted(df["accuracy"].tolist()) == [0.0, 0.25] and "rank-set" in df.columns
    at.select_slider(key="ar_level").set_value(0.8).run()
    assert not at.exception and "80%" in " ".join(c.value for c in at.caption)


def test_harness_upload_save_preview_and_job_args(tmp_path, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(tmp_path / "db" / "x.duckdb"))
    (tmp_path / "db").mkdir()
    from dashboard import harness_upload

    files = [
        (p.name, p.read_bytes()) for p in sorted((DATA / "lm_eval" / "tinyqa").rglob("*")) if p.is_file()
    ]
    folder = harness_upload.save_files(files)
    assert folder.parent == tmp_path / "db" / "uploads" and sorted(
        p.name for p in folder.iterdir()
    ) == sorted(n for n, _ in files)
    table = harness_upload.preview(folder)
    assert table["model"].tolist() == ["dummy-a", "dummy-b"] and table["samples"].tolist() == [8, 8]
    started = []
    monkeypatch.setattr(
        harness_upload.jobs_panel, "start_job", lambda args, kind: started.append((args, kind)) or "j1"
    )
    assert harness_upload.start_import(folder, " mine ") == "j1"
    args, kind = started[0]
    assert (
        kind == "import" and args[:3] == ["import", "harness", str(folder)] and args[-1] == "--name=mine"
    )
    from engine.cli import build_parser

    parsed = build_parser().parse_args(args)
    assert parsed.paths == [str(folder)] and parsed.name == "mine"
    bad = harness_upload.save_files([("x.eval", b"PK\x03\x04 not a zip")])
    with pytest.raises(UserError, match="not a readable .eval zip"):
        harness_upload.preview(bad)
    assert not bad.exists()  # a rejected upload leaves nothing behind


def test_benchmark_page_on_an_imported_run_shows_the_paired_comparison(harness_db, monkeypatch):
    at = _open(harness_db, monkeypatch, "benchmark")
    at.selectbox(key="bm_run").set_value("insp").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("no coupled scores" in i.value for i in at.info)
    acc = at.dataframe[0].value
    assert acc["accuracy"].tolist() == acc["harness reported"].tolist()
    assert {m.label for m in at.metric} >= {"Diff A − B", "MDE (80% power)"}
