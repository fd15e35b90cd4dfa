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
sample's chunks beside the store (``STORE.ingest-<id>``, one chunk in memory at a time). The
commit, under the store's exclusive lock:

1. checks everything that can refuse it: the store's bin and chunk sizes, that the staged
   files can be renamed into the store (one filesystem), and that the disk has room for what
   the commit writes (an upper bound: the chunk files are renamed, not copied). Positions
   were bounded when added (POSITION_MAX), so nothing after this point allocates by them;
2. writes ``COMMIT.json`` into the staging directory: the commit point;
3. creates the store's root if there is none (attributes complete from the start, appearing
   at once), puts the sample's chromosomes in place (arrays grown, chunk files renamed into
   its column, chunk summaries), gives the store's other chromosomes the sample's column (a
   new sample: metadata only) or clears it (a replaced sample);
4. rewrites the root's ``zarr.json`` once, with the new attributes and the consolidated
   metadata together: the sample becomes visible at once;
5. removes the staging directory, ``COMMIT.json`` with it.

Steps 3-5 can be repeated: a commit that stopped after its commit point (a kill, a full disk,
a failure) keeps its ``COMMIT.json``, and the next command that takes the store's lock,
reader or writer, completes it. A staging directory without ``COMMIT.json`` whose owner died
is removed. So a killed or failed ingest leaves every other sample's chunks and, until step 4,
the store's metadata exactly as they were; ingests of different samples can run concurrently
(only their commits take turns). Locks and staging directories go by the store's real path
(symbolic links resolved). On read-only media (nobody can write) readers take no lock.
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
import sys
import uuid
import warnings
from dataclasses import dataclass

import numpy as np

from .names import Spellings
from .storage import Location, beside, fault_point, put_in_place, replacing_dir, write_json

COUNTS_FORMAT = "streambhmm-counts"
COUNTS_VERSION = 2
DEFAULT_CHUNK_SIZE = 1_000_000
COUNT_DTYPE = np.uint32
COUNT_MAX = int(np.iinfo(COUNT_DTYPE).max)
INDEX_CHUNK = 4096  # chunk summaries per index chunk (of one sample)
SAMPLE_CHUNK = 1 << 16  # names per chunk of the sample coordinate
COMMIT = "COMMIT.json"
POSITION_MAX = 1 << 35  # bp (34 Gb), the largest position a store takes: above any chromosome assembled
COMMIT_MARGIN = 1 << 20  # bytes free beyond a commit's upper bound
METADATA_BYTES = 4096  # an upper bound of one zarr.json of a chromosome's
COUNTS = ("methylated", "coverage")
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

    def holds(self, chrom: str, excluding: str | None = None) -> bool:
        """Whether a sample other than ``excluding`` has coverage on ``chrom`` (from the index)."""
        columns = [self.column(s) for s in self.samples if s != excluding]
        return chrom in self.chromosomes and bool((self.summary(chrom, columns)[:, :, COVERED] > 0).any())

    def spellings(self, sample: str | None = None) -> Spellings:
        """The store's chromosome names, to refuse another spelling of one (chr21 beside 21)
        that holds data of a sample other than ``sample``."""
        return Spellings(self.chromosomes, f"the store {self.path}", lambda chrom: self.holds(chrom, sample))

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
    path = Location.of(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"{path}: no counts store here (no zarr.json)")
    attrs = json.loads((path / "zarr.json").read_text()).get("attributes", {})  # quicker than zarr's parse of all
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
    path = Location.of(path).real()
    if not path.exists() and path.parent.glob(f"{path.name}.old-*"):
        return True
    return any((s / COMMIT).exists() for s in _stagings(path))


def recover(path) -> None:
    """Under the store's exclusive lock: finish or undo what killed writers left. A swap
    killed between its renames gets the old store back; a committed sample is put in place;
    a staging directory whose writer is gone (its owner lock is free) is removed;
    leftovers of swaps are removed."""
    path = Location.of(path).real()
    old = path.parent.glob(f"{path.name}.old-*")
    if not path.exists() and old:
        old[-1].rename(path)  # killed between the two renames: keep the old store
        old = old[:-1]
    for leftover in old + path.parent.glob(f"{path.name}.tmp-*"):
        leftover.rmtree()
    for staging in _stagings(path):
        if (staging / COMMIT).exists():
            try:
                _apply_commit(path, staging)
            except Exception as exc:
                raise StoreError(f"{path}: a commit stopped after its commit point ({staging.name}) could not be "
                                 f"completed: {_why(exc)}. Once that is fixed, any command on the store completes "
                                 f"it") from exc
        elif not _owned(staging):
            staging.rmtree()


