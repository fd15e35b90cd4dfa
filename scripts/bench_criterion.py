"""What one evaluation of the one-pass refinement's criterion costs, part by part, on a real store.

The refinement (streambhmm.learn.refine) runs L-BFGS-B from several starts, each step one
evaluation of the criterion and its gradient; `hmr` makes 300-500 of them on a chromosome.
This reads a counts store (its first --samples samples, each chromosome's bins where one has
reads: streambhmm.testing.load_counts), computes its moments (compute_moments, D = 30 as the
commands do), builds the criterion as `hmr` does (beta-binomial, the default weights) and
evaluates it at the quantile start of --states states, on one core:

    observation     the states' expected Beta-map features (dispersed: a quadrature per state)
    single bins     the thinned single-bin histogram's likelihood and gradient (compiled)
    adjacent bins   the thinned pair histogram's likelihood and gradient (compiled)
    the rest        the feature pairs', triples' and coverage terms and the gradient's assembly

and, as a baseline in the same run, the two histogram likelihoods cell by cell in the log
domain with numpy and scipy's logsumexp (their values alone, no gradient), which must agree.
Printed: the best of --repeat timings of each, in ms, and the whole evaluation's.

Then what the refinement's starts gain from running in two threads side by side, as `hmr`
runs them: the evaluations a second of one thread alone against two threads at once (each
its own --repeat x 10 evaluations). Only the compiled kernels and BLAS release the GIL, so
the ratio says how much of an evaluation can overlap with another's.

    python scripts/bench_criterion.py --store STORE [--samples 1] [--states 4] [--repeat 20]
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np
from scipy.special import gammaln, logsumexp
from threadpoolctl import threadpool_limits

from streambhmm import compute_moments
from streambhmm.io.store import open_store
from streambhmm.learn.criterion import Weights, objective_for, stationary
from streambhmm.learn.refine import quantile_levels
from streambhmm.moments.features import decode_cells
from streambhmm.testing import load_counts


def log_domain_loglik(moments, width, levels, dispersion, pi, transmat) -> float:
    """The histogram's beta-binomial log-likelihood per triple, cell by cell in the log domain."""
    layout = moments.histogram_layout(width)
    hist = moments.bin_histogram if width == 1 else moments.pair_histogram
    a = levels * (1 / dispersion - 1)
    b = (1 - levels) * (1 / dispersion - 1)
    total = 0.0
    for row in range(hist.shape[0]):
        cells = np.flatnonzero(hist[row])
        cov, meth = decode_cells(cells, layout)
        slots = []
        for g, s in enumerate(layout.slot_samples(row)):
            c, mu = cov[:, g][:, None], meth[:, g][:, None]
            slots.append(gammaln(c + 1) - gammaln(mu + 1) - gammaln(c - mu + 1)
                         + gammaln(mu + a[:, s]) + gammaln(c - mu + b[:, s]) - gammaln(c + a[:, s] + b[:, s])
                         - gammaln(a[:, s]) - gammaln(b[:, s]) + gammaln(a[:, s] + b[:, s]))
        half = len(slots) // 2
        first, second = sum(slots[:half]) if half else 0.0, sum(slots[half:])
        if width == 1:
            values = logsumexp(np.log(pi) + first + second, axis=1)
        else:
            joint = np.log(pi)[None, :, None] + first[:, :, None] + np.log(transmat)[None] + second[:, None, :]
            values = logsumexp(joint.reshape(len(cells), -1), axis=1)
        total += hist[row, cells] @ values
    return total / moments.n_triples


def best_ms(fn, repeat: int) -> float:
    fn()
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def evaluations_per_second(objective, x, m: int, n: int, threads: int) -> float:
    """Evaluations a second of ``threads`` threads, each evaluating the criterion ``n`` times at once."""
    workers = [threading.Thread(target=lambda: [objective(x, m) for _ in range(n)]) for _ in range(threads)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return threads * n / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", required=True, help="a counts store (streambhmm ingest)")
    parser.add_argument("--samples", type=int, default=1)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    store = open_store(args.store)
    meth, cov, lengths = load_counts(store, store.samples[:args.samples])
    moments = compute_moments(meth, cov, lengths)
    objective = objective_for(moments, Weights(), "betabinomial")
    m = args.states
    x = objective.pack(quantile_levels(moments, m), 0.9 * np.eye(m) + 0.1 / m)
    levels, transmat, coverage, dispersion = objective.unpack(x, m)
    pi = stationary(transmat)[0]
    histograms = {h.width: h for _, h in objective.histograms}

    parts = {
        "observation (expected features)": lambda: objective.observation(levels, coverage, dispersion),
        "single bins": lambda: histograms[1](levels, pi, transmat, dispersion),
        "adjacent bins": lambda: histograms[2](levels, pi, transmat, dispersion),
        "the whole evaluation": lambda: objective(x, m),
    }
    cells = {w: sum(row.weight.size for row in h.rows) for w, h in histograms.items()}
    print(f"{args.store}: {sum(lengths):,} covered bins x {args.samples} sample(s), {m} states, "
          f"histogram cells {cells[1]:,} (single bins) and {cells[2]:,} (adjacent pairs); best of {args.repeat}, "
          f"one core")
    print("| part | ms an evaluation |\n|---|---|")
    with threadpool_limits(1, user_api="blas"):
        seconds = {label: best_ms(fn, args.repeat) for label, fn in parts.items()}
        whole = seconds.pop("the whole evaluation")
        seconds["the rest"] = whole - sum(seconds.values())
        seconds["the whole evaluation"] = whole
        for label, ms in seconds.items():
            print(f"| {label} | {ms:.2f} |")
        print("\nthe histogram likelihoods against a log-domain evaluation in numpy (value only):")
        print("| histogram | compiled, with gradient: ms | log domain: ms | ratio | relative difference |")
        print("|---|---|---|---|---|")
        for width, label in ((1, "single bins"), (2, "adjacent bins")):
            compiled = best_ms(lambda: histograms[width](levels, pi, transmat, dispersion), args.repeat)
            naive = best_ms(lambda: log_domain_loglik(moments, width, levels, dispersion, pi, transmat),
                            max(args.repeat // 5, 1))
            value = -histograms[width](levels, pi, transmat, dispersion)[0]
            reference = log_domain_loglik(moments, width, levels, dispersion, pi, transmat)
            print(f"| {label} | {compiled:.2f} | {naive:.2f} | {naive / compiled:.1f}x | "
                  f"{abs(value - reference) / abs(reference):.1e} |")
        n = 10 * args.repeat
        alone, side_by_side = (evaluations_per_second(objective, x, m, n, threads) for threads in (1, 2))
        print(f"\nevaluations a second: one thread {alone:,.0f}, two threads side by side {side_by_side:,.0f} "
              f"({side_by_side / alone:.2f}x)")


if __name__ == "__main__":
    main()
