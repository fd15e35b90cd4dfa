"""Posterior decoding of a counts store: each kept bin gets its most probable state, runs of
one state are joined across the chunks' seams and written as BED9, and optionally the
per-bin posteriors are written into the store (``state_posterior``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..learn.hmm import BinomialHMM
from ..learn.states import item_rgb, state_colours, state_labels
from ..moments.pipeline import select_samples
from ..io.bed import SegmentStyle, bed9_line, bed_order, track_head, track_line
from ..io.outputs import replacing
from ..io.storage import put_in_place
from ..io.store import CountsStore, mark_changed
from .chains import map_posteriors
from .messages import Params

POSTERIOR = "state_posterior"
SEGMENTS_HEAD = track_head(rb'states of [^"\n]*')  # how decode_store's BEDs begin


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


def _chunk_runs(post, data, max_gap: int, posterior_arrays: dict | None) -> Runs:
    """A chunk's runs (in a task, map_posteriors); its posteriors written into the Zarr array
    of its chromosome in ``posterior_arrays`` (paths) when given."""
    ref, rows = data.ref, data.rows
    if posterior_arrays is not None:
        import zarr

        block = np.full((ref.n_bins, post.shape[1]), np.nan, np.float32)
        block[rows] = post
        zarr.open_array(posterior_arrays[ref.chrom], mode="r+")[ref.start:ref.stop] = block
    states = post.argmax(axis=1)
    return runs_of(ref.positions(rows), states, post[np.arange(len(states)), states], ref.bin_size, max_gap)


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
                 posteriors: bool = False, progress=None, labels=None,
                 track: str = "streambhmm states") -> DecodeReport:
    """Write the segmentation of ``store`` as BED9 (atomically; ``labels`` name the states,
    states.state_labels by default), and with ``posteriors`` the per-bin ``state_posterior``
    (position x state, NaN where the samples have no coverage) into each chromosome group,
    swapped in only when every chunk has been written. The caller holds the store's lock,
    exclusive with ``posteriors``, else shared (so a store on read-only media can be
    decoded), and opened ``store`` under it (cluster.store_session)."""
    samples = select_samples(store, samples)
    hmm.validate(len(samples))
    labels = labels or state_labels(hmm.methylation_, samples if hmm.methylation_.shape[1] > 1 else ["pooled"])
    style = SegmentStyle(labels, [item_rgb(c) for c in state_colours(hmm.methylation_)])
    tag = f"{POSTERIOR}_tmp_{uuid.uuid4().hex[:12]}"
    for leftover in store.path.glob(f"*/{POSTERIOR}_tmp_*") if posteriors else ():
        leftover.rmtree()  # from a killed run
    try:
        arrays = _create_posterior_arrays(store, hmm.n_components, tag, samples) if posteriors else None
        chunks = map_posteriors(store, samples, Params.of(hmm), client, _chunk_runs, (max_gap, arrays),
                                f"the decoding of {store.path}", progress, bed_order(store.chromosomes))
        per_chrom = {chrom: np.zeros(hmm.n_components, np.int64) for chrom in store.chromosomes}
        with replacing(output) as bed:
            bed.write(track_line(track, f"states of {','.join(samples)}"))
            n_segments = _write_segments(bed, chunks, per_chrom, style, store.bin_size, max_gap)
            bed.flush()  # a full disk fails here, before the posteriors are swapped in
            if arrays:  # before the BED is renamed into place
                _swap_in(store, arrays, tag)
    finally:
        for leftover in store.path.glob(f"*/{tag}"):
            leftover.rmtree()
    return DecodeReport(n_segments, bool(arrays), per_chrom)


def _write_segments(bed, chunks, per_chrom: dict, style: SegmentStyle, bin_size: int, max_gap: int) -> int:
    """Write the runs of the ``chunks`` (map_posteriors), joined at the seams, each
    chromosome's once complete; count each chromosome's bins per state; the segments written."""
    n_segments, chrom_runs, current = 0, None, None
    for ref, runs in chunks:
        if ref.chrom != current:
            n_segments += _write_runs(bed, current, chrom_runs, style)
            chrom_runs, current = runs, ref.chrom
        else:
            chrom_runs = join_runs(chrom_runs, runs, bin_size, max_gap)
        np.add.at(per_chrom[ref.chrom], runs.state, runs.n_bins)
    return n_segments + _write_runs(bed, current, chrom_runs, style)


def _write_runs(bed, chrom, runs: Runs | None, style: SegmentStyle) -> int:
    """BED9 lines: the state's label as the name, the mean posterior of the run's state as
    the score (an integer in 0..1000), the state's colour."""
    if runs is None or not len(runs):
        return 0
    score = np.clip(np.rint(1000 * runs.posterior_sum / runs.n_bins), 0, 1000).astype(np.int64)
    for start, end, state, s in zip(runs.start, runs.end, runs.state, score):
        bed.write(bed9_line(chrom, start, end, style.labels[state], s, style.colours[state]))
    return len(runs)


def _create_posterior_arrays(store: CountsStore, m: int, name: str, samples: list[str]) -> dict:
    import zarr

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


def _swap_in(store: CountsStore, arrays: dict, tag: str) -> None:
    """Put the complete temporary arrays ``tag`` in place of each chromosome's posteriors."""
    for chrom in arrays:
        target = store.path / chrom / POSTERIOR
        put_in_place(store.path / chrom / tag, target, replace=True, aside=store.path / chrom / f"{tag}_old")
    mark_changed(store.path)  # re-consolidate so plain xarray sees the variable
