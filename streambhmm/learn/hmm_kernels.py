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


# The scaled recursion underflows only on extreme models (zeros in the transition matrix meeting
# emissions thousands of nats apart); the sequence is then redone in the log domain, which is
# exact for every valid model. Below TINY a normalizer counts as underflowed.
from ._refine_kernels import TINY  # noqa: E402  (the refinement kernels' underflow bound too)


@njit(cache=True, nogil=True)
def _logsumexp(values):
    top = -np.inf
    for v in values:
        if v > top:
            top = v
    if top == -np.inf:
        return top
    total = 0.0
    for v in values:
        total += np.exp(v - top)
    return top + np.log(total)


@njit(cache=True, nogil=True)
def _sequence_scaled(emis, offset, end, startprob, transmat, codes, final_beta, alpha, start, trans,
                     code_weights):
    """One sequence by the scaled recursion on the shifted emissions ``emis``; adds its
    statistics and returns (ok, log-likelihood less the shifts), leaving the posteriors in
    ``alpha``. Adds nothing and returns ok = False if a normalizer underflows."""
    m = emis.shape[1]
    loglik = 0.0
    product = 1.0
    predicted = np.empty(m)
    for t in range(offset, end):
        if t == offset:
            for j in range(m):  # not predicted[:] = startprob: numba compiles its shape error's message for 2.7 s
                predicted[j] = startprob[j]
        else:  # row by row: contiguous in transmat
            predicted[:] = 0.0
            for i in range(m):
                a = alpha[t - 1, i]
                for j in range(m):
                    predicted[j] += a * transmat[i, j]
        total = 0.0
        for j in range(m):
            alpha[t, j] = predicted[j] * emis[t, j]
            total += alpha[t, j]
        if not total > TINY:
            return False, 0.0
        if total > 1e-140:  # normalizers multiplied, one log per hundred-odd bins
            product *= total
            if product < 1e-140:
                loglik += np.log(product)
                product = 1.0
        else:
            loglik += np.log(total)
        scale = 1.0 / total
        for j in range(m):
            alpha[t, j] *= scale
    loglik += np.log(product)
    # Backward: each message normalized to sum 1, each posterior by its own sum, written over
    # alpha[t] (no longer needed). The expected transitions xi_t(i, j) = alpha_{t-1}(i) a_ij
    # e_t(j) beta_t(j) / Z_t are summed without a_ij, an outer product per bin, and
    # multiplied by a_ij once at the end.
    s_pairs = np.zeros((m, m))
    beta = final_beta / final_beta.sum()
    weighted = np.empty(m)
    new_beta = np.empty(m)
    for t in range(end - 1, offset - 1, -1):
        norm = 0.0
        for h in range(m):
            alpha[t, h] *= beta[h]
            norm += alpha[t, h]
        if not (norm > TINY and norm < np.inf):
            return False, 0.0
        scale = 1.0 / norm
        for h in range(m):
            alpha[t, h] *= scale
        if t == offset:
            break
        for j in range(m):
            weighted[j] = emis[t, j] * beta[j]
        xi_norm = 0.0
        beta_norm = 0.0
        for i in range(m):
            acc = 0.0
            for j in range(m):
                acc += transmat[i, j] * weighted[j]
            new_beta[i] = acc
            beta_norm += acc
            xi_norm += alpha[t - 1, i] * acc
        if not (xi_norm > TINY and beta_norm > TINY and xi_norm < np.inf and beta_norm < np.inf):
            return False, 0.0
        scale = 1.0 / xi_norm
        for i in range(m):
            a = alpha[t - 1, i] * scale
            for j in range(m):
                s_pairs[i, j] += a * weighted[j]
        scale = 1.0 / beta_norm
        for i in range(m):
            beta[i] = new_beta[i] * scale
    for h in range(m):
        start[h] += alpha[offset, h]
    trans += s_pairs * transmat
    add_code_weights(alpha, codes, offset, end, code_weights)
    return True, loglik


