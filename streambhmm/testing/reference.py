"""Slow, obviously correct implementations: baselines for tests and benchmarks.

Nothing here is used by the fitting path. The moments are built position by position
with an einsum over all triples, costing (S*D)^3 per triple. grouped_triples is the previous
compiled triple kernel, the baseline of scripts/bench_triples.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from scipy.stats import hypergeom

from ..moments import moment_kernels
from ..moments.features import (COVERAGE_HISTOGRAM_TOP, DEFAULT_N_BINS, beta_map, cells_per_sample, coverage_bucket,
                                histogram_layout, pair_keys)
from ..moments.sums import Moments
from ..moments.validation import validate_counts


def naive_moments(methylated, coverage, lengths=None, n_bins: int = DEFAULT_N_BINS) -> Moments:
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
            c3, m3 = cov[offset + 2:offset + length], mu[offset + 2:offset + length]
            _add_naive_histograms(out, m2, c2, m3, c3)
            for t in range(length - 2):
                for s in range(n_samples):
                    out.coverage_features[s, coverage_bucket(c2[t, s])] += f3[t, s * n_bins:(s + 1) * n_bins]
            out.n_triples += length - 2
        offset += length
    return out


def _add_naive_histograms(out: Moments, meth: np.ndarray, cov: np.ndarray, meth3: np.ndarray,
                          cov3: np.ndarray) -> None:
    """Bin by bin (middle bins, and the pairs of middle and third bins): coverage counts, and
    each sample's thinned distribution from scipy.stats.hypergeom combined over the slots by
    explicit outer products."""
    n_samples = cov.shape[1]
    width = max(out.coverage_histogram.shape[1], min(int(cov.max(initial=0)), COVERAGE_HISTOGRAM_TOP) + 1)
    out.coverage_histogram = np.pad(out.coverage_histogram, ((0, 0), (0, width - out.coverage_histogram.shape[1])))
    for c_row in cov:
        for s, c in enumerate(c_row):
            out.coverage_histogram[s, min(c, COVERAGE_HISTOGRAM_TOP)] += 1  # deeper bins at the top
    for hist, bins in ((out.bin_histogram, [(meth, cov)]), (out.pair_histogram, [(meth, cov), (meth3, cov3)])):
        layout = histogram_layout(n_samples, len(bins))
        rows = [list(range(n_samples))] if layout.joint else [[s] for s in range(n_samples)]
        for t in range(cov.shape[0]):
            for row, samples in enumerate(rows):
                outer = np.ones(1)
                for m_arr, c_arr in bins:
                    for s in samples:
                        outer = np.multiply.outer(outer, _thinned(m_arr[t, s], c_arr[t, s], layout.cap)).ravel()
                hist[row] += outer


def _thinned(mu: int, c: int, cap: int) -> np.ndarray:
    dist = np.zeros(cells_per_sample(cap))
    if c <= cap:
        dist[pair_keys(np.array(mu), np.array(c))] = 1.0
    else:
        j = np.arange(cap + 1)
        weights = hypergeom.pmf(j, c, mu, cap)
        dist[pair_keys(j, np.full(cap + 1, cap))] = np.where(weights >= 1e-15, weights, 0.0)
    return dist


@njit(cache=True, nogil=True)
def grouped_triples(codes, starts, table, pair_cov, pair_meth,
                       p12, p13, p23, p123, b_meth, b_cov, inv_cov):
    """The previous moment_kernels.accumulate_triples (one rank-one update of p123 per k3 group):
    the baseline of scripts/bench_triples.py. Same arguments and outputs.

    codes (n, S) int32 index table (K, D); pair_cov/pair_meth (K,) give each code's pair.
    Outputs: p12, p13, p23 (SD, SD); p123 (SD, SD, SD); b_meth, b_cov (S, SD); inv_cov (S,).
    """
    n_samples = codes.shape[1]
    n_codes, dim = table.shape
    sd = n_samples * dim
    acc = np.zeros((sd, dim))
    run_sum = np.zeros(sd)
    group_sum = np.zeros(sd)
    group_phi2 = np.zeros(dim)
    columns = codes.T.copy()  # contiguous per-sample codes for the sort keys
    for s3 in range(n_samples):
        k3_of = columns[s3, 2:]  # indexed by triple start t: code of bin t+2
        for s2 in range(n_samples):
            k2_of = columns[s2, 1:]
            order = moment_kernels.stable_sort_by(starts, k2_of, n_codes)
            order = moment_kernels.stable_sort_by(order, k3_of, n_codes)
            o3 = s3 * dim
            o2 = s2 * dim
            i = 0
            n = order.size
            while i < n:
                k3 = k3_of[order[i]]
                acc[:, :] = 0.0
                group_sum[:] = 0.0
                group_phi2[:] = 0.0
                group_meth = 0.0
                group_cov = 0.0
                while i < n and k3_of[order[i]] == k3:
                    k2 = k2_of[order[i]]
                    run_sum[:] = 0.0
                    count = 0
                    while i < n and k3_of[order[i]] == k3 and k2_of[order[i]] == k2:
                        t = order[i]
                        for s1 in range(n_samples):
                            k1 = codes[t, s1]
                            o1 = s1 * dim
                            for d in range(dim):
                                run_sum[o1 + d] += table[k1, d]
                        count += 1
                        i += 1
                    for a in range(sd):
                        r = run_sum[a]
                        for d in range(dim):
                            acc[a, d] += r * table[k2, d]
                    for a in range(sd):
                        group_sum[a] += run_sum[a]
                    for d in range(dim):
                        group_phi2[d] += count * table[k2, d]
                    group_meth += count * pair_meth[k2]
                    group_cov += count * pair_cov[k2]
                    if s3 == 0:
                        inv_cov[s2] += count / (pair_cov[k2] + 2.0)
                # close the k3 group: one outer product with phi_k3 per output
                for a in range(sd):
                    for b in range(dim):
                        v = acc[a, b]
                        for d in range(dim):
                            p123[a, o2 + b, o3 + d] += v * table[k3, d]
                for d in range(dim):
                    phi3 = table[k3, d]
                    b_meth[s2, o3 + d] += group_meth * phi3
                    b_cov[s2, o3 + d] += group_cov * phi3
                    for b in range(dim):
                        p23[o2 + b, o3 + d] += group_phi2[b] * phi3
                    if s2 == 0:
                        for a in range(sd):
                            p13[a, o3 + d] += group_sum[a] * phi3
                if s3 == 0:
                    for a in range(sd):
                        for b in range(dim):
                            p12[a, o2 + b] += acc[a, b]
