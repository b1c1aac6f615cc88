"""Real Chromium on views that had only AppTest: the Benchmark page's "Sequential" tab (stop when
decided: its charts drawn) and "Release gate" tab (its decision, figure and CI command), and the Judge
audit page (its tables drawn and exported). Neither raises;
screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re

import pytest

# fixtures: the browser, a page, and test_browser's dashboard on the tests' small run (one per module)
from tests.test_browser import (  # noqa: F401
    _goto,
    _no_exception,
    _serve,
    _settle,
    _shot,
    browser,
    page,
    playwright,
    server,
    tab,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def audit_server(tmp_path_factory):
    from tests.test_judge_audit import make_db

    tmp = tmp_path_factory.mktemp("browser_audit")
    db = tmp / "audit.duckdb"
    make_db(db, n_prompts=60, n_labels=80)
    yield from _serve(tmp, db)


def test_the_sequential_tab_draws_its_confidence_sequences(server, page, artifacts_dir):  # noqa: F811
    _goto(page, server, "benchmark")
    page.get_by_role("tab", name="Sequential").click()
    _settle(page)
    panel = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    panel.get_by_text("Stop when decided", exact=False).first.wait_for(timeout=60_000)
    panel.get_by_text(
        re.compile(r"^(coupled|independent): (decided|not decided|all \d+ questions used|missed)")
    ).first.wait_for(timeout=90_000)
    panel.get_by_text("Confidence sequence of m-base − m-int4", exact=False).first.wait_for(
        timeout=90_000
    )
    _settle(page)
    playwright.expect(panel.locator(".js-plotly-plot")).to_have_count(
        2, timeout=60_000
    )  # the stopping times over orders, one order's CS paths
    text = panel.inner_text()
    assert (
        "Stopping question over random orders" in text
        and "coupled CS" in text
        and "independent CS" in text
    )
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_sequential")


def test_the_release_gate_tab_draws_its_decision_and_the_ci_command(server, page, artifacts_dir):  # noqa: F811
    _goto(page, server, "benchmark")
    page.get_by_role("tab", name="Release gate").click()
    _settle(page)
    panel = page.locator("[data-testid='stTabPanel'] >> visible=true").first
    panel.get_by_text(re.compile(r"^(PASS|FAIL|UNDECIDED): ")).first.wait_for(timeout=90_000)
    panel.get_by_text("python -m engine gate --run run-small", exact=False).first.wait_for(
        timeout=60_000
    )
    _settle(page)
    playwright.expect(panel.locator(".js-plotly-plot")).to_have_count(
        1, timeout=60_000
    )  # the interval against −M
    text = panel.inner_text()
    assert "--baseline" in text and "--candidate" in text and "--margin 0.01" in text
    _no_exception(page)
    _shot(page, artifacts_dir, "benchmark_release_gate")


def test_the_judge_audit_page_shows_its_tables_and_exports_them(audit_server, page, artifacts_dir):  # noqa: F811
    """The figures and bias tables drawn (canvas grids), the metrics and the interval caption, and the
    figures table's CSV button gives every figure with its interval."""
    import csv
    import io

    _goto(page, audit_server, "judge_audit")
    page.get_by_text("Per-model judge bias", exact=False).first.wait_for(timeout=90_000)
    page.locator("[data-testid='stDataFrame'] >> visible=true").nth(1).wait_for(timeout=90_000)
    _settle(page)
    body = page.locator("[data-testid='stMain']").inner_text()
    assert "Expanded percentile intervals" in body and "With a human label" in body
    _no_exception(page)
    with page.expect_download(timeout=60_000) as dl:
        page.locator(".st-key-csv_ja_table button >> visible=true").first.click()
    assert dl.value.suggested_filename.startswith(
        "judge-audit_judge_audit_run-x_"
    )  # page, table, run, date
    path = artifacts_dir / "browser_judge_audit.csv"
    dl.value.save_as(str(path))
    rows = {r["figure"]: r for r in csv.DictReader(io.StringIO(path.read_text()))}
    agree = rows["agreement (judge vs human)"]
    assert float(agree["lower"]) <= float(agree["estimate"]) <= float(agree["upper"])
    assert "effective number of judges" in rows
    _shot(page, artifacts_dir, "judge_audit")
