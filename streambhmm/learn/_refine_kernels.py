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
def mixture_loglik(weight, index, half, groups, offsets, log_table, pi, transmat, paired, g_pi, g_a, resp):
    """sum_i weight[i] log sum_jk pi_j A_jk b_j(x_i) b_k(y_i) over cells i = (x_i, y_i): x is
    the cell's first ``half`` slots, y the others, and b_h(.) the product over their slots of
    exp(log_table[entry, h]) (each entry's likelihood in state h; slot g's entry is
    offsets[g] + index[i, g]). With ``paired``, A is ``transmat``, for adjacent pairs of
    bins (x the first bin, y the second); without, A is the identity and ``transmat`` is not
    read: a single bin, its slots split in two, sum_h pi_h b_h(x) b_h(y). (A flag, not None:
    one argument type, so numba compiles the kernel once.)

    Cells are sorted by x, and ``groups`` holds where each x's cells start (and n at the
    end). The x part u A (u = pi * b(x)) is computed once per group, so a cell costs O(m)
    per slot of y; the gradients and x's posterior go through z = sum over the group's cells
    of weight b(y) / value. Adds the gradients with respect to pi (m,) and A (m, m; when
    ``paired``), and each entry's posterior-weighted count per state into resp; returns the sum.
    Linear domain with per-entry shifts; a cell whose value underflows is done in the log
    domain."""
    n_slots = index.shape[1]
    m = pi.size
    table, shift = _slot_tables(log_table)
    log_pi = np.log(pi)
    log_a = np.log(transmat) if paired else np.zeros((m, m))
    bx = np.empty(m)
    u = np.empty(m)
    ua = np.empty(m)
    by = np.empty(m)
    z = np.empty(m)
    first_resp = np.empty(m)
    r = np.empty((m, m))
    weighted = np.empty(m)  # a cell's posterior-weighted y likelihoods
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
            if not paired:
                ua[k] = u[k]
            else:
                acc = 0.0
                for j in range(m):
                    acc += u[j] * transmat[j, k]
                ua[k] = acc
        for k in range(m):
            z[k] = 0.0
            first_resp[k] = 0.0
        for i in range(i0, groups[grp + 1]):
            # y's entries; slots outer, states inner (contiguous table rows)
            sy = 0.0
            for k in range(m):
                by[k] = 1.0
            for g in range(half, n_slots):
                entry = offsets[g] + index[i, g]
                sy += shift[entry]
                for k in range(m):
                    by[k] *= table[entry, k]
            f = 0.0
            for k in range(m):
                f += ua[k] * by[k]
            if f > TINY:
                total += weight[i] * (np.log(f) + sx + sy)
                scale = weight[i] / f
                for k in range(m):
                    weighted[k] = scale * by[k]
                    z[k] += weighted[k]
                    weighted[k] *= ua[k]
                for g in range(half, n_slots):
                    entry = offsets[g] + index[i, g]
                    for k in range(m):
                        resp[entry, k] += weighted[k]
                continue
            # underflow: this cell's posterior over (j, k) in the log domain (k = j without A)
            top = -np.inf
            for j in range(m):
                lx = log_pi[j]
                for g in range(half):
                    lx += log_table[offsets[g] + index[i, g], j]
                for k in range(m):
                    r[j, k] = -np.inf
                    if not paired and k != j:
                        continue
                    ly = log_a[j, k]
                    for g in range(half, n_slots):
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
                    if paired:
                        g_a[j, k] += w / transmat[j, k]
                    first_resp[j] += w
                    for g in range(half, n_slots):
                        resp[offsets[g] + index[i, g], k] += w
        # x's posterior of state j = u_j (A z)_j (+ underflowed cells)
        for j in range(m):
            if not paired:
                acc = z[j]
            else:
                acc = 0.0
                for k in range(m):
                    acc += transmat[j, k] * z[k]
                    g_a[j, k] += u[j] * z[k]
            g_pi[j] += bx[j] * acc
            w = u[j] * acc + first_resp[j]
            for g in range(half):
                resp[offsets[g] + index[i0, g], j] += w
    return total
