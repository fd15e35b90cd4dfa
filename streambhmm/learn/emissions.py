"""What a bin's counts say about its state: the emission models and their EM updates.

For a bin with coverage c and methylated count mu in sample s, in state h with level p:

    binomial        P(mu | c) = C(c, mu) p^mu (1 - p)^(c - mu)
    betabinomial    P(mu | c) = C(c, mu) B(mu + a, c - mu + b) / B(a, b),
                    a = p (1 - rho) / rho, b = (1 - p) (1 - rho) / rho

with rho (in (0, 1), per state and sample) the overdispersion: the correlation of two reads
of one bin. Real methylomes are overdispersed: the CpGs of a bin, and the cells of a
sample, differ in their methylation, so counts vary more than a binomial allows, and a
binomial HMM explains the excess by switching states (segments one bin long). rho -> 0
is the binomial. Samples are conditionally independent given the state; zero coverage
carries no information. Log-likelihoods include the binomial coefficient, so they compare
across tools.

Everything is computed per distinct (c, mu) pair (EmissionTable): the counts are encoded
once, and an iteration costs one lookup per bin, sample and state. The binomial M-step is
closed-form (posterior-weighted methylated over coverage sums); the beta-binomial one
maximizes, per state and sample, the posterior-weighted log-likelihood of the distinct
pairs (PairWeights, additive across chunks like every E-step statistic) over (p, rho). The
recursion counts each pair's posterior weight itself, so an E-step never holds the bins'
posteriors, and the M-step costs what the largest coverage does, or what a few far deeper
pairs do beside the rest (_emission_kernels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln

from . import _emission_kernels, hmm_kernels
from ..moments.features import index_pairs, pairs_from_keys

EMISSIONS = ("binomial", "betabinomial")
MIN_DISPERSION = 1e-6  # below it the beta-binomial is the binomial (and computed as one)
MAX_DISPERSION = 0.95
START_DISPERSION = 0.05  # EM's start when a model has none
_EPS = 1e-10


def pair_loglik(coverage: np.ndarray, methylated: np.ndarray, coef: np.ndarray, levels: np.ndarray,
                dispersion: np.ndarray | None = None) -> np.ndarray:
    """log P(mu | c, state) for pairs (K, 1) and states' levels (m,) [and overdispersions
    (m,)]: shape (K, m)."""
    p = np.clip(np.asarray(levels, np.float64), _EPS, 1 - _EPS)
    binomial = coef + methylated * np.log(p) + (coverage - methylated) * np.log1p(-p)
    if dispersion is None:
        return binomial
    rho = np.clip(np.asarray(dispersion, np.float64), MIN_DISPERSION, MAX_DISPERSION)
    scale = (1.0 - rho) / rho
    beta = np.empty_like(binomial)
    _emission_kernels.betabinomial_table(np.asarray(coverage).ravel().astype(np.int64),
                                         np.asarray(methylated).ravel().astype(np.int64),
                                         np.asarray(coef, np.float64).ravel(), p * scale, (1.0 - p) * scale, beta)
    return np.where(rho <= MIN_DISPERSION, binomial, beta)


class EmissionTable:
    """Counts (n, S) encoded once: each bin's code per sample into the table of distinct
    (coverage, methylated) pairs, with each pair's log binomial coefficient. EM's iterations
    reuse it."""

    def __init__(self, methylated: np.ndarray, coverage: np.ndarray):
        self.keys, codes = index_pairs(methylated, coverage)
        self.codes = np.ascontiguousarray(codes.T)  # (S, n): one sample's codes contiguous
        cov, meth = pairs_from_keys(self.keys)
        self.coverage = cov.astype(np.float64)[:, None]
        self.methylated = meth.astype(np.float64)[:, None]
        self.coef = gammaln(self.coverage + 1) - gammaln(self.methylated + 1) - gammaln(self.coverage - self.methylated + 1)

    @property
    def n_bins(self) -> int:
        return self.codes.shape[1]

    def log_b(self, methylation: np.ndarray, dispersion: np.ndarray | None = None, out=None,
              add: bool = False) -> np.ndarray:
        """Per-bin log P(x_t | h), shape (n, m), for levels ``methylation`` (m, S) [and
        overdispersions ``dispersion`` (m, S): the beta-binomial], into ``out`` if given (with
        ``add``, added to what ``out`` holds: other samples' terms)."""
        shape = (self.n_bins, methylation.shape[0])
        if add and (out is None or out.shape != shape):
            raise ValueError(f"log_b(add=True) needs an out array of shape {shape}")
        if out is None or out.shape != shape:
            out = np.empty(shape)
        if not add:
            out.fill(0.0)
        for s in range(self.codes.shape[0]):
            per_pair = pair_loglik(self.coverage, self.methylated, self.coef, methylation[:, s],
                                   None if dispersion is None else dispersion[:, s])
            hmm_kernels.add_rows(out, per_pair, self.codes[s])
        return out

    def statistics(self, code_weights: np.ndarray, keep_pairs: bool) -> tuple:
        """From the posterior-weighted count of each code per sample and state (S, K, m):
        the posterior-weighted methylated and coverage sums (m, S) and, with ``keep_pairs``
        (the beta-binomial's M-step), per sample the PairWeights of the covered pairs."""
        methylated = np.einsum("skh,k->hs", code_weights, self.methylated[:, 0])
        coverage = np.einsum("skh,k->hs", code_weights, self.coverage[:, 0])
        if not keep_pairs:
            return methylated, coverage, None
        covered = self.coverage[:, 0] > 0
        pairs = []
        for w in code_weights:  # each sample's pairs: those of its bins (the table is the samples' together)
            keep = covered & (w.sum(axis=1) > 0)
            pairs.append(PairWeights(self.keys[keep], w[keep].T.copy()))
        return methylated, coverage, pairs

    def code_weights(self, posteriors: np.ndarray) -> np.ndarray:
        """The posterior-weighted count of each code per sample and state (S, K, m), from
        posteriors (n, m) (when the recursion did not count them itself): one pass."""
        weights = np.zeros((self.codes.shape[0], self.keys.size, posteriors.shape[1]))
        hmm_kernels.add_code_weights(np.ascontiguousarray(posteriors, np.float64), self.codes, 0, self.n_bins,
                                     weights)
        return weights


@dataclass
class PairWeights:
    """One sample's posterior-weighted counts of distinct (c, mu) pairs: ``weights[h, k]`` of
    the pair numbered ``keys[k]`` (features.pair_keys) in state h."""

    keys: np.ndarray  # (K,) int64, sorted
    weights: np.ndarray  # (m, K)

    def __add__(self, other: "PairWeights") -> "PairWeights":
        keys = np.union1d(self.keys, other.keys)
        weights = np.zeros((self.weights.shape[0], keys.size))
        weights[:, np.searchsorted(keys, self.keys)] += self.weights
        weights[:, np.searchsorted(keys, other.keys)] += other.weights
        return PairWeights(keys, weights)


def add_pair_weights(a: list | None, b: list | None) -> list | None:
    """Per-sample PairWeights of two statistics added (None: none kept)."""
    if a is None or b is None:
        return a if b is None else b
    return [x + y for x, y in zip(a, b)]


LEVEL_LOGIT_BOUND = 9.2  # levels within about [1e-4, 1 - 1e-4]
# log(a + b) = log((1 - rho) / rho) for rho in [MIN_DISPERSION, MAX_DISPERSION]
SCALE_BOUNDS = np.array([np.log((1 - MAX_DISPERSION) / MAX_DISPERSION), np.log((1 - MIN_DISPERSION) / MIN_DISPERSION)])


def sum_cut(coverage: np.ndarray, weights: np.ndarray) -> int:
    """Where the M-step's sums over the coverage stop: the largest weighted coverage, or a cut
    below a few far deeper pairs, which add their terms in closed form (_emission_kernels)."""
    return _emission_kernels.sum_cut(coverage, weights)


def betabinomial_mstep(pairs: PairWeights, levels: np.ndarray, dispersion: np.ndarray, level_caps=None,
                       dispersion_caps=None, pool=None) -> tuple[np.ndarray, np.ndarray]:
    """(levels (m,), dispersions (m,)) maximizing each state's posterior-weighted
    beta-binomial log-likelihood of one sample's pairs, from the current values, each state
    within its caps (m,) when given. Each state is its own 2-parameter problem (logit p,
    log of a + b), solved by Newton's method on sums over the coverage (_emission_kernels),
    not over the pairs; with ``pool`` (an Executor) the states' problems run in its threads
    (the kernels release the GIL; each problem is the same whichever thread solves it)."""
    coverage, methylated = pairs_from_keys(pairs.keys)
    new_levels, new_dispersion = levels.copy(), dispersion.copy()
    m = pairs.weights.shape[0]
    level_caps = np.ones(m) if level_caps is None else np.asarray(level_caps, np.float64)
    dispersion_caps = np.ones(m) if dispersion_caps is None else np.asarray(dispersion_caps, np.float64)

    def solve(h: int):
        weights = pairs.weights[h]
        wa, wb, wc, deep_n, deep_w = _emission_kernels.tail_weights(coverage, methylated, weights,
                                                                    sum_cut(coverage, weights))
        if not wc.size:
            return None
        top = min(LEVEL_LOGIT_BOUND, np.log(level_caps[h] / (1 - level_caps[h])) if level_caps[h] < 1 else np.inf)
        widest = min(MAX_DISPERSION, dispersion_caps[h])
        level_bounds = np.array([-LEVEL_LOGIT_BOUND, top])
        scale_bounds = np.array([max(SCALE_BOUNDS[0], np.log((1 - widest) / widest)), SCALE_BOUNDS[1]])
        p0 = np.clip(levels[h], 1e-4, min(1 - 1e-4, level_caps[h]))
        rho0 = np.clip(dispersion[h], MIN_DISPERSION, widest)
        return _emission_kernels.betabinomial_newton(wa, wb, wc, deep_n, deep_w, np.log(p0 / (1 - p0)),
                                                     np.log((1 - rho0) / rho0), level_bounds, scale_bounds)

    for h, solved in enumerate((pool.map if pool is not None else map)(solve, range(m))):
        if solved is not None:
            u, v = solved
            new_levels[h] = expit(u)
            new_dispersion[h] = 1.0 / (1.0 + np.exp(v))
    return new_levels, new_dispersion
