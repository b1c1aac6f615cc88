"""Judges that recover and keys that stay safe (docs/JUDGES.md): failed verdicts retried by a rerun,
the circuit breaker, Retry-After parsing with a cap, one judge process per (database, run, judge),
the verdict format in the prompt hash, plain-sentence verdicts, the API key never echoed or written,
the dry run's model check, a base URL without a scheme. Fake server: tests/fake_openai.py; the
retry schedule is injected (no real waits of seconds)."""

from __future__ import annotations

import email.utils
import hashlib
import json
import os
import random
import time

import pytest

from engine import store
from engine.cli import main
from engine.errors import UserError
from engine.tasks import judge as J
from engine.tasks.judge_api import (
    ApiJudge,
    ApiJudgeConfig,
    JudgeStopped,
    backoff_s,
    key_env_problem,
    looks_like_key,
    retry_after_s,
)
from tests.fake_openai import Action, FakeOpenAI, messages_key, verdict_by_rank
from tests.test_judge import make_judge_run

KEY = "sk-test-4c3b2a190817-hardening"
DEAD_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("FAKE_JUDGE_KEY", KEY)
    return "FAKE_JUDGE_KEY"


class Waits:
    """An injected retry sleep: records each wait, waits for nothing."""

    def __init__(self):
        self.seen: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.seen.append(seconds)


def api(url, waits=None, *, concurrency=1, max_retries=2, breaker_after=5, max_retry_wait_s=60.0):
    return ApiJudge(
        ApiJudgeConfig(
            "judge-1",
            url,
            "FAKE_JUDGE_KEY",
            concurrency,
            max_retries,
            5.0,
            16,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
            max_retry_wait_s=max_retry_wait_s,
            breaker_after=breaker_after,
        ),
        sleep=waits,
    )


def cli(db, url, *extra):
    return [
        "judge",
        "--db",
        str(db),
        "--run",
        "r1",
        "--judge",
        "openai:judge-1",
        "--base-url",
        url,
        "--api-key-env",
        "FAKE_JUDGE_KEY",
        *extra,
    ]


# ------------------------------------------------------------------ failed verdicts, rerun ----


