"""Analysis layer of per-category win-rates: comparisons -> engine.stats -> a frozen result.

One pair's win-rate difference per category of a comparison set, each interval holding for all
categories at once (max-t over slices, engine/stats/slices.py; docs/METHODS.md 7.2 and 7.3), with
Benjamini-Hochberg adjusted p-values: ``engine winrates --by category``, the Win-rates page's "By
category" tab and the set report's per-category section.

The quantity, for the pair (A, B) in the user's order, on the rows that compare A with B (either listed
first) and carry the chosen label, per category s:

    Δ_s = W_AB − W_BA = (#{A preferred} − #{B preferred}) / #{A vs B comparisons}

the strict win-rate of A against B minus that of B against A, exactly the two entries the win-rate
matrix reports for the pair (a tie is a non-win for both, never half: it adds 0 to the difference and 1
to the denominator). Per row d = +1 (A preferred), −1 (B preferred), 0 (tie), so Δ_s is the row-pooled
mean of d; its interval treats prompts as clusters (every row of a prompt in one cluster; rows without a
prompt id each their own), the cluster-robust SE of that ratio with the Agresti-Min pseudo-clusters
(:func:`engine.stats.slices.slice_differences` with ``weights``). A prompt must sit in one category.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

import numpy as np
import pandas as pd

from engine.analysis.comparisons import clustering_note, json_float
from engine.analysis.notices import AnalysisWarning, Notice, plural
from engine.analysis.result_base import ToDict
from engine.config import RANK_LABELS
from engine.errors import UserError
from engine.stats import slices as SL

BY = ("category",)
NO_CATEGORY = "(none)"  # the slice of rows whose category is blank, in a set where others have one
ESTIMATOR = (
    "W_AB − W_BA per category: A's strict win-rate against B minus B's against A on the comparisons "
    "of the two (a tie is a non-win for both); intervals clustered by prompt, Agresti-Min adjusted, "
    "max-t over the categories (simultaneous)"
)


@dataclass(frozen=True)
class WinRateSlice(ToDict):
    """One category: the pair's comparisons in it, W_AB, W_BA, their difference with its simultaneous
    interval, and p-values."""

    slice: str
    n: int  # comparisons of A and B with a label
    n_prompts: int  # their clusters (prompts; rows when there are no prompt ids)
    winrate_a: float | None  # W_AB: A preferred, over the comparisons
    winrate_b: float | None  # W_BA
    difference: float | None  # W_AB − W_BA
    lower: float | None
    upper: float | None
    p_value: float | None
    p_adjusted: float | None  # Benjamini-Hochberg over the categories
    p_maxt: float | None  # family-wise (the intervals' rule)


@dataclass(frozen=True)
class WinRateSlices(ToDict):
    """``engine winrates --by category --json``: ``slices`` (one record per category: slice, n,
    difference, lower, upper, p_adjusted, ...) and the whole source's difference beside them."""

    source: str
    models: tuple[str, str]  # (A, B): every difference is W_AB − W_BA
    by: str
    label: str  # whose labels: human | judge
    alpha: float
    estimator: str
    n: int  # comparisons of A and B with a label, all categories
    n_clusters: int
    per_row_clusters: bool  # no prompt ids: each row its own cluster
    clustering: str  # the one line every clustered result carries
    critical_value: float  # c of the simultaneous intervals (the max-|t| quantile over categories)
    overall: dict  # winrate_a, winrate_b, difference, lower, upper, p_value: every category pooled
    slices: list[WinRateSlice]
    warnings: list[AnalysisWarning]

    def frame(self) -> pd.DataFrame:
        """One row per category (the order of ``slices``)."""
        cols = ["slice", "n", "n_prompts", "winrate_a", "winrate_b", "difference", "lower", "upper"]
        cols += ["p_value", "p_adjusted", "p_maxt"]
        return pd.DataFrame([s.to_dict() for s in self.slices], columns=cols)

    @property
    def pair_label(self) -> str:
        """What the difference is, in words a figure's axis can carry."""
        a, b = self.models
        return f"W({a} > {b}) − W({b} > {a})"


def _no_categories(source: str, set_name: str | None) -> UserError:
    """The one line for a source without categories: what is missing and how to add it."""
    if set_name is not None:
        q = shlex.quote(set_name)
        how = (
            f"export it (python -m engine comparisons export {q} --out set.csv), add a 'category' "
            "column (one category per prompt_id), and import it again (python -m engine import "
            f"comparisons set.csv --name {q} --replace)"
        )
    else:
        how = (
            "add a 'category' column to the CSV (one category per prompt_id), or a \"category\" field to "
            "each line of Arena JSON lines"
        )
    return UserError(
        f"{source} has no categories (no row has a 'category' value), so --by category has no "
        f"slices; {how}"
    )


