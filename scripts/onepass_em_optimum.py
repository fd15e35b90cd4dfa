"""Why `hmr`'s one-pass model and EM's differ: a worse optimum of the refinement, or a
different optimum of a different criterion? (issue 24: HMRs from the one-pass model against
those after EM to convergence.)

    python scripts/onepass_em_optimum.py STORE [STORE ...]

For each counts store (for example the `ours-hmr.zarr` stores a `compare_dnmtools.py
--workdir` run leaves in each set's folder), as `hmr` does: the moments, the one-pass fit of
HMR_MODEL (its hypomethylated state held to the definition's bounds), then beta-binomial EM
from it to convergence (`hmr --polish-em 1000`). Printed per store: each fit's levels and
overdispersions, the one-pass criterion at both (EM's coverage terms at the samples'
marginals), and where the refinement goes when it starts from EM's parameters. If it goes
back to its own optimum, the criterion prefers that model: better starts or a longer search
cannot bring the one-pass regions to EM's.

One more row: every parameter refitted from the one-pass fit by the criterion's histogram
terms alone (the likelihood of single bins and of adjacent pairs: EM's composite likelihood,
the feature, tensor and coverage terms off). And per model, its HMRs as `hmr` calls them
(the same rule, shoulders included) and their base-pair Jaccard with EM's.

Then EM's path (``--path 10,30,100``): the model after N EM iterations from the one-pass fit,
its log-likelihood's gap to EM's converged one (% of it, on the whole store: EM's own history)
and its HMRs' Jaccard with EM's. How near EM's optimum must a model be for its regions to
agree with EM's at 0.9?
"""

from __future__ import annotations

import argparse
import copy

import numpy as np
from compare_dnmtools import jaccard_genome, merged

from streambhmm.app.calls import call_rule, fit_call_model
from streambhmm.distributed.em import fit_store_em
from streambhmm.distributed.fitdata import load_moments
from streambhmm.distributed.regions import find_regions
from streambhmm.io.store import open_store
from streambhmm.io.tasks import InProcessClient
from streambhmm.learn.criterion import Weights, objective_for
from streambhmm.learn.domains import HMR_MODEL
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.learn.refine import refine
from streambhmm.moments.spec import FeatureSpec


def rounded(values) -> str:
    return " ".join(f"{v:.3f}" for v in np.ravel(values))


def hmrs(store, hmm, one_pass_fit, client) -> dict:
    """{chromosome: (n, 2) merged intervals} of the HMRs `hmr` calls with ``hmm``, fitted from
    ``one_pass_fit`` (which of its states were held at a cap)."""
    rule = call_rule("hmr", hmm, one_pass_fit, store.bin_size)
    found = find_regions(store, hmm, client, rule, store.samples)
    return {chrom: merged(np.c_[r.start, r.end]) for chrom, r in found.items() if len(r.start)}


def compare(path: str, path_iterations: list) -> None:
    store = open_store(path)
    model, m = HMR_MODEL, HMR_MODEL.n_states
    client = InProcessClient(2)
    data = load_moments(store, store.samples, FeatureSpec(), client, True)
    est, hmm = fit_call_model(data.moments, model, seed=0)
    one_pass = copy.deepcopy(hmm)
    em = fit_store_em(store, hmm, None, store.samples, 1000, rel_tol=1e-8, check=False)
    objective = objective_for(data.moments, Weights(), "betabinomial")
    at_em = objective(objective.pack(hmm.methylation_, hmm.transmat_, None, hmm.dispersion), m)[0]
    back = refine(objective, [("EM", hmm.methylation_, hmm.transmat_, None, hmm.dispersion)], keep=1,
                  tol=model.tol, limits=model.limits())
    histograms = objective_for(data.moments, Weights(feature_pairs=0.0, feature_triples=0.0, coverage=0.0),
                               "betabinomial")
    composite = refine(histograms, [("one pass", est.methylation_, est.transmat_, None, est.dispersion_)], keep=1,
                       tol=model.tol, limits=model.limits())
    by_composite = BinomialHMM(m, emission="betabinomial", stationary_start=True, allow_degenerate=True,
                               limits=model.limits()).start_from(composite.startprob, composite.transmat,
                                                                 composite.methylation, composite.dispersion)
    at_composite = objective(objective.pack(composite.methylation, composite.transmat, None, composite.dispersion),
                             m)[0]
    em_calls = hmrs(store, hmm, est, client)
    agreement = {name: jaccard_genome(hmrs(store, h, est, client), em_calls)
                 for name, h in (("one pass", one_pass), ("composite", by_composite))}
    print(f"\n{path}")
    print("| fit | levels | overdispersions | one-pass criterion | HMRs: Jaccard with EM's |")
    print("|---|---|---|---|---|")
    print(f"| one pass | {rounded(est.methylation_)} | {rounded(est.dispersion_)} | {est.loss_:.6f} | "
          f"{agreement['one pass']:.3f} |")
    print(f"| EM from it ({len(em.history) - 1} iterations) | {rounded(hmm.methylation_)} | "
          f"{rounded(hmm.dispersion)} | {at_em:.6f} | 1 |")
    print(f"| the refinement started from EM | {rounded(back.methylation)} | {rounded(back.dispersion)} | "
          f"{back.loss:.6f} | |")
    print(f"| the histogram terms alone, from the one-pass fit | {rounded(composite.methylation)} | "
          f"{rounded(composite.dispersion)} | {at_composite:.6f} | {agreement['composite']:.3f} |")
    if not path_iterations:
        return
    converged = em.history[-1]
    print("\n| EM iterations from the one-pass fit | log-likelihood below EM's converged one | hypomethylated "
          "state: level, overdispersion | HMRs: Jaccard with EM's |")
    print("|---|---|---|---|")
    partway, done = copy.deepcopy(one_pass), 0
    for n in [0, *path_iterations]:
        if n >= len(em.history) - 1:
            break
        if n > done:  # EM goes on from where it stopped: the same iterations as one run of n
            fit_store_em(store, partway, None, store.samples, n - done, rel_tol=0.0, check=False)
            done = n
        gap = 100 * (converged - em.history[n]) / abs(converged)
        print(f"| {n} | {gap:.3f}% | {rounded(partway.methylation_[0])}, {rounded(partway.dispersion[0])} | "
              f"{jaccard_genome(hmrs(store, partway, est, client), em_calls):.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", help="counts stores (100 bp bins)")
    parser.add_argument("--path", default="", help="EM iterations at which to stop along EM's path, e.g. 10,30,100")
    args = parser.parse_args()
    for path in args.stores:
        compare(path, [int(n) for n in args.path.split(",") if n])


if __name__ == "__main__":
    main()
