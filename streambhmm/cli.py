"""The `streambhmm` command: thin click commands over the Python API."""

from __future__ import annotations

import contextlib
import functools
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from . import __version__
from .cluster import SCHEDULER_ENV, SchedulerLost, clear_status, dask_client, status_line
from .formats import CONTEXTS, FORMATS, ReadOptions
from .fitting import METHODS
from .storage import Location

# StoreError, MomentStoreError, FormatError and SpectrumError are ValueErrors
USER_ERRORS = (ValueError, FileNotFoundError, SchedulerLost)


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
POSITIVE = click.IntRange(min=1)  # every count option is checked before any work
NON_NEGATIVE = click.IntRange(min=0)
bins_option = click.option("--bins", "n_bins", default=DEFAULT_N_BINS, show_default=True, type=POSITIVE,
                           help="Beta-map granularity D.")
bin_size_option = click.option("--bin-size", default=100, show_default=True, type=POSITIVE, help="Bin width in bp.")
context_option = click.option("--context", default="CG", show_default=True, type=click.Choice(CONTEXTS),
                              help="Cytosine context kept, where the format carries one.")


def feature_options(fn):
    """--feature and --projection-dim: which feature the moments are summed of."""
    from .fitting import DEFAULT_PROJECTION_DIM, FEATURES

    fn = click.option("--projection-dim", default=DEFAULT_PROJECTION_DIM, show_default=True, type=POSITIVE,
                      help="Dimension K of the projected feature.")(fn)
    return click.option("--feature", default="auto", show_default=True, type=click.Choice(FEATURES),
                        help="beta: the samples' Beta maps side by side (dimension samples x --bins); projected: "
                             "a seeded projection of them to --projection-dim dimensions, whatever the number "
                             "of samples; auto: projected above 64 dimensions (3 or more samples at --bins 30). "
                             "Pooled moments are one sample wide: beta.")(fn)


def read_options(fn):
    """The reading options of ingest and batch, gathered into ``options`` (a ReadOptions)."""
    @click.option("--merge-strands", is_flag=True,
                  help="Add each CpG's minus-strand C (at pos + 1) to its plus-strand C (formats with a strand).")
    @click.option("--min-coverage", default=1, show_default=True, type=NON_NEGATIVE, help="Drop cytosine rows with less coverage.")
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


def format_states(methylation, transmat, startprob, samples, labels=None) -> str:
    """One row per state: its level in each sample, its weight (the model's startprob: the
    stationary distribution, each state's share of the bins), its self-transition and its
    label (streambhmm.states)."""
    width = max(10, *(len(s) for s in samples))
    label = "  label" if labels else ""
    rows = [f"{'state':>5}  " + "  ".join(f"{s:>{width}}" for s in samples) + f"  {'weight':>7}  {'stay':>6}{label}"]
    for h, levels in enumerate(methylation):
        rows.append(f"{h:>5}  " + "  ".join(f"{v:>{width}.3f}" for v in levels)
                    + f"  {startprob[h]:>7.3f}  {transmat[h][h]:>6.3f}" + (f"  {labels[h]}" if labels else ""))
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
@click.option("--chunk-size", default=None, type=POSITIVE,
              help="Bins per Zarr chunk of a new store (default 1000000); fixed once the store exists.")
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
    """Print a counts store's chromosomes, samples, bins and coverage (from its index: no
    counts are read)."""
    from .store import COVERED, SUMS, open_store

    st = open_store(store)
    click.echo(f"{store}: counts store v{st.attrs['format_version']}, bin size {st.bin_size} bp, "
               f"chunk size {st.chunk_size:,} bins, written by streambhmm {st.attrs['tool_version']}")
    for name in st.samples:
        prov = st.attrs["samples"][name]
        files = f"{len(prov['files'])} {prov['format']} file(s), context {prov['context']}" if "files" in prov else \
            "no input files recorded"
        click.echo(f"  sample {name}: {files}")
    samples = st.samples
    columns = [st.column(s) for s in samples]
    totals = np.zeros((3, len(samples)))
    n_total = 0
    width = max(10, *(len(c) for c in st.chromosomes)) if st.chromosomes else 10
    click.echo(f"\n{'chromosome':<{width}} {'bins':>11} " + " ".join(f"{s + ' covered':>16}" for s in samples))
    for chrom in st.chromosomes:
        summary = st.summary(chrom, columns).sum(axis=0)  # (samples, fields)
        totals += [summary[:, COVERED], summary[:, SUMS][:, 1], summary[:, SUMS][:, 0]]
        n_bins = st.n_bins(chrom)
        n_total += n_bins
        click.echo(f"{chrom:<{width}} {n_bins:>11,} " + " ".join(f"{int(c):>16,}" for c in summary[:, COVERED]))
    click.echo(f"{'total':<{width}} {n_total:>11,} " + " ".join(f"{int(c):>16,}" for c in totals[0]))
    click.echo("\ncoverage summary:")
    for i, name in enumerate(samples):
        covered, reads, meth = totals[:, i]
        click.echo(f"  {name}: {int(covered):,} of {n_total:,} bins covered ({covered / max(n_total, 1):.1%}), "
                   f"mean coverage {reads / max(covered, 1):.1f} per covered bin, "
                   f"pooled methylation {meth / max(reads, 1):.3f}")


