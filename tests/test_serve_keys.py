"""The key rule of METHODS 1.6 (engine/serving/keys.py) and the served-run store (schema v5).

Exact cases of the prompt id (what is and is not part of "the same question"), the independent seed
against engine.sampling.noise (two implementations that must agree), the occurrence counters (next
repeats, n > 1, holes from failed requests, restart from stored rows, one seed per prompt), the
module's standard-library-only promise, and the v4 -> v5 migration with a served run written,
continued and refused.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import duckdb
import pytest

from engine import store
from engine.errors import UserError
from engine.serving import keys
from engine.serving.keys import Occurrences, RequestKeyError, SeedConflict
from engine.store import served as srv
from engine.store.generations import GenerationRow
from engine.store.runs import PromptRow
from tests.conftest import ROOT


def pid(body: dict, endpoint: str = "completions") -> list[str]:
    return [q.prompt_id for q in keys.questions(body, endpoint)]


# ---------------------------------------------------------------------------- prompt id


def test_canonical_bytes_and_id_of_a_tiny_case():
    q = keys.questions({"prompt": "2+2=", "temperature": 0.7}, "completions")[0]
    assert q.canonical() == (
        b'{"content":"2+2=","endpoint":"completions","rule":"request-v1","temperature":0.7,'
        b'"top_k":0,"top_p":1.0}'
    )
    assert q.prompt_id == "req-" + hashlib.blake2b(q.canonical(), digest_size=12).hexdigest()
    # the id must never change between releases (runs served months apart are coupled): pinned here
    assert (
        q.prompt_id
        == "req-"
        + hashlib.blake2b(
            b'{"content":"2+2=","endpoint":"completions","rule":"request-v1","temperature":0.7,'
            b'"top_k":0,"top_p":1.0}',
            digest_size=12,
        ).hexdigest()
    )


def test_fields_outside_the_question_do_not_change_the_id():
    base = {"prompt": "Q: why?\nA:", "temperature": 0.5}
    same = [
        {**base, "model": "other-model"},
        {**base, "max_tokens": 7, "stop": ["\n"], "n": 4, "logprobs": 3, "echo": True},
        {**base, "seed": 99, "stream": True, "user": "x"},
        {**base, "top_k": -1},
        {**base, "top_k": 0, "top_p": 1},
        {**base, "temperature": 0.5, "top_k": None},
    ]
    for body in same:
        assert pid(body) == pid(base), body


def test_fields_of_the_question_change_the_id():
    base = {"prompt": "Q: why?\nA:", "temperature": 0.5}
    ids = {pid(base)[0]}
    for body in (
        {**base, "temperature": 0.6},
        {**base, "top_p": 0.9},
        {**base, "top_k": 5},
        {**base, "prompt": "Q: why?\nA: "},
        {**base, "prompt": [1, 2, 3]},
    ):
        ids.add(pid(body)[0])
    assert len(ids) == 6
    assert pid({"prompt": "x"}) == pid({"prompt": "x", "temperature": 1.0})  # OpenAI's default


def test_batched_prompts_are_one_question_each():
    assert pid({"prompt": ["a", "b", [5, 6]]}) == [
        *pid({"prompt": "a"}),
        *pid({"prompt": "b"}),
        *pid({"prompt": [5, 6]}),
    ]
    assert pid({"prompt": [[5, 6], [7]]}) == [*pid({"prompt": [5, 6]}), *pid({"prompt": [7]})]


def test_chat_messages_role_and_content_before_any_template():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi\nthere"}]
    parts = [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}],
            "name": "u",
        },
    ]
    assert pid({"messages": msgs}, "chat") == pid({"messages": parts}, "chat")
    assert pid({"messages": msgs}, "chat") != pid(
        {"messages": [{**msgs[0], "role": "user"}, msgs[1]]}, "chat"
    )
    # a chat and a completion of the same text are different questions
    assert pid({"messages": [{"role": "user", "content": "Hi"}]}, "chat") != pid({"prompt": "Hi"})


@pytest.mark.parametrize(
    "body, endpoint, param",
    [
        ({"prompt": 5}, "completions", "prompt"),
        ({"prompt": []}, "completions", "prompt"),
        ({"prompt": [1, -2]}, "completions", "prompt"),
        ({"prompt": ["a", 3]}, "completions", "prompt"),
        ({"prompt": "a", "temperature": -1}, "completions", "temperature"),
        ({"prompt": "a", "temperature": "hot"}, "completions", "temperature"),
        ({"prompt": "a", "top_p": 0}, "completions", "top_p"),
        ({"prompt": "a", "top_k": 2.5}, "completions", "top_k"),
        ({"messages": []}, "chat", "messages"),
        ({"messages": [{"content": "x"}]}, "chat", "messages"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "chat", "messages"),
    ],
)
def test_malformed_fields_name_the_field(body, endpoint, param):
    with pytest.raises(RequestKeyError) as e:
        keys.questions(body, endpoint)
    assert e.value.param == param and param in str(e.value)


def test_seed_rule():
    assert keys.request_seed({}, 7) == 7 and keys.request_seed({"seed": 1234}, 7) == 1234
    for bad in (-1, 2**63, 1.5, True, "1"):
        with pytest.raises(RequestKeyError, match="seed"):
            keys.request_seed({"seed": bad}, 0)


@pytest.mark.parametrize(
    "seed, model", [(0, "smollm2-135m"), (1234, "smollm2-135m-int8"), (2**63 - 1, "/m/ü")]
)
def test_independent_seed_agrees_with_the_noise_module(seed, model):
    from engine.sampling.noise import independent_seed

    assert keys.model_seed(seed, model, "independent") == independent_seed(seed, model)
    assert keys.model_seed(seed, model, "coupled") == seed


def test_pinned_key():
    assert keys.pinned({"prompt": "a"}, 1) is None
    assert keys.pinned({"coupling": {"prompt_id": "q17", "repeat": 3}}, 1) == keys.Pin("q17", 3)
    assert keys.pinned({"coupling": {"prompt_id": "q17"}}, 1) == keys.Pin("q17", None)
    for bad in ({"prompt_id": ""}, {"prompt_id": "q", "repeat": -1}, {"prompt_id": "q", "x": 1}, "q17"):
        with pytest.raises(RequestKeyError, match="coupling"):
            keys.pinned({"coupling": bad}, 1)
    with pytest.raises(RequestKeyError, match="pins one prompt"):
        keys.pinned({"coupling": {"prompt_id": "q"}}, 2)


def test_the_module_imports_nothing_heavy():
    code = (
        "import sys, engine.serving.keys; "
        "heavy = [m for m in ('torch', 'numpy', 'pandas', 'duckdb', 'transformers') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------- occurrence counters


def test_counters_take_the_next_repeats():
    occ, slot = Occurrences(), ("m", "coupled", "p")
    assert [occ.take(slot, 0, 1) for _ in range(3)] == [(0,), (1,), (2,)]
    assert occ.take(slot, 0, 3) == (3, 4, 5)  # n > 1: the next n, choice i the i-th
    assert occ.take(("m2", "coupled", "p"), 0, 1) == (0,)  # each model counts its own requests
    assert occ.take(("m", "independent", "p"), 5, 1) == (0,)


def test_a_failed_request_gives_its_repeats_back_and_the_next_takes_them():
    occ, slot = Occurrences(), ("m", "coupled", "p")
    a, b = occ.take(slot, 0, 2), occ.take(slot, 0, 1)
    assert (a, b) == ((0, 1), (2,))
    occ.release(slot, a)  # nothing stored for it: as if it had never come
    assert occ.take(slot, 0, 1) == (0,) and occ.take(slot, 0, 2) == (1, 3)


def test_counters_continue_from_the_stored_units():
    stored = [("m", "coupled", "p", r, 0) for r in (0, 1, 3)] + [("m", "coupled", "q", 0, 0)]
    occ = Occurrences(stored)
    # repeat 2's request was in flight when the server died: its retry gets repeat 2, as it would have
    assert occ.take(("m", "coupled", "p"), 0, 1) == (2,)
    assert occ.take(("m", "coupled", "p"), 0, 1) == (4,)
    assert occ.taken(("m", "coupled", "q")) == (0,)


def test_one_seed_per_prompt_in_a_run():
    occ, slot = Occurrences(), ("m", "coupled", "p")
    r = occ.take(slot, 1234, 1)
    with pytest.raises(SeedConflict, match="seed 1234"):
        occ.take(slot, 7, 1)
    occ.release(slot, r)
    assert occ.take(slot, 7, 1) == (0,)  # nothing held under 1234 any more


def test_pinned_repeats_are_taken_and_skipped():
    occ, slot = Occurrences(), ("m", "coupled", "q17")
    assert occ.pin(slot, 0, (1, 2)) == (1, 2)
    assert occ.pin(slot, 0, (2, 3)) == (3,)  # 2 was taken already: not this request's to give back
    assert [occ.take(slot, 0, 1) for _ in range(2)] == [(0,), (4,)]


# ---------------------------------------------------------------------------- the store (schema v5)


def _config(seed=0, models=("a",), modes=("coupled",)) -> dict:
    return {
        "served": {"rule": keys.KEY_RULE},
        "seed": seed,
        "models": list(models),
        "modes": list(modes),
    }


def _write(db, run, model, prompt_id, repeat, seed=0, text="x"):
    srv.write_served(
        db,
        run,
        [PromptRow("", prompt_id, -1, "completions", text, None, None, text)],
        [GenerationRow(run, model, prompt_id, repeat, "coupled", seed, text, [1, 2], "eos", 2)],
        [
            srv.ServedRow(
                run,
                model,
                prompt_id,
                repeat,
                "coupled",
                "cmpl-1",
                0,
                "completions",
                False,
                json.dumps({"prompt": text}),
                3,
                [0.5, 0.25],
                [-0.7, -1.4],
                0.01,
            )
        ],
    )


def test_a_served_run_is_written_and_continued(tmp_db):
    assert srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h") == []
    _write(tmp_db, "s", "a", "req-1", 0)
    _write(tmp_db, "s", "a", "req-2", 0, text="y")
    _write(tmp_db, "s", "a", "req-1", 0)  # the same unit again (a pinned key): stored once
    got = srv.open_served_run(tmp_db, "s", _config(models=("b",)), "token_id", "v", "h")
    assert sorted(got) == [("a", "coupled", "req-1", 0, 0), ("a", "coupled", "req-2", 0, 0)]
    cfg = store.run_settings(tmp_db, "s")
    assert cfg["models"] == ["a", "b"]
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT n_units, status FROM runs WHERE run_id = 's'").fetchone() == (
            2,
            "running",
        )
        assert con.execute(
            "SELECT prompt_id, idx FROM prompts WHERE dataset_id = 'served:s' ORDER BY idx"
        ).fetchall() == [("req-1", 0), ("req-2", 1)]
    rows = srv.served_rows(tmp_db, "s")
    assert (
        len(rows) == 2
        and list(rows.probs[0]) == [0.5, 0.25]
        and json.loads(rows.request[0]) == {"prompt": "x"}
    )


def _rows(run, prompt_id, repeats, text="x", token_ids=(1, 2)):
    """One request's rows: its prompt, and a generation and a served row per repeat."""
    gens = [
        GenerationRow(run, "a", prompt_id, r, "coupled", 0, text, list(token_ids), "eos", 2)
        for r in repeats
    ]
    served = [
        srv.ServedRow(
            run, "a", prompt_id, r, "coupled", "cmpl-1", i, "completions", False, "{}", 3, [0.5], [], 0.0
        )
        for i, r in enumerate(repeats)
    ]
    return [PromptRow("", prompt_id, -1, "completions", text, None, None, text)], gens, served


