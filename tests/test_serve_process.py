"""engine serve as a process (the CLI): kill -9 mid-request leaves a consistent run that a restart
continues; SIGTERM finishes what is in flight, flushes and exits 0; the progress line; the API key
is never written anywhere."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from engine import store
from engine.store import journal
from engine.store.served import served_rows
from engine.testing import tiny_lm
from tests.conftest import ROOT
from tests.serve_helpers import get, post

KEY = "sk-never-written-4242"


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny") / "tiny"
    model, tok = tiny_lm(0)
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return d


class Proc:
    """``python -m engine serve`` on the tiny model; ``url`` once it answers."""

    def __init__(self, folder: Path, db: Path, *extra: str):
        env = {**os.environ, "SERVE_TEST_KEY": KEY}
        cmd = [
            sys.executable,
            "-m",
            "engine",
            "serve",
            "--models",
            str(folder),
            "--port",
            "0",
            "--db",
            str(db),
        ]
        cmd += ["--run", "r", "--api-key-env", "SERVE_TEST_KEY", "--threads", "1", *extra]
        self.p = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = ""
        ready = threading.Event()

        def read():
            assert self.p.stderr is not None
            for line in self.p.stderr:
                self.lines.append(line)
                m = re.search(r"at (http://\S+/v1)", line)
                if m:
                    self.url = m.group(1)
                    ready.set()

        threading.Thread(target=read, daemon=True).start()
        assert ready.wait(180), "".join(self.lines)
        end = time.monotonic() + 60
        while get(self.url + "/models", KEY)[0] != 200:
            assert time.monotonic() < end
            time.sleep(0.1)
        self.model = str(folder)

    def ask(self, prompt: str, **kw) -> dict:
        body = {"model": self.model, "prompt": prompt, "max_tokens": 5, "temperature": 1.0, **kw}
        status, out, _ = post(self.url + "/completions", body, key=KEY)
        assert status == 200, out
        return out


def _units(db) -> list[tuple]:
    return sorted((r.prompt_id, r.repeat, tuple(r.token_ids)) for r in served_rows(db, "r").itertuples())


def test_kill_9_mid_request_leaves_a_consistent_run_and_a_restart_continues(tmp_path, tiny_folder):
    db = tmp_path / "s.duckdb"
    # --commit-every 60: the first answer is committed at once, the next two wait in the journal, so
    # the kill finds answered completions that only the journal holds
    srv = Proc(tiny_folder, db, "--commit-every", "60")
    try:
        first = [srv.ask(p) for p in ("a", "b", "a")]
        # Streamed, so the test knows the request is under way (its first token has arrived) when it
        # kills the server: a fixed sleep let a fast machine finish the request first.
        req = urllib.request.Request(
            srv.url + "/completions",
            data=json.dumps(
                {"model": srv.model, "prompt": "c", "max_tokens": 400, "n": 4, "stream": True}
            ).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
        )
        stream = urllib.request.urlopen(req, timeout=60)
        while not stream.readline().startswith(b"data:"):
            pass
    finally:
        srv.p.kill()  # SIGKILL, mid-request
        srv.p.wait(30)
    assert [u["repeat"] for o in first for u in o["coupling"]["units"]] == [0, 0, 1]
    with store.reader(db) as con:
        n_gen = con.execute("SELECT count(*) FROM generations").fetchone()[0]
        assert con.execute("SELECT count(*) FROM served").fetchone()[0] == n_gen  # whole completions
    assert n_gen < 3 and journal.segments(db, "r"), "the last answers should be in the journal only"
    before = _units(db)
    srv = Proc(tiny_folder, db)  # stores the journal, then counts
    try:
        again = srv.ask("a")  # continues the counter of 'a' (its repeat 1 was only in the journal)
        c = srv.ask("c")  # the killed request stored nothing: its repeat is free again
    finally:
        srv.p.send_signal(signal.SIGTERM)
        srv.p.wait(60)
    assert again["coupling"]["units"][0]["repeat"] == 2 and c["coupling"]["units"][0]["repeat"] == 0
    after = _units(db)
    assert set(before) <= set(after) and len(after) == 5
    answered = {(u["prompt_id"], u["repeat"]) for o in first for u in o["coupling"]["units"]}
    assert answered <= {(p, r) for p, r, _ in after}
    assert not journal.segments(db, "r")  # a graceful stop commits and deletes the journal


def test_sigterm_finishes_in_flight_flushes_and_exits_0(tmp_path, tiny_folder):
    db, prog = tmp_path / "s.duckdb", tmp_path / "progress.json"
    srv = Proc(tiny_folder, db, "--progress-file", str(prog), "--progress-every", "0.2")
    got = {}
    t = threading.Thread(
        target=lambda: got.update(
            out=post(
                srv.url + "/completions", {"model": srv.model, "prompt": "x", "max_tokens": 200}, key=KEY
            )
        )
    )
    t.start()
    time.sleep(0.3)
    srv.p.send_signal(signal.SIGTERM)
    assert srv.p.wait(120) == 0
    t.join(10)
    assert got["out"][0] == 200  # finished, not cut
    with store.reader(db) as con:
        assert con.execute("SELECT status FROM runs WHERE run_id = 'r'").fetchone()[0] == "done"
        assert con.execute("SELECT count(*) FROM served").fetchone()[0] == 1
    text = "".join(srv.lines)
    assert re.search(r"\[serve r\] 1 requests .* tokens/s", text), text
    for f in [db, prog, *tmp_path.rglob("*")]:
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in text
