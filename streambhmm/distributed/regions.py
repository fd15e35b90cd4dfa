"""Regions from a model's posteriors: hypomethylated regions (HMRs), partially methylated
domains (PMDs), or runs of any chosen states (`streambhmm regions`).

A region is a run of covered bins whose posterior probability of the target states is at
least ``min_posterior``, where consecutive such bins lie at most ``max_gap`` bp apart (so a
few bins of other states, or bins without coverage, inside a region do not cut it); it is
kept when it is at least ``min_length`` bp long and holds at least ``min_bins`` target
bins. Each region gets its mean posterior of the targets (the BED score, times 1000), its
number of target bins, its length, and its mean methylation in each sample (methylated
over covered reads in its interval: where a rule bridges covered bins of other states,
theirs too, recounted from the store; HMRs: their cores' and shoulders').

Presets choose the target states by what HMRs and PMDs are (streambhmm.learn.domains) and
cut them as `streambhmm hmr` and `pmd` do:

    hmr   hypomethylated states (level <= 0.2 and 92% of the bins' levels below 0.5 in
          every sample, learn.domains); with a beta-binomial model a bin counts by its
          posterior of a level at most 0.2 in every sample given its reads, and a run goes on
          through bins whose reads put them at most at 0.5 (most of their reads unmethylated)
          and is cut to its outermost counted bins (bin_posteriors, regions_of; a binomial
          model: runs of the states' bins); bins of a region at most 1 kb apart with no
          covered bin between them that is not the run's (CpG-poor stretches inside an HMR do
          not cut it, a methylated CpG does, as in DNMTools); at least HMR_MIN_BINS counted
          bins; its reads, pooled per sample, putting its level at most 0.2 in
          every sample under a hypomethylated state (posterior at least 0.5: a sparse sample's
          bins count by their state's prior, its region's reads speak for themselves);
          its mean level below 0.5 in every sample (most of its reads unmethylated) and, in a
          joint call, in each sample nearer its hypomethylated level than its next state's;
          then widened over its shoulders, the covered bins beside it nearer its level than
          the local background and below 0.5 (distributed.shoulders; a joint region whose
          widened reads reach a sample's ceiling is its core again)
    pmd   partially methylated states (below 0.7 in every sample, Lister et al. 2009; on bins
          narrower than 5 kb, not hypomethylated: there an HMR fills bins of its own); gaps
          up to 10 kb; at least 50 kb long (on 5 kb bins, at least 10 of them: the length,
          not the level, tells a PMD from an HMR); its mean level below 0.7 in every sample
          (as the region it is, not only as its states: every read of its interval, the
          bridged bins' too)

In both, every sample has reads in a region: a joint region says nothing of a sample without.

A preset refuses a model in which no state, or every state, is a target: there is no
region, or no background to set one against.

The computation runs on Dask like decoding (exact messages between chunks); each chunk's
regions are joined at the seams, so memory holds a chunk, not a chromosome.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..learn.domains import DEFINITIONS, HALF_METHYLATED, HYPO_LEVEL, PMD_BIN_SIZE, PMD_LEVEL, target_states
from ..learn.emissions import MIN_DISPERSION
from ..learn.overdispersion import beta_parameters
from ..learn.states import PALETTE, item_rgb, state_colours
from ..moments.features import index_pairs, pairs_from_keys
from ..io.bed import bed9_line, bed_order, track_head, track_line
from ..io.outputs import beside_name, replacing_pair
from ..io.store import CountsStore
from .chains import map_posteriors
from .messages import Params
from .shoulders import SHOULDER_CEILING, Profile, chunk_profile, widen

PRESETS = ("hmr", "pmd")


@dataclass(frozen=True)
class RegionRule:
    """Which states a region is made of, and how it is cut."""

    targets: tuple  # state indices
    min_posterior: float = 0.5
    max_gap: int = 200
    min_length: int = 0
    min_bins: int = 1
    name: str = "region"  # regions are named name0, name1, ...
    # merge across covered bins of other states within max_gap (else only across bins without
    # coverage: a covered bin of another state ends a region, as a background CpG ends a DNMTools HMR)
    bridge_covered: bool = True
    # widen each region over its shoulders (distributed.shoulders)
    shoulders: bool = False
    # keep a region only when its mean level (its interval's reads) is below this in every
    # sample (None: any level): a preset's definition
    max_level: float | None = None
    # keep a region only when every sample has reads in it (else it says nothing of the
    # samples without)
    every_sample: bool = False
    # with max_level and bridge_covered: keep a region only when, in every sample, most of its
    # bins with reads are each below max_level by their own reads (a domain; a pooled mean can
    # be pulled under it by one island's many reads amid methylated bins: a helper's RRBS "PMD")
    most_bins_below: bool = False
    # keep a region only when its level is below these in each sample (a joint hmr: nearer
    # the sample's hypomethylated level than its next state's; None: no such bound)
    sample_ceilings: tuple | None = None
    # a bin is also a region's when its posterior of a level at most this in every sample is
    # at least min_posterior, and only such bins count towards min_bins and the score (None:
    # the target states alone; a binomial model has no spread of levels, and keeps them)
    level_cap: float | None = None
    # with a level cap, for a beta-binomial model: every state's Beta distribution of levels per
    # sample ((m, S) a, (m, S) b, state_betas), and a region is kept only when its reads, pooled, put its level at most the cap in every
    # sample with posterior at least min_posterior under one of the target states
    state_betas: tuple | None = None
    # with a level cap: a run goes on through bins whose posterior of a level at most this in
    # every sample is at least min_posterior (most of their reads unmethylated), and is cut to
    # its outermost counted bins
    run_cap: float = HALF_METHYLATED

    def keeps(self, regions: "Regions") -> np.ndarray:
        """Which of a chromosome's joined regions the rule keeps."""
        keep = (regions.end - regions.start >= self.min_length) & (regions.n_bins >= self.min_bins)
        if self.every_sample:
            keep &= (regions.coverage > 0).all(axis=1)
        if self.max_level is not None:
            keep &= ~(regions.levels() >= self.max_level).any(axis=1)
        if self.sample_ceilings is not None:
            keep &= ~(regions.levels() >= np.asarray(self.sample_ceilings)).any(axis=1)
        if self.state_betas is not None:
            keep &= self.pooled_level_posterior(regions) >= self.min_posterior
        return keep

    def pooled_level_posterior(self, regions: "Regions") -> np.ndarray:
        """Per region, the largest over the target states h of prod_s P(level <= level_cap | h,
        the region's reads in s pooled). A bin counts by its own reads, but a sparse sample's
        few reads leave that to its state's prior: jointly with a deep sample, islands at
        0.3-0.5 in a sample of 3 reads a CpG were called HMRs (a helper's audit). A region's
        pooled reads are enough to say."""
        from scipy.special import betainc  # scipy on first use: the command line starts without it

        a, b = (np.asarray(x)[list(self.targets)][None] for x in self.state_betas)  # (1, T, S)
        meth, cov = regions.methylated[:, None], regions.coverage[:, None]  # (R, 1, S)
        below = betainc(a + meth, b + cov - meth, self.level_cap).prod(axis=2)
        return below.max(axis=1, initial=0.0)

    def conditions(self, n_samples: int) -> str:
        """What :meth:`keeps` asks of a region, in words (for a call that found none)."""
        counted = ("target bins" if self.level_cap is None
                   else f"bins whose reads put their level at most {self.level_cap}")
        parts = [f"at least {self.min_bins} {counted}"] if self.min_bins > 1 else []
        if self.min_length:
            parts.append(f"at least {self.min_length:,} bp")
        if self.max_level is not None:
            parts.append(f"a mean level below {self.max_level} in every sample"
                         + (", as most of its bins with reads have" if self.most_bins_below else ""))
        if self.sample_ceilings is not None:
            parts.append("in each sample a level nearer its hypomethylated state's than its next state's (below "
                         + ", ".join(f"{c:.2f}" for c in self.sample_ceilings) + ")")
        if self.state_betas is not None:
            parts.append(f"its reads, pooled, putting its level at most {self.level_cap} in every sample")
        if self.every_sample and n_samples > 1:
            parts.append("reads in every sample")
        return ", ".join(parts)


