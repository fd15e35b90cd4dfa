"""The `streambhmm` command: thin click commands over the Python API."""

from __future__ import annotations

import functools
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from . import __version__
from .cluster import SCHEDULER_ENV, clear_status, compute, dask_client, status_line
from .formats import CONTEXTS, FORMATS
from .model import SpectralBinomialHMM
from .moments import Moments
from .store import StoreError, open_store

USER_ERRORS = (ValueError, FileNotFoundError, StoreError)  # MomentStoreError, FormatError and SpectrumError are ValueErrors


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


def parse_states(text: str) -> list[int]:
    """'4', '2-10' or '2,4,6' -> list of state counts."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-", 1))
            values = list(range(lo, hi + 1))
        else:
            values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise click.BadParameter(f"expected M, M1-M2 or M1,M2,...; got {text!r}", param_hint="--states") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"no valid number of states in {text!r}", param_hint="--states")
    return values


@dataclass
class FitInput:
    """Moments to fit, where they came from, and (for --bootstrap) the chunk partials."""

    moments: Moments
    samples: list[str]
    chromosomes: list[str]
    partials: list | None = None


def moments_of(path, samples, n_bins, scheduler, quiet, split_every=8, want_partials=False) -> FitInput:
    """Moments from a moment store (no counts read) or from a counts store (on Dask)."""
    from .momentstore import is_moment_store, load_partials, read_manifest
    from .pipeline import add_moments, moments_graph, tree_reduce

    if is_moment_store(path):
        manifest = read_manifest(path)
        if samples and list(samples) != manifest["samples"]:
            raise click.ClickException(f"{path} holds moments of samples {','.join(manifest['samples'])}; "
                                       f"--samples {','.join(samples)} needs `streambhmm moments` with it")
        if manifest["feature"]["n_bins"] != n_bins:
            raise click.ClickException(f"{path} holds moments with --bins {manifest['feature']['n_bins']}, "
                                       f"not {n_bins}")
        partials, manifest = load_partials(path)
        return FitInput(tree_reduce(partials, add_moments, split_every), manifest["samples"],
                        manifest["chromosomes"], partials)
    graph = moments_graph(open_store(path), samples, n_bins=n_bins, split_every=split_every)
    with dask_client(scheduler) as client:
        if want_partials:
            partials = compute(client, graph.partials, quiet=quiet)
            return FitInput(tree_reduce(partials, add_moments, split_every), graph.samples, graph.chromosomes,
                            partials)
        return FitInput(compute(client, graph.total, quiet=quiet), graph.samples, graph.chromosomes)


def format_intervals(methylation_ci, transmat_ci, samples) -> str:
    """Per state: the 95% interval of each sample's level and of the self-transition."""
    rows = [f"{'state':>5}  " + "  ".join(f"{s + ' 95% CI':>18}" for s in samples) + f"  {'stay 95% CI':>18}"]
    for h, per_sample in enumerate(methylation_ci):
        cells = [f"{'[%.3f, %.3f]' % tuple(v):>18}" for v in (*per_sample, transmat_ci[h][h])]
        rows.append(f"{h:>5}  " + "  ".join(cells))
    return "\n".join(rows)


def output_path(output: str, m: int, sweep: bool) -> Path:
    path = Path(output)
    return path.with_name(f"{path.stem}.m{m}{path.suffix}") if sweep else path


