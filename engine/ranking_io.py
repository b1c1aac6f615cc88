"""Read-side helpers for win-rates and rank-sets (CLI ``ranksets`` / ``winrates`` and the dashboard).

Everything here takes the normalised comparisons DataFrame (columns ``model_a, model_b,
human_winner, judge_winner`` and optionally ``prompt_id``; winners ``'a' | 'b' | 'tie'`` or None)
and returns plain JSON-ready dicts. Sources: a CSV file (:func:`read_comparisons_file`), Chatbot
Arena JSON lines (:func:`engine.tasks.comparisons.read_arena`), or a stored comparison set
(:func:`load_comparisons` with ``db`` and ``set_name``). The statistics are in
:mod:`engine.stats.ranking` and :mod:`engine.stats.winrates`.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from engine.tasks.comparisons import normalise_winner, read_arena
from engine.config import RANK_LABELS, RANK_METHODS
from engine.errors import UserError
from engine.stats import ranking as R
from engine.stats import winrates as WR

METHODS = RANK_METHODS
LABELS = RANK_LABELS
CSV_COLUMNS = ("model_a", "model_b", "human_winner", "judge_winner")
# the paper's alpha grid (Appendix D, footnote 8)
PAPER_ALPHAS = (0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.075, 0.05, 0.025, 0.01)
# The 12 Chatbot Arena models of the PPR paper (Chatterji et al., 2025): 14,947 comparisons.
ARENA_PAPER_MODELS = ("gpt-4", "claude-v1", "claude-instant-v1", "gpt-3.5-turbo", "vicuna-13b", "palm-2",
                      "koala-13b", "RWKV-4-Raven-14B", "oasst-pythia-12b", "alpaca-13b", "chatglm-6b",
                      "fastchat-t5-3b")


def default_models(available: list[str], limit: int = 12) -> list[str]:
    """The models a ranking starts with: the paper's 12 when all of them are available (Arena),
    else the first ``limit`` of ``available``."""
    if set(ARENA_PAPER_MODELS) <= set(available):
        return list(ARENA_PAPER_MODELS)
    return list(available[:limit])


# ----------------------------------------------------------------------------- reading

def read_comparisons_file(path: str | Path) -> pd.DataFrame:
    """A CSV of comparisons -> the normalised DataFrame (prompt_id, model_a, model_b, human_winner, judge_winner).

    Columns: ``model_a, model_b`` and at least one of ``human_winner`` / ``judge_winner``
    (``winner`` is accepted as the human column, as in the upload format), optional
    ``prompt_id``. Winner cells: a, b, tie (also model_a, model_b, tie (bothbad)) or empty for
    no label. Raises UserError naming the file, row and value for anything else.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"file not found: {p}")
    if p.stat().st_size == 0:
        raise UserError(f"{p}: file is empty")
    try:
        with warnings.catch_warnings():
            # a row with more fields than the header must not silently shift or drop cells
            warnings.simplefilter("error", pd.errors.ParserWarning)
            raw = pd.read_csv(p, dtype=str, keep_default_na=False, skipinitialspace=True, encoding="utf-8-sig",
                              index_col=False)
    except pd.errors.ParserWarning:
        raise UserError(f"{p}: a row has more fields than the header (an unquoted comma in a cell?)") from None
    except pd.errors.EmptyDataError:
        raise UserError(f"{p}: file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: not a readable CSV file ({str(exc).splitlines()[0]})") from None
    raw.columns = [str(c).strip() for c in raw.columns]
    if "winner" in raw.columns and "human_winner" not in raw.columns:
        raw = raw.rename(columns={"winner": "human_winner"})
    missing = [c for c in ("model_a", "model_b") if c not in raw.columns]
    if missing or not ({"human_winner", "judge_winner"} & set(raw.columns)):
        raise UserError(f"{p}: columns must include model_a, model_b and human_winner and/or judge_winner "
                        f"(optional prompt_id); found: {', '.join(raw.columns)}")
    if raw.empty:
        raise UserError(f"{p}: no comparisons in file (header only)")
    out = pd.DataFrame({
        "prompt_id": raw["prompt_id"] if "prompt_id" in raw.columns else [str(i) for i in range(len(raw))],
        "model_a": raw["model_a"].str.strip(), "model_b": raw["model_b"].str.strip()})
    for col in ("human_winner", "judge_winner"):
        vals = raw[col] if col in raw.columns else pd.Series([""] * len(raw))
        norm = []
        for i, v in enumerate(vals, start=2):  # row 1 is the header
            try:
                norm.append(normalise_winner(v))
            except UserError as exc:
                raise UserError(f"{p}: row {i}, column {col}: {exc}") from None
        out[col] = norm
    blank = (out.model_a == "") | (out.model_b == "")
    if blank.any():
        raise UserError(f"{p}: row {int(np.flatnonzero(blank)[0]) + 2}: model_a and model_b must not be empty")
    same = out.model_a == out.model_b
    if same.any():
        raise UserError(f"{p}: row {int(np.flatnonzero(same)[0]) + 2}: model_a and model_b are the same "
                        f"model {out.model_a[same].iloc[0]!r}")
    return out


