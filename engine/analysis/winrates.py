"""Analysis layer of win-rates: stored data -> engine.stats -> a frozen result.

Win-rates: pairwise and average win-rates, Bradley-Terry (Davidson ties) and Elo, every interval a
prompt-cluster bootstrap; rank columns from rank-sets; two groups (coupled vs independent, or two sets)
compared per pair by a t test paired by prompt with Westfall-Young max-T adjusted stars; position bias
when both presentation orders were judged.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 5 and
Table 1, with the clustering and multiplicity rules of docs/METHODS.md 7.2 (the paper's Wilson intervals
and two-proportion z tests treat rows as independent; they are not used here).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd

from engine.analysis.comparisons import (
    cluster_ids,
    clustering_note,
    comparison_groups,
    comparisons_for,
    connectivity_warning,
    json_float,
    model_indices,
    model_list,
    ranking_comparisons,
    restrict_models,
)
from engine.analysis.notices import AnalysisWarning, Notice, small_sample_warning
from engine.analysis.stats_records import PositionBias
from engine.analysis.winrates_result import (
    AverageWinRate,
    BradleyTerry,
    Elo,
    PairDiff,
    VerdictCount,
    WinRates,
    WinRatesView,
)
from engine.config import MODES
from engine.config import RANK_LABELS as LABELS
from engine.errors import UserError
from engine.stats import clustered as CL
from engine.stats import ranking as RK
from engine.stats import winrates as WR
from engine.store.verdicts import judgment_frame

DEFAULT_RESAMPLES = CL.DEFAULT_RESAMPLES  # 1000


def _outcome_codes(winners: pd.Series) -> np.ndarray:
    v = winners.to_numpy(dtype=object)
    return np.where(v == "a", WR.A_WINS, np.where(v == "b", WR.B_WINS, WR.TIE)).astype(np.int64)


def _draws_cov(draws: np.ndarray) -> np.ndarray:
    """Covariance (k, k) of bootstrap draws (B, k), resamples with a NaN (a model that lost every
    opponent in that resample) left out."""
    ok = ~np.isnan(draws).any(axis=1)
    return np.cov(draws[ok], rowvar=False)


def _rank_sets(theta: np.ndarray, draws: np.ndarray, alpha: float, procedure: str, seed: int) -> dict:
    """Rank-sets of ``theta`` with the cluster-bootstrap covariance of its draws (docs/METHODS.md
    7.3)."""
    sigma = _draws_cov(draws)
    if np.isnan(theta).any() or not np.isfinite(sigma).all():
        k = theta.size
        return {"lower": np.ones(k, int), "upper": np.full(k, k), "procedure": procedure}
    return RK.rank_sets(theta, sigma, alpha, procedure=procedure, rng=np.random.default_rng([seed, 7]))


def _position_bias(d: pd.DataFrame, col: str, cluster) -> PositionBias | None:
    """Position bias from rows that carry ``unit`` and ``presented`` ('ab' | 'ba'), when some
    judgement was shown in both orders; None otherwise."""
    if "unit" not in d or "presented" not in d:
        return None
    units = d["unit"].to_numpy(dtype=object)
    if pd.Series(units).value_counts().max() < 2:
        return None
    ab = d["presented"].to_numpy(dtype=object) == "ab"
    ma, mb = d.model_a.to_numpy(dtype=object), d.model_b.to_numpy(dtype=object)
    names = sorted(set(ma) | set(mb))
    pos = {m: i for i, m in enumerate(names)}
    first = np.array([pos[x] for x in np.where(ab, ma, mb)], np.int64)
    second = np.array([pos[x] for x in np.where(ab, mb, ma)], np.int64)
    out = _outcome_codes(d[col])  # in model_a / model_b terms -> shown-order terms
    shown = np.where(out == WR.TIE, WR.TIE, np.where((out == WR.A_WINS) == ab, WR.A_WINS, WR.B_WINS))
    res = CL.position_bias(first, second, shown, units, cluster=cluster)
    return PositionBias.of({k: (json_float(v) if isinstance(v, float) else v) for k, v in res.items()})


_BOOT_CACHE: OrderedDict[str, list] = OrderedDict()


def _bootstraps(a, b, out, k: int, cluster, seed: int, reps: int, elo: bool) -> tuple:
    """The three cluster bootstraps (win-rates, Davidson, Elo), each from its own generator seeded
    by (seed, 0 | 1 | 2); memoised per process on the data's hash, so a page that only changes alpha
    or the rank-set procedure, or turns Elo on, does not redo what it already has."""
    h = hashlib.sha1()
    codes = CL.cluster_codes(cluster, len(a))
    for x in (a, b, out, codes[0]):
        h.update(np.ascontiguousarray(x, dtype=np.int64).tobytes())
    h.update(repr((k, codes[2], seed, reps)).encode())
    key = h.hexdigest()
    hit = _BOOT_CACHE.get(key)
    if hit is None:
        wr = CL.winrate_cluster_bootstrap(
            a, b, out, k, np.random.default_rng([seed, 0]), cluster=cluster, n_resamples=reps
        )
        bt = CL.davidson_cluster_bootstrap(
            a, b, out, k, np.random.default_rng([seed, 1]), cluster=cluster, n_resamples=reps
        )
        hit = [wr, bt, None]
    if elo and hit[2] is None:
        hit[2] = CL.elo_cluster_bootstrap(
            a, b, out, k, np.random.default_rng([seed, 2]), cluster=cluster, n_resamples=reps
        )
    _BOOT_CACHE[key] = hit
    _BOOT_CACHE.move_to_end(key)
    while len(_BOOT_CACHE) > 8:
        _BOOT_CACHE.popitem(last=False)
    return hit[0], hit[1], hit[2] if elo else None


def _prepare(
    df: pd.DataFrame,
    label: str,
    reps: int,
    alpha: float,
    procedure: str,
    models: list[str] | None,
    compare: pd.DataFrame | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, list[str], str]:
    """Checked arguments: the labelled rows, the comparison group's labelled rows, the models, the label
    column."""
    if label not in LABELS:
        raise UserError(f"unknown label {label!r}; allowed: {', '.join(LABELS)}")
    if reps < 1:
        raise UserError(f"bootstrap resamples must be >= 1; got {reps}")
    RK.check_alpha(alpha)
    if procedure not in RK.PROCEDURES:
        raise UserError(f"unknown rank-set procedure {procedure!r}; allowed: {', '.join(RK.PROCEDURES)}")
    col = f"{label}_winner"
    rows = df[col].notna()
    if not rows.any():
        other = next(x for x in LABELS if x != label)
        hint = (
            f"; they have {other} labels only: use those (--label {other})"
            if df[f"{other}_winner"].notna().any()
            else ""
        )
        raise UserError(f"no comparison has a {label} label{hint}")
    d = restrict_models(df[rows].reset_index(drop=True), models)
    if compare is not None:
        compare = compare[compare[col].notna()]
        if compare.empty:
            raise UserError(f"the comparisons to compare with have no {label} labels")
        if models:
            compare = compare[compare.model_a.isin(set(models)) & compare.model_b.isin(set(models))]
        unknown = sorted((set(compare.model_a) | set(compare.model_b)) - set(model_list(d, models)))
        if models and unknown:
            raise UserError(f"model(s) {unknown} of the comparison file are not in --models")
    return d, compare, model_list(d if compare is None else pd.concat([d, compare]), models), col


def _warnings(
    a: np.ndarray, b: np.ndarray, models: list[str], label: str, wr: dict
) -> list[AnalysisWarning]:
    """Connectivity, absent models, small sample and degenerate-bootstrap warnings (typed)."""
    k = len(models)
    conn = connectivity_warning(comparison_groups(a, b, models))
    warn = [AnalysisWarning(Notice.CONNECTIVITY, conn)] if conn else []
    absent = [
        m for m, c in zip(models, np.bincount(a, minlength=k) + np.bincount(b, minlength=k)) if c == 0
    ]
    if absent:
        warn.append(
            AnalysisWarning(
                Notice.ABSENT_MODEL,
                f"model(s) {absent} have no {label}-labelled comparison in this group",
            )
        )
    small = small_sample_warning(int(wr["n_clusters"]), "rows" if wr["per_row_clusters"] else "prompts")
    if small:
        warn.append(small)
    deg = int(np.sum(wr["W_fallback"]))
    if deg:
        warn.append(
            AnalysisWarning(
                Notice.DEGENERATE,
                f"{deg} pairwise win-rate(s) have a zero-variance bootstrap "
                "(e.g. 0 wins): their interval is the Wilson interval with one observation per "
                "prompt",
            )
        )
    return warn


def _elo(el: dict | None, models: list[str], boot: str) -> Elo | None:
    if el is None:
        return None
    return Elo(
        K=4.0,
        rating={m: float(x) for m, x in zip(models, el["elo"])},
        online_rating={m: float(x) for m, x in zip(models, el["online"])},
        ci={m: [json_float(x), json_float(y)] for m, x, y in zip(models, el["low"], el["high"])},
        estimator=el["estimator"],
        ci_method=boot + "; rating = the Elo-scale maximum likelihood (the fixed point of online Elo's "
        "expected update); online_rating = online Elo (K = 4, rows in file order), shown "
        "without an interval: its recency term is not covered by a prompt bootstrap",
    )


def _bradley_terry(bt: dict, bt_rs: dict, models: list[str], boot: str) -> BradleyTerry:
    return BradleyTerry(
        model="davidson (ties)",
        beta={m: float(x) for m, x in zip(models, bt["beta"])},
        nu=float(bt["nu"]),
        ci={
            m: [json_float(x), json_float(y)] for m, x, y in zip(models, bt["beta_low"], bt["beta_high"])
        },
        rank={m: int(x) for m, x in zip(models, RK.rank_column(bt_rs["lower"]))},
        rank_set={m: [int(bt_rs["lower"][i]), int(bt_rs["upper"][i])] for i, m in enumerate(models)},
        ci_method=boot,
    )


def default_label(df: pd.DataFrame) -> str:
    """The label a win-rate analysis uses when none is asked for: human when any row has one, else the
    judge's (a set of judge verdicts has no human label)."""
    return (
        "human" if df["human_winner"].notna().any() or not df["judge_winner"].notna().any() else "judge"
    )


