"""Does thinning the histograms less bring the one-pass fit closer to EM? (issue 24: A. thaliana)

The refinement's histogram terms see each bin's reads thinned to a cap that fits the cell
budget (features.histogram_layout): with two samples the adjacent-pair histogram has four
slots, and at the default budget (2^19 cells) each keeps at most 5 reads. This fits the
beta-binomial one-pass model on real_data_fits.py's splits with moments at larger budgets
(less thinning; the dense histograms grow with them) and scores each on the held-out half
against beta-binomial EM to convergence, best of 3 random starts (as real_data_fits.py),
in the same run:

    python -W ignore scripts/onepass_thinning.py [--datasets arabidopsis,h1-imr90,modkit]
                                                 [--budgets 19,22,24] [--states 4,6]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import real_data_fits as data  # noqa: E402

from streambhmm import SpectralBinomialHMM, compute_moments  # noqa: E402
from streambhmm.learn.hmm import random_parameters  # noqa: E402
from streambhmm.moments.features import histogram_layout  # noqa: E402


def em_score(train, test, m: int, seed: int = 0) -> float:
    """Held-out log-likelihood per bin of the best of 3 random EM starts (training likelihood)."""
    runs = []
    for r in range(3):
        hmm, history, _ = data.em(random_parameters(m, train[0].shape[1], seed + r), train, m)
        runs.append((history[-1], hmm))
    best = max(runs, key=lambda run: run[0])[1]
    return data.score(dict(levels=best.methylation_, transmat=best.transmat_, startprob=best.startprob_,
                           dispersion=best.dispersion), test, m)


def one_pass_score(moments, test, m: int, seed: int = 0) -> float:
    est = SpectralBinomialHMM(m, method="refined", random_state=seed, check_spectrum=False, allow_degenerate=True,
                              emission="betabinomial")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit_moments(moments)
    return data.score(dict(levels=est.methylation_, transmat=est.transmat_, startprob=est.startprob_,
                           dispersion=est.dispersion_), test, m)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="arabidopsis,h1-imr90,modkit")
    parser.add_argument("--budgets", default="19,22,24", help="histogram budgets, log2 of cells")
    parser.add_argument("--states", default="4,6")
    args = parser.parse_args()
    data.EMISSION = "betabinomial"
    budgets = [int(b) for b in args.budgets.split(",")]
    states = [int(s) for s in args.states.split(",")]
    print("| data set | M | EM | " + " | ".join(f"2^{b} cells" for b in budgets) + " |")
    print("|---|---|---|" + "---|" * len(budgets))
    for name in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            train, test = data.load(name, Path(tmp))
        n_samples = train[0].shape[1]
        moments = {b: compute_moments(*train, n_bins=30, histogram_budget=1 << b) for b in budgets}
        caps = {b: "/".join(str(histogram_layout(n_samples, w, 1 << b).cap) for w in (1, 2)) for b in budgets}
        for m in states:
            em = em_score(train, test, m)
            cells = []
            for b in budgets:
                value = one_pass_score(moments[b], test, m)
                cells.append(f"{value:.4f} ({100 * (value - em) / abs(em):+.2f}%; caps {caps[b]})")
            print(f"| {data.DATASETS[name]['title']} | {m} | {em:.4f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
