"""An experiment behind docs/methods/one-pass.md (*What is left*): do pair histograms of
covered bins k apart, added to the one-pass criterion, bring the beta-binomial one-pass fit
nearer beta-binomial EM on held-out data? The named sets of real_data_fits.py, split as
there (20 blocks, even ones train, odd ones test); EM to convergence from 3 random starts
(the best by training likelihood), then the one-pass fit (all its starts, seed SEED) with the
criterion as it is and with each LAGS setting added (scripts/longer_lags.py's terms, the
lags' histograms computed in memory: the moment pass has no such sums).

    python scripts/lag_heldout.py [--datasets arabidopsis,...] [--states 4,6]
                                  [--lags "2:1;2,3:0.5"] [--seeds 0]

A --lags setting is LAG,LAG,...:WEIGHT (each lag's term at WEIGHT; the adjacent pairs'
term has weight 1). Printed per data set, M and setting: held-out log-likelihood per bin,
its gap to EM, seconds, and the fit's levels, overdispersions and self-transitions (first
sample).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import real_data_fits as data
from longer_lags import lag_terms, with_lags
from streambhmm import SpectralBinomialHMM, compute_moments
from streambhmm.learn import criterion, model
from streambhmm.learn.hmm import random_parameters


def parse_settings(text: str) -> list[tuple[list[int], float]]:
    out = [([], 0.0)]  # the criterion as it is
    for item in filter(None, text.split(";")):
        lags, _, weight = item.partition(":")
        out.append(([int(k) for k in lags.split(",")], float(weight or 1)))
    return out


def one_pass(moments, m: int, seed: int, terms, weight: float):
    """The one-pass fit (every start, as fit_moments makes them) with ``terms`` in its criterion."""
    def objective_for(moments, weights=criterion.Weights(), emission="binomial"):
        return with_lags(criterion.objective_for(moments, weights, emission), terms, weight)
    est = SpectralBinomialHMM(m, method="refined", random_state=seed, check_spectrum=False,
                              allow_degenerate=True, emission="betabinomial")
    plain, model.objective_for = model.objective_for, objective_for
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit_moments(moments)
    finally:
        model.objective_for = plain
    return est


def rounded(values) -> str:
    return " ".join(f"{v:.3f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(data.NAMED))
    parser.add_argument("--states", default="4,6")
    parser.add_argument("--lags", default="2:1;2,3:0.5")
    parser.add_argument("--seeds", default="0", help="the one-pass fit's seeds, comma-separated")
    args = parser.parse_args()
    data.EMISSION = "betabinomial"
    settings = parse_settings(args.lags)
    seeds = [int(s) for s in args.seeds.split(",")]
    print("| data set | M | seed | lags: weight | held-out loglik/bin (gap to EM) | seconds | levels | "
          "overdispersions | self-transitions |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets.split(","):
            train, test = data.load(name, Path(tmp))
            moments = compute_moments(*train, n_bins=30)
            terms = lag_terms(train, moments, sorted({k for lags, _ in settings for k in lags}))
            by_lag = {term.k: term for term in terms}
            for m in (int(s) for s in args.states.split(",")):
                runs = [data.em(random_parameters(m, train[0].shape[1], r), train, m) for r in range(3)]
                best = max(runs, key=lambda run: run[1][-1])[0]
                em_score = data.score(dict(levels=best.methylation_, transmat=best.transmat_,
                                           startprob=best.startprob_, dispersion=best.dispersion), test, m)
                print(f"| {name} | {m} | | EM, best of 3 | {em_score:.4f} | | {rounded(best.methylation_[:, 0])} | "
                      f"{rounded(best.dispersion[:, 0])} | {rounded(np.diag(best.transmat_))} |", flush=True)
                for seed in seeds:
                    for lags, weight in settings:
                        t = time.perf_counter()
                        est = one_pass(moments, m, seed, [by_lag[k] for k in lags], weight)
                        seconds = time.perf_counter() - t
                        value = data.score(dict(levels=est.methylation_, transmat=est.transmat_,
                                                startprob=est.startprob_, dispersion=est.dispersion_), test, m)
                        gap = 100 * (value - em_score) / abs(em_score)
                        label = f"{','.join(map(str, lags))}: {weight:g}" if lags else "none"
                        print(f"| {name} | {m} | {seed} | {label} | {value:.4f} ({gap:+.2f}%) | {seconds:.1f} | "
                              f"{rounded(est.methylation_[:, 0])} | {rounded(est.dispersion_[:, 0])} | "
                              f"{rounded(np.diag(est.transmat_))} |", flush=True)


if __name__ == "__main__":
    main()
