"""Staging and committing one sample (SampleWriter): its chunks staged beside the store, and
what may refuse a commit checked before its commit point (the store, one mount, free space)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import re

import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..outputs import interruptions_held, removed_while_it_returns
from ..storage import Location, beside, fault_point
from .chunks import chunk_summary
from .commit import complete_commit, nodes_by_chromosome
from .locking import locked, open_lock
from .nodes import read_chunk, read_document, release_fill_chunks, write_chunk, write_document
from .reader import open_store
from .schema import (COMMIT, COMMIT_MARGIN, COUNT_MAX, COUNTS, COVERED, FIELDS, INDEX_CHUNK, METADATA_BYTES,
                     NoRoomError, OWNER_LOCK, POSITION, POSITION_MAX, StoreError, counts_document, group_document, n_chunks,
                     summary_document)


# what a commit writes in a chromosome where the new sample has no counts (commit._add_column)
NEW_COLUMN_PATHS = ("methylated", "coverage", "index", "index/summary", "sample", "sample/c", "sample/c/0",
                    "methylated/zarr.json", "coverage/zarr.json", "index/summary/zarr.json")
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
            unchanged = "the store is unchanged" if self.store.exists() else "nothing was written"
            reason = (exc.strerror or str(exc)).lower()
            raise NoRoomError(f"cannot stage counts for {self.store} in {self.path.parent}: {reason}; {unchanged}",
                              reason) from None
    return wrapper


class _ChromosomeBins:
    """One chromosome's counts per bin, in memory (SampleWriter, for rows not sorted by position)."""

    def __init__(self, chrom: str):
        self.chrom = chrom
        self.methylated = np.zeros(0, np.int64)
        self.coverage = np.zeros(0, np.int64)

    def add(self, bins: np.ndarray, methylated, coverage) -> None:
        need = int(bins.max()) + 1
        if need > self.coverage.size:
            size = max(need, 2 * self.coverage.size)
            self.methylated = np.concatenate([self.methylated, np.zeros(size - self.methylated.size, np.int64)])
            self.coverage = np.concatenate([self.coverage, np.zeros(size - self.coverage.size, np.int64)])
        np.add.at(self.methylated, bins, np.asarray(methylated, np.int64))
        np.add.at(self.coverage, bins, np.asarray(coverage, np.int64))


@functools.lru_cache(maxsize=4)
def _staged_chromosome(chunk_size: int) -> dict[str, dict]:
    """The documents of an empty staged chromosome (one sample's counts and the summaries of
    its chunks), by path inside it ("": its group). Read them, do not change them."""
    return {"": group_document(), **{name: counts_document(0, 1, chunk_size) for name in COUNTS},
            "summary": summary_document(0, 1, dimension_names=None)}


