"""Slow, obviously correct implementations: baselines for tests and benchmarks.

Nothing here is used by the fitting path. The moments are built position by position
with an einsum over all triples, costing (S*D)^3 per triple.
"""

from __future__ import annotations

import numpy as np

from .features import beta_map
from .moments import Moments
from .validation import validate_counts


def naive_moments(methylated, coverage, lengths=None, n_bins: int = 30) -> Moments:
    mu, cov, lengths = validate_counts(methylated, coverage, lengths)
    n, n_samples = mu.shape
    feats = beta_map(cov, mu, n_bins).reshape(n, n_samples * n_bins)
    out = Moments.zeros(n_samples, n_bins)
    offset = 0
    for length in lengths:
        if length >= 3:
            f = feats[offset:offset + length]
            f1, f2, f3 = f[:-2], f[1:-1], f[2:]
            c2, m2 = cov[offset + 1:offset + length - 1], mu[offset + 1:offset + length - 1]
            out.p12 += np.einsum("ti,tj->ij", f1, f2)
            out.p13 += np.einsum("ti,tj->ij", f1, f3)
            out.p23 += np.einsum("ti,tj->ij", f2, f3)
            out.p123 += np.einsum("ti,tj,tk->ijk", f1, f2, f3)
            out.b_methylated += np.einsum("ts,tj->sj", m2, f3)
            out.b_coverage += np.einsum("ts,tj->sj", c2, f3)
            out.inv_coverage += (1.0 / (c2 + 2.0)).sum(axis=0)
            out.sq_norm_13 += float(((f1 * f1).sum(1) * (f3 * f3).sum(1)).sum())
            out.n_triples += length - 2
        offset += length
    return out
