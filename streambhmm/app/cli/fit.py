"""`fit`: its options, and the tables it prints of what app.fit.run_fit returns (the
one-pass fit, EM, sweeps of M and the bootstrap)."""

from __future__ import annotations

import contextlib
import time

import click

from ...distributed.cluster import store_session
from ...distributed.fitting import METHODS, ONE_PASS
from ...learn.states import DIFF_THRESHOLD
from ...moments.spec import FeatureSpec
from ...io.outputs import written_together
from ...io.progress import printed
from .common import NON_NEGATIVE, OUTPUT_FILE, POOLED_HELP, POSITIVE, STORE, bins_option, names, shown
from .moments import moment_pass_options

# EM's options: (name, default, type, help)
EM_OPTIONS = (
    ("--em-iter", 1000, POSITIVE, "EM's iteration cap (EM stops earlier once converged; hitting the cap is reported)."),
    ("--em-tol", 1e-7, click.FloatRange(min=0.0), "EM has converged when an iteration gains less than this fraction "
                                                  "of |log-likelihood| (0: run --em-iter iterations)."),
    ("--em-starts", 3, POSITIVE, "Random starts of --method em; the best is kept."),
)


def em_options(fn):
    """--em-iter, --em-tol and --em-starts, in this order."""
    for name, default, kind, text in reversed(EM_OPTIONS):
        fn = click.option(name, default=default, show_default=True, type=kind, help=text)(fn)
    return fn


def parse_states(text: str) -> list[int]:
    """'4', '2-10' or '2,4,6' -> list of state counts."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-", 1))
            values = list(range(lo, hi + 1))
        else:
            values = [int(v) for v in text.split(",")]  # an empty item ("2,,3") is a typo: refused
    except ValueError:
        raise click.BadParameter(f"expected M, M1-M2 or M1,M2,...; got {text!r}", param_hint="--states") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"no valid number of states in {text!r}", param_hint="--states")
    if len(set(values)) < len(values):
        raise click.BadParameter(f"{text!r} names a number of states twice", param_hint="--states")
    return values


def format_intervals(methylation_ci, transmat_ci, samples) -> str:
    """Per state: the 95% interval of each sample's level and of the self-transition."""
    rows = [f"{'state':>5}  " + "  ".join(f"{shown(s) + ' 95% CI':>18}" for s in samples) + f"  {'stay 95% CI':>18}"]
    for h, per_sample in enumerate(methylation_ci):
        cells = [f"{'[%.3f, %.3f]' % tuple(v):>18}" for v in (*per_sample, transmat_ci[h][h])]
        rows.append(f"{h:>5}  " + "  ".join(cells))
    return "\n".join(rows)


def opened_for(settings, scheduler):
    """The counts store opened for the fit (store_session); nothing for a moment store (no counts are read)."""
    if settings.moment_store:
        return contextlib.nullcontext()
    return store_session(settings.store, scheduler, em=settings.method not in ONE_PASS, quiet=settings.quiet)


@click.command()
@click.argument("store", type=STORE)
@click.option("--states", "-m", required=True, help="Number of hidden states M, or a sweep: 2-10 or 2,4,6.")
@click.option("--method", default=None, type=click.Choice(METHODS),
              help="refined: one pass, the spectral estimate refined on the moments (default); ftd: the paper's "
                   "spectral estimate alone; em: EM from random starts; refined-em / ftd-em: EM from that start.")
@em_options
@click.option("--emission", default=None, type=click.Choice(["binomial", "betabinomial"]),
              help="The emission model: betabinomial gives each state and sample an overdispersion (real "
                   "methylomes vary more than a binomial allows; see docs/guide/fit.md). Default: betabinomial, for the "
                   "refined one-pass fit too (measured better on held-out real data); ftd is binomial.")
@click.option("--samples", default=None, help="Comma-separated samples to fit jointly (default: all).")
@click.option("--pooled", is_flag=True,
              help=POOLED_HELP + " A moment store made with --pooled is fitted pooled without it.")
@bins_option
@click.option("--seed", default=0, show_default=True, type=NON_NEGATIVE,
              help="Seed of the spectral restarts, the refinement's random starts, EM's starts and the bootstrap.")
@click.option("--output", "-o", required=True, type=OUTPUT_FILE,
              help="Model JSON to write (a sweep writes NAME.mM.json for each M).")
