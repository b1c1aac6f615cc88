"""The order in which the user gave a run's models (persistence layer): the first path imported, the
first ``--models`` entry. Read from the run's stored config; every "A − B" defaults to this order."""

from __future__ import annotations

import json
import os

from engine.store.db import reader


def model_order(db: str | os.PathLike, run: str) -> list[str]:
    """The run's models in the user's order: an imported harness run's logs in the order of the paths
    given, else the config's ``models`` list (``generate --models`` and ``import paper-mmlu --models`` in
    the order given); [] when the run records neither."""
    with reader(db) as con:
        row = con.execute("SELECT config FROM runs WHERE run_id = ?", [run]).fetchone()
    try:
        cfg = json.loads(row[0]) if row is not None and row[0] else {}
    except (TypeError, json.JSONDecodeError):
        return []
    if not isinstance(cfg, dict):
        return []
    logs = (cfg.get("imported") or {}).get("logs") if isinstance(cfg.get("imported"), dict) else None
    names: list = (
        [lg.get("model") for lg in logs if isinstance(lg, dict)] if isinstance(logs, list) else []
    )
    if not names:
        models = cfg.get("models")
        names = models if isinstance(models, list) else []
    return [str(m) for m in dict.fromkeys(n for n in names if n is not None)]
