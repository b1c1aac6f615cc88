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
_INV53 = 2.0**-53
_TINY = float(np.finfo(np.float64).tiny)  # the reference's clamp of u = 0
_LOG2E = 1.0 / math.log(2.0)
# a lower bound of g: -log(-log tiny) = -6.5630 (u = tiny, the reference's clamp of u = 0)
G_MIN = -6.57
_BLOCK = 256  # tokens per vectorised block (256 and 1,024 measured alike; 4,096 slower)

# float32 exp (Cephes expf: Cody-Waite reduction by ln 2 in two parts, a degree-7 polynomial, 2^n from
# the exponent bits): max relative error 8e-8 on [-87, 0] (tests/test_cpu_argmax.py), written out
# because LLVM vectorises arithmetic but not a call to libm's exp (numba has no vector math library here)
_F32 = np.float32
_E_LOG2E, _E_C1, _E_C2 = _F32(1.4426950408889634), _F32(0.693359375), _F32(-2.12194440e-4)
_E_P = tuple(
    _F32(c)
    for c in (
        1.9875691500e-4,
        1.3981999507e-3,
        8.3334519073e-3,
        4.1665795894e-2,
        1.6666665459e-1,
        5.0000001201e-1,
    )
)
_E_LO = _F32(-87.0)  # below: 0 (e^-87 = 1.6e-38 per token is nothing next to the row's sum >= 1)
_E_HALF, _E_ONE, _E_ZERO = _F32(0.5), _F32(1.0), _F32(0.0)


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
    return 2.0**-10 + 2.0**-20 * (abs(zmax) + 64.0)


@njit(cache=True, nogil=True, error_model="numpy")
def _reach(zmax: float, best: float, margin: float) -> np.float32:
    """log2 of 2^53 exp(zmax - best + margin) in float32 (rounded up by 2^-20, at most 60).

    A token survives only if log2 w <= this - (zmax - z) log2 e."""
    r = 53.0 + (zmax - best + margin) * _LOG2E
    return np.float32(min(r + 2.0**-20 * (1.0 + abs(r)), 60.0))


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
def _may_win(
    w: np.uint64, x: np.float32, xmax: np.float32, scale: np.float32, reach: np.float32
) -> bool:
    """The cheap necessary condition w <= 2^(floor(reach - (xmax - x) scale) + 1), scale = log2(e) / t.

    floor(log2 w) <= log2 w <= reach - (zmax - z) log2 e for a token that can still win; shifting
    w right by floor(...) + 1 leaves 0 exactly when w < 2^(floor + 1). x = -inf gives a negative
    bound (shift 0: w >= 1 never passes). float32 rounding of (xmax - x) scale is within the margin."""
    b = reach - (xmax - x) * scale
    b = b if b > np.float32(-1.0) else np.float32(-1.0)  # also -inf -> -1 (no int conversion of inf)
    sh = np.int32(b) + np.int32(
        1
    )  # truncation = floor for b >= 0; b in [-1, 0) -> shift 0 or 1 (w = 1 only)
    return (w >> np.uint64(sh)) == np.uint64(0)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _block_hits(
    x: np.ndarray,
    b0: int,
    b1: int,
    xmax: np.float32,
    scale: np.float32,
    reach: np.float32,
    rh: np.uint64,
    tok: np.ndarray,
    w_out: np.ndarray,
) -> int:
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
def _evaluate_block(
    x: np.ndarray,
    b0: int,
    b1: int,
    t: np.float32,
    xmax: np.float32,
    scale: np.float32,
    margin: float,
    zmax: float,
    rh: np.uint64,
    tok: np.ndarray,
    w_buf: np.ndarray,
    ids: np.ndarray,
    s: np.ndarray,
    best: float,
    cnt: int,
    n_eval: int,
) -> tuple[float, int, int]:
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
def row_max(xi: np.ndarray) -> np.float32:
    """torch.amax of one float32 row given as its int32 view ``xi``: NaN if any entry is NaN.

    In integers, so that LLVM vectorises it without fast-math (a float max reduction needs 'nnan'): the
    IEEE bits mapped to a signed order (negative floats' magnitude bits flipped) keep the float order, -0
    < +0 aside (equal values either way); a NaN is an exponent of ones with a nonzero fraction."""
    best = np.int32(-2147483648)
    nan = np.int32(0)
    for v in range(xi.shape[0]):
        b = xi[v]
        nan |= np.int32((b & np.int32(0x7FFFFFFF)) > np.int32(0x7F800000))
        k = b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF))
        best = k if k > best else best
    if nan:
        return np.float32(np.nan)
    bits = np.int32(best ^ ((best >> np.int32(31)) & np.int32(0x7FFFFFFF)))
    return bits.view(np.float32)


