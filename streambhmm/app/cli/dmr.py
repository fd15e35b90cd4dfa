"""`dmr`: differentially methylated regions between groups of samples."""

from __future__ import annotations

import time

import click
import numpy as np

from ...distributed.cluster import store_session
from ...io.outputs import written_together
from .common import (CHROM_SIZES_FILE, NON_NEGATIVE, OUTPUT_FILE, POSITIVE, STORE, names, quiet_option,
                     scheduler_option, step_lines, user_errors)

_FRACTION = click.FloatRange(0.0, 1.0, min_open=True)
# Measured (docs/guide/dmr.md): H1 r1 against H1 r2 (dmrseq's chr21) gives 183 DMRs at --fdr
# 0.05, where r1 loses methylation over 1.5 Mb and r2 at 119 loci, each one way only.
NO_REPLICATES = ("every group has one sample: nothing tells a difference between the groups from one between two "
                 "samples of a group, so the DMRs and their q-values are those of differences between these "
                 "samples (give two replicates or more in a group to tell them apart)")


@click.command()
@click.argument("store", type=STORE)
@click.option("--groups", "sheet", required=True, type=click.Path(dir_okay=False, allow_dash=True),
              help="Sample sheet: a header naming the columns sample and group (or --group-column; tab-, blank- or "
                   "comma-separated; other columns ignored), a line per sample to compare (the store's others are "
                   "left out). Two groups or more, of any sizes, one sample or more each. - reads it from standard "
                   "input.")
@click.option("--group-column", default="group", show_default=True, metavar="NAME",
              help="The sheet's column that names each sample's group (e.g. case or cell in a DSS design table).")
@click.option("--output", "-o", required=True, type=OUTPUT_FILE,
              help="Focal DMRs (BED9, gains red, losses blue); beside it NAME.tsv for NAME.bed (else "
                   "OUTPUT.tsv; per DMR, ranked: bins, length, difference, posterior, lfdr, q-value, the "
                   "replicates' p-value, level per group and sample), and "
                   "STEM.domains.bed and .tsv: the domain-scale differences.")
@click.option("--min-difference", default=0.1, show_default=True, type=_FRACTION,
              help="A state is differential when its group levels differ by at least this much (DSS's delta), "
                   "and a DMR's or domain's own reads differ by this much in its direction.")
@click.option("--fdr", default=0.05, show_default=True, type=_FRACTION,
              help="Call regions while the mean local FDR of those called (their q-value) is at most this "
                   "(1: every candidate, with its q-value).")
@click.option("--contrast", default=None, metavar="A,B",
              help="Groups of the sheet to compare, in this order (default: all, in the sheet's order); the "
                   "difference is B's level minus A's.")
@click.option("--min-bins", default=2, show_default=True, type=POSITIVE,
              help="A DMR holds at least this many covered bins whose posterior of difference is at least 0.5, "
                   "and at least this many bins with reads of every group (a domain too).")
@click.option("--max-gap", default=200, show_default=True, type=NON_NEGATIVE, metavar="BP",
              help="Bins of a DMR lie at most this far apart.")
@click.option("--states", "background_states", default=10, show_default=True, type=click.IntRange(2, 30),
              help="EM's start: this many background levels (the pooled levels' quantiles) and, at half as many, "
                   "a gaining and a losing candidate; EM moves them, and BIC removes those the data do not pay "
                   "for.")
@click.option("--em-iter", default=30, show_default=True, type=POSITIVE,
              help="At most this many EM iterations per fit (fewer when an iteration gains less than 1e-6).")
@click.option("--ignore-replicates", is_flag=True,
              help="Call what the model calls, without the replicates' test (by default a call needs its replicates "
                   "to bear it out too: a moderated t test of the samples' levels, weighted by their reads, at p "
                   "0.05; the tables' replicate_p).")
@click.option("--no-domains", is_flag=True, help="No domain model: every candidate is a focal DMR (the domains' "
                                                 "BED and table are written empty, so no earlier run's are left "
                                                 "beside the DMRs).")
