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


# Tail terms below exp(LOG_SMALLEST_TERM) ~ 1.6e-270 are left out (0). binomial_mixtures
# weighs the tails by at least 1.4e-33 at the grid's levels up to LARGEST_TABULATED_COVERAGE
# (exp(-LOG_FLOOR_BELOW_PEAK) times a pmf's peak, times a slope's factor), so every product it
# forms stays a normal float: subnormal ones made it 2x slower on the 5 kb bins of a PMD call.
# What is lost is far below the criterion's floor of 1e-300 on a model's entries.
LOG_SMALLEST_TERM = -620.0


@njit(cache=True, nogil=True)
def edge_tails(n, log_p, log_q, log_factorial):
    """For Y ~ Bin(n, x) at each edge x (its log x and log(1 - x) in ``log_p``, ``log_q``; E
    edges): ``rows`` (n, 2E), P(Y > mu) in column e and P(Y <= mu) in column E + e, mu = 0..n-1,
    and ``steps`` (n - 1, E), P(Y > mu + 1) - P(Y > mu). The pmf is that of
    features.log_binomial_pmf, each tail summed from its end inwards as numpy's cumulative
    sums of it are; terms whose log is below LOG_SMALLEST_TERM are 0 without an exp (from the
    mode outwards until there: the log-pmf is concave in k), and so is a step smaller than
    its exp (a rounding residue)."""
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
                if log_pmf < LOG_SMALLEST_TERM:
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
    smallest = math.exp(LOG_SMALLEST_TERM)
    for mu in range(n - 1):
        for e in range(n_edges):
            step = rows[mu + 1, e] - rows[mu, e]
            steps[mu, e] = step if abs(step) >= smallest else 0.0
    return rows, steps


@njit(cache=True, nogil=True)
def beta_weights(a, b, log_p, log_q, edge, log_spacing):
    """The quadrature weights of overdispersion.LevelQuadrature for Beta(a[h], b[h]) (m,)
    over its nodes (log p and log(1 - p) of each interior node, then the tails beyond
    ``edge`` in logit): (3m, nodes + 2), the rows W, then dW/da, then dW/db; subnormals
    are zero (they slow the products that use the weights)."""
    m, n_interior = a.size, log_p.size
    n = n_interior + 2
    out = np.zeros((3 * m, n))
    log_w = np.empty(n)
    d_a = np.zeros(n)
    d_b = np.zeros(n)
    tiny = np.finfo(np.float64).tiny
    for h in range(m):
        # interior nodes: log of sigma(z)^a sigma(-z)^b dz; tails: integral of e^(a z) beyond the edge
        log_w[0] = -a[h] * edge - np.log(a[h])
        d_a[0] = -edge - 1.0 / a[h]
        for i in range(n_interior):
            log_w[i + 1] = a[h] * log_p[i] + b[h] * log_q[i] + log_spacing
            d_a[i + 1] = log_p[i]
            d_b[i + 1] = log_q[i]
        log_w[n - 1] = -b[h] * edge - np.log(b[h])
        d_b[n - 1] = -edge - 1.0 / b[h]
        top = log_w.max()
        total = 0.0
        for i in range(n):
            out[h, i] = np.exp(log_w[i] - top)
            total += out[h, i]
        mean_a = 0.0
        mean_b = 0.0
        for i in range(n):
            out[h, i] /= total
            mean_a += out[h, i] * d_a[i]
            mean_b += out[h, i] * d_b[i]
        for i in range(n):
            w = out[h, i]
            out[m + h, i] = w * (d_a[i] - mean_a)
            out[2 * m + h, i] = w * (d_b[i] - mean_b)
    for r in range(3 * m):
        for i in range(n):
            if abs(out[r, i]) < tiny:
                out[r, i] = 0.0
    return out


@njit(cache=True, nogil=True)
def dispersed_mixture(product, a, b, q, obs, slope, by_scale):
    """A sample's features under Beta-distributed levels, from ``product`` (3m, buckets * D):
    beta_weights' rows times the features of each bucket at the quadrature's nodes. Sets obs
    (D, m) to E[phi | h] mixed over the state's coverage buckets ``q`` (m, buckets), slope to
    its derivative in the level (at fixed a + b) and by_scale in v = log(a + b); returns
    each bucket's features (buckets, m, D)."""
    m, n_buckets = a.size, q.shape[1]
    d = product.shape[1] // n_buckets
    per_bucket = np.empty((n_buckets, m, d))
    for h in range(m):
        scale = a[h] + b[h]
        for j in range(d):
            value, level, spread = 0.0, 0.0, 0.0
            for k in range(n_buckets):
                x, d_a, d_b = product[h, k * d + j], product[m + h, k * d + j], product[2 * m + h, k * d + j]
                per_bucket[k, h, j] = x
                value += q[h, k] * x
                level += q[h, k] * scale * (d_a - d_b)
                spread += q[h, k] * (a[h] * d_a + b[h] * d_b)
            obs[j, h] = value
            slope[j, h] = level
            by_scale[j, h] = spread
    return per_bucket
