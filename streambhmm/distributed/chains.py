"""The message chains along each sequence of chunks (a chromosome of a group of samples),
and the loop that maps a function of each chunk's posteriors over a store on Dask.

The chains are sequential within a chromosome (chromosomes run in parallel); the tasks
that use both messages of a chunk are independent. Every task holds one chunk, and the
results wait to be read in order for a bounded number of chunks (RESULTS_AHEAD), so memory
stays bounded."""

from __future__ import annotations

import collections
import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import dask

from ..io.store import ChunkRef, CountsStore
from ..io.tasks import Waiter, task_threads
from ..moments.pipeline import plan_chunks
from ..moments.spec import Grouping
from .chunks import backward_task, forward_task, posterior_task
from .messages import Params

# chunks whose results may wait to be read, per thread of the cluster, beyond the chromosome
# being read: whole chromosomes are started while fewer wait (their chains are computed once)
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
    out = []
    for refs in sequences(store, grouping, chromosomes):
        links = chain(refs, lambda previous, ref: dask.delayed(forward_task, pure=True)(previous, ref, params, verify),
                      lambda following, ref: dask.delayed(backward_task, pure=True)(following, ref, params, verify))
        out += [ChunkMessages(ref, *link) for ref, link in zip(refs, links)]
    return out


def map_posteriors(store: CountsStore, samples: list[str], params: Params, client, on_chunk: Callable,
                   args: tuple = (), what: str = "the posteriors", progress=None,
                   chromosomes=None) -> Iterator[tuple[ChunkRef, object]]:
    """(chunk, ``on_chunk(posteriors, ChunkData, *args)``) of every chunk of the store, in
    order (chromosome by chromosome, in the store's order or that of ``chromosomes``, along
    each), the samples jointly: one Dask task per chunk on ``client``, between the chunk's
    exact messages. A chromosome's tasks are computed together, and the next chromosomes
    start while fewer than RESULTS_AHEAD chunks per thread wait to be read: the results
    held at once do not grow with the genome. Each result is released once yielded;
    ``progress(done, total)`` follows each; a wait is bounded (io.tasks.Waiter, ``what``
    naming the computation)."""
    graph = message_graph(store, samples, params, chromosomes, verify=False)
    by_chromosome = (list(chunks) for _, chunks in itertools.groupby(graph, key=lambda chunk: chunk.chrom))
    ahead = RESULTS_AHEAD * task_threads(client)
    waiting = collections.deque()  # (chunk, future, its computation's Waiter), in order
    if progress is not None:  # the total before the first chunk (which may wait for numba's compilation)
        progress(0, len(graph))
    for done in range(1, len(graph) + 1):
        while len(waiting) < ahead:  # ahead >= 2: an empty queue always takes the next chromosome
            chunks = next(by_chromosome, None)
            if chunks is None:
                break
            futures = client.compute([dask.delayed(posterior_task, pure=True)(
                c.forward_in, c.backward_in, c.ref, params, on_chunk, *args) for c in chunks])
            waiter = Waiter(client, futures, what)
            waiting.extend((chunk, future, waiter) for chunk, future in zip(chunks, futures))
        chunk, future, waiter = waiting.popleft()
        result = waiter.result(future)
        future.release()
        yield chunk.ref, result
        if progress is not None:
            progress(done, len(graph))