class _Recording:
    """A DuckDB connection that records every statement it executes (executemany: once per row, as
    DuckDB runs it)."""

    def __init__(self, con):
        self._con, self.sql = con, []

    def execute(self, sql, *args):
        self.sql.append(sql)
        return self._con.execute(sql, *args)

    def executemany(self, sql, rows):
        self.sql += [sql] * len(rows)
        return self._con.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self._con, name)


def test_the_writer_runs_one_insert_per_table_and_skips_stored_prompts(tmp_db, monkeypatch):
    """DuckDB's cost is per executed statement (docs/BENCHMARKS.md, "engine serve"): a batch of 8
    choices is one INSERT into generations and one into served, and a question already stored (its
    repeats asked later, or stored before this writer started) is not inserted again."""
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    _write(tmp_db, "s", "a", "req-0", 0)  # stored before the writer starts
    cons: list[_Recording] = []
    real = srv._connect
    monkeypatch.setattr(
        srv, "_connect", lambda *a, **k: cons.append(_Recording(real(*a, **k))) or cons[-1]
    )
    w = srv.HeldWriter(tmp_db, "s")
    w.write(*_rows("s", "req-1", range(8)))
    w.write(*_rows("s", "req-1", range(8, 16)))
    w.write(*_rows("s", "req-0", range(1, 3)))
    w.write(*_rows("s", "req-0", range(2, 4)))  # repeat 2 stored already (a pinned key asked again)
    w.release()
    inserts = [
        sql.split(" (")[0].replace("INSERT ", "")
        for c in cons
        for sql in c.sql
        if sql.startswith("INSERT")
    ]
    assert inserts == [
        "INTO prompts",
        "INTO generations",
        "INTO served",
        "INTO generations",
        "INTO served",
        "INTO generations",
        "INTO served",
        # plain INSERTs first (OR IGNORE is slower); the stored unit refuses the transaction, which
        # goes again with OR IGNORE
        "INTO generations",
        "OR IGNORE INTO generations",
        "OR IGNORE INTO served",
    ]
    with store.reader(tmp_db) as con:
        assert con.execute("SELECT n_units FROM runs WHERE run_id = 's'").fetchone() == (20,)
        assert con.execute(
            "SELECT prompt_id, idx FROM prompts WHERE dataset_id = 'served:s' ORDER BY idx"
        ).fetchall() == [("req-0", 0), ("req-1", 1)]
        assert con.execute(
            "SELECT n_prompts FROM datasets WHERE dataset_id = 'served:s'"
        ).fetchone() == (2,)
    assert len(srv.served_rows(tmp_db, "s")) == 20