def test_cli_rerun_sends_failed_requests_again_unless_no_retry_failed(tmp_db, key_env, capsys):
    make_judge_run(tmp_db, n_prompts=3, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 6 tasks
    broken = {"on": True}
    order: list[str] = []

    def script(body, n):
        k = messages_key(body)
        if k not in order:
            order.append(k)
        i = order.index(k)
        if i == 0:
            return Action(text="no idea")  # answered but unparseable: never re-sent
        if i in (1, 2) and broken["on"]:
            return Action("status", status=400)  # failed for good
        return Action(text=verdict_by_rank(body))

    with FakeOpenAI(key=KEY, script=script) as srv:
        assert main(cli(tmp_db, srv.url, "--json")) == 0
        first = json.loads(capsys.readouterr().out)
        assert first["n_failed_now"] == 2 and srv.n_chat == 6
        broken["on"] = False
        assert main(cli(tmp_db, srv.url, "--json", "--no-retry-failed")) == 0
        assert json.loads(capsys.readouterr().out)["n_judged_now"] == 0 and srv.n_chat == 6
        assert main(cli(tmp_db, srv.url)) == 0
        text = capsys.readouterr().out
        assert srv.n_chat == 8 and "2 judged now" in text and "2 failed requests sent again" in text
        assert srv.per_messages[order[0]] == 1  # the unparseable answer was not asked again
    df = store.query_df(tmp_db, "SELECT parsed, error FROM judgments")
    assert len(df) == 6 and df.error.isna().all() and int(df.parsed.isna().sum()) == 1


# ------------------------------------------------------------------------ circuit breaker ----


def test_key_revoked_mid_run_stops_with_one_line_and_a_rerun_sends_exactly_the_rest(
    tmp_db, tmp_path, key_env, capsys
):
    make_judge_run(tmp_db, n_prompts=10, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 20 tasks
    answered = {"n": 0}

    def script(body, n):
        answered["n"] += 1
        if answered["n"] == 6:
            srv.revoke_key()  # every later request: 401
        return Action(text=verdict_by_rank(body))

    with FakeOpenAI(key=KEY, script=script) as srv:
        prog = tmp_path / "p.json"
        rc = main(cli(tmp_db, srv.url, "--concurrency", "1", "--progress-file", str(prog)))
        err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress bar's redraws
        assert rc == 2 and err.startswith("error: stopped after"), err
        assert "stopped after 5 failed requests in a row" in err and "HTTP 401" in err and KEY not in err
        assert srv.n_chat == 6 + 5
        df = store.query_df(tmp_db, "SELECT error FROM judgments")
        assert (
            int(df.error.isna().sum()) == 6 and len(df) == 6 + 4
        )  # the 5th failure and the untried: not stored
        assert json.loads(prog.read_text())["status"] == "failed"
        srv.key = KEY  # the key fixed
        sent = srv.n_chat
        assert main(cli(tmp_db, srv.url, "--json")) == 0
        res = json.loads(capsys.readouterr().out)
        assert srv.n_chat - sent == 20 - 6 == res["n_judged_now"] and res["n_retried_failed"] == 4
    df = store.query_df(tmp_db, "SELECT error, parsed FROM judgments")
    assert len(df) == 20 and df.error.isna().all() and df.parsed.notna().all()


def test_unreachable_server_trips_the_breaker_after_the_retry_budget(tmp_db, key_env):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    waits = Waits()
    judge = api(DEAD_URL, waits, max_retries=1, breaker_after=3)
    with pytest.raises(
        JudgeStopped,
        match="stopped after 3 failed requests in a row at http://127.0.0.1:9/v1: APIConnectionError",
    ):
        J.judge_run(tmp_db, "r1", "j", J.JudgeConfig("j"), api=judge, show_bar=False)
    assert len(waits.seen) == 3  # each request was retried once (the budget) before it counted
    df = store.query_df(tmp_db, "SELECT error FROM judgments")
    assert (
        len(df) == 2 and df.error.str.startswith("APIConnectionError").all()
    )  # the 4th: never tried, not stored
    with FakeOpenAI(key=KEY) as srv:
        s = J.judge_run(tmp_db, "r1", "j", J.JudgeConfig("j"), api=api(srv.url), show_bar=False)
        assert srv.n_chat == 4 == s.n_judged_now and s.n_retried_failed == 2


def test_breaker_off_stores_every_failure(tmp_db, key_env):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    s = J.judge_run(
        tmp_db,
        "r1",
        "j",
        J.JudgeConfig("j"),
        api=api(DEAD_URL, Waits(), max_retries=0, breaker_after=0),
        show_bar=False,
    )
    assert s.n_failed_now == 4 == store.table_counts(tmp_db)["judgments"]


def test_a_success_resets_the_breaker(tmp_db, key_env):
    make_judge_run(tmp_db, n_prompts=4, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 8 tasks
    seen: list[str] = []

    def script(body, n):  # 404 on every other comparison: never 2 hard failures in a row
        k = messages_key(body)
        if k not in seen:
            seen.append(k)
        return Action("status", status=404) if seen.index(k) % 2 else Action(text="A")

    with FakeOpenAI(key=KEY, script=script) as srv:
        s = J.judge_run(
            tmp_db, "r1", "j", J.JudgeConfig("j"), api=api(srv.url, breaker_after=2), show_bar=False
        )
    assert s.n_judged_now == 8 and s.n_failed_now == 4


# ------------------------------------------------------------------------------ Retry-After ----


def test_retry_after_seconds_http_date_and_garbage():
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 120, usegmt=True)
    assert retry_after_s({"retry-after": "2"}) == 2.0 and retry_after_s({"retry-after": "0.5"}) == 0.5
    assert retry_after_s({"retry-after": date}, now=now) == pytest.approx(120.0)
    assert retry_after_s({"retry-after": email.utils.formatdate(now + 30)}, now=now) == pytest.approx(
        30.0
    )  # -0000
    assert retry_after_s({"retry-after": email.utils.formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    for junk in ("5s", "soon", "nan", "inf", "", "Mon, 99 Foo 2026"):
        assert retry_after_s({"retry-after": junk}) is None, junk
    assert retry_after_s({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert (
        retry_after_s({"retry-after-ms": "x", "retry-after": "9"}) == 9.0 and retry_after_s(None) is None
    )


def test_the_server_wait_is_capped():
    rng = random.Random(0)
    cfg = ApiJudgeConfig("m", backoff_base_s=0.01, backoff_max_s=0.05)
    assert cfg.max_retry_wait_s == 60.0 and backoff_s(1, cfg, rng, 3600.0) == 60.0
    assert backoff_s(1, ApiJudgeConfig("m", max_retry_wait_s=5), rng, 3600.0) == 5.0
    assert backoff_s(1, cfg, rng, 2.0) == 2.0 and 0 <= backoff_s(3, cfg, rng, None) <= 0.05
    with pytest.raises(UserError, match="--max-retry-wait must be >= 0"):
        ApiJudgeConfig("m", max_retry_wait_s=-1)


def test_429_with_each_kind_of_retry_after_is_retried_on_schedule(tmp_db, key_env):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    date = email.utils.formatdate(time.time() + 120, usegmt=True)
    headers = ["5s", date, "3600", "garbage"]
    seen: list[str] = []

    def script(body, n):
        k = messages_key(body)
        if k not in seen:
            seen.append(k)
        return (
            Action("status", status=429, retry_after=headers[seen.index(k)])
            if n == 0
            else Action(text="A")
        )

    waits = Waits()
    with FakeOpenAI(key=KEY, script=script) as srv:
        s = J.judge_run(
            tmp_db,
            "r1",
            "j",
            J.JudgeConfig("j"),
            api=api(srv.url, waits, max_retry_wait_s=1000),
            show_bar=False,
        )
    assert s.n_failed_now == 0 and s.stored_verdicts["A"] == 4
    five_s, dated, long, junk = waits.seen
    assert five_s <= 0.05 and junk <= 0.05  # not understood: the backoff schedule
    assert 100 < dated <= 120 and long == 1000  # an HTTP date is honoured; 3600 s is capped


def test_cli_max_retry_wait_caps_a_long_retry_after(tmp_db, key_env, capsys):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 2 tasks
    script = lambda b, n: Action("status", status=429, retry_after=3600) if n == 0 else Action(text="B")  # noqa: E731
    with FakeOpenAI(key=KEY, script=script) as srv:
        t0 = time.monotonic()
        assert main(cli(tmp_db, srv.url, "--max-retry-wait", "0.1", "--json")) == 0
        assert time.monotonic() - t0 < 30 and srv.n_chat == 4
    assert json.loads(capsys.readouterr().out)["stored_verdicts"]["B"] == 2


# ------------------------------------------------------- one judge process per (db, run, judge) ----


def test_a_second_judge_process_on_the_same_run_and_judge_exits_2_naming_the_pid(
    tmp_db, key_env, capsys
):
    import subprocess
    import sys

    from tests.conftest import ROOT

    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))
    holder = subprocess.Popen(  # another process judging (run r1, judge openai:judge-1)
        [
            sys.executable,
            "-c",
            "import sys, time; from engine.tasks.judge import judge_lock\n"
            f"with judge_lock({str(tmp_db)!r}, 'r1', 'openai:judge-1'):\n print('held', flush=True); time.sleep(60)",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(cli(tmp_db, DEAD_URL)) == 2  # refused before its preflight (the URL is dead)
        err = capsys.readouterr().err
        assert f"judge 'openai:judge-1' on run 'r1' is already running by pid {holder.pid}" in err
        # another judge on the same run is not blocked
        s = J.judge_run(
            tmp_db,
            "r1",
            "other",
            J.JudgeConfig("other"),
            complete_fn=lambda m: ["A"] * len(m),
            show_bar=False,
        )
        assert s.n_judged_now == 2
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert store.table_counts(tmp_db)["judgments"] == 2


def test_dashboard_refuses_a_duplicate_judge_job_naming_the_running_one(tmp_path, monkeypatch):
    from dashboard import jobs
    from dashboard.judge_jobs import judge_job_problem

    db = tmp_path / "data" / "x.duckdb"
    jdir = jobs.jobs_dir(db)
    jdir.mkdir(parents=True)
    args = ["judge", "--db", str(db), "--run", "r1", "--judge", "m2"]
    meta = {
        "job_id": "judge-20260101-000000-abcdef",
        "kind": "judge",
        "args": args,
        "pid": os.getpid(),
        "started_at": time.time(),
    }  # this process is alive: the job reads as running
    (jdir / "judge-20260101-000000-abcdef.meta.json").write_text(json.dumps(meta))
    before = sorted(p.name for p in jdir.iterdir())
    with pytest.raises(
        UserError, match="judge job judge-20260101-000000-abcdef is already judging run 'r1'"
    ):
        jobs.start_job(args, kind="judge", db=db)
    assert sorted(p.name for p in jdir.iterdir()) == before  # nothing written
    running = [(meta["job_id"], args)]
    assert judge_job_problem(args, running) is not None
    assert judge_job_problem(args[:-1] + ["m1"], running) is None  # another judge may start
    assert judge_job_problem(args + ["--judge-name", "m2-again"], running) is None


# ------------------------------------------------------------ the format in the prompt hash ----


def test_prompt_hash_includes_the_judge_format_and_resume_with_another_is_refused(tmp_db):
    legacy = hashlib.sha256(
        (J.PAPER_JUDGE_PROMPT + "\x00" + J.JUDGE_USER_TEMPLATE).encode()
    ).hexdigest()[:16]
    assert J.JudgeConfig("j").prompt_hash == legacy  # verdicts stored before keep resuming
    other = J.JudgeConfig("j", judge_format="arena-hard", prompt_template=J.PAPER_JUDGE_PROMPT)
    assert other.prompt_hash != legacy
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    J.judge_run(
        tmp_db,
        "r1",
        "j",
        J.JudgeConfig("j"),
        complete_fn=lambda m: ["A"] * len(m),
        show_bar=False,
        max_requests=2,
    )
    with pytest.raises(UserError, match="different judge prompt or --judge-format"):
        J.judge_run(tmp_db, "r1", "j", other, complete_fn=lambda m: ["[[A>B]]"] * len(m), show_bar=False)
    assert store.table_counts(tmp_db)["judgments"] == 2


# ------------------------------------------------------------------- plain-sentence verdicts ----


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("Assistant A is better than Assistant B.", "A"),
        ("Assistant B is better than Assistant A.", "B"),
        ("Assistant B's answer is better than Assistant A's.", "B"),
        ("Assistant A's response is worse than Assistant B's.", "B"),
        ("Response B is more helpful than Response A.", "B"),
        ("B is worse than A.", "A"),
        ("A is slightly better than B.", "A"),
        ("I prefer Assistant A's answer over Assistant B's.", "A"),
        ("Both are fine, but I would choose Assistant B.", "B"),
        (
            "Assistant A provides a more accurate answer, while Assistant B rambles. Overall, Assistant B is better.",
            "B",
        ),
        (
            "After comparing both, Assistant B provides the better answer, though Assistant A is also correct.",
            "B",
        ),
        ("Overall, Assistant A is better, as Assistant B contains an error.", "A"),
        ("Output (b)", "B"),
        ("Output (a)", "A"),  # AlpacaEval's judge
        ("A > B", "A"),
        ("B >> A", "B"),
        ("A = B", "tie"),
        ("Neither answer is better than the other.", "tie"),
        ("Both responses are equally good.", "tie"),
        ("The two answers are about the same in quality.", "tie"),
        ("Assistant A wins.", "A"),
        ("Assistant B is the winner.", "B"),
        ("Both A and B", None),
        ("I cannot decide", None),
        ("Either A or B, or a tie", None),
    ],
)
def test_plain_sentences_real_judges_write(raw, expected):
    assert J.parse_verdict(raw) == expected


# ------------------------------------------------------------------------------- the API key ----


@pytest.mark.parametrize(
    "value,is_key",
    [
        ("OPENAI_API_KEY", False),
        ("MY_JUDGE_KEY", False),
        ("SECRETKEY123", False),
        ("sk-proj-abc", True),
        ("hf_abcdefghij", True),
        ("AKIAIOSFODNN7EXAMPLE99", True),
        ("gsk_x", True),
        ("has space", True),
        ("AZURE_OPENAI_API_KEY_2024_WESTEUROPE", False),
    ],
)
def test_looks_like_key(value, is_key):
    assert looks_like_key(value) is is_key
    problem = key_env_problem(value, {})
    assert problem is not None and (value not in problem) is is_key


@pytest.mark.parametrize(
    "typed", ["sk-proj-Ab12Cd34Ef56Gh78", "AbCdEf0123456789GhIjKlMn", "SECRETKEY123"]
)
def test_cli_never_echoes_a_key_typed_as_the_variable_name(tmp_db, capsys, typed):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))
    argv = cli(tmp_db, DEAD_URL)
    argv[argv.index("--api-key-env") + 1] = typed
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert (typed in err) is (typed == "SECRETKEY123")  # a plain name is named; a key-like value never
    assert store.table_counts(tmp_db)["judgments"] == 0


def _files_with(root, secret: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


def _ps() -> str:
    import subprocess

    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False).stdout


def test_dashboard_judge_job_keeps_the_key_out_of_files_logs_and_ps(tmp_path, monkeypatch, key_env):
    from dashboard import jobs, jobs_panel

    data = tmp_path / "data"
    data.mkdir()
    db = data / "x.duckdb"
    make_judge_run(db, n_prompts=3, repeats=1, models=("m1", "m2"), modes=("coupled",))
    monkeypatch.setenv("COUPLED_EVAL_DB", str(db))
    # the key typed where the variable's name belongs, or a name that is not set: refused, nothing written
    for typed in ("SECRETKEY123", "AbCdEf0123456789GhIjKlMn"):
        bad = jobs_panel.judge_args(
            "r1", "openai", "judge-1", base_url="http://127.0.0.1:1/v1", key_env=typed
        )
        with pytest.raises(UserError, match="not set|not the key") as exc:
            jobs.start_job(bad, kind="judge", db=db)
        assert "AbCdEf0123456789GhIjKlMn" not in str(exc.value)
    assert not jobs.jobs_dir(db).exists() or not list(jobs.jobs_dir(db).iterdir())
    with FakeOpenAI(key=KEY, latency_s=0.05) as srv:
        args = jobs_panel.judge_args(
            "r1", "openai", "judge-1", base_url=srv.url, key_env=key_env, concurrency=1
        )
        job = jobs.start_job(args, kind="judge", db=db, progress=True)
        seen_ps = _ps()
        st = jobs.wait_job(job, db, timeout_s=120)
        assert st.status == "done", st.log_tail
        assert srv.n_chat == 6
    assert KEY not in seen_ps and "AbCdEf0123456789GhIjKlMn" not in seen_ps
    store.query_df(db, "SELECT 1")
    assert (
        _files_with(tmp_path, KEY.encode()) == []
        and _files_with(tmp_path, b"AbCdEf0123456789GhIjKlMn") == []
    )
    assert (jobs.jobs_dir(db) / f"{job}.log").exists()


def test_cli_judge_process_keeps_the_key_out_of_files_logs_and_ps(tmp_path, key_env):
    import subprocess
    import sys

    from tests.conftest import ROOT

    db = tmp_path / "data" / "x.duckdb"
    db.parent.mkdir()
    make_judge_run(db, n_prompts=3, repeats=1, models=("m1", "m2"), modes=("coupled",))
    log = tmp_path / "data" / "judge.log"
    with FakeOpenAI(key=KEY, latency_s=0.1) as srv, open(log, "wb") as out:
        argv = [
            sys.executable,
            "-m",
            "engine",
            *cli(
                db, srv.url, "--concurrency", "1", "--progress-file", str(tmp_path / "data" / "p.json")
            ),
        ]
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        seen_ps = ""
        while proc.poll() is None:
            seen_ps += _ps()
            time.sleep(0.2)
        assert proc.returncode == 0 and srv.n_chat == 6
    assert "judge" in seen_ps and KEY not in seen_ps
    store.query_df(db, "SELECT 1")
    assert _files_with(tmp_path, KEY.encode()) == [] and b"6 judged now" in log.read_bytes()


# ------------------------------------------------------------ dry run, base URL (new users) ----


def test_dry_run_checks_the_model_against_the_server_list_without_a_chat_request(
    tmp_db, key_env, capsys
):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))
    with FakeOpenAI(key=KEY, models=("judge-1", "judge-2")) as srv:
        assert main(cli(tmp_db, srv.url, "--dry-run")) == 0
        assert "model check: the server lists model 'judge-1'" in capsys.readouterr().out
        argv = cli(tmp_db, srv.url, "--dry-run")
        argv[argv.index("--judge") + 1] = "openai:gpt-9"
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert (
            "does not list model 'gpt-9'; it serves: judge-1, judge-2" in out
            and "2 requests to send" in out
        )
        assert srv.n_chat == 0 and srv.n_models == 2
    with FakeOpenAI(key=KEY, list_models=False) as srv:
        assert main(cli(tmp_db, srv.url, "--dry-run", "--json")) == 0
        assert (
            "has no model list" in json.loads(capsys.readouterr().out)["model_check"] and srv.n_chat == 0
        )


def test_base_url_without_scheme_says_http_is_missing(tmp_db, key_env, capsys, monkeypatch):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))
    assert main(cli(tmp_db, "127.0.0.1:8000/v1")) == 2
    err = capsys.readouterr().err
    assert (
        "--base-url '127.0.0.1:8000/v1' has no scheme: http:// is missing (e.g. http://127.0.0.1:8000/v1)"
        in err
    )
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:8000/v1")
    with pytest.raises(
        UserError, match="OPENAI_BASE_URL 'localhost:8000/v1' has no scheme: http:// is missing"
    ):
        ApiJudge(ApiJudgeConfig("m", None, key_env))
    assert store.table_counts(tmp_db)["judgments"] == 0