def winrates_for(
    df: pd.DataFrame,
    label: str = "human",
    seed: int = 0,
    reps: int = DEFAULT_RESAMPLES,
    models: list[str] | None = None,
    compare: pd.DataFrame | None = None,
    alpha: float = 0.05,
    procedure: str = "maxt",
    group: str = "this",
    compare_group: str = "other",
    elo: bool = True,
) -> WinRates:
    """Win-rates of one group of comparisons (``to_dict()`` = the ``winrates`` CLI JSON), every
    interval a prompt-cluster bootstrap (docs/METHODS.md 7.2).

    W_ij = #{i beat j}/#{i vs j} (ties: a non-win for both); avg_i = mean_j W_ij; Davidson BT β; Elo (the
    Elo-scale maximum likelihood); expanded percentile CIs (docs/INTERVALS.md) from ``reps`` resamples of
    prompts (seeded); rank = lower end of the rank-set (``procedure``, covariance = the bootstrap
    covariance of the average win-rates). With ``compare`` (a second group of comparisons on the same
    prompts, e.g. the independent generations' verdicts): per pair, group − compare_group win-rate by a t
    test paired by prompt, Westfall-Young max-T adjusted over the pairs (stars from it; Holm also
    reported). Rows with ``unit`` / ``presented`` columns (judge verdicts in both orders) add position
    bias. ``elo`` False leaves Elo out (its bootstrap is the slowest part: one pass over the rows).
    """
    d, compare, models, col = _prepare(df, label, reps, alpha, procedure, models, compare)
    k = len(models)
    if k < 2:
        raise UserError(f"need at least two models; found {models}")
    a, b = model_indices(d, models)
    out = _outcome_codes(d[col])
    cluster = cluster_ids(d)
    wr, bt, el = _bootstraps(a, b, out, k, cluster, seed, reps, elo)
    warn = _warnings(a, b, models, label, wr)
    avg_rs = _rank_sets(wr["avg"], wr["avg_draws"], alpha, procedure, seed)
    bt_rs = _rank_sets(bt["beta"], bt["draws"], alpha, procedure, seed)
    W, T, n = wr["W"], wr["T"], wr["n"]
    note = clustering_note(wr["n_clusters"], wr["per_row_clusters"], len(d))
    boot = f"prompt-cluster expanded percentile bootstrap, {reps} resamples, seed {seed}, 95%"
    if wr["per_row_clusters"]:
        boot = f"expanded percentile bootstrap over rows (no prompt ids), {reps} resamples, seed {seed}, 95%"

    def mat(M: Any, cast: Any = json_float) -> dict[str, dict[str, Any]]:
        return {
            m: {m2: cast(M[i, j]) for j, m2 in enumerate(models) if j != i} for i, m in enumerate(models)
        }

    cmp_: dict[str, dict[str, PairDiff]] | None = None
    cmp_test: str | None = None
    if compare is not None:
        cmp_, cmp_test = _compare(d, compare, col, models, group, compare_group, seed, reps)
        if cmp_ is None:
            warn.append(AnalysisWarning(Notice.NOT_TESTED, cmp_test))
    return WinRates(
        models=models,
        label=label,
        group=group,
        n=int(len(d)),
        n_clusters=int(wr["n_clusters"]),
        per_row_clusters=bool(wr["per_row_clusters"]),
        clustering=note,
        matrix=mat(W),
        ties=mat(T),
        counts=mat(n, int),
        ci={
            m: {
                m2: [json_float(wr["W_low"][i, j]), json_float(wr["W_high"][i, j])]
                for j, m2 in enumerate(models)
                if j != i
            }
            for i, m in enumerate(models)
        },
        ci_method=boot,
        average={
            m: AverageWinRate(
                winrate=json_float(wr["avg"][i]),
                ci=[json_float(wr["avg_low"][i]), json_float(wr["avg_high"][i])],
                rank=int(RK.rank_column(avg_rs["lower"])[i]),
                rank_set=[int(avg_rs["lower"][i]), int(avg_rs["upper"][i])],
            )
            for i, m in enumerate(models)
        },
        average_ci_method=boot,
        rank_method=f"rank = lower end of the {procedure} rank-set at alpha {alpha} (1 + models "
        "significantly better), covariance = cluster-bootstrap covariance of the "
        "estimates; tied models share a rank",
        procedure=procedure,
        alpha=alpha,
        tie_rate=json_float(np.mean(out == WR.TIE)),
        bradley_terry=_bradley_terry(bt, bt_rs, models, boot),
        elo=_elo(el, models, boot),
        position_bias=_position_bias(d, col, cluster),
        warnings=warn,
        compare=cmp_,
        compare_test=cmp_test,
    )


