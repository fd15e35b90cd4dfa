"""Model selection in memory: the one-pass fit of a number of states, the held-out criterion
over genomic blocks, BIC, and the number of states to recommend from a sweep's outcomes."""

from __future__ import annotations

import multiprocessing
import pickle
import tempfile
import warnings
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from ..io.tasks import ClusterError
from ..moments.blocks import BlockTable
from ..moments.sums import Moments
from .checks import DegenerateModelWarning, fit_or_refusal
from .criterion import Objective, coverage_tables
from .model import SpectralBinomialHMM
from .refine import counted_map, fit_threads, limit_fit_threads, refine

HELD_OUT_FOLDS = 5
# each fold's refit starts at the fit to all the data and moves little: a looser tolerance than
# a fit's (1e-8) changes the held-out criterion by far less than its standard error over folds
HELD_OUT_TOL = 1e-6


def one_pass(moments: Moments, m: int, method: str, seed: int, allow_degenerate: bool = False,
             quiet_degenerate: bool = False, emission: str = "binomial", limits=None,
             n_random_starts: int = 8, n_finished: int = 2, tol: float = 1e-8,
             progress=None) -> SpectralBinomialHMM:
    """The refined or FTD fit; a degenerate one raises DegenerateModelError unless allowed
    (then it warns, or with ``quiet_degenerate`` keeps silent: an EM start). ``limits``
    (refine.StateLimits) caps some states' levels and overdispersions; ``n_random_starts``,
    ``n_finished`` and ``tol`` set the refinement (SpectralBinomialHMM); ``progress(done,
    total)`` follows the refinement's starts."""
    est = SpectralBinomialHMM(m, n_bins=moments.n_bins, method=method, random_state=seed,
                              check_spectrum=method == "ftd" and not quiet_degenerate,
                              allow_degenerate=allow_degenerate or quiet_degenerate, emission=emission,
                              limits=limits, n_random_starts=n_random_starts, n_finished=n_finished, tol=tol)
    with warnings.catch_warnings():
        if quiet_degenerate:
            warnings.simplefilter("ignore", DegenerateModelWarning)
        return est.fit_moments(moments, progress)


@dataclass(frozen=True)
class HeldOut:
    """The refinement's criterion (per triple, lower is better) on held-out blocks: fitted
    on all blocks but one fold, scored on that fold; mean and standard error over folds."""

    loss: float
    se: float
    folds: int


def held_out_problem(table: BlockTable | None, block_size: int, folds: int = HELD_OUT_FOLDS) -> str | None:
    """Why the held-out criterion cannot be computed from these blocks (None: it can)."""
    if table is None:
        return "no block statistics"
    if len(table) < 2 * folds:
        return (f"too few blocks: {len(table)} of {block_size:,} bp, and {folds} held-out folds need at least "
                f"{2 * folds} (a smaller --block-size gives more: `fit` of a counts store takes one, a moment "
                f"store has the one `moments compute --block-size` gave it)")
    return None


def held_out(table: BlockTable | None, total: Moments, est, folds: int = HELD_OUT_FOLDS, progress=None
             ) -> HeldOut | None:
    """Blocks go to ``folds`` folds in turn along the genome (whole blocks, never single bins).
    Each fold's fit starts from ``est`` (the fit to all data); the folds run in threads, one
    per core (the refinement's kernels release the GIL); ``progress(done, total)`` follows
    them. None with too few blocks (:func:`held_out_problem` says why)."""
    if table is None or len(table) < 2 * folds:
        return None
    m = est.n_components
    fold = np.arange(len(table)) % folds
    emission = getattr(est, "emission", "binomial")
    start = ("all data", est.methylation_, est.transmat_, getattr(est, "coverage_buckets_", None),
             getattr(est, "dispersion_", None) if emission == "betabinomial" else None)
    coverage = coverage_tables(total)
    trains = [Objective(table.moments((fold != f).astype(np.float64), total), coverage=coverage, emission=emission)
              for f in range(folds)]
    # one BLAS thread throughout: each refinement's own limit would restore the default on leaving
    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(max_workers=fit_threads(folds)) as pool:
        fits = counted_map(pool, lambda train: refine(train, [start], keep=1, tol=HELD_OUT_TOL), trains, progress)
    losses, weights = [], []
    for f, fit in enumerate(fits):
        test = Objective(table.moments((fold == f).astype(np.float64), total), coverage=coverage, emission=emission)
        losses.append(test(test.pack(*fit.parameters), m)[0])
        weights.append(test.moments.n_triples)
    losses, weights = np.array(losses), np.array(weights, dtype=np.float64)
    mean = float(weights @ losses / weights.sum())
    return HeldOut(mean, float(losses.std(ddof=1) / np.sqrt(folds)), folds)


@dataclass(frozen=True)
class SweepFit:
    """One number of states of a one-pass sweep: the refined fit (None when refused as
    degenerate, ``refused`` says why), the warnings it gave and its held-out criterion."""

    m: int
    estimator: SpectralBinomialHMM | None
    refused: str | None
    warnings: list[str]
    held_out: HeldOut | None


class SweepProcessLost(ClusterError):
    """A sweep's worker process ended before returning its fit (the commands report it as
    they report a cluster that could not do the run)."""


_SWEEP_DATA: tuple = ()  # (moments, block table) of a sweep's worker process


