"""The numba kernels of engine.sampling.cpu_argmax (imported only when numba imports).

All hashing is in uint64 (numba's ``+`` and ``*`` wrap mod 2^64 and ``>>`` is logical on unsigned
ints), the same bits as engine.sampling.noise's int64 arithmetic. Every constant is a np.uint64 so
that no expression is promoted to float64 (numba's rule for mixed uint64/int64 operands).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_TOKEN_SALT = np.uint64(0xD6E8FEB86659FD93)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)
_TWO53 = np.uint64(1 << 53)
_INV53 = 2.0 ** -53
_TINY = float(np.finfo(np.float64).tiny)  # the reference's clamp of u = 0
_LOG2E = 1.0 / math.log(2.0)
# a lower bound of g: -log(-log tiny) = -6.5630 (u = tiny, the reference's clamp of u = 0)
G_MIN = -6.57
_BLOCK = 256  # tokens per vectorised block (256 and 1,024 measured alike; 4,096 slower)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _mix(x: np.uint64) -> np.uint64:
    """splitmix64 finaliser (as noise._mix_int)."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MUL1
    x = (x ^ (x >> _S27)) * _MUL2
    return x ^ (x >> _S31)


@njit(cache=True, nogil=True, error_model="numpy")
def token_mix(keys: np.ndarray) -> np.ndarray:
    """(V,) uint64 token parts mix(key + SALT) of the hash (once per call, shared by the rows)."""
    out = np.empty(keys.shape[0], np.uint64)
    for v in range(keys.shape[0]):
        out[v] = _mix(keys[v] + _TOKEN_SALT)
    return out