def _compare(
    d: pd.DataFrame,
    c: pd.DataFrame,
    col: str,
    models: list[str],
    group: str,
    other: str,
    seed: int = 0,
    reps: int = DEFAULT_RESAMPLES,
) -> tuple[dict[str, dict[str, PairDiff]] | None, str]:
    """Per ordered pair: group − other win-rate, t test paired by prompt, Westfall–Young max-T over the
    pairs."""
    if cluster_ids(d) is None or cluster_ids(c) is None:
        return None, (
            f"{group} vs {other}: not tested, the comparisons carry no prompt ids and the test is "
            "paired by prompt (an unpaired test would be invalid when the prompts are shared)"
        )
    both = pd.concat([d, c], ignore_index=True)
    a, b = model_indices(both, models)
    mode = np.r_[np.zeros(len(d), np.int64), np.ones(len(c), np.int64)]
    t = CL.mode_diff_paired_test(
        a,
        b,
        _outcome_codes(both[col]),
        mode,
        both["prompt_id"].to_numpy(object),
        len(models),
        rng=np.random.default_rng([seed, 4]),
        n_resamples=reps,
    )
    ca, cb = model_indices(c, models)
    W2, _, _ = WR.winrate_matrix(ca, cb, _outcome_codes(c[col]), len(models))
    da, db = model_indices(d, models)
    W1, _, _ = WR.winrate_matrix(da, db, _outcome_codes(d[col]), len(models))
    stars = WR.significance_stars(np.where(np.isnan(t["p_maxt"]), 1.0, t["p_maxt"]))
    out = {
        m: {
            m2: PairDiff(
                winrate=json_float(W1[i, j]),
                winrate_other=json_float(W2[i, j]),
                diff=json_float(t["diff"][i, j]),
                ci=[json_float(t["low"][i, j]), json_float(t["high"][i, j])],
                t=json_float(t["t"][i, j]),
                p=json_float(t["p_value"][i, j]),
                p_holm=json_float(t["p_holm"][i, j]),
                p_maxt=json_float(t["p_maxt"][i, j]),
                stars=str(stars[i, j]),
                n_prompts=int(t["n_prompts"][i, j]),
            )
            for j, m2 in enumerate(models)
            if j != i
        }
        for i, m in enumerate(models)
    }
    text = (
        f"{group} − {other} win-rate per ordered pair: t test paired by prompt (per prompt, the "
        f"difference of the two win fractions; {t['n_clusters']:,} prompts), two-sided; stars from the "
        f"Westfall-Young step-down max-T adjusted p over the {len(models) * (len(models) - 1)} ordered "
        f"pairs ({reps} prompt-cluster bootstrap resamples, seeded): **** p<1e-4, *** <1e-3, ** <1e-2, "
        "* <0.05 (raw p, max-T p and Holm p reported)"
    )
    return out, text


