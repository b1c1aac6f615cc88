"""The Generate page's server section (dashboard/serve_panel.py) under AppTest: the form starts an
`engine serve` job with the settings shown; a running server's card shows its address, request count
and served run with the lm-eval and Inspect commands, and Stop ends it. The server here is a stand-in
process that writes a serve progress file as `engine serve --progress-file` does; the real server
under a real browser: tests/test_browser_serve.py."""

from __future__ import annotations

import sys
import time

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import jobs, navigation, serve_panel
from tests.conftest import ROOT
from tests.test_app import TIMEOUT, _page, _texts, build_small_db

FAKE_SERVE = r"""
import json, os, signal, sys, time
argv = sys.argv[1:]
assert argv[:3] == ["-m", "engine", "serve"], argv
path = argv[argv.index("--progress-file") + 1]
run = argv[argv.index("--run") + 1]
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
n = 0
while not stop:
    n += 1
    snap = {"kind": "serve", "status": "running", "address": "http://127.0.0.1:8123/v1", "run": run,
            "requests": n, "in_flight": 1, "queued": 0, "failed": 0, "tokens": 10 * n, "stored": n,
            "updated_at": time.time()}
    open(path + ".tmp", "w").write(json.dumps(snap)); os.replace(path + ".tmp", path)
    time.sleep(0.05)
print("stopped")
"""


@pytest.fixture(scope="module")
def small_db(tmp_path_factory):
    return build_small_db(tmp_path_factory.mktemp("servedb") / "small.duckdb")


@pytest.fixture
def fake_python(tmp_path) -> str:
    script = tmp_path / "fake_serve.py"
    script.write_text(FAKE_SERVE)
    exe = tmp_path / "fakepython"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    exe.chmod(0o755)
    return str(exe)


def test_serve_args_of_the_form(monkeypatch, small_db):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    args = serve_panel.serve_args(
        ["m1", "m2"], port=8001, run="srv", seed=3, noise="independent", traces=True
    )
    assert args == [
        "serve", "--models", "m1", "m2", "--host", "127.0.0.1", "--port", "8001", "--db", str(small_db),
        "--run", "srv", "--seed", "3", "--noise", "independent", "--traces",
    ]  # fmt: skip
    with pytest.raises(Exception, match="at least one model"):
        serve_panel.serve_args([])


def test_the_form_starts_a_serve_job_with_its_settings(small_db, monkeypatch):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    started = []
    monkeypatch.setattr(jobs, "start_job", lambda args, **kw: started.append((args, kw)) or "serve-x")
    at = _page(
        AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("generate")
    )
    assert "Serve: coupled sampling" in _texts(at)
    names = at.multiselect(key="serve_models").options
    at.multiselect(key="serve_models").set_value(names[:1])
    at.radio(key="serve_noise").set_value("independent")
    at.number_input(key="serve_port").set_value(8011)
    at.button(key="FormSubmitter:serve_form-Start server").click().run()
    assert not at.exception
    assert len(started) == 1
    args, kw = started[0]
    assert kw["kind"] == "serve" and args[:3] == ["serve", "--models", names[0]]
    assert args[args.index("--noise") + 1] == "independent" and args[args.index("--port") + 1] == "8011"


def test_a_running_server_shows_its_address_requests_and_stops(small_db, monkeypatch, fake_python):
    monkeypatch.setenv("COUPLED_EVAL_DB", str(small_db))
    monkeypatch.chdir(ROOT)
    job = jobs.start_job(
        serve_panel.serve_args(["tiny-a"], run="srv"), kind="serve", db=small_db, python=fake_python
    )
    try:
        deadline = time.monotonic() + 60
        while not jobs.job_status(job, small_db).extra.get("serve") and time.monotonic() < deadline:
            time.sleep(0.05)
        at = _page(
            AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT), navigation.path("generate")
        )
        text = _texts(at)
        assert f"`{job}` · ready · `http://127.0.0.1:8123/v1`" in text
        assert "in run `srv`" in text and "requests " in text
        code = "\n".join(c.value for c in at.code)
        assert (
            "lm_eval --model local-completions" in code
            and "base_url=http://127.0.0.1:8123/v1/completions" in code
        )
        assert "openai-api/served/tiny-a" in code
        at.button(key=f"stop_{job}").click().run()
        assert not at.exception
        assert jobs.job_status(job, small_db).status == "cancelled"
    finally:
        if jobs.job_status(job, small_db).status == "running":
            jobs.cancel_job(job, small_db)
