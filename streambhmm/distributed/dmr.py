"""Differentially methylated regions between groups of samples on a counts store (`streambhmm
dmr`): the passes over the counts, the two models and the candidate regions.

1. A summary pass (one Dask task per chunk, reading one sample at a time): the distribution
   of the bins' pooled levels (where EM's background ladder starts) and each group's counts
   summed over DOMAIN_BIN_SIZE windows (at most genome / 5 kb x groups numbers, whatever the
   number of samples).
2. The domain model, in memory on those windows: states with a level per group
   (learn.groups), fitted by EM from the ladder and its candidate differential states;
   candidate domains are runs of windows whose posterior of differential states is at
   least 0.5, at least DOMAIN_MIN_LENGTH long, gaps up to DOMAIN_MAX_GAP (PMDs' rule).
3. The bin model on the store: the same design at the store's bins, its group parameters
   expanded to the samples for the store's E-step (distributed.em, linear in samples) and
   tied in the M-step; the states BIC does not keep are removed and EM resumed.
4. A posterior pass (chains.map_posteriors, exact messages between chunks): the candidate
   DMRs, runs of bins whose posterior of gaining (losing) states is at least 0.5, each with
   its per-sample counts and highest posterior; the per-sample counts of each candidate
   domain and the share of its bins the bin model puts in its direction (a domain is a
   difference of most of its span, DOMAIN_MIN_SHARE, not a stretch of many focal DMRs);
   and, if asked, each bin's posterior of difference for a bigWig.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask
import numpy as np

from ..io.store import ChunkRef, CountsStore, covered_bins
from ..learn.domains import PMD_BIN_SIZE
from ..learn.groups import GroupedBinomialHMM, SampleGroups, candidate_start, differential, restricted, supported_states
from ..learn.hmm import EncodedCounts, SufficientStats, run_em
from .chains import map_posteriors
from .cluster import compute
from .em import StoreEMResult, fit_store_em
from .messages import Params
from .regions import RegionRule, Regions, join_regions, regions_of

DOMAIN_BIN_SIZE = PMD_BIN_SIZE
DOMAIN_MIN_LENGTH = 50_000  # as a PMD (Lister et al. 2009; distributed.regions' pmd preset)
DOMAIN_MAX_GAP = 10_000
DOMAIN_MIN_SHARE = 0.5  # of a domain's covered bins, in its direction by the bin model
# The domain model's windows hold each group's reads scaled down to at most this many (the
# level kept): the beta-binomial M-step costs the largest coverage, and the levels of states
# 0.1 apart need no more reads than this.
DOMAIN_MAX_COVERAGE = 200
LEVEL_BINS = 200  # the pooled levels' histogram, where the background ladder's quantiles come from


@dataclass
class DmrSettings:
    """How the models are fitted and the regions cut (the `dmr` options)."""

    min_difference: float = 0.1
    background_states: int = 10  # EM's start: the pooled levels' quantiles, a state each
    candidate_levels: int = 5  # and at as many quantiles, a gaining and a losing candidate
    domain_background_states: int = 3
    em_iter: int = 30
    em_tol: float = 1e-6  # relative gain of an iteration below which EM stops
    min_posterior: float = 0.5
    max_gap: int = 200
    min_bins: int = 2
    domains: bool = True
    replicates: bool = True  # a call needs its replicates' test too (app.dmr.RegionTable.replicates_agree)

    @property
    def resume_iter(self) -> int:
        """EM's iterations after BIC removed states (from a fitted model): a third of em_iter's."""
        return max(1, self.em_iter // 3)

    @property
    def most_iterations(self) -> int:
        """EM's iterations in all, at most: em_iter, then resume_iter after each of BIC's removals."""
        return self.em_iter + PRUNING_ROUNDS * self.resume_iter


# -- 1. the summary pass ----------------------------------------------------------------------
@dataclass
class ChunkSummary:
    """What the summary pass keeps of a chunk: the pooled levels' histogram and the groups'
    counts per window."""

    histogram: np.ndarray  # (LEVEL_BINS,)
    windows: np.ndarray  # window indices (window start / DOMAIN_BIN_SIZE), ascending
    methylated: np.ndarray  # (windows, G)
    coverage: np.ndarray  # (windows, G)


def summary_task(ref: ChunkRef, members: tuple, n_groups: int, window: int) -> ChunkSummary:
    """A chunk's summary, one sample's column read at a time."""
    pooled_meth, pooled_cov = np.zeros(ref.n_bins), np.zeros(ref.n_bins)
    index = ref.positions() // window
    first = index[0]
    n_windows = int(index[-1] - first + 1)
    meth, cov = np.zeros((n_windows, n_groups)), np.zeros((n_windows, n_groups))
    for k, g in enumerate(members):
        m, c = ref.read([k])
        pooled_meth += m[:, 0]
        pooled_cov += c[:, 0]
        meth[:, g] += np.bincount(index - first, m[:, 0], n_windows)
        cov[:, g] += np.bincount(index - first, c[:, 0], n_windows)
    covered = pooled_cov > 0
    histogram = np.histogram(pooled_meth[covered] / pooled_cov[covered], LEVEL_BINS, (0.0, 1.0))[0]
    present = np.flatnonzero(covered_bins(cov))
    return ChunkSummary(histogram.astype(np.float64), first + present, meth[present], cov[present])


@dataclass
class Summary:
    """The summary pass's result: the pooled levels' histogram and per chromosome the
    covered windows (their starts in bp) with each group's summed counts."""

    histogram: np.ndarray
    windows: dict  # {chrom: (starts (n,), methylated (n, G), coverage (n, G))}
    window: int
    ends: dict  # {chrom: where its data end, bp (the store's last bin): no domain runs past it}

    def quantiles(self, k: int) -> np.ndarray:
        """``k`` levels at the pooled levels' quantiles (k + 0.5) / k."""
        return _histogram_quantiles(self.histogram, k)