# ----------------------------------------------------------------------------- the dashboard's view


def _table(results: dict[str, WinRates]) -> pd.DataFrame:
    first = next(iter(results.values()))
    rows = []
    for m in first.models:
        row: dict = {"model": m}
        for g, res in results.items():
            a = res.average[m]
            row[f"{g}_rank"] = a.rank
            row[f"{g}_rank_set"] = f"{a.rank_set[0]}–{a.rank_set[1]}"
            row[f"{g}_winrate"] = a.winrate
            row[f"{g}_ci_low"], row[f"{g}_ci_high"] = a.ci
        rows.append(row)
    g0 = next(iter(results))
    return (
        pd.DataFrame(rows)
        .sort_values([f"{g0}_rank", f"{g0}_winrate"], ascending=[True, False], na_position="last")
        .reset_index(drop=True)
    )


def _pairs(results: dict[str, WinRates]) -> pd.DataFrame:
    first = next(iter(results.values()))
    rows = []
    for m in first.models:
        for m2 in first.models:
            if m2 == m:
                continue
            row: dict = {"pair": f"{m} > {m2}", "model": m, "opponent": m2}
            for g, res in results.items():
                row[g] = res.matrix[m][m2]
                row[f"{g}_low"], row[f"{g}_high"] = res.ci[m][m2]
                row[f"{g}_n"] = res.counts[m][m2]
            if first.compare:
                v = first.compare[m][m2]
                row.update(
                    {
                        "diff": v.diff,
                        "diff_low": v.ci[0],
                        "diff_high": v.ci[1],
                        "p": v.p,
                        "p_holm": v.p_holm,
                        "p_maxt": v.p_maxt,
                        "stars": v.stars,
                        "n_prompts": v.n_prompts,
                    }
                )
            rows.append(row)
    return pd.DataFrame(rows)


