"""`score`, `decode`, `regions`, `tracks`, `report`: what a model says of a store."""

from __future__ import annotations

import time

import click
import numpy as np

from ...distributed.cluster import store_session
from ...io.outputs import written_together
from ...io.progress import printed, stage
from ...learn.states import DIFF_THRESHOLD
from .common import (CHROM_SIZES_FILE, NON_NEGATIVE, OUTPUT_DIR, OUTPUT_FILE, OUTPUT_PREFIX, POSITIVE, STORE, names,
                     quiet_option, scheduler_option, user_errors)


def _model_on_store(fn):
    """STORE and --model: the arguments every command of a model on a store starts with."""
    fn = click.option("--model", "model", required=True, type=click.Path(exists=True, dir_okay=False))(fn)
    return click.argument("store", type=STORE)(fn)


@click.command()
@_model_on_store
@click.option("--chromosomes", default=None, help="Comma-separated chromosomes (default: all).")
@scheduler_option
@quiet_option
@user_errors
def score(store, model, chromosomes, scheduler, quiet):
    """Log-likelihood of a counts store under a model, per chromosome and in total
    (binomial coefficients included; exact across chunks)."""
    from ..modelio import model_for_store
    from ..segments import run_score

    start = time.perf_counter()
    wanted = names(chromosomes, "--chromosomes")
    with store_session(store, scheduler, quiet=quiet) as opened:
        document = model_for_store(opened.store, model)
        per_chrom = run_score(opened.store, document.hmm(), opened.client, document.samples, wanted,
                              document.pooled)
    width = max(10, *(len(c) for c in per_chrom))
    click.echo(f"{'chromosome':<{width}} {'log-likelihood':>18}")
    for chrom, value in per_chrom.items():
        click.echo(f"{chrom:<{width}} {value:>18.6f}")
    click.echo(f"{'total':<{width}} {sum(per_chrom.values()):>18.6f}")
    if not quiet:
        click.echo(f"scored in {time.perf_counter() - start:.1f} s")


@click.command()
@_model_on_store
@click.option("--output", "-o", required=True, type=OUTPUT_FILE,
              help="Segments (BED). A pooled model writes one BED per sample: OUTPUT with .SAMPLE before its "
                   "extension.")
@click.option("--posteriors", is_flag=True, help="Also write state_posterior (bin x state) into the store.")
@click.option("--max-gap", default=1000, show_default=True, type=NON_NEGATIVE,
              help="Split a run where more than this many bp have no coverage.")
@scheduler_option
@quiet_option
@user_errors
def decode(store, model, output, posteriors, max_gap, scheduler, quiet):
    """Segment a counts store: each covered bin gets its most probable state (posterior
    decoding), and runs of one state are written as BED9 (named by the states' labels,
    coloured), with the states' table beside it (NAME.states.tsv for NAME.bed, else OUTPUT.states.tsv)."""
    from ..segments import ModelOnStore, decode_outputs, run_decode

    start = time.perf_counter()
    job = ModelOnStore.read(store, model)  # the outputs are checked before any work
    outputs = decode_outputs(job, output, posteriors)
    outputs.check(output, store, model)
    # with --posteriors decode writes into the store: its exclusive lock
    echo = printed(click.echo)
    with store_session(store, scheduler, write=posteriors, quiet=quiet) as opened, written_together(), \
            stage("decode", quiet=quiet, unit="chunks") as progress:
        for path, report in run_decode(job.on(opened.store), outputs, opened.client, max_gap, posteriors,
                                       progress=progress):
            echo(f"{path}: {report.n_segments:,} segments over {report.n_bins:,} covered bins "
                 f"({time.perf_counter() - start:.1f} s)")
            for h, n in enumerate(report.state_bins):
                levels = ", ".join(f"{v:.3f}" for v in job.hmm.methylation_[h])
                echo(f"  state {h} {job.labels[h]} ({levels}): {n:,} bins "
                     f"({n / max(report.n_bins, 1):.1%})")
    click.echo(f"states (labels, colours, levels) in {outputs.table}")
    if posteriors:
        click.echo(f"posteriors written to {store} (variable {'state_posterior'!r} of each chromosome group)")


@click.command()
@_model_on_store
@click.option("--preset", type=click.Choice(["hmr", "pmd"]), default=None,
              help="hmr: hypomethylated regions (states with level <= 0.2 and 92% of their levels below 0.5 in "
                   "every sample); pmd: partially methylated domains (states below 0.7, on bins under 5 kb not "
                   "hypomethylated; regions of 50 kb or more): "
                   "the rules of `streambhmm hmr` and `pmd` (docs/guide/hmr-pmd.md). The options below change a "
                   "preset's settings.")
@click.option("--targets", default=None,
              help="Comma-separated states (labels or indices) a region is made of, instead of a preset's.")
@click.option("--min-posterior", default=None, type=click.FloatRange(0.0, 1.0),
              help="A bin belongs to a region when the posterior of the states is at least this (0.5).")
@click.option("--max-gap", default=None, type=NON_NEGATIVE,
              help="Bins of a region lie at most this many bp apart (hmr 1000, pmd 10000, --targets 200).")
@click.option("--min-length", default=None, type=NON_NEGATIVE, help="Shortest region kept, bp (pmd 50000).")
@click.option("--min-bins", default=None, type=POSITIVE, help="Fewest bins of the states per region (hmr 4).")
@click.option("--output", "-o", required=True, type=OUTPUT_FILE,
              help="Regions (BED9); their details go beside it, NAME.tsv for NAME.bed (else OUTPUT.tsv).")
