"""The message chains along each sequence of chunks (a chromosome of a group of samples),
and the loop that maps a function of each chunk's posteriors over a store on Dask.

The chains are sequential within a chromosome (chromosomes run in parallel); the tasks
that use both messages of a chunk are independent. Every task holds one chunk (or short
contigs of a chunk's worth of bins in all, each a whole sequence: grouped_sequences), and
the results wait to be read in order for a bounded number of chunks' worth of bins
(RESULTS_AHEAD), so memory stays bounded."""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import dask

from ..io.store import ChunkRef, CountsStore
from ..io.tasks import Waiter, task_threads
from ..moments.pipeline import consecutive_groups, plan_chunks
from ..moments.spec import Grouping
from .chunks import IN_MEMORY_CELLS, backward_task, forward_task, posterior_task
from .messages import Params

# chunks' worth of bins whose results may wait to be read, per thread of the cluster, beyond
# the chromosome being read: whole chromosomes are started while fewer wait (their chains are
# computed once)
RESULTS_AHEAD = 2


def sequences(store: CountsStore, grouping: Grouping, chromosomes=None) -> list[list[ChunkRef]]:
    """The chunks of each sequence of ``grouping`` (a Grouping, or samples taken jointly), in
    order: every chromosome (or ``chromosomes``) of each of its groups of samples."""
    return [[plan.ref for plan in plan_chunks(store, group, chromosomes=[chrom])]
            for group in Grouping.of(grouping).groups for chrom in chromosomes or store.chromosomes]


def chain(items: list, forward: Callable, backward: Callable) -> list[tuple]:
    """(forward message in, backward message in, forward message out) of each item of one
    sequence: ``forward(previous, item)`` passes the forward message along,
    ``backward(following, item)`` the backward message back (None at the ends)."""
    forwards, backwards = [None], [None]
    for item in items:
        forwards.append(forward(forwards[-1], item))
    for item in reversed(items):
        backwards.insert(0, backward(backwards[0], item))
    return [(forwards[k], backwards[k + 1], forwards[k + 1]) for k in range(len(items))]


def grouped_sequences(chains: list[list[ChunkRef]], budget: int) -> list[tuple[bool, list[ChunkRef]]]:
    """(whether batched, chunks) in order: a sequence of several chunks alone, consecutive
    sequences of one chunk each (an assembly's short contigs) together up to ``budget`` bins
    (none: each alone), so that a task, not a contig, carries the fixed costs."""
    out = []
    for batched, run in itertools.groupby((refs for refs in chains if refs),
                                          key=lambda refs: len(refs) == 1 and budget > 0):
        if batched:
            out += [(True, group) for group in consecutive_groups((refs[0] for refs in run),
                                                                 lambda ref: ref.n_bins, budget)]
        else:
            out += [(False, list(refs)) for refs in run]
    return out


def batch_budget(store: CountsStore, grouping) -> int:
    """Bins of short contigs one task takes together: a chunk's worth, and none (each its own
    task) where a chunk's counts of a group's samples would not be held in memory
    (chunks.IN_MEMORY_CELLS)."""
    return store.chunk_size if store.chunk_size * Grouping.of(grouping).width <= IN_MEMORY_CELLS else 0


@dataclass(frozen=True)
class ChunkMessages:
    """Per chromosome and chunk with coverage: where to read it and both incoming messages."""

    ref: ChunkRef
    forward_in: object  # Delayed (loglik, message) of the previous chunk, or None
    backward_in: object  # Delayed message from the next chunk, or None
    forward_out: object  # Delayed (loglik, message) of this chunk

    @property
    def chrom(self) -> str:
        return self.ref.chrom


def message_graph(store: CountsStore, grouping: Grouping, params: Params, chromosomes=None,
                  verify: bool = True) -> list[ChunkMessages]:
    """Forward and backward message chains of every chromosome (or of ``chromosomes``) of each
    sequence of ``grouping`` (a Grouping, or samples taken jointly). ``verify`` False: the
    message tasks do not check the counts against their digests, because a task of every
    chunk that uses both messages does (a chain's last forward message may go unused, so
    the chain cannot be the one to check)."""
    return [chunk for refs in sequences(store, grouping, chromosomes) for chunk in chunk_messages(refs, params, verify)]