def _ratings(res: WinRates) -> pd.DataFrame:
    bt, elo = res.bradley_terry, res.elo
    rows = []
    for m in res.models:
        row: dict[str, Any] = {
            "model": m,
            "bt_rank": bt.rank[m],
            "bt_rank_set": f"{bt.rank_set[m][0]}–{bt.rank_set[m][1]}",
            "bt_beta": bt.beta[m],
            "bt_low": bt.ci[m][0],
            "bt_high": bt.ci[m][1],
        }
        if elo is not None:
            row.update({"elo": elo.rating[m], "elo_low": elo.ci[m][0], "elo_high": elo.ci[m][1]})
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["bt_rank", "bt_beta"], ascending=[True, False])


def _judgment_groups(
    db: str | os.PathLike, name: str, judge: str | None, **kw: Any
) -> tuple[dict[str, WinRates], str, dict[str, VerdictCount]]:
    """Per generation mode present, the win-rates of a run's judge verdicts (the coupled group compared
    with the independent one when both are present), and the verdict counts (UNPARSEABLE warning)."""
    dfs = {m: judgment_frame(db, name, m, judge) for m in MODES}
    dfs = {m: d for m, d in dfs.items() if not d.empty and d["judge_winner"].notna().any()}
    if not dfs:
        raise UserError(
            f"run {name!r} has no parsed judge verdicts" + (f" by {judge!r}" if judge else "")
        )
    models = sorted(set().union(*[set(d.model_a) | set(d.model_b) for d in dfs.values()]))
    both = len(dfs) == 2
    verdicts = {
        m: VerdictCount(total=int(len(d)), unparseable=int(d["judge_winner"].isna().sum()))
        for m, d in dfs.items()
    }
    out: dict[str, WinRates] = {}
    for m, d in dfs.items():
        cmp_ = dfs["independent"] if both and m == "coupled" else None
        res = winrates_for(
            d, label="judge", models=models, compare=cmp_, group=m, compare_group="independent", **kw
        )
        v = verdicts[m]
        if v.unparseable:
            res = dataclasses.replace(
                res,
                warnings=[
                    *res.warnings,
                    AnalysisWarning(
                        Notice.UNPARSEABLE,
                        f"{v.unparseable} of {v.total} verdicts unparseable (left out of "
                        "every number here)",
                    ),
                ],
            )
        out[m] = res
    note = (
        f"LLM-judge verdicts of run {name}"
        + (f" by {judge}" if judge else "")
        + f" · generation modes: {', '.join(dfs)}"
    )
    return out, note, verdicts


