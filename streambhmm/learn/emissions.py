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
pairs (PairWeights, additive across chunks like every E-step statistic) over (p, rho).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betaln, digamma, expit, gammaln

from . import _hmm_kernels
from ..moments.features import encode, pair_keys, pairs_from_keys

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
    a, b = p * scale, (1.0 - p) * scale
    beta = coef + betaln(methylated + a, coverage - methylated + b) - betaln(a, b)
    return np.where(rho <= MIN_DISPERSION, binomial, beta)


class EmissionTable:
    """Counts (n, S) encoded once: each bin's code per sample into the table of distinct
    (coverage, methylated) pairs, with each pair's log binomial coefficient. EM's iterations
    reuse it."""

    def __init__(self, methylated: np.ndarray, coverage: np.ndarray):
        table = encode(methylated, coverage, 1)  # codes and the distinct pairs; D is irrelevant here
        self.codes = np.ascontiguousarray(table.codes.T)  # (S, n): one sample's codes contiguous
        self.coverage = table.coverage.astype(np.float64)[:, None]
        self.methylated = table.methylated.astype(np.float64)[:, None]
        self.coef = gammaln(self.coverage + 1) - gammaln(self.methylated + 1) - gammaln(self.coverage - self.methylated + 1)
        self.keys = pair_keys(table.methylated, table.coverage)

    @property
    def n_bins(self) -> int:
        return self.codes.shape[1]

    def log_b(self, methylation: np.ndarray, dispersion: np.ndarray | None = None, out=None) -> np.ndarray:
        """Per-bin log P(x_t | h), shape (n, m), for levels ``methylation`` (m, S) [and
        overdispersions ``dispersion`` (m, S): the beta-binomial], into ``out`` if given."""
        shape = (self.n_bins, methylation.shape[0])
        if out is None or out.shape != shape:
            out = np.empty(shape)
        out.fill(0.0)
        for s in range(self.codes.shape[0]):
            per_pair = pair_loglik(self.coverage, self.methylated, self.coef, methylation[:, s],
                                   None if dispersion is None else dispersion[:, s])
            _hmm_kernels.add_rows(out, per_pair, self.codes[s])
        return out

    def pair_weights(self, posteriors: np.ndarray) -> list["PairWeights"]:
        """Per sample, the posterior-weighted count of each distinct covered pair in each
        state: the beta-binomial M-step's statistics."""
        covered = self.coverage[:, 0] > 0
        out = []
        for codes in self.codes:
            weights = np.stack([np.bincount(codes, posteriors[:, h], self.keys.size)
                                for h in range(posteriors.shape[1])])
            out.append(PairWeights(self.keys[covered], weights[:, covered]))
        return out


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


def betabinomial_mstep(pairs: PairWeights, levels: np.ndarray, dispersion: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray]:
    """(levels (m,), dispersions (m,)) maximizing each state's posterior-weighted
    beta-binomial log-likelihood of one sample's pairs, from the current values. Each state
    is its own 2-parameter problem (logit p, log of a + b), solved by L-BFGS-B with the
    analytic gradient."""
    from scipy.optimize import minimize

    coverage, methylated = (v.astype(np.float64) for v in pairs_from_keys(pairs.keys))
    new_levels, new_dispersion = levels.copy(), dispersion.copy()
    for h in range(pairs.weights.shape[0]):
        w = pairs.weights[h]
        keep = w > 0
        if not keep.any():
            continue
        c, mu, wk = coverage[keep], methylated[keep], w[keep]
        total = wk.sum()

        def objective(x):
            p, scale = expit(x[0]), np.exp(x[1])
            a, b = p * scale, (1.0 - p) * scale
            value = -np.sum(wk * (betaln(mu + a, c - mu + b) - betaln(a, b))) / total
            common = digamma(a + b) - digamma(c + a + b)
            da = np.sum(wk * (digamma(mu + a) - digamma(a) + common)) / total
            db = np.sum(wk * (digamma(c - mu + b) - digamma(b) + common)) / total
            grad_p = scale * (da - db) * p * (1.0 - p)
            grad_scale = (p * da + (1.0 - p) * db) * scale
            return value, -np.array([grad_p, grad_scale])

        p0 = np.clip(levels[h], 1e-4, 1 - 1e-4)
        rho0 = np.clip(dispersion[h], MIN_DISPERSION, MAX_DISPERSION)
        x0 = np.array([np.log(p0 / (1 - p0)), np.log((1 - rho0) / rho0)])
        bounds = [(-9.2, 9.2), (np.log((1 - MAX_DISPERSION) / MAX_DISPERSION), np.log(1 / MIN_DISPERSION))]
        result = minimize(objective, np.clip(x0, *np.array(bounds).T), jac=True, method="L-BFGS-B", bounds=bounds,
                          options={"maxiter": 200, "ftol": 1e-12, "gtol": 1e-10})
        new_levels[h] = expit(result.x[0])
        new_dispersion[h] = 1.0 / (1.0 + np.exp(result.x[1]))
    return new_levels, new_dispersion