class SampleWriter:
    """Stage one sample's counts beside ``store`` and commit them into its column.

    ``add`` takes binned rows (chromosome, bin indices, counts) in any order; counts of one
    chunk are summed in memory and flushed to the staging store when the rows move to another
    chunk (a chunk met again, e.g. in a replicate file, is read back and added to), so
    memory holds one chunk of one sample. Rows that go back to an earlier chunk of the
    chromosome they are in (a file not sorted by position) are summed in memory for the rest
    of that chromosome, then written chunk by chunk: memory then holds the chromosome's bins
    of one sample. ``commit`` puts the sample in place."""

    def __init__(self, store, bin_size: int, chunk_size: int):
        self.store = Location.of(store)
        real = self.store.real()  # staged beside the store itself, however it is reached
        self.bin_size, self.chunk_size = int(bin_size), int(chunk_size)
        self.path = beside(real, "ingest")
        self._owner = None
        self.extent: dict[str, int] = {}  # bins up to the last covered one, per chromosome
        self.summaries: dict[str, dict[int, np.ndarray]] = {}
        self._key = None
        self._meth = self._cov = None  # the chunk in memory (made at the first row)
        self._touched = 0  # rows of the chunk in memory up to the last one added to (the rest are zero)
        # chunks met again (a sample of several files): summarized once, at flush, not at each write
        self._resummarize: set[tuple[str, int]] = set()
        self._unsorted: _ChromosomeBins | None = None  # an unsorted chromosome's bins, summed in memory
        self._nodes = _staged_chromosome(self.chunk_size)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    @_staging_errors
    def _start(self) -> None:
        if not self.path.is_local:
            write_document(self.path, self.path, group_document())  # the root's document
            return
        # The owner lock is held while we live, so recovery (another writer's commit) leaves a
        # live staging alone. It is taken in a hidden directory that recovery never looks at,
        # which then gets the staging name: no staging is ever seen without its lock held.
        starting = self.path.parent / f".{self.path.name}"
        starting.mkdir()
        try:
            self._owner = open_lock(starting / OWNER_LOCK)
            fcntl.flock(self._owner, fcntl.LOCK_EX)
            starting.rename(self.path)
        except BaseException:
            starting.rmtree()
            raise
        write_document(self.path, self.path, group_document())  # the root's document
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
        if self._unsorted is not None and self._unsorted.chrom != chrom:
            self._write_unsorted()
        if self._unsorted is None and self._key is not None and self._key[0] == chrom \
                and int(bins.min()) // self.chunk_size < self._key[1]:
            self._unsorted = _ChromosomeBins(chrom)  # back to an earlier chunk: the rest of it in memory
        if self._unsorted is not None:
            self._unsorted.add(bins, methylated, coverage)
            return
        self._add_sorted(chrom, bins, methylated, coverage)

    def _add_sorted(self, chrom: str, bins: np.ndarray, methylated, coverage) -> None:
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
            self._touched = max(self._touched, int(b[-1]) + 1)

    def _write_unsorted(self) -> None:
        """The unsorted chromosome's bins, added chunk by chunk (each chunk met once)."""
        summed, self._unsorted = self._unsorted, None
        bins = np.flatnonzero(summed.coverage)
        if bins.size:
            self._add_sorted(summed.chrom, bins, summed.methylated[bins], summed.coverage[bins])

    def _select(self, chrom: str, chunk: int) -> None:
        if self._key == (chrom, chunk):
            return
        self._write_chunk()
        self._key = (chrom, chunk)
        if self._meth is None:
            self._meth, self._cov = np.zeros(self.chunk_size, np.int64), np.zeros(self.chunk_size, np.int64)
        if chunk in self.summaries.get(chrom, {}):  # met before: add to what is staged
            for name, held in zip(COUNTS, (self._meth, self._cov)):
                held[:] = read_chunk(self.path / chrom / name, self._nodes[name], (chunk, 0))[:, 0]
            self._touched = self.chunk_size
            self._resummarize.add(self._key)

    @_staging_errors
    def flush(self) -> None:
        """Write what is in memory (a chunk, an unsorted chromosome) to the staging store."""
        if self._unsorted is not None:
            self._write_unsorted()
        self._write_chunk()
        for chrom, chunk in sorted(self._resummarize):  # as written: whole chunks, read back
            counts = [read_chunk(self.path / chrom / name, self._nodes[name], (chunk, 0))[:, 0] for name in COUNTS]
            self.summaries[chrom][chunk] = chunk_summary(chunk * self.chunk_size, *counts)
        self._resummarize.clear()
        # the chunk's buffers let go until written to again: a batch's staged samples wait for
        # their turns to commit, 16 MB each at the default chunk size, and as much in the encoder's
        self._meth = self._cov = None
        release_fill_chunks()

    def _write_chunk(self) -> None:
        if self._key is None:
            return
        chrom, chunk = self._key
        self._key = None
        meth, cov = self._meth[:self._touched], self._cov[:self._touched]
        start = chunk * self.chunk_size
        top = int(cov.max(initial=0))
        if top > COUNT_MAX:
            i = int(np.argmax(cov))
            raise ValueError(f"{chrom}: the bin at {(start + i) * self.bin_size:,} sums coverage {cov[i]:,}, "
                             f"more than the store's uint32 holds ({COUNT_MAX:,}); use a smaller --bin-size")
        for name, held in zip(COUNTS, (meth, cov)):
            write_chunk(self.path, self.path / chrom / name, self._nodes[name], (chunk, 0), held[:, None])
        # a chunk met again is summarized at flush (flush reads it back once)
        self.summaries.setdefault(chrom, {})[chunk] = (None if (chrom, chunk) in self._resummarize else
                                                       chunk_summary(start, meth, cov))
        if top:
            last = cov.size - 1 - int(np.argmax(cov[::-1] > 0))
            self.extent[chrom] = max(self.extent.get(chrom, 0), start + last + 1)
        meth[:] = 0
        cov[:] = 0
        self._touched = 0

    @property
    def covered_by_chromosome(self) -> dict[str, int]:
        """Covered bins staged, per chromosome met (0 for one without reads)."""
        return {chrom: sum(int(s[COVERED]) for s in chunks.values()) for chrom, chunks in self.summaries.items()}

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
            n_bins = self.extent[chrom]  # the documents written once the chunks are: their shapes known
            write_document(self.path, self.path / chrom, self._nodes[""])
            for name in COUNTS:
                write_document(self.path, self.path / chrom / name, {**self._nodes[name], "shape": [n_bins, 1]})
            summary = np.zeros((n_chunks(n_bins, self.chunk_size), 1, len(FIELDS)), np.int64)
            for i in present:
                summary[i, 0] = chunks[i]
            document = {**self._nodes["summary"], "shape": list(summary.shape)}
            write_document(self.path, self.path / chrom / "summary", document)
            for k in range(n_chunks(summary.shape[0], INDEX_CHUNK)):
                write_chunk(self.path, self.path / chrom / "summary", document, (k, 0, 0),
                            summary[k * INDEX_CHUNK:(k + 1) * INDEX_CHUNK])
            files = {array: [i for i in present if (self.path / chrom / array / "c" / str(i) / "0").exists()]
                     for array in COUNTS}
            chromosomes[chrom] = {"n_bins": n_bins, "chunks": present, "files": files}
        # per chromosome, what the store's index must hold of the sample (CountsStore.summary checks)
        covered = {chrom: n for chrom, n in self.covered_by_chromosome.items() if chrom in chromosomes}
        return {"sample": sample, "provenance": {**provenance, "covered_bins": covered}, "bin_size": self.bin_size,
                "chunk_size": self.chunk_size, "chromosomes": chromosomes}

    def commit(self, sample: str, provenance: dict, lock: bool = True, ends_command: bool = False,
               before_commit=lambda: None, scratch: bool = False) -> bool:
        """Put the staged counts in place as ``sample`` (replacing a sample of that name);
        returns whether it replaced one. ``lock=False``: the caller holds the store's lock
        (or owns the store alone). ``ends_command``: the command's work is done once the sample
        is in, so a stop from the commit point on is dropped (as ingest's); otherwise it is
        delivered when the commit is complete. ``scratch``: the store is a command's temporary
        (pmd's summed bins), removed whatever happens, so a stop is not held off at all (a
        commit costs time per chromosome: seconds on an assembly of hundreds of contigs).
        ``before_commit()`` is called under the lock right before the commit point: what it
        raises leaves the store as it was."""
        record = self._record(sample, provenance)
        fault_point("staged")
        store = self.store.real()
        with locked(store) if lock else contextlib.nullcontext():
            replaced = self._prepare(store, record)
            before_commit()
            # Ctrl-C and SIGTERM held off from the commit point on: past it the sample is stored (a
            # kill is completed by the next command), so a stop ending the command would only misreport it
            with contextlib.nullcontext() if scratch else interruptions_held(deliver_after=not ends_command):
                self._mark_committed(record)
                fault_point("commit")
                complete_commit(store, self.path, f"sample {sample} was committed into {self.store} but is not yet "
                                                  f"in place", "the commit")
        self.close()
        return replaced

    @_staging_errors
    def _prepare(self, store: Location, record: dict) -> bool:
        """Steps 1-2 of a commit (module docstring) up to the commit point: everything that may
        refuse it. Returns whether the sample replaces one."""
        replaced = _check_commit(store, record)
        # the root's document, read once: its consolidated metadata (none for a new store, or a root an
        # earlier streambhmm left half made: the commit consolidates it from the files) and its size
        document = read_document(store) if (store / "zarr.json").exists() else {}
        listed = nodes_by_chromosome((document.get("consolidated_metadata") or {}).get("metadata", {}))
        for chrom, entry in record["chromosomes"].items():
            documents = listed.get(chrom, {})
            _check_counts_chunks(store, chrom, documents, self._nodes)
            # the axis as it is: positions are written from there
            entry["store_bins"] = documents[POSITION]["shape"][0] if POSITION in documents else 0
        if store.is_local:
            _check_no_links(store, record, replaced)
            _check_one_filesystem(store, self.path, record)
            _check_space(store, record, document)
        return replaced

    @_staging_errors
    def _mark_committed(self, record: dict) -> None:
        """Step 2's end: the commit point."""
        (self.path / COMMIT).write_text(json.dumps(record))

    def close(self) -> None:
        """Release the staging directory: removed, unless it holds a commit not yet complete
        (which the next command on the store completes)."""
        if not (self.path / COMMIT).exists():
            self._remove_staging()
        if self._owner is not None:
            os.close(self._owner)
            self._owner = None

    def _remove_staging(self) -> None:
        removed_while_it_returns(self.path.rmtree, self.path.exists)

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
    return record["sample"] in existing.meta.samples


