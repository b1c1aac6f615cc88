"""The ways to an analysis from the pages, without dead ends (AppTest; the harness upload's helpers
directly, since AppTest cannot drive a file uploader): the Generate form's dataset path, labels that
show patterns as written, failed job cards, a run's judge verdicts on the Rank-sets page, the Accuracy
ranks chart, the harness preview's pairing check and clean-up, and where job files live."""

from __future__ import annotations

import json
import re
import time

import pytest
from markdown_it import MarkdownIt
from streamlit.testing.v1 import AppTest

from dashboard import jobs, navigation
from engine.errors import UserError
from tests.conftest import ROOT
from tests.test_accuracy_ranks_page import DATA, harness_db  # noqa: F401  (a fixture)
from tests.test_app import build_small_db


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    return build_small_db(tmp_path_factory.mktemp("deadends") / "small.duckdb")


def _open(db, monkeypatch, page: str) -> AppTest:
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page(navigation.path(page)).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _rendered(markdown: str) -> str:
    """The text CommonMark renders from ``markdown`` (tags dropped, entities decoded)."""
    import html

    return html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt().render(markdown))).strip()


def test_choosing_file_path_enables_the_path_field_at_once(small_db, monkeypatch):
    """The dataset choice is outside the form (a form's widgets take effect only on submit), so
    choosing "(file path)" enables the path field without a failed submit first."""
    at = _open(small_db, monkeypatch, "generate")
    sel, path = at.selectbox(key="gen_dataset"), at.text_input(key="gen_dataset_path")
    assert sel.proto.form_id == "" and path.proto.form_id == ""
    assert sel.value != "(file path)" and path.disabled
    sel.set_value("(file path)").run()
    assert not at.exception and not at.text_input(key="gen_dataset_path").disabled


def test_labels_with_patterns_render_as_written(small_db, monkeypatch):
    """Patterns in labels and captions are escaped markdown: rendered, they keep their brackets, colons
    and stars (unescaped, Streamlit read ``[:CONFIG]`` and ``*.json with its samples_*`` as markup)."""
    at = _open(small_db, monkeypatch, "generate")
    label = at.text_input(key="gen_dataset_path").label
    assert "hf\\:REPO\\[\\:CONFIG\\]\\[\\:SPLIT\\]" in label
    assert "hf:REPO[:CONFIG][:SPLIT]" in _rendered(label)
    at = _open(small_db, monkeypatch, "upload")
    caption = next(c.value for c in at.caption if "samples" in c.value)
    assert "results\\_\\*.json with its samples\\_\\*.jsonl" in caption
    assert "results_*.json with its samples_*.jsonl" in _rendered(caption)


def _finished_job(db, job_id: str, kind: str, rc: int, log: str, done: int = 0, total: int = 0) -> None:
    jdir = jobs.jobs_dir(db)
    jdir.mkdir(parents=True, exist_ok=True)
    (jdir / f"{job_id}.meta.json").write_text(
        json.dumps(
            {
                "job_id": job_id,
                "kind": kind,
                "args": [kind, "--x"],
                "pid": 2**22 + 4321,
                "started_at": time.time(),
            }
        )
    )
    (jdir / f"{job_id}.json").write_text(json.dumps({"status": "running", "done": done, "total": total}))
    (jdir / f"{job_id}.log").write_text(log)
    (jdir / f"{job_id}.rc").write_text(str(rc))


def test_a_failed_job_card_shows_its_error_and_resume_only_where_it_helps(tmp_path, monkeypatch):
    """The reason is on the card (not only in the collapsed log); a bad dataset name offers no Resume
    (it would fail the same way), a killed generation does; a judge killed after its last commit is done."""
    db = build_small_db(tmp_path / "jobs.duckdb")
    reason = (
        "error: unknown dataset 'nope'; allowed: demo, demo-chat, demo-gsm, a CSV/JSONL/TXT file, an MMLU "
        "folder or hf:REPO[:CONFIG][:SPLIT]"
    )
    _finished_job(db, "generate-1", "generate", 2, f"loading\n{reason}\n")
    _finished_job(db, "generate-2", "generate", -9, "Killed\n", done=3, total=9)
    _finished_job(db, "judge-3", "judge", -9, "", done=40, total=40)
    at = _open(db, monkeypatch, "generate")
    errors = [e.value for e in at.error]
    assert any("unknown dataset 'nope'" in e and "hf\\:REPO\\[\\:CONFIG\\]" in e for e in errors), errors
    assert any("Fix the input" in e for e in errors)
    keys = {b.key for b in at.button}
    assert (
        "resume_generate-1" not in keys and "resume_generate-2" in keys and "resume_judge-3" not in keys
    )
    assert any("`judge-3` · done" in m.value for m in at.markdown)


