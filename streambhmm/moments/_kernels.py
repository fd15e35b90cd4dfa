"""Compiled kernel for the triple sums (see streambhmm.moments.sums for what they are).

Grouping. phi takes one of K table rows, so triples are ordered by (code of bin t+2,
code of bin t+1) with two stable counting sorts. Within a run of equal (k3, k2) only
phi(x_t) varies: it is summed (S*D adds per triple) and one outer product with phi_k2
is made per run; when the k3 group ends, one outer product with phi_k3 completes its
contribution to the tensor. The naive einsum costs (S*D)^3 per triple; this costs
S^2 * (S*D + D^2 * runs/triples), and never more than the per-triple grouped kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit

TINY = 1e-280  # below it a mixture (here) or a normalizer (the HMM kernels) counts as underflowed


@njit(cache=True)
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


@njit(cache=True)
def _stable_sort_by(items, keys, n_keys):
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


@njit(cache=True)
def accumulate_triples(codes, starts, table, pair_cov, pair_meth,
                       p12, p13, p23, p123, b_meth, b_cov, inv_cov):
    """Add the sums over the triples starting at ``starts`` to the output arrays (in place).

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
            order = _stable_sort_by(starts, k2_of, n_codes)
            order = _stable_sort_by(order, k3_of, n_codes)
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


@njit(cache=True)
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


@njit(cache=True)
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
def _slot_tables(log_table):
    """Per table entry and state: exp of its log-likelihood less the entry's largest over
    the states, and that shift."""
    n_pairs, m = log_table.shape
    table = np.empty((n_pairs, m))
    shift = np.empty(n_pairs)
    for k in range(n_pairs):
        top = -np.inf
        for h in range(m):
            top = max(top, log_table[k, h])
        shift[k] = top
        for h in range(m):
            table[k, h] = np.exp(log_table[k, h] - top)
    return table, shift


@njit(cache=True, nogil=True)
def mixture_loglik(weight, index, offsets, log_table, pi, g_pi, resp):
    """sum_i weight[i] log sum_h pi_h b_h(cell i), b_h = prod over the cell's slots of
    exp(log_table[entry, h]) (each entry's likelihood in state h). Slot g's entry is
    offsets[g] + index[i, g]. Adds d/d pi into g_pi and each entry's posterior-weighted
    count per state into resp (n_entries, m); returns the sum. Linear domain with
    per-entry shifts, log domain on underflow."""
    n, n_slots = index.shape
    m = pi.size
    table, shift = _slot_tables(log_table)
    log_pi = np.log(pi)
    joint = np.empty(m)
    total = 0.0
    for i in range(n):
        offset_sum = 0.0
        for g in range(n_slots):
            offset_sum += shift[offsets[g] + index[i, g]]
        mix = 0.0
        for h in range(m):
            v = pi[h]
            for g in range(n_slots):
                v *= table[offsets[g] + index[i, g], h]
            joint[h] = v
            mix += v
        if mix < TINY:  # underflow: the same in the log domain
            top = -np.inf
            for h in range(m):
                v = log_pi[h]
                for g in range(n_slots):
                    v += log_table[offsets[g] + index[i, g], h]
                joint[h] = v
                top = max(top, v)
            mix = 0.0
            for h in range(m):
                joint[h] = np.exp(joint[h] - top)
                mix += joint[h]
            offset_sum = top
        total += weight[i] * (np.log(mix) + offset_sum)
        scale = weight[i] / mix
        for h in range(m):
            w = joint[h] * scale
            g_pi[h] += w / pi[h]
            for g in range(n_slots):
                resp[offsets[g] + index[i, g], h] += w
    return total


