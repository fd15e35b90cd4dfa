"""What ``streambhmm fit`` fits: its methods and their emissions, and the moments of a counts
store or a moment store (the one-pass fits, the held-out criterion and the recommended number
of states are in-memory maths: streambhmm.learn.selection).

Methods (the model JSON's ``method``):
    refined     one pass: the moments (and histograms) of the data, FTD's estimate and other
                starts refined on them (streambhmm.learn.refine); never reads the counts twice
    ftd         one pass: the paper's tensor decomposition alone
    em          Baum-Welch on the counts store from random starts, the best of --em-starts
    refined-em  EM from the refined fit
    ftd-em      EM from FTD's estimate
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..moments.features import DEFAULT_PROJECTION_DIM, projection_for

if TYPE_CHECKING:  # the command line imports this module to start: keep it light
    from ..moments.blocks import BlockTable
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
