"""The histograms of the moment pass: coverage per sample, coverage buckets against the
feature, and the thinned histograms of single bins and of adjacent pairs (sums.Moments)."""

from __future__ import annotations

import numpy as np

from . import moment_kernels
from .features import (COVERAGE_BUCKETS, HISTOGRAM_CELL_BUDGET, FeatureTable, HistogramLayout, cells_per_sample,
                       coverage_bucket, histogram_coverage, histogram_layout, thinning)

# Which tuples thinned in some slots and without reads in the others are added as a matrix
# product (_add_products): measured on chunks of the human-sized methylome, scattering costs
# about 50 ns a tuple and 4 ns a cell, a product about 100 us, 100 ns a tuple and 0.25 ns an
# entry (every cell (cap, j) of its slots), so it pays for many tuples over many cells.
PRODUCT_MIN_TUPLES = 256
PRODUCT_MIN_ENTRIES = 64


def coverage_histogram(features: FeatureTable, bins: np.ndarray) -> np.ndarray:
    """(S, max coverage + 1): how many of ``bins`` have each coverage, per sample (coverages
    above features.COVERAGE_HISTOGRAM_TOP counted at it)."""
    cov = histogram_coverage(features.coverage[features.codes[bins]])
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
    return grouped_histograms(features, first, np.array([0, first.size]), width, budget, thin, layout)[0]


def grouped_histograms(features: FeatureTable, first: np.ndarray, bounds: np.ndarray, width: int,
                       budget: int = HISTOGRAM_CELL_BUDGET, thin=None, layout: HistogramLayout | None = None
                       ) -> np.ndarray:
    """(groups, *layout.shape): :func:`thinned_histogram` of each group of tuples
    first[bounds[g]:bounds[g + 1]] (a genome's blocks), in one pass over them all."""
    n_samples = features.codes.shape[1]
    layout = layout or histogram_layout(n_samples, width, budget)
    if thin is None:
        thin = histogram_thinning(features, width, budget, layout)
    codes = _tuple_codes(features.codes, first, width)
    n_groups = bounds.size - 1
    # the group as a leading column: rows merged within a group, and in group order (one
    # group, the whole chunk's histogram on every pass, needs no such column)
    single = n_groups == 1
    group_of = None if single else np.repeat(np.arange(n_groups), np.diff(bounds))
    out = np.zeros((n_groups, *layout.shape))
    # row-major flattening of the slots' cells
    strides = cells_per_sample(layout.cap) ** np.arange(layout.slots - 1, -1, -1, dtype=np.int64)
    for row in range(layout.shape[0]):
        columns = np.arange(codes.shape[1]) if layout.joint else row + n_samples * np.arange(width)
        keyed, counts = _distinct_rows(codes[:, columns] if single else np.column_stack([group_of, codes[:, columns]]))
        groups, tuples = (np.zeros(len(keyed), np.int64), keyed) if single else (keyed[:, 0], keyed[:, 1:])
        rest = ~_add_products(groups, tuples, counts, thin, strides, out[:, row])
        at = np.searchsorted(groups[rest], np.arange(n_groups + 1))
        _add_scattered_tuples(tuples[rest], counts[rest], at, thin, strides, out[:, row])
    return out


def _tuple_codes(codes: np.ndarray, first: np.ndarray, width: int) -> np.ndarray:
    """(tuples, width * S): the codes of the ``width`` bins from each of ``first``, bin-major
    slots; sliced where ``first`` are consecutive bins (one sequence's tuples: 3-4x faster
    than gathering them)."""
    if first.size and np.array_equal(first, np.arange(first[0], first[0] + first.size)):
        return np.concatenate([codes[first[0] + k:first[0] + k + first.size] for k in range(width)], axis=1)
    return np.concatenate([codes[first + k] for k in range(width)], axis=1)


