"""Compiled kernels of the refinement's histogram likelihoods (streambhmm.learn.histograms): the
state mixture of single bins and of adjacent pairs of bins, with their gradients."""

from __future__ import annotations

import numpy as np
from numba import njit

TINY = 1e-280  # below it a mixture (here) or a normalizer (the HMM kernels) counts as underflowed


@njit(cache=True, nogil=True)
def _combination_tables(entries, table, shift, m):
    """Per combination of entries (a row of ``entries``): the product of their shifted
    likelihoods in each state (combinations, m) and the sum of their shifts."""
    n = entries.shape[0]
    product = np.ones((n, m))
    total_shift = np.zeros(n)
    for c in range(n):
        for g in range(entries.shape[1]):
            e = entries[c, g]
            total_shift[c] += shift[e]
            for h in range(m):
                product[c, h] *= table[e, h]
    return product, total_shift


@njit(cache=True, nogil=True)
def mixture_loglik(weight, groups, x_entries, y_of_cell, y_entries, log_table, table, shift, pi, transmat, paired,
                   g_pi, g_a, resp, mixture):
    """sum_i weight[i] log sum_jk pi_j A_jk b_j(x_i) b_k(y_i) over cells i = (x_i, y_i), where
    b_h(.) is the product over a part's entries of exp(log_table[entry, h]) (each entry's
    likelihood in state h). x is the cell's first part of slots, y the rest, each a
    combination of entries: cells are sorted by x, ``groups`` holds where each x's cells
    start (and n at the end) and ``x_entries`` its entries (groups, slots of x; none and one
    group when all the slots are y); y is the row ``y_of_cell[i]`` of ``y_entries``
    (combinations, slots of y). ``table`` holds exp(log_table - shift),
    ``shift`` each entry's largest over the states (made by the caller: numpy's vectorized
    exp is several times faster than a scalar one). With ``paired``, A is ``transmat``, for
    adjacent pairs of bins (x the first bin, y the second); without, A is the identity and
    ``transmat`` is not read: a single bin, its slots split in two, sum_h pi_h b_h(x) b_h(y).
    (A flag, not None: one argument type, so numba compiles the kernel once.)

    The x part u A (u = pi * b(x)) is computed once per group and b(y) once per combination,
    so a cell costs O(m); the gradients and x's posterior go through z = sum over the group's
    cells of weight b(y) / value, y's posterior through a sum per combination. Adds the
    gradients with respect to pi (m,) and A (m, m; when ``paired``), and each entry's
    posterior-weighted count per state into resp. Linear domain with per-entry shifts; a
    cell whose value underflows is done in the log domain. The logs of the cells' shifted
    mixtures are left to the caller (vectorized): each cell's is stored in ``mixture`` (1 for
    a cell done in the log domain), and the returned sum is the rest, so the log-likelihood
    is the return value plus weight @ log(mixture)."""
    m = pi.size
    by, sy = _combination_tables(y_entries, table, shift, m)
    y_resp = np.zeros(by.shape)  # each y combination's posterior-weighted count per state
    log_pi = np.log(pi)
    log_a = np.log(transmat) if paired else np.zeros((m, m))
    bx = np.empty(m)
    u = np.empty(m)
    ua = np.empty(m)
    z = np.empty(m)
    first_resp = np.empty(m)
    r = np.empty((m, m))
    total = 0.0
    for grp in range(groups.size - 1):
        sx = 0.0
        for h in range(m):
            bx[h] = 1.0
        for g in range(x_entries.shape[1]):
            e = x_entries[grp, g]
            sx += shift[e]
            for h in range(m):
                bx[h] *= table[e, h]
        for h in range(m):
            u[h] = pi[h] * bx[h]
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
        for i in range(groups[grp], groups[grp + 1]):
            c = y_of_cell[i]
            f = 0.0
            for k in range(m):
                f += ua[k] * by[c, k]
            if f > TINY:
                mixture[i] = f
                total += weight[i] * (sx + sy[c])
                scale = weight[i] / f
                for k in range(m):
                    weighted = scale * by[c, k]
                    z[k] += weighted
                    y_resp[c, k] += weighted * ua[k]
                continue
            # underflow: this cell's posterior over (j, k) in the log domain (k = j without A)
            top = -np.inf
            for j in range(m):
                lx = log_pi[j]
                for g in range(x_entries.shape[1]):
                    lx += log_table[x_entries[grp, g], j]
                for k in range(m):
                    r[j, k] = -np.inf
                    if not paired and k != j:
                        continue
                    ly = log_a[j, k]
                    for g in range(y_entries.shape[1]):
                        ly += log_table[y_entries[c, g], k]
                    r[j, k] = lx + ly
                    top = max(top, r[j, k])
            f = 0.0
            for j in range(m):
                for k in range(m):
                    r[j, k] = np.exp(r[j, k] - top)
                    f += r[j, k]
            mixture[i] = 1.0
            total += weight[i] * (np.log(f) + top)
            scale = weight[i] / f
            for j in range(m):
                for k in range(m):
                    w = r[j, k] * scale
                    g_pi[j] += w / pi[j]
                    if paired:
                        g_a[j, k] += w / transmat[j, k]
                    first_resp[j] += w
                    y_resp[c, k] += w
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
            for g in range(x_entries.shape[1]):
                resp[x_entries[grp, g], j] += w
    for c in range(y_entries.shape[0]):
        for g in range(y_entries.shape[1]):
            for k in range(m):
                resp[y_entries[c, g], k] += y_resp[c, k]
    return total


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _dot(a, b):
    """sum a * b, its additions reordered so that they run in vector registers (the one
    reduction of triples_divergence's loop over K^3 entries: the rest vectorizes as it is)."""
    total = 0.0
    for i in range(a.size):
        total += a[i] * b[i]
    return total


