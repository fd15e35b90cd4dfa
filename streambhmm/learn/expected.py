"""What the refinement's criterion expects of a level: the Beta-map features of a bin in a
state, per coverage bucket, tabulated on a grid of levels and interpolated (cubic Hermite)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import _expected_kernels
from ._expected_kernels import LOG_FLOOR_BELOW_PEAK, binomial_mixtures, edge_tails
from ..moments.features import (COVERAGE_BUCKETS, COVERAGE_HISTOGRAM_TOP, coverage_bucket, flush_subnormals,
                                log_factorials)
from .overdispersion import QUADRATURE, beta_parameters

GRID_POINTS = 128  # levels tabulated at 0, 1/128, ..., 1 (cubic Hermite in between)
EXACT_COVERAGE = 128  # coverages above this are grouped in buckets 2% wide
BUCKET_RATIO = 1.02
# above this the Beta map of a bin is a spike far narrower than a feature bin (1/D): such
# coverages are tabulated at this value (bounded memory for amplicon-deep data)
LARGEST_TABULATED_COVERAGE = 10_000


def _coverage_buckets(histogram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coverages, weights summing to 1): exact up to EXACT_COVERAGE, then geometric buckets
    represented by their weighted mean coverage (at most LARGEST_TABULATED_COVERAGE)."""
    c = np.flatnonzero(histogram)
    w = histogram[c].astype(np.float64)
    low = c <= EXACT_COVERAGE
    cs, ws = [c[low]], [w[low]]
    if (~low).any():
        high_c, high_w = c[~low], w[~low]
        bucket = np.floor(np.log(high_c / EXACT_COVERAGE) / np.log(BUCKET_RATIO)).astype(np.int64)
        _, first, inverse = np.unique(bucket, return_index=True, return_inverse=True)
        weight = np.bincount(inverse, high_w)
        mean_c = np.rint(np.bincount(inverse, high_w * high_c) / weight).astype(np.int64)
        cs.append(np.minimum(mean_c, LARGEST_TABULATED_COVERAGE))
        ws.append(weight)
    # the buckets above LARGEST_TABULATED_COVERAGE share its table: one term for all of them
    cs, merged = np.unique(np.concatenate(cs), return_inverse=True)
    ws = np.bincount(merged, np.concatenate(ws))
    return cs, ws / ws.sum()


