"""Moments of a counts store on Dask: a task per chunk, then a tree reduction.

Joint (the default): each chromosome is one sequence of the bins where some selected
sample has coverage, each bin a vector of the samples' counts. Pooled: each sample's bins
with coverage are a sequence of their own, and the sequences' moments (one sample wide)
are summed: one set of states shared by all samples, at a cost linear in their number.
The task for chunk i sums the triples whose last bin lies in chunk i, so it needs the
last two kept bins before the chunk (the halo: their counts and positions; one halo per
sample when pooled). The halos come from the store's chunk summaries (each sample's last
two covered bins of each chunk), so the plan is made before any counts are read and the
tasks are independent; a halo never crosses into another chromosome. Each task reads its
chunk itself (store.ChunkRef), one sample at a time when pooled. Besides the Moments,
each task keeps the statistics of the genomic blocks its triples fall in
(streambhmm.moments.blocks). Without them, consecutive chunks of less than a chunk's worth
of bins in all (an assembly's short contigs) are one task, their sequences encoded together:
a contig then costs its reads, not a pass of every kernel. The partial sums are added in a
tree with fan-in ``split_every``.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace

import dask
import numpy as np

from .blocks import BlockStats, ProjectedBlocks, block_stats, combine_blocks
from .features import DEFAULT_N_BINS, encode
from .spec import DEFAULT_BLOCK_SIZE, FeatureSpec, Grouping
from .sums import Moments, moments_from_features, projected_moments
from ..io.store import COVERED, LAST, PREVIOUS, ChunkRef, CountsStore, covered_bins

DEFAULT_SPLIT_EVERY = 8
MAX_BATCH = 512  # chunks one task takes together (batched_plans): a task's objects per chunk stay few


def _kept(methylated: np.ndarray, coverage: np.ndarray, positions=None):
    """Rows where some sample has coverage, as int64 (and their positions, when given)."""
    keep = covered_bins(coverage)
    kept = methylated[keep].astype(np.int64), coverage[keep].astype(np.int64)
    return kept if positions is None else (*kept, np.asarray(positions)[keep].astype(np.int64))


def empty_halo(n_samples: int):
    """The halo before a chromosome's first chunk: no bins of ``n_samples`` samples."""
    return np.zeros((0, n_samples), np.int64), np.zeros((0, n_samples), np.int64), np.zeros(0, np.int64)


def kept_sequences(halos: list, methylated, coverage, positions) -> list[tuple]:
    """The chunk's sequences, each (halo, methylated, coverage, positions) of its kept bins,
    one per halo: all samples after one halo, else sample k after ``halos[k]`` (a pooled
    grouping's; with one sample both are the same)."""
    if len(halos) == 1:
        return [(halos[0], *_kept(methylated, coverage, positions))]
    return [(before, *_kept(methylated[:, [s]], coverage[:, [s]], positions)) for s, before in enumerate(halos)]


@dataclass(frozen=True)
class ChunkPartial:
    """A chunk's triple sums and its blocks' statistics (None when not asked for)."""

    moments: Moments
    blocks: BlockStats | None


def chunk_partial(halo, methylated, coverage, positions, n_bins: int, chromosome: str = "",
                  block_size: int | None = DEFAULT_BLOCK_SIZE) -> ChunkPartial:
    """Triple sums of one chunk of the samples jointly, its halo prepended (every triple ending in the chunk)."""
    return sequences_partial(kept_sequences([halo], methylated, coverage, positions), n_bins, chromosome, block_size)


def sequences_partial(sequences, n_bins: int, chromosome: str, block_size: int | None,
                      budget: int | None = None) -> ChunkPartial:
    """The triple sums of a chunk's sequences (an iterable: taken one at a time), encoded
    together up to ``budget`` rows (default: one at a time) so that many short sequences
    cost one pass of the kernels, not one each."""
    parts = [joined_partial(group, n_bins, chromosome, block_size)
             for group in consecutive_groups(sequences, _sequence_rows, budget or 1)]
    blocks = None if block_size is None else combine_blocks([p.blocks for p in parts])
    return ChunkPartial(add_moments(*(p.moments for p in parts)), blocks)