@main.command()
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--states", "-m", required=True, help="Number of hidden states M, or a sweep: 2-10 or 2,4,6.")
@click.option("--samples", default=None, help="Comma-separated samples to fit jointly (default: all).")
@click.option("--bins", "n_bins", default=30, show_default=True, help="Beta-map granularity D.")
@click.option("--seed", default=0, show_default=True, help="Seed of the tensor power method and the bootstrap.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Model JSON to write (a sweep writes NAME.mM.json for each M).")
@click.option("--bootstrap", default=0, show_default=True, help="Block-bootstrap replicates over chunks (0: none).")
@click.option("--split-every", default=8, show_default=True, help="Fan-in of the tree reduction.")
@scheduler_option
@quiet_option
@user_errors
def fit(store, states, samples, n_bins, seed, output, bootstrap, split_every, scheduler, quiet):
    """Fit a Binomial HMM (spectral method, FTD) to a counts store or a moment store."""
    from .bootstrap import block_bootstrap
    from .modelio import model_to_dict, write_json
    from .spectral import SpectrumError

    start = time.perf_counter()
    state_list = parse_states(states)
    sample_list = [s for s in samples.split(",") if s] if samples else None
    data = moments_of(store, sample_list, n_bins, scheduler, quiet, split_every, want_partials=bootstrap > 0)
    mom = data.moments
    click.echo(f"{mom.n_triples:,} triples from {len(data.chromosomes)} chromosome(s); "
               f"moments in {time.perf_counter() - start:.1f} s")
    sweep = len(state_list) > 1
    if sweep:
        sv = np.linalg.svd(mom.p13 / max(mom.n_triples, 1), compute_uv=False)
        click.echo("singular values of P13: " + ", ".join(f"{v:.3g}" for v in sv[:max(state_list) + 2]))
    fitted = 0
    for m in state_list:
        make = functools.partial(SpectralBinomialHMM, m, n_bins=n_bins, random_state=seed)
        try:
            est = make().fit_moments(mom)
        except SpectrumError as exc:
            if not sweep:
                raise
            click.echo(f"\nM = {m}: not supported ({str(exc).splitlines()[0].split(': ', 1)[1]})")
            continue
        document = model_to_dict(est, data.samples, data.chromosomes, method="ftd")
        if sweep:
            click.echo(f"\nM = {m}:")
        click.echo(format_states(est.methylation_, est.startprob_, data.samples, est.transmat_))
        if bootstrap > 0:
            ci = block_bootstrap(data.partials, est, make, bootstrap, random_state=seed)
            document["methylation_ci"] = ci.methylation_ci.tolist()
            document["transmat_ci"] = ci.transmat_ci.tolist()
            click.echo(f"block bootstrap over {len(data.partials)} chunks: {ci.n_succeeded} of "
                       f"{ci.n_replicates} replicates fitted")
            click.echo(format_intervals(ci.methylation_ci, ci.transmat_ci, data.samples))
        path = output_path(output, m, sweep)
        write_json(path, document)
        fitted += 1
        click.echo(f"model written to {path}")
    if not fitted:
        raise click.ClickException("no number of states in the sweep was supported by the data")
    click.echo(f"done in {time.perf_counter() - start:.1f} s")


def fit_store(store, states, samples, n_bins, seed, scheduler, quiet):
    """Moments of a counts store on Dask, then the spectral fit (used by the demo)."""
    data = moments_of(store, samples, n_bins, scheduler, quiet)
    est = SpectralBinomialHMM(states, n_bins=n_bins, random_state=seed).fit_moments(data.moments)
    return est, data


class MomentsGroup(click.Group):
    """`streambhmm moments STORE ...` computes; `streambhmm moments merge ...` merges."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["compute", *args]
        return super().parse_args(ctx, args)


@main.group(cls=MomentsGroup)
def moments():
    """Persist per-chunk moment sums (resumable, incremental): `moments STORE --output M`."""


@moments.command("compute")
@click.argument("store", type=click.Path(exists=True, file_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False), help="Moment store (Zarr).")
@click.option("--samples", default=None, help="Comma-separated samples (default: all).")
@click.option("--bins", "n_bins", default=30, show_default=True, help="Beta-map granularity D.")
@scheduler_option
@quiet_option
@user_errors
def moments_compute(store, output, samples, n_bins, scheduler, quiet):
    """Compute or update the moment store OUTPUT from the counts store STORE."""
    from .momentstore import update_moment_store

    start = time.perf_counter()
    sample_list = [s for s in samples.split(",") if s] if samples else None
    show = status_line(quiet)
    with dask_client(scheduler) as client:
        try:
            report = update_moment_store(open_store(store), output, client, sample_list, n_bins,
                                         progress=lambda done, total: show(f"partials: {done}/{total}"))
        finally:
            clear_status(quiet)
    click.echo(f"{output}: computed {report.computed} partial(s), reused {report.reused}, "
               f"dropped {report.dropped} stale; samples {','.join(report.samples)}; "
               f"{time.perf_counter() - start:.1f} s")
    if report.computed == 0 and report.dropped == 0:
        click.echo("nothing changed: the moment store was already up to date")


@moments.command("merge")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False))
@user_errors
def moments_merge(inputs, output):
    """Merge moment stores computed separately (same samples and feature settings)."""
    from .momentstore import merge_moment_stores

    if len(inputs) < 2:
        raise click.UsageError("merge needs at least two moment stores")
    result = merge_moment_stores(list(inputs), output)
    click.echo(f"{output}: {result['partials']} partial(s) on {len(result['chromosomes'])} chromosome(s); "
               f"{result['duplicates']} duplicate partial(s) kept once")


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
        est, data = fit_store(store, 4, None, 30, seed, scheduler, quiet)
        write_json(directory / "model.json", model_to_dict(est, data.samples, data.chromosomes))
        click.echo(f"moments on Dask and fit: {time.perf_counter() - start:.1f} s, {est.n_triples_:,} triples\n")
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


if __name__ == "__main__":
    main()
