"""The reference implementation of the hedged betting confidence sequence, vendored for tests.

Copied from the ``confseq`` package, version 0.0.11 (src/confseq/betting.py,
betting_strategies.py, misc.py: ``hedged_cs`` and what it calls), MIT License,
Copyright (c) 2021 confseq developers (https://github.com/gostevehoward/confseq).
Only the code paths ``hedged_cs`` uses are kept (one betting strategy, no multiprocessing,
no plotting); the arithmetic is unchanged. ``np.float_`` (gone in NumPy 2) appears only in type
hints upstream and is dropped here. The package itself cannot be a dependency: its sdist builds a
C++ extension that needs Boost. tests/test_sequential.py checks engine/stats/sequential.py
against it.

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions: The above copyright notice and this
permission notice shall be included in all copies or substantial portions of the Software.
THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND.
"""

import math

import numpy as np


def lambda_predmix_eb(
    x, truncation=math.inf, alpha=0.05, prior_mean=1 / 2, prior_variance=1 / 4, fake_obs=1
):
    t = np.arange(1, len(x) + 1)
    mu_hat_t = np.minimum((fake_obs * prior_mean + np.cumsum(x)) / (t + fake_obs), 1)
    sigma2_t = (fake_obs * prior_variance + np.cumsum(np.power(x - mu_hat_t, 2))) / (t + fake_obs)
    sigma2_tminus1 = np.append(prior_variance, sigma2_t[0 : (len(x) - 1)])
    lambdas = np.sqrt(2 * np.log(1 / alpha) / (t * np.log(1 + t) * sigma2_tminus1))
    lambdas[np.isnan(lambdas)] = 0
    return np.minimum(truncation, lambdas)


def betting_mart(x, m, alpha, N, theta, trunc_scale=1 / 2):
    """One side of the hedged capital process (theta = 1: positive, theta = 0: negative)."""
    t = np.arange(1, len(x) + 1)
    S_t = np.cumsum(x)
    S_tminus1 = np.append(0, S_t[0 : (len(x) - 1)])
    mu_t = (N * m - S_tminus1) / (N - (t - 1))
    lambdas = lambda_predmix_eb(x, alpha=alpha / 2)  # alpha * theta with theta = 1/2 in hedged_cs
    if theta == 1:
        with np.errstate(divide="ignore"):
            lam = np.minimum(lambdas, trunc_scale / mu_t)
            lam = np.maximum(lam, -trunc_scale / (1 - mu_t))
        with np.errstate(invalid="ignore"):
            mult = 1 + lam * (x - mu_t)
    else:
        with np.errstate(divide="ignore"):
            lam = np.minimum(lambdas, trunc_scale / (1 - mu_t))
            lam = np.maximum(lam, -trunc_scale / mu_t)
        with np.errstate(invalid="ignore"):
            mult = 1 - lam * (x - mu_t)
    mult[np.logical_and(lam == math.inf, x - mu_t == 0)] = 1
    with np.errstate(invalid="ignore"):
        cap = np.cumprod(mult)
    cap[np.isnan(cap)] = 0
    return cap, mu_t


def hedged_mart(x, m, alpha, N):
    pos, mu_t = betting_mart(x, m, alpha, N, theta=1)
    neg, _ = betting_mart(x, m, alpha, N, theta=0)
    cap = np.maximum(0.5 * pos, 0.5 * neg)
    cap[np.logical_or(mu_t < 0, mu_t > 1)] = math.inf
    return cap


def logical_cs(x, N):
    t = np.arange(1, len(x) + 1)
    S_t = np.cumsum(x)
    return S_t / N, 1 - (t - S_t) / N


def hedged_cs(x, alpha=0.05, N=None, breaks=1000, running_intersection=True):
    """confseq.betting.hedged_cs(x, alpha, N, breaks, running_intersection) on x in [0, 1]."""
    possible_m = np.arange(0, 1 + 1 / breaks, step=1 / breaks)
    mtx = np.zeros((len(possible_m), len(x)))
    for i in np.arange(0, len(possible_m)):
        mtx[i, :] = hedged_mart(x, possible_m[i], alpha, N) <= 1 / alpha
    lo, up = np.zeros(len(x)), np.ones(len(x))
    for j in np.arange(0, len(x)):
        where = np.where(mtx[:, j])
        if len(where[0]) > 0:
            lo[j], up[j] = possible_m[where[0][0]], possible_m[where[0][-1]]
    lo = np.maximum(0, lo - 1 / breaks)
    up = np.minimum(1, up + 1 / breaks)
    ll, lu = logical_cs(x, N)
    lo, up = np.maximum(lo, ll), np.minimum(up, lu)
    if running_intersection:
        return np.maximum.accumulate(lo), np.minimum.accumulate(up)
    return lo, up