@njit(cache=True, nogil=True)
def add_code_weights(post, codes, offset, end, code_weights):
    """code_weights[s, codes[s, t]] += post[t] for the sequence's bins (codes < 0: none)."""
    m = post.shape[1]
    for t in range(offset, end):
        for s in range(codes.shape[0]):
            k = codes[s, t]
            if k >= 0:
                for h in range(m):
                    code_weights[s, k, h] += post[t, h]


@njit(cache=True, nogil=True)
def _sequence_log(log_b, offset, end, startprob, transmat, codes, final_beta, start, trans, code_weights, post):
    """One sequence in the log domain (exact for any valid model); adds its statistics,
    writes its posteriors into ``post`` and returns its log-likelihood."""
    n = end - offset
    m = log_b.shape[1]
    log_a = np.log(transmat)
    la = np.empty((n, m))
    lb = np.empty((n, m))
    terms = np.empty(m)
    for h in range(m):
        la[0, h] = np.log(startprob[h]) + log_b[offset, h]
    for t in range(1, n):
        for j in range(m):
            for i in range(m):
                terms[i] = la[t - 1, i] + log_a[i, j]
            la[t, j] = _logsumexp(terms) + log_b[offset + t, j]
    loglik = _logsumexp(la[n - 1])
    for h in range(m):
        lb[n - 1, h] = np.log(final_beta[h])
    for t in range(n - 1, 0, -1):
        for i in range(m):
            for j in range(m):
                terms[j] = log_a[i, j] + log_b[offset + t, j] + lb[t, j]
            lb[t - 1, i] = _logsumexp(terms)
    pair = np.empty(m * m)
    for t in range(n):
        for h in range(m):
            terms[h] = la[t, h] + lb[t, h]
        z = _logsumexp(terms)
        for h in range(m):
            post[offset + t, h] = np.exp(terms[h] - z)
            if t == 0:
                start[h] += post[offset + t, h]
        if t > 0:
            for i in range(m):
                for j in range(m):
                    pair[i * m + j] = la[t - 1, i] + log_a[i, j] + log_b[offset + t, j] + lb[t, j]
            z = _logsumexp(pair)
            for i in range(m):
                for j in range(m):
                    trans[i, j] += np.exp(pair[i * m + j] - z)
    add_code_weights(post, codes, offset, end, code_weights)
    return loglik


@njit(cache=True, nogil=True)
def _shift_rows(log_b, shift, out):
    """Each row's maximum into ``shift``, the row less it into ``out``."""
    n, m = log_b.shape
    for t in range(n):
        top = log_b[t, 0]
        for h in range(1, m):
            if log_b[t, h] > top:
                top = log_b[t, h]
        shift[t] = top
        for h in range(m):
            out[t, h] = log_b[t, h] - top


class Workspace:
    """Buffers for forward_backward on n bins and m states, kept across EM iterations: a
    fresh 10 MB array costs more in page faults than a pass of the recursion over it."""

    def __init__(self):
        self.n, self.m = -1, -1

    def arrays(self, n: int, m: int):
        if (n, m) != (self.n, self.m):
            self.n, self.m = n, m
            self.emis, self.alpha, self.shift = np.empty((n, m)), np.empty((n, m)), np.empty(n)
        return self.emis, self.alpha, self.shift


