"""Real Chromium on the pages that lead to what the user has (issue 39 items 5 and 7): the Benchmark
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
    assert panel.locator(".js-plotly-plot").count() == 1
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_one_repeat_paired")
    page.get_by_role("tab", name="Sequential").click()
    _settle(page)
    panel = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    panel.get_by_text("Stop when decided", exact=False).first.wait_for(timeout=60_000)
    panel.get_by_text(re.compile(r"^(coupled|independent): ")).first.wait_for(timeout=90_000)
    _settle(page)
    assert panel.locator(".js-plotly-plot").count() == 2  # stopping times over orders, one order's CS
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_one_repeat_sequential")