def test_the_writer_stores_a_unit_once_and_a_failed_batchs_prompt_later(tmp_db):
    """A pinned unit sent twice in one batch, or again after it was stored, is stored once (the first
    one); a batch that failed stored nothing, so its prompt is inserted with the next batch."""
    srv.open_served_run(tmp_db, "s", _config(), "token_id", "v", "h")
    w = srv.HeldWriter(tmp_db, "s")
    p, g, s = _rows("s", "req-1", [0, 1], text="first")
    p2, g2, s2 = _rows("s", "req-1", [1, 2], text="second")
    w.write(p, g + g2, s + s2)
    w.write(*_rows("s", "req-1", [2, 3], text="third"))
    with pytest.raises(duckdb.Error):
        w.write(*_rows("s", "req-2", [0], token_ids=("not a token",)))
    w.write(*_rows("s", "req-2", [0], text="fourth"))
    w.release()
    got = srv.served_rows(tmp_db, "s")
    assert sorted(zip(got.prompt_id, got.repeat, got.text, strict=True)) == [
        ("req-1", 0, "first"),
        ("req-1", 1, "first"),
        ("req-1", 2, "second"),
        ("req-1", 3, "third"),
        ("req-2", 0, "fourth"),
    ]
    with store.reader(tmp_db) as con:
        assert con.execute(
            "SELECT prompt_id, idx FROM prompts WHERE dataset_id = 'served:s' ORDER BY idx"
        ).fetchall() == [("req-1", 0), ("req-2", 1)]
        # the unit count is what was stored: a unit sent twice counts once, the failed batch not at all
        assert con.execute("SELECT n_units FROM runs WHERE run_id = 's'").fetchone() == (5,)
        assert con.execute(
            "SELECT n_prompts FROM datasets WHERE dataset_id = 'served:s'"
        ).fetchone() == (2,)


