"""What only tests and benchmarks need, a section per part of the package: counts stores
written from arrays and loaded whole, one segment's messages, a Dask cluster of real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client

from .distributed.messages import Params, backward_step, forward_step, statistics_between
from .io.store import DEFAULT_CHUNK_SIZE, CountsStore, SampleWriter, open_store
from .learn.emissions import EmissionTable
from .moments.pipeline import kept_sequences, plan_chunks, select_samples


# --- dist: a Dask cluster of real processes ---
# A Dask cluster of real processes on 127.0.0.1, started with the ``dask scheduler`` and
# ``dask worker`` commands: the topology of docker-compose.yml without Docker. Tests and
# benchmarks use it to run the CLI against a separate scheduler, and to kill its parts.
class ProcessCluster:
    """``with ProcessCluster(n_workers=2) as cluster: ... cluster.address ...``

    Workers run without a nanny, one thread each, so killing a worker's process kills the
    worker (nothing restarts it). ``environment``: variables added to the processes' (Dask
    settings such as DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES)."""

    def __init__(self, n_workers: int = 2, start_timeout: float = 60.0, environment: dict | None = None):
        self.n_workers = n_workers
        self.start_timeout = start_timeout
        self.environment = dict(environment or {})
        self._tmp = tempfile.TemporaryDirectory(prefix="streambhmm-cluster-")
        self.directory = Path(self._tmp.name)
        self.scheduler_file = self.directory / "scheduler.json"
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address: str | None = None

    def _spawn(self, command: str, *args: str, log: str) -> subprocess.Popen:
        """Run ``dask COMMAND ARGS`` (through this interpreter, so the same environment)."""
        out = open(self.directory / log, "w")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen([sys.executable, "-m", f"distributed.cli.dask_{command}", *args], stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, **self.environment, "PYTHONUNBUFFERED": "1"},
                                cwd=self.directory, start_new_session=True)
        proc.log = out  # type: ignore[attr-defined]
        return proc

    def start(self) -> "ProcessCluster":
        self.scheduler = self._spawn("scheduler", "--host", "127.0.0.1", "--port", "0",
                                     "--dashboard-address", "127.0.0.1:0",
                                     "--scheduler-file", str(self.scheduler_file), log="scheduler.log")
        deadline = time.monotonic() + self.start_timeout
        while not self.scheduler_file.exists():
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dask scheduler did not start:\n{self.log('scheduler.log')}")
            time.sleep(0.1)
        while True:  # the file may be seen before it is fully written
            try:
                self.address = json.loads(self.scheduler_file.read_text())["address"]
                break
            except (json.JSONDecodeError, KeyError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dask scheduler wrote no address:\n{self.log('scheduler.log')}") from None
                time.sleep(0.1)
        for _ in range(self.n_workers):
            self.add_worker()
        self.wait_for_workers(self.n_workers)
        return self

    def add_worker(self) -> subprocess.Popen:
        index = len(self.workers)
        worker = self._spawn("worker", self.address, "--nthreads", "1", "--no-nanny", "--host", "127.0.0.1",
                             "--no-dashboard",
                             "--name", f"worker-{index}", "--local-directory", str(self.directory),
                             "--death-timeout", "60", log=f"worker-{index}.log")
        self.workers.append(worker)
        return worker

    def wait_for_workers(self, n: int) -> None:
        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(n, timeout=self.start_timeout)

    def kill_worker(self, index: int = 0) -> None:
        """SIGKILL one worker process."""
        self.workers[index].send_signal(signal.SIGKILL)
        self.workers[index].wait()

    def pause_workers(self) -> None:
        """SIGSTOP every worker: they keep their connections and tasks, and do nothing."""
        for worker in self.workers:
            worker.send_signal(signal.SIGSTOP)

    def resume_workers(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGCONT)

    def kill_scheduler(self) -> None:
        self.scheduler.send_signal(signal.SIGKILL)
        self.scheduler.wait()

    def log(self, name: str) -> str:
        path = self.directory / name
        return path.read_text() if path.exists() else ""

    def stop(self) -> None:
        self.resume_workers()  # a stopped process would not act on SIGTERM
        for proc in [*self.workers, self.scheduler]:
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.log.close()
        self._tmp.cleanup()

    def __enter__(self) -> "ProcessCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


# --- dist: one segment's messages from its counts ---
def segment_forward(previous, meth, cov, params: Params):
    """(log P(segment | earlier bins), forward message after the segment).

    ``previous`` is the forward message before the segment, None at a chromosome's start.
    An empty segment passes the message through."""
    return forward_step(previous, params.log_b(EmissionTable(meth, cov)), params)


def segment_backward(following, meth, cov, params: Params):
    """The backward message into the bin before the segment (None: nothing follows)."""
    return backward_step(following, params.log_b(EmissionTable(meth, cov)), params)


def segment_stats(previous, following, meth, cov, params: Params, want_posteriors: bool = False):
    """Exact sufficient statistics of one segment (and its posteriors, shape (n, m))."""
    table = EmissionTable(meth, cov)
    return statistics_between(previous, following, params.log_b(table), params, want_posteriors, table)


# --- io: counts stores from arrays, and back ---
def write_store(path, chromosomes: dict, samples: list[str], bin_size: int = 100,
                chunk_size: int = DEFAULT_CHUNK_SIZE, provenance: dict | None = None) -> CountsStore:
    """Write a counts store from in-memory counts: ``chromosomes`` maps each name to
    (bins, methylated (n, S), coverage (n, S)), bins being bin indices. Each sample goes in
    through a SampleWriter and a commit, as an ingest would put it."""
    for s, sample in enumerate(samples):
        with SampleWriter(path, bin_size, chunk_size) as writer:
            for chrom, (bins, meth, cov) in chromosomes.items():
                keep = np.asarray(cov)[:, s] > 0
                writer.add(chrom, np.asarray(bins)[keep], np.asarray(meth)[keep, s], np.asarray(cov)[keep, s])
            writer.commit(sample, (provenance or {}).get(sample, {}))
    return open_store(path)


def load_counts(store: CountsStore, samples=None):
    """All kept bins of the store in memory: (methylated, coverage, lengths), one length
    per chromosome. For in-memory use and tests only; it loads the whole genome."""
    samples = select_samples(store, samples)
    meth, cov, lengths = [], [], []
    for chrom in store.chromosomes:
        kept = [kept_sequences([None], *plan.ref.read(), None)[0][1:3]
                for plan in plan_chunks(store, samples, chromosomes=[chrom])]
        meth += [m for m, _ in kept]
        cov += [c for _, c in kept]
        lengths.append(sum(m.shape[0] for m, _ in kept))
    empty = np.zeros((0, len(samples)), np.int64)
    return np.concatenate(meth or [empty]), np.concatenate(cov or [empty]), np.array(lengths, dtype=np.int64)


def chunk_tail(previous, methylated, coverage, positions, pooled: bool = False):
    """The last two kept bins (counts and positions) up to the end of this chunk: the next
    chunk's halo (per sample when pooled)."""
    tails = [tuple(np.concatenate([before, now])[-2:] for before, now in zip(halo, kept))
             for halo, *kept in kept_sequences(previous if pooled else [previous], methylated, coverage, positions)]
    return tails if pooled else tails[0]