def _check_counts_chunks(store: Location, chrom: str, documents: dict, staged: dict) -> None:
    """Refuse counts arrays whose chunks are not laid out and encoded as the staged ones are
    (a store changed with another tool): the staged chunk files are renamed into them."""
    for name in COUNTS:
        theirs, ours = _chunk_format(documents.get(name, staged[name])), _chunk_format(staged[name])
        if theirs != ours:
            differ = "; ".join(f"{key} {theirs[key]} (streambhmm writes {ours[key]})" for key in ours
                               if theirs[key] != ours[key])
            raise StoreError(f"{store / chrom / name} was changed by another tool: {differ}. The new sample's chunks "
                             f"would not decode there; ingest the samples into a new store")


def _chunk_format(document: dict) -> dict:
    """What a chunk file of an array must agree on to be renamed into another: the codecs (by
    name and byte order; blosc's settings are in each chunk's header), data type, chunk shape
    and fill value."""
    return {"codecs": [(codec.get("name"), (codec.get("configuration") or {}).get("endian"))
                       for codec in document.get("codecs", [])],
            "data_type": document.get("data_type"), "fill_value": document.get("fill_value"),
            "chunks": ((document.get("chunk_grid") or {}).get("configuration") or {}).get("chunk_shape")}


def _links_under(top: str):
    """The symbolic links anywhere under the directory ``top`` (not followed)."""
    pending = [top]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_symlink():
                    yield entry.path
                elif entry.is_dir():
                    pending.append(entry.path)


