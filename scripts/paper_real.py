"""Reproduce the paper's real-data experiment (sections 5.2-5.3) on the data we have:
FTD, EM and FTD+EM on two cell types, test log-likelihood against training size, the
runtime table (the paper's Table 2) and the methylation-level matrices (its Figure 3).

    python scripts/paper_real.py [--datasets h1-imr90,arabidopsis] [--states 6] [--figure-prefix P]

Data sets (../shared/data/real; replicates merged by adding counts, as the paper did):
  h1-imr90:    dmrseq_BS.chr21_H1_IMR90, human H1 ESC vs IMR90 fibroblasts, chr21 (WGBS);
  arabidopsis: DMRcaller_arabidopsis_chr3, A. thaliana wild type vs met1-3, Chr3 1-1 Mb
               (Bismark CX reports; CG context).
Files are ingested with `streambhmm.io.ingest` (100 bp bins) into a temporary store and read
back in memory (both are small).

Held-out split: the covered bins are cut into 20 contiguous blocks; even blocks train,
odd blocks test, each block its own sequence. Training sizes are fractions of the
training blocks (prefixes). Methods, as in the paper: FTD; EM from a random start for 10
iterations; FTD followed by 3 EM iterations; and both EM variants run to convergence
(gain < 1e-7 |loglik|, at most 300 iterations). Reported: test log-likelihood per test
bin (binomial coefficients included), seconds, and the states' levels per cell type,
aligned across methods by Hungarian matching to EM(conv).
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from streambhmm import SpectralBinomialHMM
from streambhmm.learn.hmm import BinomialHMM, random_parameters, run_em
from streambhmm.io.ingest import ingest
from streambhmm.testing import load_counts
from streambhmm.learn.simulate import stationary_distribution
from streambhmm.learn.spectral import SpectrumError
from streambhmm.io.store import open_store

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
DATASETS = {
    "h1-imr90": {"title": "H1 vs IMR90, chr21", "dir": "dmrseq_BS.chr21_H1_IMR90",
                 "samples": {"H1": "H1_r*.chr21.hg18.tsv.gz", "IMR90": "IMR90_r*.chr21.hg18.tsv.gz"}},
    "arabidopsis": {"title": "A. thaliana WT vs met1-3, Chr3 1-1 Mb", "dir": "DMRcaller_arabidopsis_chr3",
                    "samples": {"WT": "WT.*.CX_report.txt.gz", "met1-3": "met1-3.*.CX_report.txt.gz"}},
}
METHODS = ("FTD", "FTD+EM(3)", "FTD+EM(conv)", "EM(10)", "EM(conv)")
COLOURS = {"FTD": "tab:red", "EM(10)": "tab:blue", "FTD+EM(3)": "tab:green", "EM(conv)": "tab:cyan",
           "FTD+EM(conv)": "tab:olive"}
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
    return run_em(hmm, lambda: hmm.e_step(*data), n_iter, REL_TOL)


def fit_all(m, train, seed):
    """{method: (BinomialHMM, seconds, EM iterations)}, and the spectrum check's refusal."""
    out = {}
    start = time.perf_counter()
    try:
        ftd = SpectralBinomialHMM(m, random_state=seed, method="ftd", allow_degenerate=True).fit(*train)
        refused = None
    except SpectrumError as exc:
        # report, then fit anyway (as the paper did) so that the comparison is complete
        refused = str(exc).splitlines()[0].split(": ", 1)[-1]
        ftd = SpectralBinomialHMM(m, random_state=seed, check_spectrum=False, method="ftd", allow_degenerate=True).fit(*train)
    t_ftd = time.perf_counter() - start
    out["FTD"] = (BinomialHMM(m).start_from(ftd.startprob_, ftd.transmat_, ftd.methylation_), t_ftd, 0)
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


def load(name: str, tmp: Path):
    spec = DATASETS[name]
    directory = REAL / spec["dir"]
    if not directory.exists():
        sys.exit(f"{directory} not found (the shared data directory must sit beside the repository)")
    store_path = tmp / f"{name}.zarr"
    for sample, pattern in spec["samples"].items():
        files = sorted(directory.glob(pattern))
        report = ingest(files, sample, store_path, bin_size=100, context="CG")
        print(f"  ingested {sample}: {len(files)} file(s), {report.n_rows:,} CG rows -> {report.n_bins:,} bins")
    meth, cov, _ = load_counts(open_store(store_path))
    return meth, cov, list(spec["samples"])


def aligned(reference, levels):
    """Permutation of ``levels``' states matching ``reference`` (Hungarian, |p - q| summed)."""
    cost = np.abs(reference[:, None, :] - levels[None, :, :]).sum(axis=2)
    rows, cols = linear_sum_assignment(cost)
    return cols[np.argsort(rows)]


