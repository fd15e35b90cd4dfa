"""The triple kernel against its previous version, and compute_moments end to end, on one core.

    python scripts/bench_triples.py [--bins 1000000] [--repeat 3] [--real [--source FILE]]

For S = 1, 2, 4 samples at D = 30, in the same run and on the same data:
  - M triples/s of moment_kernels.accumulate_triples (k3 groups batched into GEMMs) and of
    reference.grouped_triples (the previous kernel: one rank-one update of p123 per k3
    group), their ratio, and the largest relative difference of their sums;
  - M bins x samples/s of compute_moments (every histogram and sum included) with each
    kernel, and their ratio.
The data: simulated (4 sticky states, Poisson(20) coverage), or with --real the 100 bp bins
of the MethylSeekR IMR90 chr22 excerpt (../shared/data/real; its wide coverage range gives
~10,000 distinct codes, hence many k3 groups), sample s shifted along it and mirrored for
odd s, tiled to --bins. Each timing is the best of --repeat runs (the machine may be shared).
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy and numba load

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

import numpy as np  # noqa: E402

from streambhmm import compute_moments, simulate  # noqa: E402
from streambhmm.learn.simulate import model  # noqa: E402
from streambhmm.moments import moment_kernels  # noqa: E402
from streambhmm.moments.features import encode  # noqa: E402
from streambhmm.testing.reference import grouped_triples  # noqa: E402
from streambhmm.moments.sums import Moments  # noqa: E402

LEVELS = np.array([[0.05, 0.10, 0.20, 0.70], [0.35, 0.80, 0.50, 0.10], [0.65, 0.20, 0.90, 0.40],
                   [0.95, 0.90, 0.10, 0.60]])
STICKY = np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3)
REAL = (next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
             Path(__file__).resolve().parents[2] / "shared") / "data" / "real" / "MethylSeekR_IMR90_chr22"
        / "Lister2009_imr90_hg18_chr22.tab.gz")
D = 30
SUMS = ("p12", "p13", "p23", "p123", "b_methylated", "b_coverage", "inv_coverage")


def simulated(n_bins: int, n_samples: int):
    sim = simulate(model(LEVELS[:, :n_samples], STICKY), [n_bins], coverage=20.0, random_state=0)
    return sim.methylated, sim.coverage


def real_bins(source: Path = REAL):
    """(methylated, coverage) of the excerpt's 100 bp bins, every bin from the first CpG's."""
    rows = np.loadtxt(source, usecols=(1, 2, 3), dtype=np.int64)
    bins = (rows[:, 0] - rows[0, 0]) // 100
    return (np.bincount(bins, rows[:, 2]).astype(np.int64), np.bincount(bins, rows[:, 1]).astype(np.int64))


def real(n_bins: int, n_samples: int, bins):
    """The covered bins of n_samples shifted (and for odd s mirrored) copies, tiled to n_bins."""
    meth, cov = bins
    columns = []
    for s in range(n_samples):
        m, c = (meth, cov) if s % 2 == 0 else (meth[::-1], cov[::-1])
        shift = s * c.size // (2 * n_samples)
        columns.append((np.roll(m, shift), np.roll(c, shift)))
    m, c = (np.stack([col[k] for col in columns], axis=1) for k in (0, 1))
    covered = c.sum(axis=1) > 0
    m, c = m[covered], c[covered]
    reps = -(-n_bins // m.shape[0])
    return np.tile(m, (reps, 1))[:n_bins], np.tile(c, (reps, 1))[:n_bins]


def best_times(fns, repeat):
    """Best seconds and last result of each function, run in turn ``repeat`` times (turns
    share the machine's load between them)."""
    best, results = [np.inf] * len(fns), [None] * len(fns)
    for _ in range(repeat):
        for j, fn in enumerate(fns):
            start = time.perf_counter()
            results[j] = fn()
            best[j] = min(best[j], time.perf_counter() - start)
    return best, results


def old_moments(mu, cov):
    """compute_moments with the previous triple kernel."""
    with mock.patch.object(moment_kernels, "accumulate_triples", grouped_triples):
        return compute_moments(mu, cov, n_bins=D)


def run_kernel(kernel, features, starts, n_samples):
    out = Moments.zeros(n_samples, D)
    kernel(features.codes, starts, features.table, features.coverage.astype(np.float64),
           features.methylated.astype(np.float64), out.p12, out.p13, out.p23, out.p123, out.b_methylated,
           out.b_coverage, out.inv_coverage)
    return out


def largest_difference(a: Moments, b: Moments) -> float:
    return max(np.abs(getattr(a, k) - getattr(b, k)).max() / max(np.abs(getattr(b, k)).max(), 1e-300) for k in SUMS)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--real", action="store_true", help="the real excerpt's bins instead of simulated ones")
    parser.add_argument("--source", type=Path, default=REAL, help="the excerpt (MethylSeekR format) for --real")
    args = parser.parse_args()
    bins = real_bins(args.source) if args.real else None
    print(f"{'real' if args.real else 'simulated'} data, {args.bins:,} bins, D = {D}, best of {args.repeat}")
    print(f"{'S':>2} {'codes':>6} {'new Mtriples/s':>15} {'old Mtriples/s':>15} {'ratio':>6} {'max rel diff':>13} "
          f"{'moments new M bins*S/s':>23} {'old':>6} {'ratio':>6}")
    for n_samples in (1, 2, 4):
        mu, cov = real(args.bins, n_samples, bins) if args.real else simulated(args.bins, n_samples)
        features = encode(mu, cov, D)
        starts = moment_kernels.triple_starts(np.array([mu.shape[0]], np.int64))
        for kernel in (moment_kernels.accumulate_triples, grouped_triples):  # compile outside the timing
            run_kernel(kernel, features, starts[:100], n_samples)
        compute_moments(mu[:1000], cov[:1000], n_bins=D)
        (new_s, old_s), (new, old) = best_times(
            [lambda: run_kernel(moment_kernels.accumulate_triples, features, starts, n_samples),
             lambda: run_kernel(grouped_triples, features, starts, n_samples)], args.repeat)
        (moments_new, moments_old), _ = best_times(
            [lambda: compute_moments(mu, cov, n_bins=D), lambda: old_moments(mu, cov)], args.repeat)
        cells = mu.shape[0] * n_samples
        print(f"{n_samples:>2} {features.table.shape[0]:>6} {starts.size / new_s / 1e6:>15.2f} "
              f"{starts.size / old_s / 1e6:>15.2f} {old_s / new_s:>6.2f} {largest_difference(new, old):>13.1e} "
              f"{cells / moments_new / 1e6:>23.2f} {cells / moments_old / 1e6:>6.2f} "
              f"{moments_old / moments_new:>6.2f}", flush=True)


if __name__ == "__main__":
    main()
