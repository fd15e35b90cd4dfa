"""The `dmr` job: differentially methylated regions between groups of samples, from a counts
store and a sample sheet, as DSS and dmrseq find them from a BSseq object.

The sheet (tab- or space-separated, a header naming the columns ``sample`` and ``group``;
other columns are ignored) is read and checked against the store before any work. The
models and passes are distributed.dmr's: a model whose states have a level per group, fitted
by EM on the store; the posterior of differential states cut into candidate regions; and a
model of the groups' counts on 5 kb windows for domain-scale differences (a PMD of one group).

A candidate is a DMR only where its own reads differ as its states do: its groups' mean
levels at least --min-difference apart in its direction (RegionTable.differ_by; a run of
bins in a wide differential state can hold samples that agree). Each region gets a local
false discovery rate, lfdr = 1 - its highest bin posterior of differential states: an upper
bound on the posterior probability that none of its bins differs, so on the chance that it
overlaps no true difference. Regions are ranked by lfdr and called while the mean lfdr of
those called (the q-value: the FDR the model expects of the list, Newton et al. 2004) is at
most --fdr. The model's lfdr weighs the groups' reads, not how their replicates agree, so a
call is also tested on its replicates (learn.groups.replicate_pvalues: limma's moderated t on
its samples' levels, with precision weights) and kept where its p-value is at most
REPLICATE_P (--ignore-replicates: not applied).
Focal DMRs and domains are two lists, each with its own q-values: a focal
candidate in a called domain's direction, at least half of it inside the domain or near its
ends (_pieces_of_domains), is a piece of the domain and leaves the focal list.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..distributed.dmr import (DOMAIN_BIN_SIZE, DOMAIN_MAX_GAP, DOMAIN_MIN_SHARE, DmrSettings, Findings, Targets,
                               capped, find_candidates, fit_in_memory, fit_on_store, start_model, summarize,
                               window_regions)
from ..distributed.regions import RegionRule, check_regions_name, interval_counts, regions_table
from ..distributed.tracks import (BIGWIG_HEAD, DENSE_ENTRY_BYTES, BigWigWriter, bigwig_entries, check_bigwig_room,
                                  chromosome_lengths)
from ..io.bed import bed9_line, bed_order, track_head, track_line
from ..io.outputs import check_replaceable_file, remove_leftovers, replacing_pair, same_name
from ..io.progress import em_progress, stage
from ..io.store import store_inputs
from ..learn.checks import stationary_weights
from ..learn.groups import (REPLICATE_P, GroupedBinomialHMM, SampleGroups, group_differences, qvalues,
                             replicate_pvalues)
from .sheet import SampleSheet

DMR_TABLE_HEAD = b"rank\tname\tchrom\tstart\tend\t"  # how the DMRs' (and domains') tables begin
DMR_TRACK_HEAD = track_head(rb'[^"\n]*s between [^"\n]*')  # and their BEDs (write_table)
COLOURS = {"gain": "215,48,39", "loss": "69,117,180", "differs": "118,42,131"}  # red, blue, purple
DOMAIN_COLOURS = {"gain": "244,165,130", "loss": "146,197,222", "differs": "194,165,207"}  # lighter
LFDR_RANK_DECIMALS = 10  # lfdr is ranked to 1e-10 (RegionTable.ranked)


# -- the job ----------------------------------------------------------------------------------
@dataclass
class DmrJob:
    """The options of one `dmr` run."""

    store: str
    sheet: SampleSheet
    output: str
    fdr: float = 0.05
    bigwig: str | None = None
    settings: DmrSettings = field(default_factory=DmrSettings)
    chrom_sizes: str | None = None  # the bigWig header's lengths (UCSC chrom.sizes); default: the store's

    @property
    def outputs(self) -> list:
        """Every file the job writes: the focal DMRs (BED9, TSV), the domains (BED9, TSV), the track."""
        output = Path(self.output)
        domains = output.with_name(f"{output.stem}.domains{output.suffix or '.bed'}")
        paths = [output, regions_table(output), domains, regions_table(domains)]
        return paths + ([Path(self.bigwig)] if self.bigwig else [])

    def check_outputs(self) -> None:
        """Refuse, before any work, a file that cannot be written (io.outputs), or two outputs
        of one name."""
        check_regions_name(self.output)
        paths = self.outputs
        if any(same_name(a, b) for k, a in enumerate(paths) for b in paths[k + 1:]):  # links too
            raise ValueError(f"{self.bigwig}: the track would replace one of the regions' files "
                             f"({', '.join(map(str, paths[:-1]))}); give it another name")
        inputs = store_inputs(self.store, self.sheet.path, self.chrom_sizes)
        output, table, domains, domains_table = paths[:4]
        roles = ["", f"the table beside {output}", f"the domains beside {output}",
                 f"the domains' table beside {output}", ""]
        for path, role in zip(paths, roles):  # the sheet or an ingested file as an output: refused, not replaced
            inputs.check(path, role)
        check_replaceable_file(output, DMR_TRACK_HEAD)
        for path, ours in ((table, DMR_TABLE_HEAD), (domains, DMR_TRACK_HEAD), (domains_table, DMR_TABLE_HEAD)):
            check_replaceable_file(path, ours, output)  # named after --output: never someone else's file
        for path in paths[4:]:  # --bigwig
            check_replaceable_file(path, BIGWIG_HEAD)

    def track_lengths(self, store) -> dict | None:
        """The bigWig header's chromosome lengths (None without --bigwig): --chrom-sizes', each
        refused where the store's data reach past it, else the end of the store's last bin."""
        if not self.bigwig:
            return None
        return chromosome_lengths(store, self.chrom_sizes)


@dataclass
class RegionTable:
    """Called regions, one row each, in rank order (strongest evidence first)."""

    kind: str  # "DMR" or "domain"
    chrom: list
    start: np.ndarray
    end: np.ndarray
    n_bins: np.ndarray
    direction: list
    posterior: np.ndarray  # mean posterior of the direction's states over the region's bins
    lfdr: np.ndarray
    qvalue: np.ndarray
    methylated: np.ndarray  # (regions, S)
    coverage: np.ndarray
    replicate_p: np.ndarray | None = None  # the replicates' test (NaN: no test)

    def __len__(self) -> int:
        return len(self.chrom)

    @property
    def lengths(self) -> np.ndarray:
        return self.end - self.start

    def sample_levels(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.methylated / self.coverage

    def group_levels(self, groups: SampleGroups) -> np.ndarray:
        """Per region and group, the mean of its samples' levels (samples without reads left out)."""
        levels = self.sample_levels()
        out = np.full((len(self), groups.n_groups), np.nan)
        for g in range(groups.n_groups):
            part = levels[:, groups.samples_of(g)]
            seen = np.isfinite(part)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[:, g] = np.where(seen, part, 0).sum(axis=1) / seen.sum(axis=1)
        return out

    def differences(self, groups: SampleGroups) -> np.ndarray:
        """Two groups: the second's level minus the first's; more: the largest minus the smallest."""
        levels = self.group_levels(groups)
        return levels[:, 1] - levels[:, 0] if groups.n_groups == 2 else group_differences(levels)

    def compared(self, groups: SampleGroups) -> tuple[np.ndarray, np.ndarray]:
        """Per region, the groups it compares (higher, lower): two groups as its direction
        says; more: the highest and the lowest group."""
        if groups.n_groups == 2:
            gain = np.array([d != "loss" for d in self.direction], bool)
            return np.where(gain, 1, 0), np.where(gain, 0, 1)
        group_levels = np.nan_to_num(self.group_levels(groups))
        return group_levels.argmax(axis=1), group_levels.argmin(axis=1)

    def replicates_agree(self, groups: SampleGroups) -> np.ndarray:
        """Per region, whether its replicates bear its difference out: the precision-weighted
        moderated t test of learn.groups.replicate_pvalues (higher group against lower), its
        p-value at most REPLICATE_P; a region it cannot test (one sample per group,
        or a group without reads) passes. Sets ``replicate_p``. A check of each call, not a
        false discovery rate: the p-values are of the reads that made the calls."""
        high, low = self.compared(groups)
        self.replicate_p = replicate_pvalues(self.methylated, self.coverage, groups, high, low)
        return ~(self.replicate_p > REPLICATE_P)

    def separation(self, groups: SampleGroups) -> np.ndarray:
        """Per region, the smallest difference in its direction between a sample of the higher
        group and a sample of the lower (two groups: as the direction says; more: the highest
        and the lowest group): negative when two replicates differ the other way, so a call
        that one replicate carries shows; NaN when a group has no sample with reads."""
        levels = self.sample_levels()
        lowest = np.full((len(self), groups.n_groups), np.nan)
        highest = np.full((len(self), groups.n_groups), np.nan)
        for g in range(groups.n_groups):
            part = levels[:, groups.samples_of(g)]
            seen = np.isfinite(part).any(axis=1)
            lowest[seen, g] = np.nanmin(part[seen], axis=1)
            highest[seen, g] = np.nanmax(part[seen], axis=1)
        high, low = self.compared(groups)
        rows = np.arange(len(self))
        unread = np.isnan(lowest).any(axis=1)
        return np.where(unread, np.nan, lowest[rows, high] - highest[rows, low])

    def differ_by(self, groups: SampleGroups, min_difference: float) -> np.ndarray:
        """Per region, whether its reads show its direction by at least ``min_difference``
        (a loss: the second group's level that much below the first's); a region where a
        group has no read shows none. The states say where the groups differ; a region is
        a DMR when its own counts do too."""
        shown = self.differences(groups) * np.array([-1.0 if d == "loss" else 1.0 for d in self.direction])
        return np.nan_to_num(shown, nan=-1.0) >= min_difference - 1e-12

    def take(self, index) -> "RegionTable":
        index = np.asarray(index, np.int64)
        return RegionTable(self.kind, [self.chrom[k] for k in index], self.start[index], self.end[index],
                           self.n_bins[index], [self.direction[k] for k in index], self.posterior[index],
                           self.lfdr[index], self.qvalue[index], self.methylated[index], self.coverage[index],
                           None if self.replicate_p is None else self.replicate_p[index])

    def ranked(self, groups: SampleGroups) -> "RegionTable":
        """Strongest evidence first: lfdr, then the larger area (bins x |difference|, DSS's areaStat in spirit).
        lfdr is ranked to 1e-10: below that its digits are rounding (1 minus a posterior near 1),
        which moved with the chunk size and renamed the DMRs."""
        area = self.n_bins * np.nan_to_num(np.abs(self.differences(groups)))
        return self.take(np.lexsort((self.start, -area, np.round(self.lfdr, LFDR_RANK_DECIMALS))))