@njit(cache=True, nogil=True, error_model="numpy")
def _scan_row(
    x: np.ndarray,
    V: int,
    t: np.float32,
    xmax: np.float32,
    zmax: np.float32,
    rh: np.uint64,
    tok: np.ndarray,
    ids: np.ndarray,
    s: np.ndarray,
    w_buf: np.ndarray,
    out: np.ndarray,
) -> tuple[int, int]:
    """One row with a finite maximum xmax (zmax = xmax / t): its candidates into ``out`` (ascending ids);
    (their number, or -1 on overflow; the exact evaluations)."""
    margin = margin_of(zmax)
    best = float(zmax) + G_MIN  # a lower bound of the best score: the most likely token has g >= G_MIN
    scale = np.float32(_LOG2E) / t
    cnt, n_eval = 0, 0
    for b0 in range(0, V, _BLOCK):
        b1 = min(b0 + _BLOCK, V)
        if _block_hits(x, b0, b1, xmax, scale, _reach(zmax, best, margin), rh, tok, w_buf):
            best, cnt, n_eval = _evaluate_block(
                x, b0, b1, t, xmax, scale, margin, zmax, rh, tok, w_buf, ids, s, best, cnt, n_eval
            )
            if cnt < 0:
                return -1, n_eval
    return _finish(ids, s, cnt, best - margin, out), n_eval


@njit(cache=True, nogil=True, error_model="numpy")
def scan_rows(
    xf: np.ndarray,
    rs: int,
    V: int,
    t: np.float32,
    rows: np.ndarray,
    tok: np.ndarray,
    cand: np.ndarray,
    n: np.ndarray,
    evaluated: np.ndarray,
    zmax: np.ndarray,
    sums: np.ndarray,
) -> None:
    """Every row of the logits (flat float32, row r at xf[r*rs : r*rs + V]; z = x / t), one row at a
    time: its largest z into zmax (torch.amax's value divided by t; NaN if the row holds one), its
    candidates into cand (R, K) in ascending id order and their number into n (0: no finite maximum, a
    reference row; -1: overflow), exact evaluations into ``evaluated``, and with ``sums`` of length R,
    sum_v e^(z - zmax) into it (:func:`row_exp_sum`).

    Rows outside, token blocks inside: each row is read from memory once, by the max, and its two more
    passes (the scan, the sum) find it in L2 (196 KB at V = 49,152; the token parts, 8 V bytes, stay
    there too). Fresh logits from the LM head are cold, and the earlier order (blocks outside, rows
    inside: 64 strided streams) cost 7.7 against 5.5 ms at B = 64 with the logits out of cache."""
    R, K = cand.shape
    xi = xf.view(np.int32)
    ids = np.empty(K, np.int64)
    s = np.empty(K, np.float64)
    w_buf = np.empty(_BLOCK, np.uint64)
    want_sums = sums.shape[0] == R
    for r in range(R):
        x = xf[r * rs : r * rs + V]
        m = row_max(xi[r * rs : r * rs + V])
        zm = m / t  # max of x / t: division by t > 0 is monotone, and so is rounding
        zmax[r] = zm
        evaluated[r] = 0
        if not math.isfinite(m):
            n[r] = 0  # a reference row
            if want_sums:
                sums[r] = math.nan
            continue
        n[r], evaluated[r] = _scan_row(x, V, t, m, zm, rows[r], tok, ids, s, w_buf, cand[r])
        if want_sums:
            sums[r] = row_exp_sum(x, t, zm)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _exp32(d: np.float32) -> np.float32:
    """e^d in float32 for d <= 0 (relative error < 1e-7 above -87; 0 from -87 down, and for d = -inf)."""
    dd = d if d > _E_LO else _E_LO
    n = _F32(np.int32(dd * _E_LOG2E - _E_HALF))  # round to nearest (truncation of a value <= -0.5)
    r = dd - n * _E_C1 - n * _E_C2  # |r| <= ln(2) / 2 (ln 2 in two parts: r exact to float32 rounding)
    p0, p1, p2, p3, p4, p5 = _E_P
    p = ((((p0 * r + p1) * r + p2) * r + p3) * r + p4) * r + p5
    p = p * r * r + r + _E_ONE
    bits = np.int32((np.int32(n) + np.int32(127)) << np.int32(23))  # 2^n, n in [-126, 0]
    v = p * bits.view(np.float32)
    return v if d > _E_LO else _E_ZERO


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def row_exp_sum(x: np.ndarray, t: np.float32, zmax: np.float32) -> float:
    """sum_v e^(fl32(x[v] / t) - zmax) in float64 over one float32 row (zmax finite).

    z = x / t is the IEEE float32 division torch's ``x / T`` does, so log(sum) + zmax is logsumexp(z)
    to float32 rounding (the summation order differs from torch's). ``reassoc`` lets LLVM vectorise the
    sum (in lanes, then added up); it reorders nothing else that could change the result beyond that
    (no reciprocal: 'arcp' is not set; tests/test_cpu_argmax.py measures the exp compiled here).
    Compiled on its own (not inlined by numba), so the flag reaches none of the scan's arithmetic."""
    acc = 0.0
    for v in range(x.shape[0]):
        acc += _exp32(x[v] / t - zmax)
    return acc


@njit(cache=True, nogil=True, error_model="numpy")
def exp_sums(xf: np.ndarray, rs: int, V: int, t: np.float32, zmax: np.ndarray, out: np.ndarray) -> None:
    """out[r] = :func:`row_exp_sum` of row r (xf[r*rs : r*rs + V]) for rows with a finite zmax; nan for
    others."""
    for r in range(zmax.shape[0]):
        zm = zmax[r]
        out[r] = row_exp_sum(xf[r * rs : r * rs + V], t, zm) if math.isfinite(zm) else math.nan
