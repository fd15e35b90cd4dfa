"""Compiled kernels of the refinement's histogram likelihoods (streambhmm.learn.histograms): the
state mixture of single bins and of adjacent pairs of bins, with their gradients."""

from __future__ import annotations

import numpy as np
from numba import njit

TINY = 1e-280  # below it a mixture (here) or a normalizer (the HMM kernels) counts as underflowed


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
    entries = np.empty(n_slots, np.int64)
    total = 0.0
    for i in range(n):
        offset_sum = 0.0
        for g in range(n_slots):
            entries[g] = offsets[g] + index[i, g]
            offset_sum += shift[entries[g]]
        # slots outer, states inner: each slot's table row is read once, contiguously
        for h in range(m):
            joint[h] = pi[h]
        for g in range(n_slots):
            for h in range(m):
                joint[h] *= table[entries[g], h]
        mix = 0.0
        for h in range(m):
            mix += joint[h]
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
            g_pi[h] += joint[h] * scale / pi[h]
        for g in range(n_slots):
            for h in range(m):
                resp[entries[g], h] += joint[h] * scale
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
    second = np.empty(half, np.int64)
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
            # the second bin's entries; slots outer, states inner (contiguous table rows)
            sy = 0.0
            for g in range(half):
                second[g] = offsets[half + g] + index[i, half + g]
                sy += shift[second[g]]
            by[:] = 1.0
            for g in range(half):
                for k in range(m):
                    by[k] *= table[second[g], k]
            f = 0.0
            for k in range(m):
                f += ua[k] * by[k]
            if f > TINY:
                total += weight[i] * (np.log(f) + sx + sy)
                scale = weight[i] / f
                for k in range(m):
                    z[k] += scale * by[k]
                for g in range(half):
                    for k in range(m):
                        resp[second[g], k] += scale * by[k] * ua[k]
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