def _set_groups(
    db: str | os.PathLike, source: str, name: str, label: str, compare_name: str | None, **kw: Any
) -> tuple[dict[str, WinRates], str]:
    """A stored set or the Arena files as one group (named after the source), with ``compare_name``
    (another stored set on the same prompts) a second group compared per pair."""
    d = comparisons_for(db, "set", name) if source == "set" else ranking_comparisons(db, "arena", name)
    if d.empty:
        raise UserError(f"comparison set {name!r} is empty or unknown")
    g = name if source == "set" else f"arena ({label})"
    note = (
        f"stored set {name}" if source == "set" else f"Chatbot Arena files, judge {name}"
    ) + f" · {label} labels (uploaded preferences: no generation mode is implied)"
    if not compare_name:
        return {g: winrates_for(d, label=label, group=g, **kw)}, note
    c = comparisons_for(db, "set", compare_name)
    if c.empty:
        raise UserError(f"comparison set {compare_name!r} is empty or unknown")
    models = sorted(set(d.model_a) | set(d.model_b) | set(c.model_a) | set(c.model_b))
    return {
        g: winrates_for(
            d, label=label, models=models, compare=c, group=g, compare_group=compare_name, **kw
        ),
        compare_name: winrates_for(c, label=label, models=models, group=compare_name, **kw),
    }, note


def winrates_view(
    db: str | os.PathLike,
    source: str,
    name: str,
    label: str = "human",
    judge: str | None = None,
    reps: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    compare_name: str | None = None,
    alpha: float = 0.05,
    procedure: str = "maxt",
    elo: bool = True,
) -> WinRatesView:
    """Win-rate analysis (:func:`winrates_for`) of a run's judge verdicts, a stored set or the built-in
    Chatbot Arena files, groups named honestly.

    ``judgments``: the groups are the generation modes present (``coupled`` / ``independent``);
    with both, the coupled group is compared with the independent one per pair (paired by prompt).
    ``set`` / ``arena``: one group named after the source (labels: ``label``); with
    ``compare_name`` (another stored set on the same prompts) a second group, compared per pair.

    Returns:
        :class:`WinRatesView`: results per group, the average win-rate table, the per-pair table, the
        BT/Elo tables, label, groups, source note and (judge verdicts only) the verdict counts.
    """
    kw: dict[str, Any] = {"seed": seed, "reps": reps, "alpha": alpha, "procedure": procedure, "elo": elo}
    verdicts: dict[str, VerdictCount] | None = None
    if source == "judgments":
        label = "judge"
        out, note, verdicts = _judgment_groups(db, name, judge, **kw)
    elif source in ("set", "arena"):
        out, note = _set_groups(db, source, name, label, compare_name, **kw)
    else:
        raise UserError(f"unknown comparison source {source!r}; allowed: 'judgments', 'set', 'arena'")
    return WinRatesView(
        results=out,
        table=_table(out),
        pairs=_pairs(out),
        ratings={g: _ratings(r) for g, r in out.items()},
        label=label,
        groups=list(out),
        source_note=note,
        verdicts=verdicts,
    )


def matrix_of(res: WinRates, key: str = "matrix") -> tuple[list[str], np.ndarray]:
    """A (k, k) array (NaN on the diagonal) from a WinRates dict-of-dicts field ('matrix', 'ties',
    'counts')."""
    models = res.models
    table = getattr(res, key)
    M = np.full((len(models), len(models)), np.nan)
    for i, m in enumerate(models):
        for j, m2 in enumerate(models):
            v = table.get(m, {}).get(m2)
            if i != j and v is not None:
                M[i, j] = v
    return models, M
