"""Store layer: what ``engine import harness`` reads of the served runs (``engine serve``) to link a
harness's samples to the generations the server stored: which runs were served, their noise-key mode
and seed. The rows themselves: :func:`engine.store.served.served_rows`."""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from engine.store.db import reader
from engine.store.served import SERVED_KIND


class ServedRunFacts(NamedTuple):
    run_id: str
    key_mode: str | None
    seed: int | None  # the server's --seed
    config: dict[str, Any]


def served_runs(db: str | os.PathLike) -> list[ServedRunFacts]:
    """Every served run of the database, oldest first (none when the file does not exist)."""
    if not os.path.exists(db):
        return []
    with reader(db) as con:
        rows = con.execute(
            "SELECT run_id, key_mode, CAST(config AS VARCHAR) FROM runs ORDER BY created_at, run_id"
        ).fetchall()
    out = []
    for run_id, key_mode, raw in rows:
        cfg = json.loads(raw) if raw else {}
        if isinstance(cfg, dict) and SERVED_KIND in cfg:
            seed = cfg.get("seed")
            out.append(ServedRunFacts(run_id, key_mode, None if seed is None else int(seed), cfg))
    return out
