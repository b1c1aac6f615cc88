"""The Label page in a real headless Chromium: label by keyboard on a run of 10,002 comparison units,
undo, HTML in model output not executed, and the time from a key press to the next unit shown
(written to test-artifacts/label_timing.json; docs/BENCHMARKS.md quotes it; no timing assert)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from engine.store import label_log as LL
from engine.tasks import label_sets as S
from tests.test_browser import _serve, _settle, browser, page, tab  # noqa: F401  (fixtures)
from tests.test_labels import RUN, build_label_db

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def label_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("label_browser")
    db = build_label_db(
        tmp / "labels.duckdb", n_prompts=3334, repeats=1
    )  # 3 pairs x 3,334 = 10,002 units
    yield from _serve(tmp, db)


def _unit_heading(pg) -> str:
    return pg.locator("[data-testid='stMarkdownContainer'] strong", has_text="Unit ").first.inner_text()


def _press_and_wait(pg, key: str, before: str) -> float:
    t0 = time.perf_counter()
    pg.keyboard.press(key)
    pg.wait_for_function(
        "(before) => { const e = [...document.querySelectorAll("
        "'[data-testid=\"stMarkdownContainer\"] strong')].find(x => x.innerText.startsWith('Unit '));"
        " return e && e.innerText !== before; }",
        arg=before,
        timeout=60_000,
        polling="raf",
    )
    return time.perf_counter() - t0


def test_label_by_keyboard(label_server, page, artifacts_dir):  # noqa: F811
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{label_server['url']}/Label")
    page.wait_for_selector("[data-testid='stApp']", timeout=60_000)
    _settle(page)
    name = page.get_by_label("Your name (labeller)")
    name.wait_for(timeout=180_000)  # a first page load on a busy machine can take a minute
    name.fill("ann")
    name.press("Enter")
    _settle(page)
    page.get_by_role("button", name="Start labelling").click()
    page.get_by_text("Unit 1 of 200", exact=False).first.wait_for(timeout=60_000)
    _settle(page)
    # model output is text: its <script> never ran and its <b> is not an element
    assert not dialogs
    assert page.locator("[data-testid='stMarkdownContainer'] b", has_text="bold").count() == 0
    page.mouse.click(5, 5)  # focus the page, not the name box, so keys reach the shortcuts
    keys = ["1", "2", "3", "0", "1", "2", "1", "1", "2", "3", "1", "2"]
    times = []
    for k in keys:
        before = _unit_heading(page)
        times.append(_press_and_wait(page, k, before))
    assert "Unit 13 of 200" in _unit_heading(page)
    assert "A was" in page.locator("[data-testid='stCaptionContainer']").all_inner_texts().__str__()
    before = _unit_heading(page)
    _press_and_wait(page, "u", before)  # undo: the last unit again
    assert "Unit 12 of 200" in _unit_heading(page)
    sample = next(s for s in LL.samples(label_server["db"]) if s["run"] == RUN)
    status = S.sample_status(label_server["db"], sample)
    assert (status.labelled, status.skipped, status.remaining) == (10, 1, 189)
    # a click on the button, the same path
    before = _unit_heading(page)
    t0 = time.perf_counter()
    page.get_by_role("button", name="A is better (1)").click()
    page.wait_for_function(
        "(b) => ![...document.querySelectorAll('strong')].some(x => x.innerText === b)",
        arg=before,
        timeout=60_000,
        polling="raf",
    )
    times.append(time.perf_counter() - t0)
    page.screenshot(path=str(artifacts_dir / "browser_label.png"), full_page=True)
    ms = sorted(round(t * 1000) for t in times)
    (artifacts_dir / "label_timing.json").write_text(
        json.dumps(
            {"units": 10002, "sample": 200, "ms": ms, "median_ms": ms[len(ms) // 2], "max_ms": ms[-1]},
            indent=1,
        )
    )
    print(f"key press to next unit: median {ms[len(ms) // 2]} ms, max {ms[-1]} ms over {len(ms)} votes")


# ------------------------------------------- model output loads nothing; a key while disconnected

PIXEL = "http://127.0.0.1:9"  # nothing listens here: a request to it is recorded, never answered


@pytest.fixture
def pixel_server(tmp_path):
    """A run whose model output carries a tracking pixel three ways and raw HTML, and whose second
    model's name is a Markdown image."""
    from engine import store

    db = build_label_db(
        tmp_path / "pixel.duckdb", n_prompts=4, repeats=1, models=("m1", f"m![n]({PIXEL}/name.png)")
    )
    tail = (
        f"\n\n![pixel]({PIXEL}/inline.png) <img src='{PIXEL}/html.png'> <b>bold</b> "
        f"![ref][r]\n\n[r]: {PIXEL}/ref.png\n"
    )
    with store.transaction(db) as con:
        con.execute("UPDATE generations SET text = text || ?", [tail])
    yield from _serve(tmp_path, db)


