"""`batch` and `demo`: whole runs, from files to models."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import click
import numpy as np

from ...distributed.cluster import dask_client
from ...io.progress import printed, stage
from ...io.storage import Location
from ...moments.features import DEFAULT_N_BINS
from .common import NEW_STORE, bins_option, cluster_scheduler_option, feature_options, quiet_option, read_options, \
    scheduler_option, user_errors
from .store import layout_options


@click.command()
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False))
@click.option("--workdir", required=True, type=NEW_STORE,
              help="Directory (or fsspec URL) for one counts store and one moment store per group.")
@bins_option
@layout_options("Bins per Zarr chunk (default: 1000000).")
@click.option("--pooled", is_flag=True, help="Pooled moment stores: states shared by a group's samples (see fit).")
@feature_options
@read_options
@cluster_scheduler_option
@quiet_option
@user_errors
def batch(manifest, workdir, n_bins, bin_size, context, chunk_size, pooled, feature, projection_dim, scheduler, quiet,
          options):
    """Ingest every sample of MANIFEST (TSV: sample, group, format, files) and compute or
    update one moment store per group, all groups at once on the cluster."""
    from ...distributed.batch import SUMMARY, check_summary, format_summary, read_batch_manifest, run_batch

    start = time.perf_counter()
    read_batch_manifest(manifest)  # before the cluster starts
    check_summary(manifest, workdir)
    echo = (lambda message: None) if quiet else printed(click.echo)
    warn = printed(lambda message: click.echo(message, err=True))  # with --quiet too
    kept = f"Finished samples and partials are kept in {workdir}; rerun this command to resume."
    with dask_client(scheduler, if_lost=kept, quiet=quiet, shared=(workdir,)) as client, \
            stage("batch", quiet=quiet, unit="steps") as shown:
        summary = run_batch(manifest, workdir, client, n_bins, bin_size, context, chunk_size,
                            echo=echo, warn=warn, progress=shown, options=options, pooled=pooled,
                            feature=feature, projection_dim=projection_dim, quiet=quiet)
    click.echo(format_summary(summary), nl=False)
    click.echo(f"{len(summary.samples)} sample(s), {len(summary.groups)} group(s) in "
               f"{time.perf_counter() - start:.1f} s; summary in {Location.of(workdir) / SUMMARY}")
    if summary.failed:
        raise click.ClickException(f"{len(summary.failed)} failure(s): {', '.join(summary.failed)}. Everything "
                                   f"else is kept; fix the cause and rerun to resume.")
    bins = f" --bins {n_bins}" if n_bins != DEFAULT_N_BINS else ""
    click.echo(f"fit a group with: streambhmm fit {Location.of(workdir) / '<group>' / 'moments.zarr'} "
               f"--states M{bins} --output model.json")


@click.command()
@click.option("--bins-per-chromosome", "n", default=100_000, show_default=True, type=click.IntRange(min=1000))
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Keep the files, store and model here (default: a temporary directory).")
@scheduler_option
@quiet_option
@user_errors
def demo(n, seed, workdir, scheduler, quiet):
    """End to end on synthetic data: write real-format files, ingest, fit, compare."""
    from ..demo import DEMO_SAMPLES, DEMO_TRUTH, run_demo
    from ..modelio import format_states

    with tempfile.TemporaryDirectory(prefix="streambhmm-demo-") as tmp:
        directory = Path(workdir or tmp)
        directory.mkdir(parents=True, exist_ok=True)
        result = run_demo(directory, n, seed, scheduler, quiet, echo=click.echo)
        est, err = result.estimator, result.error
        click.echo(f"moments on Dask and fit: {result.seconds:.1f} s, {est.n_triples_:,} triples\n")
        perm = err.permutation
        click.echo("true states:")
        click.echo(format_states(DEMO_TRUTH.methylation, DEMO_TRUTH.transmat, DEMO_TRUTH.startprob, DEMO_SAMPLES))
        click.echo("\nrecovered states (matched to the true order):")
        click.echo(format_states(est.methylation_[perm], est.transmat_[np.ix_(perm, perm)], est.startprob_[perm],
                                 DEMO_SAMPLES))
        click.echo(f"\nmethylation error (sum |p - p_hat|): {err.methylation_error:.4f}")
        click.echo(f"transition error (Frobenius):        {err.transmat_error:.4f}")
        if workdir:
            click.echo(f"files, store and model.json kept in {directory}")
