"""The shoulders of hypomethylated regions: an HMR's core is its run of hypomethylated bins,
and its shoulders are the covered bins beside it on the way up to the background, as
DNMTools' HMRs hold them (its two-state model puts a CpG in the foreground when it is
nearer the foreground than the background).

A region is widened, one covered bin at a time on each side, while the next bin's expected
level given its reads (expected_levels: over its states' posteriors, the mean of each
state's Beta distribution of levels updated by the bin's reads; mean over the samples) is
nearer the core's level than the background beyond it, the median expected level of the
SHOULDER_WINDOW covered bins past it; and while its expected level in every sample is below
SHOULDER_CEILING (0.5: more of its reads unmethylated than methylated, as in the
hypomethylated state, whose definition puts 92% of its mass below 0.5, in every sample). The
background is local, so an island's shoulders in a methylated background run up to about
half-way (0.45 at a background of 0.9), and those of an island inside a PMD stop near 0.3,
before the PMD. A walk stops at more than the rule's gap without coverage, and takes at most
SHOULDER_WINDOW bins. Widened regions that meet are merged. A region's bins and score stay
those of its core, its levels are its interval's reads (its cores' and its shoulders'); a
widened region whose reads average 0.5 or more in a sample is not a hypomethylated region by
its reads: its cores are kept as they were (with_shoulders, distributed.regions).

Chunks are cut anywhere, so each chunk hands on the expected levels of the covered bins
that a walk may read: those within two windows of each region's ends and of the chunk's
edges (a `Profile`); the driver widens a chromosome's regions from its chunks' profiles,
which hold every bin a walk or a window reaches, so the result does not depend on the
chunking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..learn.overdispersion import beta_parameters

SHOULDER_WINDOW = 20  # covered bins: 2 kb at full CpG density, about a DNMTools HMR's median length
SHOULDER_CEILING = 0.5


@dataclass
class Profile:
    """Some covered bins of a chromosome: their index among its covered bins, position and
    expected level."""

    index: np.ndarray  # int64, increasing
    position: np.ndarray  # int64
    level: np.ndarray  # float64: the expected level over the samples
    top: np.ndarray  # float64: the highest of the samples' expected levels
    methylated: np.ndarray  # (bins, S) int64: the bins' reads, to count a widened region's
    coverage: np.ndarray  # (bins, S) int64

    @classmethod
    def concatenate(cls, parts: list["Profile"], n_samples: int = 1) -> "Profile":
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0),
                       np.zeros((0, n_samples), np.int64), np.zeros((0, n_samples), np.int64))
        return cls(*(np.concatenate([getattr(p, f) for p in parts])
                     for f in ("index", "position", "level", "top", "methylated", "coverage")))


def chunk_profile(positions: np.ndarray, post: np.ndarray, methylation: np.ndarray, dispersion: np.ndarray | None,
                  sample_counts, n_samples: int, starts: np.ndarray, ends: np.ndarray, bin_size: int,
                  window: int = SHOULDER_WINDOW) -> Profile:
    """The bins of one chunk (its covered bins' ``positions``, state posteriors ``post`` under
    a model of ``methylation`` and ``dispersion``, and reads: ``sample_counts`` yields (sample,
    methylated, coverage) one sample at a time) that widening its regions (``starts``,
    ``ends``), or a neighbour's, may read, with their expected levels (expected_levels);
    indices within the chunk."""
    n, reach = positions.size, 2 * window + 1
    first, last = _end_rows(positions, starts, ends, bin_size)
    lo = np.r_[0, np.maximum(n - reach, 0), np.maximum(first - reach, 0), last]
    hi = np.r_[min(reach, n), n, first + 1, np.minimum(last + reach, n)]
    depth = np.zeros(n + 1, np.int64)
    np.add.at(depth, lo, 1)
    np.add.at(depth, hi, -1)
    keep = np.flatnonzero(np.cumsum(depth[:-1]) > 0)
    methylated, coverage = np.zeros((keep.size, n_samples), np.int64), np.zeros((keep.size, n_samples), np.int64)
    for k, meth, cov in sample_counts:
        methylated[:, k], coverage[:, k] = meth[keep], cov[keep]
    levels = expected_levels(post[keep], [(k, methylated[:, k], coverage[:, k]) for k in range(n_samples)],
                             methylation, dispersion)
    return Profile(keep.astype(np.int64), positions[keep].astype(np.int64), levels.mean(axis=1), levels.max(axis=1),
                   methylated, coverage)


def expected_levels(post: np.ndarray, sample_counts, methylation: np.ndarray, dispersion: np.ndarray | None
                    ) -> np.ndarray:
    """(bins, S): each bin's expected level in each sample given the data, sum_h post_h E[p |
    state h, the bin's reads]. Beta-binomial: the Beta posterior's mean (a + methylated) / (a +
    b + coverage), so a bin's own reads move it from its states' levels (2 of 10 reads
    methylated, in a state at 0.4 of overdispersion 0.2: 0.26); binomial: the states' levels."""
    levels = np.empty((post.shape[0], methylation.shape[1]))
    for k, meth, cov in sample_counts:
        if dispersion is None:
            levels[:, k] = post @ methylation[:, k]
            continue
        a, b = beta_parameters(methylation[:, k], dispersion[:, k])
        levels[:, k] = (post * (a + meth[:, None]) / (a + b + cov[:, None])).sum(axis=1)
    return levels


