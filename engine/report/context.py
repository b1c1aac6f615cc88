"""What the section builders of a run report share: the run, the options, and each analysis computed
once (lazily, by the engine's own functions: the report never recomputes a statistic)."""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any

import pandas as pd

from engine.analysis.ranksets import parse_alpha
from engine.errors import UserError


def frame_table(
    df: pd.DataFrame,
    caption: str,
    columns: dict[str, str] | None = None,
    digits: int = 3,
    footnote: str | None = None,
):
    """A DataFrame as a report :class:`~engine.report.model.Table` (``columns``: source -> header;
    numbers rounded to ``digits``)."""
    from engine.report.model import Table, cell, num

    cols = columns or {c: c for c in df.columns}
    rows = []
    for rec in df.to_dict("records"):
        row = []
        for c in cols:
            v = rec.get(c)
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            row.append(cell(num(v, digits) if numeric or v is None else str(v), v if numeric else None))
        rows.append(row)
    return Table(caption, list(cols.values()), rows, footnote)


class RunContext:
    """One run's report inputs. ``models``: the models to feature (the first two are the headline pair);
    None: every scored model, the headline pair the two most accurate. ``alpha``: the rank-sets' and the
    comparison's error level; ``seed``: every resampling's seed."""

    def __init__(
        self,
        db: str | os.PathLike,
        run: str,
        models: list[str] | None = None,
        alpha: float = 0.05,
        seed: int = 0,
        db_label: str | None = None,
    ):
        self.db, self.run, self.alpha, self.seed = db, run, parse_alpha(alpha), int(seed)
        self.db_label = db_label or str(db)
        self._models = list(models) if models else None
        self.notes: list[str] = []  # analyses the run could not give, one line each

    @cached_property
    def summary(self):
        from engine.analysis.summary import run_summary

        return run_summary(self.db, self.run)

    @cached_property
    def design(self):
        from engine.analysis.run_design import run_design

        return run_design(self.db, self.run)

    @cached_property
    def models(self) -> list[str]:
        known = self.summary.models
        if self._models:
            bad = [m for m in self._models if m not in known]
            if bad:
                raise UserError(
                    f"--models {', '.join(bad)}: not scored in run {self.run!r}; models: "
                    f"{', '.join(known)}"
                )
            return self._models
        return known

    @cached_property
    def mode(self) -> str:
        """The mode the headline reads: coupled when the run has it."""
        return "coupled" if "coupled" in self.summary.modes else self.summary.modes[0]

    @cached_property
    def pair(self) -> tuple[str, str] | None:
        """The headline pair: the first two of ``models``, or the two most accurate models (main
        mode)."""
        if len(self.models) < 2:
            return None
        if self._models:
            return self._models[0], self._models[1]
        acc = {
            a.model: a.accuracy
            for a in self.summary.accuracy
            if a.mode == self.mode and a.model in self.models
        }
        best = sorted(acc, key=lambda m: (-acc[m], m))[:2]
        return (best[0], best[1]) if len(best) == 2 else None

    @property
    def imported(self) -> bool:
        return self.design.imported_from is not None and "coupled" not in self.summary.modes

    def attempt(self, what: str, fn, *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)``, or None with a one-line note when the run cannot give it (a
        UserError)."""
        try:
            return fn(*args, **kw)
        except UserError as exc:
            self.notes.append(f"{what}: {exc}")
            return None

    @cached_property
    def ranks(self):
        from engine.analysis.accuracy_ranks import accuracy_ranksets

        if len(self.summary.models) < 2:
            return None
        return self.attempt(
            "accuracy rank-sets",
            accuracy_ranksets,
            self.db,
            self.run,
            alpha=self.alpha,
            mode=self.mode,
            rule=self.summary.rule,
            seed=self.seed,
        )

    @cached_property
    def benchmark(self):
        from engine.analysis.benchmark import benchmark_compare

        if self.pair is None or not {"coupled", "independent"} <= set(self.summary.modes):
            return None
        return self.attempt(
            "coupled vs independent comparison",
            benchmark_compare,
            self.db,
            *self.pair,
            run=self.run,
            rule=self.summary.rule,
            alpha=self.alpha,
            seed=self.seed,
        )

    @cached_property
    def paired_accuracy(self):
        from engine.analysis.accuracy_ranks import paired_accuracy

        if self.pair is None:
            return None
        return self.attempt(
            "paired comparison",
            paired_accuracy,
            self.db,
            self.run,
            *self.pair,
            rule=self.summary.rule,
            alpha=self.alpha,
            seed=self.seed,
        )

    @cached_property
    def winrates(self):
        from engine.analysis.comparisons import judgment_sources
        from engine.analysis.winrates import winrates_view

        if not (judgment_sources(self.db)["run_id"] == self.run).any():
            return None
        return self.attempt(
            "win-rates of the judge verdicts",
            winrates_view,
            self.db,
            "judgments",
            self.run,
            seed=self.seed,
            alpha=self.alpha,
            elo=False,
        )

    @cached_property
    def multigen(self) -> dict[str, Any]:
        from engine.analysis.multigen import multigen

        if self.summary.n_repeats < 2:
            return {}
        out = {}
        for m in self.models[:4]:
            r = self.attempt(
                f"multiple generations of {m}",
                multigen,
                self.db,
                self.run,
                m,
                mode=self.mode,
                rule=self.summary.rule,
                seed=self.seed,
            )
            if r is not None:
                out[m] = r
        return out
