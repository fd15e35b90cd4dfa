"""What ``streambhmm fit`` computes, as functions the command calls: the one-pass fits from
moments, EM on a counts store, the held-out criterion and the recommended number of states.

Methods (the model JSON's ``method``):
    refined     one pass: the moments (and histograms) of the data, FTD's estimate and other
                starts refined on them (streambhmm.learn.refine); never reads the counts twice
    ftd         one pass: the paper's tensor decomposition alone
    em          Baum-Welch on the counts store from random starts, the best of --em-starts
    refined-em  EM from the refined fit
    ftd-em      EM from FTD's estimate
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..moments.features import DEFAULT_PROJECTION_DIM, projection_for

if TYPE_CHECKING:  # the command line imports this module to start: keep it light
    from ..moments.blocks import BlockTable
    from ..learn.model import SpectralBinomialHMM
    from ..moments.sums import Moments

METHODS = ("refined", "ftd", "em", "refined-em", "ftd-em")
ONE_PASS = ("refined", "ftd")
MOMENT_STORE_METHOD = "refined"
# fit STORE's default: measured on the real data sets (README, "Choosing a method")
COUNTS_STORE_METHOD = "refined"
# the emission of the EM methods and of the refined one-pass fit: measured on the real data sets
# (README, "Emissions"; scripts/real_data_fits.py --emission); FTD's is binomial
EM_EMISSION = "betabinomial"
REFINED_EMISSION = "betabinomial"


def default_emission(method: str) -> str:
    """The emission a method fits unless --emission says otherwise."""
    return "binomial" if method == "ftd" else REFINED_EMISSION if method == "refined" else EM_EMISSION
HELD_OUT_FOLDS = 5
# each fold's refit starts at the fit to all the data and moves little: a looser tolerance than
# a fit's (1e-8) changes the held-out criterion by far less than its standard error over folds
HELD_OUT_TOL = 1e-6


@dataclass
class FitData:
    """Moments to fit, where they came from, and the statistics of their genomic blocks."""

    moments: Moments
    samples: list[str]
    chromosomes: list[str]
    blocks: BlockTable | None
    block_size: int
    pooled: bool = False  # the moments are summed over the samples (one sample wide)


def load_moments(path, samples, n_bins: int, client, quiet: bool, split_every: int, block_size: int | None,
                 want_blocks: bool, pooled: bool = False, feature: str = "auto",
                 projection_dim: int = DEFAULT_PROJECTION_DIM) -> FitData:
    """Moments from a moment store (no counts are read) or from a counts store (one pass on
    ``client``, with progress unless ``quiet``); with ``want_blocks`` also their blocks.
    ``pooled`` asks for the samples' moments summed, ``feature`` ("auto", "beta",
    "projected") which feature's; a moment store has what it was made with."""
    from ..moments.blocks import DEFAULT_BLOCK_SIZE, BlockTable, check_block_size
    from .cluster import compute
    from ..moments.momentstore import MomentStoreError, is_moment_store, load_partials, read_manifest
    from ..moments.pipeline import add_moments, moments_graph, select_samples, tree_reduce
    from ..io.store import open_store

    if is_moment_store(path):
        manifest = read_manifest(path)
        feature_settings = manifest["feature"]
        if samples and list(samples) != manifest["samples"]:
            raise MomentStoreError(f"{path} holds moments of samples {','.join(manifest['samples'])}; "
                                   f"--samples {','.join(samples)} needs `streambhmm moments` with it")
        if feature_settings["n_bins"] != n_bins:
            raise MomentStoreError(f"{path} holds moments with --bins {feature_settings['n_bins']}, not {n_bins}")
        if feature != "auto" and feature != feature_settings.get("kind", "beta"):
            raise MomentStoreError(f"{path} holds moments of the {feature_settings.get('kind', 'beta')} feature, "
                                   f"not --feature {feature}")
        feature = feature_settings
        if pooled and not feature.get("pooled"):
            raise MomentStoreError(f"{path} holds joint moments of its samples; --pooled needs "
                                   f"`streambhmm moments --pooled`")
        if block_size is not None and block_size != feature["block_size"]:
            raise MomentStoreError(f"{path} holds blocks of {feature['block_size']:,} bp, not {block_size:,}; "
                                   f"the block size is set by `streambhmm moments --block-size`")
        partials, manifest = load_partials(path)
        moments = tree_reduce([p.moments for p in partials], add_moments, split_every)
        blocks = BlockTable([p.blocks for p in partials]) if want_blocks else None
        return FitData(moments, manifest["samples"], manifest["chromosomes"], blocks, feature["block_size"],
                       bool(feature.get("pooled")))
    counts = open_store(path)
    if block_size is not None:
        check_block_size(block_size, counts.bin_size)
    block_size = block_size or DEFAULT_BLOCK_SIZE
    width = 1 if pooled else len(select_samples(counts, samples))
    dim = projection_for(feature, width, n_bins, projection_dim)
    # the block statistics cost more than the moments on one sample: computed only when used
    graph = moments_graph(counts, samples, n_bins=n_bins, split_every=split_every,
                          block_size=block_size if want_blocks else None, pooled=pooled, projection_dim=dim)
    if want_blocks:
        partials = compute(client, graph.partials, quiet=quiet, what=f"the moments of {counts.path}")
        moments = tree_reduce([p.moments for p in partials], add_moments, split_every)
        return FitData(moments, graph.samples, graph.chromosomes, BlockTable([p.blocks for p in partials]),
                       block_size, pooled)
    return FitData(compute(client, graph.total, quiet=quiet, what=f"the moments of {counts.path}"), graph.samples,
                   graph.chromosomes, None, block_size, pooled)


