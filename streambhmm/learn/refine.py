"""The moment-only second stage: fit the Binomial HMM to the one-pass sums, never the counts.

The tensor decomposition (FTD) is exact for a Binomial HMM and breaks under the mismatch of
real methylomes. This stage fits the model's parameters (levels per state and sample,
transition matrix A, stationary distribution pi) directly to the sums of a
:class:`~streambhmm.moments.sums.Moments`, minimizing a composite criterion per triple:

    L =  sum_{k = 12, 13, 23} mean over sample blocks of KL(P_k / N || P_k(theta))   feature pairs
       + w_c mean over samples of KL(coverage_features_s / N || model)              coverage
       - w_1 (1/N) sum_cells n(cell) log sum_h pi_h b_h(cell)                        single bins
       - w_2 (1/N) sum_cells n(cell) log sum_jk pi_j A_jk b_j(first) b_k(second)     adjacent bins
       + w_T mean over sample blocks of KL(T / N || T(theta))                         feature triples

- Coverage. Each state has its own distribution of each sample's coverage over fixed
  buckets (features.COVERAGE_BUCKETS; within a bucket, the sample's observed distribution),
  because CpG-dense, unmethylated bins get more reads. A further KL term fits it to the
  moment of each sample's coverage bucket in the middle bin against its feature in the
  third (``coverage_features``), the way ratio recovery reads E[c | h].
- Feature pairs. Each (sample, sample) block of P12 / N is the joint distribution of the
  Beta-map features of two bins one apart (P13: two apart), so the KL divergence is a
  composite likelihood of feature pairs. The model's is O diag(pi) A O^T (P13: A^2), where
  column h of O holds E[phi_s(x) | h] for each sample: the state's coverage distribution
  mixing, per bucket, E[phi_s | level, bucket] tabulated on a grid of levels
  (ExpectedFeatures).
- Single bins and adjacent bins. ``bin_histogram`` and ``pair_histogram`` count the bins'
  (coverage, methylated) pairs, each sample thinned to a few reads (features.histogram_layout);
  b_h is the likelihood of a cell in state h: the state's probability of the thinned
  coverage times the Binomial probability of the methylated reads, exact under the model (a
  subsample of Binomial reads is Binomial). These terms weigh bins by their reads, as EM's likelihood
  does, which feature moments cannot; the adjacent pairs add the context of the neighbour.

Why this and not least squares on the moments: measured (scripts/refine_weights.py, README),
squared errors barely weigh a rare state far from the others (an unmethylated state of 2% of
bins), which the likelihood punishes heavily, and the feature moments alone cannot tell
apart levels within one Beta-map bin; the histograms of single bins and of adjacent pairs
closed most of the gap to EM on the real data sets. The default weights (Weights) were
chosen by the same measurement.

With beta-binomial emissions (``emission="betabinomial"``) each state and sample also has an
overdispersion: the histograms' cells are then beta-binomial (exact under thinning) and O
integrates g over the state's Beta distribution of levels (streambhmm.learn.overdispersion).

Parameters: levels through logits (bounded, p in [1e-4, 1 - 1e-4]), transition rows through
softmax logits (bounded, so the chain stays irreducible), the overdispersions through
v = log(a + b) (bounded, overdispersion.scale_bounds), each state's coverage buckets
through softmax logits, pi = the stationary distribution of A; states can be capped
(StateLimits). Gradients are analytic
(d pi / d A through the fundamental matrix). L-BFGS-B runs from
several starts (the spectral estimate, a spread of levels at the quantiles of the marginal
features, seeded random sticky chains), screened after a few iterations; the lowest
criterion wins.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, gammaln
from threadpoolctl import threadpool_limits

from ..moments.features import COVERAGE_BUCKETS, coverage_bucket, decode_cells
from ..moments.sums import Moments
from .emissions import START_DISPERSION
from .overdispersion import ONE_PASS_MAX_DISPERSION, QUADRATURE, beta_parameters, entry_loglik, scale_bounds

LEVEL_BOUND = 9.21  # logit bound: levels within [1e-4, 1 - 1e-4]
TRANSITION_BOUND = 10.0  # softmax logit bound: every transition at least ~1e-9
GRID_POINTS = 128  # levels tabulated at 0, 1/128, ..., 1 (cubic Hermite in between)
EXACT_COVERAGE = 128  # coverages above this are grouped in buckets 2% wide
BUCKET_RATIO = 1.02
# above this the Beta map of a bin is a spike far narrower than a feature bin (1/D): such
# coverages are tabulated at this value (bounded memory for amplicon-deep data)
LARGEST_TABULATED_COVERAGE = 10_000
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


def _log_binomial_pmf(k: np.ndarray, n: int, p: np.ndarray) -> np.ndarray:
    """log Bin(k; n, p) for k (K,) and p (P,), shape (P, K); p may be 0 or 1."""
    coef = gammaln(n + 1.0) - gammaln(k + 1.0) - gammaln(n - k + 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = coef + np.where(k > 0, k * np.log(p[:, None]), 0.0) \
            + np.where(n - k > 0, (n - k) * np.log1p(-p[:, None]), 0.0)
    return out


def _coverage_buckets(histogram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(coverages, weights summing to 1): exact up to EXACT_COVERAGE, then geometric buckets
    represented by their weighted mean coverage (at most LARGEST_TABULATED_COVERAGE)."""
    c = np.flatnonzero(histogram)
    w = histogram[c].astype(np.float64)
    low = c <= EXACT_COVERAGE
    cs, ws = [c[low]], [w[low]]
    if (~low).any():
        high_c, high_w = c[~low], w[~low]
        bucket = np.floor(np.log(high_c / EXACT_COVERAGE) / np.log(BUCKET_RATIO)).astype(np.int64)
        _, first, inverse = np.unique(bucket, return_index=True, return_inverse=True)
        weight = np.bincount(inverse, high_w)
        mean_c = np.rint(np.bincount(inverse, high_w * high_c) / weight).astype(np.int64)
        cs.append(np.minimum(mean_c, LARGEST_TABULATED_COVERAGE))
        ws.append(weight)
    cs, ws = np.concatenate(cs), np.concatenate(ws)
    return cs, ws / ws.sum()