def _why(exc: BaseException) -> str:
    """An error as a short phrase: an OSError's reason and file, else its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror.lower()}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _owned(staging: Location) -> bool:
    """Whether a live writer holds the staging directory (always assumed on URLs)."""
    if not staging.is_local:
        return True
    try:
        fd = os.open((staging / OWNER_LOCK).url, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no owner lock: an incomplete leftover
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def _read_only(directory: Location) -> bool:
    """Whether nobody can write in ``directory``: its filesystem is mounted read-only, or its
    mode lets no one write."""
    try:
        return bool(os.statvfs(directory.url).f_flag & os.ST_RDONLY) or not os.stat(directory.url).st_mode & 0o222
    except OSError:
        return False


def _open_lock(lock_file: Location, shared: bool = False) -> int | None:
    """The lock file, opened without following a symlink and never truncated (a planted link
    cannot make us clobber its target). A shared lock needs no write access (flock works on
    a file opened read-only); None: a reader on read-only media, where there is nothing to
    exclude."""
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        if shared:
            with contextlib.suppress(FileNotFoundError):
                return os.open(lock_file.url, flags | os.O_RDONLY)
            return os.open(lock_file.url, flags | os.O_RDONLY | os.O_CREAT, 0o666)  # the umask decides
        return os.open(lock_file.url, flags | os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        if shared and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and _read_only(lock_file.parent):
            return None
        raise StoreError(_lock_problem(lock_file, exc, shared)) from None


def _lock_problem(lock_file: Location, exc: OSError, shared: bool) -> str:
    directory, reason = lock_file.parent, (exc.strerror or str(exc)).lower()
    if exc.errno == errno.ELOOP:
        return (f"the lock file {lock_file} is a symbolic link, which streambhmm never creates (it may have been "
                f"planted); remove the link")
    if exc.errno == errno.EROFS:
        return f"{directory} is on a read-only file system: a store there can be read, not written"
    if exc.errno in (errno.EACCES, errno.EPERM) and shared and os.path.lexists(lock_file.url):
        return f"cannot read the lock file {lock_file} ({reason}); its owner can let others read it (chmod a+r)"
    if exc.errno in (errno.EACCES, errno.EPERM) and shared:
        return (f"cannot create the lock file {lock_file} ({reason}); someone who may write in {directory} can "
                f"create it (any streambhmm command on the store does), or make the directory read-only")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write in {directory} (opening the lock file {lock_file.name}: {reason})"
    return f"cannot open the lock file {lock_file} ({reason})"


def _take_lock(fd: int, operation: int, path: Location) -> None:
    """flock, saying on stderr what the command waits for when another holds the lock. The
    wait is as long as the holder's run, which is bounded itself: every command's waits on
    Dask and on a scheduler are (io/tasks.py, distributed/cluster.py)."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        holder = "writing" if operation == fcntl.LOCK_SH else "reading or writing"
        print(f"waiting for the lock of {path}: another streambhmm command is {holder} it", file=sys.stderr,
              flush=True)
    fcntl.flock(fd, operation)


@contextlib.contextmanager
def locked(path, shared: bool = False):
    """Lock ``path`` through a sibling lock file: exclusive for writers, ``shared`` for
    readers, so a store never changes under a command reading it (a commit waits for the
    readers, a reader waits for a commit). The lock goes by the real path: however a store
    is reached (a symbolic link to it or to a directory above it), it is one lock. fsspec
    URLs get no lock: there, one writer per store at a time, and no readers meanwhile, is
    the user's to ensure."""
    path = Location.of(path)
    if not path.is_local:
        recover(path)
        yield
        return
    path = path.real()
    path.parent.mkdir()  # no error where it exists, read-only or not
    fd = _open_lock(path.parent / f".{path.name}.lock", shared)
    if fd is None:
        if needs_recovery(path):
            raise StoreError(f"{path}: a commit stopped after its commit point awaits completion, which needs to "
                             f"write; run any streambhmm command on the store where it is writable")
        yield  # read-only media: nobody can change the store
        return
    try:
        _take_lock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX, path)
        if not shared:
            recover(path)
        elif needs_recovery(path):
            _take_lock(fd, fcntl.LOCK_EX, path)  # a writer died mid-change: finish it first
            recover(path)
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def staging_path(path) -> Location:
    """A new staging name beside the store (by its real path): ``STORE.tmp-<hex>``."""
    return beside(Location.of(path).real())


