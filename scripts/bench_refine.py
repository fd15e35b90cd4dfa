"""Speed of the moment-only refinement for m <= 10 states and S <= 4 samples.

Simulated methylomes (m well-separated states, sticky chain, Poisson(20) coverage, --bins
bins; one core), then, in the same run and on the same data:

    moments     compute_moments (the one pass; not part of the refinement's cost)
    FTD         SpectralBinomialHMM(method="ftd") on the moments
    refined     SpectralBinomialHMM() on the moments: FTD, 10 starts screened, 3 finished
    EM iter     one in-memory EM iteration (BinomialHMM.e_step + m_step) on the counts

The refinement reads only the moments, so its cost does not grow with the data: it grows
with m and with the histogram cells (bounded by the cell budget). The last column is how
many EM iterations cost as much as the refinement.

    python scripts/bench_refine.py [--bins 200000] [--states 2,4,6,8,10] [--samples 1,2,3,4]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

from streambhmm import SpectralBinomialHMM, compute_moments, simulate
from streambhmm.learn.checks import DegenerateModelWarning
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.learn.refine import objective_for
from streambhmm.learn.simulate import model


def truth(m: int, n_samples: int, rng) -> object:
    levels = np.stack([rng.permutation(np.linspace(0.05, 0.95, m)) for _ in range(n_samples)], axis=1)
    transmat = np.full((m, m), 0.05 / (m - 1)) + np.eye(m) * (0.95 - 0.05 / (m - 1))
    return model(levels, transmat)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=float, default=2e5)
    parser.add_argument("--states", default="2,4,6,8,10")
    parser.add_argument("--samples", default="1,2,3,4")
    args = parser.parse_args()
    warnings.simplefilter("ignore", DegenerateModelWarning)
    rng = np.random.default_rng(0)
    print(f"{'S':>2} {'m':>3} {'moments s':>10} {'cells':>14} {'FTD s':>7} {'refined s':>10} "
          f"{'EM iter s':>10} {'refined / EM iter':>18}")
    for n_samples in (int(v) for v in args.samples.split(",")):
        for m in (int(v) for v in args.states.split(",")):
            sim = simulate(truth(m, n_samples, rng), [int(args.bins)], coverage=20.0, random_state=rng)
            t = time.perf_counter()
            mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
            t_moments = time.perf_counter() - t
            t = time.perf_counter()
            objective = objective_for(mom)  # tables shared by every fit of these moments
            t_tables = time.perf_counter() - t
            t = time.perf_counter()
            SpectralBinomialHMM(m, method="ftd", check_spectrum=False, allow_degenerate=True,
                                random_state=0).fit_moments(mom)
            t_ftd = time.perf_counter() - t
            t = time.perf_counter()
            SpectralBinomialHMM(m, random_state=0, allow_degenerate=True).fit_moments(mom)
            t_refined = time.perf_counter() - t + t_tables
            hmm = BinomialHMM(m, init="random", random_state=0)
            hmm.initialize(sim.methylated, sim.coverage, sim.lengths)
            hmm.e_step(sim.methylated, sim.coverage, sim.lengths)  # compile
            t = time.perf_counter()
            hmm.m_step(hmm.e_step(sim.methylated, sim.coverage, sim.lengths))
            t_em = time.perf_counter() - t
            cells = "/".join(str(int(np.count_nonzero(h))) for h in (mom.bin_histogram, mom.pair_histogram))
            print(f"{n_samples:>2} {m:>3} {t_moments:>10.2f} {cells:>14} {t_ftd:>7.2f} {t_refined:>10.2f} "
                  f"{t_em:>10.3f} {t_refined / t_em:>18.1f}", flush=True)
            assert objective is objective_for(mom)


if __name__ == "__main__":
    main()