@scheduler_option
@quiet_option
@user_errors
def regions(store, model, preset, targets, min_posterior, max_gap, min_length, min_bins, output, scheduler,
            quiet):
    """Regions of a counts store under a model: runs of bins whose posterior of chosen states
    (a preset's, or --targets) is high, merged across small gaps (BED9 and a TSV)."""
    from ..segments import ModelOnStore, output_checked, region_rule, run_regions

    start = time.perf_counter()
    if (preset is None) == (targets is None):
        raise click.UsageError("give one of --preset and --targets")
    output_checked(output, "regions", store, model)  # and the table beside it
    with store_session(store, scheduler, quiet=quiet) as opened:
        job = ModelOnStore.open(opened.store, model)
        rule = region_rule(job, preset, targets, min_posterior=min_posterior, max_gap=max_gap,
                           min_length=min_length, min_bins=min_bins)
        with stage("regions", quiet=quiet, unit="chunks") as progress:
            found = run_regions(job, rule, output, opened.client, progress=progress)
    states = ", ".join(job.labels[h] for h in rule.targets)
    seconds = time.perf_counter() - start
    if not found.n:
        click.echo(f"{output}: no regions of states {states}: no run of their bins passed the rule ({seconds:.1f} s)")
        return
    click.echo(f"{output}: {found.n:,} regions of states {states}, median {np.median(found.lengths):,.0f} bp, "
               f"{found.lengths.sum() / 1e6:.2f} Mb in all ({seconds:.1f} s)")


@click.command()
@click.argument("store", type=STORE)
@click.option("--output", "-o", "prefix", required=True, metavar="PREFIX", type=OUTPUT_PREFIX,
              help="Files are PREFIX.SAMPLE.methylation.bw and PREFIX.stateH-LABEL.posterior.bw (pooled model: "
                   "PREFIX.SAMPLE.stateH-LABEL.posterior.bw).")
@click.option("--samples", default=None, help="Comma-separated samples whose methylation is written (default: the "
                                             "model's, else all).")
@click.option("--model", "model", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A model: also write the posterior of --targets.")
@click.option("--targets", default=None,
              help="Comma-separated states (labels or indices) whose posterior is written, one file each "
                   "(default with --model: every state).")
@click.option("--min-coverage", default=1, show_default=True, type=POSITIVE,
              help="Methylation of bins with at least this many reads.")
@click.option("--chrom-sizes", default=None, type=CHROM_SIZES_FILE,
              help="UCSC chrom.sizes for the header (default: each chromosome ends at the store's last bin).")
@scheduler_option
@quiet_option
@user_errors
def tracks(store, prefix, samples, model, targets, min_coverage, chrom_sizes, scheduler, quiet):
    """Per-bin signal tracks as bigWig (IGV, UCSC): each sample's methylation fraction and,
    with --model, the posterior probability of states."""
    from ...distributed.tracks import ChromSizes
    from ..segments import ModelOnStore, run_tracks

    start = time.perf_counter()
    chrom_sizes = ChromSizes.read(chrom_sizes) if chrom_sizes else None  # before the store's lock
    # methylation alone needs no Dask client, only the store's shared lock
    with store_session(store, scheduler, dask=bool(model), quiet=quiet) as opened:
        job = ModelOnStore.open(opened.store, model) if model else None
        chosen = names(samples, "--samples")
        echo = printed(click.echo)
        with stage("tracks", quiet=quiet, unit="chunks") as progress:
            for track in run_tracks(opened.store, prefix, chosen, min_coverage, chrom_sizes, job, opened.client,
                                    job.states(targets) if job else [], progress=progress):
                echo(f"{track.path}: {track.description} in {track.n_bins:,} bins")
    if model:
        click.echo(f"({time.perf_counter() - start:.1f} s)")


@click.command()
@_model_on_store
@click.option("--output", "-o", required=True, type=OUTPUT_DIR,
              help="Report directory: a new or empty one, or a previous report's (replaced).")
@click.option("--region", default=None, help="Track region CHROM:START-END (default: 500 bins at the start "
                                             "of the first chromosome).")
@click.option("--regions", "region_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A BED file of regions (hmr, pmd or dmr calls) drawn under the track, in its colours; "
                   "repeat for several. Without --region the track shows the first file's highest-scoring region.")
@click.option("--moments", "moments_path", default=None, type=STORE,
              help="Moment store for the spectrum figure (default: the moments are computed on Dask).")
@click.option("--max-gap", default=1000, show_default=True, type=NON_NEGATIVE, help="As for decode.")
@click.option("--diff-threshold", default=DIFF_THRESHOLD, show_default=True, type=click.FloatRange(0.0, 1.0), help="As for fit.")
@scheduler_option
@quiet_option
@user_errors
def report(store, model, output, region, region_files, moments_path, max_gap, diff_threshold, scheduler, quiet):
    """Write DIR/index.html with figures (levels, transitions, spectrum, occupancy, a
    genome track, bootstrap and EM history when present) and DIR/segments.bed."""
    from ..report import check_report_output, read_region_sets, write_report

    check_report_output(output, store, model, moments_path, region_files)  # before the cluster starts
    region_sets = read_region_sets(region_files)
    # the report reads the store (its segments go into DIR): the shared lock
    with store_session(store, scheduler, quiet=quiet) as opened:
        result = write_report(opened, model, output, region, max_gap, diff_threshold, moments_path, quiet=quiet,
                              regions=region_sets)
    click.echo(f"{result.path}: {len(result.figures)} figures ({', '.join(result.figures)}); "
               f"{result.timings['total']:.1f} s")
