"""Command-line interface."""

from __future__ import annotations

import time

import click
import numpy as np

from . import __version__
from .evaluate import matched_error
from .model import SpectralBinomialHMM
from .simulate import model, simulate


def format_states(methylation, startprob, samples, title: str = "state") -> str:
    """A readable table: one row per state, one level column per sample, then its weight."""
    header = f"{title:>6}  " + "  ".join(f"{s:>10}" for s in samples) + f"  {'weight':>8}"
    rows = [header]
    for h, (levels, w) in enumerate(zip(methylation, startprob)):
        rows.append(f"{h:>6}  " + "  ".join(f"{v:>10.3f}" for v in levels) + f"  {w:>8.3f}")
    return "\n".join(rows)


@click.group()
@click.version_option(__version__, prog_name="streambhmm")
def main():
    """Learn Binomial HMMs of DNA methylation by the method of moments."""


@main.command()
@click.option("--n-bins-genome", "n", default=600_000, show_default=True, help="Simulated genome bins.")
@click.option("--seed", default=0, show_default=True)
def demo(n, seed):
    """Simulate a two-sample methylome, fit it, and print recovered against true states."""
    truth = model(
        methylation=[[0.03, 0.05], [0.90, 0.92], [0.85, 0.20], [0.50, 0.55]],
        transmat=np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3),
    )
    coverage = [[40, 35], [15, 18], [15, 18], [12, 14]]
    data = simulate(truth, [n // 3] * 3, coverage=coverage, random_state=seed)
    click.echo(f"simulated {data.coverage.shape[0]:,} bins x 2 samples in 3 sequences")
    start = time.perf_counter()
    est = SpectralBinomialHMM(4, random_state=seed).fit(data.methylated, data.coverage, data.lengths)
    elapsed = time.perf_counter() - start
    err = matched_error(truth.methylation, est.methylation_, truth.transmat, est.transmat_)
    perm = err.permutation
    click.echo(f"fitted in {elapsed:.2f} s ({est.n_triples_:,} triples)\n")
    click.echo("true states:")
    click.echo(format_states(truth.methylation, truth.startprob, ["sample_A", "sample_B"]))
    click.echo("\nrecovered states (matched to the true order):")
    click.echo(format_states(est.methylation_[perm], est.startprob_[perm], ["sample_A", "sample_B"]))
    click.echo(f"\nmethylation error (sum |p - p_hat|): {err.methylation_error:.4f}")
    click.echo(f"transition error (Frobenius):        {err.transmat_error:.4f}")