@main.command()
@click.argument("store", type=STORE)
@quiet_option
@user_errors
def upgrade(store, quiet):
    """Convert a version-1 counts store to the current format, in place (every sample and its
    provenance are kept; the old store is replaced only once the new one is complete)."""
    from .store import upgrade_store

    start = time.perf_counter()
    n = upgrade_store(store, echo=(lambda message: None) if quiet else click.echo)
    click.echo(f"{store}: {n} sample(s) converted to counts store format version 2 "
               f"({time.perf_counter() - start:.1f} s)")


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

    return contextlib.nullcontext() if is_moment_store(store) else reading(store, scheduler)


@contextlib.contextmanager
def reading(store, scheduler, if_lost: str = ""):
    """A Dask client for a command that reads the counts store ``store``, holding its shared
    lock: an ingest into it waits until the command is done (and the command waits for a
    running ingest), so the command never sees a mix of old and new counts."""
    from .store import locked

    with locked(store, shared=True), store_client(store, scheduler, if_lost) as client:
        yield client


def store_client(store, scheduler, if_lost: str = ""):
    """A Dask client for work on the counts store ``store``: in process when it is small
    (cluster.is_small) and no scheduler is given."""
    from .cluster import is_small, scheduler_address

    return dask_client(scheduler, if_lost=if_lost, in_process=not scheduler_address(scheduler) and is_small(store))


def em_reporter(quiet: bool):
    """Print each EM iteration's log-likelihood and gain."""
    history = []

    def report(iteration: int, loglik: float) -> None:
        gain = f" ({loglik - history[-1]:+.4g})" if history else ""
        history.append(loglik)
        if not quiet:
            click.echo(f"  EM iteration {iteration}: log-likelihood {loglik:.8g}{gain}")
    return report


POOLED_HELP = ("One set of states shared by the samples, each sample its own sequence (replicates, single "
               "cells); cost linear in the number of samples.")


@dataclass
class FitSettings:
    """The options of one `fit` call that every number of states shares."""

    store: str
    method: str
    samples: list | None
    n_bins: int
    seed: int
    em_iter: int
    em_tol: float
    em_starts: int
    bootstrap: int
    allow_degenerate: bool
    diff_threshold: float
    split_every: int
    quiet: bool
    sweep: bool
    pooled: bool
    feature: str = "auto"
    projection_dim: int = 32
    local_em: bool = False  # a small store: EM in this process, without a Dask graph per iteration
    emission: str = "binomial"  # of the EM methods


@main.command()
@click.argument("store", type=STORE)
@click.option("--states", "-m", required=True, help="Number of hidden states M, or a sweep: 2-10 or 2,4,6.")
@click.option("--method", default=None, type=click.Choice(METHODS),
              help="refined: one pass, the spectral estimate refined on the moments (default); ftd: the paper's "
                   "spectral estimate alone; em: EM from random starts; refined-em / ftd-em: EM from that start.")
@click.option("--em-iter", default=1000, show_default=True, type=POSITIVE,
              help="EM's iteration cap (EM stops earlier once converged; hitting the cap is reported).")
@click.option("--em-tol", default=1e-7, show_default=True, type=click.FloatRange(min=0.0),
              help="EM has converged when an iteration gains less than this fraction of |log-likelihood| "
                   "(0: run --em-iter iterations).")
@click.option("--em-starts", default=3, show_default=True, type=POSITIVE,
              help="Random starts of --method em; the best is kept.")
