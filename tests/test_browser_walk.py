"""A new user's second hour in a real browser, three ways to an analysis, no dead end (screenshots in
test-artifacts/browser_walk_*.png):

1. a dataset in the hub layout (``hf:FOLDER:CONFIG:SPLIT``) -> Generate (two tiny models, a few
   tokens) -> scored when done -> the run's summary on Home;
2. an OpenAI-compatible judge (tests/fake_openai.py on 127.0.0.1) on that run from the Generate page
   -> Win-rates -> Rank-sets on the run's judge verdicts;
3. lm-eval and Inspect logs -> Upload -> Accuracy ranks (chart above the table).
"""

from __future__ import annotations

import os
import time

import pandas as pd
import pytest

from dashboard import jobs
from engine.testing import tiny_lm
from tests import test_browser as tb
from tests.conftest import ROOT
from tests.test_browser import _goto, _no_exception, _serve, _settle
from tests.test_hf_datasets import write_hub_folder

CHART = "[data-testid='stPlotlyChart']"


def _charts(page, at_least: int = 0, exactly: int | None = None) -> None:
    """The page's Plotly charts, once drawn (a chart comes after the text above it: under load, its
    frame can be seconds behind)."""
    charts = page.locator(CHART)
    if exactly is not None:
        tb.playwright.expect(charts).to_have_count(exactly, timeout=60_000)
    else:
        charts.nth(at_least - 1).wait_for(state="attached", timeout=60_000)


pytestmark = pytest.mark.browser
# the browser tests' fixtures: one Chromium and one tab per module
browser, tab, page = tb.browser, tb.tab, tb.page
KEY = "sk-walk-test-key"
HARNESS = ROOT / "tests" / "data" / "harness"


@pytest.fixture(scope="module")
def walk(tmp_path_factory):
    """A dashboard on a fresh database; the API key and the offline switches in its environment (the
    jobs it starts inherit them); two tiny models and a gsm8k-layout folder on disk."""
    tmp = tmp_path_factory.mktemp("walk")
    for name, seed in (("tiny-a", 0), ("tiny-b", 1)):
        m, t = tiny_lm(seed)
        m.save_pretrained(tmp / name)
        t.save_pretrained(tmp / name)
    gsm = pd.DataFrame(
        {
            "question": [f"What is {i} + {i}?" for i in range(4)],
            "answer": [f"so #### {2 * i}" for i in range(4)],
        }
    )
    write_hub_folder(tmp / "gsm8k", {"main": {"test": gsm}})
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {
            "OPENAI_API_KEY": KEY,
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(tmp / "hf-cache"),
        }.items():
            mp.setenv(k, v)
        for server in _serve(tmp, tmp / "walk.duckdb"):
            yield {
                **server,
                "models": [str(tmp / "tiny-a"), str(tmp / "tiny-b")],
                "hub": str(tmp / "gsm8k"),
            }


def _shot(page, artifacts_dir, name: str) -> None:
    page.screenshot(path=str(artifacts_dir / f"browser_walk_{name}.png"), full_page=True)