@click.option("--bigwig", default=None, type=OUTPUT_FILE, help="Also write each bin's posterior of difference "
                                                               "(bigWig).")
@click.option("--chrom-sizes", default=None, type=CHROM_SIZES_FILE,
              help="UCSC chrom.sizes for the --bigwig header (default: each chromosome ends at the store's last "
                   "bin); the BEDs' ends are clipped to it too.")
@scheduler_option
@quiet_option
@user_errors
def dmr(store, sheet, group_column, output, min_difference, fdr, contrast, min_bins, max_gap, background_states,
        em_iter, ignore_replicates, no_domains, bigwig, chrom_sizes, scheduler, quiet):
    """Differentially methylated regions between groups of samples (DSS's DMLtest + callDMR,
    dmrseq): a model whose states have a level per group, shared by the group's replicates
    (beta-binomial between them), fitted by EM on the store at a cost linear in samples;
    DMRs are runs of bins with a high posterior of differential states, called at --fdr."""
    from ...distributed.dmr import DmrSettings
    from ...distributed.tracks import ChromSizes
    from ...io.store import open_store
    from ...io.rows import first_few
    from ..calls import partial_chromosomes
    from ...learn.groups import REPLICATE_P
    from ..dmr import DmrJob, run_dmr, states_table
    from ..sheet import read_sheet

    start = time.perf_counter()
    if chrom_sizes == "-" and str(sheet) == "-":
        raise click.UsageError("--groups and --chrom-sizes both read standard input; give one of them as a file")
    whole_sheet = read_sheet(sheet, group_column)
    sheet_read = whole_sheet.contrast(names(contrast, "--contrast"))
    opened_before = open_store(store)
    sheet_read.check_samples(opened_before.samples, store)  # before any work; again under the lock
    for first, second in sheet_read.same_files(opened_before.meta.samples)[:3]:
        # an audit's duplicated sample: replicates alike by construction pass the replicates' test
        click.echo(f"warning: samples {first} and {second} were ingested from the same files (the same SHA-256): "
                   f"their reads are identical, so they are not replicates of each other, and the calls and their "
                   f"replicates' test would count one sample twice", err=True)
    settings = DmrSettings(min_difference=min_difference, background_states=background_states,
                           candidate_levels=max(1, background_states // 2), em_iter=em_iter,
                           max_gap=max_gap, min_bins=min_bins, domains=not no_domains,
                           replicates=not ignore_replicates)
    if chrom_sizes and not bigwig:
        raise click.UsageError("--chrom-sizes sets the --bigwig track's header; give --bigwig too")
    chrom_sizes = ChromSizes.read(chrom_sizes) if chrom_sizes else None  # before the store's lock
    job = DmrJob(store, sheet_read, output, fdr, bigwig, settings, chrom_sizes)
    job.check_outputs()
    if len(set(sheet_read.groups)) == len(sheet_read.samples):
        click.echo(f"warning: {NO_REPLICATES}", err=True)
    # the bigWig, the DMRs and the domains (each a BED and a table) appear together, or none of them
    with store_session(store, scheduler, em=True, quiet=quiet) as opened, written_together():
        outcome = run_dmr(job, opened, echo=step_lines(quiet), quiet=quiet)
        partial = partial_chromosomes(opened.store, list(sheet_read.samples))
        unused = [s for s in opened.store.samples if s not in whole_sheet.samples]  # not those --contrast leaves
    click.echo(f"states ({'/'.join(outcome.groups.names)}; * differential):")
    for line in states_table(outcome.hmm, min_difference):
        click.echo(f"  {line}")
    dmrs, domains = outcome.dmrs, outcome.domains
    counts = ", ".join(f"{sum(d == name for d in dmrs.direction):,} {name}" for name in outcome.targets.directions)
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in outcome.seconds.items())
    inside = f" ({outcome.absorbed:,} of them inside a differential domain)" if not no_domains else ""
    click.echo(f"{output}: {_found(dmrs.lengths, 'DMR', f' ({counts})')}, at FDR {fdr:g} of "
               f"{outcome.candidates:,} candidates{inside}")
    # written empty with --no-domains, so that a previous run's domains are not left beside these DMRs
    found = "none looked for (--no-domains); written empty" if no_domains else \
        _found(domains.lengths, "differential domain")
    click.echo(f"{job.outputs[2]}: {found} ({time.perf_counter() - start:.1f} s: {steps})")
    if outcome.em_stopped:
        # the default cap is a measured choice (docs/guide/dmr.md), not a failure: a note
        click.echo(f"note: {outcome.em_stopped}. On the benchmarks EM to convergence called DMRs of the same "
                   f"quality, for 3-7x the time; --em-iter {max(3 * em_iter, 300)} runs it further, and the calls "
                   f"can move", err=True)
    if any(outcome.unreplicated):
        left = " and ".join(f"{n:,} {what}" for n, what in zip(outcome.unreplicated, ("DMR(s)", "domain(s)")) if n)
        click.echo(f"{left} that the model called are left out: their replicates do not bear them out (a moderated "
                   f"t test of the samples' levels, weighted by their reads: p above {REPLICATE_P:g}); "
                   f"--ignore-replicates keeps them")
    carried = [(f"{n:,} of the {what}", str(table)) for what, regions, table in
               (("DMRs", dmrs, job.outputs[1]), ("domains", domains, job.outputs[3]))
               if (n := int(np.sum(regions.separation(outcome.groups) < 0)))]
    if carried:
        which, tables = zip(*carried)
        # tested, they passed: their replicates cross on a small difference (say so, not "one carries them")
        why = "one replicate may carry them" if ignore_replicates else \
            "small differences whose replicates' reads cross, yet bear them out as a whole (replicate_p)"
        click.echo(f"{' and '.join(which)} have a replicate of the lower group above one of the higher: {why} (a "
                   f"negative separation in {' and '.join(tables)})")
    if not outcome.targets.any:
        # not "the groups do not differ": a state's levels average its bins (a helper found 113 DMRs
        # differing by 0.3 or more at 0.1, none at 0.3)
        click.echo(f"no fitted state's group levels differ by {min_difference:g} or more, so no bin is a candidate. "
                   f"A state's levels average many bins: regions whose reads differ by {min_difference:g} can lie "
                   f"in states that differ less. To keep only those, call at a smaller --min-difference and keep "
                   f"the rows of {job.outputs[1]} whose difference is at least {min_difference:g} either way")
    if partial:  # a helper's chrY-like chromosome without one replicate's reads moved the calls elsewhere
        many = "1 chromosome has" if len(partial) == 1 else f"{len(partial):,} chromosomes have"
        click.echo(f"note: {many} reads in some of the sheet's samples but not in all: {first_few(partial)}. There "
                   f"a group's level comes from its other samples (a group without reads has no DMR), and the "
                   f"model fitted to all chromosomes weighs them too; to compare like with like, ingest without "
                   f"them (--exclude-chromosomes)", err=True)
    if unused:
        click.echo(f"note: the store's samples that the sheet does not name are left out: {first_few(unused)}",
                   err=True)
    if outcome.shared < 0.5:  # most of the data say nothing of one group: other chromosomes, assays, organisms
        click.echo(f"warning: every group has reads in only {outcome.shared:.1%} of the 5 kb windows with reads; "
                   f"a DMR needs reads of each group, so few can be found. Are the groups' samples of the same "
                   f"assay, chromosomes and genome?", err=True)


def _found(lengths: np.ndarray, noun: str, detail: str = "") -> str:
    """'3,201 DMRs (detail), median 400 bp', '1 DMR (detail), 400 bp', '0 DMRs (detail)'."""
    n = len(lengths)
    text = f"{n:,} {noun}{'' if n == 1 else 's'}{detail}"
    if n == 0:
        return text
    return f"{text}, {int(lengths[0]):,} bp" if n == 1 else f"{text}, median {np.median(lengths):,.0f} bp"