def _table(kind: str, rows: list, n_samples: int) -> RegionTable:
    """A RegionTable from (chrom, direction, Regions) rows, with q-values of the whole list."""
    chrom = [c for c, _, r in rows for _ in range(len(r))]
    direction = [d for _, d, r in rows for _ in range(len(r))]
    cat = (lambda name, empty: np.concatenate([getattr(r, name) for _, _, r in rows] + [empty]))
    n_bins = cat("n_bins", np.zeros(0, np.int64))
    lfdr = np.clip(1.0 - cat("posterior_max", np.zeros(0)), 0.0, 1.0)
    return RegionTable(kind, chrom, cat("start", np.zeros(0, np.int64)), cat("end", np.zeros(0, np.int64)), n_bins,
                       direction, cat("posterior_sum", np.zeros(0)) / np.maximum(n_bins, 1), lfdr, qvalues(lfdr),
                       cat("methylated", np.zeros((0, n_samples))), cat("coverage", np.zeros((0, n_samples))))


@dataclass
class DmrOutcome:
    """What a `dmr` run fitted, found and wrote."""

    samples: list
    groups: SampleGroups
    hmm: GroupedBinomialHMM  # the bin model
    domain_hmm: GroupedBinomialHMM | None
    targets: Targets
    dmrs: RegionTable  # called, ranked
    domains: RegionTable
    candidates: int  # focal candidates before the FDR cut
    absorbed: int  # focal candidates that are pieces of a called domain
    history: list
    em_stopped: str = ""  # how EM stopped at its cap before converging ("" when it converged)
    seconds: dict = field(default_factory=dict)
    track_bins: int = 0
    shared: float = 1.0  # of the 5 kb windows with reads, the share where every group has reads
    unreplicated: tuple = (0, 0)  # DMRs and domains the model called that their replicates do not bear out


