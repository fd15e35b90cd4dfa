"""Block bootstrap over genomic chunks: confidence intervals from resampled chunk partials."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evaluate import match_states
from .moments import Moments, weighted_sum
from .spectral import SpectrumError


@dataclass(frozen=True)
class BootstrapIntervals:
    methylation_ci: np.ndarray  # (m, S, 2)
    transmat_ci: np.ndarray  # (m, m, 2)
    n_replicates: int
    n_succeeded: int


def block_bootstrap(partials: list[Moments], point, make_estimator, n_replicates: int, random_state=None,
                    level: float = 0.95) -> BootstrapIntervals:
    """Resample chunk partials with replacement, refit, align states to ``point`` (Hungarian
    matching on methylation levels) and take percentile intervals.

    Chunks are long (1e6 bins by default), so resampling them keeps the serial dependence
    within each block. Replicates whose moments do not support the states are skipped.
    """
    rng = np.random.default_rng(random_state)
    n = len(partials)
    levels, transitions = [], []
    for _ in range(n_replicates):
        weights = rng.multinomial(n, np.full(n, 1.0 / n)).astype(np.float64)
        resampled = weighted_sum(partials, weights)
        try:
            est = make_estimator().fit_moments(resampled)
        except SpectrumError:
            continue
        perm = match_states(point.methylation_, est.methylation_)
        levels.append(est.methylation_[perm])
        transitions.append(est.transmat_[np.ix_(perm, perm)])
    tail = 100 * (1 - level) / 2
    if not levels:
        raise SpectrumError("no bootstrap replicate supported the requested states")

    def interval(values):
        return np.stack(np.percentile(np.array(values), [tail, 100 - tail], axis=0), axis=-1)

    return BootstrapIntervals(methylation_ci=interval(levels), transmat_ci=interval(transitions),
                              n_replicates=n_replicates, n_succeeded=len(levels))
