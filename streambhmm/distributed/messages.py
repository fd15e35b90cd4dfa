"""The exact messages of one segment of kept bins: the parameters a task holds, the forward
and backward messages across a segment, and its statistics between them.

Each chromosome is one sequence of its kept bins (some selected sample covered), cut into
the store's chunks. Chunk k needs two messages from the rest of its chromosome:

- forward: the filtered state distribution at the last kept bin before the chunk, passed
  along by a chain of ``forward`` tasks (each also yields log P(chunk | earlier bins));
- backward: P(later bins | state of the chunk's last kept bin), passed back by a chain of
  ``backward`` tasks.

With both, a chunk's forward-backward gives exactly the statistics, posteriors and
log-likelihood of the whole-chromosome recursion, so results do not depend on the chunk
size. A pooled model (one sample wide, shared by the samples) runs each sample as its own
sequences and sums what they give.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..learn import hmm_kernels
from ..learn.emissions import EmissionTable
from ..learn.hmm import BinomialHMM, SufficientStats


@dataclass(frozen=True)
class Params:
    """The HMM parameters a task needs (small, shipped inside the graph)."""

    startprob: np.ndarray
    transmat: np.ndarray
    methylation: np.ndarray
    dispersion: np.ndarray | None = None  # the beta-binomial's overdispersion (m, S)

    @classmethod
    def of(cls, hmm: BinomialHMM) -> "Params":
        dispersion = None if hmm.dispersion is None else hmm.dispersion.copy()
        return cls(*(np.asarray(a, dtype=np.float64).copy()
                     for a in (hmm.startprob_, hmm.transmat_, hmm.methylation_)), dispersion)

    def log_b(self, table: EmissionTable, columns=None, out=None, add: bool = False) -> np.ndarray:
        """The emissions of a table of counts (of the samples ``columns``, default all), into
        ``out`` if given (an array of the right shape, reused; with ``add``, added to it)."""
        columns = slice(None) if columns is None else columns
        return table.log_b(self.methylation[:, columns], None if self.dispersion is None else self.dispersion[:, columns],
                           out, add)


def forward_step(previous, log_b: np.ndarray, params: Params):
    """(log P(segment | earlier bins), forward message after the segment) from the
    segment's log-emissions; ``previous``: the message before it, None at a chromosome's
    start. An empty segment passes the message through."""
    if log_b.shape[0] == 0:
        return 0.0, previous
    start = params.startprob if previous is None else previous @ params.transmat
    return hmm_kernels.forward_message(log_b, start, params.transmat)


def backward_step(following, log_b: np.ndarray, params: Params):
    """The backward message into the bin before the segment (``following`` None: nothing
    follows)."""
    if log_b.shape[0] == 0:
        return following
    final = np.ones(params.transmat.shape[0]) if following is None else following
    return hmm_kernels.backward_message(log_b, params.transmat, final)


def statistics_between(previous, following, log_b: np.ndarray, params: Params, want_posteriors: bool,
                       table: EmissionTable | None = None, statistics_of=None, workspace=None, lengths=None):
    """The segment's statistics from its log-emissions. The recursion counts the
    posterior weight of each pair of ``table`` (the segment's counts) itself; when the counts
    of all samples would not fit in memory, ``statistics_of(posteriors, keep_pairs)`` gives
    the posterior-weighted sums ((m, S) each) and, for a beta-binomial model, the pairs.
    ``workspace`` (hmm_kernels.Workspace) lends the recursion its buffers (the posteriors
    returned are then its own). ``lengths``: the rows are whole sequences of these lengths
    (short contigs summed at once; no messages then)."""
    m, n_samples = params.methylation.shape
    if log_b.shape[0] == 0:
        zero = SufficientStats(0.0, np.zeros(m), np.zeros((m, m)), np.zeros((m, n_samples)),
                               np.zeros((m, n_samples)))
        return zero, np.zeros((0, m))
    beta = params.dispersion is not None
    codes = table.codes if table is not None else np.zeros((0, log_b.shape[0]), np.int32)
    start = params.startprob
    if previous is not None:
        # a virtual first bin whose "emission" is the incoming forward message: the
        # kernel then counts the transition across the boundary, and adds log 1 = 0
        with np.errstate(divide="ignore"):
            log_b = np.vstack([np.log(previous)[None, :], log_b])
        codes = np.hstack([np.full((codes.shape[0], 1), -1, np.int32), codes])
        start = np.ones(m)
    final = np.ones(m) if following is None else following
    lengths = np.array([log_b.shape[0]]) if lengths is None else np.asarray(lengths, np.int64)
    loglik, first, trans, code_weights, post = hmm_kernels.forward_backward(
        log_b, lengths, start, params.transmat, codes, 0 if table is None else table.keys.size,
        want_posteriors or table is None, final, workspace)
    if previous is not None:
        first, post = np.zeros(m), post[1:]
    sums = table.statistics(code_weights, beta) if table is not None else statistics_of(post, beta)
    return SufficientStats(loglik, first, trans, *sums), post


def add_stats(*parts: SufficientStats) -> SufficientStats:
    return sum(parts[1:], parts[0])
