"""Moment-kernel throughput against a naive einsum and the machine's matmul rate, on one core.

    python scripts/bench_moments.py [--bins 2000000] [--naive-triples 20000]

Everything is measured in this run on the same simulated data (4 sticky states,
Poisson(20) coverage, D = 30), so the ratios hold on a noisy machine:
  - triples/s of compute_moments (encoding, histograms and every other sum included)
    and of the paper's naive moments: P12, P13, P23, P123 and the ratio-recovery sums by
    einsum ((S*D)^3 work per triple), and their ratio. compute_moments is checked against
    streambhmm.testing.reference.naive_moments (the test oracle, bin by bin; too slow to be a
    fair baseline) on a slice;
  - einsum-equivalent GFLOP/s of the kernel (2 (S*D)^3 per triple) as a fraction of a
    single-threaded float64 matmul's GFLOP/s;
  - bins/s of a whole SpectralBinomialHMM.fit (moments + decomposition + recovery)
    against bins/s of the naive moment computation alone.
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy and numba load

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from streambhmm import SpectralBinomialHMM, compute_moments, simulate  # noqa: E402
from streambhmm.moments.features import beta_map  # noqa: E402
from streambhmm.testing.reference import naive_moments  # noqa: E402
from streambhmm.learn.simulate import model  # noqa: E402

LEVELS = np.array([[0.05, 0.10], [0.35, 0.80], [0.65, 0.20], [0.95, 0.90]])
STICKY = np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3)


def best_time(fn, repeat=3):
    best = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def einsum_moments(mu, cov, d):
    """The paper's moments, naively: the (S*D)-dimensional features of each triple's bins
    multiplied out by einsum."""
    n = mu.shape[0]
    feats = beta_map(cov, mu, d).reshape(n, -1)
    f1, f2, f3 = feats[:-2], feats[1:-1], feats[2:]
    return (np.einsum("ti,tj->ij", f1, f2), np.einsum("ti,tj->ij", f1, f3), np.einsum("ti,tj->ij", f2, f3),
            np.einsum("ti,tj,tk->ijk", f1, f2, f3), np.einsum("ts,tj->sj", mu[1:-1], f3),
            np.einsum("ts,tj->sj", cov[1:-1], f3))


def matmul_gflops(n=1500):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    seconds, _ = best_time(lambda: a @ b)
    return 2 * n**3 / seconds / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=int, default=2_000_000)
    parser.add_argument("--naive-triples", type=int, default=20_000, help="for S=1; S=2 uses 1/8 of it")
    parser.add_argument("--n-bins", type=int, default=30, help="Beta-map granularity D")
    args = parser.parse_args()
    d = args.n_bins

    gflops = matmul_gflops()
    print(f"single-threaded float64 matmul: {gflops:.1f} GFLOP/s\n")
    header = (f"{'S':>2} {'kernel Mtriples/s':>18} {'einsum Mtriples/s':>18} {'ratio':>8} "
              f"{'eff. GFLOP/s':>13} {'of matmul':>10} {'fit Mbins/s':>12} {'fit/naive':>10}")
    print(header)
    rows = []
    for n_samples in (1, 2):
        truth = model(LEVELS[:, :n_samples], STICKY)
        sim = simulate(truth, [args.bins], coverage=20.0, random_state=0)
        mu, cov = sim.methylated, sim.coverage
        compute_moments(mu[:1000], cov[:1000], n_bins=d)  # compile outside the timing
        seconds, mom = best_time(lambda: compute_moments(mu, cov, n_bins=d))
        kernel_rate = mom.n_triples / seconds

        n_naive = max(args.naive_triples // (1 if n_samples == 1 else 8), 100)
        naive_seconds, _ = best_time(lambda: einsum_moments(mu[:n_naive + 2], cov[:n_naive + 2], d), 1)
        naive_rate = n_naive / naive_seconds
        oracle = naive_moments(mu[:502], cov[:502], n_bins=d)
        assert compute_moments(mu[:502], cov[:502], n_bins=d).allclose(oracle, rtol=1e-10)

        fit_seconds, _ = best_time(
            lambda: SpectralBinomialHMM(4, n_bins=d, random_state=0, method="ftd", allow_degenerate=True).fit(mu, cov), 1)
        fit_rate = mu.shape[0] / fit_seconds
        effective = kernel_rate * 2 * (n_samples * d) ** 3 / 1e9
        rows.append((n_samples, kernel_rate, naive_rate))
        print(f"{n_samples:>2} {kernel_rate / 1e6:>18.2f} {naive_rate / 1e6:>18.4f} "
              f"{kernel_rate / naive_rate:>8.0f} {effective:>13.1f} {effective / gflops:>10.2f} "
              f"{fit_rate / 1e6:>12.2f} {fit_rate / naive_rate:>10.0f}")
    print("\n'eff. GFLOP/s' counts the 2 (S*D)^3 flops per triple that the einsum performs; the")
    print("grouped kernel does far fewer, so a fraction above 1 means it beats a perfect dense kernel.")
    print("'fit/naive' = bins/s of a full fit (moments included) over bins/s of the naive moments.")


if __name__ == "__main__":
    main()
