"""Reproduce the paper's synthetic experiment (section 5.1) for the spectral method (FTD).

    python scripts/paper_synthetic.py [--trials 20] [--max-log2 20]

Protocol: m = 4; p_1, p_2 ~ U[0, 0.3], p_3, p_4 ~ U[0.7, 1]; T = 0.2 I + 0.8 U (columns
normalized); coverage ~ Poisson(25 | 50 | 100); D = 30. For each sample size (number of
bins, 2^7 .. 2^max_log2, one sequence) and each of `trials` random models, the error is
the Hungarian-matched sum |p - p_hat|. Prints mean and standard deviation per cell, and
how many trials the spectrum check would have refused (those are still fitted, without
the check, as the paper does, and counted in the statistics).

--self-transition a replaces the paper's T = 0.2 I + 0.8 U by a I + (1 - a) U. The
paper's chains are nearly memoryless, which makes P13's m-th singular value tiny (see
the README); a = 0.8 shows the method's consistency on chains that carry signal.
"""

import argparse
import time

import numpy as np

from streambhmm import SpectralBinomialHMM, SpectrumError, matched_error, paper_model, simulate


def run_trial(n_bins_genome, coverage, seed, self_transition):
    truth = paper_model(seed, self_transition=self_transition)
    sim = simulate(truth, [n_bins_genome], coverage=coverage, random_state=10_000 + seed)
    refused = False
    try:
        est = SpectralBinomialHMM(4, random_state=seed).fit(sim.methylated, sim.coverage)
    except SpectrumError:
        refused = True
        est = SpectralBinomialHMM(4, random_state=seed, check_spectrum=False).fit(sim.methylated, sim.coverage)
    err = matched_error(truth.methylation, est.methylation_, truth.transmat, est.transmat_)
    return err.methylation_error, err.transmat_error, refused


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--min-log2", type=int, default=7)
    parser.add_argument("--max-log2", type=int, default=20)
    parser.add_argument("--coverages", default="25,50,100")
    parser.add_argument("--self-transition", type=float, default=0.2)
    args = parser.parse_args()
    coverages = [float(c) for c in args.coverages.split(",")]
    sizes = [2**k for k in range(args.min_log2, args.max_log2 + 1)]

    print(f"FTD, paper protocol with T = {args.self_transition:g} I + {1 - args.self_transition:g} U, "
          f"{args.trials} trials per cell: methylation error mean (sd), "
          f"median; transition error mean; refused by the spectrum check")
    for coverage in coverages:
        print(f"\ncoverage Poisson({coverage:g})")
        print(f"{'bins':>9} {'meth. error':>18} {'median':>7} {'trans. error':>13} {'refused':>8} {'s/fit':>7}")
        for size in sizes:
            start = time.perf_counter()
            results = np.array([run_trial(size, coverage, seed, args.self_transition) for seed in range(args.trials)])
            per_fit = (time.perf_counter() - start) / args.trials
            meth, trans, refused = results[:, 0], results[:, 1], results[:, 2]
            print(f"{size:>9} {meth.mean():>9.4f} ({meth.std(ddof=1):.4f}) {np.median(meth):>7.4f} "
                  f"{trans.mean():>13.4f} "
                  f"{int(refused.sum()):>8} {per_fit:>7.3f}")


if __name__ == "__main__":
    main()