@click.option("--emission", default=None, type=click.Choice(["binomial", "betabinomial"]),
              help="EM's emission model: betabinomial gives each state and sample an overdispersion (real "
                   "methylomes vary more than a binomial allows; see README). Default: betabinomial for the EM "
                   "methods; the one-pass fits are binomial.")
@click.option("--samples", default=None, help="Comma-separated samples to fit jointly (default: all).")
@click.option("--pooled", is_flag=True,
              help=POOLED_HELP + " A moment store made with --pooled is fitted pooled without it.")
@bins_option
@click.option("--seed", default=0, show_default=True,
              help="Seed of the spectral restarts, the refinement's random starts, EM's starts and the bootstrap.")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Model JSON to write (a sweep writes NAME.mM.json for each M).")
@click.option("--bootstrap", default=0, show_default=True, type=NON_NEGATIVE,
              help="Block-bootstrap replicates (0: none; --method refined only).")
@click.option("--block-size", default=None, type=POSITIVE,
              help="Genomic block (bp) of the bootstrap and of the held-out blocks of a sweep (default 1000000; "
                   "a moment store has the one it was computed with).")
@click.option("--allow-degenerate", is_flag=True,
              help="Write a degenerate model (see README) anyway, with a warning, instead of refusing it.")
@click.option("--diff-threshold", default=0.3, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="A state is differential when its levels across samples differ by more than this.")
@click.option("--split-every", default=8, show_default=True, type=click.IntRange(min=2), help="Fan-in of the tree reductions.")
@feature_options
@scheduler_option
@quiet_option
@user_errors
def fit(store, states, method, em_iter, em_tol, em_starts, emission, samples, pooled, n_bins, seed, output, bootstrap,
        block_size, allow_degenerate, diff_threshold, split_every, feature, projection_dim, scheduler, quiet):
    """Fit a Binomial HMM to a counts store (any method) or a moment store (refined, ftd)."""
    from .fitting import COUNTS_STORE_METHOD, EM_EMISSION, MOMENT_STORE_METHOD, ONE_PASS, load_moments, recommend
    from .momentstore import is_moment_store

    start = time.perf_counter()
    state_list = parse_states(states)
    moment_store = is_moment_store(store)
    method = method or (MOMENT_STORE_METHOD if moment_store else COUNTS_STORE_METHOD)
    if method not in ONE_PASS and moment_store:
        raise click.ClickException(f"{store} is a moment store; --method {method} needs the counts store "
                                   f"(EM reads the counts)")
    if bootstrap and method != "refined":
        raise click.ClickException("--bootstrap refits the refined one-pass model to resampled blocks; it needs "
                                   "--method refined")
    if method in ONE_PASS and emission == "betabinomial":
        raise click.ClickException(f"--method {method} fits the binomial model to the moments; a beta-binomial "
                                   f"model needs EM: --method {method}-em (EM from the {method} fit) or em")
    settings = FitSettings(store, method, [s for s in samples.split(",") if s] if samples else None, n_bins, seed,
                           em_iter, em_tol, em_starts, bootstrap, allow_degenerate, diff_threshold, split_every,
                           quiet, len(state_list) > 1, pooled, feature, projection_dim)
    settings.emission = emission or EM_EMISSION
    if not moment_store:
        from .cluster import is_small, scheduler_address

        settings.local_em = not scheduler_address(scheduler) and is_small(store)
    with cluster_for(store, scheduler) as client:
        data = None
        if method != "em":
            data = load_moments(store, settings.samples, n_bins, client, quiet, split_every, block_size,
                                want_blocks=bootstrap > 0 or (settings.sweep and method in ONE_PASS), pooled=pooled,
                                feature=feature, projection_dim=projection_dim)
            settings.pooled = data.pooled
            mom = data.moments
            click.echo(f"{mom.n_triples:,} triples from {len(data.chromosomes)} chromosome(s); "
                       f"moments in {time.perf_counter() - start:.1f} s")
            if settings.sweep:
                sv = np.linalg.svd(mom.p13 / max(mom.n_triples, 1), compute_uv=False)
                click.echo("singular values of P13: " + ", ".join(f"{v:.3g}" for v in sv[:max(state_list) + 2]))
        rows = [fit_one(m, settings, data, client, output_path(output, m, settings.sweep)) for m in state_list]
    if settings.sweep:
        click.echo("\n" + format_sweep(rows))
        choice = recommend(rows)
        if choice:
            click.echo(f"recommended: M = {choice[0]}: {choice[1]}")
    if not any(r["written"] for r in rows):
        raise click.ClickException("no number of states in the sweep gave a model that could be written")
    click.echo(f"done in {time.perf_counter() - start:.1f} s")


