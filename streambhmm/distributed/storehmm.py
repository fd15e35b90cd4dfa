"""EM, scoring and decoding of a counts store on Dask, with exact messages between chunks.

Each chromosome is one sequence of its kept bins (some selected sample covered), cut into
the store's chunks. Chunk k needs two messages from the rest of its chromosome:

- forward: the filtered state distribution at the last kept bin before the chunk, passed
  along by a chain of ``forward`` tasks (each also yields log P(chunk | earlier bins));
- backward: P(later bins | state of the chunk's last kept bin), passed back by a chain of
  ``backward`` tasks.

With both, a chunk's forward-backward gives exactly the statistics, posteriors and
log-likelihood of the whole-chromosome recursion, so results do not depend on the chunk
size. A pooled model (one sample wide, shared by the samples) runs each sample as its own
sequences and sums what they give. The chains are sequential within a chromosome
(chromosomes run in parallel); the statistics tasks are independent. Every task holds one
chunk, so memory stays bounded.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass

import dask
import numpy as np
import zarr

from ..learn import hmm_kernels as _hmm_kernels
from ..learn.emissions import EmissionTable
from ..learn.hmm import BinomialHMM, SufficientStats, has_converged, run_em
from ..moments.pipeline import DEFAULT_SPLIT_EVERY, plan_chunks, select_samples, tree_reduce
from ..learn.states import item_rgb, state_colours, state_labels
from ..io.outputs import replacing
from ..io.store import ChunkRef, CountsStore, locked, mark_changed, open_store
from ..io.tasks import Waiter


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

    def log_b(self, table: EmissionTable, columns=None) -> np.ndarray:
        """The emissions of a table of counts (of the samples ``columns``, default all)."""
        columns = slice(None) if columns is None else columns
        return table.log_b(self.methylation[:, columns], None if self.dispersion is None else self.dispersion[:, columns])


# -- one segment of kept bins ---------------------------------------------------------------
def segment_forward(previous, meth, cov, params: Params):
    """(log P(segment | earlier bins), forward message after the segment).

    ``previous`` is the forward message before the segment, None at a chromosome's start.
    An empty segment passes the message through."""
    return _forward(previous, params.log_b(EmissionTable(meth, cov)), params)


def segment_backward(following, meth, cov, params: Params):
    """The backward message into the bin before the segment (None: nothing follows)."""
    return _backward(following, params.log_b(EmissionTable(meth, cov)), params)


def segment_stats(previous, following, meth, cov, params: Params, want_posteriors: bool = False):
    """Exact sufficient statistics of one segment (and its posteriors, shape (n, m))."""
    table = EmissionTable(meth, cov)
    return _stats(previous, following, params.log_b(table), params, want_posteriors, table)


def _forward(previous, log_b: np.ndarray, params: Params):
    if log_b.shape[0] == 0:
        return 0.0, previous
    start = params.startprob if previous is None else previous @ params.transmat
    return _hmm_kernels.forward_message(log_b, start, params.transmat)


def _backward(following, log_b: np.ndarray, params: Params):
    if log_b.shape[0] == 0:
        return following
    final = np.ones(params.transmat.shape[0]) if following is None else following
    return _hmm_kernels.backward_message(log_b, params.transmat, final)


def _stats(previous, following, log_b: np.ndarray, params: Params, want_posteriors: bool,
           table: EmissionTable | None = None, statistics_of=None):
    """The segment's statistics from its log-emissions. The recursion counts the
    posterior weight of each pair of ``table`` (the segment's counts) itself; when the counts
    of all samples would not fit in memory, ``statistics_of(posteriors, keep_pairs)`` gives
    the posterior-weighted sums ((m, S) each) and, for a beta-binomial model, the pairs."""
    m, n_samples = params.methylation.shape
    if log_b.shape[0] == 0:
        zero = SufficientStats(0.0, np.zeros(m), np.zeros((m, m)), np.zeros((m, n_samples)),
                               np.zeros((m, n_samples)))
        return zero, np.zeros((0, m))
    beta = params.dispersion is not None
    codes = table.codes.T if table is not None else np.zeros((log_b.shape[0], 0), np.int32)
    start = params.startprob
    if previous is not None:
        # a virtual first bin whose "emission" is the incoming forward message: the
        # kernel then counts the transition across the boundary, and adds log 1 = 0
        with np.errstate(divide="ignore"):
            log_b = np.vstack([np.log(previous)[None, :], log_b])
        codes = np.vstack([np.full((1, codes.shape[1]), -1, np.int32), codes])
        start = np.ones(m)
    final = np.ones(m) if following is None else following
    loglik, first, trans, code_weights, post = _hmm_kernels.forward_backward(
        log_b, np.array([log_b.shape[0]]), start, params.transmat, codes, 0 if table is None else table.keys.size,
        want_posteriors or table is None, final)
    if previous is not None:
        first, post = np.zeros(m), post[1:]
    sums = table.statistics(code_weights, beta) if table is not None else statistics_of(post, beta)
    return SufficientStats(loglik, first, trans, *sums), post


# -- Dask graphs over a store -------------------------------------------------------------
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
            msum[:, k] = posteriors.T @ meth
            csum[:, k] = posteriors.T @ cov
            if keep_pairs:
                pairs += EmissionTable(meth[:, None], cov[:, None]).pair_weights(posteriors)
        return msum, csum, pairs if keep_pairs else None


def kept_counts(ref: ChunkRef) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, methylated, coverage) of a chunk's kept bins (some of its samples covered),
    all samples read together."""
    meth, cov = ref.read()
    rows = np.flatnonzero(cov.sum(axis=1) > 0)
    return rows, meth[rows], cov[rows]


def chunk_data(ref: ChunkRef, params: Params) -> ChunkData:
    """Read a chunk and compute its kept bins' log-emissions (emission cost: samples x
    states per bin)."""
    n_samples = len(ref.columns)
    if ref.n_bins * n_samples <= IN_MEMORY_CELLS:
        rows, meth, cov = kept_counts(ref)
        table = EmissionTable(meth, cov)
        return ChunkData(ref, rows, params.log_b(table), table, (meth, cov))
    kept = np.zeros(ref.n_bins, bool)
    for k in range(n_samples):
        kept |= ref.read([k], verify=False)[1][:, 0] > 0
    rows = np.flatnonzero(kept)
    log_b = np.zeros((rows.size, params.methylation.shape[0]))
    for k in range(n_samples):
        meth, cov = ref.read([k])
        log_b += params.log_b(EmissionTable(meth[rows], cov[rows]), [k])
    return ChunkData(ref, rows, log_b, None, None)


def _forward_task(previous, ref: ChunkRef, params):
    return _forward(None if previous is None else previous[1], chunk_data(ref, params).log_b, params)


def _backward_task(following, ref: ChunkRef, params):
    return _backward(following, chunk_data(ref, params).log_b, params)


def _chunk_stats(previous, following, ref: ChunkRef, params, want_posteriors: bool = False):
    """(statistics, posteriors, ChunkData) of one chunk between its incoming messages."""
    data = chunk_data(ref, params)
    stats, post = _stats(None if previous is None else previous[1], following, data.log_b, params, want_posteriors,
                         data.table, data.statistics)
    return stats, post, data


def _stats_task(previous, following, ref: ChunkRef, params):
    return _chunk_stats(previous, following, ref, params)[0]


def _add_stats(*parts: SufficientStats) -> SufficientStats:
    return sum(parts[1:], parts[0])


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


def message_graph(store: CountsStore, samples: list[str], params: Params, chromosomes=None,
                  pooled: bool = False) -> list[ChunkMessages]:
    """Forward and backward message chains of every chromosome (or of ``chromosomes``): of
    the samples together, or (``pooled``) of each sample on its own."""
    out = []
    groups = [[s] for s in samples] if pooled else [samples]
    for chrom, group in ((c, g) for g in groups for c in chromosomes or store.chromosomes):
        refs = [plan.ref for plan in plan_chunks(store, group, chromosomes=[chrom])]
        forward, backward = [None], [None]
        for ref in refs:
            forward.append(dask.delayed(_forward_task, pure=True)(forward[-1], ref, params))
        for ref in reversed(refs):
            backward.insert(0, dask.delayed(_backward_task, pure=True)(backward[0], ref, params))
        for k, ref in enumerate(refs):
            out.append(ChunkMessages(ref, forward[k], backward[k + 1], forward[k + 1]))
    return out


class LocalEStep:
    """The E-step of a small store in this process, without a Dask graph per iteration: the
    same chunk functions, chains and reduction tree as stats_graph, so the same statistics
    bitwise; each chunk is read (and verified) once, and its emission table kept for every
    iteration. The chunks' counts stay in memory: only for stores that fit (cluster.is_small)."""

    def __init__(self, store: CountsStore, samples: list[str], pooled: bool = False,
                 split_every: int = DEFAULT_SPLIT_EVERY):
        groups = [[s] for s in samples] if pooled else [samples]
        self.chains = [[plan.ref for plan in plan_chunks(store, group, chromosomes=[chrom])]
                       for group in groups for chrom in store.chromosomes]
        self.split_every = split_every
        self.cache = {}

    def _chunk(self, ref: ChunkRef):
        if ref not in self.cache:
            _, meth, cov = kept_counts(ref)
            self.cache[ref] = EmissionTable(meth, cov)
        return self.cache[ref]

    def __call__(self, params: Params) -> SufficientStats:
        parts = []
        for refs in self.chains:
            chunks = [self._chunk(ref) for ref in refs]
            log_bs = [params.log_b(table) for table in chunks]
            forward, backward = [None], [None]
            for log_b in log_bs:
                forward.append(_forward(None if forward[-1] is None else forward[-1][1], log_b, params))
            for log_b in reversed(log_bs):
                backward.insert(0, _backward(backward[0], log_b, params))
            for k, (log_b, table) in enumerate(zip(log_bs, chunks)):
                previous = forward[k]
                parts.append(_stats(None if previous is None else previous[1], backward[k + 1], log_b, params,
                                    False, table)[0])
        if not parts:
            raise ValueError("the store has no bins")
        return tree_reduce(parts, _add_stats, self.split_every)


def stats_graph(store: CountsStore, samples: list[str], params: Params,
                split_every: int = DEFAULT_SPLIT_EVERY, pooled: bool = False):
    """Delayed total SufficientStats of the store under ``params``."""
    parts = [dask.delayed(_stats_task, pure=True)(c.forward_in, c.backward_in, c.ref, params)
             for c in message_graph(store, samples, params, pooled=pooled)]
    if not parts:
        raise ValueError(f"{store.path}: the store has no bins")
    return tree_reduce(parts, dask.delayed(_add_stats, pure=True), split_every)


def score_store(store: CountsStore, hmm: BinomialHMM, client, samples=None, chromosomes=None,
                pooled: bool = False) -> dict:
    """Log-likelihood of each chromosome (binomial coefficients included), exact; pooled:
    summed over the samples."""
    samples = select_samples(store, samples)
    hmm.validate(1 if pooled else len(samples))
    params = Params.of(hmm)
    wanted = store.chromosomes if not chromosomes else list(chromosomes)
    unknown = [c for c in wanted if c not in store.chromosomes]
    if unknown:
        raise ValueError(f"{store.path}: no chromosome {', '.join(unknown)}; it has {', '.join(store.chromosomes)}")
    per_chunk = message_graph(store, samples, params, wanted, pooled)
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


def fit_store_em(store: CountsStore, hmm: BinomialHMM, client, samples=None, n_iter: int = 20,
                 rel_tol: float = 1e-7, split_every: int = DEFAULT_SPLIT_EVERY, report=None,
                 check: bool = True, pooled: bool = False) -> StoreEMResult:
    """Baum-Welch on a store from ``hmm``'s current parameters, one Dask graph per E-step
    (``client`` None: in this process, LocalEStep, for small stores).

    Stops after ``n_iter`` M-steps or when an iteration gains less than
    ``rel_tol * |loglik|``. The history holds the log-likelihood before each M-step and
    of the final parameters; ``report(iteration, loglik)`` is called after each E-step.
    With ``check`` the result is checked (BinomialHMM.check_fit); a caller comparing
    several starts checks the one it keeps. ``pooled``: one sample-wide model shared by the
    samples, each sample its own sequences, their statistics summed."""
    samples = select_samples(store, samples)
    width = 1 if pooled else len(samples)
    hmm.validate(width)
    start = time.perf_counter()
    last = []

    local = LocalEStep(store, samples, pooled, split_every) if client is None else None
    e_steps = [0]  # E-steps done: the next one's iteration, as run_em reports it

    def e_step():
        if local is not None:
            stats = local(Params.of(hmm))
        else:
            future = client.compute(stats_graph(store, samples, Params.of(hmm), split_every, pooled))
            what = f"the E-step of EM iteration {e_steps[0]} on {store.path}"
            stats = Waiter(client, [future], what).result(future)
        e_steps[0] += 1
        last[:] = [stats]
        return stats

    history = run_em(hmm, e_step, n_iter, rel_tol, report)
    hmm.n_features_in_ = width
    if check:
        hmm.check_fit()
    return StoreEMResult(hmm, history, (time.perf_counter() - start) / len(history),
                         has_converged(history, rel_tol), float(last[0].trans.sum() + last[0].start.sum()))


# -- decoding -------------------------------------------------------------------------------
POSTERIOR = "state_posterior"


@dataclass
class Runs:
    """Maximal runs of one decoded state along kept bins, in bp (0-based, half-open)."""

    start: np.ndarray
    end: np.ndarray
    state: np.ndarray
    posterior_sum: np.ndarray  # summed posterior of the run's state over its bins
    n_bins: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def columns(self) -> tuple:
        return self.start, self.end, self.state, self.posterior_sum, self.n_bins


def runs_of(position, states, posterior_of_state, bin_size: int, max_gap: int) -> Runs:
    """Cut where the state changes or where more than ``max_gap`` bp lack coverage."""
    if len(position) == 0:
        empty = np.zeros(0, np.int64)
        return Runs(empty, empty, empty, np.zeros(0), empty)
    cut = np.flatnonzero((np.diff(states) != 0) | (np.diff(position) - bin_size > max_gap)) + 1
    first = np.concatenate([[0], cut])
    last = np.concatenate([cut, [len(position)]]) - 1
    return Runs(position[first], position[last] + bin_size, states[first],
                np.add.reduceat(posterior_of_state, first), last - first + 1)


def join_runs(left: Runs, right: Runs, bin_size: int, max_gap: int) -> Runs:
    """Concatenate consecutive runs of one chromosome, merging across the seam."""
    if len(left) and len(right) and left.state[-1] == right.state[0] and \
            right.start[0] - left.end[-1] <= max_gap:
        left.end[-1] = right.end[0]
        left.posterior_sum[-1] += right.posterior_sum[0]
        left.n_bins[-1] += right.n_bins[0]
        right = Runs(*(a[1:] for a in right.columns()))
    return Runs(*(np.concatenate([a, b]) for a, b in zip(left.columns(), right.columns())))


def _decode_task(previous, following, ref: ChunkRef, params, max_gap, posterior_array):
    _, post, data = _chunk_stats(previous, following, ref, params, want_posteriors=True)
    rows = data.rows
    if posterior_array is not None:
        block = np.full((ref.n_bins, params.transmat.shape[0]), np.nan, np.float32)
        block[rows] = post
        zarr.open_array(posterior_array, mode="r+")[ref.start:ref.stop] = block
    states = post.argmax(axis=1)
    return runs_of(ref.positions(rows), states, post[np.arange(len(states)), states], ref.bin_size, max_gap)


def decode_graph(store: CountsStore, samples: list[str], params: Params, max_gap: int,
                 posterior_arrays: dict | None = None) -> dict:
    """Per chromosome, the delayed Runs of each chunk (posterior decoding: each kept bin
    gets its most probable state); optionally each task writes its posteriors into
    ``posterior_arrays[chrom]`` (a Zarr array path)."""
    graph = {chrom: [] for chrom in store.chromosomes}
    for c in message_graph(store, samples, params):
        target = posterior_arrays[c.chrom] if posterior_arrays else None
        graph[c.chrom].append(dask.delayed(_decode_task, pure=True)(
            c.forward_in, c.backward_in, c.ref, params, max_gap, target))
    return graph


@dataclass
class DecodeReport:
    n_segments: int
    posterior_written: bool
    chromosome_state_bins: dict  # chrom -> (m,) kept bins decoded to each state

    @property
    def state_bins(self) -> np.ndarray:
        """Kept bins decoded to each state, over all chromosomes."""
        return np.sum(list(self.chromosome_state_bins.values()), axis=0)

    @property
    def n_bins(self) -> int:
        return int(self.state_bins.sum())


def decode_store(store: CountsStore, hmm: BinomialHMM, client, output, samples=None, max_gap: int = 1000,
                 posteriors: bool = False, progress=None, labels=None, track: str = "streambhmm states",
                 lock: bool = True) -> DecodeReport:
    """Write the segmentation of ``store`` as BED9 (atomically; ``labels`` name the states,
    states.state_labels by default), and with ``posteriors`` the per-bin ``state_posterior``
    (position x state, NaN where the samples have no coverage) into each chromosome group,
    swapped in only when every chunk has been written. The store's lock is held throughout,
    exclusive with ``posteriors``, else shared, so a store on read-only media can be decoded
    (``lock=False``: the caller holds it, and opened ``store`` under it)."""
    samples = select_samples(store, samples)
    hmm.validate(len(samples))
    labels = labels or state_labels(hmm.methylation_, samples if hmm.methylation_.shape[1] > 1 else ["pooled"])
    style = SegmentStyle(labels, [item_rgb(c) for c in state_colours(hmm.methylation_)])
    params = Params.of(hmm)
    m = hmm.n_components
    tag = f"{POSTERIOR}_tmp_{uuid.uuid4().hex[:12]}"
    with locked(store.path, shared=not posteriors) if lock else contextlib.nullcontext():
        if lock:
            store = open_store(store.path)  # as it is now: a commit may have landed since it was opened
        for leftover in store.path.glob(f"*/{POSTERIOR}_tmp_*") if posteriors else ():
            leftover.rmtree()  # from a killed run
        arrays = _create_posterior_arrays(store, m, tag, samples) if posteriors else None
        graph = decode_graph(store, samples, params, max_gap, arrays)
        flat = [(chrom, task) for chrom, tasks in graph.items() for task in tasks]
        futures = client.compute([task for _, task in flat])
        waiter = Waiter(client, futures, f"the decoding of {store.path}")
        per_chrom = {chrom: np.zeros(m, np.int64) for chrom in graph}
        n_segments = 0
        try:
            with replacing(output) as bed:
                bed.write(track_line(track, f"states of {','.join(samples)}"))
                chrom_runs, current = None, None
                for done, ((chrom, _), future) in enumerate(zip(flat, futures), 1):
                    runs = waiter.result(future)
                    future.release()
                    if chrom != current:
                        n_segments += _write_runs(bed, current, chrom_runs, style)
                        chrom_runs, current = runs, chrom
                    else:
                        chrom_runs = join_runs(chrom_runs, runs, store.bin_size, max_gap)
                    np.add.at(per_chrom[chrom], runs.state, runs.n_bins)
                    if progress is not None:
                        progress(done, len(flat))
                n_segments += _write_runs(bed, current, chrom_runs, style)
                bed.flush()  # a full disk fails here, before the posteriors are swapped in
                if arrays:  # before the BED is renamed into place
                    for chrom in arrays:
                        target = store.path / chrom / POSTERIOR
                        if target.exists():
                            aside = store.path / chrom / f"{tag}_old"
                            target.rename(aside)
                            aside.rmtree()
                        (store.path / chrom / tag).rename(target)
                    mark_changed(store.path)  # re-consolidate so plain xarray sees the variable
        finally:
            for leftover in store.path.glob(f"*/{tag}"):
                leftover.rmtree()
    return DecodeReport(n_segments, bool(arrays), per_chrom)


def _create_posterior_arrays(store: CountsStore, m: int, name: str, samples: list[str]) -> dict:
    arrays = {}
    for chrom in store.chromosomes:
        # the counts' chunks, so the tasks' writes align
        zarr.create_array((store.path / chrom).url, name=name, shape=(store.n_bins(chrom), m),
                          chunks=(store.chunk_size, m), dtype="float32", fill_value=np.nan,
                          dimension_names=("position", "state"),
                          attributes={"description": "posterior probability of each state (NaN: no coverage "
                                                     "in the model's samples)", "samples": samples})
        arrays[chrom] = (store.path.absolute() / chrom / name).url  # for tasks, in the workers' directories
    return arrays


@dataclass(frozen=True)
class SegmentStyle:
    """How the states appear in a BED: their names and itemRgb colours."""

    labels: list
    colours: list


def track_line(name: str, description: str) -> str:
    """A BED track line: genome browsers colour the items by itemRgb."""
    clean = [v.replace('"', "'").replace("\n", " ") for v in (name, description)]
    return f'track name="{clean[0]}" description="{clean[1]}" itemRgb="On"\n'


# Strand of every BED line: CpG methylation is strand-symmetric, and BED tools' -s skips '.'
# (bedtools merge -s, intersect -s return nothing), so '+', as DNMTools writes its regions.
BED_STRAND = "+"


def _write_runs(bed, chrom, runs: Runs | None, style: SegmentStyle) -> int:
    """BED9 lines: the state's label as the name, the mean posterior of the run's state as
    the score (an integer in 0..1000), BED_STRAND, the whole run thick, the state's colour."""
    if runs is None or not len(runs):
        return 0
    score = np.clip(np.rint(1000 * runs.posterior_sum / runs.n_bins), 0, 1000).astype(np.int64)
    for start, end, state, s in zip(runs.start, runs.end, runs.state, score):
        bed.write(f"{chrom}\t{start}\t{end}\t{style.labels[state]}\t{s}\t{BED_STRAND}\t{start}\t{end}\t"
                  f"{style.colours[state]}\n")
    return len(runs)
