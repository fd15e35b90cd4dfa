"""The counts store (format version 2): Zarr v3, a fixed bin axis per chromosome, one sample
per chunk column.

    STORE/zarr.json        root attributes: format, format_version, bin_size, chunk_size,
                           samples ({name: its column and provenance}), chromosomes (natural
                           order), generation (a new value at every change)
    STORE/<chrom>/         an xarray Dataset with dims (position, sample):
        methylated, coverage   uint32 (bins, samples), chunks (chunk_size, 1): each chunk holds
                               one sample's counts of chunk_size bins; all-zero chunks are not
                               written (they read as zeros)
        position               int64, the index: bin i starts at i * bin_size, so
                               ``ds.sel(position=slice(a, b))`` works; the axis never moves, it
                               only grows when a later sample reaches further
        sample                 the samples' names, in column order
        index/summary          int64 (chunks, samples, FIELDS): per chunk and sample a BLAKE2b
                               digest of its counts, its covered bins and count sums, and its
                               last two covered bins (the halo the next chunk needs)

Any zarr/xarray reader opens a chromosome with ``xarray.open_zarr(STORE, group=CHROM)``.

Writing a sample touches only that sample's column. A :class:`SampleWriter` stages the
sample's chunks beside the store (``STORE.ingest-<id>``, one chunk in memory at a time);
the commit then takes the store's exclusive lock, writes ``COMMIT.json`` into the staging
directory (the commit point), renames the staged chunk files into the sample's column,
updates the metadata and removes the staging directory. A commit whose process died is
completed by the next command that takes the lock; a staging directory without
``COMMIT.json`` whose owner died is removed. So a killed or failed ingest leaves every
other sample's chunks and, before its commit point, the store's metadata exactly as they
were, and ingests of different samples can run concurrently (only their commits take turns).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import uuid
import warnings
from dataclasses import dataclass

import numpy as np

from .storage import Location

COUNTS_FORMAT = "streambhmm-counts"
COUNTS_VERSION = 2
DEFAULT_CHUNK_SIZE = 1_000_000
COUNT_DTYPE = np.uint32
COUNT_MAX = int(np.iinfo(COUNT_DTYPE).max)
INDEX_CHUNK = 4096  # chunk summaries per index chunk (of one sample)
SAMPLE_CHUNK = 1 << 16  # names per chunk of the sample coordinate
COMMIT = "COMMIT.json"
OWNER_LOCK = "owner.lock"

# index/summary fields; the digest is (0, 0) for a chunk without coverage
FIELDS = ("digest_hi", "digest_lo", "covered", "sum_methylated", "sum_coverage",
          "last_bin", "last_methylated", "last_coverage", "previous_bin", "previous_methylated",
          "previous_coverage")
DIGEST, COVERED, SUMS, LAST, PREVIOUS = slice(0, 2), 2, slice(3, 5), slice(5, 8), slice(8, 11)


class StoreError(ValueError):
    """A store that is missing, damaged, of another kind or of another format version."""


def natural_key(name: str):
    """chr2 before chr10: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def natural_sorted(names) -> list[str]:
    return sorted(names, key=natural_key)


def _codecs() -> dict:
    from zarr.codecs import BloscCodec

    # byte-shuffled zstd: counts are small integers, their high bytes mostly zero
    return {"compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")}


# -- the store as a reader sees it ---------------------------------------------------------
@dataclass
class StoreOverview:
    """A counts store's extent and coverage (CountsStore.overview); arrays are per sample."""

    samples: list[str]
    chromosomes: dict  # chrom -> (bins on its axis, covered bins per sample)
    covered: np.ndarray  # covered bins
    coverage: np.ndarray  # reads summed over the bins
    methylated: np.ndarray

    @property
    def n_bins(self) -> int:
        return sum(n for n, _ in self.chromosomes.values())