def format_sweep(rows: list[dict]) -> str:
    """One line per M: spectrum check, moment-fit criterion, held-out criterion or BIC, outcome."""
    lines = [f"{'M':>3}  {'spectrum':>13}  {'moment fit':>11}  {'held out':>20}  {'BIC':>14}  result"]
    for r in rows:
        spectrum = "" if r.get("spectrum") is None else ("supported" if r["spectrum"] else "below noise")
        loss = "" if r.get("loss") is None else f"{r['loss']:.5f}"
        held = "" if r.get("held_out") is None else f"{r['held_out'].loss:.5f} +- {r['held_out'].se:.5f}"
        bic_text = "" if r.get("bic") is None else f"{r['bic']:.6g}"
        lines.append(f"{r['m']:>3}  {spectrum:>13}  {loss:>11}  {held:>20}  {bic_text:>14}  {r['result']}")
    return "\n".join(lines)


def fit_one(m: int, settings: FitSettings, data, client, path: Path) -> dict:
    """Fit, check, print and write one model; returns its sweep row."""
    from .checks import DegenerateModelError, DegenerateModelWarning
    from .fitting import bic, held_out
    from .modelio import model_columns, model_to_dict, write_json

    if settings.sweep:
        click.echo(f"\nM = {m}:")
    row = {"m": m, "written": False}
    method = settings.method
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", DegenerateModelWarning)
            est, samples, chromosomes, extra = _fit_model(m, settings, data, client)
        for warning in caught:
            click.echo(f"warning: {warning.message} (written because of --allow-degenerate)")
    except DegenerateModelError as exc:
        if not settings.sweep:
            raise click.ClickException(f"{exc} The model was not written; --allow-degenerate writes it "
                                       f"anyway.") from None
        click.echo(f"not written: {exc}")
        row["result"] = "degenerate: not written"
        return row
    row.update(spectrum=getattr(est, "spectrum_supported_", None), loss=getattr(est, "loss_", None))
    columns = model_columns(samples, settings.pooled)
    if "history" in extra:
        row["bic"] = bic(extra["history"][-1], m, len(columns), extra["n_bins"],
                         getattr(est, "emission", "") == "betabinomial")
    if settings.sweep and method == "refined":
        row["held_out"] = held_out(data.blocks, data.moments, est)
    document = model_to_dict(est, samples, chromosomes, method=method, pooled=settings.pooled,
                             diff_threshold=settings.diff_threshold)
    if getattr(est, "loss_", None) is not None:
        document["moment_loss"] = float(est.loss_)
    if "history" in extra:
        document["loglik"] = extra["history"][-1]
        document["loglik_history"] = extra["history"]
    if settings.pooled:
        click.echo(f"pooled over {len(samples)} sample(s): {', '.join(samples)}")
    click.echo(format_states(est.methylation_, est.transmat_, est.startprob_, columns, document["labels"]))
    if "dispersion" in document:
        click.echo("overdispersion (beta-binomial), per state: " + "; ".join(
            ", ".join(f"{v:.3f}" for v in row) for row in document["dispersion"]))
    if diff := format_differential(est.methylation_, columns, settings.diff_threshold):
        click.echo(diff)
    if settings.bootstrap > 0:
        _bootstrap(est, settings, data, document, columns)
    write_json(path, document)
    click.echo(f"model written to {path}")
    row.update(written=True, result=f"written to {path}")
    return row


