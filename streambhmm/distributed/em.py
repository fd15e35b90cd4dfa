"""EM and scoring of a counts store: the E-step as a Dask graph over the message chains (or
in this process for a small store), Baum-Welch from a model's parameters, and the exact
log-likelihood of each chromosome."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dask

from ..learn import hmm_kernels
from ..learn.emissions import EmissionTable
from ..learn.hmm import BinomialHMM, SufficientStats, has_converged, run_em
from ..moments.pipeline import DEFAULT_SPLIT_EVERY, select_grouping, tree_reduce
from ..moments.spec import Grouping
from ..io.store import ChunkRef, CountsStore
from ..io.tasks import Waiter
from .chains import batch_budget, chunk_messages, grouped_sequences, message_graph, sequences
from .chunks import kept_counts, sequences_stats, sequences_stats_task, sequences_table, stats_task
from .messages import Params, add_stats, backward_step, forward_step, statistics_between


class LocalEStep:
    """The E-step of a small store in this process, without a Dask graph per iteration: the
    same chunk functions, chains and reduction tree as stats_graph, so the same statistics
    bitwise; each chunk is read (and verified) once, and its emission table kept for every
    iteration. The chunks' counts stay in memory: only for stores that fit (cluster.is_small)."""

    def __init__(self, store: CountsStore, grouping: Grouping, split_every: int = DEFAULT_SPLIT_EVERY):
        # a sequence of chunks, or short contigs taken together (one recursion over them all)
        self.chains = grouped_sequences(sequences(store, grouping), batch_budget(store, grouping))
        self.split_every = split_every
        self.cache = {}
        # per thread, the buffers of the sequence it works on (its chunks' log-emissions, the
        # recursion's arrays), reused by the next: fresh arrays of a chunk's size cost page faults
        self.buffers = threading.local()
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(len(self.chains), len(os.sched_getaffinity(0)))))

    def _chunk(self, ref: ChunkRef):
        if ref not in self.cache:
            _, meth, cov = kept_counts(ref)
            self.cache[ref] = EmissionTable(meth, cov)
        return self.cache[ref]

    def _batch(self, refs: list) -> tuple:
        """The emission table and the lengths of short contigs taken together."""
        key = tuple(refs)
        if key not in self.cache:
            self.cache[key] = sequences_table(refs)
        return self.cache[key]

    def __call__(self, params: Params) -> SufficientStats:
        # the sequences (chromosomes) in threads, one per core (the recursions release the GIL),
        # their parts reduced in order: the same statistics as one thread's
        parts = [part for parts in self.pool.map(lambda chain: self._sequence(*chain, params), self.chains)
                 for part in parts]
        if not parts:
            raise ValueError("the store has no bins")
        return tree_reduce(parts, add_stats, self.split_every)

    def close(self) -> None:
        """Stop the threads (and release their buffers)."""
        self.pool.shutdown()

    def _sequence(self, batched: bool, refs: list, params: Params) -> list:
        """The statistics of each chunk of one sequence (``batched``: of short contigs, each a
        whole sequence, together). A chunk needs the forward message of the chunks before it
        and the backward message of those after: the first chunk's forward message and the
        last's backward one are never computed."""
        if not hasattr(self.buffers, "workspace"):
            self.buffers.workspace, self.buffers.log_b = hmm_kernels.Workspace(), []
        if batched:
            return [sequences_stats(*self._batch(refs), params, self.buffers.workspace)]
        tables = [self._chunk(ref) for ref in refs]
        kept = self.buffers.log_b
        log_bs = [params.log_b(table, out=kept[k] if k < len(kept) else None) for k, table in enumerate(tables)]
        kept[:len(log_bs)] = log_bs
        forward = [None]
        for log_b in log_bs[:-1]:
            forward.append(forward_step(forward[-1], log_b, params)[1])
        backward = [None]
        for log_b in reversed(log_bs[1:]):
            backward.insert(0, backward_step(backward[0], log_b, params))
        return [statistics_between(previous, following, log_b, params, False, table,
                                   workspace=self.buffers.workspace)[0]
                for previous, following, log_b, table in zip(forward, backward, log_bs, tables)]


