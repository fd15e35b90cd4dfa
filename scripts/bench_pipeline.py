"""Out-of-core moments on Dask: throughput and peak memory per worker at 1e7 and 1e8 bins.

    python scripts/bench_pipeline.py [--sizes 1e7,1e8] [--workdir DIR] [--text-ingest-bins 2e6]

For each genome size, a two-sample synthetic methylome is simulated chromosome by
chromosome (2.5e6 bins each, like human chr1 at 100 bp; never the whole genome in
memory) and written into a counts store through the store's chromosome writer. Then, on
a fresh LocalCluster of 2 single-threaded worker processes (warmed up: imports and the
compiled kernel loaded), the moments are computed for one sample and for two. Reported per run:
  - bins/s of the whole moments step (graph, Zarr reads, chunk tasks, tree reduction);
  - the same-run baseline: bins/s of compute_moments in this process on one in-memory
    chromosome (one core), and the ratio (parallel efficiency across 2 workers);
  - peak resident memory (VmHWM) of each worker process and of this process.
Also measured once: the text ingest path (simulated Bismark .cov files -> ingest) rows/s.
"""

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from streambhmm.distributed.cluster import dask_client
from streambhmm.app.demo import cpg_rows, write_bismark_cov
from streambhmm.testing.bench import BENCH_COVERAGE, BENCH_TRUTH, build_synthetic_store
from streambhmm.io.ingest import ingest
from streambhmm.moments.sums import compute_moments
from streambhmm.moments.pipeline import moments_graph
from streambhmm.learn.simulate import simulate
from streambhmm.io.store import open_store

def peak_rss_mib() -> float:
    """This process's peak resident memory (VmHWM: its own address space's high-water
    mark; ru_maxrss would carry over the parent's across fork and exec)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024


def worker_peak_mib(client) -> list[float]:
    return list(client.run(peak_rss_mib).values())


def warm_up() -> None:
    """Imports and the kernel's compiled code, loaded once per worker before timing."""
    from streambhmm.moments.sums import compute_moments as moments
    moments(np.array([[1, 2], [0, 1], [3, 3], [2, 2]]), np.array([[2, 2], [1, 1], [4, 3], [2, 2]]))


def baseline_rate(samples: list[str]) -> float:
    """compute_moments in this process on one chromosome in memory: bins/s on one core."""
    sim = simulate(BENCH_TRUTH, [1_000_000], coverage=BENCH_COVERAGE, random_state=99)
    cols = [["A", "B"].index(s) for s in samples]
    meth, cov = sim.methylated[:, cols], sim.coverage[:, cols]
    compute_moments(meth[:1000], cov[:1000])
    start = time.perf_counter()
    compute_moments(meth, cov)
    return meth.shape[0] / (time.perf_counter() - start)


def text_ingest_rate(workdir: Path, n_bins: int) -> float:
    """Write a Bismark .cov file of n_bins simulated bins and ingest it; returns rows/s."""
    rng = np.random.default_rng(0)
    sim = simulate(BENCH_TRUTH, [n_bins], coverage=BENCH_COVERAGE, random_state=rng)
    path = workdir / "ingest_bench.cov"
    rows = cpg_rows(np.arange(n_bins, dtype=np.int64) * 100, sim.methylated[:, 0], sim.coverage[:, 0], rng)
    with open(path, "w") as fh:
        write_bismark_cov(fh, "chr1", *rows[:3])
    store = workdir / "ingest_bench.zarr"
    shutil.rmtree(store, ignore_errors=True)  # an identical re-ingest would read nothing
    start = time.perf_counter()
    report = ingest([path], "A", store)
    return report.n_rows / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e7,1e8")
    parser.add_argument("--chunk-size", type=float, default=1e6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default=None, help="where stores go (default: a temporary directory)")
    parser.add_argument("--text-ingest-bins", type=float, default=2e6)
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.text_ingest_bins > 0:
            rate = text_ingest_rate(workdir, int(args.text_ingest_bins))
            print(f"text ingest (Bismark .cov -> store): {rate / 1e6:.2f} M rows/s\n")
        results = []
        for total in sizes:
            path = workdir / f"bench_{total}.zarr"
            if not path.exists():
                print(f"building {total:,}-bin store (2 samples) at {path}")
                seconds = build_synthetic_store(path, total, int(args.chunk_size), echo=print)
                print(f"  {seconds:.0f} s ({total / seconds / 1e6:.2f} M bins/s written)")
            store = open_store(path)
            for samples in (["A"], ["A", "B"]):
                base = baseline_rate(samples)
                with dask_client(n_workers=args.workers) as client:
                    client.run(warm_up)
                    start = time.perf_counter()
                    graph = moments_graph(store, samples)
                    moments = client.compute(graph.total).result()
                    seconds = time.perf_counter() - start
                    peaks = worker_peak_mib(client)
                rate = moments.n_triples / seconds
                results.append((total, len(samples), graph.n_chunks, seconds, rate, base, peaks))
                print(f"  {total:.0e} bins, S={len(samples)}: {rate / 1e6:.2f} M bins/s, "
                      f"worker peaks {', '.join(f'{p:.0f}' for p in peaks)} MiB")
        driver = peak_rss_mib()
        print(f"\n{'bins':>8} {'S':>2} {'chunks':>7} {'seconds':>8} {'M bins/s':>9} {'1-core M bins/s':>16} "
              f"{'ratio':>6} {'peak MiB per worker':>20}")
        for total, s, chunks, seconds, rate, base, peaks in results:
            print(f"{total:>8.0e} {s:>2} {chunks:>7} {seconds:>8.1f} {rate / 1e6:>9.2f} {base / 1e6:>16.2f} "
                  f"{rate / base:>6.2f} {' / '.join(f'{p:.0f}' for p in peaks):>20}")
        print(f"\npeak memory of this (driver) process: {driver:.0f} MiB")
        print(f"{args.workers} workers; targets: >= 2 M bins/s for S=1, >= 0.5 M bins/s for S=2")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