def _check_no_links(store: Location, record: dict, replaced: bool) -> None:
    """Refuse a symbolic link where the commit writes, renames or removes files, before the
    commit point: through a link that would happen outside the store. The chromosomes the
    commit puts counts in (all of them when it replaces a sample, whose chunks it removes)
    are walked whole; the others get a new column's metadata and sample names only."""
    if not os.path.isdir(store.url):
        return
    with os.scandir(store.url) as entries:
        chromosomes = [entry for entry in entries if entry.is_symlink() or entry.is_dir()]
    for entry in chromosomes:
        if entry.is_symlink():
            links = [entry.path]
        elif replaced or entry.name in record["chromosomes"]:
            links = _links_under(entry.path)
        else:
            links = [path for part in NEW_COLUMN_PATHS if os.path.islink(path := os.path.join(entry.path, part))]
        for link in links:
            raise StoreError(f"{link} is a symbolic link inside the store {store}: a commit renames and removes files "
                             f"in the store's directories, which through a link would happen outside it; replace the "
                             f"link by what it points to (cp -rL), or ingest into a new store; the store is unchanged")


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


def _check_space(store: Location, record: dict, document: dict) -> None:
    """Refuse a commit the disk has no room for, before its commit point (``document``: the
    store's root document, empty for a new store)."""
    fs = os.statvfs((store if store.exists() else store.parent).url)
    n_bytes, n_files = _commit_writes(document, record)
    need, free = n_bytes + n_files * fs.f_bsize + COMMIT_MARGIN, fs.f_bavail * fs.f_frsize
    if need > free or (fs.f_files and n_files > fs.f_favail):
        written = f"up to {need / 2**20:,.1f} MiB in up to {n_files:,} new files"
        free_now = f"{free / 2**20:,.1f} MiB ({fs.f_favail:,} files) are free"
        raise NoRoomError(f"not enough free space to commit sample {record['sample']} into {store}: the commit writes "
                          f"{written}, and {free_now}; the store is unchanged",
                          f"not enough free space: {written} to write, and {free_now}")


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
        n_index = n_chunks(n_chunks(n_bins, chunk_size), INDEX_CHUNK)
        n_bytes += 8 * written + 8 * len(FIELDS) * n_chunks(n_bins, chunk_size) + 10 * METADATA_BYTES + names_bytes
        n_files += 24 + 2 * len(entry["chunks"]) + 2 * n_chunks(written, chunk_size) + 2 * n_index
    if record["sample"] not in attrs.get("samples", {}):  # every other chromosome gets a column
        n_bytes += len(set(attrs.get("chromosomes", [])) - set(record["chromosomes"])) * (METADATA_BYTES + names_bytes)
    return n_bytes, n_files