@njit(cache=True, nogil=True)
def triples_divergence(emp, obs, pi, transmat, scale, g_obs, g_pi, g_a):
    """-scale sum_abc emp[a, b, c] log T[a, b, c] for the model's third-order tensor
    T = sum_ijk pi_i A_ij A_jk O[a, i] O[b, j] O[c, k] (obs O (K, m)), its gradients added
    into g_obs (K, m), g_pi (m,) and g_a (m, m). Contracted one index at a time, as numpy's
    tensordots were, so no step costs more than K^3 m; compiled to run its starts' threads
    side by side (numpy's many small products hold the GIL)."""
    n, m = obs.shape
    first = np.zeros((n, m, m))  # (a, j, k): sum_i O[a, i] pi_i A_ij A_jk
    for x in range(n):
        for i in range(m):
            o = obs[x, i] * pi[i]
            for j in range(m):
                oa = o * transmat[i, j]
                for k in range(m):
                    first[x, j, k] += oa * transmat[j, k]
    second = np.zeros((n, n, m))  # (a, b, k): sum_j O[b, j] first[a, j, k]
    for x in range(n):
        for y in range(n):
            for j in range(m):
                o = obs[y, j]
                for k in range(m):
                    second[x, y, k] += o * first[x, j, k]
    q3 = np.zeros((n, n, m))  # (a, b, k): sum_c q[a, b, c] O[c, k], q = d loss / d T
    by_state = np.ascontiguousarray(obs.T)  # (m, K): the loops over c run along rows
    g_by_state = np.zeros((m, n))
    model = np.empty(n)
    q = np.empty(n)
    total = 0.0
    for x in range(n):
        for y in range(n):
            here = second[x, y]
            model[:] = 0.0
            for k in range(m):
                s = here[k]
                for z in range(n):
                    model[z] += by_state[k, z] * s
            for z in range(n):
                e = emp[x, y, z]
                t = max(model[z], 1e-300)
                total += e * np.log(t)
                q[z] = -scale * e / t
            for k in range(m):
                q3[x, y, k] = _dot(q, by_state[k])
                s = here[k]
                for z in range(n):
                    g_by_state[k, z] += q[z] * s
    g_obs += g_by_state.T
    q23 = np.zeros((n, m, m))  # (a, j, k): sum_b q3[a, b, k] O[b, j]
    for x in range(n):
        for y in range(n):
            for j in range(m):
                o = obs[y, j]
                for k in range(m):
                    q23[x, j, k] += q3[x, y, k] * o
                    g_obs[y, j] += q3[x, y, k] * first[x, j, k]
    g_core = np.zeros((m, m, m))  # (i, j, k): d loss / d (pi_i A_ij A_jk)
    for x in range(n):
        for i in range(m):
            o = obs[x, i]
            acc = 0.0
            for j in range(m):
                for k in range(m):
                    g_core[i, j, k] += o * q23[x, j, k]
                    acc += q23[x, j, k] * pi[i] * transmat[i, j] * transmat[j, k]
            g_obs[x, i] += acc
    for i in range(m):
        for j in range(m):
            for k in range(m):
                g = g_core[i, j, k]
                g_pi[i] += g * transmat[i, j] * transmat[j, k]
                g_a[i, j] += g * pi[i] * transmat[j, k]
                g_a[j, k] += g * pi[i] * transmat[i, j]
    return -scale * total
