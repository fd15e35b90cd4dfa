"""Compiled beta-binomial log-likelihoods and the per-state M-step.

With a = p (1 - rho) / rho and b = (1 - p) (1 - rho) / rho,

    log BB(mu | c) = log C(c, mu) + R(a, mu) + R(b, c - mu) - R(a + b, c),
    R(x, n) = log Gamma(x + n) - log Gamma(x) = sum_{k < n} log(x + k).

So a table of distinct (c, mu) pairs costs one table of R per state (up to the largest c)
and three lookups per pair; and the M-step's objective, sum over pairs of w log BB, is
sum_j Wa[j] log(a + j) + Wb[j] log(b + j) - Wc[j] log(a + b + j) with Wa[j] the weight of
pairs with mu > j, Wb[j] with c - mu > j, Wc[j] with c > j: its cost is the largest
coverage, not the number of pairs or bins. Where a few pairs are far deeper than the rest (a
mitochondrion or a spike-in at thousands of reads per CpG beside a genome at tens), the sums
stop at a cut and each deeper pair adds its terms beyond it in closed form (log-gamma and
its derivatives): the cost is then the cut plus those pairs.
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
                out[k, h] = (coef[k] + base + math.lgamma(a[h] + mu) + math.lgamma(b[h] + (c - mu))
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
def entry_logliks(c, mu, coef, offsets, samples, levels, a, b, dispersed):
    """The log-likelihood of each distinct (coverage c, methylated mu) entry of a histogram
    row (the one-pass refinement's, learn/histograms.py) in each state (entries, m), each slot
    group g's entries (offsets[g]:offsets[g + 1], of sample samples[g]; coef their log
    binomial coefficients) binomial at ``levels`` (m, S) or, ``dispersed``, beta-binomial with
    parameters ``a``, ``b`` (m, S; read only then); with each entry's largest over the states
    (entries,) and the table less it, for the caller to exponentiate (numpy's vectorized exp
    is several times faster than a scalar one). Beside betabinomial_table, which it calls: a
    kernel cached by numba is not compiled again when a kernel of another file that it calls
    changes."""
    n, m = c.size, levels.shape[0]
    log_table = np.empty((n, m))
    for g in range(samples.size):
        lo, hi, s = offsets[g], offsets[g + 1], samples[g]
        if dispersed:
            betabinomial_table(c[lo:hi], mu[lo:hi], coef[lo:hi], a[:, s].copy(), b[:, s].copy(), log_table[lo:hi])
            continue
        for h in range(m):
            log_p, log_q = math.log(levels[h, s]), math.log1p(-levels[h, s])
            for k in range(lo, hi):
                log_table[k, h] = coef[k] + mu[k] * log_p + (c[k] - mu[k]) * log_q
    shift = np.empty(n)
    centered = np.empty((n, m))
    for k in range(n):
        top = log_table[k, 0]
        for h in range(1, m):
            top = max(top, log_table[k, h])
        shift[k] = top
        for h in range(m):
            centered[k, h] = log_table[k, h] - top
    return log_table, shift, centered


@njit(cache=True, nogil=True)
def entry_slopes(c, mu, offsets, samples, levels, a, b, dispersed, resp, g_levels, g_scale):
    """entry_logliks' derivatives weighted by the entries' posterior counts ``resp`` (entries,
    m): added into g_levels (m, S) in the levels and, ``dispersed``, into g_scale (m, S) in
    v = log(a + b) at a fixed level (the chain rule through betabinomial_slopes' a and b)."""
    m = levels.shape[0]
    g_by_a, g_by_b = np.empty(m), np.empty(m)
    for g in range(samples.size):
        lo, hi, s = offsets[g], offsets[g + 1], samples[g]
        if dispersed:
            for h in range(m):
                g_by_a[h], g_by_b[h] = 0.0, 0.0
            a_s, b_s = a[:, s].copy(), b[:, s].copy()
            betabinomial_slopes(c[lo:hi], mu[lo:hi], resp[lo:hi], a_s, b_s, g_by_a, g_by_b)
            for h in range(m):
                g_levels[h, s] += (a_s[h] + b_s[h]) * (g_by_a[h] - g_by_b[h])
                g_scale[h, s] += a_s[h] * g_by_a[h] + b_s[h] * g_by_b[h]
            continue
        for h in range(m):
            up, down = 0.0, 0.0
            for k in range(lo, hi):
                up += resp[k, h] * mu[k]
                down += resp[k, h] * (c[k] - mu[k])
            g_levels[h, s] += up / levels[h, s] - down / (1.0 - levels[h, s])


DEEP_PAIR_COST = 8.0  # a deep pair's closed-form terms cost about as much as this many sums' terms
MIN_CUT = 64  # the closed form's series (_digamma_far, _trigamma_far) hold to double precision beyond it
# the closed form is taken where it is 16 times cheaper: the M-step's optimum then moves by rounding
# (1e-7), so the methylomes of ordinary depths keep their sums, and their fits, as they were
SAVING = 16.0


@njit(cache=True, nogil=True)
def sum_cut(coverage, weights):
    """Where the M-step's sums stop (tail_weights): the largest weighted coverage, or a lower
    cut where the pairs beyond it are so few that the cut and their closed form cost under
    1 / SAVING of the sums up to the largest coverage."""
    top = np.int64(0)
    for k in range(coverage.size):
        if weights[k] > 0 and coverage[k] > top:
            top = coverage[k]
    # any cut worth taking lies below top / SAVING, and the pairs beyond it cost DEEP_PAIR_COST each:
    # where those beyond top / SAVING already cost too much (ordinary depths), no sort is needed
    beyond = 0
    for k in range(coverage.size):
        if weights[k] > 0 and coverage[k] > top / SAVING:
            beyond += 1
    if top <= SAVING * MIN_CUT or SAVING * DEEP_PAIR_COST * beyond >= top:
        return top
    deep = np.sort(coverage[(weights > 0) & (coverage > MIN_CUT)])[::-1]
    best, cut = float(top), top
    for d in range(1, deep.size + 1):  # a cut at the next coverage down, or at MIN_CUT: d pairs beyond it
        here = max(deep[d], MIN_CUT) if d < deep.size else MIN_CUT
        if deep[d - 1] > here:
            cost = here + DEEP_PAIR_COST * d
            if cost < best:
                best, cut = cost, here
        if here == MIN_CUT:
            break
    return cut if SAVING * best < top else top


@njit(cache=True, nogil=True)
def tail_weights(coverage, methylated, weights, cut):
    """(Wa, Wb, Wc), each (cut,): the weight of pairs with mu > j, c - mu > j and c > j for
    j < cut; and the pairs reaching past the cut, as (counts, weights) for mu, c - mu and c
    (each count above the cut)."""
    wa = np.zeros(cut + 1)
    wb = np.zeros(cut + 1)
    wc = np.zeros(cut + 1)
    n_deep = 0
    for k in range(coverage.size):
        if weights[k] > 0 and coverage[k] > cut:
            n_deep += 1
    deep_n = np.zeros((3, n_deep), np.int64)
    deep_w = np.zeros((3, n_deep))
    d = 0
    for k in range(coverage.size):
        w = weights[k]
        if w > 0:
            counts = (methylated[k], coverage[k] - methylated[k], coverage[k])
            for i, arr in enumerate((wa, wb, wc)):
                arr[min(counts[i], cut)] += w
            if coverage[k] > cut:
                for i in range(3):
                    if counts[i] > cut:
                        deep_n[i, d], deep_w[i, d] = counts[i], w
                d += 1
    # from "exactly j" to "more than j"
    for arr in (wa, wb, wc):
        acc = 0.0
        for j in range(cut, -1, -1):
            here = arr[j]
            arr[j] = acc
            acc += here
    return wa[:cut], wb[:cut], wc[:cut], deep_n, deep_w


@njit(cache=True, nogil=True)
def _digamma_far(x):
    """digamma(x) for x >= MIN_CUT, by its asymptotic series."""
    r = 1.0 / (x * x)
    return math.log(x) - 0.5 / x - r * (1.0 / 12 - r * (1.0 / 120 - r * (1.0 / 252 - r * (1.0 / 240))))


@njit(cache=True, nogil=True)
def _trigamma_far(x):
    """trigamma(x) for x >= MIN_CUT, by its asymptotic series."""
    r = 1.0 / (x * x)
    return 1.0 / x + 0.5 * r + r / x * (1.0 / 6 - r * (1.0 / 30 - r * (1.0 / 42 - r * (1.0 / 30))))


@njit(cache=True, nogil=True)
def _beyond_cut(x, cut, counts, weights):
    """sum_k weights[k] * (log Gamma(x + counts[k]) - log Gamma(x + cut)): the terms log(x + j),
    cut <= j < counts[k], that the sums leave out; with its first and second derivatives in x."""
    f = g = h = 0.0
    if counts.size == 0:
        return f, g, h
    base_f, base_g, base_h = math.lgamma(x + cut), _digamma_far(x + cut), _trigamma_far(x + cut)
    for k in range(counts.size):
        w, y = weights[k], x + counts[k]
        if w != 0.0:
            f += w * (math.lgamma(y) - base_f)
            g += w * (_digamma_far(y) - base_g)
            h += w * (_trigamma_far(y) - base_h)
    return f, g, h


@njit(cache=True, nogil=True)
def _value_and_derivatives(wa, wb, wc, deep_n, deep_w, a, b):
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
    if deep_n.shape[1]:  # the pairs beyond the sums' cut
        cut = wc.size
        fa, da, dda = _beyond_cut(a, cut, deep_n[0], deep_w[0])
        fb, db, ddb = _beyond_cut(b, cut, deep_n[1], deep_w[1])
        fc, dc, ddc = _beyond_cut(a + b, cut, deep_n[2], deep_w[2])
        f += fa + fb - fc
        ga += da - dc
        gb += db - dc
        haa += dda
        hbb += ddb
        hab -= ddc  # hab is minus the curvature of the c terms, as in the sums
    return f, ga, gb, haa + hab, hbb + hab, hab


@njit(cache=True, nogil=True)
def _at(wa, wb, wc, deep_n, deep_w, u, v):
    """(s = a + b, p, a, b, then _value_and_derivatives) at u = logit p, v = log(a + b)."""
    s = math.exp(v)
    p = 1.0 / (1.0 + math.exp(-u))
    a, b = p * s, (1.0 - p) * s
    f, ga, gb, haa, hbb, hab = _value_and_derivatives(wa, wb, wc, deep_n, deep_w, a, b)
    return s, p, a, b, f, ga, gb, haa, hbb, hab


@njit(cache=True, nogil=True)
def betabinomial_newton(wa, wb, wc, deep_n, deep_w, u, v, u_bounds, v_bounds, max_iter=100):
    """Maximize the M-step objective (tail_weights' sums and deep pairs) over u = logit p and
    v = log(a + b) within bounds, by Newton's method on the coordinates not held at a bound
    (gradient ascent where the Hessian is not negative definite), with backtracking. Returns
    (u, v). An accepted point's derivatives come with its value (each pass sums over every
    coverage up to the cut: on RRBS depths, thousands of terms)."""
    s, p, a, b, f, ga, gb, haa, hbb, hab = _at(wa, wb, wc, deep_n, deep_w, u, v)
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
            trial = _at(wa, wb, wc, deep_n, deep_w, nu, nv)
            if trial[4] >= f:
                moved = abs(nu - u) > 1e-12 or abs(nv - v) > 1e-12
                u, v = nu, nv
                s, p, a, b, f, ga, gb, haa, hbb, hab = trial
                break
            step *= 0.5
        if not moved:
            break
    return u, v