def _histogram_quantiles(histogram: np.ndarray, k: int) -> np.ndarray:
    edges = np.linspace(0.0, 1.0, histogram.size + 1)
    cumulative = np.r_[0.0, np.cumsum(histogram)] / max(histogram.sum(), 1)
    return np.interp((np.arange(k) + 0.5) / k, cumulative, edges)


def summarize(store: CountsStore, samples: list, groups: SampleGroups, client, window: int = DOMAIN_BIN_SIZE,
              quiet: bool = True) -> Summary:
    """The summary pass over ``samples`` (their groups ``groups``) on ``client``."""
    refs = [ref for chrom in store.chromosomes for ref in store.chunk_refs(chrom, samples)]
    tasks = [dask.delayed(summary_task, pure=True)(ref, groups.members, groups.n_groups, window) for ref in refs]
    parts = compute(client, tasks, quiet=quiet, what=f"the summary of {store.path}") if tasks else []
    histogram = np.zeros(LEVEL_BINS)
    pieces = {}
    for ref, part in zip(refs, parts):
        histogram += part.histogram
        pieces.setdefault(ref.chrom, []).append(part)
    windows = {}
    for chrom, chunks in pieces.items():
        index = np.concatenate([p.windows for p in chunks])
        unique, inverse = np.unique(index, return_inverse=True)  # a window cut by a chunk's end: summed
        meth, cov = (np.zeros((unique.size, groups.n_groups)) for _ in range(2))
        np.add.at(meth, inverse, np.concatenate([p.methylated for p in chunks]))
        np.add.at(cov, inverse, np.concatenate([p.coverage for p in chunks]))
        windows[chrom] = (unique * window, meth, cov)
    return Summary(histogram, windows, window, {chrom: store.n_bins(chrom) * store.bin_size for chrom in windows})


# -- 2. and 3. the models ---------------------------------------------------------------------
def capped(meth: np.ndarray, cov: np.ndarray, top: int = DOMAIN_MAX_COVERAGE) -> tuple[np.ndarray, np.ndarray]:
    """Counts scaled down to at most ``top`` reads each (the level kept, rounded), as int64."""
    scale = np.minimum(1.0, top / np.maximum(cov, 1))
    return np.rint(meth * scale).astype(np.int64), np.rint(cov * scale).astype(np.int64)