def chunk_messages(refs: list[ChunkRef], params: Params, verify: bool = True) -> list[ChunkMessages]:
    """The forward and backward message chains of one sequence of chunks (message_graph)."""
    links = chain(refs, lambda previous, ref: dask.delayed(forward_task, pure=True)(previous, ref, params, verify),
                  lambda following, ref: dask.delayed(backward_task, pure=True)(following, ref, params, verify))
    return [ChunkMessages(ref, *link) for ref, link in zip(refs, links)]


def posterior_jobs(store: CountsStore, samples: list[str], params: Params, on_chunk: Callable, args: tuple = (),
                   chromosomes=None) -> list[list[tuple[list[ChunkRef], object]]]:
    """The posterior tasks of :func:`map_posteriors`, in order, as jobs computed together,
    each a list of (chunks, a Delayed list of their results): a chromosome of several chunks
    is one job of a task per chunk between its chunk's messages; consecutive chromosomes of
    one chunk (short contigs) share one task (grouped_sequences; no messages: each is a
    whole sequence)."""
    jobs = []
    for batched, refs in grouped_sequences(sequences(store, samples, chromosomes), batch_budget(store, samples)):
        if batched:
            jobs.append([(refs, dask.delayed(_posteriors_of_sequences, pure=True)(refs, params, on_chunk, *args))])
        else:
            jobs.append([([c.ref], dask.delayed(_posteriors_between, pure=True)(c.forward_in, c.backward_in, c.ref,
                                                                              params, on_chunk, *args))
                         for c in chunk_messages(refs, params, verify=False)])
    return jobs


def _posteriors_of_sequences(refs: list[ChunkRef], params: Params, on_chunk: Callable, *args) -> list:
    """``on_chunk(posteriors, ChunkData, *args)`` of each chunk of ``refs``, each a whole
    sequence (one task for many short contigs)."""
    return [posterior_task(None, None, ref, params, on_chunk, *args) for ref in refs]


def _posteriors_between(previous, following, ref: ChunkRef, params: Params, on_chunk: Callable, *args) -> list:
    """[``on_chunk(...)``] of one chunk between its messages (a list, as a batch's)."""
    return [posterior_task(previous, following, ref, params, on_chunk, *args)]


def map_posteriors(store: CountsStore, samples: list[str], params: Params, client, on_chunk: Callable,
                   args: tuple = (), what: str = "the posteriors", progress=None,
                   chromosomes=None) -> Iterator[tuple[ChunkRef, object]]:
    """(chunk, ``on_chunk(posteriors, ChunkData, *args)``) of every chunk of the store, in
    order (chromosome by chromosome, in the store's order or that of ``chromosomes``, along
    each), the samples jointly: a Dask task per chunk on ``client``, between the chunk's
    exact messages (short contigs: one task for many, :func:`posterior_jobs`). A
    chromosome's tasks are computed together, and the next chromosomes start while fewer
    than RESULTS_AHEAD chunks' worth of bins per thread wait to be read: the results held at
    once do not grow with the genome. Each result is released once yielded;
    ``progress(done, total)`` follows each chunk; a wait is bounded (io.tasks.Waiter,
    ``what`` naming the computation)."""
    jobs = posterior_jobs(store, samples, params, on_chunk, args, chromosomes)
    total = sum(len(refs) for job in jobs for refs, _ in job)
    jobs = iter(jobs)
    ahead = RESULTS_AHEAD * task_threads(client) * store.chunk_size  # bins
    waiting = collections.deque()  # (chunks, their bins, future, its computation's Waiter), in order
    waiting_bins = done = 0
    if progress is not None:  # the total before the first chunk (which may wait for numba's compilation)
        progress(0, total)
    while True:
        while waiting_bins < ahead:  # an empty queue always takes the next job
            job = next(jobs, None)
            if job is None:
                break
            futures = client.compute([task for _, task in job])
            waiter = Waiter(client, futures, what)
            for (refs, _), future in zip(job, futures):
                bins = sum(ref.n_bins for ref in refs)
                waiting.append((refs, bins, future, waiter))
                waiting_bins += bins
        if not waiting:
            return
        refs, bins, future, waiter = waiting.popleft()
        results = waiter.result(future)
        future.release()
        waiting_bins -= bins
        for ref, result in zip(refs, results):
            yield ref, result
            done += 1
            if progress is not None:
                progress(done, total)
