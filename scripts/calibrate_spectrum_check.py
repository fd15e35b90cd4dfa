"""Calibrate the spectrum check's margin (streambhmm.learn.spectral.NOISE_MARGIN).

    python scripts/calibrate_spectrum_check.py [--seeds 4]

For simulated chains with a known number of states m, compares P13's singular values
with the Frobenius sampling-noise scale sqrt(E|F1|^2 |F3|^2 / N) / sqrt(N):
  noise  = sigma_{m+1} / scale  (pure noise: the largest value the margin must exceed)
  signal = sigma_m / scale      (identifiable states: must stay above the margin)
The memoryless chains (stay = 1/m) have a rank-1 P13, so there sigma_m is noise too.
"""

import argparse

import numpy as np

from streambhmm import compute_moments, simulate
from streambhmm.learn.simulate import model
from streambhmm.learn.spectral import NOISE_MARGIN

SETTINGS = [  # (levels per state and sample, self-transition probability)
    ([[0.1, 0.2], [0.9, 0.8]], 0.95),
    ([[0.1, 0.2], [0.5, 0.8], [0.9, 0.3]], 0.9),
    ([[0.1, 0.2], [0.9, 0.8]], 0.5),  # memoryless: not identifiable
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=4)
    args = parser.parse_args()
    print(f"current margin: {NOISE_MARGIN}")
    print(f"{'m':>2} {'stay':>5} {'S':>2} {'bins':>7} {'cov':>4} {'max noise':>10} {'min signal':>11}")
    worst_noise = 0.0
    for levels, stay in SETTINGS:
        m = len(levels)
        a = np.full((m, m), (1 - stay) / (m - 1)) + np.eye(m) * (stay - (1 - stay) / (m - 1))
        for n_samples in (1, 2):
            mdl = model(np.array(levels)[:, :n_samples], a)
            for n in (2_000, 20_000, 200_000):
                for coverage in (5, 20, 80):
                    ratios = []
                    for seed in range(args.seeds):
                        sim = simulate(mdl, [n], coverage=coverage, random_state=seed)
                        mom = compute_moments(sim.methylated, sim.coverage)
                        sv = np.linalg.svd(mom.p13 / mom.n_triples, compute_uv=False)
                        scale = np.sqrt(mom.sq_norm_13 / mom.n_triples) / np.sqrt(mom.n_triples)
                        ratios.append((sv[m] / scale, sv[m - 1] / scale))
                    r = np.array(ratios)
                    worst_noise = max(worst_noise, r[:, 0].max())
                    print(f"{m:>2} {stay:>5} {n_samples:>2} {n:>7} {coverage:>4} {r[:, 0].max():>10.2f} "
                          f"{r[:, 1].min():>11.2f}")
    print(f"\nlargest pure-noise singular value: {worst_noise:.2f} of the scale")


if __name__ == "__main__":
    main()