def start_model(background: np.ndarray, groups: SampleGroups, candidates: np.ndarray | None = None
                ) -> GroupedBinomialHMM:
    """EM's start: the background ladder and the candidates (learn.groups.candidate_start)."""
    startprob, transmat, levels = candidate_start(background, groups.n_groups, candidates)
    hmm = GroupedBinomialHMM(len(levels), groups, allow_degenerate=True)
    return hmm.start_from(startprob, transmat, levels)


PRUNING_ROUNDS = 3  # BIC's removals, each followed by EM from what is left


def fit_in_memory(meth: np.ndarray, cov: np.ndarray, lengths: np.ndarray, hmm: GroupedBinomialHMM,
                  settings: DmrSettings) -> GroupedBinomialHMM:
    """EM in memory (the domain model on windows), with BIC's removals."""
    data = EncodedCounts(meth.astype(np.int64), cov.astype(np.int64), lengths)

    def em(model, n_iter):
        last = []
        run_em(model, lambda: last.append(model.e_step(data)) or last[-1], n_iter, rel_tol=settings.em_tol)
        return last[-1]

    return _pruned_fits(hmm, em, settings)[0]


def fit_on_store(store: CountsStore, samples: list, hmm: GroupedBinomialHMM, client, settings: DmrSettings,
                 report=None) -> tuple[GroupedBinomialHMM, list, StoreEMResult]:
    """EM on the store (``client`` None: in this process, for a small store), with BIC's
    removals; the model, the log-likelihood history of its fits and the last fit (whether
    it converged or stopped at its cap)."""
    history, fits = [], []

    def em(model, n_iter):
        done = sum(len(fit.history) - 1 for fit in fits)  # counted on across BIC's restarts, as the progress' cap
        shown = None if report is None else (lambda iteration, loglik: report(done + iteration, loglik))
        fits.append(fit_store_em(store, model, client, samples, n_iter, settings.em_tol, report=shown, check=False))
        history.extend(fits[-1].history)
        return fits[-1].stats

    return _pruned_fits(hmm, em, settings)[0], history, fits[-1]


def _pruned_fits(hmm: GroupedBinomialHMM, em, settings: DmrSettings) -> tuple[GroupedBinomialHMM, SufficientStats]:
    """``em(model, n_iter)`` (returning its last E-step's statistics) from ``hmm``, then, while
    BIC removes states (learn.groups.supported_states), again from what is left."""
    stats = em(hmm, settings.em_iter)
    for _ in range(PRUNING_ROUNDS):
        keep = supported_states(stats, hmm)
        if keep.size == hmm.n_components:
            break
        hmm = restricted(hmm, keep)
        stats = em(hmm, settings.resume_iter)
    return hmm, stats


# -- the regions' targets ---------------------------------------------------------------------
@dataclass(frozen=True)
class Targets:
    """Which states a region's posterior sums: per direction (two groups: the second group
    above the first, "gain", and below, "loss"; more groups: any difference) the
    differential states of that direction."""

    directions: tuple  # names
    states: tuple  # per direction, a tuple of state indices

    @classmethod
    def of(cls, levels: np.ndarray, min_difference: float) -> "Targets":
        levels = np.atleast_2d(levels)
        diff = differential(levels, min_difference)
        if levels.shape[1] == 2:
            gain = diff & (levels[:, 1] > levels[:, 0])
            return cls(("gain", "loss"), (tuple(np.flatnonzero(gain).tolist()),
                                          tuple(np.flatnonzero(diff & ~gain).tolist())))
        return cls(("differs",), (tuple(np.flatnonzero(diff).tolist()),))

    @property
    def any(self) -> tuple:
        return tuple(sorted(h for states in self.states for h in states))


def window_regions(windows: dict, post: dict, targets: Targets, window: int, ends: dict) -> dict:
    """{direction: {chrom: Regions}} of the domain model: runs of windows (their posteriors
    ``post[chrom]``) with the rule of domains, ending where the chromosome's data do
    (``ends``); the Regions' counts are the groups'."""
    rule = RegionRule(targets.any, 0.5, DOMAIN_MAX_GAP, DOMAIN_MIN_LENGTH)
    found = {}
    for direction, states in zip(targets.directions, targets.states):
        found[direction] = {}
        for chrom, (starts, meth, cov) in windows.items():
            target = post[chrom][:, list(states)].sum(axis=1)
            columns = [(g, meth[:, g], cov[:, g]) for g in range(meth.shape[1])]
            regions = regions_of(starts, target, columns, meth.shape[1], window, rule)
            found[direction][chrom] = regions.cut_at(ends[chrom], rule.min_length)
    return found


