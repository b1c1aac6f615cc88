"""The Label page in a real headless Chromium: label by keyboard on a run of 10,002 comparison units,
undo, HTML in model output not executed, and the time from a key press to the next unit shown
(written to test-artifacts/label_timing.json; docs/BENCHMARKS.md quotes it; no timing assert)."""

from __future__ import annotations

import json
import time

import pytest

from engine.store import label_log as LL
from engine.tasks import label_sets as S
from tests.test_browser import _serve, _settle, browser, page  # noqa: F401  (fixtures)
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
