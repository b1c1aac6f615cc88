"""Real Chromium on the Generate page's "Stop when decided" section (dashboard/sequential_live.py): the
form offers the round size, and a sequential run that appears in the store while the page is open (as
a run started from the form does when its first round is scored) is picked up and drawn with no
reload; its stop reads as the run's (here a sorted stored order, so the sequence missed: never
"decided"). Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import pytest

# fixtures: the browser and a page (test_browser's), a dashboard on a database of our own
from tests.test_browser import _goto, _no_exception, _serve, _shot, browser, page, tab  # noqa: F401
from tests.test_sequential_stop import make_sorted_run, mark_sorted_until

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def seq_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser_seq")
    db = tmp / "seq.duckdb"
    order = make_sorted_run(db)
    for s in _serve(tmp, db):
        yield {**s, "db": db, "order": order}


def test_the_live_section_picks_up_a_new_run_without_a_reload(seq_server, page, artifacts_dir):  # noqa: F811
    _goto(page, seq_server, "generate")
    main = page.locator("[data-testid='stMain']")
    # a first load of this page takes minutes on a loaded 2-core machine (bench/bench_dashboard.py measures it)
    page.get_by_text("No sequential run yet", exact=False).first.wait_for(timeout=300_000)
    main.get_by_text("Questions per round").first.wait_for(timeout=120_000)  # the form's round size
    mark_sorted_until(seq_server["db"], seq_server["order"])  # the run's first round is stored
    # the section re-reads the store on its own (no goto, no reload): the run, its stop and its chart
    page.get_by_text(
        "missed: the running intersection of m1 − m2 is empty at question 36 of 40", exact=False
    ).first.wait_for(timeout=120_000)
    page.locator("[data-testid='stMain'] .js-plotly-plot").first.wait_for(timeout=120_000)
    text = main.inner_text()
    assert "budget:36 held at question 36" in text and "this benchmark's full-run difference" in text
    assert "decided: m1 > m2" not in text and "decided: m2 > m1" not in text
    assert page.get_by_text("No sequential run yet", exact=False).count() == 0
    _no_exception(page)
    _shot(page, artifacts_dir, "generate_sequential_live")
