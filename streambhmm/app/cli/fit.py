"""`fit`: the one-pass fit, EM, sweeps of M and the bootstrap, and the tables it prints."""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np

from ...distributed.fitting import METHODS
from .common import (NON_NEGATIVE, POOLED_HELP, POSITIVE, STORE, bins_option, feature_options, format_states,
                     quiet_option, reading, scheduler_option, store_client, user_errors)


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
    from ...learn.evaluate import differential_states

    if len(samples) < 2:
        return ""
    found = differential_states(methylation, threshold)
    listed = ", ".join(map(str, found)) if found else "none"
    return f"differential states (levels differ across samples by more than {threshold:g}): {listed}"


def cluster_for(store, scheduler):
    """A Dask client for a counts store; nothing for a moment store (no counts are read)."""
    from ...moments.momentstore import is_moment_store

    return contextlib.nullcontext() if is_moment_store(store) else reading(store, scheduler)


def em_reporter(quiet: bool):
    """Print each EM iteration's log-likelihood and gain."""
    history = []

    def report(iteration: int, loglik: float) -> None:
        gain = f" ({loglik - history[-1]:+.4g})" if history else ""
        history.append(loglik)
        if not quiet:
            click.echo(f"  EM iteration {iteration}: log-likelihood {loglik:.8g}{gain}")
    return report


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


@click.command()
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
    from ...distributed.fitting import COUNTS_STORE_METHOD, EM_EMISSION, MOMENT_STORE_METHOD, ONE_PASS, load_moments, recommend
    from ...moments.momentstore import is_moment_store

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
        from ...distributed.cluster import is_small, scheduler_address

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
    from ...learn.checks import DegenerateModelError, DegenerateModelWarning
    from ...distributed.fitting import bic, held_out
    from ...io.storage import write_json
    from ..modelio import model_columns, model_to_dict

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
    from ...distributed.fitting import ONE_PASS, one_pass
    from ...learn.hmm import BinomialHMM, random_parameters
    from ..modelio import model_columns
    from ...moments.pipeline import select_samples
    from ...io.store import open_store
    from ...distributed.storehmm import fit_store_em

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
    from ...learn.bootstrap import block_bootstrap, check_blocks

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
    from ...distributed.fitting import load_moments, one_pass
    from ...moments.pipeline import DEFAULT_SPLIT_EVERY

    with store_client(store, scheduler) as client:
        data = load_moments(store, samples, n_bins, client, quiet, DEFAULT_SPLIT_EVERY, None, want_blocks=False)
    return one_pass(data.moments, states, "refined", seed), data