# -- 4. the posterior pass --------------------------------------------------------------------
@dataclass
class DomainCounts:
    """What the posterior pass counts inside a domain: its samples' reads, its covered bins
    and how many of them the bin model puts in the domain's direction (posterior >= 0.5)."""

    methylated: np.ndarray  # (S,)
    coverage: np.ndarray  # (S,)
    n_bins: int = 0
    n_differing: int = 0

    def __add__(self, other: "DomainCounts") -> "DomainCounts":
        return DomainCounts(self.methylated + other.methylated, self.coverage + other.coverage,
                            self.n_bins + other.n_bins, self.n_differing + other.n_differing)

    @property
    def share(self) -> float:
        """The share of its covered bins that differ in its direction."""
        return self.n_differing / self.n_bins if self.n_bins else 0.0


@dataclass
class ChunkFindings:
    """What the posterior pass keeps of a chunk: per direction its candidate regions, the
    counts inside each domain it overlaps, and the posterior track's values."""

    candidates: list  # per direction, Regions
    domain_counts: dict  # {domain number: DomainCounts}
    track: tuple | None  # (bin starts, posterior of difference float32)


def _chunk_findings(post, data, targets: Targets, rule: RegionRule, domains: dict, want_track: bool
                    ) -> ChunkFindings:
    """A chunk's findings (in a task, map_posteriors); ``domains``: {chrom: (k, 4) number,
    start, end, direction (index into targets.directions) of its domains}."""
    ref = data.ref
    positions = ref.positions(data.rows)
    n_samples = len(ref.columns)
    target = [post[:, list(states)].sum(axis=1) for states in targets.states]
    candidates = [regions_of(positions, values, data.sample_counts(), n_samples, ref.bin_size, rule)
                  for values in target]
    inside = []
    if positions.size:
        inside = [(int(d), (positions >= start) & (positions < end), int(direction))
                  for d, start, end, direction in domains.get(ref.chrom, ())
                  if start < positions[-1] + ref.bin_size and end > positions[0]]
    counts = {d: DomainCounts(np.zeros(n_samples), np.zeros(n_samples), int(mask.sum()),
                              int((target[direction][mask] >= 0.5).sum())) for d, mask, direction in inside}
    if inside:
        for k, m, c in data.sample_counts():
            for d, mask, _ in inside:
                counts[d].methylated[k] = m[mask].sum()
                counts[d].coverage[k] = c[mask].sum()
    track = (positions, post[:, list(targets.any)].sum(axis=1).astype(np.float32)) if want_track else None
    return ChunkFindings(candidates, counts, track)


@dataclass
class Findings:
    """The posterior pass's result."""

    candidates: dict  # {direction: {chrom: Regions}}
    domain_counts: dict  # {domain number: DomainCounts}


def find_candidates(store: CountsStore, samples: list, hmm: GroupedBinomialHMM, client, targets: Targets,
                    rule: RegionRule, domains: dict, on_track=None, progress=None) -> Findings:
    """The posterior pass: candidate DMRs per direction and chromosome, joined across the
    chunks' seams; the counts inside each domain (``domains``: {chrom: (k, 4) number, start,
    end, direction}); ``on_track(chrom, starts, values)`` for each chunk's posterior of difference."""
    found = Findings({d: {c: Regions.empty(len(samples)) for c in store.chromosomes} for d in targets.directions},
                     {})
    for ref, chunk in map_posteriors(store, samples, Params.of(hmm), client, _chunk_findings,
                                     (targets, rule, domains, on_track is not None),
                                     f"the DMRs of {store.path}", progress):
        for direction, regions in zip(targets.directions, chunk.candidates):
            found.candidates[direction][ref.chrom] = join_regions(found.candidates[direction][ref.chrom], regions,
                                                                  rule.max_gap, rule.bridge_covered)
        for d, counts in chunk.domain_counts.items():
            found.domain_counts[d] = found.domain_counts[d] + counts if d in found.domain_counts else counts
        if chunk.track is not None:
            on_track(ref.chrom, *chunk.track)
    return found
