"""The `streambhmm` command: thin click commands over the Python API."""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from . import __version__
from .cluster import SCHEDULER_ENV, SchedulerLost, clear_status, compute, dask_client, status_line
from .formats import CONTEXTS, FORMATS, ReadOptions
from .model import SpectralBinomialHMM
from .moments import Moments
from .storage import Location
from .store import StoreError, open_store

USER_ERRORS = (ValueError, FileNotFoundError, StoreError, SchedulerLost)  # MomentStoreError, FormatError and SpectrumError are ValueErrors


def user_errors(fn):
    """Turn expected errors into a one-line message and a non-zero exit."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            raise click.ClickException(str(exc)) from None
    return wrapper


class StoreParam(click.ParamType):
    """A store: a local directory or an fsspec URL (s3://..., memory://...)."""
    name = "store"

    def __init__(self, exists: bool):
        self.exists = exists

    def convert(self, value, param, ctx):
        location = Location.of(value)
        if location.is_local and Path(location.url).is_file():
            self.fail(f"{value}: is a file, not a store directory", param, ctx)
        if self.exists and not location.exists():
            self.fail(f"{value}: does not exist", param, ctx)
        return location.url


STORE, NEW_STORE = StoreParam(exists=True), StoreParam(exists=False)

scheduler_option = click.option(
    "--scheduler", default=None, metavar="ADDRESS",
    help=f"Dask scheduler to use (default: ${SCHEDULER_ENV}, else an embedded LocalCluster).")
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress display.")
DEFAULT_N_BINS = 30
bins_option = click.option("--bins", "n_bins", default=DEFAULT_N_BINS, show_default=True,
                           help="Beta-map granularity D.")
bin_size_option = click.option("--bin-size", default=100, show_default=True, help="Bin width in bp.")
context_option = click.option("--context", default="CG", show_default=True, type=click.Choice(CONTEXTS),
                              help="Cytosine context kept, where the format carries one.")


def read_options(fn):
    """The reading options of ingest and batch, gathered into ``options`` (a ReadOptions)."""
    @click.option("--merge-strands", is_flag=True,
                  help="Add each CpG's minus-strand C (at pos + 1) to its plus-strand C (formats with a strand).")
    @click.option("--min-coverage", default=1, show_default=True, help="Drop cytosine rows with less coverage.")
    @click.option("--chromosomes", default=None, metavar="LIST", help="Keep only these chromosomes (comma-separated "
                                                                      "glob patterns, e.g. 'chr[0-9]*,chrX').")
    @click.option("--exclude-chromosomes", default=None, metavar="LIST",
                  help="Drop these chromosomes (comma-separated glob patterns, e.g. 'chrM,chrUn*,lambda').")
    @click.option("--columns", default=None, metavar="SPEC",
                  help="Describe any other format: chrom=N,pos=N,meth=N,total=N (or unmeth=N; strand=N optional), "
                       "1-based column numbers. Implies --format columns.")
    @click.option("--zero-based", is_flag=True, help="With --columns: positions are 0-based (default 1-based).")
    @click.option("--header", is_flag=True, help="With --columns: the first line is a header (default: skipped "
                                                 "when its fields after the first are not numbers).")
    @functools.wraps(fn)
    def wrapper(*args, merge_strands, min_coverage, chromosomes, exclude_chromosomes, columns, zero_based, header,
                **kwargs):
        try:
            kwargs["options"] = ReadOptions(
                merge_strands=merge_strands, min_coverage=min_coverage,
                chromosomes=ReadOptions.parse_patterns(chromosomes),
                exclude_chromosomes=ReadOptions.parse_patterns(exclude_chromosomes) or (),
                columns=ReadOptions.parse_columns(columns) if columns else None, zero_based=zero_based,
                header=header)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return fn(*args, **kwargs)
    return wrapper


def format_states(methylation, transmat, samples) -> str:
    """One row per state: its level in each sample, its genome fraction (the stationary
    distribution of transmat) and its self-transition."""
    from .simulate import stationary_distribution

    width = max(10, *(len(s) for s in samples))
    weight = stationary_distribution(np.asarray(transmat))
    rows = [f"{'state':>5}  " + "  ".join(f"{s:>{width}}" for s in samples) + f"  {'weight':>7}  {'stay':>6}"]
    for h, levels in enumerate(methylation):
        rows.append(f"{h:>5}  " + "  ".join(f"{v:>{width}.3f}" for v in levels)
                    + f"  {weight[h]:>7.3f}  {transmat[h][h]:>6.3f}")
    return "\n".join(rows)


@click.group()
@click.version_option(__version__, prog_name="streambhmm")
def main():
    """Learn Binomial HMMs of DNA methylation by the method of moments."""


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--sample", required=True, help="Sample name; all FILES are its replicates.")
@click.option("--store", required=True, type=NEW_STORE, help="Counts store (Zarr directory or fsspec URL).")
@click.option("--format", "fmt", default="auto", show_default=True, type=click.Choice(["auto", *FORMATS]))
@bin_size_option
@context_option
@click.option("--chunk-size", default=None, type=int, help="Bins per Zarr chunk (default: the store's, else 1000000).")
@read_options
@quiet_option
@user_errors
def ingest(files, sample, store, fmt, bin_size, context, chunk_size, quiet, options):
    """Add FILES (replicates of one sample) to a counts store."""
    from .ingest import ingest as run_ingest

    start = time.perf_counter()
    try:
        report = run_ingest(files, sample, store, fmt=fmt, bin_size=bin_size, context=context,
                            chunk_size=chunk_size, echo=click.echo, progress=status_line(quiet), options=options)
    finally:
        clear_status(quiet)
    if not report.unchanged:
        click.echo(f"sample {sample}: {report.n_rows:,} rows from {len(files)} {report.format} file(s) -> "
                   f"{report.n_bins:,} bins on {len(report.chromosomes)} chromosome(s) in {store} "
                   f"({time.perf_counter() - start:.1f} s)")


@main.command()
@click.argument("store", type=STORE)
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


def moments_of(path, samples, n_bins, client, quiet, split_every=8, want_partials=False) -> FitInput:
    """Moments from a moment store (no counts read) or from a counts store (on ``client``)."""
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


METHODS = ("ftd", "em", "ftd-em")


def format_differential(methylation, samples, threshold: float) -> str:
    from .evaluate import differential_states

    if len(samples) < 2:
        return ""
    found = differential_states(methylation, threshold)
    listed = ", ".join(map(str, found)) if found else "none"
    return f"differential states (levels differ across samples by more than {threshold:g}): {listed}"


def cluster_for(store, scheduler):
    """A Dask client for a counts store; nothing for a moment store (no counts are read)."""
    from .momentstore import is_moment_store

    return contextlib.nullcontext() if is_moment_store(store) else dask_client(scheduler)


def em_reporter(quiet: bool):
    """Print each EM iteration's log-likelihood and gain."""
    history = []

    def report(iteration: int, loglik: float) -> None:
        gain = f" ({loglik - history[-1]:+.4g})" if history else ""
        history.append(loglik)
        if not quiet:
            click.echo(f"  EM iteration {iteration}: log-likelihood {loglik:.8g}{gain}")
    return report


@main.command()
@click.argument("store", type=STORE)
@click.option("--states", "-m", required=True, help="Number of hidden states M, or a sweep: 2-10 or 2,4,6.")
@click.option("--method", default="ftd", show_default=True, type=click.Choice(METHODS),
              help="ftd: spectral only; em: Baum-Welch from a random start; ftd-em: spectral, then EM.")
@click.option("--em-iter", default=20, show_default=True, help="Maximum EM iterations.")
@click.option("--em-tol", default=1e-7, show_default=True,
              help="Stop EM when an iteration gains less than this fraction of |log-likelihood|.")
@click.option("--samples", default=None, help="Comma-separated samples to fit jointly (default: all).")
@bins_option
@click.option("--seed", default=0, show_default=True,
              help="Seed of the tensor power method, the bootstrap and EM's random start.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Model JSON to write (a sweep writes NAME.mM.json for each M).")
@click.option("--bootstrap", default=0, show_default=True,
              help="Block-bootstrap replicates over chunks (0: none; --method ftd only).")
@click.option("--diff-threshold", default=0.3, show_default=True,
              help="A state is differential when its levels across samples differ by more than this.")
@click.option("--split-every", default=8, show_default=True, help="Fan-in of the tree reductions.")
@scheduler_option
@quiet_option
@user_errors
def fit(store, states, method, em_iter, em_tol, samples, n_bins, seed, output, bootstrap, diff_threshold,
        split_every, scheduler, quiet):
    """Fit a Binomial HMM to a counts store (any method) or a moment store (ftd)."""
    from .momentstore import is_moment_store

    start = time.perf_counter()
    state_list = parse_states(states)
    sample_list = [s for s in samples.split(",") if s] if samples else None
    if method != "ftd" and is_moment_store(store):
        raise click.ClickException(f"{store} is a moment store; --method {method} needs the counts store "
                                   f"(EM reads the counts)")
    if method != "ftd" and bootstrap:
        raise click.ClickException("--bootstrap resamples moments; it needs --method ftd")
    with cluster_for(store, scheduler) as client:
        data = None
        if method != "em":
            data = moments_of(store, sample_list, n_bins, client, quiet, split_every, want_partials=bootstrap > 0)
            mom = data.moments
            click.echo(f"{mom.n_triples:,} triples from {len(data.chromosomes)} chromosome(s); "
                       f"moments in {time.perf_counter() - start:.1f} s")
            if len(state_list) > 1:
                sv = np.linalg.svd(mom.p13 / max(mom.n_triples, 1), compute_uv=False)
                click.echo("singular values of P13: " + ", ".join(f"{v:.3g}" for v in sv[:max(state_list) + 2]))
        fitted = sum(fit_one(m, method, store, data, client, sample_list, n_bins, seed, em_iter, em_tol, bootstrap,
                             diff_threshold, split_every, output_path(output, m, len(state_list) > 1),
                             len(state_list) > 1, quiet)
                     for m in state_list)
    if not fitted:
        raise click.ClickException("no number of states in the sweep was supported by the data")
    click.echo(f"done in {time.perf_counter() - start:.1f} s")


def fit_one(m, method, store, data, client, samples, n_bins, seed, em_iter, em_tol, bootstrap, diff_threshold,
            split_every, path, sweep, quiet) -> bool:
    """Fit and write one model; False when a sweep's M is not supported by the spectrum."""
    from .bootstrap import block_bootstrap
    from .hmm import BinomialHMM, random_parameters
    from .modelio import model_to_dict, write_json
    from .pipeline import select_samples
    from .spectral import SpectrumError
    from .storehmm import fit_store_em

    if sweep:
        click.echo(f"\nM = {m}:")
    make = functools.partial(SpectralBinomialHMM, m, n_bins=n_bins, random_state=seed)
    est = None
    if method != "em":
        try:
            est = make().fit_moments(data.moments)
        except SpectrumError as exc:
            if not sweep:
                raise
            click.echo(f"not supported ({str(exc).splitlines()[0].split(': ', 1)[1]})")
            return False
        fitted_samples, chromosomes = data.samples, data.chromosomes
    if method != "ftd":
        counts = open_store(store)
        fitted_samples, chromosomes = select_samples(counts, samples), counts.chromosomes
        hmm = BinomialHMM(m, n_iter=em_iter, init="spectral" if est else "random", random_state=seed, n_bins=n_bins)
        if est is not None:
            click.echo("spectral start:")
            click.echo(format_states(est.methylation_, est.transmat_, fitted_samples))
            hmm.start_from(est.startprob_, est.transmat_, est.methylation_)
            hmm.n_triples_ = est.n_triples_
        else:
            hmm.start_from(*random_parameters(m, len(fitted_samples), seed))
        em_start = time.perf_counter()
        result = fit_store_em(counts, hmm, client, fitted_samples, em_iter, em_tol, split_every,
                              report=em_reporter(quiet))
        state = "converged" if result.converged else f"stopped at --em-iter {em_iter}"
        click.echo(f"EM {state} after {len(result.history) - 1} iteration(s), "
                   f"{time.perf_counter() - em_start:.1f} s; log-likelihood {result.history[-1]:.8g}")
        est = result.hmm
    document = model_to_dict(est, fitted_samples, chromosomes, method=method)
    if method != "ftd":
        document["loglik"] = result.history[-1]
        document["loglik_history"] = result.history
    click.echo(format_states(est.methylation_, est.transmat_, fitted_samples))
    if diff := format_differential(est.methylation_, fitted_samples, diff_threshold):
        click.echo(diff)
    if bootstrap > 0:
        ci = block_bootstrap(data.partials, est, make, bootstrap, random_state=seed)
        document["methylation_ci"] = ci.methylation_ci.tolist()
        document["transmat_ci"] = ci.transmat_ci.tolist()
        click.echo(f"block bootstrap over {len(data.partials)} chunks: {ci.n_succeeded} of "
                   f"{ci.n_replicates} replicates fitted")
        click.echo(format_intervals(ci.methylation_ci, ci.transmat_ci, fitted_samples))
    write_json(path, document)
    click.echo(f"model written to {path}")
    return True


def fit_store(store, states, samples, n_bins, seed, scheduler, quiet):
    """Moments of a counts store on Dask, then the spectral fit (used by the demo)."""
    with dask_client(scheduler) as client:
        data = moments_of(store, samples, n_bins, client, quiet)
    est = SpectralBinomialHMM(states, n_bins=n_bins, random_state=seed).fit_moments(data.moments)
    return est, data


@main.command()
@click.argument("store", type=STORE)
@click.option("--model", "model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--chromosomes", default=None, help="Comma-separated chromosomes (default: all).")
@scheduler_option
@quiet_option
@user_errors
def score(store, model, chromosomes, scheduler, quiet):
    """Log-likelihood of a counts store under a model, per chromosome and in total
    (binomial coefficients included; exact across chunks)."""
    from .modelio import model_for_store
    from .storehmm import score_store

    start = time.perf_counter()
    counts, document, hmm = model_for_store(store, model)
    wanted = [c for c in chromosomes.split(",") if c] if chromosomes else None
    with dask_client(scheduler) as client:
        per_chrom = score_store(counts, hmm, client, document["samples"], wanted)
    width = max(10, *(len(c) for c in per_chrom))
    click.echo(f"{'chromosome':<{width}} {'log-likelihood':>18}")
    for chrom, value in per_chrom.items():
        click.echo(f"{chrom:<{width}} {value:>18.6f}")
    click.echo(f"{'total':<{width}} {sum(per_chrom.values()):>18.6f}")
    if not quiet:
        click.echo(f"scored in {time.perf_counter() - start:.1f} s")


@main.command()
@click.argument("store", type=STORE)
@click.option("--model", "model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False), help="Segments (BED).")
@click.option("--posteriors", is_flag=True, help="Also write state_posterior (bin x state) into the store.")
@click.option("--max-gap", default=1000, show_default=True,
              help="Split a run where more than this many bp have no coverage.")
@scheduler_option
@quiet_option
@user_errors
def decode(store, model, output, posteriors, max_gap, scheduler, quiet):
    """Segment a counts store: each covered bin gets its most probable state (posterior
    decoding), and runs of one state are written as BED."""
    from .modelio import model_for_store
    from .storehmm import decode_store

    start = time.perf_counter()
    counts, document, hmm = model_for_store(store, model)
    show = status_line(quiet)
    with dask_client(scheduler) as client:
        try:
            report = decode_store(counts, hmm, client, output, document["samples"], max_gap, posteriors,
                                  progress=lambda done, total: show(f"chunks: {done}/{total}"))
        finally:
            clear_status(quiet)
    click.echo(f"{output}: {report.n_segments:,} segments over {report.n_bins:,} covered bins "
               f"({time.perf_counter() - start:.1f} s)")
    for h, n in enumerate(report.state_bins):
        levels = ", ".join(f"{v:.3f}" for v in hmm.methylation_[h])
        click.echo(f"  state {h} ({levels}): {n:,} bins ({n / max(report.n_bins, 1):.1%})")
    if report.posterior_written:
        click.echo(f"posteriors written to {store} (variable {'state_posterior'!r} of each chromosome group)")


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
@click.argument("store", type=STORE)
@click.option("--output", "-o", required=True, type=NEW_STORE, help="Moment store (Zarr directory or fsspec URL).")
@click.option("--samples", default=None, help="Comma-separated samples (default: all).")
@bins_option
@scheduler_option
@quiet_option
@user_errors
def moments_compute(store, output, samples, n_bins, scheduler, quiet):
    """Compute or update the moment store OUTPUT from the counts store STORE."""
    from .momentstore import update_moment_store

    start = time.perf_counter()
    sample_list = [s for s in samples.split(",") if s] if samples else None
    show = status_line(quiet)
    kept = f"The partials finished so far are kept in {output}; rerun this command to resume from them."
    try:
        with dask_client(scheduler, if_lost=kept) as client:
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
@click.argument("inputs", nargs=-1, required=True, type=STORE)
@click.option("--output", "-o", required=True, type=NEW_STORE)
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
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False))
@click.option("--workdir", required=True, type=NEW_STORE,
              help="Directory (or fsspec URL) for one counts store and one moment store per group.")
