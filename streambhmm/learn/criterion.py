"""The refinement's criterion (streambhmm.learn.refine) with its analytic gradient: Objective,
its parameter vector and bounds (state caps), and the weights of its terms."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from . import _refine_kernels
from ..moments.sums import Moments
from .emissions import START_DISPERSION
from .expected import GRID_POINTS, SampleCoverage
from .histograms import HistogramLikelihood
from .overdispersion import ONE_PASS_MAX_DISPERSION, scale_bounds

LEVEL_BOUND = 9.21  # logit bound: levels within [1e-4, 1 - 1e-4]
TRANSITION_BOUND = 10.0  # softmax logit bound: every transition at least ~1e-9
COVERAGE_BOUND = 15.0  # softmax logit bound of the coverage buckets
TENSOR_MAX_DIMENSION = 64  # the tensor term by default up to S * D = 64 (two samples at D = 30)
PROJECTED_SCALE = 0.01  # of the projected moments' variance-matched weight (refine.projected_weight)


class Parameters(NamedTuple):
    """The refinement's parameters unpacked."""

    levels: np.ndarray  # (m, S)
    transmat: np.ndarray  # (m, m)
    coverage: list  # per sample (m, buckets)
    dispersion: np.ndarray | None  # (m, S), the beta-binomial's; None for the binomial


@dataclass(frozen=True)
class StateLimits:
    """Upper bounds of each state's level and overdispersion (m,) each (1 and the largest
    overdispersion where a state is free): a model with states defined in advance, such as
    a hypomethylated state (streambhmm.learn.domains)."""

    level: np.ndarray
    dispersion: np.ndarray


def logit(p) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), expit(-LEVEL_BOUND), expit(LEVEL_BOUND))
    return np.log(p / (1 - p))


@dataclass(frozen=True)
class Weights:
    """Weights of the criterion's terms (the defaults were chosen by measurement, docs/methods/one-pass.md)."""

    feature_pairs: float = 1.0  # KL of each of P12, P13, P23
    single_bins: float = 0.5  # the likelihood of the bin histogram
    bin_pairs: float = 1.0  # the likelihood of the pair histogram
    # KL of the third-order tensor; None: weight 1 when the feature's dimension S * D is at
    # most TENSOR_MAX_DIMENSION, else 0 (measured: it helps on real data, and its cost grows
    # as (S * D)^3: 10-17x the rest of the criterion at S = 4); 0 for the projected feature
    # (measured: scripts/projected_weights.py)
    feature_triples: float | None = None
    # "kl" or "squares": squared errors of P12, P13, P23, each divided by its squared norm
    # (a plain generalized method of moments; measured worse, kept for the comparison)
    pair_divergence: str = "kl"
    coverage: float = 1.0  # KL of the coverage-bucket features; 0: every state has the sample's coverage