def consecutive_groups(items, size, budget: int, most: int | None = None):
    """Lists of consecutive ``items`` whose ``size(item)`` add up to at most ``budget`` (an
    item of more alone), and of at most ``most`` items; taken one at a time, so memory holds
    one group whatever their number."""
    group, total = [], 0
    for item in items:
        n = size(item)
        if group and (total + n > budget or len(group) == most):
            yield group
            group, total = [], 0
        group.append(item)
        total += n
    if group:
        yield group


def _sequence_rows(sequence) -> int:
    """The rows of a sequence (halo, methylated, coverage, positions): its halo's and its own."""
    return len(sequence[0][0]) + len(sequence[1])


def joined_partial(sequences: list, n_bins: int, chromosome: str, block_size: int | None) -> ChunkPartial:
    """The partial of sequences of rows already reduced to the kept bins, each (halo,
    methylated, coverage, positions), encoded as one table; no triple crosses from one to the
    next (without block statistics when ``block_size`` is None)."""
    joined = [[np.concatenate([before, now]) for before, now in zip(halo, rest)] for halo, *rest in sequences]
    meth, cov, positions = (np.concatenate(part) for part in zip(*joined))
    lengths = np.array([len(m) for m, _, _ in joined], np.int64)
    features = encode(meth, cov, n_bins)
    moments = (moments_from_features(features, lengths) if (lengths > 2).any()
               else Moments.zeros(meth.shape[1], n_bins))
    if block_size is None:
        return ChunkPartial(moments, None)
    ends = np.cumsum(lengths)
    return ChunkPartial(moments, combine_blocks([
        block_stats(chromosome, replace(features, codes=features.codes[end - n:end]), positions[end - n:end],
                    block_size) for n, end in zip(lengths, ends)]))


def add_moments(*parts: Moments) -> Moments:
    return sum(parts[1:], parts[0])


def tree_reduce(items, combine, split_every: int = DEFAULT_SPLIT_EVERY):
    """Combine ``items`` (any iterable, taken one at a time) in a fixed tree with fan-in
    ``split_every``: each level's consecutive groups of ``split_every``, the last group
    shorter, until one is left (the same tree for delayed and in-memory values, so totals
    agree bitwise). A group is combined as soon as it is full, so memory holds fewer than
    ``split_every`` items per level, not all of them (a moment store's thousands of partials)."""
    if split_every < 2:
        raise ValueError(f"split_every must be >= 2, got {split_every}")
    levels = [[]]
    for item in items:
        levels[0].append(item)
        for k in range(len(levels)):
            if len(levels[k]) < split_every:
                break
            if k + 1 == len(levels):
                levels.append([])
            levels[k + 1].append(combine(*levels[k]))
            levels[k] = []
    for k in range(len(levels) - 1):  # each level's last, shorter group, from the bottom up
        if levels[k]:
            levels[k + 1].append(combine(*levels[k]) if len(levels[k]) > 1 else levels[k][0])
    top = levels[-1]  # fewer than split_every items, and the group below: at most split_every
    if len(top) > 1:
        top = [combine(*top)]
    return top[0]  # IndexError for no items, as before


def tree_sum(items: list, split_every: int = DEFAULT_SPLIT_EVERY):
    """Balanced tree of delayed additions of Moments."""
    return tree_reduce(items, dask.delayed(add_moments, pure=True), split_every)


def select_samples(store: CountsStore, samples=None) -> list[str]:
    if not samples:
        return store.samples
    unknown = [s for s in samples if s not in store.samples]
    if unknown:
        raise ValueError(f"unknown sample(s) {', '.join(unknown)}; the store has {', '.join(store.samples)}")
    if len(set(samples)) != len(samples):
        raise ValueError(f"sample listed twice in {','.join(samples)}")
    return list(samples)


def select_grouping(store: CountsStore, samples=None, pooled: bool = False) -> Grouping:
    """The samples chosen (:func:`select_samples`), grouped into sequences: ``samples`` may be
    a Grouping (its samples checked), else they are taken jointly or ``pooled``."""
    if isinstance(samples, Grouping):
        return Grouping(select_samples(store, list(samples.samples)), samples.pooled)
    return Grouping(select_samples(store, samples), pooled)


@dataclass(frozen=True, eq=False)
class PlannedChunk:
    """A chunk to process: where to read it, and the halo before each of its sequences."""

    ref: ChunkRef
    halos: list  # of (methylated (<=2, S), coverage, positions): one, or one per sample when pooled