def run_dataset(name, args):
    with tempfile.TemporaryDirectory() as tmp:
        print(f"\n=== {DATASETS[name]['title']} ===")
        meth, cov, samples = load(name, Path(tmp))
    spans = blocks(meth.shape[0], N_BLOCKS)
    train_spans, test_spans = spans[0::2], spans[1::2]
    test = take(meth, cov, test_spans)
    n_train = sum(b - a for a, b in train_spans)
    sizes = sorted({max(100, int(round(float(f) * n_train))) for f in args.fractions.split(",")})
    print(f"  {meth.shape[0]:,} covered bins, mean coverage {cov[cov > 0].mean():.1f}; {N_BLOCKS} blocks: "
          f"{n_train:,} training bins, {test[0].shape[0]:,} test bins; m = {args.states}\n")
    results = {}
    print(f"{'training bins':>13}  {'method':<13} {'seconds':>8} {'EM iters':>8} {'test loglik / bin':>18}")
    for size in sizes:
        train = take(meth, cov, train_spans, size)
        fitted, refused = fit_all(args.states, train, args.seed)
        if refused:
            print(f"{'':>13}  FTD's spectrum check refused m = {args.states} ({refused}); fitted without it")
        for label in METHODS:
            hmm, seconds, iters = fitted[label]
            per_bin = hmm.score(*test) / test[0].shape[0]
            results[(size, label)] = (hmm, seconds, iters, per_bin)
            print(f"{size:>13,}  {label:<13} {seconds:>8.2f} {iters:>8d} {per_bin:>18.5f}")

    largest = sizes[-1]
    reference = results[(largest, "EM(conv)")][0].methylation_
    order = np.argsort(reference.mean(axis=1))
    print(f"\nstate levels at {largest:,} training bins, {' / '.join(samples)} (genome fraction); columns "
          f"aligned to EM(conv) by Hungarian matching; * = levels differ by more than 0.3")
    matrices = {}
    for label in METHODS:
        hmm = results[(largest, label)][0]
        perm = aligned(reference, hmm.methylation_)[order]
        weight = stationary_distribution(hmm.transmat_)
        matrices[label] = hmm.methylation_[perm]
        cells = [f"{'/'.join(f'{v:.2f}' for v in hmm.methylation_[h])}"
                 f"{'*' if np.ptp(hmm.methylation_[h]) > 0.3 else ' '}({weight[h]:.2f})" for h in perm]
        print(f"  {label:<13} " + "  ".join(cells))
    return {"name": name, "samples": samples, "sizes": sizes, "results": results, "matrices": matrices}


def figures(runs, prefix, m):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs), 3.8), squeeze=False)
    for ax, run in zip(axes[0], runs):
        for label in METHODS:
            ax.plot(run["sizes"], [run["results"][(s, label)][3] for s in run["sizes"]], "o-",
                    color=COLOURS[label], label=label)
        ax.set_xscale("log")
        ax.set_xlabel("training bins")
        ax.set_ylabel("test log-likelihood per bin")
        ax.set_title(f"{DATASETS[run['name']]['title']}, m = {m}")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(f"{prefix}_loglik.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(len(METHODS), len(runs), figsize=(5 * len(runs), 1.1 * len(METHODS) + 0.6),
                             squeeze=False)
    for j, run in enumerate(runs):
        for i, label in enumerate(METHODS):
            ax = axes[i][j]
            levels = run["matrices"][label].T  # samples x states
            ax.imshow(levels, cmap="viridis", vmin=0, vmax=1, aspect="auto")
            for r in range(levels.shape[0]):
                for c in range(levels.shape[1]):
                    ax.text(c, r, f"{levels[r, c]:.2f}", ha="center", va="center", fontsize=7,
                            color="white" if levels[r, c] < 0.6 else "black")
            ax.set_yticks(range(len(run["samples"])), run["samples"], fontsize=7)
            ax.set_xticks([])
            ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
            if i == 0:
                ax.set_title(DATASETS[run["name"]]["title"], fontsize=9)
    fig.tight_layout()
    fig.savefig(f"{prefix}_levels.png", dpi=110)
    plt.close(fig)
    print(f"\nfigures written to {prefix}_loglik.png and {prefix}_levels.png")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--states", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fractions", default="0.125,0.5,1", help="Training sizes as fractions of the training bins.")
    parser.add_argument("--figure-prefix", default=None, help="Write PREFIX_loglik.png and PREFIX_levels.png.")
    args = parser.parse_args()
    runs = [run_dataset(name, args) for name in args.datasets.split(",")]
    print("\nrunning time at the largest training size, seconds (the paper's Table 2)")
    print(f"{'data set':<13} " + " ".join(f"{m:>13}" for m in METHODS))
    for run in runs:
        size = run["sizes"][-1]
        print(f"{run['name']:<13} " + " ".join(f"{run['results'][(size, m)][1]:>13.2f}" for m in METHODS))
    if args.figure_prefix:
        figures(runs, args.figure_prefix, args.states)


if __name__ == "__main__":
    main()