def load_comparisons(comparisons: str | Path | None = None, *, human: str | Path | None = None,
                     judge: str | Path | None = None, db: str | Path | None = None,
                     set_name: str | None = None, models: list[str] | None = None) -> pd.DataFrame:
    """Comparisons from exactly one source: a CSV file, Arena JSON lines (human and/or judge), or a stored set.

    ``models`` keeps only the comparisons between the listed models (UserError if one never
    appears).
    """
    given = [comparisons is not None, human is not None or judge is not None, set_name is not None]
    if sum(given) != 1:
        raise UserError("give exactly one source: --comparisons FILE, --human/--judge FILE (Arena JSON lines), "
                        "or --set NAME")
    if comparisons is not None:
        df = read_comparisons_file(comparisons)
    elif set_name is not None:
        from engine.tasks.comparisons import read_comparison_set  # the stored-set reader (uploads)
        from engine import store
        df = read_comparison_set(db if db is not None else store.DEFAULT_DB, set_name)
    else:
        df = read_arena(human, judge)
    return restrict_models(df, models)


def _model_list(df: pd.DataFrame, models: list[str] | None) -> list[str]:
    return list(models) if models else sorted(set(df.model_a) | set(df.model_b))


def restrict_models(df: pd.DataFrame, models: list[str] | None) -> pd.DataFrame:
    """Only the comparisons between ``models`` (all rows when None); UserError if a model is absent or duplicated."""
    if not models:
        return df
    if len(set(models)) != len(models):
        raise UserError(f"--models lists a model twice: {models}")
    present = set(df.model_a) | set(df.model_b)
    absent = [m for m in models if m not in present]
    if absent:
        raise UserError(f"model(s) {absent} appear in no comparison; present: {', '.join(sorted(present))}")
    keep = set(models)
    out = df[df.model_a.isin(keep) & df.model_b.isin(keep)].reset_index(drop=True)
    if out.empty:
        raise UserError(f"no comparison involves only the models {sorted(keep)}")
    return out


def _indices(df: pd.DataFrame, models: list[str]) -> tuple[np.ndarray, np.ndarray]:
    pos = {m: i for i, m in enumerate(models)}
    return (df.model_a.map(pos).to_numpy(dtype=np.int64), df.model_b.map(pos).to_numpy(dtype=np.int64))