def first_halos(grouping: Grouping) -> list:
    """The halos before a chromosome's first chunk, one per sequence of ``grouping``."""
    return [empty_halo(len(group)) for group in grouping.groups]


def next_halos(halos: list, ref: ChunkRef, grouping: Grouping) -> list:
    """The halo after ``ref``'s chunk, from its chunk summaries: each sample's last two covered
    bins. Jointly, the last two kept bins are the last two of all samples' last two, and a
    sample's counts there are among its own last two (it has no coverage in between)."""
    tails = [_column_tail(ref.summary[k], ref.bin_size) for k in range(len(ref.columns))]
    if grouping.pooled:
        return [tuple(np.concatenate([before, now])[-2:] for before, now in zip(h, tail))
                for h, tail in zip(halos, tails)]
    positions = np.unique(np.concatenate([tail[2] for tail in tails]))[-2:]
    meth = np.zeros((positions.size, len(tails)), np.int64)
    cov = np.zeros_like(meth)
    for k, (m, c, pos) in enumerate(tails):
        for i, p in enumerate(pos):
            at = np.searchsorted(positions, p)
            if at < positions.size and positions[at] == p:
                meth[at, k], cov[at, k] = m[i, 0], c[i, 0]
    return [tuple(np.concatenate([before, now])[-2:] for before, now in zip(halos[0], (meth, cov, positions)))]


def _column_tail(summary: np.ndarray, bin_size: int):
    """(methylated (k, 1), coverage (k, 1), positions (k,)) of one column's last k <= 2
    covered bins in a chunk, in order."""
    k = min(int(summary[COVERED]), 2)
    fields = [summary[PREVIOUS], summary[LAST]][2 - k:]
    return (np.array([[f[1]] for f in fields], np.int64).reshape(k, 1),
            np.array([[f[2]] for f in fields], np.int64).reshape(k, 1),
            np.array([f[0] * bin_size for f in fields], np.int64))


def plan_chunks(store: CountsStore, grouping, chromosomes=None) -> list[PlannedChunk]:
    """The chunks with coverage in the samples of ``grouping`` (a Grouping, or samples taken
    jointly), in chromosome and chunk order, each with its halos."""
    grouping = Grouping.of(grouping)
    plans = []
    for chrom in chromosomes or store.chromosomes:
        halos = first_halos(grouping)
        for ref in store.chunk_refs(chrom, list(grouping.samples)):
            plans.append(PlannedChunk(ref, halos))
            halos = next_halos(halos, ref, grouping)
    return plans


def plan_partial(plan: PlannedChunk, spec: FeatureSpec, with_blocks: bool = True) -> ChunkPartial:
    """The partial of one planned chunk of the resolved ``spec``, read from the store (pooled
    or projected: one sample at a time); without block statistics unless ``with_blocks``."""
    block_size = spec.block_size if with_blocks else None
    if spec.projection_dim:
        return projected_partial(plan, spec.n_bins, block_size, spec.projection_dim, spec.seed)
    return sequences_partial(plan_sequences(plan), spec.n_bins, plan.ref.chrom, block_size, budget=plan.ref.n_bins)


def plan_sequences(plan: PlannedChunk):
    """The sequences of a planned chunk, each (halo, methylated, coverage, positions) of its
    kept bins: all samples jointly after one halo, else (pooled) one sample at a time."""
    ref = plan.ref
    positions = ref.positions()
    if len(plan.halos) == 1:
        yield (plan.halos[0], *_kept(*ref.read(), positions))
        return
    for k, halo in enumerate(plan.halos):
        yield (halo, *_kept(*ref.read([k]), positions))


def batched_plans(plans: list[PlannedChunk], budget: int) -> list[list[PlannedChunk]]:
    """Consecutive plans of at most ``budget`` bins in all (a chunk of more alone) and at most
    MAX_BATCH of them: the chunks of an assembly's many short contigs summed by one task,
    whose work is then one pass of the kernels, not one per contig. (Without the second
    bound, 20,000 contigs of a few bins in one task peaked at 1.9 GB; with it, 0.85 GB.)"""
    return list(consecutive_groups(plans, lambda plan: plan.ref.n_bins, budget, MAX_BATCH))