@dataclass(frozen=True)
class CountsStore:
    path: Location
    attrs: dict

    @property
    def bin_size(self) -> int:
        return int(self.attrs["bin_size"])

    @property
    def chunk_size(self) -> int:
        return int(self.attrs["chunk_size"])

    @property
    def chromosomes(self) -> list[str]:
        return list(self.attrs["chromosomes"])

    @property
    def samples(self) -> list[str]:
        """Sample names in column order."""
        return sorted(self.attrs["samples"], key=lambda name: self.attrs["samples"][name]["column"])

    @property
    def generation(self) -> str:
        return str(self.attrs.get("generation", ""))

    def column(self, sample: str) -> int:
        return int(self.attrs["samples"][sample]["column"])

    def n_bins(self, chrom: str) -> int:
        return int(_root(self.path.url, self.generation)[f"{chrom}/methylated"].shape[0])

    def n_cells(self) -> int:
        """Bins x samples over all chromosomes (from the metadata)."""
        return sum(self.n_bins(c) for c in self.chromosomes) * len(self.samples)

    def dataset(self, chrom: str):
        """Lazy (dask-backed) xarray Dataset of one chromosome."""
        import xarray as xr

        return xr.open_zarr(self.path.url, group=chrom)

    def overview(self) -> "StoreOverview":
        """Bins and coverage per chromosome and sample, from the chunk summaries (no counts
        are read)."""
        columns = [self.column(s) for s in self.samples]
        per_chrom, totals = {}, np.zeros((3, len(columns)), np.int64)
        for chrom in self.chromosomes:
            summary = self.summary(chrom, columns).sum(axis=0)  # (samples, fields)
            per_chrom[chrom] = (self.n_bins(chrom), summary[:, COVERED])
            totals += [summary[:, COVERED], summary[:, SUMS][:, 1], summary[:, SUMS][:, 0]]
        return StoreOverview(self.samples, per_chrom, *totals)

    def summary(self, chrom: str, columns) -> np.ndarray:
        """(chunks, len(columns), FIELDS) chunk summaries of those sample columns."""
        array = _root(self.path.url, self.generation)[f"{chrom}/index/summary"]
        columns = list(columns)
        if not columns:
            return np.zeros((array.shape[0], 0, len(FIELDS)), np.int64)
        return np.asarray(array.get_orthogonal_selection((slice(None), columns, slice(None))))

    def chunk_refs(self, chrom: str, samples) -> list[ChunkRef]:
        """The chunks of ``chrom`` where one of ``samples`` has coverage, as references a task
        can read (with each column's expected digest)."""
        columns = [self.column(s) for s in samples]
        summary = self.summary(chrom, columns)
        n_bins, size = self.n_bins(chrom), self.chunk_size
        url = self.path.absolute().url  # a worker's working directory is not ours
        refs = []
        for i in np.flatnonzero((summary[:, :, COVERED] > 0).any(axis=1)):
            digests = tuple((int(hi), int(lo)) for hi, lo in summary[i, :, DIGEST])
            refs.append(ChunkRef(url, self.generation, self.bin_size, chrom, int(i), int(i) * size,
                                 min((int(i) + 1) * size, n_bins), tuple(columns), digests, tuple(samples),
                                 summary[i]))
        return refs


@functools.lru_cache(maxsize=16)
def _root(url: str, generation: str):
    """The store's root group through its consolidated metadata (no metadata reads per
    array); cached per generation, which every change of the store renews."""
    import zarr

    return zarr.open_group(url, mode="r", use_consolidated=True)


