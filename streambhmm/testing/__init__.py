"""What only tests and benchmarks need, a section per part of the package: counts stores
written from arrays and loaded whole, one segment's messages, a Dask cluster of real processes,
moment stores and models from keyword settings. Beside it: reference.py (naive moments, the
previous triple kernel) and bench.py (synthetic stores for benchmarks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from distributed import Client

from ..app.modelio import ModelFile
from ..distributed.messages import Params, backward_step, forward_step, statistics_between
from ..io.store import DEFAULT_CHUNK_SIZE, CountsStore, SampleWriter, open_store
from ..learn.emissions import EmissionTable
from ..moments.features import DEFAULT_N_BINS
from ..moments.momentstore import UpdateReport, update_moments
from ..moments.pipeline import kept_sequences, plan_chunks, select_samples
from ..moments.spec import FeatureSpec


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


# --- moments and models from keyword settings ---
def update_moment_store(store: CountsStore, output, client, samples=None, n_bins: int = DEFAULT_N_BINS,
                        progress=lambda done, total: None, block_size: int | None = None,
                        pooled: bool = False, projection_dim: int = 0, projection_seed: int = 0) -> UpdateReport:
    """moments.momentstore.update_moments of the feature these settings give (``projection_dim``
    K > 0: the projected feature; ``pooled``: the samples' moments summed, each sample its own sequence)."""
    spec = FeatureSpec.of_settings(n_bins, projection_dim, projection_seed, pooled, block_size)
    return update_moments(store, output, client, spec, samples, progress)


def assert_opens_with_xarray(moments) -> None:
    """A moment store's partials are a Zarr hierarchy that xarray opens without a warning: all
    of them with open_datatree (group "partials"), each with open_zarr as a Dataset of named
    dimensions holding what streambhmm reads."""
    import xarray as xr

    from ..io.storage import Location
    from ..moments.manifest import Manifest
    from ..moments.partials import DIMENSIONS, block_arrays, read_partial
    from ..moments.sums import ARRAY_FIELDS

    root = Path(moments)
    manifest = Manifest.read(root)
    tree = xr.open_datatree(root, engine="zarr", group="partials", consolidated=False)
    assert sorted(tree.children) == sorted(manifest.chromosomes)
    for entry in manifest.partials:
        assert entry["path"].rsplit("/", 1)[1] in tree[entry["chromosome"]].children
        dataset = xr.open_zarr(root, group=entry["path"], consolidated=False)
        assert dataset.attrs["chromosome"] == entry["chromosome"] and dataset.attrs["sha256"] == entry["sha256"]
        partial, _ = read_partial(Location.of(root / entry["path"]))
        arrays = {**{name: getattr(partial.moments, name) for name in ARRAY_FIELDS}, **block_arrays(partial.blocks)}
        assert sorted(dataset.data_vars) == sorted(arrays) == sorted(DIMENSIONS)
        for name, variable in dataset.data_vars.items():
            assert [d.removeprefix("no_") for d in variable.dims] == list(DIMENSIONS[name]), name
            np.testing.assert_array_equal(variable.values, arrays[name])


def hmm_from_model(document):
    """A BinomialHMM with the parameters of a model (a ModelFile, or a document
    app.modelio.read_model would accept), for scoring and decoding."""
    return (document if isinstance(document, ModelFile) else ModelFile.of(document)).hmm()


# --- app: methylomes of groups of samples with planted DMRs (`dmr`'s tests and benchmark) ---
@dataclass
class GroupMethylome:
    """Simulated CpG-level counts of groups of replicates, and where they truly differ.

    ``chromosomes`` maps each name to (1-based positions (n,), methylated (n, S), coverage
    (n, S)); ``truth`` lists the planted differences as (chrom, start, end, difference, kind):
    0-based half-open bp, difference = second group's mean level minus the first's over the
    region's CpGs, kind "focal" (a DMR) or "domain" (a PMD of one group only)."""

    chromosomes: dict
    samples: list
    groups: list  # per sample
    truth: list = field(default_factory=list)

    @property
    def n_cpgs(self) -> int:
        return sum(pos.size for pos, _, _ in self.chromosomes.values())

    def binned(self, bin_size: int = 100) -> dict:
        """The counts summed into bins, as testing.write_store takes them."""
        out = {}
        for chrom, (pos, meth, cov) in self.chromosomes.items():
            bins, first = np.unique((pos - 1) // bin_size, return_index=True)
            out[chrom] = (bins, np.add.reduceat(meth, first, axis=0), np.add.reduceat(cov, first, axis=0))
        return out

    def write_dss(self, directory) -> list[Path]:
        """One file per sample in DSS's text format (header ``chr pos N X``, 1-based), CpGs
        without coverage left out; the paths, in sample order."""
        paths = []
        for s, sample in enumerate(self.samples):
            path = Path(directory) / f"{sample}.txt"
            with open(path, "w") as fh:
                fh.write("chr\tpos\tN\tX\n")
                for chrom, (pos, meth, cov) in self.chromosomes.items():
                    keep = cov[:, s] > 0
                    pd.DataFrame({"chr": chrom, "pos": pos[keep], "N": cov[keep, s], "X": meth[keep, s]}).to_csv(
                        fh, sep="\t", header=False, index=False)
            paths.append(path)
        return paths


def _intervals(rng, length: int, every: float, low: int, high: int, log_uniform: bool = False) -> np.ndarray:
    """Non-overlapping [start, end) intervals along ``length`` bp: starts at mean distance
    ``every``, lengths between ``low`` and ``high``."""
    out, at = [], 0.0
    while True:
        at += rng.exponential(every)
        size = np.exp(rng.uniform(np.log(low), np.log(high))) if log_uniform else rng.uniform(low, high)
        if at + size >= length:
            return np.array(out, np.int64).reshape(-1, 2)
        out.append((int(at), int(at + size)))
        at += size


def _inside(pos0: np.ndarray, intervals: np.ndarray) -> np.ndarray:
    """Index of the interval holding each position, -1 outside all of them."""
    if not len(intervals):
        return np.full(pos0.size, -1)
    k = np.searchsorted(intervals[:, 0], pos0, side="right") - 1
    ok = (k >= 0) & (pos0 < intervals[np.maximum(k, 0), 1])
    return np.where(ok, k, -1)


def _beta_levels(rng, mean, concentration):
    mean = np.clip(mean, 0.005, 0.995)
    return rng.beta(mean * concentration, (1 - mean) * concentration)


def simulate_groups(length: int = 2_000_000, n_chromosomes: int = 1, replicates=(3, 3), n_dmrs: int = 20,
                    domain: bool = True, dispersion: float = 0.05, coverage=(5, 30), missing: float = 0.03,
                    seed: int = 0, difference=(0.1, 0.6), dmr_length=(200, 5000)) -> GroupMethylome:
    """CpG-level methylomes of groups of replicates (``replicates``: samples per group),
    ``n_chromosomes`` of ``length`` bp each.

    CpGs: a sparse background (a CpG every ~100 bp) and clustered islands (0.5-2 kb with a
    CpG every ~10 bp, one per ~100 kb). Levels shared by all samples: a methylated
    background (mean 0.82, spread between CpGs), unmethylated islands (9 in 10) with
    intermediate shores (1 kb on each side), hypomethylated enhancer-like stretches (0.3-1.5 kb, one per
    ~50 kb), and PMDs (100-600 kb, about a fifth of the genome, mean 0.45 with a wide spread).
    Differences: ``n_dmrs`` DMRs per chromosome (log-uniform ``dmr_length`` bp, half centred
    on islands, the second group's level shifted by a uniform ``difference``, up or down as
    the levels allow) and, with ``domain``, one 400 kb PMD of the second group only per
    chromosome. Each replicate's level at a CpG is a Beta draw around its group's (variance
    ``dispersion`` x level x (1 - level), DSS's model); coverage a negative binomial around
    a depth per sample, held within ``coverage``; a share ``missing`` of CpGs uncovered per sample.
    """
    rng = np.random.default_rng(seed)
    groups = [g for g, n in zip("ABCDEFGH", replicates) for _ in range(n)]
    samples = [f"{g}{sum(1 for h in groups[:k + 1] if h == g)}" for k, g in enumerate(groups)]
    group_of = np.array(["ABCDEFGH".index(g) for g in groups])
    depth = rng.uniform(max(coverage[0], 8), min(coverage[1], 20), len(samples))
    chromosomes, truth = {}, []
    for c in range(n_chromosomes):
        chrom = f"chr{c + 1}"
        pos0, level, islands, pmds, on_island, in_pmd = _shared_levels(rng, length)
        n = pos0.size
        levels = np.tile(level[:, None], (1, len(replicates)))
        taken = np.zeros((0, 2), np.int64)
        if domain:
            taken = _plant_domain(rng, chrom, length, pos0, levels, pmds, on_island, in_pmd, truth)
        _plant_dmrs(rng, chrom, length, pos0, levels, islands, taken, n_dmrs, difference, dmr_length, truth)
        own = _beta_levels(rng, levels[:, group_of], 1 / dispersion - 1)
        cov = np.clip(rng.negative_binomial(4, 4 / (4 + depth), (n, len(samples))), *coverage)
        cov[rng.random(cov.shape) < missing] = 0
        chromosomes[chrom] = (pos0 + 1, rng.binomial(cov, own), cov)
    truth.sort(key=lambda t: (t[0], t[1]))
    return GroupMethylome(chromosomes, samples, groups, truth)


def _shared_levels(rng, length: int):
    """simulate_groups' CpGs and the levels all samples share: positions, levels, islands,
    PMDs, and which CpGs are on an island or in a PMD."""
    islands = _intervals(rng, length, 100_000, 500, 2000)
    background = np.cumsum(rng.geometric(1 / 100, int(length / 90)) + 1)
    dense = [a + np.cumsum(rng.geometric(1 / 10, (b - a) // 4) + 1) for a, b in islands]
    pos0 = np.unique(np.concatenate([background] + dense))
    pos0 = pos0[pos0 < length - 1]
    pos0 = pos0[np.r_[True, np.diff(pos0) >= 2]]  # a CpG takes two bases
    n = pos0.size
    level = _beta_levels(rng, np.full(n, 0.82), 6)
    pmds = _intervals(rng, length, 1_400_000, 100_000, 600_000)
    in_pmd = _inside(pos0, pmds) >= 0
    level[in_pmd] = _beta_levels(rng, np.full(in_pmd.sum(), 0.45), 3)
    shores = np.column_stack([np.maximum(islands[:, 0] - 1000, 0), islands[:, 1] + 1000])
    in_shore = _inside(pos0, shores) >= 0
    level[in_shore] = _beta_levels(rng, np.full(in_shore.sum(), 0.4), 4)
    enhancers = _intervals(rng, length, 50_000, 300, 1500)
    in_enhancer = _inside(pos0, enhancers) >= 0
    level[in_enhancer] = _beta_levels(rng, np.full(in_enhancer.sum(), 0.2), 5)
    island = _inside(pos0, islands)
    methylated_island = rng.random(len(islands)) < 0.1
    on_island = island >= 0
    level[on_island] = _beta_levels(rng, np.where(methylated_island[island[on_island]], 0.85, 0.05), 20)
    return pos0, level, islands, pmds, on_island, in_pmd


def _plant_domain(rng, chrom: str, length: int, pos0, levels, pmds, on_island, in_pmd, truth: list) -> np.ndarray:
    """A 400 kb PMD of the last group only, away from the shared PMDs; its span."""
    start = int(rng.uniform(0.1, 0.8) * length)
    for _ in range(100):
        if not ((pmds[:, 0] < start + 400_000) & (pmds[:, 1] > start)).any():
            break
        start = int(rng.uniform(0.1, 0.8) * length)
    span = np.array([[start, start + 400_000]])
    inside = (_inside(pos0, span) >= 0) & ~on_island & ~in_pmd
    levels[inside, -1] = _beta_levels(rng, np.full(inside.sum(), 0.45), 3)
    truth.append((chrom, start, start + 400_000, float(levels[inside, -1].mean() - levels[inside, 0].mean()),
                  "domain"))
    return span


def _plant_dmrs(rng, chrom: str, length: int, pos0, levels, islands, taken, n_dmrs: int, difference, dmr_length,
                truth: list) -> None:
    """``n_dmrs`` focal DMRs (half centred on islands), 1 kb or more from each other and from ``taken``."""
    planted = 0
    while planted < n_dmrs:
        size = int(np.exp(rng.uniform(*np.log(dmr_length))))
        centre = (islands[rng.integers(len(islands))].mean() + rng.normal(0, 500) if rng.random() < 0.5
                  and len(islands) else rng.uniform(0, length))
        start = int(centre - size / 2)
        if start < 0 or start + size >= length or ((taken[:, 0] < start + size + 1000)
                                                   & (taken[:, 1] > start - 1000)).any():
            continue
        inside = _inside(pos0, np.array([[start, start + size]])) >= 0
        if inside.sum() < 2:
            continue
        shift = rng.uniform(*difference)
        mean = levels[inside, 0].mean()
        up = mean + shift <= 0.95 and (mean - shift < 0.05 or rng.random() < 0.5)
        for g in range(1, levels.shape[1]):
            levels[inside, g] = np.clip(levels[inside, 0] + (shift if up else -shift), 0.005, 0.995)
        truth.append((chrom, start, start + size, float(levels[inside, -1].mean() - mean), "focal"))
        taken = np.vstack([taken, [[start, start + size]]])
        planted += 1
