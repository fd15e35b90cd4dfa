"""Many samples: how every cost grows with the number of samples S (issue 13's acceptance).

    python scripts/bench_many_samples.py [--sizes 1,2,4,8,32,100] [--bins 1e6] [--beta-max 4]
                                         [--ingest-bins 1e6] [--em-max 100] [--skip-allcools]

Simulated methylomes, all in this run. Joint data: 6 sticky states (self-transition 0.95)
on one state path shared by all samples; the samples fall into 4 groups, and 4 of the 6
states are differential (one group's level differs from the others'); each sample has its
own Poisson coverage mean drawn in 10..20 and misses 10% of the bins. Pooled data: the
same 6 levels in every sample, each sample its own state path (replicates). --bins bins
per sample, written into a counts store (one chunk of --bins bins), so every figure below
includes reading the counts from the store as the commands do. For each S:

  moments   M bins/s of the moment pass on one core (`update_moment_store` on an in-process
            Dask worker with one thread, block statistics included), for the joint beta
            feature (S * D dimensions; up to --beta-max samples), the joint projected feature
            (K = 32) and pooled moments; "x S" is bins/s times S over S = 1's bins/s of the
            beta feature (1.0: a cost exactly linear in S, the target is >= 0.01 at S = 100);
  partial   the size on disk of the moment-store partial of that chunk (MB), and of the whole
            moment store;
  ingest    seconds of `streambhmm ingest` (the command, in a new process) adding the S-th
            sample (a Bismark .cov of --ingest-bins bins) to a store of S - 1, and its ratio
            to adding the 2nd;
  EM        seconds per iteration of EM on the counts store, joint and pooled, on the
            commands' embedded cluster (2 workers);
  error     mean |p - p_hat| over states and samples (Hungarian matched; and the largest
            state's mean) of the joint one-pass fit (refined, the automatic feature) and of
            EM on the store from it to convergence (--em-tol 1e-7).

Then `streambhmm batch` on the 8 ALLCools single cells (one group), joint and pooled: the
moment store's size (target: under 50 MB).
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"  # one core for the moment pass, before numpy and numba load

import argparse  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from streambhmm.learn.evaluate import matched_error  # noqa: E402
from streambhmm.learn.hmm import BinomialHMM  # noqa: E402
from streambhmm.learn.model import SpectralBinomialHMM  # noqa: E402
from streambhmm.moments.momentstore import load_total  # noqa: E402
from streambhmm.testing import update_moment_store  # noqa: E402
from streambhmm.learn.simulate import model, simulate  # noqa: E402
from streambhmm.testing import write_store  # noqa: E402

BASE = np.array([0.03, 0.2, 0.4, 0.6, 0.8, 0.97])
STAY = 0.95
TRANSMAT = np.full((6, 6), (1 - STAY) / 5) + np.eye(6) * (STAY - (1 - STAY) / 5)
BIN_SIZE = 100
N_BINS = 30
DIM = 32
REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"


def joint_levels(n_samples: int) -> np.ndarray:
    """(6, S): 4 groups of samples; states 1-4 each differ in one group."""
    group = np.arange(n_samples) % 4
    levels = np.tile(BASE[:, None], (1, n_samples))
    for state, (g, level) in zip((1, 2, 3, 4), ((1, 0.85), (2, 0.9), (3, 0.1), (0, 0.3))):
        levels[state, group == g] = level
    return levels


def simulated(n_samples: int, n_bins: int, pooled: bool, seed: int):
    """(methylated, coverage), each (n_bins, S), and the true levels."""
    rng = np.random.default_rng(seed)
    coverage = rng.uniform(10, 20, n_samples)
    if pooled:
        mdl = model(BASE, TRANSMAT)
        parts = [simulate(mdl, [n_bins], coverage=float(c), random_state=rng) for c in coverage]
        meth = np.concatenate([p.methylated for p in parts], axis=1)
        cov = np.concatenate([p.coverage for p in parts], axis=1)
        truth = BASE[:, None]
    else:
        truth = joint_levels(n_samples)
        sim = simulate(model(truth, TRANSMAT), [n_bins], coverage=coverage, random_state=rng)
        meth, cov = sim.methylated, sim.coverage
    gone = rng.random(cov.shape) < 0.1
    return np.where(gone, 0, meth), np.where(gone, 0, cov), truth


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def moment_pass(store, workdir: Path, label: str, client, **kwargs):
    """(bins/s, partial bytes, moment-store bytes, Moments) of one moment pass."""
    out = workdir / f"moments-{label}.zarr"
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    update_moment_store(store, out, client, n_bins=N_BINS, **kwargs)
    seconds = time.perf_counter() - start
    partials = [p for p in (out / "partials").glob("*/*")]
    total, _ = load_total(out)
    n_bins = sum(store.n_bins(c) for c in store.chromosomes)
    return n_bins / seconds, max(du(p) for p in partials), du(out), total


def write_cov(path: Path, meth: np.ndarray, cov: np.ndarray) -> None:
    """A Bismark coverage file (chrom, 1-based start, end, percent, methylated, unmethylated)."""
    keep = np.flatnonzero(cov > 0)
    pos = keep * BIN_SIZE + 1
    m, c = meth[keep], cov[keep]
    pct = np.round(100 * m / c, 2)
    with open(path, "w") as fh:
        fh.writelines(f"chr1\t{p}\t{p}\t{q}\t{a}\t{b - a}\n" for p, q, a, b in zip(pos, pct, m, c))


def ingest_seconds(n_max: int, n_bins: int, workdir: Path) -> list[float]:
    """Seconds of the ingest command adding sample k to a store of k - 1 samples, k = 1..n_max."""
    store = workdir / "ingest.zarr"
    shutil.rmtree(store, ignore_errors=True)
    times = []
    for s in range(n_max):
        meth, cov, _ = simulated(1, n_bins, True, seed=1000 + s)
        path = workdir / f"s{s}.cov"
        write_cov(path, meth[:, 0], cov[:, 0])
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "streambhmm.app.cli", "ingest", str(path), "--sample", f"S{s}",
                        "--store", str(store), "--format", "bismark-cov"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
        path.unlink()
        print(f"  ingest of sample {s + 1}: {times[-1]:.2f} s", flush=True)
    shutil.rmtree(store, ignore_errors=True)
    return times


def mean_errors(truth: np.ndarray, levels: np.ndarray) -> tuple[float, float]:
    """(mean |p - p_hat| over states and samples, the largest state's mean)."""
    perm = matched_error(truth, levels).permutation
    err = np.abs(truth - levels[perm])
    return float(err.mean()), float(err.mean(axis=1).max())


def em_run(store, start, client, pooled: bool, n_iter: int):
    """(seconds per iteration, the fitted BinomialHMM) of EM on the store from ``start``."""
    from streambhmm.distributed.em import fit_store_em

    hmm = BinomialHMM(6, stationary_start=True, allow_degenerate=True).start_from(*start)
    t = time.perf_counter()
    result = fit_store_em(store, hmm, client, n_iter=n_iter, rel_tol=1e-7 if n_iter > 1 else 0.0, pooled=pooled)
    return (time.perf_counter() - t) / len(result.history), result.hmm


def allcools_sizes(workdir: Path) -> dict:
    """Moment-store MB of `streambhmm batch` on the 8 ALLCools cells, joint and pooled."""
    cells = sorted((REAL / "ALLCools_allc_mm10").glob("Cell*.allc.tsv.gz"))
    manifest = workdir / "cells.tsv"
    manifest.write_text("sample\tgroup\tformat\tfiles\n"
                        + "".join(f"{c.name.split('.')[0]}\tcells\tallc\t{c}\n" for c in cells))
    out = {}
    for label, extra in (("joint", []), ("pooled", ["--pooled"])):
        work = workdir / f"batch-{label}"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "streambhmm.app.cli", "batch", str(manifest), "--workdir", str(work),
                        "-q", *extra], check=True, capture_output=True)
        out[label] = (du(work / "cells" / "moments.zarr") / 1e6, du(work / "cells" / "counts.zarr") / 1e6,
                      time.perf_counter() - start)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,4,8,32,100")
    parser.add_argument("--bins", type=float, default=1e6)
    parser.add_argument("--beta-max", type=int, default=4)
    parser.add_argument("--ingest-bins", type=float, default=1e6)
    parser.add_argument("--em-max", type=int, default=100)
    parser.add_argument("--skip-allcools", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="streambhmm-many-"))
    try:
        run(args, sizes, int(args.bins), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run(args, sizes, n_bins: int, workdir: Path) -> None:
    from distributed import Client, LocalCluster

    from streambhmm.distributed.cluster import dask_client

    print(f"ingest: adding samples of {args.ingest_bins:.0e} bins one by one", flush=True)
    added = ingest_seconds(max(sizes), int(args.ingest_bins), workdir)
    rows = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as one_core, \
            Client(one_core) as core, dask_client(n_workers=2) as cluster:
        meth, cov, _ = simulated(2, 20_000, False, seed=0)  # warm up: load the compiled kernels, start the workers
        warm = write_store(workdir / "warm.zarr", {"chr1": (np.arange(20_000), meth, cov)}, ["a", "b"], BIN_SIZE)
        for kwargs in ({}, {"projection_dim": DIM}, {"pooled": True}):
            moment_pass(warm, workdir, "warm", core, **kwargs)
        em_run(warm, (np.full(6, 1 / 6), TRANSMAT, np.tile(BASE[:, None], (1, 2))), cluster, False, 1)
        for n in sizes:
            row = {"S": n, "ingest": added[n - 1]}
            for kind, pooled in (("joint", False), ("pooled", True)):
                meth, cov, truth = simulated(n, n_bins, pooled, seed=n)
                path = workdir / f"{kind}{n}.zarr"
                store = write_store(path, {"chr1": (np.arange(n_bins), meth, cov)}, [f"S{i}" for i in range(n)],
                                    BIN_SIZE, chunk_size=n_bins)
                del meth, cov
                if pooled:
                    row["pooled"] = moment_pass(store, workdir, "pooled", core, pooled=True)[:3]
                    if n <= args.em_max:
                        row["em pooled"] = em_run(store, (np.full(6, 1 / 6), TRANSMAT, BASE[:, None] + 0.01), cluster,
                                                  True, 1)[0]
                else:
                    if n <= args.beta_max:
                        row["beta"] = moment_pass(store, workdir, "beta", core)[:3]
                    *row["projected"], moments = moment_pass(store, workdir, "projected", core, projection_dim=DIM)
                    if n * N_BINS <= 64:  # the automatic feature is the beta feature
                        moments = moment_pass(store, workdir, "beta", core)[3]
                    t = time.perf_counter()
                    est = SpectralBinomialHMM(6, random_state=0).fit_moments(moments)
                    row["fit seconds"] = time.perf_counter() - t
                    row["one pass"] = mean_errors(truth, est.methylation_)
                    if n <= args.em_max:
                        seconds, hmm = em_run(store, (est.startprob_, est.transmat_, est.methylation_), cluster, False,
                                              1000)
                        row["em joint"], row["after EM"] = seconds, mean_errors(truth, hmm.methylation_)
                shutil.rmtree(path, ignore_errors=True)
            rows.append(row)
            print(f"S = {n}: {row}", flush=True)
    cells = None if args.skip_allcools else allcools_sizes(workdir)
    print_table(rows, added, cells, args)


def print_table(rows, added, allcools, args) -> None:
    first = rows[0]["beta"][0] if "beta" in rows[0] else None
    print(f"\n{args.bins:.0e} bins per sample; moments on one core; ingest of {args.ingest_bins:.0e}-bin samples; "
          f"EM on 2 workers")
    print("| S | beta M bins/s (x S) | projected M bins/s (x S) | pooled M bins/s (x S) "
          "| partial MB: beta / projected / pooled | moment store MB: projected / pooled "
          "| ingest of the S-th sample s (vs 2nd) | EM s/iteration: joint / pooled "
          "| one-pass error (worst state) | after EM |")
    print("|---|---|---|---|---|---|---|---|---|---|")

    def rate(value, n):
        return "" if value is None else f"{value[0] / 1e6:.3f}" + (f" ({value[0] * n / first:.2f})" if first else "")

    for r in rows:
        n = r["S"]
        beta, proj, pooled = r.get("beta"), r["projected"], r["pooled"]
        ratio = f" ({r['ingest'] / added[1]:.2f}x)" if len(added) > 1 and n > 1 else ""
        cells = [f"{n}", rate(beta, n) or "not run", rate(proj, n), rate(pooled, n),
                 " / ".join("" if v is None else f"{v[1] / 1e6:.2f}" for v in (beta, proj, pooled)),
                 f"{proj[2] / 1e6:.2f} / {pooled[2] / 1e6:.2f}", f"{r['ingest']:.2f}{ratio}",
                 " / ".join(f"{r[k]:.2f}" if k in r else "" for k in ("em joint", "em pooled")),
                 "{:.4f} ({:.4f})".format(*r["one pass"]),
                 "{:.4f} ({:.4f})".format(*r["after EM"]) if "after EM" in r else ""]
        print("| " + " | ".join(cells) + " |")
    for label, (moments_mb, counts_mb, seconds) in (allcools or {}).items():
        print(f"ALLCools 8 cells, batch {label}: moment store {moments_mb:.2f} MB, counts store "
              f"{counts_mb:.2f} MB, {seconds:.1f} s")


if __name__ == "__main__":
    main()
