"""The single-bin and adjacent-pair histogram terms of the refinement's criterion: the
likelihood of the thinned reads given their coverage, and its gradient (kernels in
_refine_kernels.py)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from . import _emission_kernels, _refine_kernels
from ..moments.features import decode_cells
from ..moments.sums import Moments
from .overdispersion import beta_parameters


def unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """np.unique(rows, axis=0, return_inverse=True, return_counts=True) of non-negative
    integers, through one integer key per row where it fits in int64 (the same order:
    lexicographic by columns): numpy sorts rows as opaque records, ten times slower, and a
    pair histogram's cells took `hmr` 0.1 s so."""
    n, width = rows.shape
    radix = int(rows.max(initial=0)) + 1
    if radix ** width >= 2 ** 63:
        return np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    key = np.zeros(n, np.int64)
    for column in range(width):
        key = key * radix + rows[:, column]
    _, first, inverse, counts = np.unique(key, return_index=True, return_inverse=True, return_counts=True)
    return rows[first], inverse, counts


class _Cells:
    """One kernel input (see _refine_kernels.mixture_loglik): each slot's distinct (coverage,
    methylated) pairs as table entries, and the cells as combinations of entries, x of the
    first half of the slots (a pair's first bin) and y of the others, sorted by x. (A single
    bin of one sample is all y, one group: a group per cell would cost more than the cell.)"""

    def __init__(self, coverage, methylated, weight, samples):
        n_slots = coverage.shape[1]
        keys = coverage * (coverage.max(initial=0) + 1) + methylated
        entries = np.empty(coverage.shape, np.int64)
        offsets, firsts = [0], []
        for g in range(n_slots):
            _, first, index = np.unique(keys[:, g], return_index=True, return_inverse=True)
            entries[:, g] = offsets[-1] + index
            firsts.append(first)
            offsets.append(offsets[-1] + first.size)
        c = np.concatenate([coverage[f, g] for g, f in enumerate(firsts)]).astype(np.int64)
        mu = np.concatenate([methylated[f, g] for g, f in enumerate(firsts)]).astype(np.int64)
        self.coef = gammaln(c + 1.0) - gammaln(mu + 1.0) - gammaln(c - mu + 1.0)
        half = n_slots // 2
        self.x_entries, x_of_cell, sizes = unique_rows(entries[:, :half])
        order = np.argsort(x_of_cell.ravel(), kind="stable")
        self.groups = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        self.y_entries, y_of_cell, _ = unique_rows(entries[order, half:])
        self.y_of_cell = y_of_cell.ravel().astype(np.int64)
        self.samples, self.weight, self.c, self.mu = samples, weight[order], c, mu
        self.offsets = np.array(offsets, np.int64)


class HistogramLikelihood:
    """The likelihood of a thinned histogram (features.histogram_layout) of single bins
    (a mixture over the states) or of adjacent pairs (over pairs of states, through the
    transition matrix), *given the bins' coverage*, and its gradient.

    A cell's likelihood is the state mixture (pi; for pairs pi_j A_jk) of the product of its
    slots' Binomial (beta-binomial) probabilities of the methylated reads given the thinned
    coverage: the likelihood EM maximizes, of one bin or two, so the states are rewarded for
    explaining methylation, never coverage. (Weighing the states by their coverage
    distributions as well was measured worse on the real sets: the fits spent states on
    coverage, docs/methods/one-pass.md.) Cells are decoded to per-slot entries of small
    tables, so a state's likelihood of a cell is a product of table lookups (compiled in
    _refine_kernels)."""

    def __init__(self, moments: Moments, width: int):
        hist = moments.bin_histogram if width == 1 else moments.pair_histogram
        self.layout = moments.histogram_layout(width)
        if hist.shape != self.layout.shape:
            raise ValueError(f"the {'bin' if width == 1 else 'pair'} histogram has shape {hist.shape}, but its "
                             f"layout (histogram_budget {moments.histogram_budget}) needs {self.layout.shape}")
        self.width = width
        self.total = float(moments.n_triples)
        self.rows = []
        for row in range(hist.shape[0]):
            cells = np.flatnonzero(hist[row])
            coverage, methylated = decode_cells(cells, self.layout)
            samples = self.layout.slot_samples(row).astype(np.int64)
            self.rows.append(_Cells(coverage, methylated, hist[row, cells].astype(np.float64), samples))

    def _loglik(self, cells: _Cells, levels, a, b, dispersed, pi, transmat, grads) -> float:
        g_levels, g_scale, g_pi, g_a = grads
        groups = (cells.offsets, cells.samples, levels, a, b, dispersed)  # the slot groups' entries and states
        log_table, shift, table = _emission_kernels.entry_logliks(cells.c, cells.mu, cells.coef, *groups)
        np.exp(table, out=table)  # numpy's vectorized exp: several times a scalar one's speed (so the log below)
        resp = np.zeros(table.shape)
        mixture = np.empty(cells.weight.size)
        value = _refine_kernels.mixture_loglik(cells.weight, cells.groups, cells.x_entries, cells.y_of_cell,
                                               cells.y_entries, log_table, table, shift, pi, transmat,
                                               self.width == 2, g_pi, g_a, resp, mixture)
        _emission_kernels.entry_slopes(cells.c, cells.mu, *groups, resp, g_levels, g_scale)  # by the entries' posteriors
        return value + cells.weight @ np.log(mixture)

    def __call__(self, levels: np.ndarray, pi: np.ndarray, transmat: np.ndarray,
                 dispersion: np.ndarray | None = None):
        """(-loglik / N, and its gradients with respect to levels (m, S), v = log(a + b) of
        the beta-binomial (m, S; zeros for the binomial, ``dispersion`` None), pi (m,) and
        transmat (m, m))."""
        m = levels.shape[0]
        grads = (np.zeros_like(levels), np.zeros_like(levels), np.zeros(m), np.zeros((m, m)))
        pi = np.maximum(pi, 1e-300)
        dispersed = dispersion is not None
        # the binomial reads neither a nor b: the levels stand in, one signature for both emissions
        a, b = beta_parameters(levels, dispersion) if dispersed else (levels, levels)
        loglik = sum(self._loglik(cells, levels, a, b, dispersed, pi, transmat, grads) for cells in self.rows)
        scale = -1.0 / self.total
        return (scale * loglik, *(scale * g for g in grads))