@njit(cache=True, nogil=True)
def pair_mixture_loglik(weight, index, groups, offsets, log_table, pi, transmat, g_pi, g_a, resp):
    """sum_i weight[i] log sum_jk pi_j A_jk b_j(first bin of cell i) b_k(second bin), b as in
    mixture_loglik over the bin's slots.

    ``index`` (n, 2G): the first G slots are the first bin's, the last G the second's; cells
    are sorted by their first bin, ``groups`` holds where each first bin's cells start (and
    n at the end). The first bin's part u A (u = pi * b(first)) is computed once per group,
    so a cell costs O(m); the gradients with respect to A and the first bin's posterior go
    through z = sum over the group's cells of weight b(second) / value. Adds the gradients
    with respect to pi (m,) and A (m, m), and each entry's posterior-weighted count per
    state into resp; returns the sum. Linear domain with per-entry shifts; a cell whose
    value underflows is done in the log domain."""
    half = index.shape[1] // 2
    m = pi.size
    table, shift = _slot_tables(log_table)
    log_pi = np.log(pi)
    log_a = np.log(transmat)
    bx = np.empty(m)
    u = np.empty(m)
    ua = np.empty(m)
    by = np.empty(m)
    z = np.empty(m)
    first_resp = np.empty(m)
    r = np.empty((m, m))
    total = 0.0
    for grp in range(groups.size - 1):
        i0 = groups[grp]
        sx = 0.0
        for g in range(half):
            sx += shift[offsets[g] + index[i0, g]]
        for h in range(m):
            v = 1.0
            for g in range(half):
                v *= table[offsets[g] + index[i0, g], h]
            bx[h] = v
            u[h] = pi[h] * v
        for k in range(m):
            acc = 0.0
            for j in range(m):
                acc += u[j] * transmat[j, k]
            ua[k] = acc
        z[:] = 0.0
        first_resp[:] = 0.0
        for i in range(i0, groups[grp + 1]):
            sy = 0.0
            for g in range(half, 2 * half):
                sy += shift[offsets[g] + index[i, g]]
            f = 0.0
            for k in range(m):
                v = 1.0
                for g in range(half, 2 * half):
                    v *= table[offsets[g] + index[i, g], k]
                by[k] = v
                f += ua[k] * v
            if f > TINY:
                total += weight[i] * (np.log(f) + sx + sy)
                scale = weight[i] / f
                for k in range(m):
                    z[k] += scale * by[k]
                    w = scale * by[k] * ua[k]
                    for g in range(half, 2 * half):
                        resp[offsets[g] + index[i, g], k] += w
                continue
            # underflow: this cell's posterior over (j, k) in the log domain
            top = -np.inf
            for j in range(m):
                lx = log_pi[j]
                for g in range(half):
                    lx += log_table[offsets[g] + index[i, g], j]
                for k in range(m):
                    ly = log_a[j, k]
                    for g in range(half, 2 * half):
                        ly += log_table[offsets[g] + index[i, g], k]
                    r[j, k] = lx + ly
                    top = max(top, r[j, k])
            f = 0.0
            for j in range(m):
                for k in range(m):
                    r[j, k] = np.exp(r[j, k] - top)
                    f += r[j, k]
            total += weight[i] * (np.log(f) + top)
            scale = weight[i] / f
            for j in range(m):
                for k in range(m):
                    w = r[j, k] * scale
                    g_pi[j] += w / pi[j]
                    g_a[j, k] += w / transmat[j, k]
                    first_resp[j] += w
                    for g in range(half, 2 * half):
                        resp[offsets[g] + index[i, g], k] += w
        # the group's first bin: posterior of state j = u_j (A z)_j (+ underflowed cells)
        for j in range(m):
            acc = 0.0
            for k in range(m):
                acc += transmat[j, k] * z[k]
                g_a[j, k] += u[j] * z[k]
            g_pi[j] += bx[j] * acc
            w = u[j] * acc + first_resp[j]
            for g in range(half):
                resp[offsets[g] + index[i0, g], j] += w
    return total


@njit(cache=True, nogil=True)
def gather_add(out, table, codes, rows):
    """out[rows[i]] += table[codes[i]] (the projected feature: one sample's rows added)."""
    dim = out.shape[1]
    for i in range(rows.size):
        r = rows[i]
        c = codes[i]
        for k in range(dim):
            out[r, k] += table[c, k]
