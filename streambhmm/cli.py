"""The `streambhmm` command: thin click commands over the Python API."""

from __future__ import annotations

import functools
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from . import __version__
from .cluster import SCHEDULER_ENV, clear_status, compute, dask_client, status_line
from .formats import CONTEXTS, FORMATS
from .model import SpectralBinomialHMM
from .store import StoreError, open_store

USER_ERRORS = (ValueError, FileNotFoundError, StoreError)


def user_errors(fn):
    """Turn expected errors into a one-line message and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


scheduler_option = click.option(
    "--scheduler", default=None, metavar="ADDRESS",
    help=f"Dask scheduler to use (default: ${SCHEDULER_ENV}, else an embedded LocalCluster).")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress display.")


def format_states(methylation, startprob, samples, transmat=None) -> str:
    """One row per state: its level in each sample, stationary weight, self-transition."""
    width = max(10, *(len(s) for s in samples))
    header = f"{'state':>5}  " + "  ".join(f"{s:>{width}}" for s in samples) + f"  {'weight':>7}"
    if transmat is not None:
        header += f"  {'stay':>6}"
    rows = [header]
    for h, (levels, w) in enumerate(zip(methylation, startprob)):
        row = f"{h:>5}  " + "  ".join(f"{v:>{width}.3f}" for v in levels) + f"  {w:>7.3f}"
        if transmat is not None:
            row += f"  {transmat[h][h]:>6.3f}"
        rows.append(row)
    return "\n".join(rows)


@click.group()
@click.version_option(__version__, prog_name="streambhmm")
def main():
    """Learn Binomial HMMs of DNA methylation by the method of moments."""


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--sample", required=True, help="Sample name; all FILES are its replicates.")
@click.option("--store", required=True, type=click.Path(file_okay=False), help="Counts store (Zarr).")
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]))
@click.option("--bin-size", default=100, show_default=True, help="Bin width in bp.")
@click.option("--context", default="CG", show_default=True, type=click.Choice(CONTEXTS),
              help="Cytosine context kept, where the format carries one.")
@click.option("--chunk-size", default=None, type=int, help="Bins per Zarr chunk (default: the store's, else 1000000).")
@quiet_option
@user_errors
def ingest(files, sample, store, fmt, bin_size, context, chunk_size, quiet):
    """Add FILES (replicates of one sample) to a counts store."""
    from .ingest import ingest as run_ingest

    start = time.perf_counter()
    try:
        report = run_ingest(files, sample, store, fmt=fmt, bin_size=bin_size, context=context,
                            chunk_size=chunk_size, echo=click.echo, progress=status_line(quiet))
    finally:
        clear_status(quiet)
    if not report.unchanged:
        click.echo(f"sample {sample}: {report.n_rows:,} rows from {len(files)} {report.format} file(s) -> "
                   f"{report.n_bins:,} bins on {len(report.chromosomes)} chromosome(s) in {store} "
                   f"({time.perf_counter() - start:.1f} s)")


@main.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@user_errors
def info(store):
    """Print a counts store's chromosomes, samples, bins and coverage."""
    st = open_store(store)
    click.echo(f"{store}: counts store v{st.attrs['format_version']}, bin size {st.bin_size} bp, "
               f"chunk size {st.chunk_size:,} bins, written by streambhmm {st.attrs['tool_version']}")
    for name in st.samples:
        prov = st.attrs["samples"][name]
        click.echo(f"  sample {name}: {len(prov['files'])} {prov['format']} file(s), context {prov['context']}")
    samples = st.samples
    totals = np.zeros((3, len(samples)))
    n_total = 0
    width = max(10, *(len(c) for c in st.chromosomes)) if st.chromosomes else 10
    click.echo(f"\n{'chromosome':<{width}} {'bins':>11} " + " ".join(f"{s + ' covered':>16}" for s in samples))
    for chrom in st.chromosomes:
        ds = st.dataset(chrom)
        cov = ds.coverage.values.astype(np.int64)
        meth = ds.methylated.values.astype(np.int64)
        covered = (cov > 0).sum(axis=0)
        totals += [covered, cov.sum(axis=0), meth.sum(axis=0)]
        n_total += cov.shape[0]
        click.echo(f"{chrom:<{width}} {cov.shape[0]:>11,} " + " ".join(f"{int(c):>16,}" for c in covered))
    click.echo(f"{'total':<{width}} {n_total:>11,} " + " ".join(f"{int(c):>16,}" for c in totals[0]))
    click.echo("\ncoverage summary:")
    for i, name in enumerate(samples):
        covered, reads, meth = totals[:, i]
        click.echo(f"  {name}: {int(covered):,} of {n_total:,} bins covered ({covered / max(n_total, 1):.1%}), "
                   f"mean coverage {reads / max(covered, 1):.1f} per covered bin, "
                   f"pooled methylation {meth / max(reads, 1):.3f}")


