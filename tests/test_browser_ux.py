"""Real Chromium on the pages that lead to what the user has: the Benchmark
page of a one-repeat run reaches its paired comparison and its Sequential tab. Screenshots go to
test-artifacts/.
"""

from __future__ import annotations

import re

import pytest

# fixtures: the browser, a page, and the dashboard server helpers of test_browser
from tests.test_app import build_small_db
from tests.test_browser import (  # noqa: F401
    _goto,
    _no_exception,
    _serve,
    _settle,
    _shot,
    browser,
    page,
    playwright,
    tab,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def one_repeat_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser_one_repeat")
    yield from _serve(tmp, build_small_db(tmp / "one.duckdb", repeats=1))


def test_a_one_repeat_run_reaches_the_paired_comparison_and_sequential(
    one_repeat_server,
    page,  # noqa: F811
    artifacts_dir,
):
    _goto(page, one_repeat_server, "benchmark")
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("1 repeat per question", exact=False).first.wait_for(timeout=60_000)
    assert "need at least 2 questions and 2 repeats" not in main.inner_text()
    panel = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    panel.get_by_text("Accuracy with 95% CI over questions", exact=False).first.wait_for(timeout=90_000)
    _settle(page)
    playwright.expect(panel.locator(".js-plotly-plot")).to_have_count(1, timeout=60_000)
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_one_repeat_paired")
    page.get_by_role("tab", name="Sequential").click()
    _settle(page)
    panel = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    panel.get_by_text("Stop when decided", exact=False).first.wait_for(timeout=60_000)
    panel.get_by_text(re.compile(r"^(coupled|independent): ")).first.wait_for(timeout=90_000)
    _settle(page)
    playwright.expect(panel.locator(".js-plotly-plot")).to_have_count(
        2, timeout=60_000
    )  # stopping times over orders, one order's CS
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_one_repeat_sequential")


@pytest.fixture(scope="module")
def labelled_server(tmp_path_factory):
    from tests.test_judge_audit import make_db

    tmp = tmp_path_factory.mktemp("browser_labelled")
    db = tmp / "labelled.duckdb"
    make_db(db, n_prompts=14, n_labels=12)  # 42 judged units, 14 human labels
    yield from _serve(tmp, db)


def _box_overlap(a: dict, b: dict) -> float:
    """The area two bounding boxes share (0 when apart)."""
    w = min(a["x"] + a["width"], b["x"] + b["width"]) - max(a["x"], b["x"])
    h = min(a["y"] + a["height"], b["y"] + b["height"]) - max(a["y"], b["y"])
    return max(w, 0) * max(h, 0)


def test_the_rank_sets_page_opens_on_ppr_and_its_legend_clears_the_axis_title(
    labelled_server,
    page,  # noqa: F811
    artifacts_dir,
):
    """A run with human labels: the page opens on PPR over the run's units, explains θ and PPR, the
    planner says the run has too few units, and the rank-set chart's legend does not sit on the x
    axis title (their drawn boxes do not meet)."""
    _goto(page, labelled_server, "ranksets")
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("prediction-powered ranking", exact=False).first.wait_for(timeout=90_000)
    chart = page.locator(".st-key-chart_rr_chart .js-plotly-plot >> visible=true").first
    chart.wait_for(timeout=90_000)
    _settle(page)
    text = main.inner_text()
    assert "strict win-rate" in text and "more than the run has" in text
    legend = chart.locator("g.legend").first.bounding_box()
    title = chart.locator("g.g-xtitle").first.bounding_box()
    assert legend and title, (legend, title)
    assert _box_overlap(legend, title) == 0, (legend, title)
    assert legend["y"] >= title["y"] + title["height"] - 1  # the legend below the axis title
    _no_exception(page)
    _shot(page, artifacts_dir, "ranksets_run_ppr")


_PLACEHOLDER_FIT = """el => {
    const cs = getComputedStyle(el);
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = cs.font;
    return [ctx.measureText(el.placeholder).width,
            el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight)];
}"""


def test_the_judge_form_has_room_for_its_fields(one_repeat_server, page, artifacts_dir):  # noqa: F811
    """The API judge form on the Generate page: the base URL's placeholder fits its field (it was cut
    off in a quarter-width column), the key field is a password field, and the form says how to set
    the key for a running dashboard."""
    _goto(page, one_repeat_server, "generate")
    expander = page.get_by_text("Score, judge or cluster a stored run", exact=False).first
    expander.wait_for(timeout=120_000)
    expander.click()
    _settle(page)
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("API (OpenAI-compatible)").first.click()
    _settle(page)
    url = main.locator("input[placeholder^='http://127.0.0.1:8000/v1']").first
    url.wait_for(timeout=60_000)
    text_w, room = url.evaluate(_PLACEHOLDER_FIT)
    assert text_w <= room, (text_w, room)
    form = page.locator(".st-key-judge_form")
    assert form.locator("input[type='password']").count() == 1
    body = form.inner_text()
    assert "does not see a variable exported later" in body or "is set in the dashboard" in body
    _no_exception(page)
    form.screenshot(path=str(artifacts_dir / "browser_judge_form.png"))