def _fit_model(m: int, settings: FitSettings, data, client):
    """(estimator, samples, chromosomes, extra) for one M; extra has EM's history."""
    from .fitting import ONE_PASS, one_pass
    from .hmm import BinomialHMM, random_parameters
    from .modelio import model_columns
    from .pipeline import select_samples
    from .store import open_store
    from .storehmm import fit_store_em

    method = settings.method
    if method in ONE_PASS:
        est = one_pass(data.moments, m, method, settings.seed, settings.allow_degenerate)
        if not settings.quiet and method == "refined":
            supported = "supported" if est.spectrum_supported_ else \
                "not supported" + ("" if "ftd" in est.starts_ else " (no FTD start)")
            click.echo(f"refined from start {est.start_} (criterion {est.loss_:.6f}); the spectrum check: "
                       f"{supported}")
        return est, data.samples, data.chromosomes, {}
    counts = open_store(settings.store)
    samples = select_samples(counts, settings.samples)
    columns = model_columns(samples, settings.pooled)
    if method == "em":
        starts = [(f"random start {r + 1} of {settings.em_starts}",
                   random_parameters(m, len(columns), settings.seed + r)) for r in range(settings.em_starts)]
    else:
        first = method.split("-")[0]  # refined or ftd
        start = one_pass(data.moments, m, first, settings.seed, quiet_degenerate=True)
        click.echo(f"{first} start:")
        click.echo(format_states(start.methylation_, start.transmat_, start.startprob_, columns))
        starts = [(f"{first} start", (start.startprob_, start.transmat_, start.methylation_))]
    best = None
    for label, params in starts:
        hmm = BinomialHMM(m, n_bins=settings.n_bins, stationary_start=True, allow_degenerate=True,
                          emission=settings.emission)
        hmm.start_from(*params)
        if len(starts) > 1:
            click.echo(f"EM from {label}:")
        t = time.perf_counter()
        result = fit_store_em(counts, hmm, None if settings.local_em else client, samples, settings.em_iter,
                              settings.em_tol, settings.split_every,
                              report=em_reporter(settings.quiet), check=False, pooled=settings.pooled)
        gain = result.history[-1] - result.history[-2] if len(result.history) > 1 else float("nan")
        state = ("converged" if result.converged else
                 f"stopped at --em-iter {settings.em_iter} while still improving (last gain {gain:.4g}; raise "
                 f"--em-iter to continue)")
        click.echo(f"EM {state} after {len(result.history) - 1} iteration(s), {time.perf_counter() - t:.1f} s; "
                   f"log-likelihood {result.history[-1]:.8g}")
        if best is None or result.history[-1] > best.history[-1]:
            best = result
    est = best.hmm
    est.allow_degenerate = settings.allow_degenerate
    est.check_fit()
    if data is not None:
        est.n_triples_ = data.moments.n_triples
    return est, samples, counts.chromosomes, {"history": best.history, "n_bins": best.n_bins}


def _bootstrap(est, settings: FitSettings, data, document: dict, samples) -> None:
    from .bootstrap import block_bootstrap, check_blocks

    warning = check_blocks(len(data.blocks), data.block_size)
    if warning:
        click.echo(f"warning: {warning}")
    ci = block_bootstrap(data.blocks, data.moments, est, settings.bootstrap,
                         random_state=settings.seed)
    document["methylation_ci"] = ci.methylation_ci.tolist()
    document["transmat_ci"] = ci.transmat_ci.tolist()
    click.echo(f"block bootstrap: {ci.n_replicates} replicates of {ci.n_blocks} blocks of {data.block_size:,} bp")
    click.echo(format_intervals(ci.methylation_ci, ci.transmat_ci, samples))


