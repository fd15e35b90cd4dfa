"""How much the refinement weighs the projected feature's moments, measured (issue 13 part 2).

    python scripts/projected_weights.py [--datasets ...] [--states 4,6] [--scales 1,0.1,0.01,0]

The refinement's KL terms of feature pairs (and, when on, of the triple tensor) are
weighted for the projected feature by the ratio of a multinomial's variance to the
products' actual spread (refine.projected_weight without its PROJECTED_SCALE) times a
scale. Each variant (scale, tensor term on or off) is fitted with the same starts:
  - on the real multi-sample sets of many_samples_real.py (20 blocks, even train, odd
    test): held-out log-likelihood per test bin, % from EM to convergence (best of 3
    random starts);
  - on simulated joint data (6 states, 4 of them differential across 4 groups of samples,
    coverage 10-20): mean |p - p_hat| over states and samples, S = 8 (2e5 bins) and
    S = 32 (1e6 bins).
Seconds of each fit in parentheses.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import many_samples_real as real  # noqa: E402
from real_data_fits import em  # noqa: E402

from streambhmm import SpectralBinomialHMM, compute_moments  # noqa: E402
from streambhmm.learn import criterion as refine_module  # noqa: E402
from streambhmm.learn.evaluate import matched_error  # noqa: E402
from streambhmm.learn.hmm import random_parameters  # noqa: E402
from streambhmm.learn.refine import Weights  # noqa: E402
from streambhmm.learn.simulate import model, simulate  # noqa: E402

MEASURED = refine_module.projected_weight


def fit(moments, m: int, scale: float, tensor: bool):
    """(estimator, seconds) of the refined fit with the projected terms weighted ``scale``."""
    refine_module.projected_weight = lambda mom: MEASURED(mom) * scale / refine_module.PROJECTED_SCALE
    moments.__dict__.pop("_objectives", None)  # the criterion is cached per moments
    try:
        t = time.perf_counter()
        est = SpectralBinomialHMM(m, random_state=0, allow_degenerate=True,
                                  criterion=Weights(feature_triples=1.0 if tensor else 0.0))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit_moments(moments)
        return est, time.perf_counter() - t
    finally:
        refine_module.projected_weight = MEASURED


def simulated(n_samples: int, n_bins: int):
    rng = np.random.default_rng(0)
    group = np.arange(n_samples) % 4
    levels = np.tile(np.array([0.03, 0.2, 0.4, 0.6, 0.8, 0.97])[:, None], (1, n_samples))
    for state, (g, level) in zip((1, 2, 3, 4), ((1, 0.85), (2, 0.9), (3, 0.1), (0, 0.3))):
        levels[state, group == g] = level
    transmat = np.full((6, 6), 0.01) + np.eye(6) * 0.94
    sim = simulate(model(levels, transmat), [n_bins], coverage=rng.uniform(10, 20, n_samples), random_state=1)
    return compute_moments(sim.methylated, sim.coverage, projection_dim=32), levels


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(real.DATASETS))
    parser.add_argument("--states", default="4,6")
    parser.add_argument("--scales", default="1,0.1,0.01,0")
    args = parser.parse_args()
    variants = [(float(s), tensor) for tensor in (True, False) for s in args.scales.split(",")]
    header = ["data set", "S", "M"] + [f"x{s:g}{' +tensor' if t else ''}" for s, t in variants]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    gaps = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="streambhmm-weights-") as tmp:
        for name in args.datasets.split(","):
            (train, test), samples = real.load(name, Path(tmp) / name)
            moments = compute_moments(*train, projection_dim=32)
            for m in (int(v) for v in args.states.split(",")):
                runs = [em(random_parameters(m, len(samples), r), train, m)[0] for r in range(3)]
                best = max(runs, key=lambda hmm: hmm.score(*train))
                reference = real.score(best.methylation_, best.transmat_, best.startprob_, test)
                cells = []
                for variant in variants:
                    est, seconds = fit(moments, m, *variant)
                    value = real.score(est.methylation_, est.transmat_, est.startprob_, test)
                    gap = 100 * (value - reference) / abs(reference)
                    gaps[variant].append(gap)
                    cells.append(f"{gap:+.2f}% ({seconds:.0f} s)")
                lines.append(f"| {real.DATASETS[name][0]} | {len(samples)} | {m} | " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
    lines.append("| **mean** | | | " + " | ".join(f"**{np.mean(gaps[v]):+.2f}%**" for v in variants) + " |")
    lines.append("| **worst** | | | " + " | ".join(f"**{np.min(gaps[v]):+.2f}%**" for v in variants) + " |")
    for n_samples, n_bins in ((8, 200_000), (32, 1_000_000)):
        moments, levels = simulated(n_samples, n_bins)
        cells = []
        for variant in variants:
            est, seconds = fit(moments, 6, *variant)
            perm = matched_error(levels, est.methylation_).permutation
            cells.append(f"{np.abs(levels - est.methylation_[perm]).mean():.4f} ({seconds:.0f} s)")
        lines.append(f"| simulated, {n_bins:.0e} bins | {n_samples} | 6 | " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
