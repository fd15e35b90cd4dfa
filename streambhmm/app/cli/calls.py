"""`hmr` and `pmd`: regions from a counts store in one command."""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from ...distributed.cluster import store_session
from .common import (CHROM_SIZES_FILE, NON_NEGATIVE, OUTPUT_FILE, POSITIVE, STORE, names, quiet_option,
                     scheduler_option, step_lines, user_errors)

_OUTPUT = click.option("--output", "-o", required=True, type=OUTPUT_FILE,
                       help="Regions (BED9); their details go beside it, NAME.tsv for NAME.bed (else "
                            "OUTPUT.tsv; per region: bins, length, score, and per sample the mean level and its "
                            "reads).")
_SAMPLES = click.option("--samples", default=None,
                        help="Comma-separated samples, one model shared along the genome (default: all); a region "
                             "is called where every one of them is hypomethylated (hmr) or partially methylated "
                             "(pmd).")
_MOMENTS = click.option("--moments", "moments_path", default=None, type=STORE,
                        help="A moment store of these counts (`streambhmm moments`, at the call's bin size): the "
                             "one pass is not repeated.")
_POLISH = click.option("--polish-em", default=0, show_default=True, type=NON_NEGATIVE, metavar="N",
                       help="At most N EM iterations after the one-pass fit, fewer when converged (relative gain "
                            "below 1e-8); each reads the counts once more.")
_CHROM_SIZES = click.option("--chrom-sizes", default=None, type=CHROM_SIZES_FILE,
                            help="UCSC chrom.sizes: a region on a chromosome's last bin ends where the chromosome "
                                 "does (default: where the bin does, which can pass the chromosome's end by less "
                                 "than a bin; UCSC refuses such a line).")
_SEED = click.option("--seed", default=0, show_default=True, type=NON_NEGATIVE, help="Seed of the fit's random starts.")
_SAVE_MODEL = click.option("--save-model", default=None, type=OUTPUT_FILE, metavar="FILE",
                           help="Also write the model the regions were found with (JSON, as `fit` writes one: for the "
                                "--model of `report`, `decode`, `regions` and `score`); written with the regions, or "
                                "not at all.")


def _call(kind, store, output, samples, moments_path, polish_em, seed, bin_size, scheduler, quiet, save_model,
          chrom_sizes):
    from ...distributed.regions import regions_table
    from ...distributed.tracks import ChromSizes
    from ...io.store import open_store
    from ..calls import (CallSettings, call_output_checked, chromosomes_left_out, missing_unmethylated,
                         hmr_notes, left_out_note, run_call)

    start = time.perf_counter()
    open_store(store)  # a path that is no store is said so first, not as one an output must stay out of
    call_output_checked(kind, output, store, moments_path, save_model)  # the table and model too, before the cluster
    chrom_sizes = ChromSizes.read(chrom_sizes, bigwig=False) if chrom_sizes else None  # before the store's lock
    settings = CallSettings(kind, store, output, names(samples, "--samples"),
                            moments_path, polish_em, bin_size, seed, quiet=quiet, save_model=save_model,
                            chrom_sizes=chrom_sizes)
    try:
        with store_session(store, scheduler, bin_size=settings.coarse_bin_size, em=polish_em > 0,
                           quiet=quiet) as opened:
            outcome = run_call(settings, opened, echo=step_lines(quiet))
            called = opened.store.restricted(set(opened.store.chromosomes) - set(outcome.left_out))
            left_out = chromosomes_left_out(called, outcome.samples)  # pmd's short chromosomes have a note of their own
            notes = hmr_notes(called, outcome) if kind == "hmr" else []
    except ValueError as exc:  # a refusal: files of an earlier call at these names are not this one's
        earlier = [str(path) for path in (output, regions_table(output)) if Path(path).exists()]
        if not earlier:
            raise
        left = "left as they were" if len(earlier) > 1 else "left as it was"
        raise ValueError(f"{exc} ({' and '.join(earlier)}: an earlier run's, {left})") from None
    by_level = np.argsort(outcome.hmm.methylation_.mean(axis=1), kind="stable")  # the fit keeps its own order
    levels = "; ".join(f"{'/'.join(f'{v:.2f}' for v in outcome.hmm.methylation_[h])} "
                       f"(overdispersion {'/'.join(f'{v:.3f}' for v in outcome.hmm.dispersion_[h])})"
                       + (" *" if h in outcome.rule.targets else "") for h in by_level)
    of = f"levels of {'/'.join(outcome.samples)}; " if len(outcome.samples) > 1 else ""
    click.echo(f"states ({of}* the {kind.upper()} states): {levels}")
    if outcome.em_stopped:
        click.echo(f"note: {outcome.em_stopped}; the regions can move with more iterations", err=True)
    if left_out:
        click.echo(f"note: {left_out}", err=True)
    for note in notes + [left_out_note(outcome)]:
        if note:
            click.echo(f"note: {note}", err=True)
    warning = missing_unmethylated(kind, outcome.samples, outcome.unmethylated)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    median = np.median(outcome.lengths) if outcome.n else 0
    steps = ", ".join(f"{step} {seconds:.1f} s" for step, seconds in outcome.seconds.items())
    plural = "" if outcome.n == 1 else "s"
    # the summary does not call them what the warning says they are not
    called = f"region{plural} (called as {kind.upper()}s: see the warning)" if warning else f"{kind.upper()}{plural}"
    click.echo(f"{output}: {outcome.n:,} {called}, median {median:,.0f} bp, "
               f"{outcome.lengths.sum() / 1e6:.2f} Mb in all, on {outcome.bin_size} bp bins "
               f"({time.perf_counter() - start:.1f} s: {steps})")
    if save_model:
        click.echo(f"model written to {save_model}")