def fit_store(store, states, samples, n_bins, seed, scheduler, quiet):
    """Moments of a counts store on Dask, then the one-pass fit (used by the demo)."""
    from .fitting import load_moments, one_pass
    from .pipeline import DEFAULT_SPLIT_EVERY

    with store_client(store, scheduler) as client:
        data = load_moments(store, samples, n_bins, client, quiet, DEFAULT_SPLIT_EVERY, None, want_blocks=False)
    return one_pass(data.moments, states, "refined", seed), data


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
    wanted = [c for c in chromosomes.split(",") if c] if chromosomes else None
    with reading(store, scheduler) as client:
        counts, document, hmm = model_for_store(store, model)
        per_chrom = score_store(counts, hmm, client, document["samples"], wanted, bool(document.get("pooled")))
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
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
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
    coloured), with the states' table beside it (OUTPUT's stem + .states.tsv)."""
    from .modelio import model_for_store, model_labels, write_state_table
    from .storehmm import decode_store

    start = time.perf_counter()
    counts, document, hmm = model_for_store(store, model)
    labels = model_labels(document)
    pooled = bool(document.get("pooled"))
    if pooled and posteriors:
        raise click.ClickException(f"{model} is a pooled model; --posteriors is written for joint models only")
    # a pooled model segments each sample on its own
    runs = [(pooled_output(output, s), [s]) for s in document["samples"]] if pooled else [(output, document["samples"])]
    show = status_line(quiet)
    with store_client(store, scheduler) as client:
        for path, samples in runs:
            try:
                report = decode_store(counts, hmm, client, path, samples, max_gap, posteriors,
                                      progress=lambda done, total: show(f"chunks: {done}/{total}"), labels=labels,
                                      track=f"{Path(model).stem} states" + (f" ({samples[0]})" if pooled else ""))
            finally:
                clear_status(quiet)
            click.echo(f"{path}: {report.n_segments:,} segments over {report.n_bins:,} covered bins "
                       f"({time.perf_counter() - start:.1f} s)")
            for h, n in enumerate(report.state_bins):
                levels = ", ".join(f"{v:.3f}" for v in hmm.methylation_[h])
                click.echo(f"  state {h} {labels[h]} ({levels}): {n:,} bins ({n / max(report.n_bins, 1):.1%})")
    table = state_table_path(output)
    write_state_table(table, document)
    click.echo(f"states (labels, colours, levels) in {table}")
    if posteriors:
        click.echo(f"posteriors written to {store} (variable {'state_posterior'!r} of each chromosome group)")


@main.command()
@click.argument("store", type=STORE)
@click.option("--model", "model", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--preset", type=click.Choice(["hmr", "pmd"]), default=None,
              help="hmr: hypomethylated regions (states below 0.4 in every sample; a 3-state model on 100 bp "
                   "bins); pmd: partially methylated domains (states below 0.7; a 2-state model on 5 kb bins); "
                   "see README. The options below change a preset's settings.")
@click.option("--states", "state_names", default=None,
              help="Comma-separated states (labels or indices) a region is made of, instead of a preset's.")
@click.option("--min-posterior", default=None, type=click.FloatRange(0.0, 1.0),
              help="A bin belongs to a region when the posterior of the states is at least this (0.5).")
@click.option("--max-gap", default=None, type=NON_NEGATIVE,
              help="Bins of a region lie at most this many bp apart (hmr 1000, pmd 10000, --states 200).")
@click.option("--min-length", default=None, type=NON_NEGATIVE, help="Shortest region kept, bp (pmd 50000).")
@click.option("--min-bins", default=None, type=POSITIVE, help="Fewest bins of the states per region (hmr 5).")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False),
              help="Regions (BED9); their details go beside it, OUTPUT's stem + .tsv.")
@scheduler_option
@quiet_option
@user_errors
def regions(store, model, preset, state_names, min_posterior, max_gap, min_length, min_bins, output, scheduler,
            quiet):
    """Regions of a counts store under a model: runs of bins whose posterior of chosen states
    (a preset's, or --states) is high, merged across small gaps (BED9 and a TSV)."""
    from .modelio import model_for_store, model_labels
    from .regions import RegionRule, find_regions, preset_rule, rule_with, write_regions

    start = time.perf_counter()
    if (preset is None) == (state_names is None):
        raise click.UsageError("give one of --preset and --states")
    counts, document, hmm = model_for_store(store, model)
    if document.get("pooled"):
        raise click.ClickException(f"{model} is a pooled model; regions are found with joint models (fit without "
                                   f"--pooled, or with --samples for one sample)")
    labels = model_labels(document)
    if preset:
        rule = preset_rule(preset, hmm.methylation_)
    else:
        targets = [state_index(name, labels, "--states") for name in state_names.split(",") if name]
        rule = RegionRule(tuple(sorted(set(targets))), name="region")
    rule = rule_with(rule, min_posterior=min_posterior, max_gap=max_gap, min_length=min_length, min_bins=min_bins)
    show = status_line(quiet)
    with reading(store, scheduler) as client:
        try:
            found = find_regions(counts, hmm, client, rule, document["samples"],
                                 progress=lambda done, total: show(f"chunks: {done}/{total}"))
        finally:
            clear_status(quiet)
    n = write_regions(found, rule, hmm.methylation_, document["samples"], output,
                      f"{Path(model).stem} {preset or 'regions'}")
    lengths = np.concatenate([r.end - r.start for r in found.values()]) if n else np.zeros(1)
    click.echo(f"{output}: {n:,} regions of states {', '.join(labels[h] for h in rule.targets)}, median "
               f"{np.median(lengths):,.0f} bp, {lengths.sum() / 1e6:.2f} Mb in all ({time.perf_counter() - start:.1f} s)")


@main.command()
@click.argument("store", type=STORE)
@click.option("--output", "-o", "prefix", required=True, metavar="PREFIX",
              help="Files are PREFIX.SAMPLE.methylation.bw and PREFIX.stateH-LABEL.posterior.bw (pooled model: "
                   "PREFIX.SAMPLE.stateH-LABEL.posterior.bw).")
@click.option("--samples", default=None, help="Comma-separated samples whose methylation is written (default: the "
                                             "model's, else all).")
@click.option("--model", "model", default=None, type=click.Path(exists=True, dir_okay=False),
              help="A model: also write the posterior of --states.")
@click.option("--states", "state_names", default=None,
              help="Comma-separated states (labels or indices) whose posterior is written, one file each "
                   "(default with --model: every state).")
@click.option("--min-coverage", default=1, show_default=True, type=POSITIVE,
              help="Methylation of bins with at least this many reads.")
@click.option("--chrom-sizes", default=None, type=click.Path(exists=True, dir_okay=False),
              help="UCSC chrom.sizes for the header (default: each chromosome ends at the store's last bin).")
@scheduler_option
@quiet_option
@user_errors
def tracks(store, prefix, samples, model, state_names, min_coverage, chrom_sizes, scheduler, quiet):
    """Per-bin signal tracks as bigWig (IGV, UCSC): each sample's methylation fraction and,
    with --model, the posterior probability of states."""
    from .modelio import model_for_store, model_labels
    from .store import open_store
    from .tracks import chromosome_lengths, read_chrom_sizes, safe_name, write_methylation, write_posteriors

    start = time.perf_counter()
    counts, document, hmm = model_for_store(store, model) if model else (open_store(store), None, None)
    if samples:
        chosen = [s for s in samples.split(",") if s]
        unknown = [s for s in chosen if s not in counts.samples]
        if unknown:
            raise click.BadParameter(f"unknown sample(s) {', '.join(unknown)}; the store has "
                                     f"{', '.join(counts.samples)}", param_hint="--samples")
    else:
        chosen = document["samples"] if document else counts.samples
    lengths = chromosome_lengths(counts, read_chrom_sizes(chrom_sizes) if chrom_sizes else None)
    for sample in chosen:
        path = Path(f"{prefix}.{safe_name(sample)}.methylation.bw")
        n = write_methylation(counts, sample, path, lengths, min_coverage)
        click.echo(f"{path}: methylation of {sample} in {n:,} bins")
    if not model:
        return
    labels = model_labels(document)
    states = list(range(len(labels)))
    if state_names:
        states = [state_index(name, labels, "--states") for name in state_names.split(",") if name]
    names = [f"state{h}-{safe_name(labels[h])}" for h in states]
    runs = ([([s], [Path(f"{prefix}.{safe_name(s)}.{n}.posterior.bw") for n in names]) for s in document["samples"]]
            if document.get("pooled") else [(document["samples"], [Path(f"{prefix}.{n}.posterior.bw") for n in names])])
    show = status_line(quiet)
    with reading(store, scheduler) as client:
        for group, paths in runs:
            try:
                n = write_posteriors(counts, hmm, client, group, states, paths, lengths,
                                     progress=lambda done, total: show(f"chunks: {done}/{total}"))
            finally:
                clear_status(quiet)
            for h, path in zip(states, paths):
                click.echo(f"{path}: posterior of state {h} {labels[h]} in {n:,} bins")
    click.echo(f"({time.perf_counter() - start:.1f} s)")


def state_index(name: str, labels: list[str], option: str) -> int:
    """A state given by its label or its index."""
    if name in labels:
        return labels.index(name)
    if name.isdigit() and int(name) < len(labels):
        return int(name)
    raise click.BadParameter(f"no state {name!r}; the model's are {', '.join(labels)} (or 0..{len(labels) - 1})",
                             param_hint=option)


def state_table_path(output) -> Path:
    """The states' table beside a BED: OUTPUT's stem + .states.tsv."""
    output = Path(output)
    return output.with_name(f"{output.stem}.states.tsv")


def pooled_output(output, sample: str) -> Path:
    """A pooled model's BED of one sample: OUTPUT with .SAMPLE before its extension."""
    output = Path(output)
    return output.with_name(f"{output.stem}.{sample}{output.suffix}")


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
@click.option("--block-size", default=None, type=POSITIVE,
              help="Genomic block (bp) whose statistics are kept for the bootstrap and held-out blocks "
                   "(default: the moment store's, or 1,000,000 for a new one).")
@click.option("--pooled", is_flag=True, help=POOLED_HELP)
@feature_options
@scheduler_option
@quiet_option
@user_errors
def moments_compute(store, output, samples, n_bins, block_size, pooled, feature, projection_dim, scheduler, quiet):
    """Compute or update the moment store OUTPUT from the counts store STORE."""
    from .features import projection_for
    from .momentstore import update_moment_store
    from .pipeline import select_samples
    from .store import open_store

    start = time.perf_counter()
    sample_list = [s for s in samples.split(",") if s] if samples else None
    show = status_line(quiet)
    kept = f"The partials finished so far are kept in {output}; rerun this command to resume from them."
    try:
        with reading(store, scheduler, if_lost=kept) as client:
            counts = open_store(store)
            width = 1 if pooled else len(select_samples(counts, sample_list))
            report = update_moment_store(counts, output, client, sample_list, n_bins,
                                         progress=lambda done, total: show(f"partials: {done}/{total}"),
                                         block_size=block_size, pooled=pooled,
                                         projection_dim=projection_for(feature, width, n_bins, projection_dim))
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
@click.option("--chunk-size", default=None, type=POSITIVE, help="Bins per Zarr chunk (default: 1000000).")
@click.option("--pooled", is_flag=True, help="Pooled moment stores: states shared by a group's samples (see fit).")
@feature_options
@read_options
@scheduler_option
@quiet_option
@user_errors
def batch(manifest, workdir, n_bins, bin_size, context, chunk_size, pooled, feature, projection_dim, scheduler, quiet,
          options):
    """Ingest every sample of MANIFEST (TSV: sample, group, format, files) and compute or
    update one moment store per group, all groups at once on the cluster."""
    from .batch import SUMMARY, format_summary, run_batch

    start = time.perf_counter()
    echo = (lambda message: None) if quiet else click.echo
    kept = f"Finished samples and partials are kept in {workdir}; rerun this command to resume."
    try:
        with dask_client(scheduler, if_lost=kept) as client:
            summary = run_batch(manifest, workdir, client, n_bins, bin_size, context, chunk_size,
                                echo=echo, progress=status_line(quiet), options=options, pooled=pooled,
                                feature=feature, projection_dim=projection_dim)
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
@click.option("--max-gap", default=1000, show_default=True, type=NON_NEGATIVE, help="As for decode.")
@click.option("--diff-threshold", default=0.3, show_default=True, type=click.FloatRange(0.0, 1.0), help="As for fit.")
@scheduler_option
@quiet_option
@user_errors
def report(store, model, output, region, moments_path, max_gap, diff_threshold, scheduler, quiet):
    """Write DIR/index.html with figures (levels, transitions, spectrum, occupancy, a
    genome track, bootstrap and EM history when present) and DIR/segments.bed."""
    from .report import write_report

    show = status_line(quiet)
    with store_client(store, scheduler) as client:
        try:
            result = write_report(store, model, output, client, region, max_gap, diff_threshold, moments_path,
                                  progress=lambda done, total: show(f"decoding chunks: {done}/{total}"))
        finally:
            clear_status(quiet)
    click.echo(f"{result.path}: {len(result.figures)} figures ({', '.join(result.figures)}); "
               f"{result.timings['total']:.1f} s")


@main.command()
@click.option("--bins-per-chromosome", "n", default=100_000, show_default=True, type=click.IntRange(min=1000))
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
        click.echo(format_states(DEMO_TRUTH.methylation, DEMO_TRUTH.transmat, DEMO_TRUTH.startprob, DEMO_SAMPLES))
        click.echo("\nrecovered states (matched to the true order):")
        click.echo(format_states(est.methylation_[perm], est.transmat_[np.ix_(perm, perm)], est.startprob_[perm],
                                 DEMO_SAMPLES))
        click.echo(f"\nmethylation error (sum |p - p_hat|): {err.methylation_error:.4f}")
        click.echo(f"transition error (Frobenius):        {err.transmat_error:.4f}")
        if workdir:
            click.echo(f"files, store and model.json kept in {directory}")


if __name__ == "__main__":
    main()