@click.option("--bootstrap", default=0, show_default=True, type=NON_NEGATIVE,
              help="Block-bootstrap replicates (0: none; --method refined only).")
@click.option("--block-size", default=None, type=POSITIVE,
              help="Genomic block (bp) of the bootstrap and of the held-out blocks of a sweep (default 1000000, "
                   "at least 50 bins; a moment store has the one it was computed with).")
@click.option("--allow-degenerate", is_flag=True,
              help="Write a degenerate model (see docs/guide/fit.md) anyway, with a warning, instead of refusing it.")
@click.option("--diff-threshold", default=DIFF_THRESHOLD, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="A state is differential when its levels across samples differ by more than this.")
@click.option("--split-every", default=8, show_default=True, type=click.IntRange(min=2), help="Fan-in of the tree reductions.")
@moment_pass_options
def fit(store, states, method, em_iter, em_tol, em_starts, emission, samples, pooled, n_bins, seed, output, bootstrap,
        block_size, allow_degenerate, diff_threshold, split_every, feature, projection_dim, scheduler, quiet):
    """Fit a Binomial HMM to a counts store (any method) or a moment store (refined, ftd)."""
    from ..fit import FitSettings, run_fit
    from ...learn.selection import SweepProcessLost, recommend

    start = time.perf_counter()
    settings = FitSettings(
        store, parse_states(states), output, method=method,
        samples=names(samples, "--samples"),
        spec=FeatureSpec(feature, n_bins, projection_dim, pooled=pooled, block_size=block_size), seed=seed,
        em_iter=em_iter, em_tol=em_tol, em_starts=em_starts, emission=emission, bootstrap=bootstrap,
        allow_degenerate=allow_degenerate, diff_threshold=diff_threshold, split_every=split_every,
        scheduler=scheduler, quiet=quiet)
    echo = printed(click.echo)  # above the progress line
    # a sweep's models are put in place together: a stopped sweep leaves none of a previous one's replaced
    # (a lost worker process puts in place those finished before it, as its message says)
    with opened_for(settings, scheduler) as opened, written_together(commit_on=(SweepProcessLost,)):
        run, models = run_fit(settings, opened, echo)
        if run.data is not None:
            click.echo(f"{run.data.moments.n_triples:,} triples from {len(run.data.chromosomes)} chromosome(s); "
                       f"moments in {run.seconds:.1f} s")
            apart = samples_apart(run.data, opened.store if opened else counts_behind(settings.store))
            if apart:
                click.echo(f"warning: {apart}", err=True)
        if run.singular_values is not None:
            click.echo("singular values of P13: " + ", ".join(
                f"{v:.3g}" for v in run.singular_values[:max(settings.states) + 2]))
        with contextlib.closing(models):  # stopped, it stops a sweep's worker processes too
            outcomes = [show(outcome, settings, echo) for outcome in models]
    if settings.sweep:
        click.echo("\n" + format_sweep(outcomes))
        choice = recommend(outcomes)
        click.echo(f"recommended: M = {choice[0]}: {choice[1]}" if choice else
                   f"no recommendation: {no_recommendation(outcomes, settings.method)}")
        if note := spectrum_note(choice, outcomes):
            click.echo(note)
    if not any(o.written for o in outcomes):
        raise click.ClickException("no number of states in the sweep gave a model that could be written")
    if not settings.sweep:  # said once it is in place: its rename can still be refused (io.outputs)
        click.echo(f"model written to {outcomes[0].path}")
    click.echo(f"done in {time.perf_counter() - start:.1f} s")


def counts_behind(moments_path):
    """The counts store a moment store was computed from, when it is still there with every
    one of its samples (None otherwise, or for a merged store of several)."""
    from ...io.store import open_store
    from ...moments.momentstore import read_manifest

    try:
        manifest = read_manifest(moments_path)
        counts = open_store(manifest.counts_store)
    except Exception:  # noqa: BLE001 - not there, not readable, or no single source: nothing to ask
        return None
    return counts if set(manifest.samples) <= set(counts.samples) else None


