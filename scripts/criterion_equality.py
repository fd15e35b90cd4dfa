"""The one-pass criterion and its gradient at random parameters over 432 settings, saved, or
compared with a save from other code (a change meant to leave the criterion as it was).

    python scripts/criterion_equality.py --save new.npz
    python scripts/criterion_equality.py --compare old.npz new.npz

Settings: 1-3 samples, 5 and 60 reads a bin (beta-binomial reads, overdispersion 0.05, at 60),
4, 12 and 30 Beta-map bins, binomial and beta-binomial emissions, 1, 2, 4 and 7 states, three
random parameter vectors each (seeded). Run --save from each code tree (e.g. a worktree of the
code before, with PYTHONPATH pointing at it) and --compare the two files: printed, how many
settings differ at all and the largest relative difference of the value and of the gradient
(relative to its largest entry).
"""

from __future__ import annotations

import argparse

import numpy as np

from streambhmm.learn.criterion import Objective, Weights
from streambhmm.learn.simulate import model, simulate
from streambhmm.moments.sums import compute_moments


def evaluations() -> dict[str, np.ndarray]:
    out = {}
    for n_samples in (1, 2, 3):
        for coverage in (5, 60):
            for n_bins in (4, 12, 30):
                rng = np.random.default_rng(100 * n_samples + coverage + n_bins)
                levels = np.sort(rng.uniform(0.02, 0.98, (3, n_samples)), axis=0)
                transmat = 0.9 * np.eye(3) + 0.1 * rng.dirichlet(np.ones(3), size=3)
                sim = simulate(model(levels, transmat), [2000, 1500], coverage=coverage,
                               random_state=int(rng.integers(1e6)), dispersion=0.05 if coverage == 60 else None)
                moments = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=n_bins)
                for emission in ("binomial", "betabinomial"):
                    objective = Objective(moments, Weights(), emission=emission)
                    for m in (1, 2, 4, 7):
                        for k in range(3):
                            dispersion = rng.uniform(0.002, 0.5, (m, n_samples)) if emission == "betabinomial" else None
                            x = objective.pack(np.sort(rng.uniform(0.01, 0.99, (m, n_samples)), axis=0),
                                               rng.dirichlet(np.ones(m), size=m), dispersion=dispersion)
                            value, gradient = objective(x, m)
                            out[f"{n_samples}-{coverage}-{n_bins}-{emission}-{m}-{k}"] = np.r_[value, gradient]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--save")
    parser.add_argument("--compare", nargs=2)
    args = parser.parse_args()
    if args.save:
        found = evaluations()
        np.savez(args.save, **found)
        print(f"{len(found)} settings saved to {args.save}")
    if args.compare:
        a, b = (np.load(path) for path in args.compare)
        differ = sum(not np.array_equal(a[k], b[k]) for k in a.files)
        value = max(abs(a[k][0] - b[k][0]) / max(abs(a[k][0]), 1e-300) for k in a.files)
        gradient = max(np.abs(a[k][1:] - b[k][1:]).max() / max(np.abs(a[k][1:]).max(), 1e-300) for k in a.files)
        print(f"{len(a.files)} settings, {differ} differ; largest relative difference: value {value:.2g}, "
              f"gradient {gradient:.2g}")


if __name__ == "__main__":
    main()
