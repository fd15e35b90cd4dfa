"""Compiled forward-backward and Viterbi for the Binomial HMM (scaled, so safe on 1e8 bins).

Emissions come in as per-bin log-likelihoods log_b (n, m); each bin's row is shifted by its
maximum before exponentiating, and forward messages are normalized at every step, with the
shifts and normalizers summed into the log-likelihood.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _shifted_emissions(log_b, t, out):
    """exp(log_b[t] - max(log_b[t])) into ``out``; returns the shift."""
    m = log_b.shape[1]
    top = log_b[t, 0]
    for h in range(1, m):
        if log_b[t, h] > top:
            top = log_b[t, h]
    for h in range(m):
        out[h] = np.exp(log_b[t, h] - top)
    return top


@njit(cache=True, nogil=True)
def forward_backward(log_b, lengths, startprob, transmat, methylated, coverage, want_posteriors, final_beta):
    """Log-likelihood and EM statistics (and optionally posteriors) over all sequences.

    ``final_beta`` (m,) is the backward message into the last bin of each sequence: ones
    for a sequence that really ends, P(later data | state) for a segment cut out of one.

    Returns loglik, start (m,), trans (m, m) expected transition counts, meth (m, S) and
    cov (m, S) posterior-weighted count sums, posteriors (n, m) or (0, m).
    """
    n, m = log_b.shape
    n_samples = methylated.shape[1]
    emis = np.empty((n, m))
    alpha = np.empty((n, m))
    scale = np.empty(n)
    start = np.zeros(m)
    trans = np.zeros((m, m))
    meth_sum = np.zeros((m, n_samples))
    cov_sum = np.zeros((m, n_samples))
    post = np.empty((n if want_posteriors else 0, m))
    beta = np.empty(m)
    new_beta = np.empty(m)
    gamma = np.empty(m)
    loglik = 0.0
    offset = 0
    for length in lengths:
        if length == 0:
            continue
        end = offset + length
        for t in range(offset, end):
            loglik += _shifted_emissions(log_b, t, emis[t])
        # forward
        total = 0.0
        for h in range(m):
            alpha[offset, h] = startprob[h] * emis[offset, h]
            total += alpha[offset, h]
        scale[offset] = total
        for h in range(m):
            alpha[offset, h] /= total
        for t in range(offset + 1, end):
            total = 0.0
            for j in range(m):
                acc = 0.0
                for i in range(m):
                    acc += alpha[t - 1, i] * transmat[i, j]
                alpha[t, j] = acc * emis[t, j]
                total += alpha[t, j]
            scale[t] = total
            for j in range(m):
                alpha[t, j] /= total
        for t in range(offset, end):
            loglik += np.log(scale[t])
        # backward, with statistics accumulated on the way; the final message is scaled
        # so that sum(alpha * beta) = 1 at the last bin, as in the scaled recursion
        norm = 0.0
        for h in range(m):
            norm += alpha[end - 1, h] * final_beta[h]
        for h in range(m):
            beta[h] = final_beta[h] / norm
        for t in range(end - 1, offset - 1, -1):
            norm = 0.0
            for h in range(m):
                gamma[h] = alpha[t, h] * beta[h]
                norm += gamma[h]
            for h in range(m):
                gamma[h] /= norm
                for s in range(n_samples):
                    meth_sum[h, s] += gamma[h] * methylated[t, s]
                    cov_sum[h, s] += gamma[h] * coverage[t, s]
                if want_posteriors:
                    post[t, h] = gamma[h]
            if t == offset:
                for h in range(m):
                    start[h] += gamma[h]
                break
            inv = 1.0 / scale[t]
            for i in range(m):
                acc = 0.0
                for j in range(m):
                    w = transmat[i, j] * emis[t, j] * beta[j] * inv
                    trans[i, j] += alpha[t - 1, i] * w
                    acc += w
                new_beta[i] = acc
            for i in range(m):
                beta[i] = new_beta[i]
        offset = end
    return loglik, start, trans, meth_sum, cov_sum, post


@njit(cache=True, nogil=True)
def forward_message(log_b, startprob, transmat):
    """One sequence forward: (log-likelihood, filtered state distribution at its last bin)."""
    n, m = log_b.shape
    alpha = startprob.copy()
    new_alpha = np.empty(m)
    emis = np.empty(m)
    loglik = 0.0
    for t in range(n):
        loglik += _shifted_emissions(log_b, t, emis)
        if t > 0:
            for j in range(m):
                acc = 0.0
                for i in range(m):
                    acc += alpha[i] * transmat[i, j]
                new_alpha[j] = acc
            alpha[:] = new_alpha
        total = 0.0
        for h in range(m):
            alpha[h] *= emis[h]
            total += alpha[h]
        loglik += np.log(total)
        alpha /= total
    return loglik, alpha


@njit(cache=True, nogil=True)
def backward_message(log_b, transmat, final_beta):
    """One sequence backward, from ``final_beta`` at its last bin, to the message into the
    bin before it: P(this sequence and later data | state of the previous bin), rescaled
    to sum to 1."""
    n, m = log_b.shape
    beta = final_beta / final_beta.sum()
    new_beta = np.empty(m)
    emis = np.empty(m)
    for t in range(n - 1, -1, -1):
        _shifted_emissions(log_b, t, emis)
        for i in range(m):
            acc = 0.0
            for j in range(m):
                acc += transmat[i, j] * emis[j] * beta[j]
            new_beta[i] = acc
        beta = new_beta / new_beta.sum()
    return beta


@njit(cache=True, nogil=True)
def viterbi(log_b, lengths, log_startprob, log_transmat):
    """Most probable state path of each sequence; returns (states (n,), total log-probability)."""
    n, m = log_b.shape
    states = np.empty(n, np.int64)
    back = np.empty((n, m), np.int16)
    delta = np.empty(m)
    new_delta = np.empty(m)
    total = 0.0
    offset = 0
    for length in lengths:
        if length == 0:
            continue
        end = offset + length
        for h in range(m):
            delta[h] = log_startprob[h] + log_b[offset, h]
        for t in range(offset + 1, end):
            for j in range(m):
                best = -np.inf
                arg = 0
                for i in range(m):
                    v = delta[i] + log_transmat[i, j]
                    if v > best:
                        best = v
                        arg = i
                new_delta[j] = best + log_b[t, j]
                back[t, j] = arg
            for j in range(m):
                delta[j] = new_delta[j]
        arg = 0
        for h in range(1, m):
            if delta[h] > delta[arg]:
                arg = h
        total += delta[arg]
        states[end - 1] = arg
        for t in range(end - 1, offset, -1):
            arg = back[t, arg]
            states[t - 1] = arg
        offset = end
    return states, total
