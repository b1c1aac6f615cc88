"""What the section builders of a run report share: the run, the options, and each analysis computed
once (lazily, by the engine's own functions: the report never recomputes a statistic)."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import PurePath
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
        include_host: bool = False,
        gate_margin: float | None = None,
    ):
        self.db, self.run, self.alpha, self.seed = db, run, parse_alpha(alpha), int(seed)
        self.gate_margin = gate_margin  # the release gate's margin M (report --gate-margin), or None
        # the commands name the database by its file name: a shared report names no folder
        self.db_label = PurePath(db_label or str(db)).name
        self.include_host = include_host
        self._models = list(models) if models else None
        self.notes: list[str] = []  # analyses the run could not give, one line each

    @cached_property
    def summary(self):
        from engine.analysis.summary import run_summary

        return run_summary(self.db, self.run)

    @cached_property
    def judges(self) -> list[str]:
        """The judges with verdicts on the run (the first one's win-rates and PPR rank-sets lead)."""
        from engine.analysis import run_units as U

        return U.run_judges(self.db, self.run)

    @cached_property
    def scored(self) -> bool:
        """Whether the run has scores to summarise. A run without (a chat run: no gold answers) that
        has judge verdicts is reported from them; any other run's one-line error propagates."""
        try:
            _ = self.summary
        except UserError:
            if not self.judges:
                raise
            return False
        return True

    @cached_property
    def design(self):
        from engine.analysis.run_design import run_design

        return run_design(self.db, self.run)

    @cached_property
    def models(self) -> list[str]:
        known = self.summary.models if self.scored else self.judged_models
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
        """The first judge's win-rates, Bradley-Terry and Elo (each with its interval), or None."""
        from engine.analysis.winrates import winrates_view

        if not self.judges:
            return None
        return self.attempt(
            f"win-rates of the verdicts of judge {self.judges[0]}",
            winrates_view,
            self.db,
            "judgments",
            self.run,
            judge=self.judges[0],
            seed=self.seed,
            alpha=self.alpha,
            elo=True,
        )

    @cached_property
    def judged_models(self) -> list[str]:
        """The models the first judge compared (a judged run's models)."""
        v = self.winrates
        return [] if v is None else list(v.results[v.groups[0]].models)

    @cached_property
    def run_ranksets(self):
        """The run's PPR / judge-only / human-only rank-sets and label planner for the first judge
        (:func:`engine.analysis.run_ranksets.run_ranksets`), or None."""
        from engine.analysis.run_ranksets import run_ranksets

        if not self.judges:
            return None
        return self.attempt(
            f"PPR rank-sets (judge {self.judges[0]})",
            run_ranksets,
            self.db,
            self.run,
            self.judges[0],
            alpha=self.alpha,
            seed=self.seed,
        )

    @cached_property
    def label_count(self) -> int:
        """Human labels of the run (every source the audit reads)."""
        from engine.analysis import run_units as U

        return U.label_count(self.db, self.run)

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
