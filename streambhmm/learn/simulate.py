"""Synthetic methylomes and exact population moments, for tests, demos and benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..moments.features import (COVERAGE_BUCKETS, DEFAULT_N_BINS, beta_map, cells_per_sample, coverage_bucket,
                                histogram_layout, pairs_from_keys)
from .checks import stationary_weights as stationary_distribution  # noqa: F401 - also public here
from ..moments.sums import Moments


@dataclass(frozen=True)
class Model:
    """Parameters of a Binomial HMM (hmmlearn orientation: transmat rows sum to 1)."""

    methylation: np.ndarray  # (m, S)
    transmat: np.ndarray  # (m, m), transmat[i, j] = P(next = j | current = i)
    startprob: np.ndarray  # (m,)

    @property
    def n_components(self) -> int:
        return self.methylation.shape[0]

    @property
    def n_samples(self) -> int:
        return self.methylation.shape[1]


@dataclass(frozen=True)
class Simulated:
    methylated: np.ndarray  # (n, S) int64
    coverage: np.ndarray  # (n, S) int64
    states: np.ndarray  # (n,) int64
    lengths: np.ndarray  # (k,) int64


def model(methylation, transmat, startprob=None) -> Model:
    """Build a :class:`Model`; ``startprob`` defaults to the stationary distribution."""
    p = np.atleast_2d(np.asarray(methylation, dtype=np.float64))
    if p.shape[0] == 1 and np.ndim(methylation) == 1:
        p = p.T
    a = np.asarray(transmat, dtype=np.float64)
    if a.shape != (p.shape[0], p.shape[0]) or not np.allclose(a.sum(axis=1), 1.0):
        raise ValueError("transmat must be (m, m) with rows summing to 1")
    start = stationary_distribution(a) if startprob is None else np.asarray(startprob, dtype=np.float64)
    return Model(methylation=p, transmat=a, startprob=start)


def paper_model(random_state=None, n_components: int = 4, self_transition: float = 0.2) -> Model:
    """The paper's synthetic protocol (section 5.1) for one sample.

    p_1, p_2 ~ U[0, 0.3], p_3, p_4 ~ U[0.7, 1]; T = a I + (1 - a) U with U's columns
    normalized and a = ``self_transition`` (the paper: 0.2). T is the paper's
    column-stochastic matrix, transposed here; start ~ normalized U[0, 1].
    """
    rng = np.random.default_rng(random_state)
    half = n_components // 2
    p = np.concatenate([rng.uniform(0.0, 0.3, half), rng.uniform(0.7, 1.0, n_components - half)])
    u = rng.uniform(0.0, 1.0, (n_components, n_components))
    column_stochastic = (self_transition * np.eye(n_components)
                         + (1.0 - self_transition) * u / u.sum(axis=0, keepdims=True))
    start = rng.uniform(0.0, 1.0, n_components)
    return Model(methylation=p[:, None], transmat=column_stochastic.T.copy(), startprob=start / start.sum())


@njit(cache=True, nogil=True)
def _markov_chain(cum_start, cum_trans, lengths, uniforms):
    states = np.empty(uniforms.size, np.int64)
    offset = 0
    for length in lengths:
        if length == 0:
            continue
        h = _count_at_most(cum_start, uniforms[offset])
        states[offset] = h
        for t in range(offset + 1, offset + length):
            h = _count_at_most(cum_trans[h], uniforms[t])
            states[t] = h
        offset += length
    return states


@njit(cache=True, nogil=True)
def _count_at_most(cumulative, u):
    """np.searchsorted(cumulative, u, side="right") over a few states (numba's searchsorted
    costs the demo's first run 0.6 s of compilation)."""
    i = 0
    while i < cumulative.size and cumulative[i] <= u:
        i += 1
    return i


def _coverage_means(coverage, m: int, n_samples: int) -> np.ndarray:
    means = np.broadcast_to(np.asarray(coverage, dtype=np.float64), (m, n_samples))
    if (means < 0).any():
        raise ValueError("coverage means must be non-negative")
    return means


def simulate(mdl: Model, lengths, coverage=20.0, random_state=None, dispersion=None) -> Simulated:
    """Sample a methylome from ``mdl``.

    ``coverage`` is the Poisson mean of each bin's coverage: a scalar, one value per
    sample (S,), or one per state and sample (m, S) for state-dependent coverage.
    Each sequence in ``lengths`` starts from ``mdl.startprob``. ``dispersion`` (scalar or
    (m, S)): beta-binomial counts of that overdispersion (each bin's level drawn from the
    Beta distribution of the state's level and overdispersion; streambhmm.learn.emissions).
    """
    rng = np.random.default_rng(random_state)
    lengths = np.atleast_1d(np.asarray(lengths, dtype=np.int64))
    m, n_samples = mdl.methylation.shape
    n = int(lengths.sum())
    cum_start = np.cumsum(mdl.startprob)
    cum_trans = np.cumsum(mdl.transmat, axis=1)
    # guard the searchsorted against rounding: the last edge must exceed any uniform
    cum_start[-1] = cum_trans[:, -1] = 2.0
    states = _markov_chain(cum_start, cum_trans, lengths, rng.random(n))
    cov = rng.poisson(_coverage_means(coverage, m, n_samples)[states])
    level = mdl.methylation[states]
    if dispersion is not None:
        rho = np.broadcast_to(np.asarray(dispersion, dtype=np.float64), (m, n_samples))[states]
        level = rng.beta(level * (1 - rho) / rho, (1 - level) * (1 - rho) / rho)
    meth = rng.binomial(cov, level)
    return Simulated(methylated=meth.astype(np.int64), coverage=cov.astype(np.int64),
                     states=states, lengths=lengths)


def population_moments(mdl: Model, n_bins: int = DEFAULT_N_BINS, coverage=20.0, n_triples: int = 10**12,
                       max_coverage: int | None = None) -> Moments:
    """Exact expected triple sums of a stationary chain, as if from ``n_triples`` triples.

    Coverage is Poisson with the means of :func:`simulate` (scalar, (S,) or (m, S)),
    truncated at ``max_coverage`` and renormalized (default: far in the tail).
    """
    p = mdl.methylation
    m, n_samples = p.shape
    cov_pmf, features = _expected_features(p, coverage, n_bins, max_coverage)
    obs, sq, mean_cov, mean_meth, mean_inv = features

    a = mdl.transmat
    pi = stationary_distribution(a)
    joint12 = pi[:, None] * a  # P(h_t = i, h_t+1 = j)
    joint13 = pi[:, None] * (a @ a)
    coverage_histogram, bin_histogram, pair_histogram = _population_histograms(p, a, pi, cov_pmf)
    # P(coverage bucket | state) per sample, against the third bin's features
    buckets = coverage_bucket(np.arange(cov_pmf.shape[-1]))
    bucket_pmf = np.stack([np.bincount(buckets, w, minlength=len(COVERAGE_BUCKETS))
                           for w in cov_pmf.reshape(m * n_samples, -1)]).reshape(m, n_samples, -1)
    obs_blocks = obs.reshape(n_samples, n_bins, m)
    coverage_features = np.einsum("j,jsb,jk,sdk->sbd", pi, bucket_pmf, a, obs_blocks)
    out = Moments(
        n_samples=n_samples,
        n_bins=n_bins,
        n_triples=int(n_triples),
        p12=obs @ joint12 @ obs.T,
        p13=obs @ joint13 @ obs.T,
        p23=obs @ joint12 @ obs.T,
        p123=np.einsum("a,ab,bc,ia,jb,kc->ijk", pi, a, a, obs, obs, obs, optimize=True),
        b_methylated=(mean_meth.T @ joint12 @ obs.T),
        b_coverage=(mean_cov.T @ joint12 @ obs.T),
        inv_coverage=pi @ mean_inv,
        coverage_histogram=coverage_histogram,
        coverage_features=coverage_features,
        bin_histogram=bin_histogram,
        pair_histogram=pair_histogram,
        sq_norm_13=float(sq @ joint13 @ sq),
    )
    for name in ("p12", "p13", "p23", "p123", "b_methylated", "b_coverage", "inv_coverage",
                 "coverage_histogram", "coverage_features", "bin_histogram", "pair_histogram"):
        setattr(out, name, getattr(out, name) * n_triples)
    out.sq_norm_13 *= n_triples
    return out


def _expected_features(p: np.ndarray, coverage, n_bins: int, max_coverage: int | None):
    """Per state and sample: the coverage pmf (m, S, C) and the expected Beta-map feature
    (as (S * D, m)), E|F|^2, coverage, methylated count and 1 / (coverage + 2)."""
    from scipy.stats import binom, poisson  # here: scipy.stats costs the command line's start 0.3 s

    m, n_samples = p.shape
    means = _coverage_means(coverage, m, n_samples)
    if max_coverage is None:
        max_coverage = int(means.max() + 12 * np.sqrt(means.max() + 1) + 10)
    c = np.arange(max_coverage + 1)
    cov_pmf = poisson.pmf(c[None, None, :], means[..., None])
    cov_pmf /= cov_pmf.sum(axis=-1, keepdims=True)  # (m, S, C)
    cc, mm = np.meshgrid(c, c, indexing="ij")
    valid = mm <= cc
    phi = beta_map(cc[valid], mm[valid], n_bins)  # (pairs, D)
    # joint pmf of (c, mu) per state and sample over the valid pairs
    mu_pmf = binom.pmf(mm[valid][None, None, :], cc[valid][None, None, :], p[..., None])
    pair_pmf = cov_pmf[..., cc[valid]] * mu_pmf  # (m, S, pairs)
    obs = np.einsum("hsk,kd->hsd", pair_pmf, phi).reshape(m, n_samples * n_bins).T  # (SD, m)
    sq = np.einsum("hsk,k->h", pair_pmf, (phi * phi).sum(axis=1))  # E|F|^2 per state
    mean_cov = np.einsum("hsk,k->hs", pair_pmf, cc[valid].astype(float))
    mean_meth = np.einsum("hsk,k->hs", pair_pmf, mm[valid].astype(float))
    mean_inv = np.einsum("hsk,k->hs", pair_pmf, 1.0 / (cc[valid] + 2.0))
    return cov_pmf, (obs, sq, mean_cov, mean_meth, mean_inv)


def _population_histograms(p: np.ndarray, transmat: np.ndarray, pi: np.ndarray, cov_pmf: np.ndarray):
    """Expected coverage, bin and pair histograms per unit of weight (see Moments).

    A sample thinned to ``cap`` reads is Binomial(min(c, cap), p) given its state, so the
    cell (c', mu') has probability P(min(c, cap) = c') Binomial(mu'; c', p) per state; an
    adjacent pair has sum_ij pi_i A_ij q_i(first) q_j(second)."""
    from scipy.stats import binom

    m, n_samples = p.shape
    coverage_histogram = np.einsum("h,hsc->sc", pi, cov_pmf)
    out = []
    for width in (1, 2):
        layout = histogram_layout(n_samples, width)
        cap = layout.cap
        c, mu = pairs_from_keys(np.arange(cells_per_sample(cap)))
        pmf = np.pad(cov_pmf, ((0, 0), (0, 0), (0, max(0, cap + 1 - cov_pmf.shape[-1]))))
        thinned_cov = np.concatenate([pmf[..., :cap], pmf[..., cap:].sum(axis=-1, keepdims=True)], axis=-1)
        per_cell = thinned_cov[..., c] * binom.pmf(mu, c, p[..., None])  # (m, S, cells)
        rows = [np.arange(n_samples)] if layout.joint else [[s] for s in range(n_samples)]
        hist = np.zeros(layout.shape)
        for row, samples in enumerate(rows):
            q = []  # per state: the joint distribution over the row's samples of one bin
            for h in range(m):
                joint = per_cell[h, samples[0]]
                for s in samples[1:]:
                    joint = np.multiply.outer(joint, per_cell[h, s]).ravel()
                q.append(joint)
            q = np.array(q)
            if width == 1:
                hist[row] = pi @ q
            else:
                hist[row] = np.einsum("ij,ia,jb->ab", pi[:, None] * transmat, q, q).ravel()
        out.append(hist)
    return coverage_histogram, out[0], out[1]
