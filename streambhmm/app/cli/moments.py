"""`moments` (compute, merge): the moment store."""

from __future__ import annotations

import time

import click

from ...distributed.cluster import store_session
from ...io.progress import stage
from ...moments.spec import FeatureSpec
from .common import (OUTPUT_STORE, POOLED_HELP, POSITIVE, STORE, bins_option, feature_options, names,
                     quiet_option, scheduler_option, shown, user_errors)


def moment_pass_options(fn):
    """--feature, --projection-dim, --scheduler and --quiet, expected errors as messages: a
    command that computes moments (or reads a moment store's)."""
    return feature_options(scheduler_option(quiet_option(user_errors(fn))))


class MomentsGroup(click.Group):
    """`streambhmm moments STORE ...` computes; `streambhmm moments merge ...` merges."""

    def parse_args(self, ctx, args):
        # anything but `merge` is compute's, options before the store and --help too (a new
        # user's `moments -q STORE -o M` was "No such option '-q'", and the help listed none)
        if args and args[0] not in self.commands:
            args = ["compute", *args]
        return super().parse_args(ctx, args)


@click.group(cls=MomentsGroup)
def moments():
    """Persist per-chunk moment sums (resumable, incremental): `moments STORE --output M`."""


@moments.command("compute")
@click.argument("store", type=STORE)
@click.option("--output", "-o", required=True, type=OUTPUT_STORE,
              help="Moment store (Zarr directory or fsspec URL).")
@click.option("--samples", default=None, help="Comma-separated samples (default: all).")
@bins_option
@click.option("--block-size", default=None, type=POSITIVE,
              help="Genomic block (bp) whose statistics are kept for the bootstrap and held-out blocks "
                   "(default: the moment store's, or 1,000,000 for a new one; at least 50 bins: each block keeps "
                   "statistics of its own).")
@click.option("--pooled", is_flag=True, help=POOLED_HELP)
@moment_pass_options
def moments_compute(store, output, samples, n_bins, block_size, pooled, feature, projection_dim, scheduler, quiet):
    """Compute or update the moment store OUTPUT from the counts store STORE (`streambhmm
    moments STORE -o OUTPUT`; `streambhmm moments merge A B -o OUTPUT` merges moment stores
    computed separately)."""
    from ...moments.momentstore import update_moments

    start = time.perf_counter()
    sample_list = names(samples, "--samples")
    kept = f"The partials finished so far are kept in {output}; rerun this command to resume from them."
    spec = FeatureSpec(feature, n_bins, projection_dim, pooled=pooled, block_size=block_size)
    with store_session(store, scheduler, if_lost=kept, quiet=quiet, outputs=(output,)) as opened, \
            stage(f"moments of {store}", quiet=quiet, unit="partials") as progress:
        report = update_moments(opened.store, output, opened.client, spec, sample_list, progress=progress)
    click.echo(f"{output}: computed {report.computed} partial(s), reused {report.reused}, "
               f"dropped {report.dropped} stale; samples {shown(','.join(report.samples))}; "
               f"{time.perf_counter() - start:.1f} s")
    for entry in report.foreign:
        click.echo(f"warning: left {entry} alone: not a partial of the moment store (a symbolic link, a file or "
                   f"another name)", err=True)
    if report.computed == 0 and report.dropped == 0:
        click.echo("nothing changed: the moment store was already up to date" if report.was_complete else
                   "the moment store is complete now: an interrupted run had computed every partial")


@moments.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=STORE)
@click.option("--output", "-o", required=True, type=OUTPUT_STORE)
@user_errors
def moments_merge(inputs, output):
    """Merge moment stores computed separately (same samples and feature settings)."""
    from ...moments.momentstore import merge_moment_stores

    if len(inputs) < 2:
        raise click.UsageError("merge needs at least two moment stores")
    result = merge_moment_stores(list(inputs), output)
    click.echo(f"{output}: {result['partials']} partial(s) on {len(result['chromosomes'])} chromosome(s); "
               f"{result['duplicates']} duplicate partial(s) kept once")