HMR_MIN_BINS = 4  # measured on the real sets (docs/methods/hmr-pmd.md): shorter runs are single CpGs' noise
HMR_DESERT = 1000  # bp without coverage that end an HMR (DNMTools' desert); hmr's bins are no wider
PMD_MIN_LENGTH = 50_000  # bp: the shortest PMD the pmd preset calls


def _sample_ceilings(levels: np.ndarray, targets: tuple) -> tuple | None:
    """Per sample, midway between its highest target level and its next state's level, at
    most HALF_METHYLATED. A joint state's levels can be wide enough to hold one sample's
    island inside another's PMD, so each sample's reads in a joint HMR must be nearer its own
    hypomethylated level than its next state's (a helper's audit: 38 of 113 joint HMRs were
    one sample's islands, the other sample at 0.41-0.50). The next state is the lowest other
    one above the targets and HYPO_LEVEL in that sample that is no region of this sample
    alone: a state below HALF_METHYLATED here and methylated in another sample (one sample's
    island, at 0.28 in a second audit) is no background."""
    if not targets:
        return None
    is_target = np.isin(np.arange(len(levels)), targets)
    top = levels[is_target].max(axis=0)
    own_region = (levels < HALF_METHYLATED) & (levels >= HALF_METHYLATED).any(axis=1, keepdims=True)
    background = ~is_target[:, None] & (levels > np.maximum(top, HYPO_LEVEL)) & ~own_region
    above = np.where(background, levels, np.inf).min(axis=0)
    return tuple(float(c) for c in np.minimum((top + above) / 2, HALF_METHYLATED))