@bins_option
@bin_size_option
@context_option
@click.option("--chunk-size", default=None, type=int, help="Bins per Zarr chunk (default: 1000000).")
@read_options
@scheduler_option
@quiet_option
@user_errors
def batch(manifest, workdir, n_bins, bin_size, context, chunk_size, scheduler, quiet, options):
    """Ingest every sample of MANIFEST (TSV: sample, group, format, files) and compute or
    update one moment store per group, all groups at once on the cluster."""
    from .batch import SUMMARY, format_summary, run_batch

    start = time.perf_counter()
    echo = (lambda message: None) if quiet else click.echo
    kept = f"Finished samples and partials are kept in {workdir}; rerun this command to resume."
    try:
        with dask_client(scheduler, if_lost=kept) as client:
            summary = run_batch(manifest, workdir, client, n_bins, bin_size, context, chunk_size,
                                echo=echo, progress=status_line(quiet), options=options)
    finally:
        clear_status(quiet)
    click.echo(format_summary(summary), nl=False)
    click.echo(f"{len(summary.samples)} sample(s), {len(summary.groups)} group(s) in "
               f"{time.perf_counter() - start:.1f} s; summary in {Location.of(workdir) / SUMMARY}")
    if summary.failed:
        raise click.ClickException(f"{len(summary.failed)} failure(s): {', '.join(summary.failed)}. Everything "
                                   f"else is kept; fix the cause and rerun to resume.")
    bins = f" --bins {n_bins}" if n_bins != DEFAULT_N_BINS else ""
    click.echo(f"fit a group with: streambhmm fit {Location.of(workdir) / '<group>' / 'moments.zarr'} "
               f"--states M{bins} --output model.json")


