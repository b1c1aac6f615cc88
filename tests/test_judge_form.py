"""The dashboard's judge job form (AppTest): local and API judges, the key never on the page or in
the job; the live request counters of an API judge's job row."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

SECRET = "sk-live-0123456789abcdef"


def _form():
    from dashboard import jobs_panel

    jobs_panel.judge_form("r1", ["m1", "m2"])


def _row():
    from dashboard import jobs, jobs_panel

    stats = {
        "requests": 130,
        "requests_per_s": 42.5,
        "retries": 7,
        "failed": 1,
        "prompt_tokens": 12345,
        "completion_tokens": 678,
    }
    jobs_panel._job_row(
        jobs.JobStatus(
            "j1",
            "judge",
            "running",
            ("judge", "--run", "r1"),
            1,
            0.0,
            done=10,
            total=20,
            extra={"stats": stats},
        ),
        allow_control=False,
    )


def _page_text(at: AppTest) -> str:
    parts = [
        e.value for kind in ("markdown", "caption", "error", "text", "code") for e in getattr(at, kind)
    ]
    parts += [str(w.value) for w in at.text_input] + [w.label for w in at.text_input]
    return " ".join(str(p) for p in parts)


@pytest.fixture
def started(monkeypatch, tmp_path):
    from dashboard import jobs

    monkeypatch.setenv("COUPLED_EVAL_DB", str(tmp_path / "x.duckdb"))
    monkeypatch.setenv("MY_JUDGE_KEY", SECRET)
    calls = []
    monkeypatch.setattr(jobs, "start_job", lambda args, **kw: calls.append((args, kw)) or "job-1")
    return calls


def test_api_judge_form_starts_the_job_with_the_key_variable_name_only(started, tmp_path):
    from engine.cli import build_parser

    at = AppTest.from_function(_form, default_timeout=60).run()
    assert not at.exception
    at.radio(key="judge_kind").set_value("openai").run()
    at.text_input(key="judge_base_url").set_value("http://127.0.0.1:8000/v1")
    at.text_input(key="judge_api_model").set_value("judge-1")
    at.text_input(key="judge_key_env").set_value("MY_JUDGE_KEY").run()
    assert "$MY_JUDGE_KEY is set" in _page_text(at)
    at.number_input(key="judge_concurrency").set_value(16)
    at.selectbox(key="judge_format").set_value("arena-hard")
    at.button(key="act_judge_btn").click().run()
    assert not at.exception and len(started) == 1
    args, kw = started[0]
    assert args == [
        "judge",
        "--db",
        str(tmp_path / "x.duckdb"),
        "--run",
        "r1",
        "--judge",
        "openai:judge-1",
        "--base-url",
        "http://127.0.0.1:8000/v1",
        "--api-key-env",
        "MY_JUDGE_KEY",
        "--concurrency",
        "16",
        "--judge-format",
        "arena-hard",
    ]
    assert kw["kind"] == "judge" and SECRET not in repr(kw) and SECRET not in _page_text(at)
    ns = build_parser().parse_args(args)  # the job's command line parses with the CLI's parser
    assert (ns.judge, ns.concurrency, ns.api_key_env) == ("openai:judge-1", 16, "MY_JUDGE_KEY")


def test_judge_form_refuses_a_pasted_key_and_a_missing_model(started):
    at = AppTest.from_function(_form, default_timeout=60).run()
    at.radio(key="judge_kind").set_value("openai").run()
    at.button(key="act_judge_btn").click().run()
    assert "Name the judge model" in _page_text(at) and not started
    at.text_input(key="judge_api_model").set_value("judge-1")
    at.text_input(key="judge_key_env").set_value("sk-pasted-key-value").run()
    at.button(key="act_judge_btn").click().run()
    text = _page_text(at)
    assert (
        "not the key" in text
        and "sk-pasted-key-value" not in text.replace(at.text_input(key="judge_key_env").value, "")
        and not started
    )


@pytest.mark.parametrize("kind,spec", [("local", "m2"), ("vllm", "vllm:m2")])
def test_local_judge_kinds(started, kind, spec):
    at = AppTest.from_function(_form, default_timeout=60).run()
    at.radio(key="judge_kind").set_value(kind).run()
    at.selectbox(key="act_judge").set_value("m2")
    at.button(key="act_judge_btn").click().run()
    args = started[0][0]
    assert args[args.index("--judge") + 1] == spec and "--api-key-env" not in args


def test_job_row_shows_live_request_counters():
    at = AppTest.from_function(_row, default_timeout=60).run()
    assert not at.exception
    assert "requests 130 (42.5/s) · retries 7 · failed 1 · tokens 12,345 in / 678 out" in _page_text(at)


@pytest.mark.parametrize("typed", ["SECRETKEY123", "AbCdEf0123456789GhIjKlMn"])
def test_judge_form_with_the_key_typed_as_the_name_starts_nothing_and_writes_nothing(
    monkeypatch, tmp_path, typed
):
    """The real job start (not a stub): a name that is not set, or a key-like value, is refused
    before any job file exists; no file under the data folder holds the typed value."""
    data = tmp_path / "data"
    monkeypatch.setenv("COUPLED_EVAL_DB", str(data / "x.duckdb"))
    monkeypatch.delenv(typed, raising=False)
    at = AppTest.from_function(_form, default_timeout=60).run()
    at.radio(key="judge_kind").set_value("openai").run()
    at.text_input(key="judge_api_model").set_value("judge-1")
    at.text_input(key="judge_key_env").set_value(typed).run()
    at.button(key="act_judge_btn").click().run()
    assert not at.exception
    errors = " ".join(e.value for e in at.error)
    assert (
        "Not started" in errors
        and ("is not set" if typed == "SECRETKEY123" else "not the key") in errors
    )
    assert (typed in errors) is (typed == "SECRETKEY123")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not (data / "jobs").exists() and all(typed.encode() not in p.read_bytes() for p in files)


def _unset_form():
    from dashboard import jobs_panel

    jobs_panel.judge_form("r1", ["m1", "m2"])


def test_an_unset_key_variable_says_how_to_set_it_for_a_running_dashboard(started, monkeypatch):
    monkeypatch.delenv("NOT_EXPORTED_KEY", raising=False)
    at = AppTest.from_function(_unset_form, default_timeout=60).run()
    at.radio(key="judge_kind").set_value("openai").run()
    at.text_input(key="judge_key_env").set_value("NOT_EXPORTED_KEY").run()
    text = _page_text(at)
    assert "$NOT_EXPORTED_KEY is not set in the dashboard's environment" in text
    assert "A running dashboard does not see a variable exported later" in text
    assert "`export NOT_EXPORTED_KEY=…`" in text and "start it again" in text
    assert "type the key here for this session only" in text


def test_a_key_typed_for_this_session_reaches_the_job_environment_only(started, monkeypatch):
    """The variable is not exported: the key typed in the password field starts the job, handed over
    as ``secret_env`` (the job's process environment), never in its arguments or on the page."""
    monkeypatch.delenv("SESSION_KEY_VAR", raising=False)
    at = AppTest.from_function(_form, default_timeout=60).run()
    at.radio(key="judge_kind").set_value("openai").run()
    at.text_input(key="judge_api_model").set_value("judge-1")
    at.text_input(key="judge_key_env").set_value("SESSION_KEY_VAR")
    at.text_input(key="judge_session_key").set_value(SECRET).run()
    assert "The key typed here is used for this session's judge jobs" in _page_text(at)
    at.button(key="act_judge_btn").click().run()
    assert not at.exception and len(started) == 1, [e.value for e in at.error]
    args, kw = started[0]
    assert kw["secret_env"] == {"SESSION_KEY_VAR": SECRET} and SECRET not in " ".join(args)
    assert SECRET not in repr(kw["env"])  # env is recorded in the job's meta file: never the key
    shown = " ".join(
        [e.value for kind in ("markdown", "caption", "error", "text", "code") for e in getattr(at, kind)]
    )
    assert SECRET not in shown


def test_a_session_key_job_keeps_the_key_out_of_files_logs_and_ps(tmp_path, monkeypatch):
    """The real job (not a stub) against the fake API server: the key typed for the session judges
    every pair, and no file under the data folder, no log and no process command line holds it."""
    from dashboard import jobs, jobs_panel
    from engine import store
    from tests.fake_openai import FakeOpenAI
    from tests.test_judge import make_judge_run
    from tests.test_judge_hardening import KEY, _files_with, _ps

    data = tmp_path / "data"
    data.mkdir()
    db = data / "x.duckdb"
    make_judge_run(db, n_prompts=3, repeats=1, models=("m1", "m2"), modes=("coupled",))
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    monkeypatch.delenv("SESSION_ONLY_KEY", raising=False)
    with FakeOpenAI(key=KEY, latency_s=0.05) as srv:
        args = jobs_panel.judge_args(
            "r1", "openai", "judge-1", base_url=srv.url, key_env="SESSION_ONLY_KEY", concurrency=1
        )
        job = jobs.start_job(
            args, kind="judge", db=db, progress=True, secret_env={"SESSION_ONLY_KEY": KEY}
        )
        seen_ps = _ps()
        st = jobs.wait_job(job, db, timeout_s=120)
        assert st.status == "done", st.log_tail
        assert srv.n_chat == 6
    assert KEY not in seen_ps and "SESSION_ONLY_KEY" in " ".join(args)
    store.query_df(db, "SELECT 1")
    assert _files_with(tmp_path, KEY.encode()) == []
    # a resume has no key (it was never written): refused in one line, naming the variable only
    with pytest.raises(Exception, match=r"\$SESSION_ONLY_KEY is not set") as exc:
        jobs.start_job(args, kind="judge", db=db)
    assert KEY not in str(exc.value)
