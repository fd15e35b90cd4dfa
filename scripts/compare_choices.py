"""Measure the spectral engine's design choices on finite simulated samples.

    python scripts/compare_choices.py [--bins 1500000] [--seeds 5]

Same data for every variant. Four well-separated states, 2 samples, a sticky chain, at
coverage 20 and at state-dependent coverage (60 in the unmethylated state, 12-20
elsewhere), and the paper protocol with T = 0.8 I + 0.2 U at coverage 50 (1 sample). Variants:
  recovery:      ratio (default) | paper formula (midpoints, corrected)
  normalization: columns of C rescaled so blocks sum to 1 (default) | raw
  decomposition: robust tensor power method (default) | Jennrich simultaneous
                 diagonalization (eigenvectors of H(I, I, w) for a random w)
Prints the mean (and max) Hungarian-matched methylation and transition errors.
"""

import argparse

import numpy as np

from streambhmm import compute_moments, matched_error, paper_model, simulate
from streambhmm.learn.recovery import methylation_paper, methylation_ratio, normalize_observation, transitions
from streambhmm.learn.simulate import model
from streambhmm.learn.spectral import tensor_power_method, whiten

LEVELS = np.array([[0.05, 0.10], [0.35, 0.80], [0.65, 0.20], [0.95, 0.90]])
STICKY = np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3)


def jennrich(h, rng):
    """Eigenvectors of H(I, I, w) = sum_j lambda_j (v_j . w) v_j v_j^T for a random w."""
    w = rng.standard_normal(h.shape[0])
    _, vecs = np.linalg.eigh(np.einsum("ijk,k->ij", h, w))
    vecs = vecs.T
    lambdas = np.einsum("ijk,li,lj,lk->l", h, vecs, vecs, vecs)
    sign = np.sign(lambdas)
    return lambdas * sign, vecs * sign[:, None]


def variants(moments, m, seed):
    wh = whiten(moments, m, check_spectrum=False)
    out = {}
    for decomposition in ("power", "jennrich"):
        rng = np.random.default_rng(seed)
        lambdas, vecs = (tensor_power_method if decomposition == "power" else jennrich)(wh.tensor, rng)
        raw = np.linalg.pinv(wh.whitening.T) @ (vecs.T * lambdas)
        for normalized in (True, False):
            obs = normalize_observation(raw, moments.n_samples) if normalized else raw
            transmat, _ = transitions(obs, moments)
            for recovery in ("ratio", "paper"):
                p = (methylation_ratio(obs, wh.s3, moments) if recovery == "ratio"
                     else methylation_paper(obs, moments))[0]
                out[(recovery, "normalized" if normalized else "raw", decomposition)] = (p, transmat)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=int, default=1_500_000)
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    settings = {
        "coverage 20, 2 samples": lambda seed: (model(LEVELS, STICKY), 20.0),
        "state-dependent coverage": lambda seed: (model(LEVELS, STICKY), [[60, 60], [12, 12], [16, 16], [20, 20]]),
        "paper protocol, a=0.8, cov 50": lambda seed: (paper_model(seed, self_transition=0.8), 50.0),
    }
    for name, make in settings.items():
        results = {}
        for seed in range(args.seeds):
            truth, coverage = make(seed)
            sim = simulate(truth, [args.bins // 3] * 3, coverage=coverage, random_state=100 + seed)
            mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
            for key, (p, transmat) in variants(mom, 4, seed).items():
                err = matched_error(truth.methylation, p, truth.transmat, transmat)
                results.setdefault(key, []).append((err.methylation_error, err.transmat_error))
        print(f"\n{name}: {args.bins:,} bins, {args.seeds} seeds")
        print(f"{'recovery':>9} {'C columns':>11} {'decomposition':>14} {'meth. mean':>11} {'max':>7} "
              f"{'trans. mean':>12} {'max':>7}")
        for (recovery, norm, dec), errs in results.items():
            e = np.array(errs)
            print(f"{recovery:>9} {norm:>11} {dec:>14} {e[:, 0].mean():>11.4f} {e[:, 0].max():>7.4f} "
                  f"{e[:, 1].mean():>12.4f} {e[:, 1].max():>7.4f}")


if __name__ == "__main__":
    main()