def _recounted(table, store, samples, groups, settings) -> np.ndarray:
    """Give ``table``'s calls every read of their intervals; which of them still differ, and
    compare the groups in at least --min-bins bins where each has reads (a bin of one group's
    reads beside a bin of the other's is no evidence: a DMR of 39/39 against 0/1 in other bins
    had lfdr 0.009)."""
    counts = interval_counts(store, samples, table.chrom, table.start, table.end, groups.members)
    table.methylated, table.coverage, table.n_bins = counts.methylated, counts.coverage, counts.covered
    return table.differ_by(groups, settings.min_difference) & (counts.compared >= settings.min_bins)


def run_dmr(job: DmrJob, opened, echo=lambda message: None, quiet: bool = True) -> DmrOutcome:
    """Fit, find and write the DMRs of ``job`` on the store ``opened``
    (distributed.cluster.store_session); each step's progress is shown unless ``quiet``
    (io.progress)."""
    job.check_outputs()
    store, client, settings = opened.store, opened.client, job.settings
    job.sheet.check_samples(store.samples, job.store)
    lengths = job.track_lengths(store)  # before any work: sizes of another assembly are refused
    samples, groups = list(job.sheet.samples), job.sheet.sample_groups
    if job.bigwig:
        check_bigwig_room(Path(job.bigwig).parent, job.bigwig, n_files=1, n_entries=bigwig_entries(store, samples),
                          entry_bytes=DENSE_ENTRY_BYTES)
    seconds = {}
    start = time.perf_counter()
    echo("the summary: one pass over the counts")
    summary = summarize(store, samples, groups, client, quiet=quiet)
    if not summary.windows:
        raise ValueError(f"{job.store}: the samples {', '.join(samples)[:200]} have no coverage")
    covered = np.concatenate([cov for _, _, cov in summary.windows.values()]) > 0
    shared = float(covered.all(axis=1).sum() / max(covered.any(axis=1).sum(), 1))
    seconds["summary"] = time.perf_counter() - start

    start = time.perf_counter()
    domain_hmm, domain_found = None, {}
    if settings.domains:
        echo(f"the domains: a model of the groups on {DOMAIN_BIN_SIZE // 1000} kb windows")
        domain_hmm, domain_found = _fit_domains(summary, groups, settings)
    seconds["domains"] = time.perf_counter() - start

    start = time.perf_counter()
    echo(f"the bins: EM, at most {settings.em_iter} iterations, then at most {settings.resume_iter} after each time "
         f"BIC removes states (at most {settings.most_iterations} in all)")
    hmm = start_model(summary.quantiles(settings.background_states), groups,
                      summary.quantiles(settings.candidate_levels))
    with stage("dmr: EM", settings.most_iterations, quiet=quiet, unit="iterations", capped=True) as shown:
        hmm, history, last_fit = fit_on_store(store, samples, hmm, opened.em_client, settings,
                                              report=em_progress(shown))
    seconds["EM"] = time.perf_counter() - start

    start = time.perf_counter()
    echo("the regions: a posterior pass over the counts")
    targets = Targets.of(hmm.group_methylation_, settings.min_difference)
    domain_table = _table("domain", [(c, d, r) for d, per in domain_found.items() for c, r in per.items()],
                          groups.n_groups)
    called_domains = np.flatnonzero(domain_table.qvalue <= job.fdr)
    findings, track_bins = _find_candidates(job, opened, samples, hmm, targets,
                                            _domain_spans(domain_table, called_domains, targets), lengths, quiet)
    seconds["regions"] = time.perf_counter() - start

    domains = _domains_with_samples(domain_table, called_domains, findings, len(samples))
    domains = domains.take(np.flatnonzero(domains.differ_by(groups, settings.min_difference)))
    candidates = _table("DMR", [(c, d, r.take(r.n_bins >= settings.min_bins))
                                for d, per in findings.candidates.items() for c, r in per.items()], len(samples))
    candidates = candidates.take(np.flatnonzero(_recounted(candidates, store, samples, groups, settings)))
    pieces = _pieces_of_domains(candidates, domains)
    domains = _merge_overlapping(domains)
    unreplicated_domains = 0
    while True:  # a domain's levels: those of the interval written, its ends moved out to its pieces
        differs = _recounted(domains, store, samples, groups, settings)
        replicated = domains.replicates_agree(groups)  # shown in the table, applied unless ignored
        if settings.replicates:
            unreplicated_domains += int((differs & ~replicated).sum())
            differs &= replicated
        if differs.all():
            break
        domains = domains.take(np.flatnonzero(differs))
        pieces = _pieces_of_domains(candidates, domains)  # a dropped domain's pieces are focal candidates again
        domains = _merge_overlapping(domains)
    focal = candidates.take(np.flatnonzero(~pieces))
    focal.qvalue = qvalues(focal.lfdr)
    dmrs = focal.take(np.flatnonzero(focal.qvalue <= job.fdr))
    replicated = dmrs.replicates_agree(groups)  # of the calls, those their replicates bear out
    unreplicated = 0
    if settings.replicates:
        unreplicated, dmrs = int((~replicated).sum()), dmrs.take(np.flatnonzero(replicated))
    dmrs = dmrs.ranked(groups)
    domains = domains.ranked(groups)
    if lengths:  # the bigWig's lengths: with --chrom-sizes, a last bin past a chromosome's end ends there
        for table in (dmrs, domains):
            table.end = np.minimum(table.end, [lengths[c] for c in table.chrom]).astype(table.end.dtype)
    outputs = job.outputs
    write_table(dmrs, groups, samples, outputs[0], Path(job.store).name)
    write_table(domains, groups, samples, outputs[2], Path(job.store).name)
    return DmrOutcome(samples, groups, hmm, domain_hmm, targets, dmrs, domains, len(candidates),
                      int(pieces.sum()), history, em_stopped(last_fit, settings), seconds, track_bins, shared,
                      (unreplicated, unreplicated_domains))


