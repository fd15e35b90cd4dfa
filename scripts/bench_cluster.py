"""Moments of a counts store on a Dask cluster of separate processes: 1 vs 2 workers.

    python scripts/bench_cluster.py [--bins 1e7] [--workers 1,2] [--repeat 3]
                                    [--chunk-size 1e6] [--workdir DIR | --store PATH]
    python scripts/bench_cluster.py --bins 1e6          # a quick run

A two-sample synthetic store of ``--bins`` covered bins (chromosomes of 2.5e6 bins, the
benchmark coverage of streambhmm.app.demo) is built in a temporary directory (kept in
``--workdir`` if given; ``--store`` reuses an existing store instead). For each worker
count n, a ``ProcessCluster(n)`` is started (a ``dask scheduler`` process and n ``dask
worker`` processes on 127.0.0.1, one thread each, no nanny) and warmed up by the same
computation on a tiny store (imports, the compiled kernel, Zarr); then the whole moments
step is timed: building the graph (``moments_graph``) and ``client.compute`` of its
total, best of ``--repeat``. Same run, same store, in this one process:
  - the no-Dask baseline: the same per-chunk partials (``chunk_partial`` with the halo
    carried by ``chunk_tail``) in a plain loop over Zarr chunks, added in the same tree;
  - the same Dask graph on the synchronous scheduler (graph overhead without processes).
Reported: best seconds, bins/s, speed-up against 1 worker, ratio against the no-Dask
baseline (> 1: faster), and the largest relative difference of every run's moment sums
from the baseline's (they must agree to rtol 1e-12 whatever the number of workers).
All BLAS/OpenMP/Numba pools are limited to one thread, here and in the workers.
"""

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ[var] = "1"  # one core per process, before numpy and numba load (workers inherit it)

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import fields  # noqa: E402
from pathlib import Path  # noqa: E402

import dask  # noqa: E402
import numpy as np  # noqa: E402
import zarr  # noqa: E402

from streambhmm.testing.bench import build_synthetic_store  # noqa: E402
from streambhmm.moments.sums import Moments  # noqa: E402
from streambhmm.moments.pipeline import (DEFAULT_SPLIT_EVERY, add_moments, chunk_partial, empty_halo,  # noqa: E402
                                 moments_graph, select_samples, tree_reduce)
from streambhmm.testing import ProcessCluster, chunk_tail  # noqa: E402
from streambhmm.io.store import open_store  # noqa: E402

RTOL = 1e-12
WARM_UP_BINS = 4000
N_BINS = 30  # Beta-map bins per sample (moments_graph's default)
SUMS = [f.name for f in fields(Moments) if f.name not in ("n_samples", "n_bins", "n_triples")]


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, which a container may narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def chromosome_arrays(path: str, chrom: str, samples: list[str]):
    """The chromosome's Zarr arrays (methylated, coverage, position) and the column of each sample."""
    group = zarr.open_group(path, mode="r")[chrom]
    names = [str(s) for s in group["sample"][:]]
    return group["methylated"], group["coverage"], group["position"], [names.index(s) for s in samples]