def one_pass(moments: Moments, m: int, method: str, seed: int, allow_degenerate: bool = False,
             quiet_degenerate: bool = False, emission: str = "binomial", limits=None,
             n_random_starts: int = 8) -> SpectralBinomialHMM:
    """The refined or FTD fit; a degenerate one raises DegenerateModelError unless allowed
    (then it warns, or with ``quiet_degenerate`` keeps silent: an EM start). ``limits``
    (refine.StateLimits) caps some states' levels and overdispersions."""
    from ..learn.checks import DegenerateModelWarning
    from ..learn.model import SpectralBinomialHMM

    est = SpectralBinomialHMM(m, n_bins=moments.n_bins, method=method, random_state=seed,
                              check_spectrum=method == "ftd" and not quiet_degenerate,
                              allow_degenerate=allow_degenerate or quiet_degenerate, emission=emission,
                              limits=limits, n_random_starts=n_random_starts)
    with warnings.catch_warnings():
        if quiet_degenerate:
            warnings.simplefilter("ignore", DegenerateModelWarning)
        return est.fit_moments(moments)


@dataclass(frozen=True)
class HeldOut:
    """The refinement's criterion (per triple, lower is better) on held-out blocks: fitted
    on all blocks but one fold, scored on that fold; mean and standard error over folds."""

    loss: float
    se: float
    folds: int


def held_out(table: BlockTable | None, total: Moments, est, folds: int = HELD_OUT_FOLDS
             ) -> HeldOut | None:
    """Blocks go to ``folds`` folds in turn along the genome (whole blocks, never single bins).
    Each fold's fit starts from ``est`` (the fit to all data); the folds run in threads, one
    per core (the refinement's kernels release the GIL). None with too few blocks."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    from ..learn.refine import Objective, refine

    if table is None or len(table) < 2 * folds:
        return None
    m = est.n_components
    fold = np.arange(len(table)) % folds
    emission = getattr(est, "emission", "binomial")
    start = ("all data", est.methylation_, est.transmat_, getattr(est, "coverage_buckets_", None),
             getattr(est, "dispersion_", None) if emission == "betabinomial" else None)
    first = Objective(table.moments((fold != 0).astype(np.float64), total), emission=emission)
    trains = [first] + [Objective(table.moments((fold != f).astype(np.float64), total), coverage=first.coverage,
                                  emission=emission) for f in range(1, folds)]
    # one BLAS thread throughout: each refinement's own limit would restore the default on leaving
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(max_workers=min(folds, os.cpu_count() or 1)) as pool:
        fits = list(pool.map(lambda train: refine(train, [start], keep=1, tol=HELD_OUT_TOL), trains))
    losses, weights = [], []
    for f, fit in enumerate(fits):
        test = Objective(table.moments((fold == f).astype(np.float64), total), coverage=first.coverage,
                         emission=emission)
        losses.append(test(test.pack(*fit.parameters), m)[0])
        weights.append(test.moments.n_triples)
    losses, weights = np.array(losses), np.array(weights, dtype=np.float64)
    mean = float(weights @ losses / weights.sum())
    return HeldOut(mean, float(losses.std(ddof=1) / np.sqrt(folds)), folds)


def bic(loglik: float, m: int, n_samples: int, n_bins: float, betabinomial: bool = False) -> float:
    """Bayesian information criterion: -2 loglik + (levels [+ overdispersions] + free
    transitions) log n."""
    n_parameters = m * n_samples * (2 if betabinomial else 1) + m * (m - 1)
    return -2.0 * loglik + n_parameters * np.log(n_bins)


def recommend(rows: list[dict]) -> tuple[int, str] | None:
    """The number of states to use from sweep rows {"m", "held_out" (HeldOut|None), "bic"}:
    the smallest M within one standard error of the best held-out criterion, else the
    lowest BIC."""
    scored = [r for r in rows if r.get("held_out") is not None]
    if scored:
        best = min(scored, key=lambda r: r["held_out"].loss)
        limit = best["held_out"].loss + best["held_out"].se
        chosen = min((r for r in scored if r["held_out"].loss <= limit), key=lambda r: r["m"])
        return chosen["m"], (f"the smallest M whose held-out criterion ({chosen['held_out'].loss:.5f}) is within one "
                             f"standard error ({best['held_out'].se:.5f}) of the best (M = {best['m']}, "
                             f"{best['held_out'].loss:.5f})")
    scored = [r for r in rows if r.get("bic") is not None]
    if scored:
        best = min(scored, key=lambda r: r["bic"])
        return best["m"], f"the lowest BIC ({best['bic']:.6g})"
    return None