def em_stopped(fit, settings) -> str:
    """How the bins' last EM stopped at its cap before converging ("" when it converged)."""
    cap = len(fit.history) - 1
    after = "" if cap == settings.em_iter else " (after BIC removed states: a third of --em-iter)"
    return fit.stopped_short(f"its cap of {cap} iteration(s){after}", settings.em_tol)


def _domain_spans(table: "RegionTable", called: np.ndarray, targets: Targets) -> dict:
    """Per chromosome, the called domains as rows (index, start, end, direction's index)."""
    spans = {}
    for k in called:
        spans.setdefault(table.chrom[k], []).append(
            (k, table.start[k], table.end[k], targets.directions.index(table.direction[k])))
    return {c: np.array(v, np.int64) for c, v in spans.items()}


def _find_candidates(job: DmrJob, opened, samples: list, hmm: GroupedBinomialHMM, targets: Targets, spans: dict,
                     track_lengths: dict | None, quiet: bool) -> tuple[Findings, int]:
    """The posterior pass: the candidate regions, and the bins written to the optional bigWig
    of the posterior of difference (removed again if the pass fails)."""
    store, settings = opened.store, job.settings
    rule = RegionRule(targets.any, settings.min_posterior, settings.max_gap, 0, settings.min_bins, "DMR")
    writer = None
    if job.bigwig:
        remove_leftovers(job.bigwig)
        writer = BigWigWriter(job.bigwig, track_lengths, store.bin_size)
    try:
        with stage("dmr: regions", quiet=quiet, unit="chunks") as progress:
            findings = find_candidates(store, samples, hmm, opened.client, targets, rule, spans,
                                       None if writer is None else writer.add, progress)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None:
        return findings, 0
    writer.close()
    return findings, writer.entries