def replace_store(staged, path) -> None:
    """Move a complete staged store into place: two renames, then remove the old one. A
    symbolic link at ``path`` stays; what it points to is replaced."""
    put_in_place(staged, Location.of(path).real(), replace=True)


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


DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EXDEV)


def _staging_errors(method):
    """A SampleWriter method whose disk errors (a full disk, a read-only filesystem, no
    permission) become a StoreError: they happen before the commit point, so the store is
    unchanged (and the staging directory is removed when the writer closes)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except OSError as exc:
            if exc.errno not in DISK_ERRNOS:
                raise
            raise StoreError(f"cannot stage counts for {self.store} in {self.path.parent}: "
                             f"{(exc.strerror or str(exc)).lower()}; the store is unchanged") from None
    return wrapper


class SampleWriter:
    """Stage one sample's counts beside ``store`` and commit them into its column.

    ``add`` takes binned rows (chromosome, bin indices, counts) in any order; counts of one
    chunk are summed in memory and flushed to the staging store when the rows move to another
    chunk (a chunk met again, e.g. in a replicate file, is read back and added to), so
    memory holds one chunk of one sample. ``commit`` puts the sample in place."""

    def __init__(self, store, bin_size: int, chunk_size: int):
        self.store = Location.of(store)
        real = self.store.real()  # staged beside the store itself, however it is reached
        self.bin_size, self.chunk_size = int(bin_size), int(chunk_size)
        self.path = real.parent / f"{real.name}.ingest-{uuid.uuid4().hex[:12]}"
        self._owner = None
        self.extent: dict[str, int] = {}  # bins up to the last covered one, per chromosome
        self.summaries: dict[str, dict[int, np.ndarray]] = {}
        self._key = None
        self._meth = np.zeros(self.chunk_size, np.int64)
        self._cov = np.zeros(self.chunk_size, np.int64)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    @_staging_errors
    def _start(self) -> None:
        import zarr

        self.root = zarr.open_group(self.path.url, mode="w", zarr_format=3)
        if self.path.is_local:  # held while we live: recovery leaves a live staging alone
            self._owner = _open_lock(self.path / OWNER_LOCK)
            fcntl.flock(self._owner, fcntl.LOCK_EX)
            _check_one_filesystem(self.store.real(), self.path, {})

    @_staging_errors
    def add(self, chrom: str, bins: np.ndarray, methylated: np.ndarray, coverage: np.ndarray) -> None:
        bins = np.asarray(bins, np.int64)
        if bins.size == 0:
            return
        if bins.min() < 0:
            raise ValueError(f"{chrom}: negative bin {int(bins.min())}")
        if bins.max() > POSITION_MAX // self.bin_size:
            raise ValueError(f"{chrom}: position {int(bins.max()) * self.bin_size:,} is beyond {POSITION_MAX:,}, the "
                             f"largest a counts store takes")
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
            for name in COUNTS:
                group.create_array(name, shape=(0, 1), chunks=(self.chunk_size, 1), dtype=COUNT_DTYPE,
                                   fill_value=0, dimension_names=("position", "sample"), **_codecs())
        group = self.root[chrom]
        return group["methylated"], group["coverage"]

    @_staging_errors
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

    @_staging_errors
    def _record(self, sample: str, provenance: dict) -> dict:
        """Finish the staging store (shapes, chunk summaries) and describe the commit: per
        chromosome its bins, its covered chunks and, per array, the chunks staged as files
        (an all-zero chunk is not written)."""
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
            files = {array: [i for i in present if (self.path / chrom / array / "c" / str(i) / "0").exists()]
                     for array in COUNTS}
            chromosomes[chrom] = {"n_bins": n_bins, "chunks": present, "files": files}
        return {"sample": sample, "provenance": provenance, "bin_size": self.bin_size,
                "chunk_size": self.chunk_size, "chromosomes": chromosomes}

    def commit(self, sample: str, provenance: dict, lock: bool = True) -> bool:
        """Put the staged counts in place as ``sample`` (replacing a sample of that name);
        returns whether it replaced one. ``lock=False``: the caller holds the store's lock
        (or owns the store alone)."""
        record = self._record(sample, provenance)
        fault_point("staged")
        store = self.store.real()
        with locked(store) if lock else contextlib.nullcontext():
            replaced = self._prepare(store, record)
            fault_point("commit")
            try:
                _apply_commit(store, self.path)
            except Exception as exc:
                raise StoreError(f"sample {sample} was committed into {self.store} but is not yet in place: "
                                 f"{_why(exc)}. Once that is fixed, any command on the store completes the "
                                 f"commit") from exc
        self.close()
        return replaced

    @_staging_errors
    def _prepare(self, store: Location, record: dict) -> bool:
        """Steps 1-2 of a commit (module docstring): everything that may refuse it, then the
        commit point. Returns whether the sample replaces one."""
        replaced = _check_commit(store, record)
        for chrom, entry in record["chromosomes"].items():  # the axis as it is: positions are written from there
            position = store / chrom / "position" / "zarr.json"
            entry["store_bins"] = json.loads(position.read_text())["shape"][0] if position.exists() else 0
        if store.is_local:
            _check_one_filesystem(store, self.path, record)
            _check_space(store, record)
        (self.path / COMMIT).write_text(json.dumps(record))  # the commit point
        return replaced

    def close(self) -> None:
        """Release the staging directory: removed, unless it holds a commit not yet complete
        (which the next command on the store completes)."""
        if not (self.path / COMMIT).exists():
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
        if store.children():
            raise StoreError(f"{store} exists and is not a counts store (it has files but no zarr.json); give a new "
                             f"path or an existing counts store")
        return False
    existing = open_store(store)
    for key in ("bin_size", "chunk_size"):
        if getattr(existing, key) != record[key]:
            raise StoreError(f"{store} uses {key.replace('_', ' ')} {getattr(existing, key)}; cannot add "
                             f"sample {record['sample']} written with {record[key]}")
    spellings = existing.spellings(record["sample"])  # again: another ingest may have committed meanwhile
    for chrom in record["chromosomes"]:
        spellings.add(chrom, f"sample {record['sample']}")
    return record["sample"] in existing.attrs["samples"]


def _check_one_filesystem(store: Location, staging: Location, record: dict) -> None:
    """A commit renames the staged files into the store: refuse a store (or a chromosome in
    it) on another mount than the staging directory beside it."""
    points = _mount_points()
    mount = _mount(staging.url, points)
    places = [store if store.exists() else store.parent]
    places += [store / chrom for chrom in record.get("chromosomes", {}) if (store / chrom).exists()]
    for place in places:
        if _mount(place.url, points) != mount:
            raise StoreError(f"{place} is on another filesystem or mount than {staging.parent}, where samples are "
                             f"staged: a commit renames the staged files into the store, which needs one mount (is "
                             f"{place} a mount point, or a link to another disk?); mount or link the directory that "
                             f"holds the store instead; the store is unchanged")


def _mount_points() -> list[str]:
    """Linux's mount points (/proc/self/mountinfo; none elsewhere)."""
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), line.split()[4]) for line in fh]
    return []