def plans_partial(plans: list[PlannedChunk], spec: FeatureSpec, budget: int) -> ChunkPartial:
    """The partial, without block statistics, of a batch of planned chunks (batched_plans):
    their sequences encoded together, up to ``budget`` rows at a time (the projected feature:
    chunk by chunk)."""
    if spec.projection_dim:  # a running total: each plan's Moments (K^3) go once added
        return ChunkPartial(functools.reduce(operator.add, (plan_partial(plan, spec, False).moments
                                                            for plan in plans)), None)
    sequences = (sequence for plan in plans for sequence in plan_sequences(plan))
    return sequences_partial(sequences, spec.n_bins, "", None, budget=budget)


def projected_partial(plan: PlannedChunk, n_bins: int, block_size: int | None, dim: int, seed: int) -> ChunkPartial:
    """The projected feature's partial of one planned chunk. The samples are read one at a
    time (three times: which bins are kept, their features, the ratio recovery's sums), so
    memory holds one sample's chunk and the (bins, K) feature, whatever the samples."""
    ref = plan.ref
    n_samples = len(ref.columns)
    rows = ref.covered_rows()
    halo_meth, halo_cov, halo_positions = plan.halos[0]
    verified = set()

    def column(k):
        meth, cov = ref.read([k], verify=k not in verified)
        verified.add(k)
        return (np.concatenate([halo_meth[:, k], meth[rows, 0]]), np.concatenate([halo_cov[:, k], cov[rows, 0]]))

    n_rows = halo_meth.shape[0] + rows.size
    starts = np.arange(max(n_rows - 2, 0), dtype=np.int64)
    positions = np.concatenate([halo_positions, ref.positions(rows)])
    blocks = None if block_size is None else ProjectedBlocks(ref.chrom, n_samples, n_bins, starts, positions,
                                                             block_size)
    moments, feature = projected_moments(column, n_rows, n_samples, starts, n_bins, dim, seed,
                                         on_rows=None if blocks is None else blocks.add_rows)
    return ChunkPartial(moments, None if blocks is None else blocks.finish(feature))


@dataclass(frozen=True)
class MomentsGraph:
    total: object  # dask Delayed -> Moments
    partials: list  # dask Delayed -> ChunkPartial, one per chunk (per batch of short ones without blocks), in order
    samples: list[str]
    chromosomes: list[str]
    n_chunks: int


def moments_graph(store: CountsStore, samples=None, n_bins: int = DEFAULT_N_BINS,
                  split_every: int = DEFAULT_SPLIT_EVERY, block_size: int | None = DEFAULT_BLOCK_SIZE,
                  pooled: bool = False, projection_dim: int = 0, projection_seed: int = 0) -> MomentsGraph:
    """Build (without computing) the graph of the store's moments (``pooled``: summed over
    the samples, each its own sequence; ``projection_dim`` K > 0: the projected feature;
    ``block_size`` None: no block statistics)."""
    spec = FeatureSpec.of_settings(n_bins, projection_dim, projection_seed, pooled, block_size or DEFAULT_BLOCK_SIZE)
    return spec_graph(store, spec, samples, split_every, with_blocks=block_size is not None)


def spec_graph(store: CountsStore, spec: FeatureSpec, samples=None, split_every: int = DEFAULT_SPLIT_EVERY,
               with_blocks: bool = True) -> MomentsGraph:
    """:func:`moments_graph` of a resolved feature spec."""
    grouping = select_grouping(store, samples, spec.pooled)
    samples = list(grouping.samples)
    plans = plan_chunks(store, grouping)
    if with_blocks:  # a partial's blocks are of one chromosome
        partials = [dask.delayed(plan_partial, pure=True)(plan, spec, with_blocks) for plan in plans]
    else:
        partials = [dask.delayed(plans_partial, pure=True)(batch, spec, store.chunk_size)
                    for batch in batched_plans(plans, store.chunk_size)]
    if not partials:
        total = dask.delayed(Moments.zeros)(grouping.width, spec.n_bins,
                                            projection_dim=spec.projection_dim, projection_seed=spec.seed)
    else:
        total = tree_sum([dask.delayed(operator.attrgetter("moments"), pure=True)(p) for p in partials],
                         split_every)
    # the chromosomes with reads in the samples, as a moment store's manifest lists them
    chromosomes = list(dict.fromkeys(plan.ref.chrom for plan in plans))
    return MomentsGraph(total=total, partials=partials, samples=samples, chromosomes=chromosomes,
                        n_chunks=len(partials))