def _add_products(groups: np.ndarray, tuples: np.ndarray, counts: np.ndarray, thin, strides: np.ndarray,
                  hists: np.ndarray) -> np.ndarray:
    """Add to hists[g], as matrix products (:func:`_add_product`), the tuples of group g whose
    every slot is thinned, and sets of at least PRODUCT_MIN_TUPLES tuples thinned in the same
    slots (PRODUCT_MIN_ENTRIES cells or more in all) and without reads in the others (the
    cell (0, 0)), a product per group and set; returns which tuples were added. On real data
    these hold nearly all the cells (a sample without reads is common where samples are
    compared); the others are few and narrow, cheaper scattered."""
    n, n_slots = tuples.shape
    if n == 0:
        return np.zeros(0, bool)
    # a set with a slot without reads can pay only if its other slots span enough cells
    mixed = (thin.cap + 1) ** (n_slots - 1) >= PRODUCT_MIN_ENTRIES
    mask = np.zeros(n, np.int64)  # the thinned slots, a bit each
    n_thinned = np.zeros(n, np.int64)
    eligible = np.ones(n, bool)
    for g in range(n_slots):  # a slot at a time: numpy's reductions along a few columns are slow
        thinned = thin.row[tuples[:, g]] >= 0
        n_thinned += thinned
        if mixed:
            mask |= thinned.astype(np.int64) << g
            eligible &= thinned | (thin.base[tuples[:, g]] == 0)
    every = n_thinned == n_slots
    if not mixed:  # in group order already: a set per group
        order = np.flatnonzero(every)
        key = groups[order]
    else:
        chosen = np.flatnonzero(eligible & (every | ((thin.cap + 1) ** n_thinned >= PRODUCT_MIN_ENTRIES)))
        key = groups[chosen] * (1 << n_slots) + mask[chosen]
        if (groups[-1] + 1) << n_slots <= 1 << 15:  # numpy's stable sort of 16-bit integers is a radix sort
            key = key.astype(np.int16)
        order = np.argsort(key, kind="stable")  # each set's tuples in their order: reproducible sums
        key, order = key[order], chosen[order]
    added = every if not mixed else np.zeros(n, bool)
    if order.size == 0:
        return added
    in_sets, set_counts = tuples[order], counts[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    for lo, hi in zip(starts, np.r_[starts[1:], order.size]):
        first = in_sets[lo]
        if not mixed or every[order[lo]] or hi - lo >= PRODUCT_MIN_TUPLES:
            _add_product(in_sets[lo:hi], set_counts[lo:hi], np.flatnonzero(thin.row[first] >= 0), thin, strides,
                         hists[groups[order[lo]]])
            added[order[lo:hi]] = True
    return added


def _add_product(tuples: np.ndarray, counts: np.ndarray, free: np.ndarray, thin, strides: np.ndarray,
                 hist: np.ndarray, block: int = 1 << 12) -> None:
    """Add to ``hist`` tuples whose slots are thinned (``free``) or without reads. The free
    slots land in the cells (cap, j), so their sum is one product A^T B: A's rows
    are the outer products of the first free slots' thinned weights (times the tuples'
    counts), B's of the others' (rows built compiled, moment_kernels.thinned_outer_rows; a
    GEMM, not a scatter per cell)."""
    n_free = free.size
    half, width = n_free // 2, thin.cap + 1
    cells = thin.cap * (thin.cap + 1) // 2 + np.arange(width)  # a thinned slot's cells (cap, j): pair keys
    index = np.zeros((width,) * n_free, dtype=np.int64)
    for k, g in enumerate(free):
        shape = [1] * n_free
        shape[k] = width
        index = index + (cells * strides[g]).reshape(shape)
    index = index.ravel()  # the other slots' cell is (0, 0): its index is 0
    free_codes = tuples if free.size == tuples.shape[1] else np.ascontiguousarray(tuples[:, free])
    n = tuples.shape[0]
    ones = np.ones(min(n, block))
    a = np.empty((min(n, block), width ** half))
    b = np.empty((min(n, block), width ** (n_free - half)))
    total = 0.0
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        m = hi - lo
        moment_kernels.thinned_outer_rows(free_codes[lo:hi], counts[lo:hi], thin.row, thin.rows, 0, half, a[:m])
        moment_kernels.thinned_outer_rows(free_codes[lo:hi], ones[:m], thin.row, thin.rows, half, n_free - half,
                                          b[:m])
        total = total + a[:m].T @ b[:m]
    hist[index] += np.ravel(total)  # distinct cells: the slots' cells in mixed radix


def _add_scattered_tuples(tuples: np.ndarray, counts: np.ndarray, bounds: np.ndarray, thin, strides: np.ndarray,
                          hists: np.ndarray) -> None:
    """Add tuples[bounds[g]:bounds[g + 1]] to hists[g], cell by cell (moment_kernels.accumulate_histogram)."""
    for g in np.flatnonzero(np.diff(bounds)):
        lo, hi = bounds[g], bounds[g + 1]
        moment_kernels.accumulate_histogram(tuples[lo:hi], counts[lo:hi], thin.base, thin.row, thin.rows, thin.lo,
                                            thin.hi, strides, hists[g])


def _distinct_rows(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of a (n, G) code array, each with its count (float64), in the order of the
    rows' first columns. Repeated rows are merged when that is cheap: rows numbered in mixed
    radix (each column's own) within a key space of at most max(4 n, 2^16), which sorts them.
    Otherwise (nearly all rows distinct) they are kept in their order, each counted once."""
    n = codes.shape[0]
    dims = tuple(int(d) + 1 for d in codes.max(axis=0, initial=0))
    if float(np.prod(dims, dtype=np.float64)) > max(4 * n, 1 << 16):
        return codes.astype(np.int64, copy=False), np.ones(n)  # (the caller passes a fresh array)
    counts = np.bincount(np.ravel_multi_index(tuple(codes.T), dims))
    present = np.flatnonzero(counts)
    return np.stack(np.unravel_index(present, dims), axis=1).astype(np.int64), counts[present].astype(np.float64)