def _mount(path: str, points: list[str]) -> tuple[int, str]:
    """The filesystem (device) and the mount (its mount point) of ``path``: a rename between
    two mounts fails even when they show one filesystem (bind mounts)."""
    real = os.path.realpath(path)
    inside = [p for p in points if real == p or real.startswith(p.rstrip("/") + "/")]
    return os.stat(real).st_dev, max(inside, key=len, default="")


def _check_space(store: Location, record: dict) -> None:
    """Refuse a commit the disk has no room for, before its commit point."""
    root = store / "zarr.json"
    document = json.loads(root.read_text()) if root.exists() else {}
    fs = os.statvfs((store if store.exists() else store.parent).url)
    n_bytes, n_files = _commit_writes(document, record)
    need, free = n_bytes + n_files * fs.f_bsize + COMMIT_MARGIN, fs.f_bavail * fs.f_frsize
    if need > free or (fs.f_files and n_files > fs.f_favail):
        raise StoreError(f"not enough free space to commit sample {record['sample']} into {store}: the commit writes "
                         f"up to {need / 2**20:,.1f} MiB in up to {n_files:,} new files, and {free / 2**20:,.1f} MiB "
                         f"({fs.f_favail:,} files) are free; the store is unchanged")


def _commit_writes(document: dict, record: dict) -> tuple[int, int]:
    """An upper bound of the bytes a commit writes and of the files (and directories) it
    creates, given the store's root document (empty for a new store). The sample's chunk
    files are renamed into the store, not written."""
    attrs, chunk_size = document.get("attributes") or {}, record["chunk_size"]
    names = [*attrs.get("samples", {}), record["sample"]]
    names_bytes = sum(len(name.encode()) + 8 for name in names)
    n_bytes = 2 * len(json.dumps(document)) + len(record["chromosomes"]) * 8 * METADATA_BYTES
    n_files = 4
    for entry in record["chromosomes"].values():
        have, n_bins = entry.get("store_bins", 0), max(entry["n_bins"], entry.get("store_bins", 0))
        written = n_bins - have // chunk_size * chunk_size  # positions, from the start of the last chunk
        n_index = _n_chunks(_n_chunks(n_bins, chunk_size), INDEX_CHUNK)
        n_bytes += 8 * written + 8 * len(FIELDS) * _n_chunks(n_bins, chunk_size) + 10 * METADATA_BYTES + names_bytes
        n_files += 24 + 2 * len(entry["chunks"]) + 2 * _n_chunks(written, chunk_size) + 2 * n_index
    if record["sample"] not in attrs.get("samples", {}):  # every other chromosome gets a column
        n_bytes += len(set(attrs.get("chromosomes", [])) - set(record["chromosomes"])) * (METADATA_BYTES + names_bytes)
    return n_bytes, n_files