class ExpectedFeatures:
    """g(p) = E[phi(c, mu) | level p] for one sample (D-vector), c drawn from the sample's
    coverage histogram and mu ~ Binomial(c, p), with dg/dp; tabulated on a grid of p and
    interpolated by cubic Hermite polynomials (C1, so the optimizer sees smooth gradients).

    With I_x(mu+1, c-mu+1) = P(Binomial(c+1, x) > mu), the expected Beta-map CDF at an edge
    x is sum_mu Bin(mu; c, p) P(Bin(c+1, x) > mu): a binomial mixture of table rows per
    coverage, summed over the mu that carry weight (_expected_kernels.binomial_mixtures).
    """

    def __init__(self, coverage_histogram: np.ndarray, n_bins: int, grid_points: int = GRID_POINTS, mapper=map):
        """``mapper``: how the coverages' terms are computed (a thread pool's map runs them side
        by side; they are summed here in order, so the tables do not depend on it)."""
        grid = np.linspace(0.0, 1.0, grid_points + 1)
        edges = np.arange(n_bins + 1) / n_bins
        values = np.zeros((grid.size, n_bins))
        slopes = np.zeros((grid.size, n_bins))
        if coverage_histogram.sum() == 0:
            raise ValueError("the coverage histogram is empty")
        coverages, weights = _coverage_buckets(coverage_histogram)
        log_factorial = log_factorials(int(coverages.max()) + 1)
        in_upper = edges[None, :-1] >= grid[:, None]
        with np.errstate(divide="ignore"):
            log_edges, log_edges_complement = np.log(edges), np.log1p(-edges)

        def terms(item):
            c, w = item
            # P(Bin(c+1, x) > mu) (upper) and <= mu (lower), for each edge x, side by side:
            # (c+1, 2(D+1)); E[I_x] (increasing in x) and 1 - E[I_x], mu ~ Bin(c, p), at each
            # level of the grid
            rows, steps = edge_tails(c + 1, log_edges, log_edges_complement, log_factorial)
            # and d/dp E[f(mu)] = c E_{k ~ Bin(c-1, p)}[f(k+1) - f(k)] of the upper tails
            both, d_up = binomial_mixtures(c, grid, log_factorial, rows, steps, LOG_FLOOR_BELOW_PEAK)
            cdf_up, cdf_low = both[:, :n_bins + 1], both[:, n_bins + 1:]
            # take each bin's mass from the side of the distribution where it is small
            value = w * np.where(in_upper, -np.diff(cdf_low, axis=1), np.diff(cdf_up, axis=1))
            return value, w * c * np.diff(d_up, axis=1)  # (zeros at c = 0)

        for value, slope in mapper(terms, zip(coverages.tolist(), weights)):
            values += value
            slopes += slope
        self.values, self.slopes = values, slopes

    def __call__(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(g(p), g'(p)), each (len(p), D)."""
        return hermite(self.values, self.slopes, p)


def hermite(values: np.ndarray, slopes: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cubic Hermite interpolation of tables (..., G + 1, D) of a function of p on the grid
    k / G and its derivative, at the levels p: (value, slope), each (..., len(p), D)."""
    grid_points = values.shape[-2] - 1
    x = np.clip(p, 0.0, 1.0) * grid_points
    i = np.minimum(np.floor(x).astype(np.int64), grid_points - 1)
    t = (x - i)[:, None]
    h = 1.0 / grid_points
    y0, y1 = values[..., i, :], values[..., i + 1, :]
    d0, d1 = slopes[..., i, :] * h, slopes[..., i + 1, :] * h
    t2, t3 = t * t, t * t * t
    value = (2 * t3 - 3 * t2 + 1) * y0 + (t3 - 2 * t2 + t) * d0 + (-2 * t3 + 3 * t2) * y1 + (t3 - t2) * d1
    slope = ((6 * t2 - 6 * t) * y0 + (3 * t2 - 4 * t + 1) * d0 + (6 * t - 6 * t2) * y1
             + (3 * t2 - 2 * t) * d1) / h
    return value, slope


class SampleCoverage:
    """One sample's coverage buckets: which are non-empty, the sample's share in each, the
    expected features of a level within each, and thinned coverage distributions."""

    def __init__(self, histogram: np.ndarray, n_bins: int, grid_points: int = GRID_POINTS):
        if histogram.size > COVERAGE_HISTOGRAM_TOP + 1:  # moments of before the histogram's top (features)
            histogram = np.r_[histogram[:COVERAGE_HISTOGRAM_TOP], histogram[COVERAGE_HISTOGRAM_TOP:].sum()]
        coverage = np.arange(histogram.size)
        bucket = coverage_bucket(coverage)
        mass = np.bincount(bucket, histogram, minlength=len(COVERAGE_BUCKETS))
        if mass.sum() == 0:
            raise ValueError("the coverage histogram is empty")
        self.buckets = np.flatnonzero(mass)
        self.marginal = mass[self.buckets] / mass.sum()
        self.within = [np.where(bucket == b, histogram, 0.0) for b in self.buckets]  # per bucket
        # the coverages' terms in threads, one per core (numpy's loops and the mixtures' kernel
        # release the GIL): 0.8 s alone for a chromosome's 5 kb bins, mostly above 1,000 reads
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            features = [ExpectedFeatures(w, n_bins, grid_points, pool.map) for w in self.within]
        # stacked (buckets, G + 1, D): one interpolation serves every bucket
        self.values = np.stack([f.values for f in features])
        self.slopes = np.stack([f.slopes for f in features])
        self.mean = np.array([w @ coverage / w.sum() for w in self.within])

    def features(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[phi | level, bucket] and its derivative in the level at each of ``levels``:
        each (buckets, len(levels), D)."""
        return hermite(self.values, self.slopes, levels)

    def dispersed_features(self, levels: np.ndarray, dispersion: np.ndarray, coverage: np.ndarray) -> tuple:
        """E[phi | h] when the level is Beta-distributed around each of ``levels`` with
        ``dispersion``, mixed over the states' coverage buckets (``coverage``, (m, buckets)),
        and its derivatives in the level (at fixed a + b) and in v = log(a + b): each (D, m);
        and the features of each bucket, (buckets, m, D) (overdispersion.LevelQuadrature)."""
        if not hasattr(self, "_at_nodes"):  # the features at the quadrature's nodes, once: (nodes, buckets * D)
            at_nodes = self.features(QUADRATURE.levels)[0]
            self._at_nodes = flush_subnormals(np.ascontiguousarray(at_nodes.transpose(1, 0, 2)
                                                                   .reshape(at_nodes.shape[1], -1)))
        a, b = beta_parameters(levels, dispersion)
        d, m = self.values.shape[2], levels.size
        obs, slope, by_scale = np.empty((d, m)), np.empty((d, m)), np.empty((d, m))
        product = QUADRATURE.weights(a, b).reshape(3 * m, -1) @ self._at_nodes  # BLAS, without the GIL
        per_bucket = _expected_kernels.dispersed_mixture(product, a, b, np.ascontiguousarray(coverage), obs, slope,
                                                         by_scale)
        return obs, slope, by_scale, per_bucket
