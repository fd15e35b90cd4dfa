"""Beta-binomial EM beside a chromosome read far deeper than the rest (a mitochondrion, a spike-in).

    python scripts/deep_chromosome.py [--states 4] [--iterations 15] [--reads 50000,400000]

The MethylSeekR IMR90 chr22 excerpt (100 bp bins), and the same with a chrM of 166 bins at
--reads (a range, per bin; level about 0.01), as a helper's genome-like file had it. Each is
fitted by beta-binomial EM from the same start for --iterations iterations, twice: as the
code runs (the M-step's sums stop at a cut and the far deeper pairs add their terms in closed
form, `emissions.sum_cut`), and with the cut held at the deepest coverage (the sums
over every coverage, as before the cut existed). Prints seconds per iteration (best of 3) and
how far the two fits' parameters lie apart.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from streambhmm.io.ingest import ingest
from streambhmm.io.store import open_store
from streambhmm.learn import emissions
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.testing import load_counts

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
EXCERPT = SHARED / "data" / "real" / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"
MITO_BINS = 166  # 16.6 kb


def sums_to_the_top(coverage, weights):
    """The cut held at the deepest weighted coverage: every sum, as before the cut existed."""
    covered = coverage[weights > 0]
    return int(covered.max()) if covered.size else 0


def fitted(meth, cov, m: int, iterations: int) -> tuple[BinomialHMM, float]:
    """The fit from evenly spread levels, and its best seconds per iteration of 3 runs."""
    seconds = []
    for _ in range(3):
        hmm = BinomialHMM(m, n_iter=iterations, init_params="", tol=-np.inf, emission="betabinomial")
        trans = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
        hmm.start_from(np.full(m, 1 / m), trans, np.linspace(0.1, 0.9, m)[:, None], np.full((m, 1), 0.05))
        start = time.perf_counter()
        hmm.fit(meth, cov)
        seconds.append((time.perf_counter() - start) / iterations)
    return hmm, min(seconds)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--iterations", type=int, default=15)
    parser.add_argument("--reads", default="50000,400000", help="the chrM bins' reads, low,high")
    args = parser.parse_args()
    low, high = map(int, args.reads.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        ingest([EXCERPT], "IMR90", Path(tmp) / "s.zarr", fmt="methylseekr")
        meth, cov, _ = load_counts(open_store(Path(tmp) / "s.zarr"))
    rng = np.random.default_rng(0)
    mito_cov = rng.integers(low, high, MITO_BINS)
    mito = np.c_[rng.binomial(mito_cov, rng.beta(1, 99, MITO_BINS))], mito_cov[:, None]
    data = {"the excerpt": (meth, cov),
            f"the excerpt and a chrM at {low:,}-{high:,} reads per bin": (np.r_[meth, mito[0]], np.r_[cov, mito[1]])}
    print(f"| data | bins | reads on chrM | s per EM iteration, the cut / every sum | ratio | largest difference "
          f"of the levels, overdispersions, transitions |")
    print("|---|---|---|---|---|---|")
    for name, (m_, c_) in data.items():
        ours, t_ours = fitted(m_, c_, args.states, args.iterations)
        cut, emissions.sum_cut = emissions.sum_cut, sums_to_the_top  # the M-step looks it up at each call
        try:
            every, t_every = fitted(m_, c_, args.states, args.iterations)
        finally:
            emissions.sum_cut = cut
        differ = [np.abs(getattr(ours, a) - getattr(every, a)).max() for a in ("methylation_", "dispersion",
                                                                              "transmat_")]
        share = (c_.sum() - cov.sum()) / c_.sum()
        print(f"| {name} | {m_.shape[0]:,} | {share:.1%} | {t_ours:.3f} / {t_every:.3f} | {t_every / t_ours:.1f}x "
              f"| {', '.join(f'{d:.1e}' for d in differ)} |", flush=True)


if __name__ == "__main__":
    main()
