"""Names and text from data are inert on the dashboard: a run, its models, judge,
dataset and questions carry Markdown images (a tracking pixel), links and HTML; every page that reads
Markdown (markdown, caption, info, warning, subheader, ...) shows them as text.

Streamlit renders Markdown images even without ``unsafe_allow_html``, so an unescaped name loads a
remote image when a colleague opens the page. Each page is run under AppTest on that database and every
Markdown body it writes is checked: outside code spans, no unescaped image, link or tag is left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from tests.test_app import ROOT, TIMEOUT, build_small_db

PIXEL = "http://127.0.0.1:9/{}.png"
RENAME = {
    "model": {
        "m-base": f"m-base![px]({PIXEL.format('model')})",
        "m-int8": "m-int8<img src=x onerror=alert(1)>",
    },
    "run_id": {"run-small": f"run-small![px]({PIXEL.format('run')})`x`"},
    "dataset_id": {"ds-small": f"ds![px]({PIXEL.format('dataset')})"},
    "judge": {"judge-x": f"judge[click](javascript:alert(2))![px]({PIXEL.format('judge')})"},
}
COLUMNS = {
    "model": ("model", "model_a", "model_b", "name"),
    "run_id": ("run_id",),
    "dataset_id": ("dataset_id",),
    "judge": ("judge",),
}
QUESTION = (
    f"![px]({PIXEL.format('question')}) <img src={PIXEL.format('q2')}> [go](https://example.org) :red[x]"
)


def build_markdown_db(path: Path) -> Path:
    """The dashboard tests' small database with every name and question replaced by a payload."""
    build_small_db(path)
    con = duckdb.connect(str(path))
    try:
        tables = [
            t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
        ]
        for t in tables:
            cols = {
                c
                for (c,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [t]
                ).fetchall()
            }
            for kind, mapping in RENAME.items():
                for col in COLUMNS[kind]:
                    if col not in cols or (col == "name" and t != "models"):
                        continue
                    for old, new in mapping.items():
                        con.execute(f'UPDATE "{t}" SET "{col}" = ? WHERE "{col}" = ?', [new, old])
        cfg = json.loads(con.execute("SELECT config FROM runs").fetchone()[0])
        cfg["models"] = [RENAME["model"].get(m, m) for m in cfg["models"]]
        con.execute("UPDATE runs SET config = ?", [json.dumps(cfg)])
        con.execute("UPDATE prompts SET question = ? || prompt_id, subject = ?", [QUESTION, "**s**<b>"])
    finally:
        con.close()
    return path


def _visible(md: str) -> str:
    """What Markdown would still interpret in ``md``: code spans and backslash-escaped characters
    removed (CommonMark: a code span is a run of n backticks up to the next run of exactly n)."""
    md = re.sub(r"(?<!`)(`+)(?!`)(.*?)(?<!`)\1(?!`)", " ", md, flags=re.S)
    return re.sub(r"\\[!-/:-@\[-`{-~]", "", md)


MARKDOWN_ELEMENTS = ("markdown", "caption", "info", "warning", "error", "success", "subheader", "title")


def _bodies(at: AppTest) -> list[str]:
    out = []
    for kind in MARKDOWN_ELEMENTS:
        for el in at.get(kind):
            out.append(str(getattr(el, "value", None) or getattr(el.proto, "body", "")))
    return out


@pytest.fixture(scope="module")
def markdown_db(tmp_path_factory) -> Path:
    return build_markdown_db(tmp_path_factory.mktemp("inert") / "md.duckdb")


def test_the_payloads_are_stored_and_checked_as_live_markdown():
    """The checker sees what Markdown would load: a raw payload is live, an escaped one is not."""
    from dashboard.widgets import md_code, md_escape

    for payload in (QUESTION, *RENAME["model"].values(), *RENAME["run_id"].values()):
        assert re.search(r"!\[|\]\(|<img", _visible(payload))
        assert not re.search(r"!\[|\]\(|<img|:red\[", _visible(f"**a** {md_escape(payload)}"))
        assert not re.search(r"!\[|\]\(|<img", _visible(f"run {md_code(payload)} ok"))


@pytest.mark.parametrize(
    "page",
    [
        "app_pages/home.py",
        "app_pages/traces.py",
        "app_pages/benchmark.py",
        "app_pages/winrates.py",
        "app_pages/ranksets.py",
        "app_pages/judge_audit.py",
    ],
)
def test_no_page_writes_a_name_or_question_as_live_markdown(markdown_db, page, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(markdown_db))
    monkeypatch.chdir(ROOT)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    at.run()
    if page != "app_pages/home.py":
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    bodies = _bodies(at)
    text = "\n".join(bodies)
    assert "px" in text or "img" in text, "the page shows no payload: nothing was checked"
    live = [b for b in bodies if re.search(r"!\[|\]\(|<img|<b>", _visible(b))]
    assert live == []
