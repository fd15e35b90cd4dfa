"""FTD, EM and FTD+EM on real WGBS: H1 vs IMR90, chr21 (the paper's Table 2 and test
log-likelihood figure, on the data we have).

    python scripts/real_h1_imr90.py [--states 6] [--bin-size 100] [--figure FILE.png]

Data: ../shared/data/real/dmrseq_BS.chr21_H1_IMR90 (Lister et al., hg18), two replicates
per cell type merged by adding counts, as the paper did. The files are ingested with
`streambhmm.ingest` into a temporary store (100 bp bins, CG context) and read back in
memory (chr21 is small).

Held-out split: the kept bins are cut into 20 contiguous blocks; even blocks train, odd
blocks test, each block its own sequence. Training sizes are prefixes of the training
blocks. Methods, as in the paper: FTD; EM from a random start for 10 iterations; FTD
followed by 3 EM iterations. Also both EM variants run to convergence (gain < 1e-7
|loglik|, at most 300 iterations). Reported: test log-likelihood per test bin (binomial
coefficients included), seconds, and each state's level in H1 and IMR90.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streambhmm import SpectralBinomialHMM
from streambhmm.hmm import BinomialHMM, random_parameters
from streambhmm.ingest import ingest
from streambhmm.pipeline import load_counts
from streambhmm.spectral import SpectrumError
from streambhmm.store import open_store

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "dmrseq_BS.chr21_H1_IMR90"
N_BLOCKS = 20
REL_TOL = 1e-7


def blocks(n: int, n_blocks: int):
    edges = np.linspace(0, n, n_blocks + 1).astype(int)
    return list(zip(edges[:-1], edges[1:]))


def take(meth, cov, spans, limit=None):
    """Concatenate the spans (optionally only the first ``limit`` bins) as sequences."""
    parts, lengths, total = [], [], 0
    for a, b in spans:
        if limit is not None:
            b = min(b, a + limit - total)
        if b <= a:
            break
        parts.append(slice(a, b))
        lengths.append(b - a)
        total += b - a
    return (np.concatenate([meth[s] for s in parts]), np.concatenate([cov[s] for s in parts]),
            np.array(lengths))


def em(hmm, data, n_iter):
    """EM for at most ``n_iter`` M-steps (stopping early at the relative tolerance)."""
    history = []
    for _ in range(n_iter + 1):
        stats = hmm.e_step(*data)
        history.append(stats.loglik)
        if len(history) > n_iter or (len(history) >= 2 and history[-1] - history[-2] < REL_TOL * abs(history[-1])):
            break
        hmm.m_step(stats)
    return history


def fit_all(m, train, seed):
    """Each method's fitted BinomialHMM (for scoring) and seconds."""
    out = {}
    start = time.perf_counter()
    try:
        ftd = SpectralBinomialHMM(m, random_state=seed).fit(*train)
        refused = None
    except SpectrumError as exc:
        # report, then fit anyway so that the comparison is complete
        refused = str(exc).splitlines()[0]
        ftd = SpectralBinomialHMM(m, random_state=seed, check_spectrum=False).fit(*train)
    t_ftd = time.perf_counter() - start
    as_hmm = BinomialHMM(m).start_from(ftd.startprob_, ftd.transmat_, ftd.methylation_)
    out["FTD"] = (as_hmm, t_ftd, 0)
    for label, iters in (("FTD+EM(3)", 3), ("FTD+EM(conv)", 300)):
        hmm = BinomialHMM(m).start_from(ftd.startprob_, ftd.transmat_, ftd.methylation_)
        start = time.perf_counter()
        history = em(hmm, train, iters)
        out[label] = (hmm, t_ftd + time.perf_counter() - start, len(history) - 1)
    for label, iters in (("EM(10)", 10), ("EM(conv)", 300)):
        hmm = BinomialHMM(m).start_from(*random_parameters(m, train[0].shape[1], seed))
        start = time.perf_counter()
        history = em(hmm, train, iters)
        out[label] = (hmm, time.perf_counter() - start, len(history) - 1)
    return out, refused


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=6)
    parser.add_argument("--bin-size", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", default="10000,40000,all", help="Training sizes in bins.")
    parser.add_argument("--figure", default=None, help="Write the test log-likelihood figure here (PNG).")
    args = parser.parse_args()
    if not DATA.exists():
        sys.exit(f"{DATA} not found (the shared data directory must sit beside the repository)")

    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "h1_imr90.zarr"
        start = time.perf_counter()
        for sample in ("H1", "IMR90"):
            files = sorted(DATA.glob(f"{sample}_r*.chr21.hg18.tsv.gz"))
            report = ingest(files, sample, store_path, bin_size=args.bin_size)
            print(f"ingested {sample}: {len(files)} replicate files, {report.n_rows:,} rows -> {report.n_bins:,} bins")
        meth, cov, _ = load_counts(open_store(store_path))
        print(f"ingest {time.perf_counter() - start:.1f} s; {meth.shape[0]:,} bins with coverage, mean coverage "
              f"{cov[cov > 0].mean():.1f} (H1, IMR90 merged replicates)\n")

    spans = blocks(meth.shape[0], N_BLOCKS)
    train_spans, test_spans = spans[0::2], spans[1::2]
    test = take(meth, cov, test_spans)
    n_train_all = sum(b - a for a, b in train_spans)
    sizes = [n_train_all if s == "all" else min(int(float(s)), n_train_all) for s in args.sizes.split(",")]
    print(f"{N_BLOCKS} blocks: {n_train_all:,} training bins, {test[0].shape[0]:,} test bins; m = {args.states}\n")

    results = {}
    print(f"{'training bins':>13}  {'method':<13} {'seconds':>8} {'EM iters':>8} {'test loglik / bin':>18}")
    for size in sizes:
        train = take(meth, cov, train_spans, size)
        fitted, refused = fit_all(args.states, train, args.seed)
        if refused:
            print(f"{'':>13}  (FTD's spectrum check refused m = {args.states} at {size:,} bins; fitted without it: "
                  f"{refused})")
        for label, (hmm, seconds, iters) in fitted.items():
            per_bin = hmm.score(*test) / test[0].shape[0]
            results[(size, label)] = (hmm, seconds, iters, per_bin)
            print(f"{size:>13,}  {label:<13} {seconds:>8.2f} {iters:>8d} {per_bin:>18.5f}")

    largest = sizes[-1]
    print(f"\nstate levels at {largest:,} training bins (states sorted by H1 level; "
          f"weight = stationary probability; * = |H1 - IMR90| > 0.3)")
    from streambhmm.simulate import stationary_distribution

    for label in ("FTD", "FTD+EM(3)", "FTD+EM(conv)", "EM(10)", "EM(conv)"):
        hmm = results[(largest, label)][0]
        order = np.argsort(hmm.methylation_[:, 0])
        weight = stationary_distribution(hmm.transmat_)
        cells = [f"{hmm.methylation_[h, 0]:.2f}/{hmm.methylation_[h, 1]:.2f}"
                 f"{'*' if abs(hmm.methylation_[h, 0] - hmm.methylation_[h, 1]) > 0.3 else ' '}"
                 f"({weight[h]:.2f})" for h in order]
        print(f"  {label:<13} H1/IMR90: " + "  ".join(cells))
        found = [h for h in order if hmm.methylation_[h, 0] - hmm.methylation_[h, 1] > 0.3]
        verdict = ", ".join(f"state {h}: H1 {hmm.methylation_[h, 0]:.2f}, IMR90 {hmm.methylation_[h, 1]:.2f}, "
                            f"weight {weight[h]:.3f}" for h in found) or "none"
        print(f"  {'':<13} methylated in H1, not in IMR90: {verdict}")

    if args.figure:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for label, colour in (("FTD", "tab:red"), ("EM(10)", "tab:blue"), ("FTD+EM(3)", "tab:green"),
                              ("EM(conv)", "tab:cyan"), ("FTD+EM(conv)", "tab:olive")):
            ax.plot(sizes, [results[(s, label)][3] for s in sizes], "o-", color=colour, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("training bins")
        ax.set_ylabel("test log-likelihood per bin")
        ax.set_title(f"H1 vs IMR90, chr21, m = {args.states}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.figure, dpi=120)
        print(f"\nfigure written to {args.figure}")


if __name__ == "__main__":
    main()