def test_a_served_run_refuses_another_seed_key_mode_or_a_generated_run(tmp_db):
    srv.open_served_run(tmp_db, "s", _config(seed=0), "token_id", "v", "h")
    with pytest.raises(UserError, match="--seed 0"):
        srv.open_served_run(tmp_db, "s", _config(seed=1), "token_id", "v", "h")
    with pytest.raises(UserError, match="keys its noise by token_id"):
        srv.open_served_run(tmp_db, "s", _config(), "bytes", "v", "h")
    with store.transaction(tmp_db) as con:
        con.execute(
            "INSERT INTO runs (run_id, config, status) VALUES ('g', '{\"models\": [\"a\"]}', 'done')"
        )
    with pytest.raises(UserError, match="not a served run"):
        srv.open_served_run(tmp_db, "g", _config(), "token_id", "v", "h")


def test_migrate_v4_to_v5_adds_the_served_table(tmp_path):
    from engine.store.schema import MIGRATIONS
    from tests.test_store_integrity import make_v1

    db = tmp_path / "v4.duckdb"
    make_v1(db)
    con = duckdb.connect(str(db))
    for version, stmts in MIGRATIONS:
        if version < 4:
            for sql in stmts:
                con.execute(sql)
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(UserError, match="schema version 4"):
        srv.open_served_run(db, "s", _config(), "token_id", "v", "h")
    res = store.migrate(db)
    assert (res["from_version"], res["to_version"]) == (4, store.SCHEMA_VERSION)
    assert store.table_counts(db)["generations"] == 2 and store.table_counts(db)["served"] == 0
    srv.open_served_run(db, "s", _config(), "token_id", "v", "h")
    _write(db, "s", "a", "req-1", 0)
    assert store.table_counts(db)["served"] == 1
