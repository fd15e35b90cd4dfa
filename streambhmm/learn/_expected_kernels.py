"""Compiled kernel of the refinement's expected-feature tables (streambhmm.learn.expected):
binomial mixtures of table rows, summed over the terms that carry any weight."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# Terms of a binomial pmf below exp(-LOG_FLOOR_BELOW_PEAK) times its largest one are left out:
# all of them together weigh less than 1e-30, far below the rounding of any table entry that
# matters (a feature probability at another coverage, or of another state, dwarfs it).
LOG_FLOOR_BELOW_PEAK = 69.0


@njit(cache=True, nogil=True)
def binomial_mixtures(n, levels, log_factorial, rows, steps, log_floor):
    """(out, slope_out): out[g] = sum_k Bin(k; n, levels[g]) rows[k] for each level (rows
    (n + 1, K)) and slope_out[g] = sum_k Bin(k; n - 1, levels[g]) steps[k] (steps (n, L); zeros
    when n = 0). The pmf is log_factorial[n] - log_factorial[k] - log_factorial[n - k] + k log p
    + (n - k) log(1 - p) (log_factorial[i] = log i!), its terms more than ``log_floor`` below
    its peak left out: from the mode outwards, until they fall below it (the log-pmf is concave
    in k). Bin(k; n - 1, p) is Bin(k; n, p) (n - k) / (n (1 - p)): one exp serves both sums."""
    n_levels, width, slope_width = levels.size, rows.shape[1], steps.shape[1]
    out = np.zeros((n_levels, width))
    slope_out = np.zeros((n_levels, slope_width))
    for g in range(n_levels):
        p = levels[g]
        if p <= 0.0 or p >= 1.0:  # all the mass at 0 or n (at 0 or n - 1 for the slopes)
            k = 0 if p <= 0.0 else n
            for j in range(width):
                out[g, j] = rows[k, j]
            if n > 0:
                for j in range(slope_width):
                    slope_out[g, j] = steps[0 if p <= 0.0 else n - 1, j]
            continue
        log_p, log_q = math.log(p), math.log1p(-p)
        to_slope = 1.0 / (n * (1.0 - p)) if n > 0 else 0.0
        mode = min(int((n + 1) * p), n)
        floor = (log_factorial[n] - log_factorial[mode] - log_factorial[n - mode] + mode * log_p
                 + (n - mode) * log_q) - log_floor
        for direction in (-1, 1):
            k = mode if direction < 0 else mode + 1
            while 0 <= k <= n:
                log_pmf = log_factorial[n] - log_factorial[k] - log_factorial[n - k] + k * log_p + (n - k) * log_q
                if log_pmf < floor:
                    break
                weight = math.exp(log_pmf)
                for j in range(width):
                    out[g, j] += weight * rows[k, j]
                if k < n:
                    slope_weight = weight * (n - k) * to_slope
                    for j in range(slope_width):
                        slope_out[g, j] += slope_weight * steps[k, j]
                k += direction
    return out, slope_out


# exp of anything below this is 0.0 in float64 (the smallest subnormal is exp(-744.4))
LOG_UNDERFLOW = -750.0


@njit(cache=True, nogil=True)
def edge_tails(n, log_p, log_q, log_factorial):
    """For Y ~ Bin(n, x) at each edge x (its log x and log(1 - x) in ``log_p``, ``log_q``; E
    edges): ``rows`` (n, 2E), P(Y > mu) in column e and P(Y <= mu) in column E + e, mu = 0..n-1,
    and ``steps`` (n - 1, E), P(Y > mu + 1) - P(Y > mu). The pmf is that of
    features.log_binomial_pmf, each tail summed from its end inwards as numpy's cumulative
    sums of it are; terms whose log is below LOG_UNDERFLOW are 0 without an exp (from the
    mode outwards until there: the log-pmf is concave in k)."""
    n_edges = log_p.size
    pmf = np.zeros((n + 1, n_edges))
    for e in range(n_edges):
        mode = 0 if log_p[e] == -np.inf else n if log_q[e] == -np.inf else min(int((n + 1) * math.exp(log_p[e])), n)
        for direction in (-1, 1):
            k = mode if direction < 0 else mode + 1
            while 0 <= k <= n:
                log_pmf = log_factorial[n] - log_factorial[k] - log_factorial[n - k]
                log_pmf += k * log_p[e] if k > 0 else 0.0
                log_pmf += (n - k) * log_q[e] if k < n else 0.0
                if log_pmf < LOG_UNDERFLOW:
                    break
                pmf[k, e] = math.exp(log_pmf)
                k += direction
    rows = np.empty((n, 2 * n_edges))
    below = np.zeros(n_edges)
    for mu in range(n):
        for e in range(n_edges):
            below[e] += pmf[mu, e]
            rows[mu, n_edges + e] = below[e]
    above = np.zeros(n_edges)
    for mu in range(n - 1, -1, -1):
        for e in range(n_edges):
            above[e] += pmf[mu + 1, e]
            rows[mu, e] = above[e]
    steps = np.empty((max(n - 1, 0), n_edges))
    for mu in range(n - 1):
        for e in range(n_edges):
            steps[mu, e] = rows[mu + 1, e] - rows[mu, e]
    return rows, steps