def stationary(transmat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pi, Z): the stationary distribution of an irreducible chain and its fundamental
    matrix Z = (I - A + 1 pi^T)^-1, for which d pi^T = pi^T dA Z."""
    m = transmat.shape[0]
    ones = np.ones((m, m))
    pi = np.linalg.solve((np.eye(m) - transmat + ones).T, np.ones(m))
    pi = np.maximum(pi, 0.0)
    pi /= pi.sum()
    return pi, np.linalg.inv(np.eye(m) - transmat + np.outer(np.ones(m), pi))


def _kl_blocks(empirical: np.ndarray, blocks: int, weight: float = 1.0) -> tuple[float, float]:
    """The per-entry weight ``weight`` / blocks of a moment made of ``blocks`` distributions,
    and the constant sum e log e (times the weight)."""
    positive = empirical > 0
    const = float(np.sum(empirical[positive] * np.log(empirical[positive])))
    return weight / blocks, weight * const / blocks


def projected_weight(moments: Moments) -> float:
    """The weight of the projected feature's KL terms. A KL divergence of feature moments is
    a multinomial pseudo-likelihood: it expects each normalized product F_t F_t+2^T / S^2
    to vary like a draw from the distribution P13 / (N S^2), which a Beta map at good
    coverage nearly is (close to one bin). The projected feature is smooth (a mixture over
    every sample and bin), so its products vary far less, and unweighted the KL counts for
    next to nothing. The variance-matched weight is the ratio of the two variances: 1 (a
    multinomial's total variance) over the products' actual one, (E|F_1|^2 |F_3|^2 -
    |P13|^2) / S^4 from the moments' own sums. The ring histograms carry most of what ties
    the samples' levels together, and on real data, where the model is misspecified, these
    moments are best trusted less: PROJECTED_SCALE of that weight, chosen by measurement
    (scripts/projected_weights.py, docs/methods/one-pass.md)."""
    n = float(max(moments.n_triples, 1))
    spread = (moments.sq_norm_13 / n - float(np.sum((moments.p13 / n) ** 2))) / moments.n_samples ** 4
    return PROJECTED_SCALE / max(spread, 1e-12)


def _softmax_rows(u: np.ndarray) -> np.ndarray:
    e = np.exp(u - u.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_gradient(q: np.ndarray, g_q: np.ndarray) -> np.ndarray:
    """The gradient with respect to the logits of softmax rows q, from the gradient in q."""
    return q * (g_q - (g_q * q).sum(axis=1, keepdims=True))


class Objective:
    """The criterion of streambhmm.learn.refine's docstring for one Moments, with its
    gradient. Build it once; it serves every number of states and every start."""

    def __init__(self, moments: Moments, weights: Weights = Weights(), grid_points: int = GRID_POINTS,
                 coverage: list[SampleCoverage] | None = None, emission: str = "binomial"):
        """``coverage``: the SampleCoverage of another Objective with the same coverage
        histograms (their tables are the costly part), e.g. for bootstrap replicates.
        ``emission="betabinomial"`` adds an overdispersion per state and sample (v = log(a + b)
        after the transitions in the parameter vector; overdispersion.py)."""
        if moments.n_triples < 1:
            raise ValueError("no triples: the moments are empty")
        if emission not in ("binomial", "betabinomial"):
            raise ValueError(f"emission must be binomial or betabinomial, got {emission!r}")
        self.moments = moments
        self.weights = weights
        self.dispersed = emission == "betabinomial"
        self.n_samples, self.n_bins = moments.n_samples, moments.n_bins
        # the projected feature's moments are R O diag(pi) A O^T R^T: R (K, S * D) maps O
        projection = moments.projection
        self.projection = None if projection is None else \
            projection.transpose(1, 0, 2).reshape(moments.projection_dim, -1)
        n = float(moments.n_triples)
        self.feature_weight = projected_weight(moments) if moments.projected else 1.0
        self.pairs = []
        for name, power in (("p12", 1), ("p13", 2), ("p23", 1)):
            emp = getattr(moments, name) / n
            self.pairs.append((emp, power, *_kl_blocks(emp, self.n_samples ** 2, self.feature_weight)))
        self.triples = None
        self.triples_weight = weights.feature_triples
        if self.triples_weight is None:
            # measured: it helps the concatenated feature up to S * D = 64, not the projected one
            self.triples_weight = 1.0 if not moments.projected and moments.dim <= TENSOR_MAX_DIMENSION else 0.0
        if self.triples_weight:
            emp = moments.p123 / n
            self.triples = (emp, *_kl_blocks(emp, self.n_samples ** 3, self.feature_weight))
        self.coverage = coverage or [SampleCoverage(row, self.n_bins, grid_points)
                                     for row in moments.coverage_histogram]
        self.by_coverage = []
        if weights.coverage:
            for s, cov in enumerate(self.coverage):
                emp = moments.coverage_features[s][cov.buckets] / n
                self.by_coverage.append((emp, *_kl_blocks(emp, self.n_samples)))
        self.histograms = [(weight, HistogramLikelihood(moments, width))
                           for width, weight in ((1, weights.single_bins), (2, weights.bin_pairs)) if weight]

    # -- parameters -----------------------------------------------------------------------
    def _sizes(self, m: int) -> list[int]:
        """Parameters: levels, transitions, [overdispersions,] then each sample's coverage logits."""
        dispersion = [m * self.n_samples] if self.dispersed else []
        return [m * self.n_samples, m * m] + dispersion + [m * (len(c.buckets) - 1) for c in self.coverage]

    def pack(self, methylation: np.ndarray, transmat: np.ndarray, coverage: list[np.ndarray] | None = None,
             dispersion: np.ndarray | None = None) -> np.ndarray:
        """The parameter vector of levels, a transition matrix, (the beta-binomial's
        overdispersions, default START_DISPERSION) and (optionally) each sample's coverage
        bucket probabilities per state (default: the sample's marginal)."""
        m = methylation.shape[0]
        p = np.clip(methylation, expit(-LEVEL_BOUND), expit(LEVEL_BOUND))
        logits = np.log(np.maximum(transmat, 1e-12))
        logits = np.clip(logits - logits.max(axis=1, keepdims=True) + TRANSITION_BOUND,
                         -TRANSITION_BOUND, TRANSITION_BOUND)
        parts = [np.log(p / (1 - p)).ravel(), logits.ravel()]
        if self.dispersed:
            rho = np.full(methylation.shape, START_DISPERSION) if dispersion is None else dispersion
            parts.append(np.clip(np.log((1 - rho) / rho), *scale_bounds()).ravel())
        for s, cov in enumerate(self.coverage):
            q = np.tile(cov.marginal, (m, 1)) if coverage is None else coverage[s]
            u = np.log(np.maximum(q, 1e-12))
            parts.append(np.clip(u[:, 1:] - u[:, :1], -COVERAGE_BOUND, COVERAGE_BOUND).ravel())
        return np.concatenate(parts)

    def unpack(self, x: np.ndarray, m: int) -> "Parameters":
        ends = list(itertools.accumulate(self._sizes(m)))
        parts = [x[start:end] for start, end in zip([0] + ends[:-1], ends)]  # np.split cost more than the rest
        levels = expit(parts[0].reshape(m, self.n_samples))
        transmat = _softmax_rows(parts[1].reshape(m, m))
        dispersion = 1.0 / (1.0 + np.exp(parts[2].reshape(m, self.n_samples))) if self.dispersed else None
        coverage = [_softmax_rows(np.hstack([np.zeros((m, 1)), u.reshape(m, -1)]))
                    for u in parts[2 + self.dispersed:]]
        return Parameters(levels, transmat, coverage, dispersion)

    def bounds(self, m: int, limits: "StateLimits | None" = None) -> list[tuple[float, float]]:
        """L-BFGS-B's bounds; ``limits`` caps some states' levels and overdispersions."""
        sizes = self._sizes(m)
        level_bounds = np.tile([-LEVEL_BOUND, LEVEL_BOUND], (m, self.n_samples, 1))
        scale_bound = np.tile(scale_bounds(), (m, self.n_samples, 1))
        if limits is not None:
            level_bounds[:, :, 1] = np.minimum(level_bounds[:, :, 1], logit(limits.level)[:, None])
            widest = np.minimum(limits.dispersion, ONE_PASS_MAX_DISPERSION)
            scale_bound[:, :, 0] = np.maximum(scale_bound[:, :, 0], np.log((1 - widest) / widest)[:, None])
        out = [tuple(b) for b in level_bounds.reshape(-1, 2)] + [(-TRANSITION_BOUND, TRANSITION_BOUND)] * sizes[1]
        if self.dispersed:
            out += [tuple(b) for b in scale_bound.reshape(-1, 2)]
        if self.weights.coverage:
            return out + [(-COVERAGE_BOUND, COVERAGE_BOUND)] * sum(sizes[2 + self.dispersed:])
        # without the coverage term every state keeps the sample's marginal coverage
        marginal = self.pack(np.full((m, self.n_samples), 0.5), np.eye(m))[sum(sizes[:2 + self.dispersed]):]
        return out + [(u, u) for u in marginal]

    def observation(self, levels: np.ndarray, coverage: list[np.ndarray], dispersion: np.ndarray | None = None):
        """O = E[phi(x^s) | h] stacked over the samples (SD, m), its derivatives per entry in
        the level (SD, m) and in v = log(a + b) (SD, m; None for the binomial), and per
        sample the features of each bucket at the state's level (buckets, m, D):
        dO/d(coverage probabilities). (The projected feature's E[F | h] is R O.)"""
        d, m = self.n_bins, levels.shape[0]
        obs = np.empty((self.n_samples * d, m))
        slope = np.empty_like(obs)
        by_scale = np.empty_like(obs) if dispersion is not None else None
        per_bucket = []
        for s, (cov, q) in enumerate(zip(self.coverage, coverage)):
            block = slice(s * d, (s + 1) * d)
            if dispersion is None:
                values, slopes = cov.features(levels[:, s])  # (buckets, m, D)
                obs[block] = np.einsum("hb,bhd->dh", q, values)
                slope[block] = np.einsum("hb,bhd->dh", q, slopes)
            else:
                obs[block], slope[block], by_scale[block], values = cov.dispersed_features(
                    levels[:, s], dispersion[:, s], q)
            per_bucket.append(values)
        return obs, slope, by_scale, per_bucket

    # -- criterion ------------------------------------------------------------------------
    def __call__(self, x: np.ndarray, m: int, terms: dict | None = None) -> tuple[float, np.ndarray]:
        """(criterion, gradient) at ``x``; ``terms``, when given, receives each term's weighted
        value (feature pairs, feature triples, coverage, single bins, adjacent bins)."""
        terms = {} if terms is None else terms
        levels, a, coverage, dispersion = self.unpack(x, m)
        pi, fundamental = stationary(a)
        obs, slope, by_scale, per_bucket = self.observation(levels, coverage, dispersion)
        # E[F | h] of the moments' feature: O itself, or its projection
        view = obs if self.projection is None else self.projection @ obs
        g_view = np.zeros_like(view)
        g_a = np.zeros((m, m))
        g_pi = np.zeros(m)
        g_coverage = [np.zeros_like(q) for q in coverage]
        loss = terms["feature pairs"] = self._pairs(view, a, pi, g_view, g_a, g_pi)
        if self.triples is not None:
            terms["feature triples"] = self._triples(view, a, pi, g_view, g_a, g_pi)
            loss += terms["feature triples"]
        g_obs = g_view if self.projection is None else self.projection.T @ g_view
        before = loss
        loss = self._by_coverage(loss, obs, a, pi, coverage, g_obs, g_a, g_pi, g_coverage)
        terms["coverage"] = loss - before
        d = self.n_bins
        g_levels = np.zeros_like(levels)
        g_scale = np.zeros_like(levels)
        for weight, histogram in self.histograms:
            value, gl, gs, gp, ga = histogram(levels, pi, a, dispersion)
            terms["single bins" if histogram.width == 1 else "adjacent bins"] = weight * value
            loss += weight * value
            g_levels += weight * gl
            g_scale += weight * gs
            g_pi += weight * gp
            g_a += weight * ga
        for s in range(self.n_samples):
            block = slice(s * d, (s + 1) * d)
            g_levels[:, s] += (g_obs[block] * slope[block]).sum(axis=0)
            if by_scale is not None:
                g_scale[:, s] += (g_obs[block] * by_scale[block]).sum(axis=0)
            g_coverage[s] += np.einsum("dh,bhd->hb", g_obs[block], per_bucket[s])
        g_a += np.outer(pi, fundamental @ g_pi)  # through pi = stationary(A)
        g_logits = softmax_gradient(a, g_a)
        g_logit_levels = g_levels * levels * (1 - levels)
        g_coverage_logits = [softmax_gradient(q, gq)[:, 1:].ravel() for q, gq in zip(coverage, g_coverage)]
        by_dispersion = [g_scale.ravel()] if self.dispersed else []
        return loss, np.concatenate([g_logit_levels.ravel(), g_logits.ravel(), *by_dispersion, *g_coverage_logits])

    def _pairs(self, view, a, pi, g_view, g_a, g_pi) -> float:
        """KL (or squared errors) of P12, P13 and P23; adds to the gradients in place."""
        w = self.weights
        loss = 0.0
        a2 = a @ a
        for emp, power, scale, const in self.pairs:
            core = pi[:, None] * (a if power == 1 else a2)  # P(h_t = i, h_t+k = j)
            model = np.maximum(view @ core @ view.T, 1e-300)
            if w.pair_divergence == "squares":
                residual = model - emp
                norm = float(np.sum(emp * emp))
                loss += w.feature_pairs * float(np.sum(residual * residual)) / norm
                q = 2.0 * w.feature_pairs * residual / norm
            else:
                loss += w.feature_pairs * (const - scale * float(np.sum(emp * np.log(model))))
                q = -w.feature_pairs * scale * emp / model  # d loss / d model
            g_view += q @ view @ core.T + q.T @ view @ core
            g_core = view.T @ q @ view
            g_pi += (g_core * (a if power == 1 else a2)).sum(axis=1)
            if power == 1:
                g_a += pi[:, None] * g_core
            else:
                g_a += (pi[:, None] * g_core) @ a.T + (pi[:, None] * a).T @ g_core
        return loss

    def _by_coverage(self, loss, obs, a, pi, coverage, g_obs, g_a, g_pi, g_coverage) -> float:
        """``loss`` plus the KL of each sample's coverage-bucket features; adds to the
        gradients in place."""
        w, d = self.weights, self.n_bins
        for s, (emp, scale, const) in enumerate(self.by_coverage):
            # model: P(bucket of x_t+1, feature of x_t+2) = Q^T diag(pi) A O_s^T. Its joint KL
            # holds the buckets' marginal, which ties each sample's coverage to the data (the
            # histograms condition on coverage and do not)
            block = slice(s * d, (s + 1) * d)
            q_s = coverage[s]
            later = a @ obs[block].T  # (m, D): E[F_s(x_t+2) | h_t+1]
            model = np.maximum(q_s.T @ (pi[:, None] * later), 1e-300)
            loss += w.coverage * (const - scale * float(np.sum(emp * np.log(model))))
            g = -w.coverage * scale * emp / model  # (buckets, D)
            qg = q_s @ g  # (m, D)
            g_coverage[s] += (pi[:, None] * later) @ g.T
            g_pi += (qg * later).sum(axis=1)
            g_a += (pi[:, None] * qg) @ obs[block]
            g_obs[block] += g.T @ q_s.T @ (pi[:, None] * a)
        return loss

    def _triples(self, obs, a, pi, g_obs, g_a, g_pi) -> float:
        """KL of the third-order tensor; adds to the gradients in place."""
        emp, scale, const = self.triples
        weight = self.triples_weight
        return weight * const + _refine_kernels.triples_divergence(emp, np.ascontiguousarray(obs), pi, a,
                                                                   weight * scale, g_obs, g_pi, g_a)

    def mean_coverage(self, coverage: list[np.ndarray]) -> np.ndarray:
        """(m, S): each state's expected coverage in each sample."""
        return np.stack([q @ cov.mean for q, cov in zip(coverage, self.coverage)], axis=1)


def coverage_tables(moments: Moments) -> list[SampleCoverage]:
    """Each sample's SampleCoverage of ``moments``, built once and kept on the object. The
    Objectives of their blocks (held-out folds, bootstrap replicates) share them: a block
    table's Moments carry the whole data's coverage histogram (moments.blocks.BlockTable)."""
    if "_coverage_tables" not in moments.__dict__:
        moments.__dict__["_coverage_tables"] = [SampleCoverage(row, moments.n_bins, GRID_POINTS)
                                                for row in moments.coverage_histogram]
    return moments.__dict__["_coverage_tables"]


def objective_for(moments: Moments, weights: Weights = Weights(), emission: str = "binomial") -> Objective:
    """The Objective of ``moments``, built once and kept on the object (sweeps over the
    number of states reuse its tables; every emission and weighting shares the coverage tables)."""
    cache = moments.__dict__.setdefault("_objectives", {})
    if (weights, emission) not in cache:
        cache[weights, emission] = Objective(moments, weights, coverage=coverage_tables(moments), emission=emission)
    return cache[weights, emission]