def pick_pair(
    df: pd.DataFrame, model_a: str | None, model_b: str | None, models: list[str] | None = None
) -> tuple[str, str]:
    """(A, B) in the user's order: ``model_a`` / ``model_b``; else the two of ``models`` (``--models``);
    else the source's two models in the order they first appear (A = the first row's model_a).

    Raises:
        UserError: half a pair, a model the comparisons do not have, the same model twice, or more than
        two models and no pair named.
    """
    present = list(dict.fromkeys(np.ravel(df[["model_a", "model_b"]].to_numpy(dtype=object))))
    if (model_a is None) != (model_b is None):
        raise UserError("give both --model-a and --model-b (the pair compared in each category)")
    if model_a is None and models is not None and len(models) == 2:
        model_a, model_b = models
    if model_a is None:
        if len(present) != 2:
            raise UserError(
                f"--by category compares one pair and the comparisons have {len(present)} models; pass "
                f"--model-a and --model-b (models: {', '.join(sorted(map(str, present)))})"
            )
        model_a, model_b = present
    assert model_b is not None  # both given, or both chosen above
    for m in (model_a, model_b):
        if m not in present:
            raise UserError(
                f"model {m!r} is in no comparison; models: {', '.join(sorted(map(str, present)))}"
            )
    if model_a == model_b:
        raise UserError(f"model A and model B must differ, both are {model_a!r}")
    return str(model_a), str(model_b)


def _pair_rows(df: pd.DataFrame, a: str, b: str, col: str) -> pd.DataFrame:
    """The labelled rows of A vs B: d (+1 A preferred, −1 B preferred, 0 tie), A's win, the cluster (the
    prompt id; a row without one is its own) and the category (blank: NO_CATEGORY)."""
    fwd = (df.model_a == a) & (df.model_b == b)
    rev = (df.model_a == b) & (df.model_b == a)
    keep = ((fwd | rev) & df[col].notna()).to_numpy()
    w = df[col].to_numpy(dtype=object)[keep]
    d = np.where(w == "tie", 0.0, np.where((w == "a") == fwd.to_numpy()[keep], 1.0, -1.0))
    prompt = (
        df["prompt_id"][keep] if "prompt_id" in df else pd.Series([None] * int(keep.sum()), dtype=object)
    )
    has = prompt.notna().to_numpy()
    own = pd.Series(np.arange(has.size)).astype(str).to_numpy(dtype=object)
    cluster = np.where(has, "p:" + prompt.astype(str).to_numpy(dtype=object), "row:" + own)
    cat = df["category"][keep].to_numpy(dtype=object)
    blank = pd.isna(cat) | (pd.Series(cat, dtype=object).astype(str).str.strip() == "").to_numpy()
    out = pd.DataFrame(
        {
            "cluster": cluster,
            "category": np.where(blank, NO_CATEGORY, cat.astype(str)),
            "d": d,
            "win_a": (d > 0).astype(float),
        }
    )
    out.attrs["per_row"] = not has.any()
    return out


def _clusters(rows: pd.DataFrame) -> pd.DataFrame:
    """Per cluster: its category, rows m, mean d and A's wins; UserError when a prompt sits in two
    categories."""
    g = rows.groupby("cluster", sort=False)
    cats = g["category"].nunique()
    if (cats > 1).any():
        bad = cats.index[cats > 1][0]
        seen = sorted(rows.loc[rows.cluster == bad, "category"].unique())
        raise UserError(
            f"prompt {bad[2:]!r} has rows in {len(seen)} categories ({', '.join(seen)}); a prompt is one "
            "cluster (docs/METHODS.md 7.2) and must sit in one category: fix its rows' category"
        )
    return pd.DataFrame(
        {"category": g["category"].first(), "m": g.size(), "d": g["d"].mean(), "a": g["win_a"].sum()}
    )


