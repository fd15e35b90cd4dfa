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
"""

from __future__ import annotations

import argparse

import numpy as np

from streambhmm.app.calls import fit_call_model
from streambhmm.distributed.em import fit_store_em
from streambhmm.distributed.fitdata import load_moments
from streambhmm.io.store import open_store
from streambhmm.io.tasks import InProcessClient
from streambhmm.learn.criterion import Weights, objective_for
from streambhmm.learn.domains import HMR_MODEL
from streambhmm.learn.refine import refine
from streambhmm.moments.spec import FeatureSpec


def rounded(values) -> str:
    return " ".join(f"{v:.3f}" for v in np.ravel(values))


def compare(path: str) -> None:
    store = open_store(path)
    model, m = HMR_MODEL, HMR_MODEL.n_states
    data = load_moments(store, store.samples, FeatureSpec(), InProcessClient(2), True)
    est, hmm = fit_call_model(data.moments, model, seed=0)
    em = fit_store_em(store, hmm, None, store.samples, 1000, rel_tol=1e-8, check=False)
    objective = objective_for(data.moments, Weights(), "betabinomial")
    at_em = objective(objective.pack(hmm.methylation_, hmm.transmat_, None, hmm.dispersion), m)[0]
    back = refine(objective, [("EM", hmm.methylation_, hmm.transmat_, None, hmm.dispersion)], keep=1,
                  tol=model.tol, limits=model.limits())
    print(f"\n{path}")
    print("| fit | levels | overdispersions | one-pass criterion |")
    print("|---|---|---|---|")
    print(f"| one pass | {rounded(est.methylation_)} | {rounded(est.dispersion_)} | {est.loss_:.6f} |")
    print(f"| EM from it ({len(em.history) - 1} iterations) | {rounded(hmm.methylation_)} | "
          f"{rounded(hmm.dispersion)} | {at_em:.6f} |")
    print(f"| the refinement started from EM | {rounded(back.methylation)} | {rounded(back.dispersion)} | "
          f"{back.loss:.6f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", help="counts stores (100 bp bins)")
    for path in parser.parse_args().stores:
        compare(path)


if __name__ == "__main__":
    main()