def state_betas(levels: np.ndarray, dispersion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a, b), (m, S) each: each state's Beta distribution of levels per sample (the emissions'
    overdispersion floor applied)."""
    return beta_parameters(np.asarray(levels, np.float64),
                           np.maximum(np.asarray(dispersion, np.float64), MIN_DISPERSION))


def preset_rule(preset: str, methylation: np.ndarray, dispersion: np.ndarray | None = None,
                bin_size: int = PMD_BIN_SIZE) -> RegionRule:
    """The rule of a preset for a model's levels and overdispersions on bins of ``bin_size``
    (see the module docstring)."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    levels = np.atleast_2d(np.asarray(methylation))
    targets = tuple(int(h) for h in np.flatnonzero(target_states(preset, levels, dispersion, bin_size)))
    if preset == "hmr":
        rule = RegionRule(targets, 0.5, HMR_DESERT, 0, HMR_MIN_BINS, "HMR", bridge_covered=False, shoulders=True,
                          max_level=HALF_METHYLATED, every_sample=True, level_cap=HYPO_LEVEL,
                          sample_ceilings=_sample_ceilings(levels, targets) if levels.shape[1] > 1 else None,
                          state_betas=None if dispersion is None else  # nested tuples: a rule is a value
                          tuple(tuple(map(tuple, x.tolist())) for x in state_betas(levels, dispersion)))
    else:
        rule = RegionRule(targets, 0.5, 10_000, PMD_MIN_LENGTH, 1, "PMD", max_level=PMD_LEVEL, every_sample=True,
                          most_bins_below=True)
    wanted = DEFINITIONS[preset]
    described = f"levels {levels.round(2).tolist()}" + ("" if dispersion is None else
                                                        f", overdispersions {np.round(dispersion, 3).tolist()}")
    if not rule.targets:
        raise ValueError(f"the model has no state that a {preset} is made of ({wanted}; the model's {described}): "
                         f"the data may hold none; or choose --targets")
    if len(rule.targets) == len(levels):
        raise ValueError(f"every state of the model is one a {preset} is made of ({wanted}; {described}): no "
                         f"background to call regions against; fit more states, or choose --targets")
    return rule


_FIELDS = ("start", "end", "n_bins", "posterior_sum", "methylated", "coverage", "posterior_max", "core_start",
           "core_end")
NO_CORE = (np.iinfo(np.int64).max, -1)  # (core_start, core_end) of a part without counted bins