def test_ranksets_page_ranks_a_runs_judge_verdicts(small_db, monkeypatch):
    """A run's judge verdicts are a Rank-sets source (as on the Win-rates page): judge-only rank-sets
    of the chosen mode, a chart and a table; no n-human-labels input, no repeated draws."""
    at = _open(small_db, monkeypatch, "ranksets")
    opts = at.selectbox(key="rs_source").options
    verdicts = next(o for o in opts if o.startswith("run run-small"))
    at.selectbox(key="rs_source").set_value(verdicts).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.radio(key="rs_method_verdicts").options == ["judge only"]
    assert at.number_input(key="rs_n").disabled
    table = at.dataframe[0].value
    assert {"model", "rank", "lower", "upper", "theta"} <= set(table.columns) and len(table) == 3
    assert len(at.get("plotly_chart")) >= 1
    caption = " ".join(c.value for c in at.caption)
    assert "method judge" in caption and "clustered by prompt" in caption
    at.radio(key="rs_verdict_mode").set_value("independent").run()
    assert not at.exception and len(at.dataframe[0].value) == 3


def test_accuracy_ranks_page_draws_the_rank_set_chart(harness_db, monkeypatch):  # noqa: F811
    """Each model's accuracy with its interval and its rank-set beside it, downloadable as every chart
    is, the table below; the source is written out, not cut in a metric."""
    at = _open(harness_db, monkeypatch, "accuracy_ranks")
    charts = at.get("plotly_chart")
    assert len(charts) == 1
    fig = json.loads(charts[0].proto.spec)
    assert {t.get("xaxis", "x") for t in fig["data"]} == {"x", "x2"}  # accuracy and rank-set panels
    acc = next(t for t in fig["data"] if t.get("xaxis") == "x2")
    assert sorted(acc["x"]) == [0.375, 0.75] and acc["error_x"]["type"] == "data"
    assert any(b.proto.label == "HTML" for b in at.get("download_button"))
    assert at.dataframe[0].value["accuracy"].tolist() == [0.75, 0.375]
    assert "Source" not in [m.label for m in at.metric]
    assert any("imported from a harness log" in m.value for m in at.markdown)


def _files(*folders: str) -> list[tuple[str, bytes]]:
    return [
        (p.name, p.read_bytes()) for f in folders for p in sorted((DATA / f).rglob("*")) if p.is_file()
    ]


def test_harness_preview_runs_the_pairing_check_and_leaves_nothing(tmp_path, monkeypatch):
    """Two logs of different tasks (no common sample id) are refused by the preview, as the import
    would refuse them; a samples-only upload names the user's file and what to add, not an internal
    folder; no preview leaves a copy in uploads/."""
    monkeypatch.setenv("COUPLED_EVAL_DB", str(tmp_path / "x.duckdb"))
    from dashboard import harness_upload
    from dashboard.uploads import uploads_dir

    ok = harness_upload.preview_files(_files("lm_eval/tinyqa"))
    assert ok["model"].tolist() == ["dummy-a", "dummy-b"]
    with pytest.raises(UserError, match="share no sample id, so they cannot be paired"):
        harness_upload.preview_files(_files("inspect/tinyqa")[:1] + _files("inspect/tinyqb"))
    samples_only = [f for f in _files("lm_eval/tinyqa/dummy-a") if f[0].startswith("samples_")]
    with pytest.raises(UserError) as exc:
        harness_upload.preview_files(samples_only)
    msg = str(exc.value)
    assert samples_only[0][0] in msg and "upload both" in msg
    assert str(uploads_dir()) not in msg and "harness-" not in msg
    assert not uploads_dir().exists() or not any(uploads_dir().iterdir())


def test_job_files_live_next_to_the_database_as_the_readme_says(tmp_path):
    """Jobs of a database live in ``jobs/`` beside it (each database its own jobs; ``data/jobs/`` for
    the default one); the dashboard docs (docs/DASHBOARD.md, where the README's reference moved) and the
    architecture notes say so."""
    from engine import config

    assert jobs.jobs_dir(tmp_path / "x" / "my.duckdb") == (tmp_path / "x" / "jobs").resolve()
    assert jobs.jobs_dir() == config.DEFAULT_DB.resolve().parent / "jobs"
    for doc in ("docs/DASHBOARD.md", "docs/ARCHITECTURE.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert "`jobs/` next to the database" in text, doc