def _call_options(fn):
    """The options `hmr` and `pmd` share (after STORE and --output)."""
    for option in reversed((_SAMPLES, _MOMENTS, _POLISH, _SEED, _SAVE_MODEL, _CHROM_SIZES, scheduler_option,
                            quiet_option)):
        fn = option(fn)
    return user_errors(fn)


@click.command()
@click.argument("store", type=STORE)
@_OUTPUT
@_call_options
def hmr(store, output, samples, moments_path, polish_em, seed, save_model, chrom_sizes, scheduler, quiet):
    """Hypomethylated regions (HMRs) of a counts store, as DNMTools' hmr finds them: a model
    with a hypomethylated state (level <= 0.2, overdispersion <= 0.2) beside three free
    background states, fitted from one pass over the counts (a free state as low, 92% of its
    levels below 0.5, is hypomethylated too); HMRs are runs of bins whose reads put their
    level at most 0.5 (posterior above 0.5, given the model), from the first to the last of
    at least 4 bins whose reads put it at most 0.2, bins at most 1 kb apart, reads in every
    sample and, pooled, putting the level at most 0.2 in every sample; then widened over their
    shoulders: the bins beside them nearer their level than the local background, the
    widened region below 0.5 (BED9 + TSV; the TSV's levels are the widened region's, so they
    may pass 0.2). A sample ingested from files that list
    methylated CpGs only (1,000 rows or more, none without a methylated read) is refused."""
    _call("hmr", store, output, samples, moments_path, polish_em, seed, None, scheduler, quiet, save_model, chrom_sizes)


@click.command()
@click.argument("store", type=STORE)
@_OUTPUT
@click.option("--bin-size", default=5000, show_default=True, type=POSITIVE,
              help="The domains' bins, a multiple of the store's: the store's bins are summed into them (no "
                   "second ingest).")
@_call_options
def pmd(store, output, bin_size, samples, moments_path, polish_em, seed, save_model, chrom_sizes, scheduler, quiet):
    """Partially methylated domains (PMDs) of a counts store, as DNMTools' pmd finds them: a
    two-state model on --bin-size bins fitted from one pass; PMDs are runs of the state
    below 0.7 (Lister et al. 2009) at least 50 kb long, gaps up to 10 kb (BED9 + TSV)."""
    _call("pmd", store, output, samples, moments_path, polish_em, seed, bin_size, scheduler, quiet, save_model,
          chrom_sizes)