def _replace_file(source: Location, target: Location) -> None:
    target.parent.mkdir()
    if source.is_local:
        os.replace(source.url, target.url)
    else:
        target.unlink()
        source.rename(target)


def _inline(nodes: dict) -> dict:
    """Consolidated metadata as zarr writes it into a group's zarr.json."""
    return {"kind": "inline", "must_understand": False, "metadata": nodes}


def _new_attributes(record: dict) -> dict:
    return {"format": COUNTS_FORMAT, "format_version": COUNTS_VERSION, "bin_size": record["bin_size"],
            "chunk_size": record["chunk_size"], "samples": {}, "chromosomes": []}


def _create_root(store: Location, record: dict) -> None:
    """A new store's root, its attributes complete (no samples yet), appearing at once:
    locally a directory renamed into place."""
    document = {"attributes": _new_attributes(record), "zarr_format": 3, "consolidated_metadata": _inline({}),
                "node_type": "group"}
    if not store.is_local:
        write_json(store / "zarr.json", document)
        return
    with replacing_dir(store, staged=staging_path(store)) as new:  # replaces an empty directory
        write_json(new / "zarr.json", document)


def _apply_commit(store: Location, staging: Location) -> None:
    """Steps 3-5 of a commit (module docstring): put the sample committed in ``staging`` in
    place. Idempotent: a commit stopped half way is completed by running it again."""
    import zarr

    from .. import __version__

    record = json.loads((staging / COMMIT).read_text())
    if not (store / "zarr.json").exists():
        _create_root(store, record)
        fault_point("root")
    document = json.loads((store / "zarr.json").read_text())
    if document.get("consolidated_metadata") is None:  # a root an earlier streambhmm left half made
        consolidate(store)
        document = json.loads((store / "zarr.json").read_text())
    attrs = document.get("attributes") or _new_attributes(record)
    nodes = dict(document["consolidated_metadata"]["metadata"])
    samples, name, new = dict(attrs["samples"]), record["sample"], record["chromosomes"]
    column = samples[name]["column"] if name in samples else len(samples)
    names = sorted(samples, key=lambda s: samples[s]["column"]) + ([] if name in samples else [name])
    staged = zarr.open_group(staging.url, mode="r", use_consolidated=False)
    nodes = {k: v for k, v in nodes.items() if k.split("/")[0] not in new}  # the sample's chromosomes: anew
    for chrom in natural_sorted(new):
        group = _put_chromosome(store, staging, staged, chrom, new[chrom], column, names, record)
        nodes.update(_chromosome_nodes(store, group, chrom))
        fault_point("chromosome")
    others = [chrom for chrom in attrs["chromosomes"] if chrom not in new]
    if name in samples:
        for chrom in others:
            _clear_column(store, chrom, nodes, column, record["chunk_size"])
    elif others:
        reference = natural_sorted(new)[0] if new else None  # the commit wrote the sample names there
        names_chunks = [(store / reference / "sample" / "c" / str(k)).read_bytes()
                        for k in range(_n_chunks(len(names), SAMPLE_CHUNK))] if reference else []
        for chrom in others:
            _add_column(store, chrom, nodes, names, reference, names_chunks)
    samples[name] = {**record["provenance"], "column": column}
    attrs = {**attrs, "format_version": COUNTS_VERSION, "samples": samples, "tool_version": __version__,
             "chromosomes": natural_sorted(set(attrs["chromosomes"]) | set(new)), "generation": uuid.uuid4().hex}
    (store / "zarr.json").write_text(json.dumps({  # the sample becomes visible, at once
        "attributes": attrs, "zarr_format": 3, "consolidated_metadata": _inline(nodes), "node_type": "group"}))
    fault_point("visible")
    staging.rmtree()