def _fit_domains(summary, groups: SampleGroups, settings: DmrSettings):
    """The domain model on the groups' window counts, and its candidate domains
    ({direction: {chrom: Regions}}, the Regions' counts per group)."""
    chroms = list(summary.windows)
    windows = {c: (starts, *capped(meth, cov)) for c, (starts, meth, cov) in summary.windows.items()}
    meth = np.concatenate([windows[c][1] for c in chroms])
    cov = np.concatenate([windows[c][2] for c in chroms])
    lengths = np.array([summary.windows[c][0].size for c in chroms], np.int64)
    columns = SampleGroups(groups.names, tuple(range(groups.n_groups)))
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = meth.sum(axis=1) / cov.sum(axis=1)
    background = np.quantile(pooled[np.isfinite(pooled)], (np.arange(settings.domain_background_states) + 0.5)
                             / settings.domain_background_states)
    hmm = fit_in_memory(meth, cov, lengths, start_model(background, columns), settings)
    targets = Targets.of(hmm.group_methylation_, settings.min_difference)
    if not targets.any:
        return hmm, {}
    post = {}
    for c in chroms:
        post[c] = hmm.predict_proba(windows[c][1], windows[c][2])
    return hmm, window_regions(summary.windows, post, targets, summary.window, summary.ends)