def stats_graph(store: CountsStore, grouping: Grouping, params: Params, split_every: int = DEFAULT_SPLIT_EVERY):
    """Delayed total SufficientStats of the store under ``params``, over the sequences of
    ``grouping`` (a Grouping, or samples taken jointly)."""
    parts = []
    for batched, refs in grouped_sequences(sequences(store, grouping), batch_budget(store, grouping)):
        if batched:
            parts.append(dask.delayed(sequences_stats_task, pure=True)(refs, params))
            continue
        parts += [dask.delayed(stats_task, pure=True)(c.forward_in, c.backward_in, c.ref, params)
                  for c in chunk_messages(refs, params, verify=False)]
    if not parts:
        raise ValueError(f"{store.path}: the store has no bins")
    return tree_reduce(parts, dask.delayed(add_stats, pure=True), split_every)


def score_store(store: CountsStore, hmm: BinomialHMM, client, samples=None, chromosomes=None,
                pooled: bool = False) -> dict:
    """Log-likelihood of each chromosome (binomial coefficients included), exact, of the
    samples (a Grouping, or samples taken jointly or ``pooled``: summed over the samples)."""
    grouping = select_grouping(store, samples, pooled)
    hmm.validate(grouping.width)
    params = Params.of(hmm)
    wanted = store.chromosomes if not chromosomes else list(chromosomes)
    unknown = [c for c in wanted if c not in store.chromosomes]
    if unknown:
        raise ValueError(f"{store.path}: no chromosome {', '.join(unknown)}; it has {', '.join(store.chromosomes)}")
    per_chunk = message_graph(store, grouping, params, wanted)
    logliks = client.compute([c.forward_out for c in per_chunk])
    waiter = Waiter(client, logliks, f"the log-likelihood of {store.path}")
    result = dict.fromkeys(wanted, 0.0)
    for c, future in zip(per_chunk, logliks):
        result[c.chrom] += float(waiter.result(future)[0])
    return result


@dataclass
class StoreEMResult:
    hmm: BinomialHMM
    history: list
    seconds_per_iteration: float
    converged: bool
    n_bins: float  # covered bins fitted: transitions + sequences
    stats: SufficientStats | None = None  # of the last E-step: the final parameters'

    def stopped_short(self, cap: str, rel_tol: float) -> str:
        """How EM stopped at its ``cap`` (as the user set it) before converging at ``rel_tol``;
        "" when it converged."""
        if self.converged:
            return ""
        gain = self.history[-1] - self.history[-2]
        return (f"EM stopped at {cap} before converging (its last iteration gained {gain:.3g}; it converges at a "
                f"gain below {rel_tol * abs(self.history[-1]):.3g})")


def fit_store_em(store: CountsStore, hmm: BinomialHMM, client, samples=None, n_iter: int = 20,
                 rel_tol: float = 1e-7, split_every: int = DEFAULT_SPLIT_EVERY, report=None,
                 check: bool = True, pooled: bool = False) -> StoreEMResult:
    """Baum-Welch on a store from ``hmm``'s current parameters, one Dask graph per E-step
    (``client`` None: in this process, LocalEStep, for small stores).

    Stops after ``n_iter`` M-steps or when an iteration gains less than
    ``rel_tol * |loglik|``. The history holds the log-likelihood before each M-step and
    of the final parameters; ``report(iteration, loglik)`` is called after each E-step.
    With ``check`` the result is checked (BinomialHMM.check_fit); a caller comparing
    several starts checks the one it keeps. ``samples`` may be a Grouping; ``pooled``: one
    sample-wide model shared by the samples, each sample its own sequences, their statistics summed."""
    grouping = select_grouping(store, samples, pooled)
    hmm.validate(grouping.width)
    start = time.perf_counter()
    last = []

    local = LocalEStep(store, grouping, split_every) if client is None else None
    e_steps = [0]  # E-steps done: the next one's iteration, as run_em reports it

    def e_step():
        if local is not None:
            stats = local(Params.of(hmm))
        else:
            future = client.compute(stats_graph(store, grouping, Params.of(hmm), split_every))
            what = f"the E-step of EM iteration {e_steps[0]} on {store.path}"
            stats = Waiter(client, [future], what).result(future)
        e_steps[0] += 1
        last[:] = [stats]
        return stats

    try:
        history = run_em(hmm, e_step, n_iter, rel_tol, report)
    finally:
        if local is not None:
            local.close()
    hmm.n_features_in_ = grouping.width
    if check:
        hmm.check_fit()
    return StoreEMResult(hmm, history, (time.perf_counter() - start) / len(history),
                         has_converged(history, rel_tol), float(last[0].trans.sum() + last[0].start.sum()), last[0])
