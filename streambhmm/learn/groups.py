"""Groups of replicates: HMM states with a level per group, the model of `streambhmm dmr`.

A state h has in each group g a level p[h, g] and an overdispersion rho[h, g] that the
group's replicates share: in a bin, each sample's counts are beta-binomial with its group's
parameters, and the samples are independent given the state, so rho is the variation
between replicates (and between the CpGs of a state) around the group's level. States are
shared along the genome by all samples. A state is *differential* when its group levels
differ by at least a minimum difference (`dmr --min-difference`, 0.1 as DSS's delta).

The E-step is the joint model's, unchanged: the group parameters expanded to one column per
sample (SampleGroups.expand), so an iteration costs one lookup per bin, sample and state,
linear in the number of samples. The M-step ties the replicates: each group's samples'
statistics (posterior-weighted methylated and coverage sums, the beta-binomial's pair
weights) are summed (SampleGroups.tie) and the group's parameters updated from the sums, as
one sample's would be.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import chdtrc, digamma, fdtrc, gammaln, polygamma, stdtr

from .emissions import PairWeights, pair_loglik
from .hmm import BinomialHMM, SufficientStats
from ..moments.features import pairs_from_keys


@dataclass(frozen=True)
class SampleGroups:
    """Which group each sample belongs to: ``names`` of the groups in order, ``members[s]``
    the index of sample s's group."""

    names: tuple
    members: tuple

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "members", tuple(int(g) for g in self.members))
        missing = [name for g, name in enumerate(self.names) if g not in self.members]
        if missing or not self.names:
            raise ValueError(f"every group needs a sample; {', '.join(missing) or 'no group'} has none")

    @classmethod
    def of(cls, groups) -> "SampleGroups":
        """From each sample's group name, groups in order of first appearance."""
        names = list(dict.fromkeys(groups))
        return cls(tuple(names), tuple(names.index(g) for g in groups))

    @property
    def n_groups(self) -> int:
        return len(self.names)

    @property
    def n_samples(self) -> int:
        return len(self.members)

    def samples_of(self, g: int) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.members) == g)

    def expand(self, per_group: np.ndarray) -> np.ndarray:
        """(m, G) group parameters as (m, S) sample columns."""
        return np.asarray(per_group, np.float64)[:, list(self.members)]

    def collapse(self, per_sample: np.ndarray) -> np.ndarray:
        """(m, S) tied sample columns as (m, G): each group's first sample's."""
        return np.asarray(per_sample)[:, [int(self.samples_of(g)[0]) for g in range(self.n_groups)]]

    def average(self, per_sample: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """(m, S) as (m, G): each group's (weighted) mean over its samples."""
        per_sample = np.asarray(per_sample, np.float64)
        weights = np.ones(per_sample.shape[1]) if weights is None else np.asarray(weights, np.float64)
        out = np.empty((per_sample.shape[0], self.n_groups))
        for g in range(self.n_groups):
            columns = self.samples_of(g)
            out[:, g] = per_sample[:, columns] @ weights[columns] / weights[columns].sum()
        return out

    def tie(self, stats: SufficientStats) -> SufficientStats:
        """The statistics of S samples as those of G groups: each group's samples' sums (and,
        for the beta-binomial, pair weights) added."""
        methylated = np.stack([stats.methylated[:, self.samples_of(g)].sum(axis=1) for g in range(self.n_groups)], 1)
        coverage = np.stack([stats.coverage[:, self.samples_of(g)].sum(axis=1) for g in range(self.n_groups)], 1)
        pairs = None
        if stats.pairs is not None:
            pairs = [sum_pairs([stats.pairs[s] for s in self.samples_of(g)]) for g in range(self.n_groups)]
        return SufficientStats(stats.loglik, stats.start, stats.trans, methylated, coverage, pairs)


def sum_pairs(parts: list) -> PairWeights:
    """PairWeights of many samples added: one union of their pairs, not one per sample."""
    keys = np.unique(np.concatenate([p.keys for p in parts]))
    weights = np.zeros((parts[0].weights.shape[0], keys.size))
    for p in parts:
        weights[:, np.searchsorted(keys, p.keys)] += p.weights
    return PairWeights(keys, weights)


def group_differences(levels: np.ndarray) -> np.ndarray:
    """Per state, the largest difference between its groups' levels (m,)."""
    levels = np.atleast_2d(levels)
    return levels.max(axis=1) - levels.min(axis=1)


def differential(levels: np.ndarray, min_difference: float) -> np.ndarray:
    """Per state, whether its group levels differ by at least ``min_difference``."""
    return group_differences(levels) >= min_difference - 1e-12


class GroupedBinomialHMM(BinomialHMM):
    """A BinomialHMM whose states have a level (and overdispersion) per group of samples
    (``groups``, a SampleGroups), shared by the group's replicates.

    ``methylation_`` and ``dispersion_`` keep the joint model's shape (n_components,
    n_samples), every column of a group equal, so everything that runs a joint model (the
    store E-step, posteriors, scoring) runs this one; ``group_methylation_`` and
    ``group_dispersion_`` are the (n_components, n_groups) parameters. ``m_step`` ties the
    replicates (SampleGroups.tie) and updates the group parameters as BinomialHMM updates a
    sample's."""

    def __init__(self, n_components: int, groups: SampleGroups, n_iter: int = 100, tol: float = 1e-4,
                 random_state=None, emission: str = "betabinomial", stationary_start: bool = True,
                 allow_degenerate: bool = False):
        super().__init__(n_components, n_iter=n_iter, tol=tol, init="random", random_state=random_state,
                         stationary_start=stationary_start, allow_degenerate=allow_degenerate, emission=emission)
        self.groups = groups

    @property
    def group_methylation_(self) -> np.ndarray:
        return self.groups.collapse(self.methylation_)

    @property
    def group_dispersion_(self) -> np.ndarray | None:
        return None if self.dispersion is None else self.groups.collapse(self.dispersion_)

    def start_from(self, startprob, transmat, methylation, dispersion=None) -> "GroupedBinomialHMM":
        """EM's start from group parameters: ``methylation`` (and ``dispersion``) (m, G)."""
        return super().start_from(startprob, transmat, self.groups.expand(methylation),
                                  None if dispersion is None else self.groups.expand(dispersion))

    def m_step(self, stats: SufficientStats) -> None:
        tied = self.groups.tie(stats)
        self.methylation_ = self.group_methylation_
        if self.emission == "betabinomial":
            self.dispersion_ = self.group_dispersion_
        try:
            super().m_step(tied)
        finally:
            self.methylation_ = self.groups.expand(self.methylation_)
            if self.emission == "betabinomial":
                self.dispersion_ = self.groups.expand(self.dispersion_)


# The start of EM: a ladder of levels shared by the groups (the background), and beside each
# level candidate differential states, its groups CANDIDATE_SPREAD apart; EM moves them where
# the data's differences are, or onto the diagonal where there are none, and BIC removes the
# states the data do not pay for (supported_states): the model's size comes from the data.
CANDIDATE_SPREAD = 0.3
START_SELF_TRANSITION = 0.99
CANDIDATE_ENTRY = 0.1  # entering a candidate is this much rarer than entering a background state
LEVEL_RANGE = (0.02, 0.98)


def candidate_start(background: np.ndarray, n_groups: int, candidates: np.ndarray | None = None,
                    spread: float = CANDIDATE_SPREAD) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(startprob, transmat, levels (m, G)) of EM's start: a state per ``background`` level
    (the same in every group) and, around each ``candidates`` level (default: the background's),
    two candidates per group: the group above the others by ``spread``, and below (with two
    groups, one pair: B above A and below)."""
    background = np.clip(np.asarray(background, np.float64), *LEVEL_RANGE)
    levels = [np.full(n_groups, q) for q in background]
    for q in background if candidates is None else np.asarray(candidates, np.float64):
        for g in range(n_groups if n_groups > 2 else 1):
            for sign in (1.0, -1.0):
                row = np.full(n_groups, q - sign * spread / 2)
                row[g] = q + sign * spread / 2
                levels.append(row)
    levels = np.clip(np.array(levels), *LEVEL_RANGE)
    m, k = len(levels), len(background)
    trans = np.full((m, m), (1 - START_SELF_TRANSITION) / (m - 1))
    trans[:, k:] *= CANDIDATE_ENTRY
    np.fill_diagonal(trans, START_SELF_TRANSITION)
    trans /= trans.sum(axis=1, keepdims=True)
    return np.full(m, 1.0 / m), trans, levels


def support(stats: SufficientStats, hmm: GroupedBinomialHMM) -> np.ndarray:
    """(m, m): [h, k] the log-likelihood the data would lose if the bins of state h (its
    posterior weights in ``stats``, of ``hmm``'s E-step) were emitted by state k instead,
    transitions left aside. Exact per sample from the E-step's sums (the binomial) or pair
    weights (the beta-binomial): the bins' samples are independent given the state."""
    m = hmm.n_components
    loss = np.zeros((m, m))
    levels = np.clip(hmm.methylation_, 1e-10, 1 - 1e-10)
    if stats.pairs is None:
        for s in range(levels.shape[1]):
            meth, unmeth = stats.methylated[:, s], stats.coverage[:, s] - stats.methylated[:, s]
            table = meth[:, None] * np.log(levels[:, s])[None, :] + unmeth[:, None] * np.log1p(-levels[:, s])[None, :]
            loss += np.diag(table)[:, None] - table
        return loss
    for s, pairs in enumerate(stats.pairs):
        coverage, methylated = (x.astype(np.float64)[:, None] for x in pairs_from_keys(pairs.keys))
        coef = gammaln(coverage + 1) - gammaln(methylated + 1) - gammaln(coverage - methylated + 1)
        table = pairs.weights @ pair_loglik(coverage, methylated, coef, levels[:, s], hmm.dispersion_[:, s])
        loss += np.diag(table)[:, None] - table
    return loss


def state_penalty(n_states: int, n_groups: int, n_bins: float, betabinomial: bool = True) -> float:
    """BIC's price of one state of a model of ``n_states``: its levels (and overdispersions)
    per group and its free transitions in and out, times log(n) / 2."""
    return 0.5 * (n_groups * (2 if betabinomial else 1) + 2 * (n_states - 1)) * np.log(max(n_bins, 2.0))


def supported_states(stats: SufficientStats, hmm: GroupedBinomialHMM) -> np.ndarray:
    """The states BIC keeps, removed one at a time (backward elimination from one E-step):
    while some state's bins would lose less log-likelihood in their best other remaining state
    than the state's price (state_penalty), the cheapest such state goes. An empty state, or
    one of two alike, goes first: its bins lose nothing elsewhere."""
    loss = support(stats, hmm)
    n_bins = float(stats.trans.sum() + stats.start.sum())
    alive = list(range(hmm.n_components))
    while len(alive) > 1:
        remaining = loss[np.ix_(alive, alive)] + np.diag(np.full(len(alive), np.inf))
        cheapest = remaining.min(axis=1)
        worst = int(np.argmin(cheapest))
        if cheapest[worst] >= state_penalty(len(alive), hmm.groups.n_groups, n_bins, hmm.dispersion is not None):
            break
        del alive[worst]
    return np.array(alive, np.int64)


def restricted(hmm: GroupedBinomialHMM, keep: np.ndarray) -> GroupedBinomialHMM:
    """A copy of ``hmm`` with the states ``keep`` only (transitions renormalized)."""
    out = GroupedBinomialHMM(len(keep), hmm.groups, hmm.n_iter, hmm.tol, hmm.random_state, hmm.emission,
                             hmm.stationary_start, hmm.allow_degenerate)
    trans = hmm.transmat_[np.ix_(keep, keep)]
    dispersion = hmm.group_dispersion_
    out.start_from(hmm.startprob_[keep], trans / trans.sum(axis=1, keepdims=True), hmm.group_methylation_[keep],
                   None if dispersion is None else dispersion[keep])
    return out


def qvalues(lfdr: np.ndarray) -> np.ndarray:
    """The q-value of each of a list of findings from their local false discovery rates: the
    smallest estimated FDR, the mean lfdr of the findings as strong or stronger (Newton et
    al. 2004), of a list that contains it. Calling those with q <= alpha keeps the expected
    share of false findings (given the data, under the model) at most alpha."""
    lfdr = np.asarray(lfdr, np.float64)
    order = np.argsort(lfdr, kind="stable")
    running = np.cumsum(lfdr[order]) / np.arange(1, lfdr.size + 1)
    q = np.empty_like(lfdr)
    q[order] = np.minimum.accumulate(running[::-1])[::-1]
    return q


# -- the replicates' test ----------------------------------------------------------------------
MIN_PRIOR_REGIONS = 10  # regions with a variance of their own needed to estimate the prior
REPLICATE_P = 0.05  # dmr: a call's replicates bear it out at this p-value or below (replicate_pvalues)
OUTLIER_P = 0.05  # a variance this unlikely under the prior is a region's own (a replicate off its group)


def replicate_pvalues(methylated: np.ndarray, coverage: np.ndarray, groups: SampleGroups, high: np.ndarray,
                      low: np.ndarray) -> np.ndarray:
    """Per region, the p-value that group ``high[r]``'s level differs from group ``low[r]``'s in
    that direction, judged by how its replicates spread: limma's moderated t on the samples'
    levels with precision weights (as voom weighs counts), so each sample counts as a
    replicate, weighed by what its reads tell. ``methylated`` and ``coverage``: (R, S) reads
    of each sample in each region.

    A sample's level is Anscombe's arcsine-square-root of (m + 3/8) / (n + 3/4), whose
    variance is about (1 + (n - 1) rho) / (4n + 2) for n reads of a beta-binomial of
    overdispersion rho, down to one read: a deep sample weighs more, but no more than the
    spread between replicates allows (rho: _overdispersion, from the regions' own
    replicates). The weighted residual variance of a region (N - G degrees of freedom: its
    samples with reads, less their groups) is shrunk towards a prior estimated from all the
    regions' (_variance_prior), but for a region whose variance the prior makes implausible
    (the F tail below OUTLIER_P: a replicate off its group), which keeps its own, on its own
    degrees of freedom. The pair compared is the one the caller's call names, chosen from the
    same reads, so the p-value is two-sided, times the number of pairs of groups (Bonferroni:
    with three groups the highest against the lowest is one of three pairs); a difference
    the other way gives 1. NaN where a group compared has no reads, or where neither the region
    nor the prior gives a variance (one sample per group)."""
    methylated, coverage = np.asarray(methylated, np.float64), np.asarray(coverage, np.float64)
    read = coverage > 0
    level = np.arcsin(np.sqrt(np.clip((methylated + 0.375) / (coverage + 0.75), 0.0, 1.0)))
    rho = _overdispersion(methylated, coverage, groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = np.where(read, (4 * coverage + 2) / (1 + (coverage - 1) * rho), 0.0)
    rows = np.arange(len(coverage))
    totals = np.zeros((len(rows), groups.n_groups))
    means = np.zeros_like(totals)
    with_reads = np.zeros_like(totals)
    residual = np.zeros(len(rows))
    with np.errstate(invalid="ignore", divide="ignore"):
        for g in range(groups.n_groups):
            members = groups.samples_of(g)
            w, y = weight[:, members], level[:, members]
            totals[:, g] = w.sum(axis=1)
            means[:, g] = (w * y).sum(axis=1) / totals[:, g]
            with_reads[:, g] = read[:, members].sum(axis=1)
            residual += np.where(w > 0, w * (y - np.nan_to_num(means[:, g, None])) ** 2, 0.0).sum(axis=1)
        df = with_reads.sum(axis=1) - (with_reads > 0).sum(axis=1)
        variance = np.where(df > 0, residual / df, np.nan)
        prior, prior_df = _variance_prior(variance, df)
        ratio = np.nan_to_num(variance) / prior
        tail = chdtrc(df, df * ratio) if np.isinf(prior_df) else fdtrc(df, prior_df, ratio)
        outlier = (df > 0) & (prior > 0) & (tail < OUTLIER_P)
        moderated = prior if np.isinf(prior_df) else \
            (prior_df * prior + df * np.nan_to_num(variance)) / (prior_df + df)  # df 0: the prior alone
        shrunk = np.where(outlier, variance, moderated)  # an outlier's variance is its own, on its own df
        prior_df = np.where(outlier, 0.0, prior_df)
        error = np.sqrt(shrunk * (1 / totals[rows, high] + 1 / totals[rows, low]))
        one_sided = stdtr(df + prior_df, -(means[rows, high] - means[rows, low]) / error)
    pairs = groups.n_groups * (groups.n_groups - 1) // 2
    testable = (with_reads[rows, high] > 0) & (with_reads[rows, low] > 0) & (df + prior_df > 0) & (error > 0)
    return np.where(testable, np.minimum(2 * pairs * one_sided, 1.0), np.nan)


def _overdispersion(methylated: np.ndarray, coverage: np.ndarray, groups: SampleGroups) -> float:
    """The replicates' overdispersion rho, by moments over every pair of samples of a group
    with reads in a region, on the levels x / n themselves (unbiased at any depth, where a
    transformed level's mean moves with n): E[(x_s / n_s - x_t / n_t)^2] = p (1 - p) (1 / n_s
    + 1 / n_t + rho ((n_s - 1) / n_s + (n_t - 1) / n_t)), p (1 - p) estimated from the pair's
    pooled reads; 0 without such pairs, at most 1."""
    spread = sampling = excess = 0.0
    for g in range(groups.n_groups):
        members = groups.samples_of(g)
        for i, s in enumerate(members):
            for t in members[i + 1:]:
                both = (coverage[:, s] > 0) & (coverage[:, t] > 0) & (coverage[:, s] + coverage[:, t] >= 2)
                m_s, m_t, n_s, n_t = methylated[both, s], methylated[both, t], coverage[both, s], coverage[both, t]
                total = n_s + n_t
                pooled = (m_s + m_t) / total
                spread_pq = pooled * (1 - pooled) * total / (total - 1)
                spread += float(((m_s / n_s - m_t / n_t) ** 2).sum())
                sampling += float((spread_pq * (1 / n_s + 1 / n_t)).sum())
                excess += float((spread_pq * ((n_s - 1) / n_s + (n_t - 1) / n_t)).sum())
    return float(np.clip((spread - sampling) / excess, 0.0, 1.0)) if excess > 0 else 0.0


def _variance_prior(variance: np.ndarray, df: np.ndarray) -> tuple[float, float]:
    """(s0^2, d0): the scaled inverse chi-square prior of variances on ``df`` degrees of
    freedom (limma's fitFDist by moments of log s^2: their mean gives s0^2, their spread beyond
    sampling d0; d0 = inf when the spread is all sampling). (0, 0), no prior, from fewer than
    MIN_PRIOR_REGIONS of them."""
    own = np.isfinite(variance) & (df > 0)
    if own.sum() < MIN_PRIOR_REGIONS:
        return 0.0, 0.0
    s2, d = variance[own], df[own].astype(np.float64)
    positive = s2[s2 > 0]
    if positive.size == 0:
        return 0.0, 0.0
    s2 = np.maximum(s2, 1e-5 * np.median(positive))  # a variance of 0 (replicates alike) as limma offsets it
    e = np.log(s2) - digamma(d / 2) + np.log(d / 2)
    spread = e.var(ddof=1) - polygamma(1, d / 2).mean()
    if spread <= 0:  # the spread is all sampling: one variance for all, their mean (as limma's)
        return float(s2.mean()), np.inf
    d0 = 2 * _trigamma_inverse(spread)
    return float(np.exp(e.mean() + digamma(d0 / 2) - np.log(d0 / 2))), float(d0)


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (Newton's method from limma's start)."""
    y = 0.5 + 1.0 / x if x < 1e6 else 1.0 / np.sqrt(x)
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y
