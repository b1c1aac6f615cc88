"""What a run's report states about how it was made: the run row, its models' rows and its dataset
with a content hash (the shareable report's "design" section, :mod:`engine.analysis.run_design`)."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, NamedTuple

from engine.store.db import reader
from engine.store.runs import require_run


class DesignRows(NamedTuple):
    """The stored facts of one run, as plain values (``config``: the run's config JSON as a dict)."""

    run_id: str
    created_at: str | None
    status: str | None
    code_version: str | None
    key_mode: str | None
    host: str | None
    config: dict[str, Any]
    warnings: list[str]
    models: list[dict[str, Any]]  # name, source, variant, vocab_id, vocab_size, config (dict)
    dataset: dict[str, Any] | None  # dataset_id, source, kind, n_prompts, sha256 (of the run's prompts)
    n_generations: int
    n_tokens: int
    wall_s: float | None  # first row of the run -> its last generation


def _prompts_sha256(con, dataset_id: str, run_id: str) -> tuple[str, int]:
    """sha256 over the run's prompts in dataset order (id, question, choices, gold, user prompt): the
    same digest wherever the same questions were asked; and how many prompts that is."""
    rows = con.execute(
        """SELECT prompt_id, coalesce(question, ''), coalesce(CAST(choices AS VARCHAR), ''),
                                 coalesce(gold, ''), coalesce(user_prompt, '')
                          FROM prompts WHERE dataset_id = ? AND prompt_id IN
                               (SELECT DISTINCT prompt_id FROM generations WHERE run_id = ?)
                          ORDER BY idx, prompt_id""",
        [dataset_id, run_id],
    ).fetchall()
    h = hashlib.sha256()
    for r in rows:
        h.update("\x1f".join(map(str, r)).encode("utf-8"))
        h.update(b"\x1e")
    return h.hexdigest(), len(rows)


def design_rows(db: str | os.PathLike, run_id: str) -> DesignRows:
    """:class:`DesignRows` of ``run_id`` (UserError naming the known runs when it is not stored)."""
    with reader(db) as con:
        require_run(con, run_id)
        row = con.execute(
            """SELECT CAST(created_at AS VARCHAR), status, code_version, key_mode, host,
                                    CAST(config AS VARCHAR), CAST(warnings AS VARCHAR), dataset_id
                             FROM runs WHERE run_id = ?""",
            [run_id],
        ).fetchone()
        created, status, code, key_mode, host, cfg, warns, dataset_id = row or (None,) * 8
        config = json.loads(cfg) if cfg else {}
        names = [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT model FROM generations WHERE run_id = ? ORDER BY model", [run_id]
            ).fetchall()
        ]
        models = []
        for r in con.execute(
            """SELECT name, source, variant, vocab_id, vocab_size, CAST(config AS VARCHAR)
                                FROM models WHERE list_contains(?, name) ORDER BY name""",
            [names],
        ).fetchall():
            models.append(
                {
                    "name": r[0],
                    "source": r[1],
                    "variant": r[2],
                    "vocab_id": r[3],
                    "vocab_size": r[4],
                    "config": json.loads(r[5]) if r[5] else {},
                }
            )
        known = {m["name"] for m in models}
        models += [
            {
                "name": n,
                "source": None,
                "variant": None,
                "vocab_id": None,
                "vocab_size": None,
                "config": {},
            }
            for n in names
            if n not in known
        ]
        dataset = None
        if dataset_id is not None:
            d = con.execute(
                "SELECT dataset_id, source, kind, n_prompts FROM datasets WHERE dataset_id = ?",
                [dataset_id],
            ).fetchone()
            sha, n_used = _prompts_sha256(con, dataset_id, run_id)
            dataset = {
                "dataset_id": dataset_id,
                "source": d[1] if d else None,
                "kind": d[2] if d else None,
                "n_prompts": d[3] if d else None,
                "n_prompts_used": n_used,
                "sha256": sha,
            }
        gen = con.execute(
            """SELECT count(*), coalesce(sum(g.n_tokens), 0),
                                    epoch(max(g.created_at)) - epoch(min(r.created_at))
                             FROM generations g JOIN runs r USING (run_id) WHERE g.run_id = ?""",
            [run_id],
        ).fetchone()
        gen = gen or (0, 0, None)
    return DesignRows(
        run_id,
        created,
        status,
        code,
        key_mode,
        host,
        config if isinstance(config, dict) else {},
        json.loads(warns) if warns else [],
        models,
        dataset,
        int(gen[0]),
        int(gen[1]),
        None if gen[2] is None else float(gen[2]),
    )
