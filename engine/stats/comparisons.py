"""Statistics layer of pairwise comparisons: pure functions of numbers, no I/O.

Pairwise comparison data as ONE type, shared by :mod:`engine.stats.ranking` (indicator form),
:mod:`engine.stats.winrates` and :mod:`engine.stats.clustered` (outcome-code form).

Comparison ``i`` is between model ``first[i]`` and model ``second[i]`` (indices into ``models``);
its human and judge outcomes are codes ``A_WINS`` (first preferred) = 0, ``B_WINS`` = 1, ``TIE`` = 2,
or ``NO_LABEL`` = -1; ``cluster[i]`` is its prompt (the cluster of docs/METHODS.md section 7.2),
None for "every row its own cluster"; ``extra`` carries the rows' optional provenance columns
(repeat, mode, labeller, labelled_at, presented) when the source had them (the repeat is never the
cluster: a prompt's repeats share its effect). Pure: numpy only, nothing else from the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from engine.errors import UserError

A_WINS, B_WINS, TIE, NO_LABEL = 0, 1, 2, -1
_CODE = {"a": A_WINS, "b": B_WINS, "tie": TIE}
Who = Literal["human", "judge"]


def outcome_codes(labels: Sequence | np.ndarray) -> np.ndarray:
    """'a' / 'b' / 'tie' / None (or NaN) -> (n,) int8 codes A_WINS / B_WINS / TIE / NO_LABEL."""
    v = np.asarray(labels, dtype=object)
    out = np.full(v.shape, NO_LABEL, dtype=np.int8)
    for label, code in _CODE.items():
        out[v == label] = code
    return out


@dataclass(frozen=True, eq=False)
class Comparisons:
    """n pairwise comparisons of k models with human and/or judge outcomes and prompt clusters.

    Attributes:
        models: (k,) names; first, second: (n,) int64 indices, first != second;
        human, judge: (n,) int8 outcome codes (NO_LABEL where a row has no such label);
        cluster: (n,) prompt ids (object) or None (each row its own cluster);
        extra: optional (n,) object columns by name (repeat, mode, labeller, labelled_at, presented).
    """

    models: tuple[str, ...]
    first: np.ndarray
    second: np.ndarray
    human: np.ndarray
    judge: np.ndarray
    cluster: np.ndarray | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n, k = self.first.shape[0], len(self.models)
        shapes = [
            a.shape for a in (self.first, self.second, self.human, self.judge, *self.extra.values())
        ]
        if self.cluster is not None:
            shapes.append(self.cluster.shape)
        if any(s != (n,) for s in shapes):
            raise UserError(f"comparison arrays must all have shape ({n},); got {shapes}")
        if n and (
            min(self.first.min(), self.second.min()) < 0 or max(self.first.max(), self.second.max()) >= k
        ):
            raise UserError(f"model indices must be in [0, {k})")
        if np.any(self.first == self.second):
            raise UserError("a comparison must involve two different models (model_a == model_b found)")
        for name, v in (("human", self.human), ("judge", self.judge)):
            if np.any((v < NO_LABEL) | (v > TIE)):
                raise UserError(
                    f"{name} outcome codes must be -1 (none), 0 (a wins), 1 (b wins) or 2 (tie)"
                )

    @classmethod
    def from_labels(
        cls,
        models: Sequence[str],
        model_a: Sequence[str],
        model_b: Sequence[str],
        human: Sequence | None = None,
        judge: Sequence | None = None,
        cluster: Sequence | None = None,
        extra: dict[str, Sequence] | None = None,
    ) -> Comparisons:
        """From model names and 'a' / 'b' / 'tie' / None labels (the normalised table's columns);
        a cluster column of only None/NaN means no clusters; ``extra``: optional columns by name."""
        pos = {m: i for i, m in enumerate(models)}
        missing = sorted({m for m in (*model_a, *model_b) if m not in pos})
        if missing:
            raise UserError(f"model(s) {missing} are not in the model list {list(models)}")
        n = len(model_a)
        none = [None] * n
        cl = None
        if cluster is not None:
            c = np.asarray(cluster, dtype=object)
            known = np.array([x is not None and x == x for x in c], dtype=bool)  # x == x: not NaN
            cl = c if known.any() else None
        return cls(
            tuple(models),
            np.fromiter((pos[m] for m in model_a), np.int64, n),
            np.fromiter((pos[m] for m in model_b), np.int64, n),
            outcome_codes(none if human is None else human),
            outcome_codes(none if judge is None else judge),
            cl,
            {c: np.asarray(v, dtype=object) for c, v in (extra or {}).items()},
        )

    @property
    def k(self) -> int:
        return len(self.models)

    def __len__(self) -> int:
        return int(self.first.shape[0])

    def codes(self, who: Who) -> np.ndarray:
        if who not in ("human", "judge"):
            raise UserError(f"unknown label source {who!r}; allowed: 'human', 'judge'")
        return self.human if who == "human" else self.judge

    def labelled(self, who: Who) -> np.ndarray:
        """(n,) bool: rows with a ``who`` label."""
        return self.codes(who) != NO_LABEL

    def subset(self, rows: np.ndarray) -> Comparisons:
        """The comparisons at ``rows`` (a boolean mask or indices), same models."""
        return Comparisons(
            self.models,
            self.first[rows],
            self.second[rows],
            self.human[rows],
            self.judge[rows],
            None if self.cluster is None else self.cluster[rows],
            {c: v[rows] for c, v in self.extra.items()},
        )

    def outcomes(self, who: Who) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(a, b, outcome) of the rows labelled by ``who``: the stats.winrates / stats.clustered form."""
        m = self.labelled(who)
        return self.first[m], self.second[m], self.codes(who)[m].astype(np.int64)

    def indicators(self, who: Who) -> tuple[np.ndarray, np.ndarray]:
        """(w, w2) float (n,) over ALL rows: w = 1 where first won, w2 = 1 where second won (a tie or
        no label: both 0), the stats.ranking form (Algorithm 3's w, w')."""
        c = self.codes(who)
        return (c == A_WINS).astype(float), (c == B_WINS).astype(float)

    def clusters(self, who: Who | None = None) -> np.ndarray | None:
        """The prompt ids of all rows (or of the rows labelled by ``who``); None without clusters."""
        if self.cluster is None:
            return None
        return self.cluster if who is None else self.cluster[self.labelled(who)]


__all__ = ["A_WINS", "B_WINS", "TIE", "NO_LABEL", "Comparisons", "outcome_codes"]
