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
def binomial_mixtures(n, levels, log_factorial, rows, log_floor):
    """out[g] = sum_k Bin(k; n, levels[g]) rows[k] for each level (rows (n + 1, K)), the pmf
    as log_factorial[n] - log_factorial[k] - log_factorial[n - k] + k log p + (n - k) log(1 - p)
    (log_factorial[i] = log i!), leaving out the terms more than ``log_floor`` below the
    pmf's peak: from the mode outwards, until they fall below it (the log-pmf is concave in k)."""
    n_levels, width = levels.size, rows.shape[1]
    out = np.zeros((n_levels, width))
    for g in range(n_levels):
        p = levels[g]
        if p <= 0.0 or p >= 1.0:  # all the mass at 0 or n
            k = 0 if p <= 0.0 else n
            for j in range(width):
                out[g, j] = rows[k, j]
            continue
        log_p, log_q = math.log(p), math.log1p(-p)
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
                k += direction
    return out
