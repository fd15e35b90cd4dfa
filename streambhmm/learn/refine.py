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
  b_h is the likelihood of a cell in state h: the Binomial probability of its methylated
  reads given the thinned coverage, exact under the model (a subsample of Binomial reads is
  Binomial). So these terms are EM's likelihood of one bin or two: they weigh bins by their
  reads, which feature moments cannot, and the adjacent pairs add the context of the
  neighbour. The states' coverage distributions do not enter them (where they did, the fits
  spent states on coverage: measured, docs/methods/one-pass.md).

Why this and not least squares on the moments: measured (scripts/refine_weights.py, docs/methods/one-pass.md),
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

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits

from ..moments.sums import Moments
from .checks import degeneracy_problems
# the criterion's public names, importable from here as before
from .criterion import Objective, StateLimits, Weights, objective_for, stationary  # noqa: F401


# Threads for independent fits (starts, held-out folds): one per core, unless a process of a
# sweep's pool (streambhmm.learn.selection.sweep_in_processes) runs one fit per core already.
_fit_threads: int | None = None


def fit_threads(tasks: int) -> int:
    """How many threads run ``tasks`` independent fits."""
    return max(1, min(tasks, _fit_threads or os.cpu_count() or 1))


def limit_fit_threads(threads: int | None) -> None:
    """Run independent fits in at most ``threads`` threads from now on (None: one per core)."""
    global _fit_threads
    _fit_threads = threads


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
    levels, transmat, _, dispersion = objective.unpack(x, m)
    return bool(degeneracy_problems(levels, transmat, stationary(transmat)[0], dispersion=dispersion))


def counted_map(pool, fn, items: list, progress=None, done: int = 0, total: int | None = None) -> list:
    """``pool.map(fn, items)``, calling ``progress(done, total)`` in this thread as each item
    finishes (counting on from ``done``; ``total`` defaults to ``done + len(items)``)."""
    futures = [pool.submit(fn, item) for item in items]
    if progress is not None:
        total = done + len(items) if total is None else total
        for done, _ in enumerate(as_completed(futures), done + 1):
            progress(done, total)
    return [f.result() for f in futures]


class _Stopped(Exception):
    """A start ended because its refinement was interrupted."""


@contextlib.contextmanager
def _stopped_with(stopping: threading.Event):
    """Set ``stopping`` when the block raises (Ctrl-C, SIGTERM), so the starts' threads end
    within a step instead of running to convergence before the command can stop (the pool
    waits for them)."""
    try:
        yield
    except BaseException:
        stopping.set()
        raise


def refine(objective: Objective, starts: list[tuple], max_iter: int = 1000, screen_iter: int = 40, keep: int = 2,
           tol: float = 1e-8, limits: StateLimits | None = None, progress=None) -> Refined:
    """L-BFGS-B from each (label, levels, transmat[, coverage[, dispersion]]) start for
    ``screen_iter`` iterations; the ``keep`` lowest then continue to convergence (or
    ``max_iter``); the lowest criterion wins. ``limits`` caps some states' levels and
    overdispersions. Starts run in threads, one per core (the compiled likelihoods release
    the GIL); each is independent, so the result does not depend on the number of threads.
    ``progress(done, total)`` follows the starts screened and finished."""
    m = starts[0][1].shape[0]
    bounds = objective.bounds(m, limits)
    stopping = threading.Event()  # set when the caller is interrupted: the starts end at their next step

    def criterion(x, m):
        if stopping.is_set():
            raise _Stopped
        return objective(x, m)

    def run(x0, iterations):
        return minimize(criterion, x0, args=(m,), jac=True, method="L-BFGS-B", bounds=bounds,
                        options={"maxiter": iterations, "ftol": tol, "gtol": 1e-9, "maxcor": 30})

    def first(start):
        x0 = objective.pack(*start[1:])
        return run(np.clip(x0, *np.array(bounds).T), screen_iter)

    labels = [start[0] for start in starts]

    def finish(item):
        return run(item[1].x, max_iter) if item[1].nit >= screen_iter else item[1]

    # one BLAS thread per start: threads of BLAS spinning on small products would idle the starts' cores
    with threadpool_limits(1, user_api="blas"), \
            ThreadPoolExecutor(max_workers=fit_threads(len(starts))) as pool, _stopped_with(stopping):
        total = len(starts) + min(keep, len(starts))
        screened = list(zip(labels, counted_map(pool, first, starts, progress, 0, total)))
        screened.sort(key=lambda item: item[1].fun)
        finished = list(zip([label for label, _ in screened[:keep]],
                            counted_map(pool, finish, screened[:keep], progress, len(starts), total)))
        # a degenerate optimum (a state of no weight, states never left) loses to a sound one:
        # the next screened starts are finished until one is sound
        for item in screened[keep:]:
            if any(not _degenerate(objective, res.x, m) for _, res in finished):
                break
            finished.append((item[0], finish(item)))
            if progress is not None:
                total += 1
                progress(total, total)
    sound = [item for item in finished if not _degenerate(objective, item[1].x, m)]
    label, best = min(sound or finished, key=lambda item: item[1].fun)
    levels, transmat, coverage, dispersion = objective.unpack(best.x, m)
    pi, _ = stationary(transmat)
    losses = dict((lab, float(res.fun)) for lab, res in screened) | dict((lab, float(res.fun)) for lab, res in finished)
    return Refined(methylation=levels, transmat=transmat, startprob=pi, coverage=coverage,
                   mean_coverage=objective.mean_coverage(coverage), loss=float(best.fun), start=label,
                   n_iter=int(best.nit), starts=tuple(losses.items()), dispersion=dispersion)
