import duckdb
import pytest

from engine import store
from engine.errors import UserError


def test_schema_is_idempotent_and_counts(tmp_db):
    with store.writer(tmp_db) as con:
        con.execute("INSERT INTO models (name, variant, vocab_id) VALUES (?, ?, ?)", ["m", "base", "v"])
    with store.writer(tmp_db) as con:  # second init must not fail or wipe anything
        pass
    counts = store.table_counts(tmp_db)
    assert counts["models"] == 1 and counts["generations"] == 0
    assert set(counts) >= {
        "runs",
        "generations",
        "token_traces",
        "scores",
        "judgments",
        "comparisons",
        "clusters",
    }


def test_reader_is_read_only_and_missing_file_is_clear(tmp_db):
    with pytest.raises(UserError, match="database not found"):
        with store.reader(tmp_db):
            pass
    with store.writer(tmp_db):
        pass
    with store.reader(tmp_db) as con:
        with pytest.raises(duckdb.Error):
            con.execute("INSERT INTO meta VALUES ('x', 'y')")
