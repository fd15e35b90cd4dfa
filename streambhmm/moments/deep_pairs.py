"""Compiled kernels for pairs (c, mu) of many reads: their Beta map, from binomial tails
summed outward from mu, and their hypergeometric thinning rows.

The Beta(mu+1, c-mu+1) CDF at an edge x is P(Y > mu) for Y ~ Bin(c+1, x). Below the pair's
mean that tail is small and is summed upward from mu + 1; at or above the mean the survival
function P(Y <= mu) is, downward from mu. Either way the terms shrink from the first one on
(the mode lies the other side of mu), by a ratio each term, so a tail costs about as many
terms as it takes to fall below 1e-17 of the sum: a few near the mean, one or two far from
it. The first term is Loader's saddle-point binomial probability (as R's dbinom), in
logarithms, and a tail whose first term is tiny is summed in multiples of it, so no term that
counts is subnormal: the tails keep their relative precision down to the smallest normal
double (4e-13 against exact integer tails to 1,100 reads; 1e-10 in far tails at 1e8-4e9 reads,
where n p is rounded). scipy's betainc lost it near underflow.

A thinning row is the hypergeometric law of j methylated among ``cap`` reads drawn from the
pair's c. Its mode's probability is a product of cap ratios of integers, the rest follow by
the ratio of neighbours, outward until they fall below the floor: no table of log-factorials
as long as the deepest pair, and no cancellation between logarithms of c! (7e-15 relative
against exact fractions to 4e9 reads; log-factorials lost 1e-10 at 1e5 reads). The product
stays finite for the histograms' caps (up to 256; about 2^cap at most).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

# stirlerr(n) = log n! - ((n + 0.5) log n - n + log sqrt(2 pi)), tabulated below 16
_STIRLERR_SMALL = np.array([0.0] + [math.lgamma(n + 1.0) - (n + 0.5) * math.log(n) + n - 0.5 * math.log(2 * math.pi)
                                    for n in range(1, 16)])
# a tail stops once its terms are below this fraction of its sum
_TAIL_TOLERANCE = 1e-17
# below this logarithm exp() gives zero
_LOG_SMALLEST = math.log(5e-324)
# tails whose first term is below this are summed relative to it: above it, every term that
# counts (above 1e-17 of the sum) is a normal number
_LOG_SCALED_BELOW = math.log(1e-280)


@njit(cache=True, nogil=True)
def _stirlerr(n):
    if n <= 15:
        return _STIRLERR_SMALL[int(n)]
    nn = float(n) * n
    if n > 500:
        return (1 / 12 - (1 / 360) / nn) / n
    if n > 80:
        return (1 / 12 - (1 / 360 - (1 / 1260) / nn) / nn) / n
    if n > 35:
        return (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680) / nn) / nn) / nn) / n
    return (1 / 12 - (1 / 360 - (1 / 1260 - (1 / 1680 - (1 / 1188) / nn) / nn) / nn) / nn) / n


@njit(cache=True, nogil=True)
def _bd0(x, mean):
    """x log(x / mean) + mean - x, without cancellation when x is near the mean."""
    if abs(x - mean) < 0.1 * (x + mean):
        v = (x - mean) / (x + mean)
        total = (x - mean) * v
        term = 2 * x * v
        v = v * v
        for j in range(1, 1000):
            term *= v
            updated = total + term / (2 * j + 1)
            if updated == total:
                break
            total = updated
        return total
    return x * math.log(x / mean) + mean - x


@njit(cache=True, nogil=True)
def _log_binomial_probability(k, n, p, q):
    """log P(Y = k) for Y ~ Bin(n, p), 0 < p < 1 (Loader 2000); q = 1 - p, each a ratio of
    integers here. (features.log_binomial_pmf gives every k at once, from log-factorials.)"""
    if k == 0:
        return n * math.log(q)
    if k == n:
        return n * math.log(p)
    log_ratio = _stirlerr(n) - _stirlerr(k) - _stirlerr(n - k) - _bd0(float(k), n * p) - _bd0(float(n - k), n * q)
    return log_ratio - 0.5 * (math.log(2 * math.pi) + math.log(k) + math.log1p(-k / n))


@njit(cache=True, nogil=True)
def _tail_from(k, n, p, q, step):
    """P(Y = k) + P(Y = k + step) + ... (step +1 or -1) while the terms matter, for a k past
    which they only fall. A tail whose first term is below 1e-280 is summed in multiples
    of it, applied last (in logarithms), so that no term is subnormal: subnormal terms lose
    precision, and one times a ratio near 1 can round back to itself, and the sum stalls.
    A tail that underflows whatever its sum is not summed."""
    log_first = _log_binomial_probability(k, n, p, q)
    if log_first + math.log(n + 1.0) < _LOG_SMALLEST:
        return 0.0
    scaled = log_first < _LOG_SCALED_BELOW
    term = 1.0 if scaled else math.exp(log_first)
    total = term
    ratio = p / q if step > 0 else q / p
    while (k < n) if step > 0 else (k > 0):
        term *= ((n - k) / (k + 1.0) if step > 0 else k / (n - k + 1.0)) * ratio
        k += step
        total += term
        if term <= total * _TAIL_TOLERANCE:
            break
    return math.exp(log_first + math.log(total)) if scaled else total


@njit(cache=True, nogil=True)
def _tail(mu, n, p, q, upper):
    """P(Y > mu) if ``upper`` (summed upward from mu + 1: for p below (mu + 1) / (n + 1)), else
    P(Y <= mu) (summed downward from mu: for p at or above it); Y ~ Bin(n, p), mu < n."""
    if p == 0.0:  # Y = 0
        return 0.0 if upper else 1.0
    if q == 0.0:  # Y = n > mu
        return 1.0 if upper else 0.0
    return _tail_from(mu + 1, n, p, q, 1) if upper else _tail_from(mu, n, p, q, -1)


@njit(cache=True, nogil=True)
def beta_map_of_pairs(coverage, methylated, n_bins, out):
    """Write the Beta map of each pair (coverage[r], methylated[r]) into out[r, :n_bins].

    Bins below the pair's mean are differences of the CDF P(Y > mu), bins at or above it of
    the survival function P(Y <= mu), each a difference of two small numbers; the edge
    between takes the CDF as 1 - survival there (that edge's upper tail holds the mode)."""
    cdf = np.empty(n_bins + 1)
    sf = np.empty(n_bins + 1)
    for r in range(coverage.size):
        c, mu = coverage[r], methylated[r]
        n = c + 1
        mean = (mu + 1.0) / (c + 2.0)
        first_upper = 0  # the first bin whose lower edge is at or above the mean
        while first_upper < n_bins and first_upper / n_bins < mean:
            first_upper += 1
        for i in range(n_bins + 1):
            p = i / n_bins
            q = (n_bins - i) / n_bins
            if i < first_upper:
                cdf[i] = _tail(mu, n, p, q, True)
            else:
                sf[i] = _tail(mu, n, p, q, False)
                if i == first_upper:
                    cdf[i] = 1.0 - sf[i]
        for i in range(n_bins):
            out[r, i] = sf[i] - sf[i + 1] if i >= first_upper else cdf[i + 1] - cdf[i]


@njit(cache=True, nogil=True)
def thinning_rows(coverage, methylated, cap, floor, rows, lo, hi):
    """Write into rows[r] (zeros, length cap + 1) the hypergeometric probabilities of j = 0..cap
    methylated among cap reads drawn from pair r's c > cap, those at or above ``floor``; they
    lie between lo[r] and hi[r], each set here (the law is unimodal)."""
    for r in range(coverage.size):
        c, mu = coverage[r], methylated[r]
        unmethylated = c - mu
        j_min, j_max = max(0, cap - unmethylated), min(cap, mu)
        mode = min(max((cap + 1) * (mu + 1) // (c + 2), j_min), j_max)
        # C(cap, j) (mu)_j / (c)_j (c - mu)_(cap - j) / (c - j)_(cap - j), j = mode, in falling
        # factorials: cap factors, each a ratio of exact integers
        top = 1.0
        for i in range(mode):
            top *= (cap - i) * (mu - i) / ((i + 1.0) * (c - i))
        for i in range(cap - mode):
            top *= (unmethylated - i) / (c - mode - i)
        rows[r, mode] = top
        j, term = mode, top
        while j < j_max:
            term *= (mu - j) * (cap - j) / ((j + 1.0) * (unmethylated - cap + j + 1.0))
            if term < floor:
                break
            j += 1
            rows[r, j] = term
        hi[r] = j
        j, term = mode, top
        while j > j_min:
            term *= j * (unmethylated - cap + j) / ((mu - j + 1.0) * (cap - j + 1.0))
            if term < floor:
                break
            j -= 1
            rows[r, j] = term
        lo[r] = j