@njit(cache=True, nogil=True, error_model="numpy")
def row_hashes(seeds: np.ndarray, units: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(R,) uint64 row parts mix(mix(mix(seed) + unit) + step) of the hash."""
    out = np.empty(seeds.shape[0], np.uint64)
    for r in range(seeds.shape[0]):
        out[r] = _mix(_mix(_mix(seeds[r]) + units[r]) + steps[r])
    return out


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _gumbel64(h: np.uint64) -> float:
    """-log(-log u) in float64 for the hash h (u = (h >>> 11) 2^-53, 0 -> tiny)."""
    q = h >> _S11
    u = _TINY if q == 0 else float(q) * _INV53
    return -math.log(-math.log(u))


@njit(cache=True, nogil=True, error_model="numpy")
def margin_of(zmax: float) -> float:
    """The comparison margin of a row whose largest z is ``zmax``: 2^-10 + 2^-20 (|zmax| + 64), more
    than ten times the sum of the float32 and float64 rounding errors it covers, twice over
    (engine.sampling.cpu_argmax's module docstring derives it)."""
    return 2.0 ** -10 + 2.0 ** -20 * (abs(zmax) + 64.0)


@njit(cache=True, nogil=True, error_model="numpy")
def _reach(zmax: float, best: float, margin: float) -> np.float32:
    """log2 of 2^53 exp(zmax - best + margin) in float32 (rounded up by 2^-20, at most 60).

    A token survives only if log2 w <= this - (zmax - z) log2 e."""
    r = 53.0 + (zmax - best + margin) * _LOG2E
    return np.float32(min(r + 2.0 ** -20 * (1.0 + abs(r)), 60.0))


@njit(cache=True, nogil=True, error_model="numpy")
def _compact(ids: np.ndarray, s: np.ndarray, cnt: int, floor: float) -> int:
    """Drop the buffered tokens scoring below ``floor``; the new count."""
    k = 0
    for j in range(cnt):
        if s[j] >= floor:
            ids[k] = ids[j]
            s[k] = s[j]
            k += 1
    return k


@njit(cache=True, nogil=True, error_model="numpy")
def _finish(ids: np.ndarray, s: np.ndarray, cnt: int, floor: float, out: np.ndarray) -> int:
    """Write the tokens scoring >= floor to ``out`` in ascending id order; their number."""
    k = _compact(ids, s, cnt, floor)
    for j in range(1, k):  # insertion sort: k is a handful
        x = ids[j]
        i = j - 1
        while i >= 0 and ids[i] > x:
            ids[i + 1] = ids[i]
            i -= 1
        ids[i + 1] = x
    for j in range(k):
        out[j] = ids[j]
    return k


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _may_win(w: np.uint64, x: np.float32, xmax: np.float32, scale: np.float32, reach: np.float32) -> bool:
    """The cheap necessary condition w <= 2^(floor(reach - (xmax - x) scale) + 1), scale = log2(e) / t.

    floor(log2 w) <= log2 w <= reach - (zmax - z) log2 e for a token that can still win; shifting
    w right by floor(...) + 1 leaves 0 exactly when w < 2^(floor + 1). x = -inf gives a negative
    bound (shift 0: w >= 1 never passes). float32 rounding of (xmax - x) scale is within the margin."""
    b = reach - (xmax - x) * scale
    b = b if b > np.float32(-1.0) else np.float32(-1.0)  # also -inf -> -1 (no int conversion of inf)
    sh = np.int32(b) + np.int32(1)  # truncation = floor for b >= 0; b in [-1, 0) -> shift 0 or 1 (w = 1 only)
    return (w >> np.uint64(sh)) == np.uint64(0)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_hits(x: np.ndarray, b0: int, b1: int, xmax: np.float32, scale: np.float32, reach: np.float32,
                rh: np.uint64, tok: np.ndarray, w_out: np.ndarray) -> int:
    """Vectorised passes over tokens [b0, b1): store each w, count the tokens that may still win.

    Two loops because LLVM vectorises each alone (AVX2: the 64-bit multiplies as 32-bit halves,
    the per-lane shifts as vpsrlvq) and gives up on the two fused."""
    for v in range(b0, b1):
        w_out[v - b0] = _TWO53 - (_mix(rh + tok[v]) >> _S11)  # w in [1, 2^53]: g <= log(2^53 / w)
    hits = 0
    for v in range(b0, b1):
        hits += _may_win(w_out[v - b0], x[v], xmax, scale, reach)
    return hits


@njit(cache=True, nogil=True, error_model="numpy")
def _evaluate_block(x: np.ndarray, b0: int, b1: int, t: np.float32, xmax: np.float32, scale: np.float32,
                    margin: float, zmax: float, rh: np.uint64, tok: np.ndarray, w_buf: np.ndarray, ids: np.ndarray,
                    s: np.ndarray, best: float, cnt: int, n_eval: int) -> tuple[float, int, int]:
    """The block's tokens that pass the test with the row's current best: their exact float64 scores;
    those within the margin of the best into (ids, s). The new (best, count (-1: overflow), n_eval)."""
    K = ids.shape[0]
    reach = _reach(zmax, best, margin)
    for v in range(b0, b1):
        if not _may_win(w_buf[v - b0], x[v], xmax, scale, reach):
            continue
        sv = float(x[v] / t) + _gumbel64(_mix(rh + tok[v]))
        n_eval += 1
        if sv < best - margin:
            continue
        if cnt == K:
            cnt = _compact(ids, s, cnt, max(best, sv) - margin)
            if cnt == K:
                return best, -1, n_eval
        ids[cnt] = v
        s[cnt] = sv
        cnt += 1
        if sv > best:
            best = sv
            reach = _reach(zmax, best, margin)
    return best, cnt, n_eval


@njit(cache=True, nogil=True, error_model="numpy")
def scan_rows(xf: np.ndarray, rs: int, V: int, t: np.float32, xmax: np.ndarray, rows: np.ndarray, tok: np.ndarray,
              cand: np.ndarray, n: np.ndarray, evaluated: np.ndarray) -> None:
    """Every row of the logits (flat float32, row r at xf[r*rs : r*rs + V]; z = x / t): candidates into
    cand (R, K) in ascending id order, their number into n (0: a reference row, -1: overflow), exact
    evaluations into ``evaluated``.

    Token blocks outside, rows inside, so a block's token parts stay in L1 for all rows; each row
    still sees its tokens in id order, keeping its own running best."""
    R, K = cand.shape
    ids = np.empty((R, K), np.int64)
    s = np.empty((R, K), np.float64)
    best = np.empty(R, np.float64)
    zmax = np.empty(R, np.float32)
    margin = np.empty(R, np.float64)
    cnt = np.zeros(R, np.int64)
    for r in range(R):
        zmax[r] = xmax[r] / t  # max of x / t: division by t > 0 is monotone, and so is rounding
        margin[r] = margin_of(zmax[r])
        best[r] = float(zmax[r]) + G_MIN  # a lower bound of the best score: the most likely token has g >= G_MIN
        evaluated[r] = 0
        if not math.isfinite(zmax[r]):
            cnt[r] = -1  # a reference row
    scale = np.float32(_LOG2E) / t
    w_buf = np.empty(_BLOCK, np.uint64)
    for b0 in range(0, V, _BLOCK):
        b1 = min(b0 + _BLOCK, V)
        for r in range(R):
            if cnt[r] < 0:
                continue
            x = xf[r * rs:r * rs + V]
            if _block_hits(x, b0, b1, xmax[r], scale, _reach(zmax[r], best[r], margin[r]), rows[r], tok, w_buf):
                best[r], cnt[r], evaluated[r] = _evaluate_block(
                    x, b0, b1, t, xmax[r], scale, margin[r], zmax[r], rows[r], tok, w_buf, ids[r], s[r], best[r],
                    cnt[r], evaluated[r])
    for r in range(R):
        n[r] = 0 if not math.isfinite(zmax[r]) else -1 if cnt[r] < 0 else _finish(
            ids[r], s[r], cnt[r], best[r] - margin[r], cand[r])
