"""A chunk's kept bins as the tasks use them (its counts in memory, or one sample at a time
when they would not fit, and their log-emissions), and the Dask tasks of one chunk: its
messages, and its statistics or posteriors between its incoming messages."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..learn.emissions import EmissionTable
from ..io.store import ChunkRef, covered_bins
from .messages import Params, backward_step, forward_step, statistics_between

# Up to this many bins x samples a chunk's counts are read together and kept in memory
# (256 MB as int64); beyond (many samples), one sample at a time: the log-emissions (bins
# x states) and the posteriors are all a task holds, whatever the number of samples.
IN_MEMORY_CELLS = 1 << 24


@dataclass
class ChunkData:
    """A chunk's kept bins (some of the ref's samples covered) as the tasks use them."""

    ref: ChunkRef
    rows: np.ndarray
    log_b: np.ndarray  # (kept bins, m)
    table: EmissionTable | None  # of the kept bins' counts, when they fit in memory
    counts: tuple | None  # (methylated, coverage) of the kept bins, when they fit in memory

    def sample_counts(self):
        """(k, methylated, coverage) of each sample's kept bins, each (kept bins,): from
        memory, or read one sample at a time (verified when the emissions were made)."""
        for k in range(len(self.ref.columns)):
            if self.counts is not None:
                yield k, self.counts[0][:, k], self.counts[1][:, k]
            else:
                meth, cov = self.ref.read([k], verify=False)
                yield k, meth[self.rows, 0], cov[self.rows, 0]

    def statistics(self, posteriors: np.ndarray, keep_pairs: bool) -> tuple:
        """(methylated, coverage) posterior-weighted sums (m, S) and, with ``keep_pairs``,
        each sample's PairWeights: one sample at a time."""
        m = posteriors.shape[1]
        msum, csum = np.zeros((m, len(self.ref.columns))), np.zeros((m, len(self.ref.columns)))
        pairs = []
        for k, meth, cov in self.sample_counts():
            table = EmissionTable(meth[:, None], cov[:, None])
            sample_msum, sample_csum, sample_pairs = table.statistics(table.code_weights(posteriors), keep_pairs)
            msum[:, k], csum[:, k] = sample_msum[:, 0], sample_csum[:, 0]
            pairs += sample_pairs or []
        return msum, csum, pairs if keep_pairs else None


def kept_counts(ref: ChunkRef, verify: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, methylated, coverage) of a chunk's kept bins (some of its samples covered),
    all samples read together (checked against their digests unless ``verify`` is False)."""
    meth, cov = ref.read(verify=verify)
    rows = np.flatnonzero(covered_bins(cov))
    return rows, meth[rows], cov[rows]


def sequences_table(refs: list[ChunkRef]) -> tuple[EmissionTable, np.ndarray]:
    """The emission table of the kept bins of chunks that are whole sequences (short
    contigs), one after the other, and the number of each one's (their lengths)."""
    parts = [kept_counts(ref)[1:] for ref in refs]
    return (EmissionTable(*(np.concatenate([part[k] for part in parts]) for k in (0, 1))),
            np.array([part[0].shape[0] for part in parts], np.int64))


def sequences_stats(table: EmissionTable, lengths: np.ndarray, params: Params, workspace=None):
    """The SufficientStats of whole sequences (sequences_table), in one recursion."""
    return statistics_between(None, None, params.log_b(table), params, False, table, workspace=workspace,
                              lengths=lengths)[0]


def sequences_stats_task(refs: list[ChunkRef], params: Params):
    """The SufficientStats of chunks that are whole sequences (short contigs)."""
    return sequences_stats(*sequences_table(refs), params)


def chunk_data(ref: ChunkRef, params: Params, verify: bool = True) -> ChunkData:
    """Read a chunk (checked against its digests unless ``verify`` is False) and compute its
    kept bins' log-emissions (emission cost: samples x states per bin)."""
    n_samples = len(ref.columns)
    if ref.n_bins * n_samples <= IN_MEMORY_CELLS:
        rows, meth, cov = kept_counts(ref, verify)
        table = EmissionTable(meth, cov)
        return ChunkData(ref, rows, params.log_b(table), table, (meth, cov))
    rows = ref.covered_rows()
    log_b = np.zeros((rows.size, params.methylation.shape[0]))
    for k in range(n_samples):  # each sample's terms added in place: one pass over log_b each
        meth, cov = ref.read([k], verify)
        params.log_b(EmissionTable(meth[rows], cov[rows]), [k], out=log_b, add=True)
    return ChunkData(ref, rows, log_b, None, None)


def _chunk_stats(previous, following, ref: ChunkRef, params: Params, want_posteriors: bool = False):
    """(statistics, posteriors, ChunkData) of one chunk between its incoming messages
    (``previous``: the forward chain's (loglik, message) before it, or None)."""
    data = chunk_data(ref, params)
    stats, post = statistics_between(None if previous is None else previous[1], following, data.log_b, params,
                                     want_posteriors, data.table, data.statistics)
    return stats, post, data


def forward_task(previous, ref: ChunkRef, params: Params, verify: bool = True):
    """The forward chain's (loglik, message) after the chunk, from the one before it
    (``verify`` False: a task of the same graph checks the chunk's counts)."""
    return forward_step(None if previous is None else previous[1], chunk_data(ref, params, verify).log_b, params)


def backward_task(following, ref: ChunkRef, params: Params, verify: bool = True):
    """The backward chain's message before the chunk, from the one after it."""
    return backward_step(following, chunk_data(ref, params, verify).log_b, params)


def stats_task(previous, following, ref: ChunkRef, params: Params):
    """The chunk's SufficientStats between its incoming messages."""
    return _chunk_stats(previous, following, ref, params)[0]


def posterior_task(previous, following, ref: ChunkRef, params: Params, on_chunk, *args):
    """``on_chunk(posteriors, ChunkData, *args)`` of the chunk's posteriors (kept bins x
    states) between its incoming messages."""
    _, post, data = _chunk_stats(previous, following, ref, params, want_posteriors=True)
    return on_chunk(post, data, *args)