def _choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labelled ``label``."""
    page.locator("[data-testid='stSelectbox']").filter(
        has=page.get_by_text(label, exact=True)
    ).first.click()
    page.get_by_role("option").filter(has_text=option).first.click()
    _settle(page)


def _last_job(db, kind: str, timeout_s: float = 300) -> jobs.JobStatus:
    """The newest job of ``kind`` (and its follow-ups) once finished."""
    deadline = time.monotonic() + 60
    while not jobs.list_jobs(db, kind=kind) and time.monotonic() < deadline:
        time.sleep(0.3)
    st = jobs.wait_job(jobs.list_jobs(db, kind=kind)[0].job_id, db, timeout_s=timeout_s)
    assert st.status == "done", st.log_tail[-2000:]
    return st


def _open(page, walk, name: str, text: str, reload: bool = False) -> None:
    """Go to page ``name`` and wait until ``text`` shows (the script has run)."""
    _goto(page, walk, name, reload=reload)
    page.get_by_text(text, exact=False).first.wait_for(timeout=90_000)
    _settle(page)


def _page_text(page) -> str:
    return page.locator("body").inner_text()


def _expand(page, title: str, shows: str, tries: int = 3) -> None:
    """Open the expander ``title`` and wait until ``shows`` is visible in it. A click that lands while
    the page is still drawing can be lost (seen once in a full suite under load), so an expander that
    is still closed is clicked again; an open one is never clicked (that would close it)."""
    box = page.locator("[data-testid='stExpander']").filter(has_text=title).first
    for i in range(tries):
        _settle(page)
        if box.locator("details").first.get_attribute("open") is None:
            box.get_by_text(title, exact=False).first.click()
        try:
            page.get_by_text(shows, exact=True).first.wait_for(timeout=30_000)
            return
        except tb.playwright.TimeoutError:
            if i == tries - 1:
                raise


def test_hub_dataset_generate_score_summary(walk, page, artifacts_dir):
    _open(page, walk, "generate", "Start generation")
    # the label shows its pattern as written (waited for: a rerun may still be drawing the page)
    page.get_by_text("hf:REPO[:CONFIG][:SPLIT]", exact=False).first.wait_for(timeout=60_000)
    assert "hf:REPO[:CONFIG][:SPLIT]" in _page_text(page)
    _choose(page, "Dataset", "(file path)")
    path = (
        page.locator("[data-testid='stTextInput']")
        .filter(has_text="hf:REPO[:CONFIG][:SPLIT]")
        .locator("input")
    )
    assert path.is_enabled()  # at once, no failed submit first
    path.fill(f"hf:{walk['hub']}:main:test")
    path.press("Tab")
    models = page.locator("[data-testid='stMultiSelect']").first.locator("input")
    for _ in range(4):  # clear the default models
        models.press("Backspace")
    page.get_by_label("Other models (space-separated HF folders, .gguf files or hub ids)").fill(
        " ".join(walk["models"])
    )
    for label, value in (("Repeats per prompt", 2), ("Max new tokens", 4)):
        box = page.get_by_label(label, exact=True)
        box.fill(str(value))
        box.press("Tab")
    page.get_by_role("button", name="Start generation").click()
    page.get_by_text("Started job", exact=False).first.wait_for(timeout=60_000)
    gen = _last_job(walk["db"], "generate")
    assert f"hf:{walk['hub']}:main:test" in gen.args
    _last_job(walk["db"], "score")
    _goto(page, walk, "home")
    page.get_by_text("Headline findings", exact=False).first.wait_for(timeout=60_000)
    _no_exception(page)
    _shot(page, artifacts_dir, "1_hub_generate_score_summary")
    text = " ".join(_page_text(page).split())
    assert "rule numeric" in text and "4 questions × 2 repeats" in text, text[-1500:]


def test_api_judge_winrates_ranksets(walk, page, artifacts_dir):
    from tests.fake_openai import Action, FakeOpenAI, messages_key

    verdict = lambda body, n: Action(text="AB"[int(messages_key(body)[:8], 16) % 2])  # seeded, both ways
    with FakeOpenAI(key=KEY, models=("judge-1",), script=verdict) as srv:
        _open(page, walk, "generate", "Start generation")
        _expand(page, "Score, judge or cluster a stored run", "API (OpenAI-compatible)")
        tb._pick(page, "API (OpenAI-compatible)", page.get_by_label("Base URL"))
        page.get_by_label("Base URL").fill(srv.url)
        page.get_by_label("Judge model (as the server names it)").fill("judge-1")
        page.get_by_label("Judge model (as the server names it)").press("Tab")
        _settle(page)
        assert "$OPENAI_API_KEY is set" in _page_text(page)
        page.get_by_role("button", name="Judge pairs").click()
        judged = _last_job(walk["db"], "judge")
        assert srv.n_chat >= 8 and KEY not in judged.log_tail
    _goto(page, walk, "generate")
    _no_exception(page)
    _shot(page, artifacts_dir, "2a_judge_job_done")
    _goto(page, walk, "winrates")  # the run's verdicts are the first source
    page.get_by_text("Average win-rates", exact=False).first.wait_for(timeout=60_000)
    _no_exception(page)
    assert "openai:judge-1" in _page_text(page)
    _shot(page, artifacts_dir, "2b_winrates")
    _goto(page, walk, "ranksets")
    page.get_by_text("Judge verdicts of run", exact=False).first.wait_for(timeout=60_000)
    _settle(page)
    _no_exception(page)
    assert "method judge" in _page_text(page)
    _charts(page, at_least=1)
    _shot(page, artifacts_dir, "2c_ranksets_from_verdicts")


def test_harness_logs_upload_accuracy_ranks(walk, page, artifacts_dir):
    _open(page, walk, "upload", "Harness files")
    _shot(page, artifacts_dir, "3_upload_page")
    assert "results_*.json with its samples_*.jsonl" in _page_text(page)
    uploads = [
        (
            "lm-walk",
            "dummy-a",
            sorted(str(p) for p in (HARNESS / "lm_eval" / "tinyqa").rglob("*") if p.is_file()),
        ),
        (
            "inspect-walk",
            "mockllm/alpha",
            [str(p) for p in sorted((HARNESS / "inspect" / "tinyqa").glob("*"))],
        ),
    ]
    for name, model, files in uploads:
        _open(
            page, walk, "upload", "Harness files", reload=True
        )  # a fresh page: the uploader starts empty
        page.locator("input[type='file']").nth(1).set_input_files(files)
        page.get_by_text("Valid: ", exact=False).first.wait_for(timeout=60_000)
        page.get_by_text(model, exact=False).first.wait_for(
            state="attached", timeout=60_000
        )  # a grid cell
        _settle(page)
        _no_exception(page)
        page.get_by_label("Run name (default: harness-<task>)").fill(name)
        page.get_by_role("button", name="Import harness results").click()
        page.get_by_text("Import started", exact=False).first.wait_for(timeout=60_000)
        _last_job(walk["db"], "import", timeout_s=120)
    assert (
        len(list((walk["db"].parent / "uploads").glob("harness-*"))) == 2
    )  # the imports' copies; no preview's
    _goto(page, walk, "accuracy_ranks")
    _choose(page, "Run", "lm-walk")
    page.get_by_text("imported from a harness log", exact=False).first.wait_for(timeout=60_000)
    _no_exception(page)
    _charts(page, exactly=1)
    _shot(page, artifacts_dir, "3a_accuracy_ranks_lm_eval")
    _choose(page, "Run", "inspect-walk")
    _no_exception(page)
    _charts(page, exactly=1)
    _shot(page, artifacts_dir, "3b_accuracy_ranks_inspect")
    assert os.path.exists(artifacts_dir / "browser_walk_3b_accuracy_ranks_inspect.png")
