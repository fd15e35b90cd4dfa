"""How the one-pass fit's gap to EM grows as its training data shrink (issue 24: the A. thaliana
set of real_data_fits.py, whose training half holds only 4,252 bins, is the one named set
where the beta-binomial one-pass fit misses 1% of EM).

    python scripts/onepass_data_size.py [--datasets h1-imr90,methylseekr,arabidopsis] [--bins 4252,17000]
                                        [--windows 5] [--states 4] [--searches 8:2,32:4] [--optima 24]

For each data set, real_data_fits.py's split (20 blocks of covered bins: even blocks train,
odd blocks test). The training half is cut down to N bins: from each of its 10 blocks a run
of N / 10 consecutive bins, at an offset drawn per window (seeded), so the small training
sets keep the A. thaliana set's shape (10 sequences) and each window holds other bins. For
each window both fits train on those bins alone, and both are scored on the whole test half:

    refined   the beta-binomial one-pass fit (the default refined fit)
    EM        beta-binomial EM to convergence, the best of 3 random starts (training likelihood)

Printed per data set, N and window: the held-out log-likelihood per test bin of each and the
one-pass gap in percent; then per N the median and the range of the gaps, beside the gap on
the whole training half. Same fits, splits and scoring as real_data_fits.py (imported). A. thaliana's
training half holds 4,252 bins: its windows differ from it by at most a bin per block, and
larger N are skipped.

And whether the search stops short: on the whole training half, the one-pass fit with each
--searches setting (random starts : starts finished; the default is 8:2), its criterion
(lower is better: the fit keeps its lowest) and its held-out gap to EM.

With --optima N (A. thaliana only, by default), where the starts end: the refinement from
the quantile start and from N random starts, each alone to convergence, the ends (repeats
within 1e-6 of criterion dropped) listed by criterion, each with the histogram terms' value at it (the likelihood of single
bins and adjacent pairs, EM's composite likelihood: the criterion without its feature,
tensor and coverage terms) and its held-out gap to EM; then the gap of the optimum with the
lowest criterion (the fit's choice) against that with the lowest histogram terms.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import warnings

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_data_fits as rdf  # noqa: E402

from streambhmm import SpectralBinomialHMM, compute_moments  # noqa: E402
from streambhmm.learn.checks import DegenerateModelWarning  # noqa: E402
from streambhmm.learn.criterion import Weights, objective_for  # noqa: E402
from streambhmm.learn.refine import quantile_levels, refine, sticky_start  # noqa: E402


def window(train, n_bins: int, rng) -> tuple:
    """n_bins of the training half: a run of n_bins / len(blocks) from each block, at a random offset."""
    meth, cov, lengths = train
    per = n_bins // lengths.size
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    runs = []
    for start, length in zip(starts, lengths):
        if length < per:
            raise ValueError(f"a training block holds {length} bins, fewer than {per}")
        offset = start + int(rng.integers(0, length - per + 1))
        runs.append((offset, offset + per))
    return (np.concatenate([meth[a:b] for a, b in runs]), np.concatenate([cov[a:b] for a, b in runs]),
            np.full(len(runs), per))


def gap(train, test, m: int, seed: int, moments=None) -> tuple[float, float, float]:
    """(refined, EM, gap %) held-out log-likelihood per test bin (``moments``: of ``train``, when at hand)."""
    results = rdf.fit_all(m, train, compute_moments(*train, n_bins=30) if moments is None else moments, seed)
    refined, em = rdf.score(results["refined"], test, m), rdf.score(results["EM"], test, m)
    return refined, em, 100 * (refined - em) / abs(em)


def held_out(test, m: int, em: float, levels, transmat, startprob, dispersion) -> tuple[float, float]:
    """(held-out log-likelihood per test bin, its gap to EM's ``em`` in percent) of a beta-binomial model."""
    value = rdf.score(dict(levels=levels, transmat=transmat, startprob=startprob, dispersion=dispersion), test, m)
    return value, 100 * (value - em) / abs(em)


def searched(moments, test, m: int, seed: int, em: float, n_random: int, n_finished: int) -> str:
    """The one-pass fit with n_random random starts, n_finished of them finished: its
    criterion and held-out gap to EM (``em``, per test bin)."""
    est = SpectralBinomialHMM(m, random_state=seed, allow_degenerate=True, emission="betabinomial",
                              n_random_starts=n_random, n_finished=n_finished)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateModelWarning)
        est.fit_moments(moments)
    value, gap_percent = held_out(test, m, em, est.methylation_, est.transmat_, est.startprob_, est.dispersion_)
    return f"criterion {est.loss_:.6f}, held-out {value:.4f}, gap {gap_percent:+.2f}%"