def _indicators(winners: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """'a' -> (w, w') = (1, 0); 'b' -> (0, 1); 'tie' -> (0, 0)."""
    v = winners.to_numpy(dtype=object)
    return (v == "a").astype(float), (v == "b").astype(float)


def _require_models(models: list[str], first, second, what: str) -> None:
    c = R.comparison_counts(first, second, len(models))
    if np.any(c == 0):
        missing = [models[i] for i in np.flatnonzero(c == 0)]
        raise UserError(f"model(s) {missing} never appear in the {what}; every model needs at least one "
                        f"comparison there (restrict with --models)")


def _json_float(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) or math.isinf(x) else x


# ----------------------------------------------------------------------------- rank-sets

def ranksets_for(df: pd.DataFrame, method: str, alpha: float, covariance: str = "delta",
                 lam: float | str = "auto", models: list[str] | None = None) -> dict:
    """Rank-sets of one method on a comparisons DataFrame, as the ``ranksets`` CLI JSON.

    method "human" / "judge": Algorithm 3 on the rows with that label. "ppr": Algorithm 1 with
    D_n = rows with a human label (they also need a judge label) and D_N = rows with only a judge
    label. Returns {"models", "theta", "sigma", "lambda", "ranksets", "covariance", "n", "N"}.
    """
    if method not in METHODS:
        raise UserError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")
    R._check_covariance(covariance)
    alpha = parse_alpha(alpha)
    lam = parse_lambda(lam)
    df = restrict_models(df, models)
    models = _model_list(df, models)
    k = len(models)
    if k < 2:
        raise UserError(f"need at least two models to rank; found {models}")
    has_h = df.human_winner.notna().to_numpy()
    has_j = df.judge_winner.notna().to_numpy()
    first, second = _indices(df, models)
    lam_out = None
    if method in ("human", "judge"):
        rows = has_h if method == "human" else has_j
        if not rows.any():
            raise UserError(f"no comparison has a {method} label")
        col = "human_winner" if method == "human" else "judge_winner"
        w, w2 = _indicators(df[col][rows])
        _require_models(models, first[rows], second[rows], f"{method}-labelled comparisons")
        theta, sigma = R.onesource_theta_sigma(first[rows], second[rows], w, w2, k, covariance)
        n, N = (int(rows.sum()), 0) if method == "human" else (0, int(rows.sum()))
    else:
        bad = has_h & ~has_j
        if bad.any():
            rows_txt = ", ".join(str(i + 1) for i in np.flatnonzero(bad)[:10])
            raise UserError(f"PPR needs a judge label on every human-labelled comparison; {int(bad.sum())} "
                            f"have none (rows {rows_txt}{' ...' if bad.sum() > 10 else ''})")
        lab, unl = has_h, has_j & ~has_h
        if not lab.any() or not unl.any():
            raise UserError(f"PPR needs human-labelled comparisons (found {int(lab.sum())}) and comparisons "
                            f"labelled by the judge only (found {int(unl.sum())})")
        _require_models(models, first[lab], second[lab], "labelled set (human labels)")
        _require_models(models, first[unl], second[unl], "unlabelled set (judge-only labels)")
        w, w2 = _indicators(df.human_winner[lab])
        wh, wh2 = _indicators(df.judge_winner[lab])
        whN, wh2N = _indicators(df.judge_winner[unl])
        theta, sigma, lam_out = R.ppr_theta_sigma(first[unl], second[unl], whN, wh2N, first[lab], second[lab],
                                                  w, w2, wh, wh2, k, lam=lam, covariance=covariance)
        n, N = int(lab.sum()), int(unl.sum())
    lo, up = R.ranksets(theta, sigma, alpha)
    return {"models": models,
            "theta": {m: float(t) for m, t in zip(models, theta)},
            "sigma": sigma.tolist(),
            "lambda": None if lam_out is None else float(lam_out),
            "ranksets": {m: [int(a), int(b)] for m, a, b in zip(models, lo, up)},
            "covariance": covariance, "n": n, "N": N}


def parse_lambda(value: str | float) -> float | str:
    """'auto' or a number in [0, 1] (UserError otherwise)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        lam = float(value)
    except (TypeError, ValueError):
        raise UserError(f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}") from None
    if not 0.0 <= lam <= 1.0:
        raise UserError(f"lambda (--lambda) must be 'auto' or a number in [0, 1]; got {value!r}")
    return lam


def parse_alpha(value: str | float) -> float:
    """A number in (0, 1) (UserError otherwise)."""
    try:
        a = float(value)
    except (TypeError, ValueError):
        raise UserError(f"alpha must be a number in (0, 1); got {value!r}") from None
    if not 0.0 < a < 1.0:
        raise UserError(f"alpha must be in (0, 1); got {value!r}")
    return a


# ----------------------------------------------------------------------------- repeated draws (paper Fig. 1, 9)

def pair_ids(first: np.ndarray, second: np.ndarray, k: int) -> np.ndarray:
    """Unordered pair id min(a, b) * k + max(a, b) of every comparison."""
    return np.minimum(first, second) * k + np.maximum(first, second)


def balanced_draws(pairs: np.ndarray, per_pair: int, labelled_per_pair: int, reps: int,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``reps`` random subsets with ``per_pair`` comparisons of every pair, the first ``labelled_per_pair`` of each labelled.

    The paper's protocol (Section 5): N + n instances with an equal number per pair, of which a
    random n (also equal per pair) get human labels. Sampling is without replacement within a
    draw.

    Args:
        pairs: (P,) pair id of every pool comparison; per_pair, labelled_per_pair: counts.
    Returns:
        idx (reps, n_pairs * per_pair) pool indices, labelled (n_pairs * per_pair,) mask (same
        for every draw: the columns are laid out pair by pair).
    """
    uniq = np.unique(pairs)
    cols, lab = [], []
    for p in uniq:
        members = np.flatnonzero(pairs == p)
        if len(members) < per_pair:
            raise UserError(f"a pair has only {len(members)} comparisons; per-pair draw size {per_pair} is too large")
        keys = rng.random((reps, len(members)))  # (reps, m): a random permutation per draw
        cols.append(members[np.argsort(keys, axis=1)[:, :per_pair]])
        lab.append(np.arange(per_pair) < labelled_per_pair)
    return np.concatenate(cols, axis=1), np.concatenate(lab)


def draws_experiment(first: np.ndarray, second: np.ndarray, human: tuple[np.ndarray, np.ndarray],
                     judges: dict[str, tuple[np.ndarray, np.ndarray]], k: int, n: int, reps: int,
                     alphas, covariance: str, rng: np.random.Generator,
                     total: int | None = None, lam: float | str = "auto") -> dict:
    """Rank-sets of every method over ``reps`` balanced random draws (paper Section 5 / Fig. 1).

    Methods: "baseline" (humans on all N + n), "human" (humans on n), and per judge J:
    "judge:J" (J on all N + n) and "ppr:J" (J on the N unlabelled + humans and J on the n).
    ``total`` = N + n (default: the largest balanced size, n_pairs x the smallest pair count).

    Returns:
        {"lower"/"upper": {method: (A, reps, k) int arrays}, "lambda": {method: (reps,)},
         "N": int, "n": int} for the alphas in order.
    """
    alphas = np.atleast_1d(np.asarray(alphas, float))
    R._check_alpha(alphas)
    pairs = pair_ids(first, second, k)
    counts = np.unique(pairs, return_counts=True)[1]
    n_pairs = len(counts)
    per_pair = counts.min() if total is None else total // n_pairs
    lab_per_pair = max(1, int(round(n / n_pairs)))
    if lab_per_pair >= per_pair:
        raise UserError(f"n = {n} means {lab_per_pair} human-labelled comparisons per pair, but each draw has only "
                        f"{per_pair} per pair (N + n = {per_pair * n_pairs}; the least compared pair has "
                        f"{counts.min()}): lower n or restrict the models")
    idx, lab = balanced_draws(pairs, int(per_pair), lab_per_pair, reps, rng)
    out_lo: dict[str, list] = {}
    out_up: dict[str, list] = {}
    lams: dict[str, list] = {}

    def add(name, theta, sigma):
        lo, up = R.ranksets(theta, sigma, alphas)
        out_lo.setdefault(name, []).append(lo)
        out_up.setdefault(name, []).append(up)

    w, w2 = human
    for r in range(reps):
        sel = idx[r]
        f, s = first[sel], second[sel]
        fl, sl, fu, su = f[lab], s[lab], f[~lab], s[~lab]
        hw, hw2 = w[sel], w2[sel]
        add("baseline", *R.onesource_theta_sigma(f, s, hw, hw2, k, covariance))
        add("human", *R.onesource_theta_sigma(fl, sl, hw[lab], hw2[lab], k, covariance))
        for name, (jw, jw2) in judges.items():
            jw_s, jw2_s = jw[sel], jw2[sel]
            add(f"judge:{name}", *R.onesource_theta_sigma(f, s, jw_s, jw2_s, k, covariance))
            t, sg, lm = R.ppr_theta_sigma(fu, su, jw_s[~lab], jw2_s[~lab], fl, sl, hw[lab], hw2[lab],
                                          jw_s[lab], jw2_s[lab], k, lam=lam, covariance=covariance)
            add(f"ppr:{name}", t, sg)
            lams.setdefault(f"ppr:{name}", []).append(lm)
    return {"lower": {m: np.stack(v, axis=1) for m, v in out_lo.items()},  # (A, reps, k)
            "upper": {m: np.stack(v, axis=1) for m, v in out_up.items()},
            "lambda": {m: np.asarray(v) for m, v in lams.items()},
            "N": int((~lab).sum()), "n": int(lab.sum())}


def summarise_draws(res: dict, alphas) -> dict:
    """Per method and alpha: mean rank-set size, baseline intersection and coverage probability (vs same-draw BASELINE)."""
    alphas = list(np.atleast_1d(alphas))
    bl, bu = res["lower"]["baseline"], res["upper"]["baseline"]
    out = {}
    for m in res["lower"]:
        lo, up = res["lower"][m], res["upper"][m]
        out[m] = [{"alpha": float(a),
                   "size": float(R.rankset_size(lo[i], up[i]).mean()),
                   "intersection": float(R.rankset_intersects(lo[i], up[i], bl[i], bu[i]).mean()),
                   "coverage": float(R.rankset_covers(lo[i], up[i], bl[i], bu[i]).mean())}
                  for i, a in enumerate(alphas)]
    return out


def rankset_draws(df_human: pd.DataFrame, df_judge: pd.DataFrame | None = None, n: int = 990, reps: int = 200,
                  alpha: float = 0.05, covariance: str = "delta", seed: int = 0,
                  alphas=PAPER_ALPHAS, models: list[str] | None = None, total: int | None = None) -> dict:
    """Dashboard view of repeated draws: per-model rank-position probabilities and size-vs-intersection curves.

    ``df_human`` holds the comparisons with human labels (``human_winner``); the judge labels come
    from its ``judge_winner`` column, or from ``df_judge`` (line-aligned: same rows, same
    models; its ``judge_winner`` column). Only rows with both labels are used.

    Returns:
        {"models", "alpha", "n", "N", "covariance",
         "position_prob": {method: [[P(rank r in set of model m)]]} (k x k, at ``alpha``; paper Fig. 9),
         "rankset_prob": {method: {model: [{"lower", "upper", "prob"}, ...]}} (at ``alpha``; Fig. 10),
         "curve": {method: [{"alpha", "size", "intersection", "coverage"}, ...]}} with methods
         baseline, human, judge, ppr.
    """
    R._check_covariance(covariance)
    if df_judge is not None:
        if len(df_judge) != len(df_human) or not (
                (df_judge.model_a.to_numpy() == df_human.model_a.to_numpy()).all()
                and (df_judge.model_b.to_numpy() == df_human.model_b.to_numpy()).all()):
            raise UserError("human and judge comparisons are not line-aligned (different rows or models)")
        df = df_human.assign(judge_winner=df_judge.judge_winner.to_numpy())
    else:
        df = df_human
    df = df[df.human_winner.notna() & df.judge_winner.notna()].reset_index(drop=True)
    if df.empty:
        raise UserError("no comparison has both a human and a judge label")
    df = restrict_models(df, models)
    models = _model_list(df, models)
    first, second = _indices(df, models)
    alphas_all = sorted(set(float(a) for a in alphas) | {float(alpha)}, reverse=True)
    res = draws_experiment(first, second, _indicators(df.human_winner), {"judge": _indicators(df.judge_winner)},
                           len(models), n, reps, alphas_all, covariance, np.random.default_rng(seed), total)
    ai = alphas_all.index(float(alpha))
    names = {"baseline": "baseline", "human": "human", "judge:judge": "judge", "ppr:judge": "ppr"}
    curve = summarise_draws(res, alphas_all)
    return {"models": models, "alpha": float(alpha), "n": res["n"], "N": res["N"], "covariance": covariance,
            "position_prob": {names[m]: R.rank_position_probabilities(res["lower"][m][ai], res["upper"][m][ai]).tolist()
                              for m in res["lower"]},
            "rankset_prob": {names[m]: {mod: [{"lower": l, "upper": u, "prob": pr} for (l, u), pr in d.items()]
                                        for mod, d in zip(models, R.rankset_distribution(res["lower"][m][ai],
                                                                                         res["upper"][m][ai]))}
                             for m in res["lower"]},
            "curve": {names[m]: v for m, v in curve.items()}}


# ----------------------------------------------------------------------------- win-rates

def _outcome_codes(winners: pd.Series) -> np.ndarray:
    v = winners.to_numpy(dtype=object)
    return np.where(v == "a", WR.A_WINS, np.where(v == "b", WR.B_WINS, WR.TIE)).astype(np.int64)


def winrates_for(df: pd.DataFrame, label: str = "human", seed: int = 0, reps: int = 200,
                 models: list[str] | None = None, compare: pd.DataFrame | None = None) -> dict:
    """The ``winrates`` CLI JSON: win-rate matrix (Wilson 95% CIs), ties, average win-rates (delta-method CI),
    Bradley-Terry (Davidson ties) and Elo with percentile-bootstrap CIs; with ``compare`` (e.g. the
    independent-generation set), a per-pair two-proportion z-test of the win-rates of ``df`` vs ``compare``.
    """
    if label not in LABELS:
        raise UserError(f"unknown label {label!r}; allowed: {', '.join(LABELS)}")
    col = f"{label}_winner"
    rows = df[col].notna()
    if not rows.any():
        raise UserError(f"no comparison has a {label} label")
    d = restrict_models(df[rows].reset_index(drop=True), models)
    if compare is not None and models:
        compare = compare[compare.model_a.isin(set(models)) & compare.model_b.isin(set(models))]
    models = _model_list(d if compare is None else pd.concat([d, compare]), models)
    k = len(models)
    a, b = _indices(d, models)
    out = _outcome_codes(d[col])
    W, T, n = WR.winrate_matrix(a, b, out, k)
    wins, _, _ = WR.pairwise_counts(a, b, out, k)
    lo, hi = WR.wilson_interval(wins, n)
    avg, alo, ahi = WR.average_winrate(W, n)
    rng = np.random.default_rng(seed)
    beta, nu = WR.davidson_fit(a, b, out, k)
    blo, bhi, _ = WR.bootstrap_ci(lambda *x: WR.davidson_fit(*x)[0], a, b, out, k, rng, reps=reps)
    elo = WR.elo_ratings(a, b, out, k)
    elo_lo, elo_hi, elo_draws = WR.bootstrap_ci(WR.elo_ratings, a, b, out, k, rng, reps=reps)

    def mat(M):
        return {m: {m2: _json_float(M[i, j]) for j, m2 in enumerate(models) if j != i} for i, m in enumerate(models)}

    res = {
        "models": models, "label": label, "n": int(len(d)),
        "matrix": mat(W), "ties": mat(T), "counts": {m: {m2: int(n[i, j]) for j, m2 in enumerate(models) if j != i}
                                                     for i, m in enumerate(models)},
        "ci": {m: {m2: [_json_float(lo[i, j]), _json_float(hi[i, j])] for j, m2 in enumerate(models) if j != i}
               for i, m in enumerate(models)},
        "ci_method": "wilson 95%",
        "average": {m: {"winrate": _json_float(avg[i]), "ci": [_json_float(alo[i]), _json_float(ahi[i])]}
                    for i, m in enumerate(models)},
        "average_ci_method": "delta method (per-pair binomials, independent) 95%",
        "tie_rate": _json_float(np.mean(out == WR.TIE)),
        "bradley_terry": {"model": "davidson (ties)", "beta": {m: float(x) for m, x in zip(models, beta)},
                          "nu": nu, "ci": {m: [float(x), float(y)] for m, x, y in zip(models, blo, bhi)},
                          "ci_method": f"percentile bootstrap over comparisons, {reps} resamples, seed {seed}"},
        # the online rating depends on the file order; the bootstrap resamples reshuffle it, so the
        # CI is for the order-free rating (its median is reported next to the in-order one)
        "elo": {"K": 4.0, "rating": {m: float(x) for m, x in zip(models, elo)},
                "rating_bootstrap_median": {m: float(x) for m, x in zip(models, np.median(elo_draws, axis=0))},
                "ci": {m: [float(x), float(y)] for m, x, y in zip(models, elo_lo, elo_hi)},
                "ci_method": f"percentile bootstrap over comparisons (reshuffled order), {reps} resamples, seed {seed}; "
                             "'rating' is the online rating in file order"},
    }
    if compare is not None:
        c = compare[compare[col].notna()]
        if c.empty:
            raise UserError(f"the comparison file has no {label} labels")
        unknown = sorted((set(c.model_a) | set(c.model_b)) - set(models))
        if unknown:
            raise UserError(f"model(s) {unknown} of the comparison file are not in --models")
        ca, cb = _indices(c, models)
        cw, _, cn = WR.pairwise_counts(ca, cb, _outcome_codes(c[col]), k)
        z, p = WR.two_proportion_ztest(wins, n, cw, cn)
        stars = WR.significance_stars(p)
        with np.errstate(invalid="ignore", divide="ignore"):
            W2 = np.where(cn > 0, cw / np.maximum(cn, 1), np.nan)
        res["compare"] = {
            m: {m2: {"winrate": _json_float(W[i, j]), "winrate_other": _json_float(W2[i, j]),
                     "z": _json_float(z[i, j]), "p": _json_float(p[i, j]), "stars": str(stars[i, j])}
                for j, m2 in enumerate(models) if j != i} for i, m in enumerate(models)}
        res["compare_test"] = "two-tailed pooled two-proportion z-test; stars **** p<1e-4, *** <1e-3, ** <1e-2, * <0.05"
    return res
