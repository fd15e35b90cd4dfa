"""Block bootstrap: confidence intervals from resampled genomic blocks of fixed length.

Blocks (streambhmm.moments.blocks, 1 Mb by default, whatever the storage chunks) are resampled with
replacement and the refinement is refitted to each replicate's sums, starting from the fit
to all blocks. Block statistics keep coarser histograms than the full moments (to be small
enough for every block of a genome), so each replicate's deviation from the all-blocks fit
at that resolution is added to the point estimate: the intervals are centred where the
point estimate is, and as wide as the refinement's sampling spread at block resolution.
Resampling whole blocks keeps the serial dependence within each block.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..moments.blocks import BlockTable
from .evaluate import match_states
from .criterion import coverage_tables
from .refine import Objective, refine

MIN_BLOCKS = 10  # fewer cannot be resampled meaningfully: refused
FEW_BLOCKS = 30  # fewer: the intervals are rough (a warning)


@dataclass(frozen=True)
class BootstrapIntervals:
    methylation_ci: np.ndarray  # (m, S, 2)
    transmat_ci: np.ndarray  # (m, m, 2)
    n_replicates: int
    n_blocks: int


def check_blocks(n_blocks: int, block_size: int) -> str | None:
    """Refuse too few blocks (ValueError); return a warning for few, else None."""
    if n_blocks < MIN_BLOCKS:
        raise ValueError(f"only {n_blocks} block(s) of {block_size:,} bp to resample; the bootstrap needs at least "
                         f"{MIN_BLOCKS}: use a smaller --block-size (moments are computed with it)")
    if n_blocks < FEW_BLOCKS:
        return (f"only {n_blocks} blocks of {block_size:,} bp: bootstrap intervals from so few blocks are rough "
                f"(a smaller --block-size gives more)")
    return None


def block_bootstrap(table: BlockTable, total, point, n_replicates: int, random_state=None,
                    level: float = 0.95, progress=None) -> BootstrapIntervals:
    """Percentile intervals of levels and transitions; ``point`` has methylation_ and transmat_;
    ``total``: the whole data's Moments; ``progress(done, total)`` follows the replicates."""
    rng = np.random.default_rng(random_state)
    n = len(table)
    emission = getattr(point, "emission", "binomial")
    dispersion = getattr(point, "dispersion_", None) if emission == "betabinomial" else None
    coverage = coverage_tables(total)
    base_objective = Objective(table.moments(np.ones(n), total), coverage=coverage, emission=emission)
    base = refine(base_objective, [("point", point.methylation_, point.transmat_,
                                    getattr(point, "coverage_buckets_", None), dispersion)], keep=1)
    perm = match_states(point.methylation_, base.methylation)
    base_levels, base_transmat = base.methylation[perm], base.transmat[np.ix_(perm, perm)]
    base_coverage = [q[perm] for q in base.coverage]
    base_dispersion = None if base.dispersion is None else base.dispersion[perm]
    levels, transitions = [], []
    for r in range(n_replicates):
        if progress is not None:
            progress(r, n_replicates)
        weights = rng.multinomial(n, np.full(n, 1.0 / n)).astype(np.float64)
        objective = Objective(table.moments(weights, total), coverage=coverage, emission=emission)
        rep = refine(objective, [("all blocks", base_levels, base_transmat, base_coverage, base_dispersion)], keep=1)
        perm = match_states(base_levels, rep.methylation)
        levels.append(point.methylation_ + rep.methylation[perm] - base_levels)
        transitions.append(point.transmat_ + rep.transmat[np.ix_(perm, perm)] - base_transmat)
    if progress is not None:
        progress(n_replicates, n_replicates)
    tail = 100 * (1 - level) / 2

    def interval(values):
        return np.clip(np.stack(np.percentile(np.array(values), [tail, 100 - tail], axis=0), axis=-1), 0.0, 1.0)

    return BootstrapIntervals(methylation_ci=interval(levels), transmat_ci=interval(transitions),
                              n_replicates=n_replicates, n_blocks=n)
