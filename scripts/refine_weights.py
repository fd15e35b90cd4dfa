"""How the moment-only refinement's criterion is weighted, measured (issue 12).

Variants of the criterion (streambhmm.learn.refine.Weights), each fitted with the package's
multi-start refinement:

    squares          least squares on P12, P13, P23, each over its squared norm (a plain GMM)
    KL               KL divergence of P12, P13, P23 (a composite likelihood of feature pairs)
    KL+bins          ... plus the single-bin histogram's likelihood (weight 1)
    KL+bins+pairs    ... single bins 0.5 and adjacent bin pairs 1; every state has the
                     sample's coverage distribution
    +state coverage  ... each state its own coverage distribution, tied to the data by the KL
                     of (coverage bucket, next bin's feature) sums
    +tensor          ... plus the third-order tensor's KL (weight 1): the default up to
                     S * D = 64 (two samples at D = 30)

Real data (scripts/real_data_fits.py's data sets and splits, M = 4 and 6): held-out
log-likelihood per bin relative to EM run to convergence (best of 3 random starts).
Simulated data (4 states, 2 samples, 3e5 bins, 3 seeds; coverage 20, and coverage that
depends on the state): mean matched |p - p_hat| over states and samples.

    python scripts/refine_weights.py [--real ...] [--simulated]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import real_data_fits as data  # noqa: E402

from streambhmm import SpectralBinomialHMM, compute_moments, matched_error, simulate  # noqa: E402
from streambhmm.learn.hmm import random_parameters  # noqa: E402
from streambhmm.learn.refine import Weights  # noqa: E402
from streambhmm.learn.simulate import model  # noqa: E402

VARIANTS = {
    "squares": Weights(1.0, 0.0, 0.0, 0.0, "squares", coverage=0.0),
    "KL": Weights(1.0, 0.0, 0.0, 0.0, coverage=0.0),
    "KL+bins": Weights(1.0, 1.0, 0.0, 0.0, coverage=0.0),
    "KL+bins+pairs": Weights(feature_triples=0.0, coverage=0.0),
    "+state coverage": Weights(feature_triples=0.0),
    "+tensor": Weights(feature_triples=1.0),
}


def refined(moments, m, weights, seed=0):
    """The package's refinement (FTD, quantile and 8 random starts) under ``weights``."""
    return SpectralBinomialHMM(m, criterion=weights, allow_degenerate=True, random_state=seed).fit_moments(moments)


def real(names, states):
    print("real data: held-out log-likelihood per bin relative to EM (%)")
    print(f"{'data set':<12} {'M':>2} " + " ".join(f"{v:>21}" for v in VARIANTS))
    gaps = {v: [] for v in VARIANTS}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            train, test = data.load(name, Path(tmp))
        moments = compute_moments(*train)
        for m in states:
            runs = [data.em(random_parameters(m, train[0].shape[1], r), train, m) for r in range(3)]
            em = data.score_parameters(max(runs, key=lambda run: run[1][-1])[0], test)
            cells = []
            for label, weights in VARIANTS.items():
                t = time.perf_counter()
                r = refined(moments, m, weights)
                gap = 100 * (data.score_parameters(r, test) - em) / abs(em)
                gaps[label].append(gap)
                cells.append(f"{gap:>+12.2f} ({time.perf_counter() - t:4.1f} s)")
            print(f"{name:<12} {m:>2} " + " ".join(f"{c:>21}" for c in cells), flush=True)
    print(f"{'worst':<15} " + " ".join(f"{min(g):>+21.2f}" for g in gaps.values()))
    print(f"{'mean':<15} " + " ".join(f"{np.mean(g):>+21.2f}" for g in gaps.values()))


def simulated():
    levels = np.array([[0.05, 0.10], [0.35, 0.80], [0.65, 0.20], [0.95, 0.90]])
    transmat = np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3)
    truth = model(levels, transmat)
    print("\nsimulated (4 states, 2 samples, 3e5 bins, 3 seeds): mean matched |p - p_hat|")
    print(f"{'coverage':<16} " + " ".join(f"{v:>21}" for v in VARIANTS))
    for label, coverage in (("20", 20.0), ("state-dependent", [[60, 60], [12, 12], [16, 16], [20, 20]])):
        errors = {v: [] for v in VARIANTS}
        for seed in range(3):
            sim = simulate(truth, [300_000], coverage=coverage, random_state=seed)
            moments = compute_moments(sim.methylated, sim.coverage, sim.lengths)
            for name, weights in VARIANTS.items():
                r = refined(moments, 4, weights, seed)
                errors[name].append(matched_error(levels, r.methylation_).methylation_error / levels.size)
        print(f"{label:<16} " + " ".join(f"{np.mean(e):>21.4f}" for e in errors.values()), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real", default=",".join(data.DATASETS))
    parser.add_argument("--states", default="4,6")
    parser.add_argument("--no-simulated", action="store_true")
    args = parser.parse_args()
    if args.real:
        real(args.real.split(","), [int(v) for v in args.states.split(",")])
    if not args.no_simulated:
        simulated()


if __name__ == "__main__":
    main()