def _start_labelling(pg, url: str, n: int) -> None:
    pg.goto(f"{url}/Label")
    pg.wait_for_selector("[data-testid='stApp']", timeout=60_000)
    _settle(pg)
    name = pg.get_by_label("Your name (labeller)")
    name.wait_for(timeout=180_000)  # a first page load on a busy machine can take a minute
    name.fill("ann")
    name.press("Enter")
    _settle(pg)
    pg.get_by_label(re.compile("Sample size")).fill(str(n))
    pg.get_by_label(re.compile("Sample size")).press("Enter")
    _settle(pg)
    pg.get_by_role("button", name="Start labelling").click()
    pg.get_by_text(f"Unit 1 of {n}", exact=False).first.wait_for(timeout=60_000)
    _settle(pg)


def test_model_output_loads_no_image_and_injects_no_html(pixel_server, page):  # noqa: F811
    sent: list[str] = []
    dialogs: list[str] = []
    page.on("request", lambda r: sent.append(r.url) if r.url.startswith(PIXEL) else None)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    _start_labelling(page, pixel_server["url"], 3)
    main = page.locator("[data-testid='stMain']")

    def injected() -> int:
        return main.locator("img, b, script[src]").count()

    page.wait_for_timeout(1000)
    assert (sent, injected()) == ([], 0)
    assert page.get_by_text(f"![pixel]({PIXEL}/inline.png)", exact=False).count() == 2  # as text
    page.get_by_text("Format responses as Markdown (images and HTML off)").click()
    _settle(page)
    assert page.locator(".st-key-label_a").get_by_text("bold", exact=False).count() == 1
    assert (sent, injected()) == ([], 0)
    page.mouse.click(5, 5)
    page.keyboard.press("1")  # the vote reveals the model names, one of them a Markdown image
    page.get_by_text("A was", exact=False).first.wait_for(timeout=60_000)
    _settle(page)
    page.wait_for_timeout(1000)
    assert (sent, injected(), dialogs) == ([], 0, [])


def _server_pid(url: str) -> int:
    """The pid of the streamlit server this test started on ``url``'s port."""
    port = url.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"streamlit" in b" ".join(cmd) and port.encode() in cmd:
            return int(proc.name)
    raise AssertionError(f"no streamlit server on port {port}")


def test_a_key_pressed_while_the_page_reconnects_is_refused_in_sight(tmp_path, page):  # noqa: F811
    """The tab beats while it is open (its session file is renewed without a vote). The server is
    killed: the buttons are disabled while the page tries to reconnect, and a vote key pressed then
    is not silently lost: the page says it was not recorded."""
    db = build_label_db(tmp_path / "gone.duckdb", n_prompts=4, repeats=1)
    serving = _serve(tmp_path, db)
    srv = next(serving)
    try:
        _start_labelling(page, srv["url"], 3)
        beats = list((LL.labels_dir(db) / "sessions").glob("*.json"))
        assert len(beats) == 1
        t0 = json.loads(beats[0].read_text())["t"]  # nothing is pressed now: only the heartbeat writes
        deadline = time.monotonic() + 60
        while json.loads(beats[0].read_text())["t"] == t0 and time.monotonic() < deadline:
            page.wait_for_timeout(1000)
        assert json.loads(beats[0].read_text())["t"] > t0
        os.killpg(_server_pid(srv["url"]), signal.SIGKILL)
        page.locator(".st-key-label_vote_first button[disabled]").wait_for(timeout=60_000)
        page.mouse.click(5, 5)
        page.keyboard.press("1")
        bar = page.locator("#label-key-refused")
        bar.wait_for(timeout=10_000)
        assert "the key 1 was NOT recorded" in bar.inner_text()
        status = S.sample_status(db, LL.samples(db)[0])
        assert status.labelled + status.skipped == 0
    finally:
        serving.close()