def fit_store(store, states, samples, n_bins, seed, scheduler, quiet, split_every=8):
    """Moments of a counts store on Dask, then the spectral fit; returns (estimator, graph)."""
    from .pipeline import moments_graph

    st = open_store(store)
    graph = moments_graph(st, samples, n_bins=n_bins, split_every=split_every)
    with dask_client(scheduler) as client:
        moments = compute(client, graph.total, quiet=quiet)
    est = SpectralBinomialHMM(states, n_bins=n_bins, random_state=seed).fit_moments(moments)
    return est, graph


@main.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--states", "-m", type=int, required=True, help="Number of hidden states.")
@click.option("--samples", default=None, help="Comma-separated samples to fit jointly (default: all).")
@click.option("--bins", "n_bins", default=30, show_default=True, help="Beta-map granularity D.")
@click.option("--seed", default=0, show_default=True, help="Seed of the tensor power method.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False), help="Model JSON to write.")
@click.option("--split-every", default=8, show_default=True, help="Fan-in of the tree reduction.")
@scheduler_option
@quiet_option
@user_errors
def fit(store, states, samples, n_bins, seed, output, split_every, scheduler, quiet):
    """Fit a Binomial HMM to a counts store (spectral method, FTD)."""
    from .modelio import model_to_dict, write_json

    start = time.perf_counter()
    sample_list = [s for s in samples.split(",") if s] if samples else None
    est, graph = fit_store(store, states, sample_list, n_bins, seed, scheduler, quiet, split_every)
    write_json(output, model_to_dict(est, graph.samples, graph.chromosomes, method="ftd"))
    click.echo(f"{est.n_triples_:,} triples from {len(graph.chromosomes)} chromosome(s), "
               f"{graph.n_chunks} chunk(s); {time.perf_counter() - start:.1f} s")
    click.echo(format_states(est.methylation_, est.startprob_, graph.samples, est.transmat_))
    click.echo(f"model written to {output}")


@main.command()
@click.option("--bins-per-chromosome", "n", default=100_000, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="Keep the files, store and model here (default: a temporary directory).")
@scheduler_option
@quiet_option
@user_errors
def demo(n, seed, workdir, scheduler, quiet):
    """End to end on synthetic data: write real-format files, ingest, fit, compare."""
    from .demo import DEMO_COVERAGE, DEMO_SAMPLES, DEMO_TRUTH, write_demo_files
    from .evaluate import matched_error
    from .ingest import ingest as run_ingest
    from .modelio import model_to_dict, write_json
    from .simulate import simulate

    with tempfile.TemporaryDirectory(prefix="streambhmm-demo-") as tmp:
        directory = Path(workdir or tmp)
        directory.mkdir(parents=True, exist_ok=True)
        chromosomes = ["chr1", "chr2", "chr3"]
        rng = np.random.default_rng(seed)
        data = simulate(DEMO_TRUTH, [n] * len(chromosomes), coverage=DEMO_COVERAGE, random_state=rng)
        files = write_demo_files(directory, data, chromosomes, rng)
        click.echo(f"wrote {n * len(chromosomes):,} bins x 2 samples: {files[0].name} (Bismark coverage), "
                   f"{files[1].name} (allc, with CHH rows)")
        store = directory / "counts.zarr"
        for sample, path in zip(DEMO_SAMPLES, files):
            report = run_ingest([path], sample, store, echo=click.echo)
            click.echo(f"ingested {sample}: {report.n_rows:,} {report.format} rows -> {report.n_bins:,} bins")
        start = time.perf_counter()
        est, graph = fit_store(store, 4, None, 30, seed, scheduler, quiet)
        write_json(directory / "model.json", model_to_dict(est, graph.samples, graph.chromosomes))
        click.echo(f"moments on Dask ({graph.n_chunks} chunks) and fit: {time.perf_counter() - start:.1f} s, "
                   f"{est.n_triples_:,} triples\n")
        err = matched_error(DEMO_TRUTH.methylation, est.methylation_, DEMO_TRUTH.transmat, est.transmat_)
        perm = err.permutation
        click.echo("true states:")
        click.echo(format_states(DEMO_TRUTH.methylation, DEMO_TRUTH.startprob, DEMO_SAMPLES, DEMO_TRUTH.transmat))
        click.echo("\nrecovered states (matched to the true order):")
        click.echo(format_states(est.methylation_[perm], est.startprob_[perm], DEMO_SAMPLES,
                                 est.transmat_[np.ix_(perm, perm)]))
        click.echo(f"\nmethylation error (sum |p - p_hat|): {err.methylation_error:.4f}")
        click.echo(f"transition error (Frobenius):        {err.transmat_error:.4f}")
        if workdir:
            click.echo(f"files, store and model.json kept in {directory}")