def store_bins(path: str, chromosomes: list[str]) -> tuple[int, int]:
    """(covered bins, chunks) of the store: the rows the moments step reads, and its chunk tasks."""
    bins = chunks = 0
    for chrom in chromosomes:
        meth = zarr.open_group(path, mode="r")[chrom]["methylated"]
        bins += meth.shape[0]
        chunks += -(-meth.shape[0] // meth.chunks[0])
    return bins, chunks


def loop_moments(path: str, store, samples: list[str], split_every: int) -> Moments:
    """The moments in this process without Dask: per-chunk partials in a loop over each
    chromosome's Zarr chunks (the graph's chunks, in its order), added in its tree."""
    partials = []
    for chrom in store.chromosomes:
        meth_arr, cov_arr, pos_arr, cols = chromosome_arrays(path, chrom, samples)
        step = meth_arr.chunks[0]
        halo = empty_halo(len(samples))
        for start in range(0, meth_arr.shape[0], step):
            meth = meth_arr[start:start + step][:, cols]
            cov = cov_arr[start:start + step][:, cols]
            pos = pos_arr[start:start + step]
            partials.append(chunk_partial(halo, meth, cov, pos, N_BINS, chrom).moments)
            halo = chunk_tail(halo, meth, cov, pos)
    return tree_reduce(partials, add_moments, split_every)


def graph_total(store, samples: list[str], split_every: int):
    return moments_graph(store, samples, n_bins=N_BINS, split_every=split_every).total


def best_of(repeat: int, run, after=lambda: None) -> tuple[list[float], Moments]:
    """Times of ``repeat`` runs (``after`` runs untimed after each) and the last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
        after()
    return times, result


def scheduler_task_count(dask_scheduler) -> int:
    return len(dask_scheduler.tasks)


def cluster_moments(client, store, samples: list[str], split_every: int) -> Moments:
    """One timed run on the cluster: build the graph, compute its total, fetch it."""
    return client.compute(graph_total(store, samples, split_every)).result()


def wait_released(client, timeout: float = 30.0) -> None:
    """Wait until the scheduler holds no key, so the next repeat computes from scratch
    instead of finding results still in memory."""
    deadline = time.monotonic() + timeout
    while client.run_on_scheduler(scheduler_task_count) and time.monotonic() < deadline:
        time.sleep(0.01)


def log_problems(cluster) -> list[str]:
    """Warning, error and traceback lines of the scheduler's and workers' logs."""
    names = ["scheduler.log", *(f"worker-{i}.log" for i in range(len(cluster.workers)))]
    return [f"{name}: {line}" for name in names for line in cluster.log(name).splitlines()
            if any(word in line for word in ("Warning", "WARNING", "ERROR", "Traceback"))]


def busy_seconds(records: list[dict], repeat: int) -> list[float]:
    """Seconds spent computing tasks on each worker, per run (is the work spread?)."""
    busy = {}
    for record in records:
        for span in record["startstops"]:
            if span["action"] == "compute":
                busy[record["worker"]] = busy.get(record["worker"], 0.0) + span["stop"] - span["start"]
    return sorted((seconds / repeat for seconds in busy.values()), reverse=True)


def max_rel_diff(a: Moments, b: Moments) -> float:
    """Largest |a - b| / |b| over every entry of every sum (0/0 counts as 0)."""
    worst = 0.0
    for name in SUMS:
        x, y = np.asarray(getattr(a, name), dtype=float), np.asarray(getattr(b, name), dtype=float)
        diff = np.abs(x - y)
        scale = np.abs(y)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(diff == 0, 0.0, diff / scale)
        worst = max(worst, float(rel.max(initial=0.0)))
    return worst


def same_moments(a: Moments, b: Moments) -> bool:
    return (a.n_samples, a.n_bins, a.n_triples) == (b.n_samples, b.n_bins, b.n_triples) and all(
        np.allclose(getattr(a, name), getattr(b, name), rtol=RTOL, atol=0.0)
        for name in SUMS)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=float, default=1e7, help="bins of the synthetic store (default 1e7)")
    parser.add_argument("--chunk-size", type=float, default=1e6, help="bins per Zarr chunk (default 1e6)")
    parser.add_argument("--workers", default="1,2", help="worker process counts to time (default 1,2)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per setting; the best is kept")
    parser.add_argument("--split-every", type=int, default=DEFAULT_SPLIT_EVERY)
    parser.add_argument("--workdir", default=None, help="where the store goes and stays (default: a temporary "
                                                        "directory, removed at the end)")
    parser.add_argument("--store", default=None, help="an existing counts store to use instead of building one")
    args = parser.parse_args()
    workers = [int(n) for n in args.workers.split(",")]
    if args.repeat < 1 or not workers or min(workers) < 1:
        parser.error("--repeat and every --workers count must be >= 1")
    total, chunk_size = int(args.bins), int(args.chunk_size)
    cores, cpu_count = available_cores(), os.cpu_count()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-bench-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if args.store:
            path = Path(args.store).resolve()  # absolute: the workers run in another directory
        else:
            path = workdir / f"bench_{total}_chunk{chunk_size}.zarr"
            if not path.exists():
                print(f"building a {total:,}-bin two-sample store (chunks of {chunk_size:,} bins) at {path}")
                seconds = build_synthetic_store(path, total, chunk_size)
                print(f"  built in {seconds:.1f} s ({total / seconds / 1e6:.2f} M bins/s written)")
        store = open_store(path)
        samples = select_samples(store)
        # warm-up for every setting: the same code path on a tiny store (4 chunks)
        warm_path = workdir / "warm_up.zarr"
        if not warm_path.exists():
            build_synthetic_store(warm_path, WARM_UP_BINS, WARM_UP_BINS // 4)
        warm = open_store(warm_path)
        warm_samples = select_samples(warm)
        bins, n_chunks = store_bins(str(path), store.chromosomes)
        print(f"store {path}: {bins:,} covered bins, samples {','.join(samples)}, "
              f"{len(store.chromosomes)} chromosomes, {n_chunks} chunks")
        load = os.getloadavg()[0]
        print(f"machine: os.cpu_count() = {cpu_count}, {cores} usable by this process, load average {load:.2f}")
        if load > 0.5:
            print(f"note: load average {load:.2f} on {cores} cores before the runs: other processes compete "
                  "for the cores, so the timings (the speed-up most of all) are noisy")
        if max(workers) > cores:
            print(f"note: {max(workers)} workers but only {cores} cores: workers share cores, "
                  "so the speed-up is capped below the worker count")
        if n_chunks < max(workers):
            print(f"note: only {n_chunks} chunk task{'s' if n_chunks > 1 else ''} for {max(workers)} workers: "
                  "some workers idle (use more bins or a smaller --chunk-size)")

        # same-run baselines in this process: first the plain loop, then Dask's synchronous scheduler
        rows = []  # (setting, times, moments)
        loop_moments(str(warm_path), warm, warm_samples, args.split_every)  # warm-up: kernel, Zarr
        times, baseline = best_of(args.repeat, lambda: loop_moments(str(path), store, samples, args.split_every))
        rows.append(("in-process loop, no Dask", times, baseline))
        print(f"  {rows[-1][0]}: best {min(times):.2f} s")
        with dask.config.set(scheduler="synchronous"):
            graph_total(warm, warm_samples, args.split_every).compute()
            times, result = best_of(args.repeat, lambda: graph_total(store, samples, args.split_every).compute())
        rows.append(("in-process Dask, synchronous", times, result))
        print(f"  {rows[-1][0]}: best {min(times):.2f} s")

        from distributed import Client, get_task_stream

        for n in workers:
            start = time.perf_counter()
            with ProcessCluster(n) as cluster, Client(cluster.address, timeout="30s") as client:
                started = time.perf_counter() - start
                cluster_moments(client, warm, warm_samples, args.split_every)  # warm-up: imports, kernel, Zarr
                wait_released(client)
                with get_task_stream(client) as stream:
                    times, result = best_of(args.repeat,
                                            lambda: cluster_moments(client, store, samples, args.split_every),
                                            after=lambda: wait_released(client))
                busy = busy_seconds(stream.data, args.repeat)
                problems = log_problems(cluster)
            label = f"ProcessCluster, {n} worker{'s' if n > 1 else ''}"
            rows.append((label, times, result))
            print(f"  {label}: cluster started in {started:.1f} s; best {min(times):.2f} s "
                  f"(runs: {', '.join(f'{t:.2f}' for t in times)}); task seconds per run on each worker: "
                  f"{' / '.join(f'{b:.2f}' for b in busy)}")
            for line in problems:
                print(f"    cluster log: {line}")

        one_worker = next((min(t) for label, t, _ in rows if label == "ProcessCluster, 1 worker"), None)
        base = min(rows[0][1])
        print(f"\n{'setting':<30} {'best s':>8} {'M bins/s':>9} {'vs 1 worker':>12} {'vs no-Dask':>11} "
              f"{'max rel diff':>13}")
        all_equal = True
        for label, times, moments in rows:
            best = min(times)
            equal = same_moments(moments, baseline)
            all_equal &= equal
            speedup = f"{one_worker / best:.2f}x" if one_worker and label.startswith("ProcessCluster") else "-"
            print(f"{label:<30} {best:>8.2f} {bins / best / 1e6:>9.2f} {speedup:>12} {base / best:>10.2f}x "
                  f"{max_rel_diff(moments, baseline):>13.1e}{'' if equal else '  MISMATCH'}")
        print(f"\n{bins:,} bins, {n_chunks} chunk{'s' if n_chunks > 1 else ''}, best of {args.repeat}; "
              "times include building the graph, not starting the cluster")
        print(f"cores: os.cpu_count() = {cpu_count}, {cores} usable; load average now {os.getloadavg()[0]:.2f}"
              + (f"; fewer than the {max(workers)} workers" if max(workers) > cores else ""))
        if all_equal:
            print(f"moments: every run equals the no-Dask baseline (np.allclose, rtol {RTOL:g}, "
                  f"{baseline.n_triples:,} triples)")
        else:
            raise SystemExit(f"moments differ between runs beyond rtol {RTOL:g} (see MISMATCH above)")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