@dataclass
class Regions:
    """Regions along one chromosome (or part of one), in bp (0-based, half-open)."""

    start: np.ndarray
    end: np.ndarray
    n_bins: np.ndarray  # target bins (the counted ones: regions_of)
    posterior_sum: np.ndarray  # summed posterior of the targets over the target bins
    # (regions, S) methylated and covered reads: of the target bins as found in the chunks,
    # of the whole interval once find_regions has finished a chromosome
    methylated: np.ndarray
    coverage: np.ndarray
    posterior_max: np.ndarray  # the highest posterior of the targets in the region
    open_start: bool = True  # the part's first covered bin is a target bin (a region may go on before it)
    open_end: bool = True  # the part's last covered bin is
    # bp: where its first counted bin starts and its last ends (NO_CORE without one); a run is
    # cut to them, but a chunk's part keeps the bins at an open end until the next part is joined
    core_start: np.ndarray | None = None  # default: start
    core_end: np.ndarray | None = None  # default: end

    def __post_init__(self):
        if self.core_start is None:
            self.core_start = np.array(self.start, np.int64)
        if self.core_end is None:
            self.core_end = np.array(self.end, np.int64)

    def __len__(self) -> int:
        return len(self.start)

    def levels(self) -> np.ndarray:
        """(regions, S) the mean level of each region's reads per sample; NaN without reads."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.methylated / self.coverage

    def take(self, index) -> "Regions":
        return Regions(**{f: getattr(self, f)[index] for f in _FIELDS}, open_start=self.open_start,
                       open_end=self.open_end)

    def cut_to_cores(self, store: CountsStore, samples: list, chrom: str) -> "Regions":
        """The regions with counted bins, each cut to them, the reads of those cut recounted
        from the store (a chunk's part keeps its bins at an open end: regions_of)."""
        kept = self.take(self.core_start < self.core_end)
        cut = np.flatnonzero((kept.core_start > kept.start) | (kept.core_end < kept.end))
        if cut.size:
            kept.start[cut], kept.end[cut] = kept.core_start[cut], kept.core_end[cut]
            counts = interval_counts(store, samples, [chrom] * cut.size, kept.start[cut], kept.end[cut])
            kept.methylated[cut], kept.coverage[cut] = counts.methylated, counts.coverage
        return kept

    def cut_at(self, data_end: int, min_length: int) -> "Regions":
        """The regions ending where the chromosome's data do (a coarse bin or a window may run
        past ``data_end``); one that is then shorter than ``min_length`` is not a region."""
        kept = self.take(np.minimum(self.end, data_end) - self.start >= min_length)
        np.minimum(kept.end, data_end, out=kept.end)
        return kept

    @classmethod
    def empty(cls, n_samples: int, open_ends: bool = True) -> "Regions":
        zero = np.zeros(0, np.int64)
        return cls(zero, zero, zero, np.zeros(0), np.zeros((0, n_samples)), np.zeros((0, n_samples)), np.zeros(0),
                   open_ends, open_ends)


def regions_of(positions: np.ndarray, target: np.ndarray, columns, n_samples: int, bin_size: int,
               rule: RegionRule, core: np.ndarray | None = None) -> Regions:
    """The regions of one segment of kept bins (positions, each bin's posterior of belonging to
    a region) whose counts ``columns`` yields one sample at a time ((sample, methylated,
    coverage)). ``core``: each bin's posterior of counting towards a region's bins and score
    (counted at min_posterior); a run is then cut to its outermost counted bins, except at the
    segment's open ends, where the next segment's bins may be counted (Regions.cut_to_cores
    finishes the cut). Default: every bin counts, by ``target``."""
    chosen = np.flatnonzero(target >= rule.min_posterior)
    if chosen.size == 0:
        return Regions.empty(n_samples, open_ends=positions.size == 0)
    open_start, open_end = bool(chosen[0] == 0), bool(chosen[-1] == positions.size - 1)
    starts = positions[chosen]
    cut = starts[1:] - (starts[:-1] + bin_size) > rule.max_gap
    if not rule.bridge_covered:
        cut |= np.diff(chosen) > 1
    run = np.r_[0, np.cumsum(cut)]  # each chosen bin's run
    score = target[chosen] if core is None else core[chosen]
    counts = np.ones(chosen.size, bool) if core is None else score >= rule.min_posterior
    core_start = core_end = None
    if core is not None:
        index, n_runs = np.arange(chosen.size), int(run[-1]) + 1
        core_first, core_last = np.full(n_runs, chosen.size), np.full(n_runs, -1)
        np.minimum.at(core_first, run[counts], index[counts])
        np.maximum.at(core_last, run[counts], index[counts])
        has_core = core_last >= 0
        run_core_start = np.where(has_core, starts[np.minimum(core_first, chosen.size - 1)], NO_CORE[0])
        run_core_end = np.where(has_core, starts[np.maximum(core_last, 0)] + bin_size, NO_CORE[1])
        # cut each run to its counted bins, but not at an open end (nor, without any, at its other end)
        lo, hi = core_first.copy(), core_last.copy()
        if open_start:
            lo[0] = 0
            hi[0] = hi[0] if has_core[0] else np.flatnonzero(run == 0)[-1]
        if open_end:
            hi[-1] = chosen.size - 1
            lo[-1] = lo[-1] if has_core[-1] else np.flatnonzero(run == n_runs - 1)[0]
        keep = (index >= lo[run]) & (index <= hi[run])
        if not keep.any():
            return Regions.empty(n_samples, open_ends=False)
        chosen, starts, run, score, counts = chosen[keep], starts[keep], run[keep], score[keep], counts[keep]
    first = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
    last = np.r_[first[1:], chosen.size] - 1
    if core is not None:
        core_start, core_end = run_core_start[run[first]], run_core_end[run[first]]
    meth, cov = np.zeros((first.size, n_samples)), np.zeros((first.size, n_samples))
    for s, m, c in columns:
        meth[:, s] = np.add.reduceat(np.asarray(m, np.float64)[chosen], first)
        cov[:, s] = np.add.reduceat(np.asarray(c, np.float64)[chosen], first)
    counted_score = np.where(counts, score, 0.0)
    return Regions(starts[first], starts[last] + bin_size, np.add.reduceat(counts.astype(np.int64), first),
                   np.add.reduceat(counted_score, first), meth, cov, np.maximum.reduceat(counted_score, first),
                   open_start and bool(chosen[0] == 0), open_end and bool(chosen[-1] == positions.size - 1),
                   core_start, core_end)


def join_regions(left: Regions, right: Regions, max_gap: int, bridge_covered: bool = True) -> Regions:
    """Concatenate consecutive regions of one chromosome, merging across the seam (without
    ``bridge_covered``, only where no covered bin of another state lies between)."""
    touching = bridge_covered or (left.open_end and right.open_start)
    right_had_regions = len(right) > 0  # else its open_end says whether it had covered bins (Regions.empty)
    if len(left) and len(right) and right.start[0] - left.end[-1] <= max_gap and touching:
        merged = left.take(slice(None))
        merged.end[-1] = right.end[0]
        for name in ("n_bins", "posterior_sum", "methylated", "coverage"):
            getattr(merged, name)[-1] += getattr(right, name)[0]
        merged.posterior_max[-1] = max(merged.posterior_max[-1], right.posterior_max[0])
        merged.core_start[-1] = min(merged.core_start[-1], right.core_start[0])
        merged.core_end[-1] = max(merged.core_end[-1], right.core_end[0])
        left, right = merged, right.take(slice(1, None))
    return Regions(**{f: np.concatenate([getattr(left, f), getattr(right, f)]) for f in _FIELDS},
                   open_start=left.open_start,
                   open_end=right.open_end if right_had_regions or not right.open_end else left.open_end)


def level_posterior(post: np.ndarray, sample_counts, caps: tuple, methylation: np.ndarray,
                    dispersion: np.ndarray) -> np.ndarray:
    """(bins, caps) each bin's posterior of a level at most each of ``caps`` in every sample: sum_h post_h
    prod_s P(p_s <= cap | state h, the bin's reads in s), each state's Beta distribution of
    levels updated by the reads (the samples independent given the state, as in the
    emissions). A bin's own reads speak for its level whichever state's width fits them best:
    12 of 77 reads methylated fit a dispersed state at 0.41 better than a narrow one at 0.04,
    yet put the level at most 0.2 with probability 0.79. ``sample_counts`` yields (sample,
    methylated, coverage)."""
    from scipy.special import betainc  # scipy on first use: the command line starts without it

    below = [np.ones_like(post) for _ in caps]
    a_all, b_all = state_betas(methylation, dispersion)
    for k, meth, cov in sample_counts:
        a, b = a_all[:, k], b_all[:, k]
        keys, codes = index_pairs(np.asarray(meth), np.asarray(cov))
        cov, meth = (x.astype(np.float64)[:, None] for x in pairs_from_keys(keys))  # each distinct pair once
        for below_cap, cap in zip(below, caps):
            below_cap *= betainc(a + meth, b + cov - meth, cap)[codes]
    return np.stack([(post * below_cap).sum(axis=1) for below_cap in below], axis=1)


def bin_posteriors(post: np.ndarray, sample_counts, rule: RegionRule, methylation: np.ndarray,
                   dispersion: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """(run, core) of a chunk's bins under ``rule``: each bin's posterior of belonging to a
    region's run, and of counting towards its bins and score (None: every bin of the run, by
    the former). Without a level cap (or for a binomial model), the posterior of the target
    states. With one, a bin counts by its posterior of a level at most the cap
    (level_posterior), and a run goes on through bins whose reads put them at most at the
    run cap (most of their reads unmethylated: a long HMR's CpGs with a few methylated reads)."""
    if rule.level_cap is None or dispersion is None:
        return post[:, list(rule.targets)].sum(axis=1), None
    level, run = level_posterior(post, sample_counts, (rule.level_cap, rule.run_cap), methylation, dispersion).T
    return np.maximum(run, level), level


def _chunk_regions(post, data, rule: RegionRule, methylation: np.ndarray, dispersion: np.ndarray | None):
    """A chunk's regions, and for shoulders its Profile and number of covered bins (in a
    task, map_posteriors)."""
    ref = data.ref
    target, core = bin_posteriors(post, data.sample_counts(), rule, methylation, dispersion)
    positions = ref.positions(data.rows)
    regions = regions_of(positions, target, data.sample_counts(), len(ref.columns), ref.bin_size, rule, core)
    if not rule.shoulders:
        return regions, None, positions.size
    cores = regions.take(regions.core_start < regions.core_end)  # where widening starts (Regions.cut_to_cores)
    profile = chunk_profile(positions, post, methylation, dispersion, data.sample_counts(), len(ref.columns),
                            cores.core_start, cores.core_end, ref.bin_size)
    return regions, profile, positions.size


def find_regions(store: CountsStore, hmm, client, rule: RegionRule, samples, progress=None) -> dict:
    """{chromosome: Regions} of ``store`` under ``hmm`` (joint over ``samples``). The chunks
    come chromosome by chromosome, so each chromosome is finished (filtered, and widened over
    its shoulders) before the next one starts: only its profiles are held."""
    chromosomes = bed_order(store.chromosomes)  # as the BED lists them
    found = {chrom: Regions.empty(len(samples)) for chrom in chromosomes}
    methylation = np.asarray(hmm.methylation_, np.float64)
    core_level = float(methylation[list(rule.targets)].mean())  # over the target states and the samples
    chunks = map_posteriors(store, samples, Params.of(hmm), client, _chunk_regions,
                            (rule, methylation, hmm.dispersion), f"the regions of {store.path}", progress, chromosomes)
    for chrom, parts in itertools.groupby(chunks, key=lambda chunk: chunk[0].chrom):
        regions, profiles, covered = found[chrom], [], 0
        for _, (part, profile, n_covered) in parts:
            regions = join_regions(regions, part, rule.max_gap, rule.bridge_covered)
            if profile is not None:
                profile.index += covered  # the chunk's covered bins follow those before it
                profiles.append(profile)
            covered += n_covered
        regions = regions.cut_to_cores(store, samples, chrom)
        keep = np.ones(len(regions), bool)
        if rule.bridge_covered and len(regions):
            # the reads of the bridged bins too: a region's levels are its interval's
            below = rule.max_level if rule.most_bins_below else None
            counts = interval_counts(store, samples, [chrom] * len(regions), regions.start, regions.end, below=below)
            regions.methylated, regions.coverage = counts.methylated, counts.coverage
            if below is not None:
                keep = (2 * counts.bins_below > counts.bins_read).all(axis=1)
        regions = regions.take(rule.keeps(regions) & keep)
        if rule.shoulders:
            regions = with_shoulders(regions, Profile.concatenate(profiles, len(samples)), covered, core_level, rule,
                                     store.bin_size)
        found[chrom] = regions
    return found


@dataclass
class IntervalCounts:
    methylated: np.ndarray  # (regions, S) reads of each sample
    coverage: np.ndarray
    covered: np.ndarray  # (regions,) bins with reads
    compared: np.ndarray | None  # (regions,) bins with reads of every group (interval_counts' ``members``)
    bins_read: np.ndarray | None = None  # (regions, S) each sample's bins with reads (with ``below``)
    bins_below: np.ndarray | None = None  # (regions, S) those whose own level is below ``below``


def interval_counts(store: CountsStore, samples: list, chrom: list, start: np.ndarray, end: np.ndarray,
                    members: tuple | None = None, below: float | None = None) -> IntervalCounts:
    """Per interval (bp, on bin edges): the methylated and covered reads of each of
    ``samples`` over every bin in it, and its covered bins; with ``members`` (each sample's
    group), also its bins where every group has reads; with ``below``, each sample's bins with
    reads and those of them whose level is below it. Read a chunk and a sample at a time
    (memory: one sample's chunk, and a row of bins per group). A region that bridges covered
    bins of other states (a PMD, a DMR within --max-gap) has the levels of all its interval's
    reads, as a user recounting them finds."""
    n = len(chrom)
    meth, cov, covered = np.zeros((n, len(samples))), np.zeros((n, len(samples))), np.zeros(n, np.int64)
    compared = None if members is None else np.zeros(n, np.int64)
    read, low = (None, None) if below is None else (np.zeros((n, len(samples)), np.int64) for _ in range(2))
    chrom = np.asarray(chrom, dtype=object)
    for name in dict.fromkeys(chrom.tolist()):
        rows = np.flatnonzero(chrom == name)
        lo, hi = start[rows] // store.bin_size, end[rows] // store.bin_size
        for ref in store.chunk_refs(name, samples):
            hit = np.flatnonzero((lo < ref.stop) & (hi > ref.start))
            if hit.size == 0:
                continue
            a = np.clip(lo[hit] - ref.start, 0, ref.n_bins)
            b = np.clip(hi[hit] - ref.start, 0, ref.n_bins)
            any_reads = np.zeros(ref.n_bins, bool)
            group_reads = None if members is None else np.zeros((max(members) + 1, ref.n_bins), bool)
            for k in range(len(samples)):
                m, c = (x[:, 0] for x in ref.read([k]))
                for total, x in ((meth, m), (cov, c)):
                    sums = np.r_[0.0, np.cumsum(x)]  # exact: integer sums
                    total[rows[hit], k] += sums[b] - sums[a]
                any_reads |= c > 0
                if below is not None:
                    read[rows[hit], k] += _bins_within(c > 0, a, b)
                    low[rows[hit], k] += _bins_within((c > 0) & (m < below * c), a, b)
                if group_reads is not None:
                    group_reads[members[k]] |= c > 0
            covered[rows[hit]] += _bins_within(any_reads, a, b)
            if group_reads is not None:
                compared[rows[hit]] += _bins_within(group_reads.all(axis=0), a, b)
    return IntervalCounts(meth, cov, covered, compared, read, low)


def _bins_within(flags: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many of flags[a:b] are set, for each pair (a, b)."""
    sums = np.r_[0, np.cumsum(flags)]
    return sums[b] - sums[a]


def with_shoulders(regions: Regions, profile: Profile, n_covered: int, core_level: float, rule: RegionRule,
                   bin_size: int) -> Regions:
    """One chromosome's regions widened over their shoulders (distributed.shoulders); merged
    regions add their counts, and their reads take their shoulders' (a region's levels are
    those of its interval, as a user recounting it finds; its bins, score and posterior stay
    its regions'). A widened region whose reads average SHOULDER_CEILING (in a joint call, the
    sample's ceiling) or more in a sample keeps its regions as they were: a bin's expected
    level can be below the ceiling while its reads are not."""
    starts, ends, group, shoulders = widen(regions.start, regions.end, profile, n_covered, core_level, rule.max_gap,
                                           bin_size)
    if group.size == 0:
        return regions
    heads = np.r_[0, np.flatnonzero(np.diff(group)) + 1]
    widened = Regions(starts, ends, *(np.add.reduceat(getattr(regions, f), heads, axis=0)
                                      for f in ("n_bins", "posterior_sum", "methylated", "coverage")),
                      np.maximum.reduceat(regions.posterior_max, heads), regions.open_start, regions.open_end)
    widened.methylated += shoulders[0]
    widened.coverage += shoulders[1]
    # and, in a joint call, one whose reads in a sample passed that sample's ceiling (a walk follows the
    # samples' mean: on methylPipe's H1 and IMR90 one took a bin of 138 reads at 0.49 in IMR90)
    ceilings = SHOULDER_CEILING if rule.sample_ceilings is None else np.asarray(rule.sample_ceilings)
    failed = (widened.levels() >= ceilings).any(axis=1)
    if not failed.any():
        return widened
    # each failed widened region is replaced by its regions (disjoint from the others: in start order)
    kept, restored = widened.take(np.flatnonzero(~failed)), regions.take(np.flatnonzero(failed[group]))
    order = np.argsort(np.r_[kept.start, restored.start], kind="stable")
    return Regions(**{f: np.concatenate([getattr(kept, f), getattr(restored, f)])[order] for f in _FIELDS},
                   open_start=regions.open_start, open_end=regions.open_end)


TABLE_HEAD = b"chrom\tstart\tend\tname\tn_bins\t"  # how the regions' table begins (write_regions)


def regions_heads(command: str) -> tuple[re.Pattern, re.Pattern]:
    """How the BED and the table that ``command`` ("hmr", "pmd" or "regions") writes with
    write_regions begin: the track line with its source ("(hmr of STORE)", "(model NAME)")
    and the table's header and first region's name (HMR0, PMD0; an empty table ends at its
    header, and a header longer than io.outputs.HEAD_BYTES is all that is read). The output
    may replace only these: one command's files are not another's to
    replace (`hmr -o` replaced `pmd`'s regions in a helper's audit)."""
    if command == "regions":  # its rule a preset's (HMR, PMD) or --targets' (region)
        source, names = rb"model ", rb"(?:HMR|PMD|region)"
    else:
        source, names = command.encode() + rb" of ", command.upper().encode()
    track = track_head(rb'[^"\n]* of [^"\n]* \(' + source + rb'[^"\n]*\)')
    table = re.compile(re.escape(TABLE_HEAD) + rb"[^\n]*(?:\Z|\n(?:[^\t\n]*\t[0-9]+\t[0-9]+\t" + names + rb"[0-9]+\t|\Z))")
    return track, table


# HMRs and PMDs in colours of their own: each is its model's least methylated target, the
# first colour of the states' palette, so a browser showed both tracks in one colour
REGION_COLOURS = {"HMR": PALETTE[0], "PMD": PALETTE[1]}


def write_regions(found: dict, rule: RegionRule, methylation, samples, output, source: str) -> int:
    """Write BED9 (a track line named after ``output``, whose description says what the regions are
    and their ``source``; name, score = 1000 x mean posterior of the targets, strand
    io.bed.BED_STRAND, the whole region thick, the colour of the lowest target state) and, beside it
    (NAME.tsv for NAME.bed, else OUTPUT.tsv), each region's target bins, length, score, and per
    sample its mean level and the reads it rests on. Both are written to temporary names and
    renamed when complete."""
    colour = item_rgb(REGION_COLOURS.get(rule.name) or
                      state_colours(methylation)[min(rule.targets, key=lambda h: np.mean(methylation[h]))])
    n = 0
    with replacing_pair(output, regions_table(output)) as (bed, tsv):
        kind = f"{rule.name} regions" if rule.name != "region" else "regions"  # a preset's, or --targets'
        # named after the file: a browser tells the calls of one store's samples apart by their names
        bed.write(track_line(Path(output).stem, f"{kind} of {','.join(samples)} ({source})"))
        tsv.write(TABLE_HEAD.decode() + "\t".join(["length", "score", *(f"level_{s}" for s in samples),
                                                   *(f"reads_{s}" for s in samples)]) + "\n")
        for chrom, regions in found.items():
            score = np.clip(np.rint(1000 * regions.posterior_sum / np.maximum(regions.n_bins, 1)), 0, 1000)
            levels = regions.levels()
            for i in range(len(regions)):
                name, start, end = f"{rule.name}{n}", int(regions.start[i]), int(regions.end[i])
                bed.write(bed9_line(chrom, start, end, name, int(score[i]), colour))
                tsv.write("\t".join([chrom, str(start), str(end), name, str(int(regions.n_bins[i])),
                                     str(end - start), str(int(score[i])),
                                     *(f"{v:.4f}" if np.isfinite(v) else "NA" for v in levels[i]),
                                     *(str(int(c)) for c in regions.coverage[i])]) + "\n")
                n += 1
        bed.flush()  # a full disk fails here, before either file is renamed into place
    return n


def regions_table(output) -> Path:
    """The table beside the regions' BED ``output``: NAME.tsv for NAME.bed, else its name + .tsv."""
    return beside_name(output, ".tsv")


def check_regions_name(output) -> Path:
    """``output`` as a Path, refused (ValueError) when it cannot name a regions' BED: the
    BED would take the table's extension (NAME.tsv), it asks for compression the writer does
    not do (NAME.gz), or standard output ("-": two files are written)."""
    output = Path(output)
    name = output.name
    if str(output) == "-":
        problem = "the regions go to two files (a BED and a table beside it), not to standard output"
    elif output.suffix.lower() in (".gz", ".bgz", ".bz2", ".xz", ".zst"):
        problem = "the regions are written as plain text, not compressed (bgzip the BED afterwards)"
    elif output.suffix.lower() == ".tsv":
        problem = f"the regions' BED would be taken for the table written beside it ({name})"
    else:
        return output
    raise ValueError(f"{output}: {problem}; give the regions a name ending in .bed")


def rule_with(rule: RegionRule, **changes) -> RegionRule:
    """The rule with the options the user gave (None: the preset's)."""
    return replace(rule, **{k: v for k, v in changes.items() if v is not None})
