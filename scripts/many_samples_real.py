"""Joint fits of many real samples: the concatenated Beta-map feature against the projected
one (issue 13, part 2), judged by held-out log-likelihood against EM run to convergence.

    python scripts/many_samples_real.py [--datasets ...] [--states 4,6] [--dim 32]

Data sets (each sample its own column, replicates NOT merged; 100 bp bins, CG context):

    h1-imr90-4   dmrseq_BS.chr21_H1_IMR90: H1 x 2, IMR90 x 2 (WGBS, chr21)
    m3d-4        M3D_rrbsDemo_H1_K562: H1 x 2, K562 x 2 (RRBS, chr1)
    biseq-10     BiSeq_rrbs_APL: 5 APL patients, 5 controls (RRBS)
    methcp-24    MethCP_arabidopsis/timecourse_GSE94712: Col-0 and rdd, 6 time points x 2
                 (WGBS, A. thaliana chr1 1-4 Mb)

Covered bins are cut into 20 contiguous blocks: even blocks train, odd blocks test (as in
real_data_fits.py). For each M, in memory on this machine: the refined one-pass fit of
each feature (beta: S * D dimensions, fitted when S <= 5; projected: K = --dim), EM to
convergence from it, and EM from random starts (best of 3, the reference). Each cell: test
log-likelihood per test bin, its gap to the reference, seconds (moments included);
"degenerate" marks fits the checks would refuse.
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
from real_data_fits import REAL, em, split  # noqa: E402  (the same splits and EM)

from streambhmm import SpectralBinomialHMM, compute_moments  # noqa: E402
from streambhmm.learn.checks import DegenerateModelWarning, degeneracy_problems  # noqa: E402
from streambhmm.io.formats import ReadOptions  # noqa: E402
from streambhmm.learn.hmm import BinomialHMM, random_parameters  # noqa: E402
from streambhmm.io.ingest import ingest  # noqa: E402
from streambhmm.testing import load_counts  # noqa: E402
from streambhmm.io.store import open_store  # noqa: E402

DATASETS = {
    "h1-imr90-4": ("H1 x 2, IMR90 x 2, chr21 (WGBS)", "dmrseq_BS.chr21_H1_IMR90", "*.tsv.gz", None),
    "m3d-4": ("H1 x 2, K562 x 2, chr1 (RRBS)", "M3D_rrbsDemo_H1_K562", "*.tsv.gz", None),
    "biseq-10": ("5 APL, 5 controls (RRBS)", "BiSeq_rrbs_APL", "*.rrbs.tsv.gz", None),
    "methcp-24": ("A. thaliana Col-0 / rdd, 6 times x 2 (WGBS)", "MethCP_arabidopsis/timecourse_GSE94712",
                  "GSM*.tsv.gz", "chrom=1,pos=2,strand=3,meth=4,total=5"),
}
BETA_MAX_SAMPLES = 5


def load(name: str, tmp: Path):
    _, directory, pattern, columns = DATASETS[name]
    store = tmp / f"{name}.zarr"
    files = sorted((REAL / directory).glob(pattern))
    if not files:
        sys.exit(f"no {pattern} in {REAL / directory} (the shared data must sit beside the repository)")
    options = ReadOptions(columns=ReadOptions.parse_columns(columns)) if columns else None
    for f in files:
        ingest([f], f.name.split(".")[0], store, bin_size=100, context="CG", options=options)
    meth, cov, _ = load_counts(open_store(store))
    return split(meth, cov), [f.name.split(".")[0] for f in files]


def score(levels, transmat, startprob, test) -> float:
    hmm = BinomialHMM(levels.shape[0])
    hmm.startprob_, hmm.transmat_, hmm.methylation_ = startprob, transmat, levels
    return hmm.score(*test) / test[0].shape[0]


def one_pass(train, m: int, dim: int):
    """(estimator, seconds) of the refined fit of the feature (dim 0: beta)."""
    t = time.perf_counter()
    moments = compute_moments(*train, projection_dim=dim)
    est = SpectralBinomialHMM(m, random_state=0, allow_degenerate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DegenerateModelWarning)
        est.fit_moments(moments)
    return est, time.perf_counter() - t


def run(name: str, m: int, dim: int, tmp: Path) -> dict:
    (train, test), samples = load(name, tmp)
    n_samples = train[0].shape[1]
    out = {"samples": samples, "train": train[0].shape[0], "test": test[0].shape[0]}
    runs = []
    for r in range(3):
        hmm, history, seconds = em(random_parameters(m, n_samples, r), train, m)
        runs.append((history[-1], hmm, seconds, len(history) - 1))
    best = max(runs, key=lambda run: run[0])[1]
    out["EM"] = (score(best.methylation_, best.transmat_, best.startprob_, test), sum(r[2] for r in runs),
                 int(np.mean([r[3] for r in runs])), degeneracy_problems(best.methylation_, best.transmat_,
                                                                         best.startprob_), best.methylation_)
    for label, feature_dim in (("beta", 0), (f"projected K={dim}", dim)):
        if feature_dim == 0 and n_samples > BETA_MAX_SAMPLES:
            continue
        est, seconds = one_pass(train, m, feature_dim)
        problems = degeneracy_problems(est.methylation_, est.transmat_, est.startprob_)
        out[label] = (score(est.methylation_, est.transmat_, est.startprob_, test), seconds, 0, problems,
                      est.methylation_)
        hmm, history, em_seconds = em((est.startprob_, est.transmat_, est.methylation_), train, m)
        out[label + " +EM"] = (score(hmm.methylation_, hmm.transmat_, hmm.startprob_, test), seconds + em_seconds,
                               len(history) - 1, degeneracy_problems(hmm.methylation_, hmm.transmat_,
                                                                     hmm.startprob_), hmm.methylation_)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--states", default="4,6")
    parser.add_argument("--dim", type=int, default=32)
    args = parser.parse_args()
    methods = ["beta", "beta +EM", f"projected K={args.dim}", f"projected K={args.dim} +EM", "EM"]
    lines = ["| data set | S | M | " + " | ".join(methods) + " |", "|---|---|---|" + "---|" * len(methods)]
    levels = []
    with tempfile.TemporaryDirectory(prefix="streambhmm-many-real-") as tmp:
        for name in args.datasets.split(","):
            for m in (int(v) for v in args.states.split(",")):
                result = run(name, m, args.dim, Path(tmp) / f"{name}-{m}")
                reference = result["EM"][0]
                cells = []
                for method in methods:
                    if method not in result:
                        cells.append("not run")
                        continue
                    value, seconds, iterations, problems, _ = result[method]
                    gap = 100 * (value - reference) / abs(reference)
                    extra = f", {iterations} it" if iterations else ""
                    cells.append(f"{value:.3f} ({gap:+.2f}%; {seconds:.1f} s{extra})"
                                 + (" degenerate" if problems else ""))
                lines.append(f"| {DATASETS[name][0]} | {len(result['samples'])} | {m} | " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
                best = f"projected K={args.dim}"
                levels.append((name, m, result["samples"], result[best][4], result["EM"][4]))
    print("\n" + "\n".join(lines))
    print("\nLevels of the projected one-pass fit (rows: states; columns: samples), and EM's:")
    for name, m, samples, mine, reference in levels:
        print(f"\n{name}, M = {m}: {' '.join(samples)}")
        for row in mine[np.argsort(mine.mean(axis=1))]:
            print("  projected " + " ".join(f"{v:.2f}" for v in row))
        for row in reference[np.argsort(reference.mean(axis=1))]:
            print("  EM        " + " ".join(f"{v:.2f}" for v in row))


if __name__ == "__main__":
    main()
