"""An experiment behind docs/methods/one-pass.md (*What is left*): would pair histograms at
longer lags bring `hmr`'s one-pass model to EM's? The one-pass criterion sees single bins,
adjacent pairs and triples; EM's likelihood sees the whole chain.

    python scripts/longer_lags.py STORE LAGS WEIGHT    # e.g. STORE 2,4,8,16,32 5

For a counts store (100 bp bins): `hmr`'s one-pass fit (HMR_MODEL), EM to convergence from
it, then the criterion plus, per lag k in LAGS, WEIGHT times the likelihood of the thinned
histogram of covered bins k apart (pi_i (A^k)_ij: the pair term through A^k), minimized from
the one-pass fit and from EM's. The lag histograms are computed here in memory from the
store (an experiment; the moment pass has no such sums). Printed: each fit's levels and
overdispersions and its HMRs' base-pair Jaccard with EM's.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import types

import numpy as np
import xarray as xr
from compare_dnmtools import jaccard_genome
from onepass_em_optimum import hmrs, rounded
from scipy.optimize import minimize
from streambhmm.app.calls import fit_call_model
from streambhmm.distributed.em import fit_store_em
from streambhmm.distributed.fitdata import load_moments
from streambhmm.io.store import open_store
from streambhmm.io.tasks import InProcessClient
from streambhmm.learn import criterion as C
from streambhmm.learn.domains import HMR_MODEL
from streambhmm.learn.histograms import HistogramLikelihood
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.moments.features import encode
from streambhmm.moments.histograms import thinned_histogram
from streambhmm.moments.spec import FeatureSpec


def store_counts(path, store):
    """(methylated, coverage, lengths) of the store's covered bins, chromosome after chromosome."""
    meths, covs, lengths = [], [], []
    for chrom in store.chromosomes:
        ds = xr.open_zarr(path, group=chrom)
        cov, meth = ds.coverage.values.astype(np.int64), ds.methylated.values.astype(np.int64)
        keep = (cov > 0).any(axis=1)
        meths.append(meth[keep])
        covs.append(cov[keep])
        lengths.append(int(keep.sum()))
    return np.concatenate(meths), np.concatenate(covs), np.array(lengths)


class LagTerm:
    """The likelihood of the thinned histogram of covered bins k apart, pi_i (A^k)_ij in
    place of the adjacent pairs' pi_i A_ij, in the form of the criterion's histogram terms
    (Objective.histograms): (value, and its gradients by levels, overdispersions, pi and A)."""

    width = 2

    def __init__(self, k: int, histogram: HistogramLikelihood):
        self.k, self.histogram = k, histogram

    def __call__(self, levels, pi, a, dispersion):
        powers = [np.eye(a.shape[0])]
        for _ in range(self.k):
            powers.append(powers[-1] @ a)
        value, g_levels, g_scale, g_pi, g_ak = self.histogram(levels, pi, powers[self.k], dispersion)
        # d(A^k) = sum_r A^r dA A^(k-1-r)
        g_a = sum(powers[r].T @ g_ak @ powers[self.k - 1 - r].T for r in range(self.k))
        return value, g_levels, g_scale, g_pi, g_a


def lag_terms(counts, moments, lags: list[int]) -> list[LagTerm]:
    """A LagTerm per lag, from (methylated, coverage, lengths) in memory (the moment pass has
    no such sums), thinned as ``moments``' adjacent pairs are."""
    meth, cov, lengths = counts
    features = encode(meth, cov, moments.n_bins)
    offsets = np.r_[0, np.cumsum(lengths)[:-1]]
    out = []
    for k in lags:
        firsts = np.concatenate([np.arange(o, o + n - k) for o, n in zip(offsets, lengths) if n > k])
        codes = np.empty((2 * firsts.size, features.codes.shape[1]), features.codes.dtype)
        codes[0::2], codes[1::2] = features.codes[firsts], features.codes[firsts + k]  # each pair adjacent
        paired = dataclasses.replace(features, codes=codes)
        hist = thinned_histogram(paired, np.arange(firsts.size) * 2, 2, moments.histogram_budget)
        lagged = types.SimpleNamespace(pair_histogram=hist, histogram_layout=moments.histogram_layout,
                                       histogram_budget=moments.histogram_budget, n_triples=firsts.size)
        out.append(LagTerm(k, HistogramLikelihood(lagged, 2)))
    return out


def with_lags(base: C.Objective, terms: list[LagTerm], weight: float) -> C.Objective:
    """A copy of the criterion ``base`` plus ``weight`` times each lag's term."""
    objective = copy.copy(base)
    objective.histograms = [*base.histograms, *((weight, term) for term in terms)]
    return objective


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("lags", help="comma-separated lags in covered bins, e.g. 2,4,8,16,32")
    parser.add_argument("weight", type=float, help="the weight of each lag's term")
    args = parser.parse_args()
    lags = [int(k) for k in args.lags.split(",")]
    store = open_store(args.store)
    client = InProcessClient(2)
    model, m = HMR_MODEL, HMR_MODEL.n_states
    moments = load_moments(store, store.samples, FeatureSpec(), client, True).moments
    est, hmm = fit_call_model(moments, model, seed=0)
    one_pass = copy.deepcopy(hmm)
    fit_store_em(store, hmm, None, store.samples, 1000, rel_tol=1e-8, check=False)
    em_calls = hmrs(store, hmm, est, client)
    base = C.objective_for(moments, C.Weights(), "betabinomial")
    objective = with_lags(base, lag_terms(store_counts(args.store, store), moments, lags), args.weight)
    bounds = base.bounds(m, model.limits())
    print(f"{args.store}, lags {lags}, weight {args.weight:g}")
    print("| fit | levels | overdispersions | HMRs: Jaccard with EM's |")
    print("|---|---|---|---|")
    print(f"| one pass | {rounded(est.methylation_)} | {rounded(est.dispersion_)} | "
          f"{jaccard_genome(hmrs(store, one_pass, est, client), em_calls):.3f} |")
    print(f"| EM from it | {rounded(hmm.methylation_)} | {rounded(hmm.dispersion)} | 1 |")
    for label, start in (("one pass", (est.methylation_, est.transmat_, None, est.dispersion_)),
                         ("EM", (hmm.methylation_, hmm.transmat_, None, hmm.dispersion))):
        x0 = np.clip(base.pack(*start), *np.array(bounds).T)
        res = minimize(objective, x0, args=(m,), jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": 1000, "ftol": 1e-9, "gtol": 1e-9, "maxcor": 30})
        levels, a, _, dispersion = base.unpack(res.x, m)
        lagged = BinomialHMM(m, emission="betabinomial", stationary_start=True, allow_degenerate=True,
                             limits=model.limits()).start_from(C.stationary(a)[0], a, levels, dispersion)
        print(f"| with the lags, from {label} | {rounded(levels)} | {rounded(dispersion)} | "
              f"{jaccard_genome(hmrs(store, lagged, est, client), em_calls):.3f} |")


if __name__ == "__main__":
    main()
