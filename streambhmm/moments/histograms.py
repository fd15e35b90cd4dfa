"""The histograms of the moment pass: coverage per sample, coverage buckets against the
feature, and the thinned histograms of single bins and of adjacent pairs (sums.Moments)."""

from __future__ import annotations

import numpy as np

from . import moment_kernels
from .features import (COVERAGE_BUCKETS, HISTOGRAM_CELL_BUDGET, FeatureTable, HistogramLayout, cells_per_sample,
                       coverage_bucket, histogram_layout, thinning)


def coverage_histogram(features: FeatureTable, bins: np.ndarray) -> np.ndarray:
    """(S, max coverage + 1): how many of ``bins`` have each coverage, per sample."""
    cov = features.coverage[features.codes[bins]]
    out = np.zeros((cov.shape[1], int(cov.max(initial=0)) + 1))
    for s in range(cov.shape[1]):
        out[s] = np.bincount(cov[:, s], minlength=out.shape[1])
    return out


def coverage_features(features: FeatureTable, starts: np.ndarray) -> np.ndarray:
    """(S, B, D): for the triples at ``starts``, each sample's coverage bucket of the middle
    bin against its Beta-map feature of the third."""
    n_samples, n_codes = features.codes.shape[1], features.table.shape[0]
    n_buckets = len(COVERAGE_BUCKETS)
    bucket_of_code = coverage_bucket(features.coverage)
    out = np.zeros((n_samples, n_buckets, features.n_bins))
    for s in range(n_samples):
        key = bucket_of_code[features.codes[starts + 1, s]] * n_codes + features.codes[starts + 2, s]
        counts = np.bincount(key, minlength=n_buckets * n_codes).reshape(n_buckets, n_codes)
        out[s] = counts @ features.table
    return out


def histogram_thinning(features: FeatureTable, width: int, budget: int = HISTOGRAM_CELL_BUDGET,
                       layout: HistogramLayout | None = None):
    """The thinning of ``features``' pairs for the histogram of ``width`` bins at ``budget``
    (or in ``layout``)."""
    layout = layout or histogram_layout(features.codes.shape[1], width, budget)
    return thinning(features.coverage, features.methylated, layout.cap)


def thinned_histogram(features: FeatureTable, first: np.ndarray, width: int,
                      budget: int = HISTOGRAM_CELL_BUDGET, thin=None, layout: HistogramLayout | None = None
                      ) -> np.ndarray:
    """The thinned histogram (features.histogram_layout, or ``layout``) of the tuples of
    ``width`` consecutive bins starting at ``first`` (``thin``: histogram_thinning of the
    same arguments, when the caller reuses it)."""
    n_samples = features.codes.shape[1]
    layout = layout or histogram_layout(n_samples, width, budget)
    if thin is None:
        thin = histogram_thinning(features, width, budget, layout)
    codes = np.concatenate([features.codes[first + k] for k in range(width)], axis=1)  # bin-major slots
    out = np.zeros(layout.shape)
    # row-major flattening of the slots' cells
    strides = cells_per_sample(layout.cap) ** np.arange(layout.slots - 1, -1, -1, dtype=np.int64)
    for row in range(out.shape[0]):
        columns = np.arange(codes.shape[1]) if layout.joint else row + n_samples * np.arange(width)
        tuples, counts = _distinct_rows(codes[:, columns])
        thinned = np.all(thin.row[tuples] >= 0, axis=1)
        _add_thinned_tuples(tuples[thinned], counts[thinned], thin, strides, out[row])
        moment_kernels.accumulate_histogram(tuples[~thinned], counts[~thinned], thin.base, thin.row, thin.rows,
                                      thin.lo, thin.hi, strides, out[row])
    return out


def _add_thinned_tuples(tuples: np.ndarray, counts: np.ndarray, thin, strides: np.ndarray, hist: np.ndarray,
                        block: int = 1 << 12) -> None:
    """Add the tuples whose every slot is thinned. Those all land in the cells (cap, j) of
    each slot, so their histogram is one product A^T B: A's rows are the outer products of
    the first slots' thinned weights (times the tuples' counts), B's of the other slots'
    (rows built compiled, moment_kernels.thinned_outer_rows; a GEMM, not a scatter per cell)."""
    n, n_slots = tuples.shape
    if n == 0:
        return
    half, width = n_slots // 2, thin.cap + 1
    ones = np.ones(n)
    total = 0.0
    for lo in range(0, n, block):
        part = tuples[lo:lo + block]
        a = np.empty((part.shape[0], width ** half))
        b = np.empty((part.shape[0], width ** (n_slots - half)))
        moment_kernels.thinned_outer_rows(part, counts[lo:lo + block], thin.row, thin.rows, 0, half, a)
        moment_kernels.thinned_outer_rows(part, ones[lo:lo + block], thin.row, thin.rows, half, n_slots - half, b)
        total = total + a.T @ b
    cells = thin.cap * (thin.cap + 1) // 2 + np.arange(width)  # each slot's cells (cap, j): pair keys
    index = np.zeros((width,) * n_slots, dtype=np.int64)
    for g in range(n_slots):
        shape = [1] * n_slots
        shape[g] = width
        index = index + (cells * strides[g]).reshape(shape)
    np.add.at(hist, index.ravel(), np.ravel(total))


def _distinct_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a (n, G) code array, each with its count (float64). Repeated rows are merged
    when that is cheap: rows numbered in mixed radix within a key space of at most
    max(4 n, 2^16). Otherwise (nearly all rows distinct) they are kept, each counted once."""
    n, n_groups = codes.shape
    dims = (int(codes.max(initial=0)) + 1,) * n_groups
    if float(dims[0]) ** n_groups > max(4 * n, 1 << 16):
        return codes.astype(np.int64), np.ones(n)
    counts = np.bincount(np.ravel_multi_index(tuple(codes.T), dims))
    present = np.flatnonzero(counts)
    return np.stack(np.unravel_index(present, dims), axis=1).astype(np.int64), counts[present].astype(np.float64)