@dataclass(frozen=True, eq=False)
class ChunkRef:
    """One chunk of one chromosome for some sample columns, as a task reads it."""

    url: str
    generation: str
    bin_size: int
    chrom: str
    chunk: int
    start: int  # first bin
    stop: int  # one past the last bin (within the array)
    columns: tuple[int, ...]
    digests: tuple[tuple[int, int], ...]  # per column; (0, 0): no coverage there
    samples: tuple[str, ...]
    summary: np.ndarray  # (len(columns), FIELDS)

    @property
    def n_bins(self) -> int:
        return self.stop - self.start

    def read(self, which=None, verify: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(methylated, coverage) as int64 (bins, k) of the columns ``which`` (indices into
        ``columns``; default all), each checked against its digest (unless ``verify`` is
        False: a task reading a column again)."""
        which = range(len(self.columns)) if which is None else which
        meth = np.zeros((self.n_bins, len(which)), np.int64)
        cov = np.zeros_like(meth)
        root = _root(self.url, self.generation)
        for k, w in enumerate(which):
            if self.digests[w] == (0, 0):
                continue  # no coverage: nothing written
            m = root[f"{self.chrom}/methylated"][self.start:self.stop, self.columns[w]]
            c = root[f"{self.chrom}/coverage"][self.start:self.stop, self.columns[w]]
            if verify and chunk_digest(m, c) != self.digests[w]:
                raise StoreError(f"{self.url}: the counts of sample {self.samples[w]} on {self.chrom}, chunk "
                                 f"{self.chunk} (bins {self.start:,} to {self.stop:,}) are missing or damaged (their "
                                 f"checksum does not match the store's index); ingest sample {self.samples[w]} again")
            meth[:, k], cov[:, k] = m, c
        return meth, cov

    def positions(self, rows=None) -> np.ndarray:
        """0-based bp starts of the chunk's rows (default: all of them)."""
        rows = np.arange(self.n_bins) if rows is None else np.asarray(rows, np.int64)
        return (self.start + rows) * self.bin_size


def chunk_digest(methylated: np.ndarray, coverage: np.ndarray) -> tuple[int, int]:
    """BLAKE2b-128 of a chunk column's counts up to its last covered bin, as two int64;
    (0, 0) for a chunk without coverage."""
    covered = np.flatnonzero(coverage)
    if covered.size == 0:
        return 0, 0
    end = covered[-1] + 1
    digest = hashlib.blake2b(digest_size=16)
    digest.update(np.ascontiguousarray(methylated[:end], dtype="<u4").tobytes())
    digest.update(np.ascontiguousarray(coverage[:end], dtype="<u4").tobytes())
    raw = digest.digest()
    return int.from_bytes(raw[:8], "little", signed=True), int.from_bytes(raw[8:], "little", signed=True)


def chunk_summary(start: int, methylated: np.ndarray, coverage: np.ndarray) -> np.ndarray:
    """The FIELDS of one chunk column whose first bin is ``start``."""
    out = np.zeros(len(FIELDS), np.int64)
    out[DIGEST] = chunk_digest(methylated, coverage)
    covered = np.flatnonzero(coverage)
    out[COVERED] = covered.size
    out[SUMS] = int(methylated.sum(dtype=np.int64)), int(coverage.sum(dtype=np.int64))
    for field, k in ((LAST, -1), (PREVIOUS, -2)):
        if covered.size >= -k:
            i = covered[k]
            out[field] = start + i, methylated[i], coverage[i]
    return out


# -- opening, locking, recovery ---------------------------------------------------------------
def open_store(path) -> CountsStore:
    """Open and check a counts store."""
    import zarr

    path = Location.of(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"{path}: no counts store here (no zarr.json)")
    attrs = dict(zarr.open_group(path.url, mode="r").attrs)
    if attrs.get("format") != COUNTS_FORMAT:
        raise StoreError(f"{path}: not a streambhmm counts store (format {attrs.get('format')!r})")
    version = attrs.get("format_version")
    if type(version) is not int:
        raise StoreError(f"{path}: format_version is not an integer ({json.dumps(version)[:100]})")
    if version > COUNTS_VERSION:
        raise StoreError(f"{path}: counts store format version {version} is newer than this streambhmm supports "
                         f"({COUNTS_VERSION}); upgrade streambhmm")
    if version < COUNTS_VERSION:
        raise StoreError(f"{path}: a version-{version} counts store (covered bins only, all samples in each chunk); "
                         f"this streambhmm reads version {COUNTS_VERSION}. Convert it with `streambhmm upgrade "
                         f"{path}` (it keeps every sample and its provenance), or ingest the files into a new store")
    return CountsStore(path=path, attrs=attrs)


def _stagings(path: Location) -> list[Location]:
    return path.parent.glob(f"{path.name}.ingest-*")


def needs_recovery(path) -> bool:
    """Whether a killed writer left work to finish: a store moved aside mid-swap, or a
    committed sample not yet in place."""
    path = Location.of(path)
    if not path.exists() and path.parent.glob(f"{path.name}.old-*"):
        return True
    return any((s / COMMIT).exists() for s in _stagings(path))


def recover(path) -> None:
    """Under the store's exclusive lock: finish or undo what killed writers left. A swap
    killed between its renames gets the old store back; a committed sample is put in place;
    a staging directory whose writer is gone (its owner lock is free) is removed;
    leftovers of swaps are removed."""
    path = Location.of(path)
    old = path.parent.glob(f"{path.name}.old-*")
    if not path.exists() and old:
        old[-1].rename(path)  # killed between the two renames: keep the old store
        old = old[:-1]
    for leftover in old + path.parent.glob(f"{path.name}.tmp-*"):
        leftover.rmtree()
    for staging in _stagings(path):
        if (staging / COMMIT).exists():
            _apply_commit(path, staging)
        elif not _owned(staging):
            staging.rmtree()


def _owned(staging: Location) -> bool:
    """Whether a live writer holds the staging directory (always assumed on URLs)."""
    if not staging.is_local:
        return True
    try:
        fd = os.open((staging / OWNER_LOCK).url, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no owner lock: an incomplete leftover
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _open_lock(lock_file: Location) -> int:
    try:
        return os.open(lock_file.url, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise StoreError(f"cannot open the lock file {lock_file} ({why}); remove it and retry") from None


@contextlib.contextmanager
def locked(path, shared: bool = False):
    """Lock ``path`` through a sibling lock file: exclusive for writers, ``shared`` for
    readers, so a store never changes under a command reading it (a commit waits for the
    readers, a reader waits for a commit). fsspec URLs get no lock: there, one writer per
    store at a time, and no readers meanwhile, is the user's to ensure.

    The lock file is opened without following a symlink and never truncated (a planted
    link cannot make us clobber its target)."""
    path = Location.of(path)
    if not path.is_local:
        recover(path)
        yield
        return
    path.parent.mkdir()
    fd = _open_lock(path.parent / f".{path.name}.lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        if not shared:
            recover(path)
        elif needs_recovery(path):
            fcntl.flock(fd, fcntl.LOCK_EX)  # a writer died mid-change: finish it first
            recover(path)
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def staging_path(path) -> Location:
    path = Location.of(path)
    return path.parent / f"{path.name}.tmp-{uuid.uuid4().hex[:12]}"


def replace_store(staged, path) -> None:
    """Move a complete staged store into place: two renames, then remove the old one."""
    staged, path = Location.of(staged), Location.of(path)
    if path.exists():
        old = path.parent / f"{path.name}.old-{uuid.uuid4().hex[:12]}"
        path.rename(old)
        staged.rename(path)
        old.rmtree()
    else:
        staged.rename(path)


def consolidate(root) -> None:
    """Consolidate the metadata (so plain open_zarr reads quietly and our tasks open arrays
    without reading their metadata)."""
    import zarr

    with warnings.catch_warnings():
        # consolidated metadata is a zarr-python extension for v3; we want it deliberately
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(Location.of(root).url)


def mark_changed(root) -> None:
    """After a change outside a commit (decode's posteriors): a new generation, and the
    metadata consolidated again."""
    import zarr

    group = zarr.open_group(Location.of(root).url, mode="a", use_consolidated=False)
    group.attrs.update({"generation": uuid.uuid4().hex})
    consolidate(root)


# -- writing a sample ---------------------------------------------------------------------
def _n_chunks(n_bins: int, chunk_size: int) -> int:
    return -(-n_bins // chunk_size)


def _create_chromosome(root, chrom: str, n_bins: int, names: list[str], bin_size: int, chunk_size: int):
    """An empty chromosome group with ``len(names)`` sample columns."""
    group = root.create_group(chrom, attributes={"chromosome": chrom, "bin_size": bin_size,
                                                 "counts_format": COUNTS_FORMAT})
    for name in ("methylated", "coverage"):
        group.create_array(name, shape=(n_bins, len(names)), chunks=(chunk_size, 1), dtype=COUNT_DTYPE,
                           fill_value=0, dimension_names=("position", "sample"), **_codecs())
    group.create_array("position", shape=(n_bins,), chunks=(chunk_size,), dtype="int64", fill_value=0,
                       dimension_names=("position",), attributes={"units": "bp", "description":
                                                                  "0-based start of the bin"})
    if n_bins:
        group["position"][:] = np.arange(n_bins, dtype=np.int64) * bin_size
    group.create_array("sample", shape=(len(names),), chunks=(SAMPLE_CHUNK,), dtype=str,
                       dimension_names=("sample",))
    if names:
        group["sample"][:] = np.array(names, dtype=object)
    index = group.create_group("index")
    index.create_array("summary", shape=(_n_chunks(n_bins, chunk_size), len(names), len(FIELDS)),
                       chunks=(INDEX_CHUNK, 1, len(FIELDS)), dtype="int64", fill_value=0,
                       dimension_names=("chunk", "sample", "field"), attributes={"fields": list(FIELDS)})
    return group


def _grow_chromosome(group, n_bins: int, names: list[str], bin_size: int, chunk_size: int) -> None:
    """Grow a chromosome group to ``n_bins`` bins and ``len(names)`` samples (never shrinks)."""
    old_bins, old_samples = group["methylated"].shape
    n_bins = max(n_bins, old_bins)
    for name in ("methylated", "coverage"):
        group[name].resize((n_bins, len(names)))
    if "state_posterior" in group:  # keep decode's posteriors on the same axis
        group["state_posterior"].resize((n_bins, group["state_posterior"].shape[1]))
    if n_bins > old_bins:
        group["position"].resize((n_bins,))
        group["position"][old_bins:] = np.arange(old_bins, n_bins, dtype=np.int64) * bin_size
    group["index/summary"].resize((_n_chunks(n_bins, chunk_size), len(names), len(FIELDS)))
    if len(names) != old_samples or list(group["sample"][:]) != names:
        group["sample"].resize((len(names),))
        group["sample"][:] = np.array(names, dtype=object)


class SampleWriter:
    """Stage one sample's counts beside ``store`` and commit them into its column.

    ``add`` takes binned rows (chromosome, bin indices, counts) in any order; counts of one
    chunk are summed in memory and flushed to the staging store when the rows move to another
    chunk (a chunk met again, e.g. in a replicate file, is read back and added to), so
    memory holds one chunk of one sample. ``commit`` puts the sample in place."""

    def __init__(self, store, bin_size: int, chunk_size: int):
        import zarr

        self.store = Location.of(store)
        self.bin_size, self.chunk_size = int(bin_size), int(chunk_size)
        self.path = self.store.parent / f"{self.store.name}.ingest-{uuid.uuid4().hex[:12]}"
        self.root = zarr.open_group(self.path.url, mode="w", zarr_format=3)
        self._owner = None
        if self.path.is_local:  # held while we live: recovery leaves a live staging alone
            self._owner = _open_lock(self.path / OWNER_LOCK)
            fcntl.flock(self._owner, fcntl.LOCK_EX)
        self.extent: dict[str, int] = {}  # bins up to the last covered one, per chromosome
        self.summaries: dict[str, dict[int, np.ndarray]] = {}
        self._key = None
        self._meth = np.zeros(self.chunk_size, np.int64)
        self._cov = np.zeros(self.chunk_size, np.int64)

    def add(self, chrom: str, bins: np.ndarray, methylated: np.ndarray, coverage: np.ndarray) -> None:
        bins = np.asarray(bins, np.int64)
        if bins.size == 0:
            return
        if bins.min() < 0:
            raise ValueError(f"{chrom}: negative bin {int(bins.min())}")
        if (np.diff(bins) < 0).any():
            order = np.argsort(bins, kind="stable")
            bins, methylated, coverage = bins[order], methylated[order], coverage[order]
        chunk_of = bins // self.chunk_size
        edges = np.flatnonzero(np.diff(chunk_of)) + 1
        for lo, hi in zip(np.r_[0, edges], np.r_[edges, bins.size]):
            self._select(chrom, int(chunk_of[lo]))
            b = bins[lo:hi] - self._key[1] * self.chunk_size
            starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
            self._meth[b[starts]] += np.add.reduceat(np.asarray(methylated[lo:hi], np.int64), starts)
            self._cov[b[starts]] += np.add.reduceat(np.asarray(coverage[lo:hi], np.int64), starts)

    def _select(self, chrom: str, chunk: int) -> None:
        if self._key == (chrom, chunk):
            return
        self.flush()
        self._key = (chrom, chunk)
        if chunk in self.summaries.get(chrom, {}):  # met before: add to what is staged
            array = self._arrays(chrom)
            rows = slice(chunk * self.chunk_size, (chunk + 1) * self.chunk_size)
            self._meth[:] = array[0][rows, 0]
            self._cov[:] = array[1][rows, 0]

    def _arrays(self, chrom: str):
        if chrom not in self.root:
            group = self.root.create_group(chrom)
            for name in ("methylated", "coverage"):
                group.create_array(name, shape=(0, 1), chunks=(self.chunk_size, 1), dtype=COUNT_DTYPE,
                                   fill_value=0, dimension_names=("position", "sample"), **_codecs())
        group = self.root[chrom]
        return group["methylated"], group["coverage"]

    def flush(self) -> None:
        """Write the chunk in memory to the staging store."""
        if self._key is None:
            return
        chrom, chunk = self._key
        self._key = None
        covered = np.flatnonzero(self._cov)
        start = chunk * self.chunk_size
        if covered.size and self._cov[covered].max() > COUNT_MAX:
            i = covered[np.argmax(self._cov[covered])]
            raise ValueError(f"{chrom}: the bin at {(start + i) * self.bin_size:,} sums coverage {self._cov[i]:,}, "
                             f"more than the store's uint32 holds ({COUNT_MAX:,}); use a smaller --bin-size")
        meth, cov = self._arrays(chrom)
        end = start + self.chunk_size
        if meth.shape[0] < end:
            meth.resize((end, 1))
            cov.resize((end, 1))
        meth[start:end, 0] = self._meth.astype(COUNT_DTYPE)
        cov[start:end, 0] = self._cov.astype(COUNT_DTYPE)
        self.summaries.setdefault(chrom, {})[chunk] = chunk_summary(start, self._meth, self._cov)
        if covered.size:
            self.extent[chrom] = max(self.extent.get(chrom, 0), start + int(covered[-1]) + 1)
        self._meth[:] = 0
        self._cov[:] = 0

    @property
    def covered_bins(self) -> int:
        """Covered bins staged."""
        return sum(int(s[COVERED]) for chunks in self.summaries.values() for s in chunks.values())

    def _record(self, sample: str, provenance: dict) -> dict:
        """Finish the staging store (shapes, chunk summaries) and describe the commit."""
        self.flush()
        chromosomes = {}
        for chrom, chunks in self.summaries.items():
            present = sorted(i for i, s in chunks.items() if s[COVERED] > 0)
            if not present:
                continue
            n_bins = self.extent[chrom]
            meth, cov = self._arrays(chrom)
            meth.resize((n_bins, 1))
            cov.resize((n_bins, 1))
            summary = np.zeros((_n_chunks(n_bins, self.chunk_size), 1, len(FIELDS)), np.int64)
            for i in present:
                summary[i, 0] = chunks[i]
            self.root[chrom].create_array("summary", data=summary, chunks=(INDEX_CHUNK, 1, len(FIELDS)))
            chromosomes[chrom] = {"n_bins": n_bins, "chunks": present}
        return {"sample": sample, "provenance": provenance, "bin_size": self.bin_size,
                "chunk_size": self.chunk_size, "chromosomes": chromosomes}

    def commit(self, sample: str, provenance: dict, lock: bool = True) -> bool:
        """Put the staged counts in place as ``sample`` (replacing a sample of that name);
        returns whether it replaced one. ``lock=False``: the caller holds the store's lock
        (or owns the store alone)."""
        record = self._record(sample, provenance)
        with locked(self.store) if lock else contextlib.nullcontext():
            replaced = _check_commit(self.store, record)
            (self.path / COMMIT).write_text(json.dumps(record))  # the commit point
            _apply_commit(self.store, self.path)
        self.close()
        return replaced

    def close(self) -> None:
        """Release the staging directory (removing what is left of it)."""
        self.path.rmtree()
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None

    def __enter__(self) -> "SampleWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_commit(store: Location, record: dict) -> bool:
    """Refuse a commit that does not fit the store; returns whether it replaces a sample."""
    if not (store / "zarr.json").exists():
        return False
    existing = open_store(store)
    for key in ("bin_size", "chunk_size"):
        if getattr(existing, key) != record[key]:
            raise StoreError(f"{store} uses {key.replace('_', ' ')} {getattr(existing, key)}; cannot add "
                             f"sample {record['sample']} written with {record[key]}")
    return record["sample"] in existing.attrs["samples"]


def _replace_file(source: Location, target: Location) -> None:
    target.parent.mkdir()
    if source.is_local:
        os.replace(source.url, target.url)
    else:
        target.unlink()
        source.rename(target)


def _apply_commit(store: Location, staging: Location) -> None:
    """Put a committed sample in place: grow the arrays, move its chunk files into its
    column (removing the column's chunks it no longer has), write its chunk summaries and
    the metadata. Idempotent: a commit killed half way is completed by running it again."""
    import zarr

    from .. import __version__

    record = json.loads((staging / COMMIT).read_text())
    bin_size, chunk_size, name = record["bin_size"], record["chunk_size"], record["sample"]
    if (store / "zarr.json").exists():
        root = zarr.open_group(store.url, mode="a", use_consolidated=False)  # the metadata as it is now
        attrs = dict(root.attrs)
    else:
        root = zarr.open_group(store.url, mode="w", zarr_format=3)
        attrs = {"format": COUNTS_FORMAT, "format_version": COUNTS_VERSION, "bin_size": bin_size,
                 "chunk_size": chunk_size, "samples": {}, "chromosomes": []}
    samples = dict(attrs["samples"])
    column = samples[name]["column"] if name in samples else len(samples)
    names = sorted(samples, key=lambda s: samples[s]["column"])
    if name not in samples:
        names.append(name)
    staged = zarr.open_group(staging.url, mode="r", use_consolidated=False)
    chromosomes = natural_sorted(set(attrs["chromosomes"]) | set(record["chromosomes"]))
    for chrom in chromosomes:
        new = record["chromosomes"].get(chrom)
        n_bins = new["n_bins"] if new else 0
        group = root[chrom] if chrom in root else _create_chromosome(root, chrom, n_bins, names, bin_size,
                                                                     chunk_size)
        _grow_chromosome(group, n_bins, names, bin_size, chunk_size)
        present = set(new["chunks"]) if new else set()
        for array in ("methylated", "coverage"):
            for i in range(_n_chunks(group[array].shape[0], chunk_size)):
                target = store / chrom / array / "c" / str(i) / str(column)
                source = staging / chrom / array / "c" / str(i) / "0"
                if i in present and source.exists():
                    _replace_file(source, target)
                elif i not in present and target.exists():
                    target.unlink()
        summary = np.zeros((group["index/summary"].shape[0], len(FIELDS)), np.int64)
        if new:
            rows = staged[f"{chrom}/summary"][:, 0, :]
            summary[:rows.shape[0]] = rows
        group["index/summary"][:, column, :] = summary
    samples[name] = {**record["provenance"], "column": column}
    root.attrs.update({**attrs, "format_version": COUNTS_VERSION, "samples": samples, "chromosomes": chromosomes,
                       "tool_version": __version__, "generation": uuid.uuid4().hex})
    consolidate(store)
    staging.rmtree()


# -- stores written from arrays (tests, benchmarks, the demo) ------------------------------------
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


# -- version 1 -------------------------------------------------------------------------------------
def upgrade_store(path, echo=lambda message: None) -> int:
    """Convert a version-1 counts store (covered bins only, all samples in each chunk) into
    version 2 in place: a new store is written beside it, sample by sample from the old
    chunks, and swapped in. Returns the number of samples."""
    import zarr

    path = Location.of(path)
    with locked(path):
        if not (path / "zarr.json").exists():
            raise StoreError(f"{path}: no counts store here (no zarr.json)")
        attrs = dict(zarr.open_group(path.url, mode="r").attrs)
        if attrs.get("format") != COUNTS_FORMAT:
            raise StoreError(f"{path}: not a streambhmm counts store (format {attrs.get('format')!r})")
        if attrs.get("format_version") != 1:
            raise StoreError(f"{path}: a version-{attrs.get('format_version')} counts store; `upgrade` converts "
                             f"version 1 only")
        names = list(attrs["samples"])
        staged = staging_path(path)
        writers = [SampleWriter(staged, attrs["bin_size"], attrs["chunk_size"]) for _ in names]
        try:
            for chrom in attrs["chromosomes"]:
                group = zarr.open_group(path.url, path=chrom, mode="r")
                position = group["position"]
                step = group["methylated"].chunks[0]
                for lo in range(0, position.shape[0], step):
                    bins = position[lo:lo + step] // attrs["bin_size"]
                    meth, cov = group["methylated"][lo:lo + step], group["coverage"][lo:lo + step]
                    for s, writer in enumerate(writers):
                        keep = cov[:, s] > 0
                        writer.add(chrom, bins[keep], meth[keep, s], cov[keep, s])
                echo(f"{chrom}: {position.shape[0]:,} bins")
            for name, writer in zip(names, writers):
                provenance = {k: v for k, v in attrs["samples"][name].items() if k != "column"}
                writer.commit(name, provenance, lock=False)
            replace_store(staged, path)
        finally:
            for writer in writers:
                writer.close()
            staged.rmtree()
    return len(names)