def widen(starts: np.ndarray, ends: np.ndarray, profile: Profile, n_covered: int, core_level: float,
          max_gap: int, bin_size: int, window: int = SHOULDER_WINDOW) -> tuple:
    """(new starts, new ends, group, shoulders): the regions of one chromosome widened over
    their shoulders; ``group[i]`` is the widened region that region i is part of (merged
    regions share one), numbered from 0; ``shoulders`` (widened regions, S) x 2: the methylated
    and covered reads of each widened region's bins outside its regions. ``n_covered`` is the
    chromosome's number of covered bins."""
    if starts.size == 0:
        none = np.zeros((0, profile.methylated.shape[1]), np.int64)
        return starts, ends, np.zeros(0, np.int64), (none, none)
    first, last = _end_rows(profile.position, starts, ends, bin_size)
    ends_in = profile.position[np.minimum(np.r_[first, last], profile.position.size - 1)]
    if (ends_in != np.r_[starts, ends - bin_size]).any():
        raise AssertionError("a region's end bins are missing from the profile")
    lo, hi = _walk(first, last, profile.index, profile.position, profile.level, profile.top, n_covered, core_level,
                   max_gap, bin_size, window)
    # merge widened regions that overlap or whose covered bins follow each other within the gap
    index, position = profile.index, profile.position
    furthest = np.maximum.accumulate(hi)  # a walk may pass a short region whole
    joins = (index[lo[1:]] <= index[furthest[:-1]] + 1) & \
        (position[lo[1:]] - position[furthest[:-1]] - bin_size <= max_gap)
    heads = np.r_[0, np.flatnonzero(~joins) + 1]
    group = np.cumsum(np.r_[True, ~joins]) - 1
    low, high = np.minimum.reduceat(lo, heads), np.maximum.reduceat(hi, heads)
    # the reads of the profile's bins outside the regions, summed over each widened region's rows
    inside = np.zeros(position.size + 1, np.int64)
    np.add.at(inside, first, 1)
    np.add.at(inside, last + 1, -1)
    outside = (np.cumsum(inside[:-1]) == 0)[:, None]
    shoulders = []
    for reads in (profile.methylated, profile.coverage):
        total = np.vstack([np.zeros((1, reads.shape[1]), np.int64), np.cumsum(reads * outside, axis=0)])
        shoulders.append(total[high + 1] - total[low])
    return position[low], position[high] + bin_size, group.astype(np.int64), tuple(shoulders)


def _end_rows(positions: np.ndarray, starts: np.ndarray, ends: np.ndarray, bin_size: int) -> tuple:
    """The rows of ``positions`` holding each region's first and last bin."""
    return np.searchsorted(positions, starts), np.searchsorted(positions, ends - bin_size)


@njit(cache=True, nogil=True)
def _walk(first, last, index, position, level, top, n_covered, core_level, max_gap, bin_size, window):
    """The profile rows each region's walks end at, left and right (see the module docstring)."""
    lo, hi = first.copy(), last.copy()
    scratch = np.empty(window)
    for r in range(first.size):
        for side in (-1, 1):
            end = first[r] if side < 0 else last[r]
            for _ in range(window):
                step = end + side
                if index[end] + side < 0 or index[end] + side >= n_covered:
                    break  # the chromosome's end
                if step < 0 or step >= index.size or index[step] != index[end] + side:
                    raise AssertionError("a bin a shoulder's walk reads is missing from the profile")
                if abs(position[step] - position[end]) - bin_size > max_gap:
                    break
                # the background: the covered bins past this one, up to a window of them
                far = min(window, n_covered - 1 - index[step]) if side > 0 else min(window, index[step])
                if far == 0:
                    break
                stop = step + side * far
                if stop < 0 or stop >= index.size or index[stop] != index[step] + side * far:
                    raise AssertionError("a bin a shoulder's window reads is missing from the profile")
                past = level[step + 1:stop + 1] if side > 0 else level[stop:step]
                if not (level[step] < 0.5 * (core_level + _median(past, scratch)) and top[step] < SHOULDER_CEILING):
                    break
                end = step
            if side < 0:
                lo[r] = end
            else:
                hi[r] = end
    return lo, hi


@njit(cache=True, nogil=True)
def _median(values, scratch):
    """np.median of a few finite values (at most scratch.size; levels are), by insertion
    sort into ``scratch``: numba's np.median costs a first run 1.5 s of compilation."""
    n = values.size
    for i in range(n):
        v = values[i]
        j = i
        while j > 0 and scratch[j - 1] > v:
            scratch[j] = scratch[j - 1]
            j -= 1
        scratch[j] = v
    half = n >> 1
    return scratch[half] if n & 1 else (scratch[half - 1] + scratch[half]) / 2
