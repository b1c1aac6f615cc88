"""Tests on prompt-clustered comparisons: coupled vs independent paired by prompt, position bias,
and multiplicity (Westfall-Young step-down max-T over the cluster bootstrap; Holm kept for reference).

docs/METHODS.md 7.2. Data convention as :mod:`engine.stats.winrates`.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from engine.errors import UserError
from engine.stats.clusters import (
    cluster_codes,
    cluster_multiplicities,
    cluster_pair_counts,
    split_counts,
)
from engine.stats.winrates import A_WINS, B_WINS, TIE, _check, cluster_wilson, n_eff_clustered

# ----------------------------------------------------------------------------- paired-by-prompt tests


def mode_diff_paired_test(
    a,
    b,
    outcome,
    mode,
    cluster,
    k: int,
    conf: float = 0.95,
    rng: np.random.Generator | None = None,
    n_resamples: int = 1000,
) -> dict:
    """Coupled − independent win-rate of every pair, a t test paired by prompt (docs/METHODS.md 7.2).

    For pair (i, j) and prompt c with rows in both modes: d_c = W^{coupled}_{ij,c} − W^{indep}_{ij,c}
    (per-prompt win fractions of i over j);  Δ̂_ij = mean_c d_c,  SE = sd(d_c)/sqrt(C_ij),
    t = Δ̂/SE ~ t_{C_ij − 1};  CI = Δ̂ ± t_{C−1, (1+conf)/2} SE.  Family-wise adjusted p over the
    k(k−1) cells: Westfall–Young step-down max-T over the prompt-cluster bootstrap
    (:func:`maxt_adjust`, ``p_maxt``; seeded by ``rng``) and Holm (``p_holm``, for reference).

    Guarantee: valid (asymptotically; exact for normal d_c) for independent prompts, whatever the
    dependence between the two modes and among a prompt's rows. Δ̂ equals the difference of the
    pooled win-rates when every prompt has the same rows per pair and mode (the product's design).
    A two-proportion z test treats the modes as independent samples and is not valid here.

    Args:
        a, b, outcome: (n,); mode: (n,) 0 = coupled, 1 = independent; cluster: (n,) prompt ids
            (required: without prompts there is no pairing); k; conf.
    Returns:
        dict of (k, k) arrays (NaN diagonal): diff, se, t, p_value, p_maxt (Westfall–Young over
        all k(k−1) off-diagonal cells; NaN when no ``rng``), p_holm (Holm over the same cells),
        low, high, n_prompts; and n_clusters, n_resamples.
    """
    a, b, outcome = _check(a, b, outcome, k)
    mode = np.asarray(mode, np.int64)
    if mode.shape != a.shape or np.any((mode != 0) & (mode != 1)):
        raise UserError("mode must be an (n,) array of 0 (coupled) and 1 (independent)")
    if cluster is None:
        raise UserError("the coupled-vs-independent test is paired by prompt: prompt ids are required")
    codes, C, _ = cluster_codes(cluster, a.size)
    frac = []
    for m in (0, 1):
        sel = mode == m
        X = cluster_pair_counts(a[sel], b[sel], outcome[sel], codes[sel], C, k).toarray()  # (C, 2k²)
        w, t = split_counts(X, k)  # (C, k, k)
        nn = w + w.transpose(0, 2, 1) + t
        with np.errstate(invalid="ignore", divide="ignore"):
            frac.append(np.where(nn > 0, w / np.where(nn > 0, nn, 1), np.nan))
    d = frac[0] - frac[1]  # (C, k, k), NaN where a prompt lacks the pair in a mode
    ok = ~np.isnan(d)
    Cij = ok.sum(axis=0)
    dz = np.where(ok, d, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = dz.sum(axis=0) / Cij
        var = (np.where(ok, d - mean, 0.0) ** 2).sum(axis=0) / (Cij - 1)
        se = np.sqrt(var / Cij)
        tstat = np.where(se > 0, mean / se, np.where(mean == 0, 0.0, np.sign(mean) * np.inf))
    df = np.maximum(Cij - 1, 1)
    p = np.where(Cij >= 2, 2 * stats.t.sf(np.abs(tstat), df), np.nan)
    q = stats.t.ppf(0.5 + conf / 2, df)
    eye = np.eye(k, dtype=bool)
    mean, se, tstat, p = (np.where(eye, np.nan, x) for x in (mean, se, tstat, p))
    # Holm over every off-diagonal cell (k(k−1) hypotheses): the stars shown in both cells of a
    # pair then keep the family-wise error rate over everything displayed (ties make W_ij and
    # W_ji different quantities)
    off = ~eye
    ph = np.full((k, k), np.nan)
    ph[off] = holm_adjust(p[off])
    pm = np.full((k, k), np.nan)
    if rng is not None:
        pm[off] = maxt_adjust(d.reshape(C, k * k)[:, off.ravel()], rng, n_resamples)
    return {
        "diff": mean,
        "se": se,
        "t": tstat,
        "p_value": p,
        "p_holm": ph,
        "p_maxt": pm,
        "low": mean - q * se,
        "high": mean + q * se,
        "n_prompts": Cij,
        "n_clusters": C,
        "n_resamples": int(n_resamples if rng else 0),
    }


def _weighted_t(
    mult: np.ndarray, dz: np.ndarray, ok: np.ndarray, centre: np.ndarray | None
) -> np.ndarray:
    """t = (mean − centre)/SE of the columns of d under cluster weights: (B, C) x (C, H) -> (B, H)."""
    n = mult @ ok  # (B, H) prompts with the cell, counted with multiplicity
    s1 = mult @ dz
    s2 = mult @ (dz * dz)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = s1 / n
        var = (s2 - n * m * m) / (n - 1)
        se = np.sqrt(np.maximum(var, 0.0) / n)
        diff = m - (0.0 if centre is None else centre)
        return np.where(
            se > 0, diff / np.where(se > 0, se, 1.0), np.where(diff == 0, 0.0, np.sign(diff) * np.inf)
        )


def maxt_adjust(d, rng: np.random.Generator, n_resamples: int = 1000) -> np.ndarray:
    """Westfall–Young step-down max-T adjusted p-values of H_h: E d_h = 0, prompts resampled (cluster
    bootstrap).

    t_h = mean_c d_ch / SE_h (the paired t statistics, NaN cells left out per prompt);
    t*_bh = (mean*_bh − mean_h)/SE*_bh on C prompts drawn with replacement (recentred, so the
    draws follow the null of every cell at once). Order the cells by |t| descending, h_(1), ...;
    p̃_(r) = max_{s ≤ r} P*(max_{q ≥ s} |t*_(q)| ≥ |t_(s)|).

    Guarantee: asymptotic strong control of the family-wise error rate (Romano & Wolf 2005;
    Westfall & Young 1993) under any dependence between the cells; under positive dependence
    (shared prompts) it rejects at least as often as Holm asymptotically, usually much more.

    Args:
        d: (C, H) per-prompt differences (NaN where a prompt lacks the cell); rng; n_resamples B.
    Returns:
        (H,) adjusted p-values (NaN for cells with fewer than 2 prompts).
    """
    d = np.asarray(d, float)
    C, H = d.shape
    ok = ~np.isnan(d)
    dz = np.where(ok, d, 0.0)
    t = _weighted_t(np.ones((1, C)), dz, ok.astype(float), None)[0]  # (H,)
    out = np.full(H, np.nan)
    valid = (ok.sum(axis=0) >= 2) & ~np.isnan(t)
    if not valid.any():
        return out
    centre = np.where(ok, d, np.nan)
    with np.errstate(invalid="ignore"):
        centre = np.nanmean(centre, axis=0) if C else np.zeros(H)
    mult = cluster_multiplicities(C, n_resamples, rng).astype(float)  # (B, C)
    tb = np.abs(_weighted_t(mult, dz[:, valid], ok[:, valid].astype(float), centre[valid]))  # (B, Hv)
    tb = np.where(np.isnan(tb), 0.0, tb)  # a resample without the cell's prompts: no evidence against H0
    tv = np.abs(t[valid])
    order = np.argsort(-tv, kind="stable")
    tail_max = np.maximum.accumulate(tb[:, order][:, ::-1], axis=1)[:, ::-1]  # (B, Hv): max over q >= r
    raw = (tail_max >= tv[order][None, :]).mean(axis=0)
    adj = np.maximum.accumulate(raw)
    res = np.empty(tv.size)
    res[order] = adj
    out[valid] = res
    return out


def position_bias(a, b, outcome, unit, cluster=None, conf: float = 0.95) -> dict:
    """Position bias when both orders of a judgement are judged (docs/METHODS.md 7.2).

    Pairs the two rows of each judgement (same ``unit``, models swapped). flip rate = share of
    judgements whose model-level verdict differs between the two orders; first-position share =
    P(first-shown output wins | decisive verdict) over all rows (0.5 = no bias), with a
    cluster-robust SE (rows clustered by prompt, or by unit when no prompt ids) and a Wilson
    interval at the effective size p(1 − p)/SE² (the clusters' count when SE = 0), inside [0, 1].

    Args:
        a, b, outcome: (n,); unit: (n,) judgement ids (exactly two rows per paired unit; units
            with one row are counted as unpaired and left out of the flip rate); cluster: (n,)
            prompt ids or None; conf.
    Returns:
        dict: n_judgements (paired), n_unpaired, flip_rate, consistency (= 1 − flip_rate),
        first_win_share, first_win_se, first_win_low, first_win_high, tie_rate, per_row_clusters.
    """
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    outcome = np.asarray(outcome, np.int64)
    _, ucode = np.unique(np.asarray(unit), return_inverse=True)
    order = np.argsort(ucode, kind="stable")
    uc = ucode[order]
    counts = np.bincount(uc)
    if np.any(counts > 2):
        raise UserError(
            f"a judgement unit has {int(counts.max())} rows; expected 2 (one per presentation order)"
        )
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    paired = counts == 2
    r0, r1 = order[start[paired]], order[start[paired] + 1]
    if np.any((a[r0] != b[r1]) | (b[r0] != a[r1])):
        raise UserError(
            "the two rows of a judgement unit must show the same two models in swapped order"
        )
    # model-level verdict relative to a[r0]: +1 a[r0] wins, −1 loses, 0 tie
    v0 = np.where(outcome[r0] == A_WINS, 1, np.where(outcome[r0] == B_WINS, -1, 0))
    v1 = np.where(outcome[r1] == A_WINS, -1, np.where(outcome[r1] == B_WINS, 1, 0))
    flip = float(np.mean(v0 != v1)) if r0.size else float("nan")
    dec = outcome != TIE
    y = (outcome[dec] == A_WINS).astype(float)
    codes, C, per_row = cluster_codes(
        None if cluster is None else np.asarray(cluster, object)[dec], int(dec.sum())
    )
    if per_row:
        codes = np.unique(ucode[dec], return_inverse=True)[1]
    pbar = float(y.mean()) if y.size else float("nan")
    sc = np.bincount(codes, weights=y - pbar)
    Cn = sc.size
    se = float(np.sqrt((sc**2).sum() * Cn / max(Cn - 1, 1)) / y.size) if y.size else float("nan")
    # Wilson at the clustered effective size: inside [0, 1] (a Wald interval read -48%..148% on 12
    # verdicts)
    lo, hi = (
        (float(x) for x in cluster_wilson(pbar, n_eff_clustered(pbar, se, Cn), conf))
        if y.size
        else (pbar, pbar)
    )
    return {
        "n_judgements": int(paired.sum()),
        "n_unpaired": int((counts == 1).sum()),
        "flip_rate": flip,
        "consistency": 1 - flip,
        "first_win_share": pbar,
        "first_win_se": se,
        "first_win_low": lo,
        "first_win_high": hi,
        "tie_rate": float(np.mean(~dec)),
        "per_row_clusters": cluster is None,
    }


def holm_adjust(p) -> np.ndarray:
    """Holm step-down adjusted p-values: p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j)).

    Controls the family-wise error rate at α (reject where p̃ ≤ α) under any dependence.
    NaN entries are left out of the family and stay NaN.

    Args:
        p: (m,) raw p-values.
    Returns:
        (m,) adjusted p-values.
    """
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    q = p[ok]
    m = q.size
    if m == 0:
        return out
    order = np.argsort(q, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * q[order]))
    res = np.empty(m)
    res[order] = adj
    out[ok] = res
    return out
