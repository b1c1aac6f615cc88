"""Real Chromium on the Generate page's server section: start `engine serve` on a tiny model from the
form, see its address once it answers, send it a request, see the request counted and the served
run, stop it from its card. The server is the real one (a background job); screenshots go to
test-artifacts/."""

from __future__ import annotations

import json
import re
import socket
import urllib.request

import pytest

# fixtures: the browser, a page, and test_browser's dashboard on the tests' small run (one per module)
from tests.test_browser import (  # noqa: F401
    _goto,
    _no_exception,
    _settle,
    _shot,
    browser,
    page,
    server,
    tab,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_start_watch_and_stop_a_server_from_the_generate_page(server, page, artifacts_dir, tmp_path):  # noqa: F811
    from dashboard import jobs
    from engine.store.served import served_rows
    from engine.testing import tiny_pair

    folder, _ = tiny_pair(tmp_path)
    port = _free_port()
    _goto(page, server, "generate")
    page.get_by_text("Serve: coupled sampling", exact=False).first.wait_for(timeout=120_000)
    _shot(page, artifacts_dir, "generate_server_form")
    models = page.locator("[data-testid='stMultiSelect']").filter(has_text="Models to serve").first
    clear = models.get_by_role("button", name="Clear all")
    if clear.count():
        clear.first.click()  # none of the registry's models: the tiny one only
    page.get_by_label("Other models to serve (space-separated HF folders or .gguf files)").fill(
        str(folder)
    )
    port_box = page.get_by_label("Port", exact=True)
    port_box.fill(str(port))
    port_box.press("Tab")
    page.get_by_label("Served run", exact=True).fill("ui-served")
    page.get_by_role("button", name="Start server").click()
    address = f"http://127.0.0.1:{port}/v1"
    page.get_by_text(re.compile(r"· ready ·")).first.wait_for(timeout=240_000)
    assert address in page.locator("[data-testid='stMain']").inner_text()
    # a request names a model as --models named it: here the folder (the form passed its path)
    body = {"model": str(folder), "prompt": "hello", "max_tokens": 3, "temperature": 1.0}
    req = urllib.request.Request(
        address + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.status == 200
    # the card counts it (the server writes its figures every --progress-every seconds: 10 by default)
    page.get_by_text(re.compile(r"requests 1 · ")).first.wait_for(timeout=60_000)
    assert "in run ui-served" in page.locator("[data-testid='stMain']").inner_text()
    _no_exception(page)
    _shot(page, artifacts_dir, "generate_server_ready")
    job = jobs.list_jobs(server["db"], kind="serve")[0]
    page.get_by_role("button", name="Stop server").click()
    st = jobs.wait_job(job.job_id, server["db"], timeout_s=120)
    assert st.status == "cancelled"
    _settle(page)
    rows = served_rows(server["db"], "ui-served")
    assert len(rows) == 1 and rows.iloc[0]["model"] == str(folder)
