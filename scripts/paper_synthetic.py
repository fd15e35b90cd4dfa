"""Reproduce the paper's synthetic experiment (section 5.1): FTD, EM and FTD+EM.

    python scripts/paper_synthetic.py [--trials 20] [--max-log2 16] [--figure FILE.png]

Protocol: m = 4; p_1, p_2 ~ U[0, 0.3], p_3, p_4 ~ U[0.7, 1]; T = 0.2 I + 0.8 U (columns
normalized); coverage ~ Poisson(25 | 50 | 100); D = 30. For each sample size (number of
bins, 2^7 .. 2^max_log2, one sequence) and each of `trials` random models, the error is
the Hungarian-matched sum |p - p_hat|. Methods, as in the paper: FTD; EM from a random
start; FTD followed by EM. EM stops when an iteration improves the log-likelihood by less
than 0.001 of its magnitude (the paper's rule), or after 500 iterations. Prints mean and
standard deviation per cell, the runtime table (the paper's Table 1) and how many trials
the spectrum check would have refused (those are still fitted, without the check, as the
paper does, and counted in the statistics).

--self-transition a replaces the paper's T = 0.2 I + 0.8 U by a I + (1 - a) U. The
paper's chains are nearly memoryless, which makes P13's m-th singular value tiny (see
the README); a = 0.8 shows the method's consistency on chains that carry signal.
"""

import argparse
import time

import numpy as np

from streambhmm import SpectralBinomialHMM, SpectrumError, matched_error, paper_model, simulate
from streambhmm.learn.hmm import BinomialHMM, random_parameters, run_em


METHODS = ("FTD", "EM", "FTD+EM")
EM_REL_TOL = 1e-3
EM_MAX_ITER = 500


def em_until(hmm, meth, cov):
    """EM with the paper's stopping rule; returns the number of M-steps."""
    return len(run_em(hmm, lambda: hmm.e_step(meth, cov), EM_MAX_ITER, EM_REL_TOL)) - 1


def run_trial(n_bins_genome, coverage, seed, self_transition, methods):
    """{method: (methylation error, transition error, seconds)}, and whether the check refused."""
    truth = paper_model(seed, self_transition=self_transition)
    sim = simulate(truth, [n_bins_genome], coverage=coverage, random_state=10_000 + seed)
    meth, cov = sim.methylated, sim.coverage
    out, refused = {}, False

    def score(est, seconds):
        err = matched_error(truth.methylation, est.methylation_, truth.transmat, est.transmat_)
        return err.methylation_error, err.transmat_error, seconds

    if "FTD" in methods or "FTD+EM" in methods:
        start = time.perf_counter()
        try:
            ftd = SpectralBinomialHMM(4, random_state=seed, method="ftd", allow_degenerate=True).fit(meth, cov)
        except SpectrumError:
            refused = True
            ftd = SpectralBinomialHMM(4, random_state=seed, check_spectrum=False, method="ftd", allow_degenerate=True).fit(meth, cov)
        t_ftd = time.perf_counter() - start
        out["FTD"] = score(ftd, t_ftd)
        if "FTD+EM" in methods:
            start = time.perf_counter()
            hmm = BinomialHMM(4).start_from(ftd.startprob_, ftd.transmat_, ftd.methylation_)
            em_until(hmm, meth, cov)
            out["FTD+EM"] = score(hmm, t_ftd + time.perf_counter() - start)
    if "EM" in methods:
        start = time.perf_counter()
        hmm = BinomialHMM(4).start_from(*random_parameters(4, 1, seed))
        em_until(hmm, meth, cov)
        out["EM"] = score(hmm, time.perf_counter() - start)
    return {k: v for k, v in out.items() if k in methods}, refused


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--min-log2", type=int, default=7)
    parser.add_argument("--max-log2", type=int, default=16)
    parser.add_argument("--coverages", default="25,50,100")
    parser.add_argument("--self-transition", type=float, default=0.2)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--figure", default=None, help="Write error against sample size here (PNG).")
    args = parser.parse_args()
    coverages = [float(c) for c in args.coverages.split(",")]
    sizes = [2**k for k in range(args.min_log2, args.max_log2 + 1)]
    methods = [m for m in METHODS if m in args.methods.split(",")]

    print(f"paper protocol with T = {args.self_transition:g} I + {1 - args.self_transition:g} U, "
          f"{args.trials} trials per cell: methylation error mean (sd); seconds per fit; "
          f"trials refused by FTD's spectrum check")
    table = {}  # (coverage, size, method) -> array of (meth error, trans error, seconds)
    for coverage in coverages:
        print(f"\ncoverage Poisson({coverage:g})")
        print(f"{'bins':>9} " + " ".join(f"{m + ' error':>18} {'s':>6}" for m in methods) + f" {'refused':>8}")
        for size in sizes:
            trials = [run_trial(size, coverage, seed, args.self_transition, methods) for seed in range(args.trials)]
            refused = sum(r for _, r in trials)
            cells = []
            for method in methods:
                values = np.array([t[method] for t, _ in trials])
                table[(coverage, size, method)] = values
                err = values[:, 0]
                cells.append(f"{err.mean():>9.4f} ({err.std(ddof=1):.4f}) {values[:, 2].mean():>6.3f}")
            print(f"{size:>9} " + " ".join(cells) + f" {refused:>8}")

    cov0 = coverages[0]
    print(f"\nrunning time, seconds per fit (mean over {args.trials} trials, coverage {cov0:g}; the paper's Table 1)")
    print(f"{'bins':>9} " + " ".join(f"{m:>9}" for m in methods))
    for size in sizes:
        print(f"{size:>9} " + " ".join(f"{table[(cov0, size, m)][:, 2].mean():>9.4f}" for m in methods))

    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(coverages), figsize=(4 * len(coverages), 3.4), sharey=True)
        colours = {"FTD": "tab:red", "EM": "tab:blue", "FTD+EM": "tab:green"}
        for ax, coverage in zip(np.atleast_1d(axes), coverages):
            for method in methods:
                err = np.array([table[(coverage, s, method)][:, 0] for s in sizes])
                se = err.std(axis=1, ddof=1) / np.sqrt(err.shape[1])
                ax.errorbar(sizes, err.mean(axis=1), yerr=se, fmt="o-", capsize=2, color=colours[method],
                            label=method)
            ax.set_xscale("log", base=2)
            ax.set_title(f"coverage {coverage:g}")
            ax.set_xlabel("bins")
        np.atleast_1d(axes)[0].set_ylabel("methylation error (mean, s.e.)")
        np.atleast_1d(axes)[0].legend()
        fig.suptitle(f"paper protocol, T = {args.self_transition:g} I + {1 - args.self_transition:g} U, "
                     f"{args.trials} trials")
        fig.tight_layout()
        fig.savefig(args.figure, dpi=110)
        print(f"\nfigure written to {args.figure}")


if __name__ == "__main__":
    main()