def _domains_with_samples(table: RegionTable, called: np.ndarray, findings: Findings, n_samples: int) -> RegionTable:
    """The called domains where most bins differ (DOMAIN_MIN_SHARE), their counts per sample
    (the posterior pass's) in place of the groups'."""
    counts = [findings.domain_counts.get(int(k)) for k in called]
    kept = [k for k, c in zip(called, counts) if c is not None and c.share >= DOMAIN_MIN_SHARE]
    out = table.take(kept)
    out.methylated = np.array([findings.domain_counts[int(k)].methylated for k in kept]).reshape(len(kept), n_samples)
    out.coverage = np.array([findings.domain_counts[int(k)].coverage for k in kept]).reshape(len(kept), n_samples)
    out.n_bins = np.array([findings.domain_counts[int(k)].n_bins for k in kept], np.int64)
    return out


def _pieces_of_domains(candidates: RegionTable, domains: RegionTable) -> np.ndarray:
    """Per focal candidate, whether it is a piece of a called domain: in the domain's direction,
    at least half of it inside the domain or within DOMAIN_MAX_GAP of its ends, or of a piece
    beyond them (its 5 kb windows end a domain roughly). A domain's ends move out to its
    pieces (run_dmr then counts its reads over the interval so widened)."""
    pieces = np.zeros(len(candidates), bool)
    chrom, direction = np.array(candidates.chrom), np.array(candidates.direction)
    for k in range(len(domains)):
        same = (chrom == domains.chrom[k]) & (direction == domains.direction[k])
        while True:  # pieces beyond an end, each within DOMAIN_MAX_GAP of the last
            start, end = domains.start[k] - DOMAIN_MAX_GAP, domains.end[k] + DOMAIN_MAX_GAP
            overlap = np.minimum(candidates.end, end) - np.maximum(candidates.start, start)
            piece = same & (2 * overlap >= candidates.lengths) & ~pieces
            if not piece.any():
                break
            domains.start[k] = min(domains.start[k], candidates.start[piece].min())
            domains.end[k] = max(domains.end[k], candidates.end[piece].max())
            pieces |= piece
    return pieces


def _merge_overlapping(domains: RegionTable) -> RegionTable:
    """One domain for each set of domains in one direction that overlap once their ends moved
    out to their pieces (_pieces_of_domains): the union of their windows, whose bins and
    posteriors add up (the windows are disjoint), its lfdr and q-value the best of them (its
    counts: run_dmr's, over the merged interval)."""
    order = sorted(range(len(domains)), key=lambda k: (domains.chrom[k], domains.direction[k], domains.start[k]))
    merged: list[list[int]] = []
    end = None  # of the last set: its domains' furthest end
    for k in order:
        same = merged and (domains.chrom[k], domains.direction[k]) == (domains.chrom[merged[-1][0]],
                                                                       domains.direction[merged[-1][0]])
        if same and domains.start[k] < end:
            merged[-1].append(k)
            end = max(end, domains.end[k])
        else:
            merged.append([k])
            end = domains.end[k]
    if all(len(group) == 1 for group in merged):
        return domains
    out = domains.take([group[0] for group in merged])
    for row, group in enumerate(merged):
        out.start[row] = domains.start[group].min()
        out.end[row] = domains.end[group].max()
        out.n_bins[row] = domains.n_bins[group].sum()
        out.posterior[row] = (domains.posterior[group] * domains.n_bins[group]).sum() / max(out.n_bins[row], 1)
        out.lfdr[row], out.qvalue[row] = domains.lfdr[group].min(), domains.qvalue[group].min()
    return out