class ExpectedFeatures:
    """g(p) = E[phi(c, mu) | level p] for one sample (D-vector), c drawn from the sample's
    coverage histogram and mu ~ Binomial(c, p), with dg/dp; tabulated on a grid of p and
    interpolated by cubic Hermite polynomials (C1, so the optimizer sees smooth gradients).

    With I_x(mu+1, c-mu+1) = P(Binomial(c+1, x) > mu), the expected Beta-map CDF at an edge
    x is sum_mu Bin(mu; c, p) P(Bin(c+1, x) > mu): one matrix product per coverage.
    """

    def __init__(self, coverage_histogram: np.ndarray, n_bins: int, grid_points: int = GRID_POINTS):
        grid = np.linspace(0.0, 1.0, grid_points + 1)
        edges = np.arange(n_bins + 1) / n_bins
        values = np.zeros((grid.size, n_bins))
        slopes = np.zeros((grid.size, n_bins))
        if coverage_histogram.sum() == 0:
            raise ValueError("the coverage histogram is empty")
        for c, w in zip(*_coverage_buckets(coverage_histogram)):
            mu = np.arange(c + 1.0)
            # P(Bin(c+1, x) > mu) (upper) and <= mu (lower), for each edge x: (c+1, D+1)
            log_tail = _log_binomial_pmf(np.arange(c + 2.0), c + 1, edges)  # (D+1, c+2)
            pmf_x = np.exp(log_tail)
            lower = np.cumsum(pmf_x, axis=1)[:, :-1].T  # P(Y <= mu)
            upper = np.cumsum(pmf_x[:, ::-1], axis=1)[:, ::-1][:, 1:].T  # P(Y > mu)
            pmf_p = np.exp(_log_binomial_pmf(mu, c, grid))  # (G+1, c+1)
            # take each bin's mass from the side of the distribution where it is small
            cdf_up = pmf_p @ upper  # E[I_x], increasing in x
            cdf_low = pmf_p @ lower  # 1 - E[I_x]
            in_upper = edges[None, :-1] >= grid[:, None]
            values += w * np.where(in_upper, -np.diff(cdf_low, axis=1), np.diff(cdf_up, axis=1))
            if c > 0:
                # d/dp E[f(mu)] = c E_{k ~ Bin(c-1, p)}[f(k+1) - f(k)]
                pmf_q = np.exp(_log_binomial_pmf(np.arange(c + 0.0), c - 1, grid))
                d_up = pmf_q @ (upper[1:] - upper[:-1])
                slopes += w * c * np.diff(d_up, axis=1)
        self.values, self.slopes = values, slopes

    def __call__(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(g(p), g'(p)), each (len(p), D)."""
        return hermite(self.values, self.slopes, p)


def hermite(values: np.ndarray, slopes: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cubic Hermite interpolation of tables (..., G + 1, D) of a function of p on the grid
    k / G and its derivative, at the levels p: (value, slope), each (..., len(p), D)."""
    grid_points = values.shape[-2] - 1
    x = np.clip(p, 0.0, 1.0) * grid_points
    i = np.minimum(np.floor(x).astype(np.int64), grid_points - 1)
    t = (x - i)[:, None]
    h = 1.0 / grid_points
    y0, y1 = values[..., i, :], values[..., i + 1, :]
    d0, d1 = slopes[..., i, :] * h, slopes[..., i + 1, :] * h
    t2, t3 = t * t, t * t * t
    value = (2 * t3 - 3 * t2 + 1) * y0 + (t3 - 2 * t2 + t) * d0 + (-2 * t3 + 3 * t2) * y1 + (t3 - t2) * d1
    slope = ((6 * t2 - 6 * t) * y0 + (3 * t2 - 4 * t + 1) * d0 + (6 * t - 6 * t2) * y1
             + (3 * t2 - 2 * t) * d1) / h
    return value, slope


@dataclass(frozen=True)
class Weights:
    """Weights of the criterion's terms (the defaults were chosen by measurement, README)."""

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


class SampleCoverage:
    """One sample's coverage buckets: which are non-empty, the sample's share in each, the
    expected features of a level within each, and thinned coverage distributions."""

    def __init__(self, histogram: np.ndarray, n_bins: int, grid_points: int = GRID_POINTS):
        coverage = np.arange(histogram.size)
        bucket = coverage_bucket(coverage)
        mass = np.bincount(bucket, histogram, minlength=len(COVERAGE_BUCKETS))
        if mass.sum() == 0:
            raise ValueError("the coverage histogram is empty")
        self.buckets = np.flatnonzero(mass)
        self.marginal = mass[self.buckets] / mass.sum()
        self.within = [np.where(bucket == b, histogram, 0.0) for b in self.buckets]  # per bucket
        features = [ExpectedFeatures(w, n_bins, grid_points) for w in self.within]
        # stacked (buckets, G + 1, D): one interpolation serves every bucket
        self.values = np.stack([f.values for f in features])
        self.slopes = np.stack([f.slopes for f in features])
        self.mean = np.array([w @ coverage / w.sum() for w in self.within])

    def features(self, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """E[phi | level, bucket] and its derivative in the level at each of ``levels``:
        each (buckets, len(levels), D)."""
        return hermite(self.values, self.slopes, levels)

    def dispersed_features(self, levels: np.ndarray, dispersion: np.ndarray) -> tuple:
        """E[phi | bucket] when the level is Beta-distributed around each of ``levels`` with
        ``dispersion``, and its derivatives in the level (at fixed a + b) and in
        v = log(a + b): each (buckets, len(levels), D) (overdispersion.LevelQuadrature)."""
        if not hasattr(self, "_at_nodes"):  # the features at the quadrature's nodes, once
            self._at_nodes = np.ascontiguousarray(self.features(QUADRATURE.levels)[0])
        a, b = beta_parameters(levels, dispersion)
        w, w_a, w_b = QUADRATURE.weights(a, b)
        value, d_a, d_b = (np.einsum("hk,bkd->bhd", x, self._at_nodes, optimize=True) for x in (w, w_a, w_b))
        scale = (a + b)[None, :, None]
        return value, scale * (d_a - d_b), a[None, :, None] * d_a + b[None, :, None] * d_b

    def thinned(self, cap: int) -> np.ndarray:
        """(buckets, cap + 1): P(min(c, cap) = k | bucket)."""
        out = np.zeros((len(self.buckets), cap + 1))
        for i, w in enumerate(self.within):
            out[i] = np.bincount(np.minimum(np.arange(w.size), cap), w, minlength=cap + 1) / w.sum()
        return out


class _Cells:
    """One kernel input: cells as per-slot table entries (see _kernels.mixture_loglik), each
    entry with its Binomial pair and its thinned coverage's probability given each bucket."""

    def __init__(self, slot_cov, binomial_cov, binomial_meth, weight, samples, thinned, width):
        n_slots = slot_cov.shape[1]
        keys = slot_cov * (slot_cov.max(initial=0) + 1) ** 2 + binomial_cov * (slot_cov.max(initial=0) + 1) \
            + binomial_meth
        index = np.empty(slot_cov.shape, np.int64)
        offsets, firsts = [0], []
        for g in range(n_slots):
            _, first, index[:, g] = np.unique(keys[:, g], return_index=True, return_inverse=True)
            firsts.append(first)
            offsets.append(offsets[-1] + first.size)
        c = np.concatenate([binomial_cov[f, g] for g, f in enumerate(firsts)]).astype(np.float64)
        mu = np.concatenate([binomial_meth[f, g] for g, f in enumerate(firsts)]).astype(np.float64)
        self.coef = gammaln(c + 1.0) - gammaln(mu + 1.0) - gammaln(c - mu + 1.0)
        self.groups = np.zeros(1, np.int64)
        if width == 2:  # pairs sorted by their first bin (the kernel's groups)
            _, first_bin = np.unique(index[:, :n_slots // 2], axis=0, return_inverse=True)
            order = np.argsort(first_bin.ravel(), kind="stable")
            index, weight = index[order], weight[order]
            self.groups = np.flatnonzero(np.r_[True, np.diff(first_bin.ravel()[order]) != 0, True]).astype(np.int64)
        self.samples, self.weight, self.index, self.c, self.mu = samples, weight, index, c, mu
        self.offsets = np.array(offsets, np.int64)
        # per slot: its entries' thinned-coverage probabilities given each bucket
        self.given_bucket = [thinned[samples[g]][:, slot_cov[f, g]] for g, f in enumerate(firsts)]


class _Histogram:
    """The likelihood of a thinned histogram (features.histogram_layout) of single bins
    (a mixture over the states) or of adjacent pairs (over pairs of states, through the
    transition matrix), *given the bins' coverage*, and its gradient.

    A cell's likelihood is the state mixture of each slot's Binomial probability times the
    state's probability of the slot's thinned coverage, divided by the same mixture of the
    coverage alone (cells aggregated by their coverage). So states are rewarded for
    explaining methylation, never coverage, as in EM's likelihood; the coverage per state
    only weighs the states. Cells are decoded to per-slot entries of small tables, so a
    state's likelihood of a cell is a product of table lookups (compiled in _kernels)."""

    def __init__(self, moments: Moments, width: int, coverage: list[SampleCoverage]):
        hist = moments.bin_histogram if width == 1 else moments.pair_histogram
        self.layout = moments.histogram_layout(width)
        if hist.shape != self.layout.shape:
            raise ValueError(f"the {'bin' if width == 1 else 'pair'} histogram has shape {hist.shape}, but its "
                             f"layout (histogram_budget {moments.histogram_budget}) needs {self.layout.shape}")
        self.width = width
        self.total = float(moments.n_triples)
        thinned = [c.thinned(self.layout.cap) for c in coverage]
        self.rows = []
        for row in range(hist.shape[0]):
            cells = np.flatnonzero(hist[row])
            cov, meth = decode_cells(cells, self.layout)
            samples = self.layout.slot_samples(row).astype(np.int64)
            weight = hist[row, cells].astype(np.float64)
            joint = _Cells(cov, cov, meth, weight, samples, thinned, width)
            coverage_tuples, which = np.unique(cov, axis=0, return_inverse=True)
            zeros = np.zeros_like(coverage_tuples)
            coverage_only = _Cells(coverage_tuples, zeros, zeros, np.bincount(which.ravel(), weight), samples,
                                   thinned, width)
            self.rows.append((joint, coverage_only))

    def _loglik(self, cells: _Cells, levels, dispersion, pi, transmat, coverage, grads, sign):
        from ..moments import _kernels

        m = levels.shape[0]
        g_levels, g_scale, g_pi, g_a, g_coverage = grads
        prob = [np.maximum(coverage[s] @ t, 1e-300).T for s, t in zip(cells.samples, cells.given_bucket)]
        log_table = np.log(np.concatenate(prob))
        gradients = []
        for g, s in enumerate(cells.samples):
            part = slice(cells.offsets[g], cells.offsets[g + 1])
            table, gradient = entry_loglik(cells.c[part], cells.mu[part], cells.coef[part], levels[:, s],
                                           None if dispersion is None else dispersion[:, s])
            log_table[part] += table
            gradients.append(gradient)
        resp = np.zeros((cells.c.size, m))
        gp, ga = np.zeros(m), np.zeros((m, m))
        if self.width == 1:
            value = _kernels.mixture_loglik(cells.weight, cells.index, cells.offsets, log_table, pi, gp, resp)
        else:
            value = _kernels.pair_mixture_loglik(cells.weight, cells.index, cells.groups, cells.offsets, log_table, pi,
                                                 transmat, gp, ga, resp)
        g_pi += sign * gp
        g_a += sign * ga
        for g, s in enumerate(cells.samples):
            part = slice(cells.offsets[g], cells.offsets[g + 1])
            r = resp[part]  # (entries, m) posterior-weighted counts
            d_level, d_scale = gradients[g](r)
            g_levels[:, s] += sign * d_level
            if d_scale is not None:
                g_scale[:, s] += sign * d_scale
            g_coverage[s] += sign * (r / prob[g]).T @ cells.given_bucket[g].T
        return sign * value

    def __call__(self, levels: np.ndarray, pi: np.ndarray, transmat: np.ndarray, coverage: list[np.ndarray],
                 dispersion: np.ndarray | None = None):
        """(-loglik / N, and its gradients with respect to levels (m, S), v = log(a + b) of
        the beta-binomial (m, S; zeros for the binomial, ``dispersion`` None), pi (m,),
        transmat (m, m) and each sample's coverage bucket probabilities (m, buckets))."""
        m = levels.shape[0]
        grads = (np.zeros_like(levels), np.zeros_like(levels), np.zeros(m), np.zeros((m, m)),
                 [np.zeros_like(q) for q in coverage])
        pi = np.maximum(pi, 1e-300)
        loglik = 0.0
        for joint, coverage_only in self.rows:
            loglik += self._loglik(joint, levels, dispersion, pi, transmat, coverage, grads, 1.0)
            # the coverage alone: entries whose pairs are all (0, 0), so any emission is 0
            loglik += self._loglik(coverage_only, levels, None, pi, transmat, coverage, grads, -1.0)
        scale = -1.0 / self.total
        g_levels, g_scale, g_pi, g_a, g_coverage = grads
        return (scale * loglik, scale * g_levels, scale * g_scale, scale * g_pi, scale * g_a,
                [scale * g for g in g_coverage])


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
    (scripts/projected_weights.py, README)."""
    n = float(max(moments.n_triples, 1))
    spread = (moments.sq_norm_13 / n - float(np.sum((moments.p13 / n) ** 2))) / moments.n_samples ** 4
    return PROJECTED_SCALE / max(spread, 1e-12)


def _softmax_rows(u: np.ndarray) -> np.ndarray:
    e = np.exp(u - u.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _softmax_gradient(q: np.ndarray, g_q: np.ndarray) -> np.ndarray:
    """The gradient with respect to the logits of softmax rows q, from the gradient in q."""
    return q * (g_q - (g_q * q).sum(axis=1, keepdims=True))


class Objective:
    """The criterion of the module docstring for one Moments, with its gradient. Build it
    once; it serves every number of states and every start."""

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
        self.histograms = [(weight, _Histogram(moments, width, self.coverage))
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
        parts = np.split(x, np.cumsum(self._sizes(m))[:-1])
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
            else:
                values, slopes, scales = cov.dispersed_features(levels[:, s], dispersion[:, s])
                by_scale[block] = np.einsum("hb,bhd->dh", q, scales)
            obs[block] = np.einsum("hb,bhd->dh", q, values)
            slope[block] = np.einsum("hb,bhd->dh", q, slopes)
            per_bucket.append(values)
        return obs, slope, by_scale, per_bucket

    # -- criterion ------------------------------------------------------------------------
    def __call__(self, x: np.ndarray, m: int) -> tuple[float, np.ndarray]:
        levels, a, coverage, dispersion = self.unpack(x, m)
        pi, fundamental = stationary(a)
        obs, slope, by_scale, per_bucket = self.observation(levels, coverage, dispersion)
        # E[F | h] of the moments' feature: O itself, or its projection
        view = obs if self.projection is None else self.projection @ obs
        w = self.weights
        loss = 0.0
        g_view = np.zeros_like(view)
        g_a = np.zeros((m, m))
        g_pi = np.zeros(m)
        g_coverage = [np.zeros_like(q) for q in coverage]
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
        if self.triples is not None:
            loss += self._triples(view, a, pi, g_view, g_a, g_pi)
        g_obs = g_view if self.projection is None else self.projection.T @ g_view
        d = self.n_bins
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
        g_levels = np.zeros_like(levels)
        g_scale = np.zeros_like(levels)
        for weight, histogram in self.histograms:
            value, gl, gs, gp, ga, gc = histogram(levels, pi, a, coverage, dispersion)
            loss += weight * value
            g_levels += weight * gl
            g_scale += weight * gs
            g_pi += weight * gp
            g_a += weight * ga
            for s in range(self.n_samples):
                g_coverage[s] += weight * gc[s]
        for s in range(self.n_samples):
            block = slice(s * d, (s + 1) * d)
            g_levels[:, s] += (g_obs[block] * slope[block]).sum(axis=0)
            if by_scale is not None:
                g_scale[:, s] += (g_obs[block] * by_scale[block]).sum(axis=0)
            g_coverage[s] += np.einsum("dh,bhd->hb", g_obs[block], per_bucket[s])
        g_a += np.outer(pi, fundamental @ g_pi)  # through pi = stationary(A)
        g_logits = _softmax_gradient(a, g_a)
        g_logit_levels = g_levels * levels * (1 - levels)
        g_coverage_logits = [_softmax_gradient(q, gq)[:, 1:].ravel() for q, gq in zip(coverage, g_coverage)]
        by_dispersion = [g_scale.ravel()] if self.dispersed else []
        return loss, np.concatenate([g_logit_levels.ravel(), g_logits.ravel(), *by_dispersion, *g_coverage_logits])

    def _triples(self, obs, a, pi, g_obs, g_a, g_pi) -> float:
        """KL of the third-order tensor; adds to the gradients in place."""
        emp, scale, const = self.triples
        core = np.einsum("i,ij,jk->ijk", pi, a, a)
        model = np.maximum(np.einsum("ijk,ai,bj,ck->abc", core, obs, obs, obs, optimize=True), 1e-300)
        loss = self.triples_weight * (const - scale * float(np.sum(emp * np.log(model))))
        q = -self.triples_weight * scale * emp / model
        q3 = np.tensordot(q, obs, axes=([2], [0]))  # (a, b, k)
        q23 = np.tensordot(q3, obs, axes=([1], [0]))  # (a, k, j)
        g_core = np.tensordot(obs, q23, axes=([0], [0])).transpose(0, 2, 1)  # (i, j, k)
        g_obs += (np.einsum("akj,ijk->ai", q23, core)
                  + np.einsum("abk,ai,ijk->bj", q3, obs, core)
                  + np.einsum("abc,ai,bj,ijk->ck", q, obs, obs, core, optimize=True))
        g_pi += np.einsum("ijk,ij,jk->i", g_core, a, a)
        g_a += np.einsum("ijk,i,jk->ij", g_core, pi, a) + np.einsum("ijk,i,ij->jk", g_core, pi, a)
        return loss

    def mean_coverage(self, coverage: list[np.ndarray]) -> np.ndarray:
        """(m, S): each state's expected coverage in each sample."""
        return np.stack([q @ cov.mean for q, cov in zip(coverage, self.coverage)], axis=1)


def objective_for(moments: Moments, weights: Weights = Weights(), emission: str = "binomial") -> Objective:
    """The Objective of ``moments``, built once and kept on the object (sweeps over the
    number of states reuse its tables; both emissions share the coverage tables)."""
    cache = moments.__dict__.setdefault("_objectives", {})
    if (weights, emission) not in cache:
        shared = next(iter(cache.values())).coverage if cache else None
        cache[weights, emission] = Objective(moments, weights, coverage=shared, emission=emission)
    return cache[weights, emission]


# -- starts and the optimizer ----------------------------------------------------------------
def quantile_levels(moments: Moments, n_components: int) -> np.ndarray:
    """Levels at the quantiles (h + 0.5) / m of each sample's marginal Beta-map feature
    distribution (the rows of P12 summed over the second bin; for the projected feature the
    coverage-bucket features summed over buckets), in the same order for all samples."""
    d, n_samples = moments.n_bins, moments.n_samples
    if moments.projected:  # each sample's features of the triples' third bins
        marginal = moments.coverage_features.sum(axis=1)
    else:
        marginal = moments.p12.sum(axis=1).reshape(n_samples, d)
    cdf = np.cumsum(marginal, axis=1) / marginal.sum(axis=1, keepdims=True)
    q = (np.arange(n_components) + 0.5) / n_components
    return np.stack([(np.searchsorted(cdf[s], q) + 0.5) / d for s in range(n_samples)], axis=1)


def sticky_start(n_components: int, n_samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random sorted levels and a transition matrix with 0.8 on the diagonal."""
    levels = np.sort(rng.uniform(0.05, 0.95, (n_components, n_samples)), axis=0)
    transmat = 0.8 * np.eye(n_components) + 0.2 * rng.dirichlet(np.ones(n_components), size=n_components)
    return levels, transmat


@dataclass(frozen=True)
class Refined:
    """The refined parameters, their criterion and where they came from."""

    methylation: np.ndarray
    transmat: np.ndarray
    startprob: np.ndarray  # the stationary distribution of transmat
    coverage: list  # per sample: (m, buckets) each state's coverage bucket probabilities
    mean_coverage: np.ndarray  # (m, S) each state's expected coverage
    loss: float
    start: str  # the label of the winning start
    n_iter: int  # its L-BFGS-B iterations
    starts: tuple  # (label, loss) of every start
    dispersion: np.ndarray | None = None  # (m, S) the beta-binomial's overdispersion

    @property
    def parameters(self) -> tuple:
        """(levels, transmat, coverage, dispersion): a start for another refinement."""
        return self.methylation, self.transmat, self.coverage, self.dispersion


def _degenerate(objective: Objective, x: np.ndarray, m: int) -> bool:
    from .checks import degeneracy_problems

    levels, transmat = objective.unpack(x, m)[:2]
    return bool(degeneracy_problems(levels, transmat, stationary(transmat)[0]))


def refine(objective: Objective, starts: list[tuple], max_iter: int = 1000, screen_iter: int = 40, keep: int = 2,
           tol: float = 1e-8, limits: StateLimits | None = None) -> Refined:
    """L-BFGS-B from each (label, levels, transmat[, coverage[, dispersion]]) start for
    ``screen_iter`` iterations; the ``keep`` lowest then continue to convergence (or
    ``max_iter``); the lowest criterion wins. ``limits`` caps some states' levels and
    overdispersions. Starts run in threads, one per core (the compiled likelihoods release
    the GIL); each is independent, so the result does not depend on the number of threads."""
    m = starts[0][1].shape[0]
    bounds = objective.bounds(m, limits)

    def run(x0, iterations):
        return minimize(objective, x0, args=(m,), jac=True, method="L-BFGS-B", bounds=bounds,
                        options={"maxiter": iterations, "ftol": tol, "gtol": 1e-9, "maxcor": 30})

    def first(start):
        x0 = objective.pack(*start[1:])
        return run(np.clip(x0, *np.array(bounds).T), screen_iter)

    labels = [start[0] for start in starts]

    def finish(item):
        return run(item[1].x, max_iter) if item[1].nit >= screen_iter else item[1]

    # one BLAS thread per start: threads of BLAS spinning on small products would idle the starts' cores
    with threadpool_limits(1, user_api="blas"), \
            ThreadPoolExecutor(max_workers=min(len(starts), os.cpu_count() or 1)) as pool:
        screened = list(zip(labels, pool.map(first, starts)))
        screened.sort(key=lambda item: item[1].fun)
        finished = list(zip([label for label, _ in screened[:keep]], pool.map(finish, screened[:keep])))
        # a degenerate optimum (a state of no weight, states never left) loses to a sound one:
        # the next screened starts are finished until one is sound
        for item in screened[keep:]:
            if any(not _degenerate(objective, res.x, m) for _, res in finished):
                break
            finished.append((item[0], finish(item)))
    sound = [item for item in finished if not _degenerate(objective, item[1].x, m)]
    label, best = min(sound or finished, key=lambda item: item[1].fun)
    levels, transmat, coverage, dispersion = objective.unpack(best.x, m)
    pi, _ = stationary(transmat)
    losses = dict((lab, float(res.fun)) for lab, res in screened) | dict((lab, float(res.fun)) for lab, res in finished)
    return Refined(methylation=levels, transmat=transmat, startprob=pi, coverage=coverage,
                   mean_coverage=objective.mean_coverage(coverage), loss=float(best.fun), start=label,
                   n_iter=int(best.nit), starts=tuple(losses.items()), dispersion=dispersion)