def samples_apart(data, store) -> str | None:
    """What to say when most bins with reads lack some sample's (None: they share most): a
    helper's cohort trial fitted two samples of other chromosomes jointly and got "differential"
    states that no bin shows side by side. Where the moments keep a histogram per sample (3 or
    more), the counts ``store`` (None: none to ask) says whether any chromosome has reads in
    every sample."""
    from ...learn.domains import MOSTLY_APART, shared_coverage, with_reads_in_every_sample
    from ..calls import chromosomes_apart

    shared = shared_coverage(data.moments)
    if shared is not None:
        if shared >= MOSTLY_APART:
            return None
        lacking = f"{with_reads_in_every_sample(shared)} reads in every sample"
    else:
        where = (chromosomes_apart(store, list(data.grouping.samples))
                 if store is not None and data.moments.n_samples > 1 else None)
        if where is None:
            return None
        lacking = f"no chromosome has reads in every sample ({where})"
    return (f"{lacking}: a state's levels in different samples then come from different bins "
            f"(other chromosomes, assays or genomes), so a state that differs between the samples may differ "
            f"between the bins each covers; fit them apart (--samples), or on the chromosomes they share")


def no_recommendation(outcomes, method: str) -> str:
    """Why a sweep recommends no number of states: no model has a held-out criterion
    (--method refined) or a BIC (the EM methods)."""
    if method == "ftd":
        return "--method ftd gives neither a held-out criterion (--method refined) nor a BIC (the EM methods)"
    reasons = sorted({o.no_held_out for o in outcomes if o.no_held_out})
    if reasons:
        return "no held-out criterion: " + "; ".join(reasons)
    return "no number of states gave a model that could be scored"


def show(outcome, settings, echo=click.echo):
    """Print one number of states' model (or why it was not written); returns it."""
    from ..modelio import format_differential, format_states

    if outcome.refused:
        if not settings.sweep:
            raise click.ClickException(f"{outcome.refused} The model was not written; --allow-degenerate writes "
                                       f"it anyway.")
        echo(f"not written: {outcome.refused}")
        return outcome
    for warning in outcome.warnings:
        echo(f"warning: {warning} (written because of --allow-degenerate)")
    document = outcome.document
    if settings.spec.pooled:
        echo(f"pooled over {len(outcome.samples)} sample(s): {shown(', '.join(outcome.samples))}")
    est = outcome.estimator
    echo(format_states(est.methylation_, est.transmat_, est.startprob_, outcome.columns, document["labels"]))
    if "dispersion" in document:
        echo("overdispersion (beta-binomial), per state: " + "; ".join(
            ", ".join(f"{v:.3f}" for v in row) for row in document["dispersion"]))
    if diff := format_differential(est.methylation_, outcome.columns, settings.diff_threshold):
        echo(diff)
    if outcome.bootstrap is not None:
        ci = outcome.bootstrap
        echo(f"block bootstrap: {ci.n_replicates} replicates of {ci.n_blocks} blocks of "
             f"{outcome.block_size:,} bp")
        echo(format_intervals(ci.methylation_ci, ci.transmat_ci, outcome.columns))
    if settings.sweep:  # its models are put in place together when it ends (written_together); one model, below
        echo(f"model for {outcome.path} (written when the sweep ends)")
    return outcome


def spectrum_note(choice, outcomes) -> str:
    """A word on a recommended M whose spectrum is below noise ("" otherwise): the two columns
    measure different things, and a new user's trial took them to disagree."""
    if not choice or not any(o.m == choice[0] and o.spectrum is False for o in outcomes):
        return ""
    m = choice[0]
    return (f"(M = {m}'s spectrum is below noise: P13 does not tell {m} states apart from sampling noise, so the "
            f"spectral estimate is unreliable there; the held-out criterion judges the refined models themselves, "
            f"on blocks they were not fitted to)")


def format_sweep(outcomes) -> str:
    """One line per M: spectrum check, moment-fit criterion, held-out criterion or BIC, outcome."""
    lines = [f"{'M':>3}  {'spectrum':>13}  {'moment fit':>11}  {'held out':>20}  {'BIC':>14}  result"]
    for o in outcomes:
        spectrum = "" if o.spectrum is None else ("supported" if o.spectrum else "below noise")
        loss = "" if o.loss is None else f"{o.loss:.5f}"
        held = "" if o.held_out is None else f"{o.held_out.loss:.5f} +- {o.held_out.se:.5f}"
        bic_text = "" if o.bic is None else f"{o.bic:.6g}"
        result = f"written to {o.path}" if o.written else "degenerate: not written"
        lines.append(f"{o.m:>3}  {spectrum:>13}  {loss:>11}  {held:>20}  {bic_text:>14}  {result}")
    return "\n".join(lines)