def _chromosome(store: Location, chrom: str, names: list[str], bin_size: int, chunk_size: int):
    """A chromosome group: created empty (no bins), or completed where an attempt stopped."""
    import zarr

    group = zarr.open_group(store.url, path=chrom, mode="a", zarr_format=3, use_consolidated=False, attributes={
        "chromosome": chrom, "bin_size": bin_size, "counts_format": COUNTS_FORMAT})
    for name in COUNTS:
        if name not in group:
            group.create_array(name, shape=(0, len(names)), chunks=(chunk_size, 1), dtype=COUNT_DTYPE, fill_value=0,
                               dimension_names=("position", "sample"), **_codecs())
    if "position" not in group:
        group.create_array("position", shape=(0,), chunks=(chunk_size,), dtype="int64", fill_value=0,
                           dimension_names=("position",),
                           attributes={"units": "bp", "description": "0-based start of the bin"})
    if "sample" not in group:
        group.create_array("sample", shape=(0,), chunks=(SAMPLE_CHUNK,), dtype=str, dimension_names=("sample",))
    index = group.require_group("index")
    if "summary" not in index:
        index.create_array("summary", shape=(0, len(names), len(FIELDS)), chunks=(INDEX_CHUNK, 1, len(FIELDS)),
                           dtype="int64", fill_value=0, dimension_names=("chunk", "sample", "field"),
                           attributes={"fields": list(FIELDS)})
    return group


