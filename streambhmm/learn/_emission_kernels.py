"""Compiled beta-binomial log-likelihoods and the per-state M-step.

With a = p (1 - rho) / rho and b = (1 - p) (1 - rho) / rho,

    log BB(mu | c) = log C(c, mu) + R(a, mu) + R(b, c - mu) - R(a + b, c),
    R(x, n) = log Gamma(x + n) - log Gamma(x) = sum_{k < n} log(x + k).

So a table of distinct (c, mu) pairs costs one table of R per state (up to the largest c)
and three lookups per pair; and the M-step's objective, sum over pairs of w log BB, is
sum_j Wa[j] log(a + j) + Wb[j] log(b + j) - Wc[j] log(a + b + j) with Wa[j] the weight of
pairs with mu > j, Wb[j] with c - mu > j, Wc[j] with c > j: its cost is the largest
coverage, not the number of pairs or bins.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _rising_logs(x, n, out):
    """out[j] = R(x, j) = sum_{k < j} log(x + k) for j = 0..n."""
    out[0] = 0.0
    acc = 0.0
    for j in range(n):
        acc += math.log(x + j)
        out[j + 1] = acc


@njit(cache=True, nogil=True)
def _rising_slopes(x, n, out):
    """out[j] = dR(x, j) / dx = sum_{k < j} 1 / (x + k) for j = 0..n."""
    out[0] = 0.0
    acc = 0.0
    for j in range(n):
        acc += 1.0 / (x + j)
        out[j + 1] = acc


@njit(cache=True, nogil=True)
def betabinomial_table(coverage, methylated, coef, a, b, out):
    """out[k, h] = log BB(methylated[k] | coverage[k], a[h], b[h]) for int64 pairs (K,)."""
    n_pairs = coverage.size
    top = np.int64(0)  # not the literal 0: numba would compile _rising_logs once more for it
    for k in range(n_pairs):
        top = max(top, coverage[k])
    if top <= 4 * n_pairs + 64:  # tables of R: one log per coverage value and state
        ra = np.empty(top + 1)
        rb = np.empty(top + 1)
        rab = np.empty(top + 1)
        for h in range(a.size):
            _rising_logs(a[h], top, ra)
            _rising_logs(b[h], top, rb)
            _rising_logs(a[h] + b[h], top, rab)
            for k in range(n_pairs):
                c, mu = coverage[k], methylated[k]
                out[k, h] = coef[k] + ra[mu] + rb[c - mu] - rab[c]
    else:  # a few pairs of very deep coverage: log-gamma per pair
        for h in range(a.size):
            base = math.lgamma(a[h] + b[h]) - math.lgamma(a[h]) - math.lgamma(b[h])
            for k in range(n_pairs):
                c, mu = coverage[k], methylated[k]
                out[k, h] = (coef[k] + base + math.lgamma(a[h] + mu) + math.lgamma(b[h] + c - mu)
                             - math.lgamma(a[h] + b[h] + c))


@njit(cache=True, nogil=True)
def betabinomial_slopes(coverage, methylated, resp, a, b, g_a, g_b):
    """Add sum_k resp[k, h] d log BB(methylated[k] | coverage[k], a[h], b[h]) / d a[h] into
    g_a[h] (and in b[h] into g_b[h]) for int64 pairs (K,) and weights resp (K, m); dR/dx is
    tabulated per state up to the largest coverage (_rising_slopes)."""
    top = np.int64(0)  # not the literal 0 (see betabinomial_table)
    for k in range(coverage.size):
        top = max(top, coverage[k])
    da = np.empty(top + 1)
    db = np.empty(top + 1)
    dab = np.empty(top + 1)
    for h in range(a.size):
        _rising_slopes(a[h], top, da)
        _rising_slopes(b[h], top, db)
        _rising_slopes(a[h] + b[h], top, dab)
        sum_a = 0.0
        sum_b = 0.0
        for k in range(coverage.size):
            c, mu = coverage[k], methylated[k]
            sum_a += resp[k, h] * (da[mu] - dab[c])
            sum_b += resp[k, h] * (db[c - mu] - dab[c])
        g_a[h] += sum_a
        g_b[h] += sum_b


@njit(cache=True, nogil=True)
def tail_weights(coverage, methylated, weights):
    """(Wa, Wb, Wc), each (largest weighted coverage,): the weight of pairs with mu > j,
    c - mu > j and c > j."""
    top = 0
    for k in range(coverage.size):
        if weights[k] > 0 and coverage[k] > top:
            top = coverage[k]
    wa = np.zeros(top + 1)
    wb = np.zeros(top + 1)
    wc = np.zeros(top + 1)
    for k in range(coverage.size):
        w = weights[k]
        if w > 0:
            wa[methylated[k]] += w
            wb[coverage[k] - methylated[k]] += w
            wc[coverage[k]] += w
    # from "exactly j" to "more than j"
    for arr in (wa, wb, wc):
        acc = 0.0
        for j in range(top, -1, -1):
            here = arr[j]
            arr[j] = acc
            acc += here
    return wa[:top], wb[:top], wc[:top]


@njit(cache=True, nogil=True)
def _value_and_derivatives(wa, wb, wc, a, b):
    """The objective in (a, b), its gradient and Hessian."""
    f = 0.0
    ga = gb = haa = hbb = hab = 0.0
    for j in range(wc.size):
        xa, xb, xab = a + j, b + j, a + b + j
        f += wa[j] * math.log(xa) + wb[j] * math.log(xb) - wc[j] * math.log(xab)
        ia, ib, iab = wa[j] / xa, wb[j] / xb, wc[j] / xab
        ga += ia - iab
        gb += ib - iab
        haa += -ia / xa
        hbb += -ib / xb
        hab += iab / xab
    return f, ga, gb, haa + hab, hbb + hab, hab


@njit(cache=True, nogil=True)
def _at(wa, wb, wc, u, v):
    """(s = a + b, p, a, b, then _value_and_derivatives) at u = logit p, v = log(a + b)."""
    s = math.exp(v)
    p = 1.0 / (1.0 + math.exp(-u))
    a, b = p * s, (1.0 - p) * s
    f, ga, gb, haa, hbb, hab = _value_and_derivatives(wa, wb, wc, a, b)
    return s, p, a, b, f, ga, gb, haa, hbb, hab


@njit(cache=True, nogil=True)
def betabinomial_newton(wa, wb, wc, u, v, u_bounds, v_bounds, max_iter=100):
    """Maximize the M-step objective over u = logit p and v = log(a + b) within bounds, by
    Newton's method on the coordinates not held at a bound (gradient ascent where the
    Hessian is not negative definite), with backtracking. Returns (u, v). An accepted
    point's derivatives come with its value (each pass sums over every coverage up to the
    deepest: on RRBS depths, thousands of terms)."""
    s, p, a, b, f, ga, gb, haa, hbb, hab = _at(wa, wb, wc, u, v)
    for _ in range(max_iter):
        q = s * p * (1.0 - p)  # da/du = -db/du
        gu = q * (ga - gb)
        gv = a * ga + b * gb
        huu = q * q * (haa - 2.0 * hab + hbb) + q * (1.0 - 2.0 * p) * (ga - gb)
        huv = q * (a * haa + b * hab - a * hab - b * hbb) + q * (ga - gb)
        hvv = a * a * haa + 2.0 * a * b * hab + b * b * hbb + a * ga + b * gb
        free_u = not ((u <= u_bounds[0] and gu < 0) or (u >= u_bounds[1] and gu > 0))
        free_v = not ((v <= v_bounds[0] and gv < 0) or (v >= v_bounds[1] and gv > 0))
        du = dv = 0.0
        if free_u and free_v and huu < 0 and huu * hvv - huv * huv > 0:
            det = huu * hvv - huv * huv
            du = -(hvv * gu - huv * gv) / det
            dv = -(huu * gv - huv * gu) / det
        else:
            if free_u:
                du = -gu / huu if huu < 0 else gu / (abs(gu) + 1.0)
            if free_v:
                dv = -gv / hvv if hvv < 0 else gv / (abs(gv) + 1.0)
        step = 1.0
        moved = False
        for _ in range(40):
            nu = min(max(u + step * du, u_bounds[0]), u_bounds[1])
            nv = min(max(v + step * dv, v_bounds[0]), v_bounds[1])
            trial = _at(wa, wb, wc, nu, nv)
            if trial[4] >= f:
                moved = abs(nu - u) > 1e-12 or abs(nv - v) > 1e-12
                u, v = nu, nv
                s, p, a, b, f, ga, gb, haa, hbb, hab = trial
                break
            step *= 0.5
        if not moved:
            break
    return u, v