@main.command()
@click.argument("store", type=STORE)
@click.option("--model", "model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--output", "-o", required=True, type=click.Path(file_okay=False), help="Report directory.")
@click.option("--region", default=None, help="Track region CHROM:START-END (default: 500 bins at the start "
                                             "of the first chromosome).")
@click.option("--moments", "moments_path", default=None, type=STORE,
              help="Moment store for the spectrum figure (default: the moments are computed on Dask).")
@click.option("--max-gap", default=1000, show_default=True, help="As for decode.")
@click.option("--diff-threshold", default=0.3, show_default=True, help="As for fit.")
@scheduler_option
@quiet_option
@user_errors
def report(store, model, output, region, moments_path, max_gap, diff_threshold, scheduler, quiet):
    """Write DIR/index.html with figures (levels, transitions, spectrum, occupancy, a
    genome track, bootstrap and EM history when present) and DIR/segments.bed."""
    from .report import write_report

    show = status_line(quiet)
    with dask_client(scheduler) as client:
        try:
            result = write_report(store, model, output, client, region, max_gap, diff_threshold, moments_path,
                                  progress=lambda done, total: show(f"decoding chunks: {done}/{total}"))
        finally:
            clear_status(quiet)
    click.echo(f"{result.path}: {len(result.figures)} figures ({', '.join(result.figures)}); "
               f"{result.timings['total']:.1f} s")


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
        click.echo(format_states(DEMO_TRUTH.methylation, DEMO_TRUTH.transmat, DEMO_SAMPLES))
        click.echo("\nrecovered states (matched to the true order):")
        click.echo(format_states(est.methylation_[perm], est.transmat_[np.ix_(perm, perm)], DEMO_SAMPLES))
        click.echo(f"\nmethylation error (sum |p - p_hat|): {err.methylation_error:.4f}")
        click.echo(f"transition error (Frobenius):        {err.transmat_error:.4f}")
        if workdir:
            click.echo(f"files, store and model.json kept in {directory}")


if __name__ == "__main__":
    main()