def winrate_slices_for(
    df: pd.DataFrame,
    source: str,
    model_a: str | None = None,
    model_b: str | None = None,
    label: str | None = None,
    by: str = "category",
    alpha: float = 0.05,
    models: list[str] | None = None,
    set_name: str | None = None,
) -> WinRateSlices:
    """W_AB − W_BA per category of the normalised comparisons ``df`` (module docstring), with
    simultaneous max-t intervals at family-wise level ``alpha`` and BH-adjusted p-values.

    Args:
        df: normalised comparisons (engine.analysis.comparisons) with a ``category`` column; source: how
        errors name it ("comparison set 'x'", a file); model_a, model_b, models: the pair
        (:func:`pick_pair`); label: human | judge (default: human when any row has one); alpha;
        set_name: the stored set ``df`` is (the refusal then says how to add categories to it).
    Raises:
        UserError: no category, an unknown ``by``, label or model, a prompt in two categories, fewer than
        two categories with a comparison of the pair.
    """
    from engine.analysis.winrates import default_label

    if by not in BY:
        raise UserError(f"--by must be one of {', '.join(BY)}; got {by!r}")
    if not 0 < alpha < 1:
        raise UserError(f"alpha must be in (0, 1); got {alpha}")
    cats = df["category"] if "category" in df else pd.Series([], dtype=object)
    if not (cats.notna() & (cats.astype(str).str.strip() != "")).any():
        raise _no_categories(source, set_name)
    label = label or default_label(df)
    if label not in RANK_LABELS:
        raise UserError(f"unknown label {label!r}; allowed: {', '.join(RANK_LABELS)}")
    a, b = pick_pair(df, model_a, model_b, models)
    rows = _pair_rows(df, a, b, f"{label}_winner")
    if rows.empty:
        raise UserError(f"{source}: no comparison of {a} and {b} has a {label} label")
    cl = _clusters(rows)
    names = sorted(cl["category"].unique())
    if len(names) < 2:
        raise UserError(
            f"{source}: the comparisons of {a} and {b} fall in {len(names)} category ({', '.join(names)}); "
            "slices need at least 2: compare the whole set without --by"
        )
    codes = pd.Index(names).get_indexer(cl["category"])
    d, m = cl["d"].to_numpy(float), cl["m"].to_numpy(float)
    out = SL.slice_differences(d, codes, len(names), alpha, weights=m)
    rows_s = np.bincount(codes, weights=m, minlength=len(names))
    wins_a = np.bincount(codes, weights=cl["a"].to_numpy(float), minlength=len(names))
    wa = wins_a / rows_s
    wb = wa - out["difference"]
    # the truth lies in [−1, 1]: clipping an interval to it keeps its coverage and drops impossible ends
    lo, hi = np.clip(out["lower"], -1.0, 1.0), np.clip(out["upper"], -1.0, 1.0)
    slices = [
        WinRateSlice(
            str(s),
            int(rows_s[i]),
            int(out["n"][i]),
            *(json_float(x[i]) for x in (wa, wb)),
            *(json_float(x[i]) for x in (out["difference"], lo, hi)),
            *(json_float(out[k][i]) for k in ("p_value", "p_adjusted", "p_maxt")),
        )
        for i, s in enumerate(names)
    ]
    whole = SL.slice_differences(d, np.zeros(d.size, np.int64), 1, alpha, weights=m)
    wa_all = float(cl["a"].sum() / m.sum())
    overall = {
        "winrate_a": wa_all,
        "winrate_b": wa_all - float(whole["difference"][0]),
        "difference": json_float(whole["difference"][0]),
        "lower": json_float(max(-1.0, whole["lower"][0])),
        "upper": json_float(min(1.0, whole["upper"][0])),
        "p_value": json_float(whole["p_value"][0]),
    }
    return WinRateSlices(
        source,
        (a, b),
        by,
        label,
        float(alpha),
        ESTIMATOR,
        int(m.sum()),
        int(d.size),
        bool(rows.attrs["per_row"]),
        clustering_note(int(d.size), bool(rows.attrs["per_row"]), int(m.sum())),
        float(out["c"]),
        overall,
        slices,
        _warnings(df, slices, a, b),
    )


def _warnings(df: pd.DataFrame, slices: list[WinRateSlice], a: str, b: str) -> list[AnalysisWarning]:
    """Few prompts in a category; categories without a labelled comparison of the pair."""
    warn = []
    few = [s.slice for s in slices if s.n_prompts < 10]
    if few:
        warn.append(
            AnalysisWarning(
                Notice.SMALL_SAMPLE,
                f"{plural(len(few), 'category', 'categories')} with fewer than 10 prompts of {a} vs {b} "
                f"({', '.join(few[:5])}{', ...' if len(few) > 5 else ''}): their intervals are wide and "
                "approximate",
            )
        )
    shown = {s.slice for s in slices}
    all_cats = {str(c) for c in df["category"].dropna().unique() if str(c)}
    missing = sorted(all_cats - shown)
    if missing:
        warn.append(
            AnalysisWarning(
                Notice.ABSENT_MODEL,
                f"{plural(len(missing), 'category', 'categories')} without a labelled comparison of {a} "
                f"and {b} ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}): not shown",
            )
        )
    return warn


def set_categories(db: str | os.PathLike, name: str) -> list[str]:
    """The categories of stored set ``name``, sorted ([] when it has none)."""
    from engine.store.comparisons import set_categories as _stored

    return _stored(db, name)


def winrate_slices(
    db: str | os.PathLike,
    name: str,
    model_a: str | None = None,
    model_b: str | None = None,
    label: str | None = None,
    alpha: float = 0.05,
) -> WinRateSlices:
    """:func:`winrate_slices_for` of stored comparison set ``name`` (the page's and the report's call)."""
    from engine.store.comparisons import read_set

    return winrate_slices_for(
        read_set(db, name),
        f"comparison set {name!r}",
        model_a,
        model_b,
        label,
        alpha=alpha,
        set_name=name,
    )