def optima(moments, test, m: int, seed: int, em: float, n_random: int) -> None:
    """Print where the refinement's starts end (see the module docstring)."""
    criterion = objective_for(moments, Weights(), "betabinomial")
    histograms = objective_for(moments, Weights(feature_pairs=0.0, feature_triples=0.0, coverage=0.0),
                               "betabinomial")
    rng = np.random.default_rng(seed)
    starts = [("quantiles", quantile_levels(moments, m), 0.9 * np.eye(m) + 0.1 / m)]
    starts += [(f"random{i}", *sticky_start(m, moments.n_samples, rng)) for i in range(n_random)]
    found = []
    for start in starts:
        r = refine(criterion, [start], keep=1)
        if any(abs(r.loss - other[0]) < 1e-6 for other in found):
            continue
        found.append((r.loss, histograms(histograms.pack(r.methylation, r.transmat, None, r.dispersion), m)[0],
                      held_out(test, m, em, r.methylation, r.transmat, r.startprob, r.dispersion)[1], start[0]))
    found.sort()
    print(f"  {len(found)} ends of {len(starts)} starts, repeats within 1e-6 dropped (criterion, histogram terms, "
          f"held-out gap):")
    for loss, composite, gap_percent, label in found:
        print(f"    {label:>10}  {loss:.6f}  {composite:.6f}  {gap_percent:+.2f}%")
    best_composite = min(found, key=lambda row: row[1])
    print(f"  lowest criterion: gap {found[0][2]:+.2f}%; lowest histogram terms ({best_composite[3]}, criterion "
          f"{best_composite[0]:.6f}): gap {best_composite[2]:+.2f}%", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default="h1-imr90,methylseekr,arabidopsis")
    parser.add_argument("--bins", default="4252,17000", help="training bins per window (comma-separated)")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--searches", default="8:2,32:4", help="random starts:finished starts, comma-separated")
    parser.add_argument("--optima", type=int, default=24, help="random starts whose optima are listed (0: none)")
    parser.add_argument("--optima-datasets", default="arabidopsis")
    args = parser.parse_args()
    rdf.EMISSION = "betabinomial"
    m = args.states
    table = []
    for name in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            train, test = rdf.load(name, Path(tmp))
        title = rdf.DATASETS[name]["title"]
        print(f"\n=== {title}: {train[0].shape[0]:,} training bins, {test[0].shape[0]:,} test bins, "
              f"{train[0].shape[1]} sample(s), M = {m} ===", flush=True)
        moments = compute_moments(*train, n_bins=30)  # of the whole training half: its fits below share them
        refined, em, whole = gap(train, test, m, args.seed, moments)
        print(f"  all {train[0].shape[0]:,} training bins: refined {refined:.4f}, EM {em:.4f}, gap {whole:+.2f}%",
              flush=True)
        for setting in args.searches.split(","):
            n_random, n_finished = (int(v) for v in setting.split(":"))
            print(f"  all training bins, {n_random} random starts, {n_finished} finished: "
                  f"{searched(moments, test, m, args.seed, em, n_random, n_finished)}", flush=True)
        if args.optima and name in args.optima_datasets.split(","):
            optima(moments, test, m, args.seed, em, args.optima)
        rng = np.random.default_rng(args.seed)
        for n_bins in (int(v) for v in args.bins.split(",")):
            if n_bins >= train[0].shape[0]:
                print(f"  {n_bins:,} bins: the training half holds fewer (see above)")
                continue
            gaps = []
            for w in range(args.windows):
                refined, em, g = gap(window(train, n_bins, rng), test, m, args.seed)
                gaps.append(g)
                print(f"  {n_bins:,} bins, window {w + 1}: refined {refined:.4f}, EM {em:.4f}, gap {g:+.2f}%",
                      flush=True)
            table.append((title, n_bins, gaps, whole, train[0].shape[0]))
    print(f"\n| data set (M = {m}) | training bins | one-pass gap to EM: median (range) | within 1% | "
          f"on the whole training half |\n|---|---|---|---|---|")
    for title, n_bins, gaps, whole, total in table:
        within = sum(abs(g) <= 1 for g in gaps)
        print(f"| {title} | {n_bins:,} | {np.median(gaps):+.2f}% ({min(gaps):+.2f} to {max(gaps):+.2f}) | "
              f"{within} of {len(gaps)} | {whole:+.2f}% ({total:,} bins) |")


if __name__ == "__main__":
    main()
