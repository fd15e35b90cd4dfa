"""Many samples: the cost of joint and pooled moments, ingest and EM as the number of samples S grows.

    python scripts/bench_many_samples.py [--sizes 1,2,4,8,32,100] [--bins 1e6] [--joint-max 4]
                                         [--ingest-bins 1e5] [--em-max 8]

Simulated replicates, all in this run: 6 sticky states with levels 0.03 .. 0.97, each
sample its own state path, Poisson coverage with a mean drawn in 10..20 per sample, 10% of
each sample's bins uncovered; --bins bins per sample. For each S:
  - moments (one core): bins/s of the chunk task as the pipeline runs it (best of 3)
    (pipeline.chunk_partial on one chunk of --bins bins, block statistics included):
    joint (the S*D feature, one state path for all samples) up to --joint-max samples,
    pooled (each sample its own sequence, summed) for every S; and each as a fraction of
    its S = 1 figure (linear cost: 1/S);
  - partial: the size on disk of that chunk's moment-store partial (momentstore.write_partial);
  - ingest: seconds of `ingest` adding the S-th sample (a Bismark .cov of --ingest-bins
    bins) to a store holding S - 1, against adding the 2nd;
  - EM: seconds of one pooled EM iteration on the counts store (the embedded cluster, 2 workers),
    up to --em-max samples;
  - error: the pooled refined one-pass fit's mean |p - p_hat| over states (Hungarian
    matched), and after in-memory EM from it to convergence (up to --em-max samples).
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy and numba load

import argparse  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from streambhmm.hmm import BinomialHMM, run_em  # noqa: E402
from streambhmm.model import SpectralBinomialHMM  # noqa: E402
from streambhmm.evaluate import matched_error  # noqa: E402
from streambhmm.ingest import ingest  # noqa: E402
from streambhmm.momentstore import partial_sha256, write_partial  # noqa: E402
from streambhmm.pipeline import chunk_partial, empty_halo  # noqa: E402
from streambhmm.simulate import model, simulate  # noqa: E402
from streambhmm.storage import Location  # noqa: E402
from streambhmm.store import open_store, write_store  # noqa: E402

LEVELS = np.array([0.03, 0.2, 0.4, 0.6, 0.8, 0.97])
STAY = 0.95
TRANSMAT = np.full((6, 6), (1 - STAY) / 5) + np.eye(6) * (STAY - (1 - STAY) / 5)
BIN_SIZE = 100
N_BINS = 30


def replicates(n_samples: int, n_bins: int, seed: int):
    """(methylated, coverage), each (n_bins, n_samples): independent state paths."""
    rng = np.random.default_rng(seed)
    mdl = model(LEVELS, TRANSMAT)
    meth, cov = np.zeros((n_bins, n_samples), np.int64), np.zeros((n_bins, n_samples), np.int64)
    for s in range(n_samples):
        sim = simulate(mdl, [n_bins], coverage=float(rng.uniform(10, 20)), random_state=rng)
        gone = rng.random(n_bins) < 0.1
        meth[:, s] = np.where(gone, 0, sim.methylated[:, 0])
        cov[:, s] = np.where(gone, 0, sim.coverage[:, 0])
    return meth, cov


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def moments_row(meth, cov, pooled: bool, workdir: Path, repeat: int = 3):
    """(bins/s, partial bytes, the chunk's Moments) of one chunk task, best of ``repeat``."""
    positions = np.arange(meth.shape[0], dtype=np.int64) * BIN_SIZE
    halo = empty_halo(meth.shape[1], pooled)
    seconds = np.inf
    for _ in range(repeat):
        start = time.perf_counter()
        partial = chunk_partial(halo, meth, cov, positions, N_BINS, "chr1", pooled=pooled)
        seconds = min(seconds, time.perf_counter() - start)
    target = workdir / f"partial-{'pooled' if pooled else 'joint'}-{meth.shape[1]}"
    shutil.rmtree(target, ignore_errors=True)
    sha = partial_sha256(partial)
    write_partial(Location.of(target), partial, {"chromosome": "chr1", "chunk": 0, "digest": "x"}, sha)
    return meth.shape[0] / seconds, du(target), partial.moments


def write_cov(path: Path, meth: np.ndarray, cov: np.ndarray) -> None:
    """A Bismark coverage file (chrom, 1-based start, end, percent, methylated, unmethylated)."""
    keep = np.flatnonzero(cov > 0)
    pos = keep * BIN_SIZE + 1
    m, c = meth[keep], cov[keep]
    pct = np.round(100 * m / c, 4)
    with open(path, "w") as fh:
        fh.writelines(f"chr1\t{p}\t{p}\t{q}\t{a}\t{b - a}\n" for p, q, a, b in zip(pos, pct, m, c))


def ingest_seconds(n_max: int, n_bins: int, workdir: Path) -> list[float]:
    """Seconds of ingesting sample k into a store of k - 1 samples, k = 1..n_max."""
    meth, cov = replicates(n_max, n_bins, seed=99)
    store = workdir / "ingest.zarr"
    shutil.rmtree(store, ignore_errors=True)
    times = []
    for s in range(n_max):
        path = workdir / f"s{s}.cov"
        write_cov(path, meth[:, s], cov[:, s])
        start = time.perf_counter()
        ingest([path], f"S{s}", store, fmt="bismark-cov", bin_size=BIN_SIZE)
        times.append(time.perf_counter() - start)
        path.unlink()
    return times


def em_seconds(meth, cov, workdir: Path, client) -> float:
    """One pooled EM iteration on a counts store of these counts."""
    from streambhmm.storehmm import fit_store_em

    store = workdir / f"em{meth.shape[1]}.zarr"
    shutil.rmtree(store, ignore_errors=True)
    names = [f"S{s}" for s in range(meth.shape[1])]
    write_store(store, {"chr1": (np.arange(meth.shape[0]), meth, cov)}, names, BIN_SIZE)
    hmm = BinomialHMM(6).start_from(np.full(6, 1 / 6), TRANSMAT, LEVELS[:, None] + 0.01)
    fit_store_em(open_store(store), hmm, client, n_iter=1, rel_tol=0.0, pooled=True)  # warm the workers
    start = time.perf_counter()
    fit_store_em(open_store(store), hmm, client, n_iter=1, rel_tol=0.0, pooled=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(store, ignore_errors=True)
    return seconds / 2  # n_iter=1: two E-steps (before and after the M-step)


def errors(moments, meth, cov, with_em: bool):
    """Mean |p - p_hat| over states: pooled refined fit, and EM from it."""
    est = SpectralBinomialHMM(6, n_bins=N_BINS, random_state=0).fit_moments(moments)
    one_pass = matched_error(LEVELS[:, None], est.methylation_).methylation_error / 6
    if not with_em:
        return one_pass, None
    sequences = [(meth[cov[:, s] > 0, s][:, None], cov[cov[:, s] > 0, s][:, None]) for s in range(meth.shape[1])]
    m, c = np.concatenate([m for m, _ in sequences]), np.concatenate([c for _, c in sequences])
    lengths = np.array([m.shape[0] for m, _ in sequences])
    hmm = BinomialHMM(6).start_from(est.startprob_, est.transmat_, est.methylation_)
    run_em(hmm, lambda: hmm.e_step(m, c, lengths), 1000, 1e-7)  # fit's defaults: --em-iter, --em-tol
    return one_pass, matched_error(LEVELS[:, None], hmm.methylation_).methylation_error / 6


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,4,8,32,100")
    parser.add_argument("--bins", type=float, default=1e6)
    parser.add_argument("--joint-max", type=int, default=4)
    parser.add_argument("--ingest-bins", type=float, default=1e5)
    parser.add_argument("--em-max", type=int, default=8)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    n_bins = int(args.bins)
    workdir = Path(tempfile.mkdtemp(prefix="streambhmm-many-"))
    from streambhmm.cluster import dask_client

    with dask_client(n_workers=2) as client:  # the commands' embedded cluster
        try:
            run(args, sizes, n_bins, workdir, client)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def run(args, sizes, n_bins: int, workdir: Path, client) -> None:
    """Measure every size and print the table."""
    chunk_partial(empty_halo(1, True), *replicates(1, 5000, 0), np.arange(5000) * BIN_SIZE, N_BINS, "c",
                  pooled=True)  # compile the kernels
    added = ingest_seconds(max(sizes), int(args.ingest_bins), workdir)
    rows, first = [], {}
    for n in sizes:
        meth, cov = replicates(n, n_bins, seed=n)
        row = {"S": n}
        for kind, pooled in (("joint", False), ("pooled", True)):
            if kind == "joint" and n > args.joint_max:
                continue
            rate, size, moments = moments_row(meth, cov, pooled, workdir)
            first.setdefault(kind, rate)
            row[kind] = (rate, rate / first[kind], size)
        row["error"] = errors(moments, meth, cov, n <= args.em_max)  # the pooled moments
        row["em"] = em_seconds(meth, cov, workdir, client) if n <= args.em_max else None
        row["ingest"] = added[n - 1]
        rows.append(row)
        print(f"S = {n} done", flush=True)
    print_table(rows, added, args)


def print_table(rows, added, args) -> None:
    print(f"\n{args.bins:.0e} bins per sample; moments on one core; ingest of {args.ingest_bins:.0e}-bin samples")
    print("(x S: bins/s times S over S = 1's bins/s; 1.0 is a cost exactly linear in S)")
    print("| S | joint M bins/s (x S) | joint partial MB | pooled M bins/s (x S) | pooled partial MB "
          "| ingest of the S-th sample s (vs 2nd) | pooled EM s/iteration | one-pass error | after EM |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        joint = r.get("joint")
        cells = [f"{r['S']}"]
        cells += ([f"{joint[0] / 1e6:.3f} ({joint[1] * r['S']:.2f})", f"{joint[2] / 1e6:.2f}"] if joint
                  else ["not run", ""])
        pooled = r["pooled"]
        cells += [f"{pooled[0] / 1e6:.3f} ({pooled[1] * r['S']:.2f})", f"{pooled[2] / 1e6:.2f}"]
        ratio = f" ({r['ingest'] / added[1]:.2f}x)" if len(added) > 1 and r["S"] > 1 else ""
        cells += [f"{r['ingest']:.2f}{ratio}", "" if r["em"] is None else f"{r['em']:.2f}"]
        cells += [f"{r['error'][0]:.4f}", "" if r["error"][1] is None else f"{r['error'][1]:.4f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
