"""Compiled kernel for the triple sums (see streambhmm.moments.sums for what they are).

Grouping. phi takes one of K table rows. The triples are ordered once by the codes of their
middle bin t+1 in every sample, then, for each sample s3, by the code k3 of bin t+2 in s3
(stable counting sorts). Within a k3 group every triple shares phi_k3, so the group's part
of the sums is (sum over its triples of X_t (x) Y_t) (x) phi_k3, with X_t = [F(x_t), 1]
and Y_t = [phi^s(x_t+1), mu^s(x_t+1), c^s(x_t+1) for each sample s, 1]. Triples whose
middle bins have the same codes (a run) share Y_t, so each run is one row: its X_t summed,
and its Y. The group's sum is then one matrix product of its rows (BLAS; a loop for fewer
than SMALL rows, where the call costs more than the sums).

Batched groups. Each group's X^T Y, flattened, is a row of a (block x (SD+1)(S(D+2)+1))
matrix and its phi_k3 a row of a (block x D) one; one GEMM per block of groups adds
phis^T rows (with a column of ones: the sums over groups) to a buffer for s3, scattered
once into p123, p12, p13, p23, b_methylated and b_coverage. Memory: one piece of a group's
rows, the block's rows and the buffer, whatever the number of triples, plus the sorted
orders (as many as the chunk's triples).

Cost per sample s3: (SD+1)(S(D+2)+1) multiply-adds per run and (D+1) times that per k3
group, both at GEMM speed, plus S*D additions per triple. Real data hold ~10^4 codes; an
earlier kernel made the products of each (s2, s3) pair of samples' runs in scalar loops,
at twice the cost on real chromosomes (docs/benchmarks.md).
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


SMALL = 6  # a piece of fewer rows (runs) is summed in a loop: a BLAS call costs more there
GROUP_BLOCK = 64  # k3 groups per GEMM: bounds the buffer at GROUP_BLOCK x (SD + 1)(S(D + 2) + 1)
PIECE = 128  # rows (runs) of a group gathered at a time


@njit(cache=True, nogil=True)
def accumulate_triples(codes, starts, table, pair_cov, pair_meth,
                       p12, p13, p23, p123, b_meth, b_cov, inv_cov, block=GROUP_BLOCK, piece=PIECE):
    """Add the sums over the triples starting at ``starts`` to the output arrays (in place).

    codes (n, S) int32 index table (K, D); pair_cov/pair_meth (K,) give each code's pair.
    Outputs: p12, p13, p23 (SD, SD); p123 (SD, SD, SD); b_meth, b_cov (S, SD); inv_cov (S,).
    ``block``: k3 groups per GEMM; ``piece``: rows (runs) gathered at a time.
    """
    n_samples = codes.shape[1]
    n_codes, dim = table.shape
    sd = n_samples * dim
    nx = sd + 1  # X_t = [F(x_t), 1]
    ny = n_samples * (dim + 2) + 1  # Y_t = [phi^s, mu^s, c^s of bin t+1 for each s, 1]
    xs = np.empty((piece, nx))
    ys = np.empty((piece, ny))
    more = np.empty((nx, ny))
    rows = np.zeros((block, nx * ny))  # one k3 group's X^T Y per row
    phis = np.zeros((block, dim + 1))  # the groups' phi_k3, and 1 (the last column sums the rows)
    columns = codes.T.copy()  # contiguous per-sample codes for the sort keys
    for s in range(n_samples):
        for t in starts:
            inv_cov[s] += 1.0 / (pair_cov[codes[t + 1, s]] + 2.0)
    by_middle = starts  # ordered by the codes of bin t+1 in every sample: equal ones are a run
    for s in range(n_samples - 1, -1, -1):
        by_middle = stable_sort_by(by_middle, columns[s, 1:], n_codes)
    for s3 in range(n_samples):
        k3_of = columns[s3, 2:]  # indexed by triple start t: code of bin t+2
        order = stable_sort_by(by_middle, k3_of, n_codes)
        # phis^T rows summed over this s3's groups; this way round (D + 1 rows, not (SD + 1)(S(D + 2) + 1))
        # the GEMM of a block of groups runs 1.4-1.8x faster, and that GEMM is most of a chunk's fixed cost
        total = np.zeros((dim + 1, nx * ny))
        used = 0
        i = np.int64(0)  # not the literal 0: numba would compile _gather_runs once more for it
        while i < order.size:
            k3 = k3_of[order[i]]
            end = i
            while end < order.size and k3_of[order[end]] == k3:
                end += 1
            group = rows[used].reshape((nx, ny))
            first = True
            while i < end:
                m, i = _gather_runs(codes, order, i, end, table, pair_cov, pair_meth, xs, ys)
                if m < SMALL:
                    if first:
                        group[:, :] = 0.0
                    _add_outer_rows(xs[:m], ys[:m], group)
                elif first:  # the product written in place: no zeroing, no second pass
                    np.dot(xs[:m].T, ys[:m], group)
                else:
                    np.dot(xs[:m].T, ys[:m], more)
                    group += more
                first = False
            for d in range(dim):  # not a slice assignment: numba compiles its shape error's message for 2.4 s
                phis[used, d] = table[k3, d]
            phis[used, dim] = 1.0
            used += 1
            if used == block:
                total += np.dot(phis.T, rows)
                used = 0
        if used > 0:
            total += np.dot(phis[:used].T, rows[:used])
        _scatter(total, s3, n_samples, dim, p12, p13, p23, p123, b_meth, b_cov)


@njit(cache=True, nogil=True)
def _gather_runs(codes, order, i, end, table, pair_cov, pair_meth, xs, ys):
    """Fill rows of ``xs`` and ``ys`` from the triples order[i:end], one row per run of equal
    codes of bin t+1: xs the run's sum of X_t, ys its Y (accumulate_triples), so that
    xs^T ys is their sum of X_t (x) Y_t. Stops when the rows are full; returns the rows
    filled and where the next run starts."""
    n_samples = codes.shape[1]
    dim = table.shape[1]
    last_x, last_y = xs.shape[1] - 1, ys.shape[1] - 1
    m = 0
    while i < end and m < xs.shape[0]:
        middle = order[i] + 1
        xs[m, :] = 0.0
        for s in range(n_samples):
            k2 = codes[middle, s]
            o = s * (dim + 2)
            for d in range(dim):
                ys[m, o + d] = table[k2, d]
            ys[m, o + dim] = pair_meth[k2]
            ys[m, o + dim + 1] = pair_cov[k2]
        ys[m, last_y] = 1.0
        while i < end and _same_bin(codes, order[i] + 1, middle):
            t = order[i]
            for s in range(n_samples):
                k1 = codes[t, s]
                for d in range(dim):
                    xs[m, s * dim + d] += table[k1, d]
            xs[m, last_x] += 1.0
            i += 1
        m += 1
    return m, i


@njit(cache=True, nogil=True)
def _same_bin(codes, a, b):
    """Bins a and b have the same codes in every sample."""
    for s in range(codes.shape[1]):
        if codes[a, s] != codes[b, s]:
            return False
    return True


@njit(cache=True, nogil=True)
def _add_outer_rows(xs, ys, out):
    """out += xs^T ys, in a loop (a few rows)."""
    for r in range(xs.shape[0]):
        for a in range(xs.shape[1]):
            x = xs[r, a]
            for b in range(ys.shape[1]):
                out[a, b] += x * ys[r, b]


@njit(cache=True, nogil=True)
def _scatter(total, s3, n_samples, dim, p12, p13, p23, p123, b_meth, b_cov):
    """Add one s3's phis^T rows (``total``, see accumulate_triples) to the outputs' blocks:
    column (a, j) of total is X's entry a times Y's entry j, row d phi_k3's entry d (d = D:
    the ones)."""
    sd = n_samples * dim
    ny = n_samples * (dim + 2) + 1
    o3 = s3 * dim
    for a in range(sd + 1):
        for s2 in range(n_samples):
            base = a * ny + s2 * (dim + 2)
            for b in range(dim):
                r = base + b
                if a < sd:
                    for d in range(dim):
                        p123[a, s2 * dim + b, o3 + d] += total[d, r]
                    if s3 == 0:  # p12 once: the ones column
                        p12[a, s2 * dim + b] += total[dim, r]
                else:  # X's 1: phi of bin t+1 against phi_k3
                    for d in range(dim):
                        p23[s2 * dim + b, o3 + d] += total[d, r]
            if a == sd:
                for d in range(dim):
                    b_meth[s2, o3 + d] += total[d, base + dim]
                    b_cov[s2, o3 + d] += total[d, base + dim + 1]
        if a < sd:  # Y's 1: F(x_t) against phi_k3
            for d in range(dim):
                p13[a, o3 + d] += total[d, a * ny + ny - 1]


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


@njit(cache=True, nogil=True)
def gather_features(table, codes, lo, hi, out):
    """out[:hi - lo], filled with the features of bins lo..hi - 1: each sample's table row of
    its code, side by side (S * D); returns that view."""
    dim = table.shape[1]
    for i in range(hi - lo):
        for s in range(codes.shape[1]):
            k = codes[lo + i, s]
            for d in range(dim):
                out[i, s * dim + d] = table[k, d]
    return out[:hi - lo]
