"""The single-bin and adjacent-pair histogram terms of the refinement's criterion: their
likelihood given the bins' coverage, and its gradient (kernels in _refine_kernels.py)."""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln

from . import _refine_kernels
from ..moments.features import decode_cells
from ..moments.sums import Moments
from .expected import SampleCoverage
from .overdispersion import entry_loglik


class _Cells:
    """One kernel input: cells as per-slot table entries (see _refine_kernels.mixture_loglik), each
    entry with its Binomial pair and its thinned coverage's probability given each bucket."""

    def __init__(self, slot_cov, binomial_cov, binomial_meth, weight, samples, thinned):
        n_slots = slot_cov.shape[1]
        keys = slot_cov * (slot_cov.max(initial=0) + 1) ** 2 + binomial_cov * (slot_cov.max(initial=0) + 1) \
            + binomial_meth
        index = np.empty(slot_cov.shape, np.int64)
        offsets, firsts = [0], []
        for g in range(n_slots):
            _, first, index[:, g] = np.unique(keys[:, g], return_index=True, return_inverse=True)
            firsts.append(first)
            offsets.append(offsets[-1] + first.size)
        c = np.concatenate([binomial_cov[f, g] for g, f in enumerate(firsts)]).astype(np.int64)
        mu = np.concatenate([binomial_meth[f, g] for g, f in enumerate(firsts)]).astype(np.int64)
        self.coef = gammaln(c + 1.0) - gammaln(mu + 1.0) - gammaln(c - mu + 1.0)
        # cells sorted by their first half of slots (a pair's first bin), the kernel's groups
        self.half = max(n_slots // 2, 1)
        _, first_part, sizes = np.unique(index[:, :self.half], axis=0, return_inverse=True, return_counts=True)
        order = np.argsort(first_part.ravel(), kind="stable")
        index, weight = index[order], weight[order]
        self.groups = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        self.samples, self.weight, self.index, self.c, self.mu = samples, weight, index, c, mu
        # cells of the coverage alone have every entry (0, 0): no emission term, none computed
        self.emits = bool(c.any())
        self.offsets = np.array(offsets, np.int64)
        # per slot: the thinned-coverage probabilities given each bucket of its distinct
        # coverages (entries are sorted by coverage: each coverage's entries are a run), and
        # where each coverage's run of entries starts and how long it is
        self.given_bucket, self.coverage_runs, self.run_lengths = [], [], []
        for g, f in enumerate(firsts):
            values, starts, lengths = np.unique(slot_cov[f, g], return_index=True, return_counts=True)
            self.given_bucket.append(thinned[samples[g]][:, values])
            self.coverage_runs.append(starts)
            self.run_lengths.append(lengths)


class _Histogram:
    """The likelihood of a thinned histogram (features.histogram_layout) of single bins
    (a mixture over the states) or of adjacent pairs (over pairs of states, through the
    transition matrix), *given the bins' coverage*, and its gradient.

    A cell's likelihood is the state mixture of each slot's Binomial probability times the
    state's probability of the slot's thinned coverage, divided by the same mixture of the
    coverage alone (cells aggregated by their coverage). So states are rewarded for
    explaining methylation, never coverage, as in EM's likelihood; the coverage per state
    only weighs the states. Cells are decoded to per-slot entries of small tables, so a
    state's likelihood of a cell is a product of table lookups (compiled in _refine_kernels)."""

    def __init__(self, moments: Moments, width: int, coverage: list[SampleCoverage]):
        hist = moments.bin_histogram if width == 1 else moments.pair_histogram
        self.layout = moments.histogram_layout(width)
        if hist.shape != self.layout.shape:
            raise ValueError(f"the {'bin' if width == 1 else 'pair'} histogram has shape {hist.shape}, but its "
                             f"layout (histogram_budget {moments.histogram_budget}) needs {self.layout.shape}")
        self.width = width
        self.total = float(moments.n_triples)
        thinned = [c.thinned(self.layout.cap) for c in coverage]
        self.rows = []
        for row in range(hist.shape[0]):
            cells = np.flatnonzero(hist[row])
            cov, meth = decode_cells(cells, self.layout)
            samples = self.layout.slot_samples(row).astype(np.int64)
            weight = hist[row, cells].astype(np.float64)
            joint = _Cells(cov, cov, meth, weight, samples, thinned)
            coverage_tuples, which = np.unique(cov, axis=0, return_inverse=True)
            zeros = np.zeros_like(coverage_tuples)
            coverage_only = _Cells(coverage_tuples, zeros, zeros, np.bincount(which.ravel(), weight), samples,
                                   thinned)
            self.rows.append((joint, coverage_only))

    def _loglik(self, cells: _Cells, levels, dispersion, pi, transmat, coverage, grads, sign):
        m = levels.shape[0]
        g_levels, g_scale, g_pi, g_a, g_coverage = grads
        # per slot (distinct coverages, m): each state's probability of the thinned coverage
        prob = [np.maximum(coverage[s] @ t, 1e-300).T for s, t in zip(cells.samples, cells.given_bucket)]
        log_table = np.concatenate([np.repeat(np.log(p), lengths, axis=0) for p, lengths in zip(prob, cells.run_lengths)])
        gradients = []
        for g, s in enumerate(cells.samples if cells.emits else ()):
            part = slice(cells.offsets[g], cells.offsets[g + 1])
            table, gradient = entry_loglik(cells.c[part], cells.mu[part], cells.coef[part], levels[:, s],
                                           None if dispersion is None else dispersion[:, s])
            log_table[part] += table
            gradients.append(gradient)
        resp = np.zeros((cells.c.size, m))
        gp, ga = np.zeros(m), np.zeros((m, m))
        value = _refine_kernels.mixture_loglik(cells.weight, cells.index, cells.half, cells.groups, cells.offsets,
                                               log_table, pi, transmat if self.width == 2 else None, gp, ga, resp)
        g_pi += sign * gp
        g_a += sign * ga
        for g, s in enumerate(cells.samples):
            part = slice(cells.offsets[g], cells.offsets[g + 1])
            r = resp[part]  # (entries, m) posterior-weighted counts
            if cells.emits:
                d_level, d_scale = gradients[g](r)
                g_levels[:, s] += sign * d_level
                if d_scale is not None:
                    g_scale[:, s] += sign * d_scale
            if r.size:  # the entries' weights summed over each coverage's run
                by_coverage = np.add.reduceat(r, cells.coverage_runs[g], axis=0)
                g_coverage[s] += sign * (by_coverage / prob[g]).T @ cells.given_bucket[g].T
        return sign * value

    def __call__(self, levels: np.ndarray, pi: np.ndarray, transmat: np.ndarray, coverage: list[np.ndarray],
                 dispersion: np.ndarray | None = None):
        """(-loglik / N, and its gradients with respect to levels (m, S), v = log(a + b) of
        the beta-binomial (m, S; zeros for the binomial, ``dispersion`` None), pi (m,),
        transmat (m, m) and each sample's coverage bucket probabilities (m, buckets))."""
        m = levels.shape[0]
        grads = (np.zeros_like(levels), np.zeros_like(levels), np.zeros(m), np.zeros((m, m)),
                 [np.zeros_like(q) for q in coverage])
        pi = np.maximum(pi, 1e-300)
        loglik = 0.0
        for joint, coverage_only in self.rows:
            loglik += self._loglik(joint, levels, dispersion, pi, transmat, coverage, grads, 1.0)
            # the coverage alone: entries whose pairs are all (0, 0), so any emission is 0
            loglik += self._loglik(coverage_only, levels, None, pi, transmat, coverage, grads, -1.0)
        scale = -1.0 / self.total
        g_levels, g_scale, g_pi, g_a, g_coverage = grads
        return (scale * loglik, scale * g_levels, scale * g_scale, scale * g_pi, scale * g_a,
                [scale * g for g in g_coverage])
