"""Compiled kernel for the triple sums (see streambhmm.moments.sums for what they are).

Grouping. phi takes one of K table rows, so for each pair of samples (s2, s3) triples are
ordered by (code k3 of bin t+2 in s3, code k2 of bin t+1 in s2) with two stable counting
sorts, and their codes gathered into contiguous arrays in that order. Within a run of
equal (k3, k2) only F(x_t) varies: it is summed (S*D adds per triple) and one outer
product with phi_k2 is made per run, giving the k3 group's acc = sum F(x_t) (x) phi_k2.

Batched groups. A group's contribution to the tensor is acc (x) phi_k3. Rather than one
(S*D*D) x D rank-one update of p123 per group (strided, cache-bound), each group's acc,
flattened, is a row of a (block x S*D*D) matrix and its phi_k3 a row of a (block x D)
one; one GEMM per block of groups (np.dot: BLAS) adds rows^T phis to a contiguous buffer
for the pair, scattered into p123 once per pair. The rows carry the other sums that end
in phi_k3 (p13, p23, b_methylated, b_coverage) as extra columns, and phis a column of
ones that sums the rows (p12). Memory: the block's rows and the pair's buffer, whatever
the number of triples, plus the sorted codes (as many as the chunk's).

Cost: the naive einsum costs (S*D)^3 per triple; this costs S^2 (S*D per triple +
S*D^2 per run + 2 S*D^3 per k3 group, the last at GEMM speed). Real data have ~10^4
codes (a wide coverage range), so the groups' GEMMs and the per-triple sums dominate.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def triple_starts(lengths):
    """First-bin index of every triple that lies inside one sequence."""
    total = 0
    for length in lengths:
        if length > 2:
            total += length - 2
    starts = np.empty(total, np.int64)
    i = 0
    offset = 0
    for length in lengths:
        for t in range(offset, offset + length - 2):
            starts[i] = t
            i += 1
        offset += length
    return starts


@njit(cache=True, nogil=True)
def stable_sort_by(items, keys, n_keys):
    """Stable counting sort of ``items`` by ``keys[items]``."""
    counts = np.zeros(n_keys + 1, np.int64)
    for it in items:
        counts[keys[it] + 1] += 1
    for k in range(n_keys):
        counts[k + 1] += counts[k]
    out = np.empty_like(items)
    for it in items:
        k = keys[it]
        out[counts[k]] = it
        counts[k] += 1
    return out


GROUP_BLOCK = 128  # k3 groups per GEMM: bounds the buffer at GROUP_BLOCK x (S*D*D + S*D + D + 2)


@njit(cache=True, nogil=True)
def accumulate_triples(codes, starts, table, pair_cov, pair_meth,
                       p12, p13, p23, p123, b_meth, b_cov, inv_cov, block=GROUP_BLOCK):
    """Add the sums over the triples starting at ``starts`` to the output arrays (in place).

    codes (n, S) int32 index table (K, D); pair_cov/pair_meth (K,) give each code's pair.
    Outputs: p12, p13, p23 (SD, SD); p123 (SD, SD, SD); b_meth, b_cov (S, SD); inv_cov (S,).
    ``block``: k3 groups per GEMM.
    """
    n_samples = codes.shape[1]
    n_codes, dim = table.shape
    sd = n_samples * dim
    rows = np.zeros((block, sd * dim + sd + dim + 2))  # one k3 group per row (_sum_group)
    phis = np.zeros((block, dim + 1))  # the groups' phi_k3, and 1 (the last column sums the rows)
    run_sum = np.zeros(sd)
    columns = codes.T.copy()  # contiguous per-sample codes for the sort keys
    for s3 in range(n_samples):
        k3_of = columns[s3, 2:]  # indexed by triple start t: code of bin t+2
        for s2 in range(n_samples):
            k2_of = columns[s2, 1:]
            order = stable_sort_by(starts, k2_of, n_codes)
            order = stable_sort_by(order, k3_of, n_codes)
            k1s, k2s, k3s = _gather_sorted(codes, order, k2_of, k3_of)
            pair = np.zeros((rows.shape[1], dim + 1))  # rows^T phis summed over this (s2, s3)'s groups
            used = 0
            i = np.int64(0)  # not the literal 0: numba would compile _sum_group once more for it
            while i < order.size:
                k3 = k3s[i]
                i = _sum_group(k1s, k2s, k3s, i, table, pair_cov, pair_meth, rows[used], run_sum, inv_cov, s2,
                               s3 == 0)
                phis[used, :dim] = table[k3]
                phis[used, dim] = 1.0
                used += 1
                if used == block:
                    pair += np.dot(rows.T, phis)
                    used = 0
            if used > 0:
                pair += np.dot(rows[:used].T, phis[:used])
            _scatter_pair(pair, s2, s3, dim, sd, p12, p13, p23, p123, b_meth, b_cov)


@njit(cache=True, nogil=True)
def _gather_sorted(codes, order, k2_of, k3_of):
    """The codes of the triples in ``order``, contiguous: the group sums then read memory in
    sequence (independent gathers here overlap; dependent ones there would wait)."""
    n = order.size
    k1s = np.empty((n, codes.shape[1]), codes.dtype)
    k2s = np.empty(n, codes.dtype)
    k3s = np.empty(n, codes.dtype)
    for i in range(n):
        t = order[i]
        k1s[i] = codes[t]
        k2s[i] = k2_of[t]
        k3s[i] = k3_of[t]
    return k1s, k2s, k3s


@njit(cache=True, nogil=True)
def _sum_group(k1s, k2s, k3s, i, table, pair_cov, pair_meth, row, run_sum, inv_cov, s2, first_s3):
    """Sum the k3 group starting at sorted triple ``i`` into ``row`` (overwritten); returns
    where the next group starts. Row layout: acc (SD x D, sum of phi(x_t) (x) phi_k2,
    flattened), then sum phi(x_t) (SD), sum phi_k2 (D), sum mu^s2, sum c^s2 of the middle bins."""
    n_samples = k1s.shape[1]
    dim = table.shape[1]
    sd = n_samples * dim
    base = sd * dim
    row[:] = 0.0
    k3 = k3s[i]
    n = k3s.size
    while i < n and k3s[i] == k3:
        k2 = k2s[i]
        run_sum[:] = 0.0
        count = 0
        while i < n and k3s[i] == k3 and k2s[i] == k2:
            for s1 in range(n_samples):
                k1 = k1s[i, s1]
                o1 = s1 * dim
                for d in range(dim):
                    run_sum[o1 + d] += table[k1, d]
            count += 1
            i += 1
        # only phi(x_t) varies within a run: one outer product with phi_k2 per run
        for a in range(sd):
            r = run_sum[a]
            o = a * dim
            for d in range(dim):
                row[o + d] += r * table[k2, d]
        for a in range(sd):
            row[base + a] += run_sum[a]
        for d in range(dim):
            row[base + sd + d] += count * table[k2, d]
        row[base + sd + dim] += count * pair_meth[k2]
        row[base + sd + dim + 1] += count * pair_cov[k2]
        if first_s3:
            inv_cov[s2] += count / (pair_cov[k2] + 2.0)
    return i


@njit(cache=True, nogil=True)
def _scatter_pair(pair, s2, s3, dim, sd, p12, p13, p23, p123, b_meth, b_cov):
    """Add one (s2, s3)'s rows^T phis (pair, see accumulate_triples) to the outputs' blocks."""
    o2 = s2 * dim
    o3 = s3 * dim
    base = sd * dim
    for a in range(sd):
        for b in range(dim):
            r = a * dim + b
            for d in range(dim):
                p123[a, o2 + b, o3 + d] += pair[r, d]
            if s3 == 0:  # p12 once per s2: the ones column
                p12[a, o2 + b] += pair[r, dim]
    for d in range(dim):
        if s2 == 0:  # p13 once per s3
            for a in range(sd):
                p13[a, o3 + d] += pair[base + a, d]
        for b in range(dim):
            p23[o2 + b, o3 + d] += pair[base + sd + b, d]
        b_meth[s2, o3 + d] += pair[base + sd + dim, d]
        b_cov[s2, o3 + d] += pair[base + sd + dim + 1, d]


@njit(cache=True, nogil=True)
def feature_sq_norm_13(codes, starts, sq_norm):
    """sum over triples of |phi(x_t)|^2 |phi(x_t+2)|^2 (sq_norm[k] = |table[k]|^2)."""
    total = 0.0
    n_samples = codes.shape[1]
    for t in starts:
        a = 0.0
        c = 0.0
        for s in range(n_samples):
            a += sq_norm[codes[t, s]]
            c += sq_norm[codes[t + 2, s]]
        total += a * c
    return total


@njit(cache=True, nogil=True)
def accumulate_histogram(tuple_codes, tuple_counts, base, row, rows, lo, hi, strides, hist):
    """hist[cell] += count * prod_g weight_g over every combination of the thinned cells of
    each tuple's codes (see features.Thinning). tuple_codes (T, G); strides (G,) flatten the
    G per-sample cells into one index. The last slot is the innermost, contiguous loop."""
    n_groups = tuple_codes.shape[1]
    outer = n_groups - 1
    start = np.empty(n_groups, np.int64)
    first = np.empty(n_groups, np.int64)
    last = np.empty(n_groups, np.int64)
    rid = np.empty(n_groups, np.int64)
    j = np.empty(n_groups, np.int64)
    for t in range(tuple_codes.shape[0]):
        for g in range(n_groups):
            code = tuple_codes[t, g]
            start[g] = base[code]
            rid[g] = row[code]
            if rid[g] < 0:
                first[g] = 0
                last[g] = 0
            else:
                first[g] = lo[rid[g]]
                last[g] = hi[rid[g]]
            j[g] = first[g]
        r_last = rid[outer]
        while True:
            w = tuple_counts[t]
            cell = 0
            for g in range(outer):
                if rid[g] >= 0:
                    w *= rows[rid[g], j[g]]
                cell += (start[g] + j[g]) * strides[g]
            cell += start[outer] * strides[outer]
            if r_last < 0:
                hist[cell] += w
            else:
                for jj in range(first[outer], last[outer] + 1):
                    hist[cell + jj * strides[outer]] += w * rows[r_last, jj]
            g = outer - 1
            while g >= 0:
                j[g] += 1
                if j[g] <= last[g]:
                    break
                j[g] = first[g]
                g -= 1
            if g < 0:
                break


@njit(cache=True, nogil=True)
def thinned_outer_rows(tuple_codes, tuple_counts, row, rows, first_slot, n_slots, out):
    """Row i of ``out``: the outer product (Khatri-Rao, row-major) of the thinned weights
    rows[row[code]] of slots first_slot .. first_slot + n_slots - 1 of tuple i, times
    ``tuple_counts[i]`` (ones to leave them out); every slot of these tuples is thinned."""
    width = rows.shape[1]
    for i in range(tuple_codes.shape[0]):
        out[i, 0] = tuple_counts[i]
        size = 1
        for g in range(first_slot, first_slot + n_slots):
            weights = rows[row[tuple_codes[i, g]]]
            # expand in place from the back: entry (p, j) of the new product is entry p of the old times w_j
            for p in range(size - 1, -1, -1):
                v = out[i, p]
                for j in range(width - 1, -1, -1):
                    out[i, p * width + j] = v * weights[j]
            size *= width


@njit(cache=True, nogil=True)
def add_coverage_features(codes, starts, bucket_of_code, table, out):
    """out[s, bucket of bin t+1's pair in s] += table[bin t+2's code in s] for every triple
    start t (codes (n, S), out (S, buckets, D)): per triple, not per code, so a few triples
    cost little however many codes the table holds."""
    n_samples, dim = codes.shape[1], table.shape[1]
    for t in starts:
        for s in range(n_samples):
            bucket = bucket_of_code[codes[t + 1, s]]
            k3 = codes[t + 2, s]
            for d in range(dim):
                out[s, bucket, d] += table[k3, d]


@njit(cache=True, nogil=True)
def gather_add(out, table, codes, rows):
    """out[rows[i]] += table[codes[i]] (the projected feature: one sample's rows added)."""
    dim = out.shape[1]
    for i in range(rows.size):
        r = rows[i]
        c = codes[i]
        for k in range(dim):
            out[r, k] += table[c, k]
