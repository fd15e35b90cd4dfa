"""The moments a fit starts from: a moment store's (no counts read) or one pass over a
counts store on Dask, with the statistics of their genomic blocks when asked for."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..io.store import CountsStore, locked, open_store
from ..moments.blocks import BlockTable
from ..moments.momentstore import is_moment_store, iter_partials, read_manifest
from ..moments.pipeline import DEFAULT_SPLIT_EVERY, add_moments, select_samples, spec_graph, tree_reduce
from ..moments.spec import FeatureSpec, Grouped, Grouping, check_block_size
from ..moments.sums import Moments
from .cluster import compute


@dataclass
class FitData(Grouped):
    """Moments to fit, where they came from, and the statistics of their genomic blocks."""

    moments: Moments
    grouping: Grouping  # the samples, and whether their moments are summed (pooled: one sample wide)
    chromosomes: list[str]
    blocks: BlockTable | None
    spec: FeatureSpec  # resolved

    @property
    def block_size(self) -> int:
        return self.spec.block_size


def load_moments(source, samples, spec: FeatureSpec, client, quiet: bool = False,
                 split_every: int = DEFAULT_SPLIT_EVERY, want_blocks: bool = False, what: str | None = None,
                 chromosomes=None) -> FitData:
    """Moments from a moment store at ``source`` (no counts are read; it has what it was
    made with, which must agree with ``spec``: Manifest.check_request) or from a counts
    store (``source`` opened, a CountsStore, or where one is: one pass on ``client`` of
    ``spec`` resolved for the samples, with progress unless ``quiet``, named ``what``); with
    ``want_blocks`` also their blocks. ``chromosomes``: those of a moment store's partials
    to sum (default: all; a counts store's are those it has, CountsStore.restricted)."""
    if chromosomes is not None:  # read more than once: an iterator would be spent by the first
        chromosomes = set(chromosomes)
    if not isinstance(source, CountsStore) and is_moment_store(source):
        with locked(source, shared=True):  # an update (`moments compute`) waits, or is waited for
            manifest = read_manifest(source)
            manifest.check_request(source, samples, spec)
            partials, manifest = iter_partials(source, chromosomes)
            blocks = []  # small: kept for every partial; its Moments are summed as they come

            def moments_of(partials):
                for partial in partials:
                    if want_blocks:
                        blocks.append(partial.blocks)
                    yield partial.moments

            summands = moments_of(partials)
            first = next(summands, None)
            if first is None:  # no partial of those chromosomes: no triples (the fit says too few)
                spec = manifest.spec.resolve(len(manifest.samples))
                moments = Moments.zeros(manifest.spec.grouping(manifest.samples).width, spec.n_bins,
                                        projection_dim=spec.projection_dim, projection_seed=spec.seed)
            else:
                moments = tree_reduce(itertools.chain([first], summands), add_moments, split_every)
        summed = manifest.chromosomes if chromosomes is None else [c for c in manifest.chromosomes if c in chromosomes]
        return FitData(moments, manifest.spec.grouping(manifest.samples), summed,
                       BlockTable(blocks) if want_blocks else None, manifest.spec)
    counts = source if isinstance(source, CountsStore) else open_store(source)
    if spec.block_size is not None:
        check_block_size(spec.block_size, counts.bin_size)
    spec = spec.resolve(len(select_samples(counts, samples)))
    # the block statistics cost more than the moments on one sample: computed only when used
    graph = spec_graph(counts, spec, samples, split_every, with_blocks=want_blocks)
    what = what or f"the moments of {counts.path}"
    grouping = spec.grouping(graph.samples)
    if want_blocks:
        partials = compute(client, graph.partials, quiet=quiet, what=what, unit="chunks")
        moments = tree_reduce([p.moments for p in partials], add_moments, split_every)
        return FitData(moments, grouping, graph.chromosomes, BlockTable([p.blocks for p in partials]), spec)
    total = compute(client, graph.total, quiet=quiet, what=what, parts=graph.partials, unit="chunks")
    return FitData(total, grouping, graph.chromosomes, None, spec)
