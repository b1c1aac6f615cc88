"""API judges against a fake OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py): scripted
failures, retries, exactly one verdict per comparison, resume, the key never stored, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from engine import store
from engine.cli import main
from engine.errors import UserError
from engine.progress import read_progress
from engine.tasks import judge as J
from engine.tasks.judge_api import ApiJudge, ApiJudgeConfig
from engine.tasks.judge_cost import estimate_cost
from tests.fake_openai import Action, FakeOpenAI, messages_key, verdict_by_rank
from tests.test_judge import make_judge_run

KEY = "sk-test-9f8e7d6c5b4a-never-stored"
ROOT = Path(__file__).resolve().parents[1]

# one category per comparison, in order of first arrival: (action of request n, requests it takes)
CATEGORIES = {
    "ok": (lambda b, n: Action(text=verdict_by_rank(b)), 1),
    "429-once": (
        lambda b, n: Action("status", status=429, retry_after=0.2) if n == 0 else Action(text="[[A]]"),
        2,
    ),
    "500-twice": (lambda b, n: Action("status", status=500) if n < 2 else Action(text="Assistant B"), 3),
    "timeout-once": (lambda b, n: Action("hang", delay_s=1.5) if n == 0 else Action(text="**Tie**"), 2),
    "malformed-once": (lambda b, n: Action("malformed") if n == 0 else Action(text="B."), 2),
    "empty": (lambda b, n: Action("empty"), 1),
    "unparseable": (lambda b, n: Action(text="Both have merits; I cannot say."), 1),
    "400": (lambda b, n: Action("status", status=400), 1),
    "500-always": (lambda b, n: Action("status", status=503), 3),  # 1 + max_retries (2)
}
FAILED = {"empty", "400", "500-always"}


class Script:
    def __init__(self):
        self.category: dict[str, str] = {}

    def __call__(self, body, n):
        k = messages_key(body)
        if k not in self.category:
            self.category[k] = list(CATEGORIES)[len(self.category) % len(CATEGORIES)]
        return CATEGORIES[self.category[k]][0](body, n)


def api(url, *, concurrency=4, max_retries=2, timeout_s=0.5, key_env="FAKE_JUDGE_KEY"):
    return ApiJudge(
        ApiJudgeConfig(
            "judge-1",
            url,
            key_env,
            concurrency,
            max_retries,
            timeout_s,
            16,
            backoff_base_s=0.01,
            backoff_max_s=0.05,
        )
    )


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("FAKE_JUDGE_KEY", KEY)
    return "FAKE_JUDGE_KEY"


def test_scripted_failures_one_verdict_each_retries_and_rerun_sends_nothing(tmp_db, tmp_path, key_env):
    make_judge_run(
        tmp_db, n_prompts=3, repeats=1, modes=("coupled",)
    )  # 3 units x 3 pairs x 2 orders = 18
    script = Script()
    with FakeOpenAI(key=KEY, script=script) as srv:
        judge = api(srv.url)
        judge.preflight()
        prog = tmp_path / "p.json"
        s = J.judge_run(
            tmp_db, "r1", "api", J.JudgeConfig("api"), api=judge, show_bar=False, progress_file=prog
        )
        assert srv.n_models == 1 and srv.max_inflight <= 4
        n_sent = srv.n_chat
        # every comparison got exactly one stored verdict; each was asked as often as its script says
        df = store.query_df(tmp_db, "SELECT * FROM judgments")
        assert len(df) == 18 == s.n_tasks == s.n_judged_now == len(srv.per_messages)
        expected = {k: CATEGORIES[c][1] for k, c in script.category.items()}
        assert dict(srv.per_messages) == expected and n_sent == sum(expected.values())
        assert Counter(df.attempts) == Counter(expected.values())
        cats = Counter(script.category.values())
        assert int(df.error.notna().sum()) == sum(cats[c] for c in FAILED) == s.n_failed_now
        assert df[df.error.notna()].parsed.isna().all() and df[df.error.notna()].raw.isna().all()
        errors = set(df.error.dropna())
        assert any(e.startswith("HTTP 400") for e in errors) and any(
            e.startswith("HTTP 503") for e in errors
        )
        assert "the server returned no choices" in errors
        assert s.n_unparseable == sum(cats[c] for c in FAILED | {"unparseable"})
        ok = df[df.error.isna()]
        assert (ok.reported_model == "judge-1-2026-01-01").all() and (ok.prompt_tokens > 0).all()
        assert ok.latency_s.notna().all() and s.stored_usage.attempts == n_sent
        assert s.requests_now["requests"] == n_sent and s.requests_now["retries"] == n_sent - 18
        # Retry-After was honoured: the retry came at least 0.2 s after the 429
        for k, c in script.category.items():
            if c == "429-once":
                assert srv.times[k][1] - srv.times[k][0] >= 0.19
        p = read_progress(prog)
        assert p["status"] == "done" and p["done"] == 18 and p["stats"]["retries"] == n_sent - 18
        # a rerun with --no-retry-failed sends nothing
        again = J.judge_run(
            tmp_db,
            "r1",
            "api",
            J.JudgeConfig("api"),
            api=api(srv.url),
            show_bar=False,
            retry_failed=False,
        )
        assert (
            srv.n_chat == n_sent
            and again.n_judged_now == 0
            and store.table_counts(tmp_db)["judgments"] == 18
        )
        # a plain rerun sends again exactly the requests that failed for good (never an answered one,
        # the unparseable included); each fails as scripted again and replaces its row
        failed = [k for k, c in script.category.items() if c in FAILED]
        again = J.judge_run(tmp_db, "r1", "api", J.JudgeConfig("api"), api=api(srv.url), show_bar=False)
        assert srv.n_chat - n_sent == sum(CATEGORIES[script.category[k]][1] for k in failed)
        assert again.n_judged_now == len(
            failed
        ) == again.n_retried_failed and again.n_skipped_existing == 18 - len(failed)
        assert store.table_counts(tmp_db)["judgments"] == 18


def test_cli_api_judge_key_never_stored_and_rerun_is_free(tmp_db, tmp_path, key_env, capsys):
    make_judge_run(tmp_db, n_prompts=2, repeats=2, models=("m1", "m2"), modes=("coupled", "independent"))
    with FakeOpenAI(
        key=KEY, script=lambda b, n: Action(text=f"Let me think.\n\nFinal verdict: {verdict_by_rank(b)}")
    ) as srv:
        prog = tmp_path / "prog.json"
        args = [
            "judge",
            "--db",
            str(tmp_db),
            "--run",
            "r1",
            "--judge",
            "openai:judge-1",
            "--base-url",
            srv.url,
            "--api-key-env",
            key_env,
            "--concurrency",
            "3",
            "--progress-file",
            str(prog),
        ]
        assert main(args + ["--json"]) == 0
        out = capsys.readouterr()
        res = json.loads(out.out)
        assert (
            res["n_judged_now"] == 16 == srv.n_chat
            and res["stored_verdicts"]["A"] == 8 == res["stored_verdicts"]["B"]
        )
        assert main(args) == 0  # rerun: no preflight, no request
        text = capsys.readouterr().out
        assert srv.n_chat == 16 and srv.n_models == 1 and "0 judged now, 16 already stored" in text
        assert "stored totals:" in text and "16 attempts" in text
        logs = out.out + out.err + text + prog.read_text()
    store.query_df(tmp_db, "SELECT 1")  # checkpointed and closed
    for f in tmp_path.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in logs
    wa = J.judgments_to_comparisons(tmp_db, "r1", "openai:judge-1", "coupled")
    assert (wa.winner == "a").all() and len(wa) == 8


@pytest.mark.parametrize("case", ["provider", "unreachable", "no-key", "unlisted", "401"])
def test_bad_input_is_one_line_before_any_verdict(tmp_db, key_env, monkeypatch, capsys, case):
    make_judge_run(tmp_db, n_prompts=1, repeats=1, models=("m1", "m2"), modes=("coupled",))
    with FakeOpenAI(key=KEY) as srv:
        judge, url = "openai:judge-1", srv.url
        if case == "provider":
            judge = "anthropic:claude"
        elif case == "unreachable":
            url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
        elif case == "no-key":
            monkeypatch.delenv(key_env)
        elif case == "unlisted":
            judge = "openai:gpt-9"
        elif case == "401":
            monkeypatch.setenv(key_env, "sk-wrong")
        rc = main(
            [
                "judge",
                "--db",
                str(tmp_db),
                "--run",
                "r1",
                "--judge",
                judge,
                "--base-url",
                url,
                "--api-key-env",
                key_env,
                "--timeout",
                "2",
                "--max-retries",
                "0",
            ]
        )
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and srv.n_chat == 0
    assert store.table_counts(tmp_db)["judgments"] == 0
    assert {
        "provider": "unknown judge provider 'anthropic'",
        "unreachable": "cannot reach the judge server",
        "no-key": "$FAKE_JUDGE_KEY is not set",
        "unlisted": "does not list model 'gpt-9'",
        "401": "refused the key in $FAKE_JUDGE_KEY (401)",
    }[case] in err
    assert KEY not in err


def test_killed_judge_subprocess_resumes_without_duplicates(tmp_db, tmp_path, key_env):
    make_judge_run(
        tmp_db, n_prompts=10, repeats=2, modes=("coupled",)
    )  # 10 x 2 x 3 pairs x 2 orders = 120
    prog = tmp_path / "prog.json"
    with FakeOpenAI(key=KEY, latency_s=0.02, script=lambda b, n: Action(text=verdict_by_rank(b))) as srv:
        args = [
            sys.executable,
            "-m",
            "engine",
            "judge",
            "--db",
            str(tmp_db),
            "--run",
            "r1",
            "--judge",
            "openai:judge-1",
            "--base-url",
            srv.url,
            "--api-key-env",
            key_env,
            "--concurrency",
            "2",
            "--progress-file",
            str(prog),
        ]
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        deadline = time.time() + 120
        while time.time() < deadline and ((read_progress(prog) or {}).get("done", 0) < 30):
            assert proc.poll() is None, "the judge ended before it was killed"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        stored = store.table_counts(tmp_db)["judgments"]
        assert 30 <= stored < 120
        sent_before = srv.n_chat
        s = J.judge_run(
            tmp_db,
            "r1",
            "openai:judge-1",
            J.JudgeConfig("openai:judge-1"),
            api=api(srv.url),
            show_bar=False,
        )
        assert srv.n_chat - sent_before == 120 - stored == s.n_judged_now  # only the missing ones
    df = store.query_df(
        tmp_db, "SELECT prompt_id, repeat, mode, model_a, model_b, presented FROM judgments"
    )
    assert len(df) == 120 and not df.duplicated().any() and s.n_unparseable == 0


def test_max_requests_and_dry_run(tmp_db, key_env, monkeypatch, tmp_path, capsys):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))  # 4 tasks
    monkeypatch.setenv(
        "TIKTOKEN_CACHE_DIR", str(tmp_path / "empty-cache")
    )  # no encoding here, nothing downloaded
    with FakeOpenAI(key=KEY) as srv:
        base = [
            "judge",
            "--db",
            str(tmp_db),
            "--run",
            "r1",
            "--judge",
            "openai:gpt-4o",
            "--base-url",
            srv.url,
            "--api-key-env",
            key_env,
        ]
        monkeypatch.delenv(key_env)  # a dry run needs no key and sends nothing
        assert main(base + ["--dry-run", "--price-in", "2.5", "--price-out", "10"]) == 0
        text = capsys.readouterr().out
        assert (
            "4 requests to send" in text and "characters/4 estimate" in text and "estimated cost" in text
        )
        assert main(base + ["--dry-run", "--json", "--max-requests", "3"]) == 0
        res = json.loads(capsys.readouterr().out)
        assert (res["n_requests"], res["n_capped"], res["max_output_tokens"]) == (3, 1, 3 * 16)
        assert srv.n_chat == 0 and srv.n_models == 2  # the model check lists models; no chat request
        assert res["model_check"].startswith("not checked ($FAKE_JUDGE_KEY is not set)")
    monkeypatch.setenv(key_env, KEY)
    with FakeOpenAI(key=KEY, models=("gpt-4o",)) as srv:
        base[base.index("--base-url") + 1] = srv.url
        assert main(base + ["--max-requests", "3", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["n_capped"] == 1 and srv.n_chat == 3
        assert main(base + ["--json"]) == 0
        assert json.loads(capsys.readouterr().out)["n_judged_now"] == 1 and srv.n_chat == 4


def byte_encoding():
    """A real ``tiktoken.Encoding`` whose tokens are the UTF-8 bytes (no merges): it runs tiktoken's
    own encoder offline. No real encoding file (cl100k_base, o200k_base) is in this machine's
    tiktoken cache and none can be downloaded, so the model's own encoding is not what runs here."""
    tiktoken = pytest.importorskip("tiktoken")
    return tiktoken.Encoding(
        "bytes",
        pat_str=r"\S+|\s+",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


def test_cost_estimate_runs_the_tiktoken_path_with_a_given_encoding():
    from engine.tasks.judge_cost import token_counter

    count, how = token_counter("gpt-4o", encoding=byte_encoding())
    assert how == "tiktoken bytes" and count("héllo wörld") == len("héllo wörld".encode()) == 13
    chat = [{"role": "system", "content": "abcd"}, {"role": "user", "content": "héllo"}]
    est = lambda chats: estimate_cost(chats, "gpt-4o", 10, counter=(count, how)).input_tokens  # noqa: E731
    # OpenAI's published chat accounting, measured by differences (not restated as one formula):
    # a request is primed with 3 tokens, each message adds 3 plus its content's tokens
    assert est([[]]) == 3 and est([[{"role": "user", "content": ""}]]) - est([[]]) == 3
    assert est([chat]) - est([chat[:1]]) == 3 + 6 and est([chat]) - est([[]]) == 2 * 3 + 4 + 6
    five = estimate_cost([chat] * 5, "gpt-4o", 10, price_in=1.0, price_out=2.0, counter=(count, how))
    assert (five.n_requests, five.input_tokens, five.max_output_tokens, five.method) == (
        5,
        5 * est([chat]),
        50,
        how,
    )
    assert five.cost == pytest.approx((five.input_tokens * 1.0 + 50 * 2.0) / 1e6)


def test_cost_estimate_falls_back_to_characters_without_a_cached_encoding(monkeypatch, tmp_path):
    from engine.tasks.judge_cost import token_counter

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    count, how = token_counter("gpt-4o")
    assert how.startswith("characters/4 estimate") and count("abcdefghi") == 3
    assert (
        token_counter("no-such-model")[1]
        == "characters/4 estimate (tiktoken does not know model 'no-such-model')"
    )


def test_v1_database_migrates_to_the_current_version_keeping_verdicts(tmp_path):
    from tests.test_store_integrity import make_v1

    db = tmp_path / "old.duckdb"
    make_v1(db)
    con = duckdb.connect(str(db))
    con.execute(
        "INSERT INTO judgments VALUES ('r1', 'j', 'p1', 0, 'coupled', 'a', 'b', 'ab', 'h', 'A', 'A', 'a')"
    )
    con.close()
    assert store.migrate(db)["to_version"] == store.SCHEMA_VERSION >= 3  # v3: the judge columns below
    df = store.query_df(db, "SELECT * FROM judgments")
    assert df.iloc[0][["raw", "parsed", "winner"]].tolist() == ["A", "A", "a"]
    assert (
        df[["reported_model", "prompt_tokens", "completion_tokens", "latency_s", "attempts", "error"]]
        .isna()
        .all()
        .all()
    )
    fresh = tmp_path / "new.duckdb"
    with store.writer(fresh):
        pass
    cols = lambda p: store.query_df(
        p,
        "SELECT column_name FROM information_schema.columns "  # noqa: E731
        "WHERE table_name = 'judgments' ORDER BY ordinal_position",
    ).column_name.tolist()
    assert cols(db) == cols(fresh)  # the migrated table has the fresh table's columns, in order


def test_arena_hard_format_end_to_end(tmp_db, key_env, capsys):
    make_judge_run(tmp_db, n_prompts=2, repeats=1, models=("m1", "m2"), modes=("coupled",))
    seen = []

    def script(body, n):
        seen.append(body["messages"][0]["content"])
        return Action(
            text="Long reasoning...\nMy final verdict is "
            + ("[[A>>B]]" if verdict_by_rank(body) == "A" else "[[B>A]]")
        )

    with FakeOpenAI(key=KEY, script=script) as srv:
        assert (
            main(
                [
                    "judge",
                    "--db",
                    str(tmp_db),
                    "--run",
                    "r1",
                    "--judge",
                    "openai:judge-1",
                    "--base-url",
                    srv.url,
                    "--api-key-env",
                    key_env,
                    "--judge-format",
                    "arena-hard",
                    "--json",
                ]
            )
            == 0
        )
    res = json.loads(capsys.readouterr().out)
    assert res["judge_format"] == "arena-hard" and set(seen) == {J.ARENA_HARD_PROMPT}
    df = store.query_df(tmp_db, "SELECT parsed, winner FROM judgments")
    assert (df.winner == "a").all() and set(df.parsed) == {"A", "B"}


def test_preflight_without_models_endpoint_uses_one_tiny_chat_request(key_env):
    with FakeOpenAI(key=KEY, list_models=False) as srv:
        assert api(srv.url).preflight() == srv.url and srv.n_chat == 1
        bad = ApiJudge(ApiJudgeConfig("gpt-9", srv.url, key_env, max_retries=0))
        with pytest.raises(UserError, match="does not serve model 'gpt-9' \\(404\\)"):
            bad.preflight()