def forward_backward(log_b, lengths, startprob, transmat, codes, n_codes, want_posteriors, final_beta,
                     workspace=None):
    """Log-likelihood and EM statistics (and optionally posteriors) over all sequences.

    ``codes`` (S, n) number each bin's (coverage, methylated) pair in each sample (a table
    of ``n_codes`` distinct pairs; negative: add nothing); the statistics of the emissions
    are the posterior-weighted counts of each code; in C order, as every caller passes them
    (another layout is another compilation of the recursion, 6-8 s on a first run).
    ``final_beta`` (m,) is the backward message into the last bin of each sequence: ones for
    a sequence that really ends, P(later data | state) for a segment cut out of one.
    ``workspace`` (a Workspace) lends the buffers; the posteriors returned are then its own.

    Returns loglik, start (m,), trans (m, m) expected transition counts, code weights
    (S, n_codes, m), posteriors (n, m) or (0, m).
    """
    n, m = log_b.shape
    emis, alpha, shift = (workspace or Workspace()).arrays(n, m)
    _shift_rows(log_b, shift, emis)
    np.exp(emis, out=emis)  # numpy's vector exp: a third of the recursion's time by numba's scalar one
    code_weights = np.zeros((codes.shape[0], n_codes, m))
    loglik, start, trans = _forward_backward(log_b, emis, shift, alpha, lengths, startprob, transmat, codes,
                                             final_beta, code_weights)
    return loglik, start, trans, code_weights, alpha if want_posteriors else np.empty((0, m))


@njit(cache=True, nogil=True)
def _forward_backward(log_b, emis, shift, alpha, lengths, startprob, transmat, codes, final_beta, code_weights):
    n, m = log_b.shape
    start = np.zeros(m)
    trans = np.zeros((m, m))
    loglik = 0.0
    offset = np.int64(0)  # not the literal 0: numba would compile the callees once more for it
    for length in lengths:
        if length == 0:
            continue
        end = offset + length
        ok, value = _sequence_scaled(emis, offset, end, startprob, transmat, codes, final_beta, alpha, start,
                                     trans, code_weights)
        if ok:
            for t in range(offset, end):
                value += shift[t]
        else:
            value = _sequence_log(log_b, offset, end, startprob, transmat, codes, final_beta, start, trans,
                                  code_weights, alpha)
        loglik += value
        offset = end
    return loglik, start, trans


@njit(cache=True, nogil=True)
def forward_message(log_b, startprob, transmat):
    """One sequence forward: (log-likelihood, filtered state distribution at its last bin)."""
    n, m = log_b.shape
    alpha = startprob.copy()
    new_alpha = np.empty(m)
    emis = np.empty(m)
    loglik = 0.0
    for t in range(n):
        shift = _shifted_emissions(log_b, t, emis)
        if t > 0:
            for j in range(m):
                acc = 0.0
                for i in range(m):
                    acc += alpha[i] * transmat[i, j]
                new_alpha[j] = acc
            for j in range(m):  # (not alpha[:] = new_alpha: see _sequence_scaled)
                alpha[j] = new_alpha[j]
        total = 0.0
        for h in range(m):
            new_alpha[h] = alpha[h] * emis[h]
            total += new_alpha[h]
        if total > TINY:
            loglik += shift + np.log(total)
            for h in range(m):
                alpha[h] = new_alpha[h] / total
        else:  # underflow: this step in the log domain
            for h in range(m):
                new_alpha[h] = np.log(alpha[h]) + log_b[t, h]
            z = _logsumexp(new_alpha)
            loglik += z
            for h in range(m):
                alpha[h] = np.exp(new_alpha[h] - z)
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
    terms = np.empty(m)
    for t in range(n - 1, -1, -1):
        _shifted_emissions(log_b, t, emis)
        total = 0.0
        for i in range(m):
            acc = 0.0
            for j in range(m):
                acc += transmat[i, j] * emis[j] * beta[j]
            new_beta[i] = acc
            total += acc
        if total > TINY:
            for i in range(m):
                beta[i] = new_beta[i] / total
        else:  # underflow: this step in the log domain
            for i in range(m):
                for j in range(m):
                    terms[j] = np.log(transmat[i, j]) + log_b[t, j] + np.log(beta[j])
                new_beta[i] = _logsumexp(terms)
            z = _logsumexp(new_beta)
            for i in range(m):
                beta[i] = np.exp(new_beta[i] - z)
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


@njit(cache=True, nogil=True)
def add_rows(out, table, codes):
    """out[t] += table[codes[t]] for every t (each sample's per-pair emission terms)."""
    m = out.shape[1]
    for t in range(codes.size):
        c = codes[t]
        for h in range(m):
            out[t, h] += table[c, h]