# -- the files --------------------------------------------------------------------------------
def write_table(table: RegionTable, groups: SampleGroups, samples: list, output, source: str) -> None:
    """BED9 in genome order (name: kind and rank; score 1000 x (1 - lfdr); colour by
    direction: gain red, loss blue) and beside it (NAME.tsv for NAME.bed) the table in rank
    order. Both are written to temporary names and renamed when complete."""
    prefix = "DMR" if table.kind == "DMR" else "DMD"
    colours = COLOURS if table.kind == "DMR" else DOMAIN_COLOURS
    levels = table.sample_levels()
    group_levels = table.group_levels(groups)
    differences = table.differences(groups)
    separation = table.separation(groups)
    rank = {chrom: i for i, chrom in enumerate(bed_order(set(table.chrom)))}
    order = sorted(range(len(table)), key=lambda k: (rank[table.chrom[k]], table.start[k]))
    names = [f"{prefix}{k + 1}" for k in range(len(table))]
    score = np.clip(np.rint(1000 * (1 - table.lfdr)), 0, 1000).astype(np.int64)
    what = "two groups: the second's level minus the first's" if groups.n_groups == 2 else "the largest minus the smallest"
    with replacing_pair(output, regions_table(output)) as (bed, tsv):
        # named after the file (calls of other groups of one store apart in a browser)
        bed.write(track_line(Path(output).stem, f"{table.kind}s between {' and '.join(groups.names)} in {source} "
                                                f"(difference: {what})"))
        for k in order:
            bed.write(bed9_line(table.chrom[k], int(table.start[k]), int(table.end[k]), names[k], int(score[k]),
                                colours[table.direction[k]]))
        columns = ["length", "n_bins", "direction", "difference", "posterior", "lfdr", "qvalue", "separation",
                   "replicate_p", *level_columns(groups.names, samples), *[f"reads_{s}" for s in samples]]
        replicate_p = np.full(len(table), np.nan) if table.replicate_p is None else table.replicate_p
        tsv.write(DMR_TABLE_HEAD.decode() + "\t".join(columns) + "\n")
        for k in range(len(table)):
            tsv.write("\t".join([str(k + 1), names[k], table.chrom[k], str(int(table.start[k])),
                                 str(int(table.end[k])), str(int(table.lengths[k])), str(int(table.n_bins[k])),
                                 table.direction[k], _number(differences[k]), f"{table.posterior[k]:.4f}",
                                 f"{table.lfdr[k]:.3g}", f"{table.qvalue[k]:.3g}", _number(separation[k]),
                                 "NA" if np.isnan(replicate_p[k]) else f"{replicate_p[k]:.3g}",
                                 *map(_number, group_levels[k]), *map(_number, levels[k]),
                                 *(str(int(c)) for c in table.coverage[k])]) + "\n")
        bed.flush()


def level_columns(groups, samples) -> list[str]:
    """level_GROUP per group, then level_SAMPLE per sample; when a sample is named like a group
    (one sample per group, named alike) every sample's is level_sample_SAMPLE, so no two
    columns share a name."""
    prefix = "level_sample_" if set(groups) & set(samples) else "level_"
    return [f"level_{g}" for g in groups] + [f"{prefix}{s}" for s in samples]


def _number(value: float) -> str:
    return f"{value:.4f}" if np.isfinite(value) else "NA"


def states_table(hmm: GroupedBinomialHMM, min_difference: float) -> list:
    """One line per state (least methylated first): group levels, overdispersions, weight, '*'
    for a differential state."""
    levels, dispersion = hmm.group_methylation_, hmm.group_dispersion_
    weights = stationary_weights(hmm.transmat_)
    differs = group_differences(levels) >= min_difference - 1e-12
    lines = []
    for h in np.argsort(levels.mean(axis=1), kind="stable"):
        lines.append(f"{'/'.join(f'{v:.2f}' for v in levels[h])} (overdispersion "
                     f"{'/'.join(f'{v:.3f}' for v in dispersion[h])}, weight {weights[h]:.4f})"
                     + (" *" if differs[h] else ""))
    return lines