def _grow_chromosome(group, entry: dict, names: list[str], bin_size: int, chunk_size: int) -> None:
    """Grow a chromosome group to the commit's bins and to ``len(names)`` samples (it never
    shrinks). The positions are written from the axis' end before the commit, a chunk at a
    time (memory holds one chunk)."""
    n_bins = max(entry["n_bins"], group["methylated"].shape[0])
    for name in COUNTS:
        group[name].resize((n_bins, len(names)))
    if "state_posterior" in group:  # keep decode's posteriors on the same axis
        group["state_posterior"].resize((n_bins, group["state_posterior"].shape[1]))
    position = group["position"]
    lo = entry.get("store_bins", position.shape[0])
    if position.shape[0] < n_bins:
        position.resize((n_bins,))
    while lo < n_bins:
        hi = min(n_bins, (lo // chunk_size + 1) * chunk_size)
        position[lo:hi] = np.arange(lo, hi, dtype=np.int64) * bin_size
        lo = hi
    group["index/summary"].resize((_n_chunks(n_bins, chunk_size), len(names), len(FIELDS)))
    if group["sample"].shape[0] != len(names) or list(group["sample"][:]) != names:
        group["sample"].resize((len(names),))
        group["sample"][:] = np.array(names, dtype=object)


def _put_chromosome(store: Location, staging: Location, staged, chrom: str, entry: dict, column: int,
                    names: list[str], record: dict):
    """One chromosome of a committed sample in place: the arrays grown, its staged chunk
    files renamed into its column (the column's other chunks removed), its chunk summaries.
    Returns the chromosome's group."""
    bin_size, chunk_size = record["bin_size"], record["chunk_size"]
    group = _chromosome(store, chrom, names, bin_size, chunk_size)
    _grow_chromosome(group, entry, names, bin_size, chunk_size)
    for array in COUNTS:
        files = set(entry.get("files", {}).get(array, entry["chunks"]))
        for i in range(_n_chunks(group[array].shape[0], chunk_size)):
            target = store / chrom / array / "c" / str(i) / str(column)
            source = staging / chrom / array / "c" / str(i) / "0"
            if i not in files:
                target.unlink()
            elif source.exists():  # else renamed by an earlier attempt
                _replace_file(source, target)
                fault_point("moved")
    summary = np.zeros((group["index/summary"].shape[0], len(FIELDS)), np.int64)
    rows = staged[f"{chrom}/summary"][:, 0, :]
    summary[:rows.shape[0]] = rows
    group["index/summary"][:, column, :] = summary
    return group


def _chromosome_nodes(store: Location, group, chrom: str) -> dict:
    """A chromosome's entries of the consolidated metadata (each node's zarr.json; a group's
    with its own, empty, consolidated metadata, as zarr writes them)."""
    paths = [chrom] + [f"{chrom}/{name}" for name, _ in
                       group.members(max_depth=None, use_consolidated_for_children=False)]
    nodes = {}
    for path in paths:
        node = json.loads((store / path / "zarr.json").read_text())
        if node["node_type"] == "group":
            node["consolidated_metadata"] = _inline({})
        nodes[path] = node
    return nodes


def _add_column(store: Location, chrom: str, nodes: dict, names: list[str], reference: str | None,
                names_chunks: list[bytes]) -> None:
    """Give a new sample its column in a chromosome where it has no counts: the arrays'
    metadata only (a column without chunks reads as zeros), and the sample names, encoded
    as in the chromosome ``reference`` (``names_chunks``, which the commit wrote; None: a
    sample without counts anywhere, whose names zarr encodes here).

    These files are written in place, not through a temporary file: nothing reads them
    before the commit is visible (readers go by the consolidated metadata of the root), and
    a commit completed again writes them again, from the consolidated metadata."""
    for array, axis in (("methylated", 1), ("coverage", 1), ("index/summary", 1), ("sample", 0)):
        node = nodes[f"{chrom}/{array}"]
        node["shape"][axis] = len(names)
        _write_in_place(store / chrom / array / "zarr.json", json.dumps(node).encode())

    def encoding(path: str) -> dict:
        return {k: v for k, v in nodes[path].items() if k != "shape"}

    if reference is not None and encoding(f"{chrom}/sample") == encoding(f"{reference}/sample"):
        for k, data in enumerate(names_chunks):
            _write_in_place(store / chrom / "sample" / "c" / str(k), data)
    else:  # written with other codecs (by another zarr version)
        import zarr

        zarr.open_array(store.url, path=f"{chrom}/sample", mode="r+")[:] = np.array(names, dtype=object)


def _write_in_place(path: Location, data: bytes) -> None:
    if not path.is_local:
        path.write_bytes(data)
        return
    os.makedirs(os.path.dirname(path.url), exist_ok=True)
    with open(path.url, "wb") as fh:
        fh.write(data)


def _clear_column(store: Location, chrom: str, nodes: dict, column: int, chunk_size: int) -> None:
    """Remove a replaced sample's chunks (counts and summaries) from a chromosome where its
    new counts have none: a column without chunks reads as zeros."""
    n_chunks = _n_chunks(nodes[f"{chrom}/methylated"]["shape"][0], chunk_size)
    for array in COUNTS:
        for i in range(n_chunks):
            (store / chrom / array / "c" / str(i) / str(column)).unlink()
    for k in range(_n_chunks(n_chunks, INDEX_CHUNK)):
        (store / chrom / "index" / "summary" / "c" / str(k) / str(column) / "0").unlink()


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
                writer.path.rmtree()  # a commit into the discarded new store goes with it
            staged.rmtree()
    return len(names)