def _sweep_worker(data: str) -> None:
    """A sweep's process: its data (the pickled moments and block table at ``data``), and one
    thread per fit (the processes use the cores)."""
    global _SWEEP_DATA
    with open(data, "rb") as fh:
        _SWEEP_DATA = pickle.load(fh)
    limit_fit_threads(1)


def sweep_fit(moments: Moments, table: BlockTable | None, m: int, seed: int, allow_degenerate: bool,
              emission: str) -> SweepFit:
    """The refined one-pass fit of ``m`` states and its held-out criterion (as `fit --states`
    makes them, without progress)."""
    est, refused, warned = fit_or_refusal(lambda: one_pass(moments, m, "refined", seed, allow_degenerate,
                                                            emission=emission))
    return SweepFit(m, est, refused, warned, None if est is None else held_out(table, moments, est))


def _sweep_fit_in_worker(m: int, seed: int, allow_degenerate: bool, emission: str) -> SweepFit:
    return sweep_fit(*_SWEEP_DATA, m, seed, allow_degenerate, emission)


def sweep_in_processes(moments: Moments, table: BlockTable | None, states: list[int], seed: int,
                       allow_degenerate: bool, emission: str, processes: int) -> Iterator[SweepFit]:
    """:func:`sweep_fit` of every number of states, in ``processes`` worker processes with one
    thread each, yielded in the order of ``states``. The same fits as in threads (each is
    deterministic and single-threaded either way), but a process of its own holds each core
    fully: threads of one process share Python's lock, which the criterion's small numpy
    steps hold most of the time. Closed before it is exhausted (the caller's Ctrl-C, SIGTERM
    or error, through contextlib.closing, which the caller must use), it terminates the
    workers: fits still running end at once, rather than the stop waiting for them."""
    context = multiprocessing.get_context("spawn")  # not fork: the parent runs threads
    others = set(multiprocessing.active_children())
    pool, finished = None, False
    # the workers load the data from a file: spawning writes a worker's arguments into a pipe
    # whose reading end the parent holds open until the write ends, so arguments larger than
    # the pipe's buffer hung the parent for good when the worker died before reading them all
    # (seen in a test run)
    scratch = tempfile.TemporaryDirectory(prefix="streambhmm-sweep-")
    try:
        data = Path(scratch.name) / "data.pickle"
        with open(data, "wb") as fh:
            pickle.dump((moments, table), fh, protocol=pickle.HIGHEST_PROTOCOL)
        for attempt in (1, 2):
            pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_sweep_worker,
                                       initargs=(str(data),))
            try:
                futures = {m: pool.submit(_sweep_fit_in_worker, m, seed, allow_degenerate, emission) for m in states}
                break
            except ValueError as exc:
                # "bad value(s) in fds_to_keep": another thread of this process closed a descriptor
                # while a worker was spawned and its number was reused (a race in CPython's
                # multiprocessing, seen once in a test run): the pool is made once more
                if attempt == 2 or "fds_to_keep" not in str(exc):
                    raise
                pool.shutdown(cancel_futures=True)
        for m in states:
            try:
                yield futures[m].result()
            except BrokenProcessPool:
                raise SweepProcessLost(f"a worker process of the sweep ended before its fit of {m} states was done "
                                       f"(killed, or out of memory?); the models before it are written") from None
        finished = True
    finally:
        if not finished:  # no fit runs on: its model would not be written (idle workers once all are handed over)
            # the pool's workers, found here: a stop while the fits were submitted (which starts
            # them) left the set empty, and the stop waited 13-22 s for the fits they had begun
            for worker in set(multiprocessing.active_children()) - others:
                worker.terminate()
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        scratch.cleanup()


def bic(loglik: float, m: int, n_samples: int, n_bins: float, betabinomial: bool = False) -> float:
    """Bayesian information criterion: -2 loglik + (levels [+ overdispersions] + free
    transitions) log n."""
    n_parameters = m * n_samples * (2 if betabinomial else 1) + m * (m - 1)
    return -2.0 * loglik + n_parameters * np.log(n_bins)


class SweepPoint(Protocol):
    """What ``recommend`` reads of a sweep's outcome for one number of states (app.fit.FitOutcome)."""

    m: int
    held_out: HeldOut | None
    bic: float | None


def recommend(outcomes: Iterable[SweepPoint]) -> tuple[int, str] | None:
    """The number of states to use from a sweep's outcomes (``m``, ``held_out`` and ``bic``):
    the smallest M within one standard error of the best held-out criterion, else the
    lowest BIC."""
    outcomes = list(outcomes)
    scored = [o for o in outcomes if o.held_out is not None]
    if scored:
        best = min(scored, key=lambda o: o.held_out.loss)
        limit = best.held_out.loss + best.held_out.se
        chosen = min((o for o in scored if o.held_out.loss <= limit), key=lambda o: o.m)
        return chosen.m, (f"the smallest M whose held-out criterion ({chosen.held_out.loss:.5f}) is within one "
                          f"standard error ({best.held_out.se:.5f}) of the best (M = {best.m}, "
                          f"{best.held_out.loss:.5f})")
    scored = [o for o in outcomes if o.bic is not None]
    if scored:
        best = min(scored, key=lambda o: o.bic)
        return best.m, f"the lowest BIC ({best.bic:.6g})"
    return None
