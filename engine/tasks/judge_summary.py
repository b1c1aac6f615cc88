"""What a judge run did and what is stored for (run, judge): the typed result of
:func:`engine.tasks.judge.judge_run`; ``to_dict()`` gives the ``judge --json`` keys."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class StoredUsage:
    """Request totals stored for (run, judge)."""

    prompt_tokens: int
    completion_tokens: int
    attempts: int
    n_failed_requests: int
    mean_latency_s: float | None


@dataclass(frozen=True)
class JudgeSummary:
    """Work done now (judged, skipped as already stored, capped, unparseable, failed) and the stored
    verdicts (A / B / tie / unparseable, overall and per mode). ``requests_now``: the API client's
    request statistics (API judges only; the JSON has no such key otherwise)."""

    run: str
    judge: str
    orders: str
    judge_format: str
    prompt_hash: str
    models: list[str]
    n_tasks: int
    n_judged_now: int
    n_skipped_existing: int
    n_capped: int
    n_pairs_missing_generation: int
    n_unparseable_now: int
    n_failed_now: int
    stored_verdicts: dict[str, int]
    stored_verdicts_by_mode: dict[str, dict[str, int]]
    n_unparseable: int
    stored_usage: StoredUsage
    requests_now: dict[str, Any] | None = None
    n_retried_failed: int = 0  # of the tasks sent now: earlier requests that had failed for good

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        if self.requests_now is None:
            del d["requests_now"]
        return d
