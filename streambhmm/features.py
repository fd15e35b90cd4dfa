"""The Beta map and the table of distinct (coverage, methylated) pairs.

phi_i(c, mu) = I_{i/D}(mu+1, c-mu+1) - I_{(i-1)/D}(mu+1, c-mu+1), i = 1..D, the mass that
the Beta(mu+1, c-mu+1) posterior puts on the i-th of D equal bins of [0, 1]. The feature
depends only on the integer pair, so each distinct pair is mapped once and bins carry a
small integer code into that table. There is no coverage limit: the table holds exactly
the pairs present.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betainc, betaincc

# Above this many possible pair keys, fall back from a direct-address lookup to np.unique.
_DIRECT_KEY_LIMIT = 1 << 23


def beta_map(coverage, methylated, n_bins: int) -> np.ndarray:
    """Beta-map features for arrays of pairs; returns shape ``coverage.shape + (n_bins,)``.

    Each difference of regularized incomplete beta values is taken on the side of the
    distribution (CDF or survival function) where both values are small, so bins far in
    the upper tail keep full relative precision at any coverage.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    c = np.asarray(coverage, dtype=np.float64)[..., None]
    mu = np.asarray(methylated, dtype=np.float64)[..., None]
    a, b = mu + 1.0, c - mu + 1.0
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    lower = betainc(a, b, edges)
    upper = betaincc(a, b, edges)
    from_cdf = np.diff(lower, axis=-1)
    from_sf = -np.diff(upper, axis=-1)
    in_upper_tail = edges[:-1] >= a / (a + b)
    return np.where(in_upper_tail, from_sf, from_cdf)


def pair_keys(methylated: np.ndarray, coverage: np.ndarray) -> np.ndarray:
    """A unique non-negative int64 per pair: c (c + 1) / 2 + mu (triangular numbering)."""
    c = coverage.astype(np.int64, copy=False)
    return c * (c + 1) // 2 + methylated.astype(np.int64, copy=False)


def pairs_from_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Invert :func:`pair_keys`; returns (coverage, methylated)."""
    keys = np.asarray(keys, dtype=np.int64)
    c = ((np.sqrt(8.0 * keys + 1.0) - 1.0) // 2).astype(np.int64)
    # float rounding can put c off by one for huge keys; correct exactly in integers
    c -= (c * (c + 1) // 2 > keys).astype(np.int64)
    c += ((c + 1) * (c + 2) // 2 <= keys).astype(np.int64)
    return c, keys - c * (c + 1) // 2


@dataclass(frozen=True)
class FeatureTable:
    """Bins encoded as codes into a table of the distinct pairs present.

    ``codes[t, s]`` indexes ``table`` (K x D), ``coverage`` and ``methylated`` (K,).
    """

    codes: np.ndarray
    table: np.ndarray
    coverage: np.ndarray
    methylated: np.ndarray

    @property
    def n_bins(self) -> int:
        return self.table.shape[1]


def encode(methylated: np.ndarray, coverage: np.ndarray, n_bins: int) -> FeatureTable:
    """Encode validated counts of shape (n, S) and build their Beta-map table."""
    keys = pair_keys(methylated, coverage)
    max_key = int(keys.max()) if keys.size else 0
    if max_key < _DIRECT_KEY_LIMIT:
        present = np.zeros(max_key + 1, dtype=bool)
        present[keys] = True
        distinct = np.flatnonzero(present)
        lookup = np.cumsum(present, dtype=np.int64) - 1
        codes = lookup[keys]
    else:
        distinct, codes = np.unique(keys, return_inverse=True)
        codes = codes.reshape(keys.shape)
    cov, meth = pairs_from_keys(distinct)
    return FeatureTable(
        codes=codes.astype(np.int32),
        table=beta_map(cov, meth, n_bins),
        coverage=cov,
        methylated=meth,
    )
