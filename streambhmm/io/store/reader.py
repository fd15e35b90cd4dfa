"""The counts store as a reader sees it: CountsStore (attributes, extents, chunk summaries,
chunk references) and open_store, which checks what it opens."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..names import Spellings
from ..outputs import Inputs
from ..storage import Location
from .chunks import ChunkRef, root_group, store_node, store_nodes
from .nodes import chunk_path, read_chunk, why
from .locking import lock_file
from .schema import (COUNTS_FORMAT, COVERED, DIGEST, FIELDS, INDEX_CHUNK, SUMS, StoreAttrs, StoreError,
                     read_attributes)


@dataclass
class StoreOverview:
    """A counts store's extent and coverage (CountsStore.overview); arrays are per sample."""

    samples: list[str]
    chromosomes: dict  # chrom -> (bins on its axis, covered bins per sample)
    covered: np.ndarray  # covered bins
    coverage: np.ndarray  # reads summed over the bins
    methylated: np.ndarray
    chromosome_reads: dict  # chrom -> reads per sample

    @property
    def n_bins(self) -> int:
        return sum(n for n, _ in self.chromosomes.values())


@dataclass(frozen=True)
class CountsStore:
    path: Location
    attrs: dict  # the root's attributes as stored, provenance included
    meta: StoreAttrs  # the same, read and checked
    _index_checked: set = field(default_factory=set, compare=False, repr=False)  # (chrom, column): _check_index
    # (chrom, column) -> its chunk summaries, read once per opening: a command reads them for its
    # passes' plans and its notes, a file per chromosome and sample (3,010 contigs: 0.1 s each time)
    _summaries: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def bin_size(self) -> int:
        return self.meta.bin_size

    @property
    def chunk_size(self) -> int:
        return self.meta.chunk_size

    @property
    def chromosomes(self) -> list[str]:
        return list(self.meta.chromosomes)

    def restricted(self, chromosomes) -> "CountsStore":
        """The store as a command reads it with only ``chromosomes`` (in the store's order): its
        passes, notes and messages see no other. For reading only."""
        kept = set(chromosomes)
        return replace(self, meta=replace(self.meta, chromosomes=[c for c in self.chromosomes if c in kept]))

    @property
    def samples(self) -> list[str]:
        """Sample names in column order."""
        return sorted(self.meta.samples, key=self.column)

    @property
    def generation(self) -> str:
        return self.meta.generation

    def column(self, sample: str) -> int:
        return int(self.meta.samples[sample]["column"])

    def sample_at(self, column: int) -> str | None:
        """The sample in ``column`` (None: none)."""
        return self._by_column.get(column)

    @cached_property
    def _by_column(self) -> dict[int, str]:
        return {self.column(s): s for s in self.meta.samples}

    def n_bins(self, chrom: str) -> int:
        return int(store_node(self.path.url, self.generation, f"{chrom}/methylated")["shape"][0])

    def n_covered_cells(self, factor: int = 1) -> int:
        """At most how many bins x samples hold reads (from the chunk summaries: no counts are
        read), the bins summed ``factor`` at a time: per chunk, the bins any sample covers (at most
        the sum of each sample's covered bins, and at most the chunk's bins), times the samples.
        What EM in memory keeps: the bins without reads of a sparse store (RRBS, single cells, a
        genome's worth of chromosomes around a few of them) are never held."""
        columns = [self.column(s) for s in self.samples]
        total = 0
        for chrom in self.chromosomes:
            covered = self.summary(chrom, columns)[:, :, COVERED].sum(axis=1)
            spans = np.minimum(self.chunk_size, self.n_bins(chrom) - self.chunk_size * np.arange(covered.size))
            total += int(np.minimum(covered, -(-spans // factor)).sum())
        return total * len(columns)

    def bins_with_reads(self, samples) -> np.ndarray:
        """Per sample, its bins with reads in the whole store (from the chunk summaries)."""
        return sum(self.bins_with_reads_by_chromosome(samples).values(), np.zeros(len(samples), np.int64))

    def bins_with_reads_by_chromosome(self, samples) -> dict[str, np.ndarray]:
        """{chromosome: per sample, its bins with reads there} (from the chunk summaries)."""
        columns = [self.column(s) for s in samples]
        return {chrom: self.summary(chrom, columns)[:, :, COVERED].sum(axis=0) for chrom in self.chromosomes}

    def dataset(self, chrom: str):
        """Lazy (dask-backed) xarray Dataset of one chromosome."""
        import xarray as xr  # here: the commands that read counts do not need it (0.5 s to import)

        return xr.open_zarr(self.path.url, group=chrom)

    def overview(self) -> "StoreOverview":
        """Bins and coverage per chromosome and sample, from the chunk summaries (no counts
        are read)."""
        columns = [self.column(s) for s in self.samples]
        per_chrom, reads, totals = {}, {}, np.zeros((3, len(columns)), np.int64)
        for chrom in self.chromosomes:
            summary = self.summary(chrom, columns).sum(axis=0)  # (samples, fields)
            per_chrom[chrom], reads[chrom] = (self.n_bins(chrom), summary[:, COVERED]), summary[:, SUMS][:, 1]
            totals += [summary[:, COVERED], summary[:, SUMS][:, 1], summary[:, SUMS][:, 0]]
        return StoreOverview(self.samples, per_chrom, *totals, reads)

    def summary(self, chrom: str, columns) -> np.ndarray:
        """(chunks, len(columns), FIELDS) chunk summaries of those sample columns."""
        columns = list(columns)
        document = store_node(self.path.url, self.generation, f"{chrom}/index/summary")
        n_chunks = document["shape"][0]
        if not self.path.is_local:  # zarr fetches the objects concurrently
            array = root_group(self.path.url, self.generation)[f"{chrom}/index/summary"]
            return np.asarray(array.get_orthogonal_selection((slice(None), columns, slice(None))))
        summary = np.zeros((n_chunks, len(columns), len(FIELDS)), np.int64)
        array = self.path / chrom / "index" / "summary"
        for j, column in enumerate(columns):
            if (chrom, column) in self._summaries:
                summary[:, j] = self._summaries[chrom, column]
                continue
            for first in range(0, n_chunks, INDEX_CHUNK):
                index = (first // INDEX_CHUNK, column, 0)
                try:
                    rows = read_chunk(array, document, index)
                except (OSError, RuntimeError, ValueError) as exc:
                    sample = self.sample_at(column) or f"column {column}"
                    reason = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else why(exc)
                    raise StoreError(f"{self.path}: the index of sample {sample} on {chrom} cannot be read "
                                     f"({chunk_path(array, index)}: {reason}): the store is damaged. Ingest sample "
                                     f"{sample} again") from None
                summary[first:first + INDEX_CHUNK, j] = rows[:n_chunks - first, 0]
        self._check_index(chrom, columns, summary)
        self._check_recorded(chrom, columns, summary)
        for j, column in enumerate(columns):  # checked: kept
            self._summaries[chrom, column] = summary[:, j].copy()
        return summary

    def _check_index(self, chrom: str, columns: list, summary: np.ndarray) -> None:
        """Refuse an index chunk that reads as no coverage (zarr reads a missing chunk as its
        fill value, zeros) where its sample has counts: a lost index file would otherwise hide
        the sample's counts there, unchecked. A local store only (a listing per counts chunk
        of a sample without coverage; on object storage each would be a request), each
        chromosome and column once per opening."""
        if not self.path.is_local:
            return
        listed = {}  # counts chunk -> the columns with a coverage file there
        for j, column in enumerate(columns):
            if (chrom, column) in self._index_checked:
                continue
            for first in range(0, summary.shape[0], INDEX_CHUNK):
                if summary[first:first + INDEX_CHUNK, j].any():
                    continue
                for i in range(first, min(first + INDEX_CHUNK, summary.shape[0])):
                    if i not in listed:
                        listed[i] = self._columns_with_counts(chrom, i)
                    if str(column) in listed[i]:
                        sample = self.sample_at(column) or f"column {column}"
                        raise StoreError(f"{self.path}: the index of sample {sample} on {chrom} "
                                         f"({chrom}/index/summary, chunk {first // INDEX_CHUNK}) is missing or "
                                         f"empty, but the sample has counts there (chunk {i}): the store is damaged. "
                                         f"Ingest sample {sample} again")
            self._index_checked.add((chrom, column))

    def _check_recorded(self, chrom: str, columns: list, summary: np.ndarray) -> None:
        """Refuse an index that counts other bins with reads on ``chrom`` than the sample's
        commit recorded (samples stored before 2026-12-06 record none): a chromosome whose
        chunk and index files were all removed by hand read as one without reads, which no
        other check could tell from a sample without reads there."""
        for j, column in enumerate(columns):
            if (chrom, column) in self._summaries:  # checked when it was read
                continue
            sample = self.sample_at(column)
            recorded = self.meta.samples[sample].get("covered_bins") if sample is not None else None
            if not isinstance(recorded, dict):
                continue
            expected, found = recorded.get(chrom, 0), int(summary[:, j, COVERED].sum())
            if found != expected:
                raise StoreError(f"{self.path}: the index of sample {sample} on {chrom} counts {found:,} bins with "
                                 f"reads, where it was stored with {expected:,}: the store is damaged (files removed "
                                 f"by hand?). Ingest sample {sample} again")

    @property
    def ingested_files(self) -> list[str]:
        """The files its samples were ingested from (recorded_inputs, from the attributes read)."""
        return _ingested_files(self.attrs) if self.path.is_local else []

    def _columns_with_counts(self, chrom: str, chunk: int) -> set[str]:
        """The columns with a coverage file in ``chunk`` of ``chrom`` (a local store)."""
        directory = os.path.join(self.path.url, chrom, "coverage", "c", str(chunk))
        return set(os.listdir(directory)) if os.path.isdir(directory) else set()

    def totals(self, samples) -> dict:
        """Per chromosome where ``samples`` have reads, each one's methylated and covered reads:
        from the index, the same whatever the bins they were summed into and the chunking."""
        columns = [self.column(s) for s in samples]
        out = {}
        for chrom in self.chromosomes:
            sums = self.summary(chrom, columns)[:, :, SUMS].sum(axis=0)
            if sums.any():
                out[chrom] = sums.tolist()
        return out

    def counts_digests(self, samples) -> dict:
        """Per chromosome where ``samples`` have reads, a digest of their bins with reads (each
        bin's index and every sample's methylated and covered reads), read a chunk at a time:
        equal for two stores of the same bins whatever their chunking, unlike their totals
        when reads sit in other bins."""
        out = {}
        for chrom in self.chromosomes:
            refs = self.chunk_refs(chrom, samples)
            if not refs:
                continue
            digest = hashlib.blake2b(digest_size=16)
            for ref in refs:
                meth, cov = ref.read()
                rows = np.flatnonzero(cov.any(axis=1))
                # a row per bin (its bytes in row order: the same stream however the bins are chunked)
                digest.update(np.column_stack([ref.start + rows, meth[rows], cov[rows]]).astype("<i8").tobytes())
            out[chrom] = digest.hexdigest()
        return out

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


def open_store(path) -> CountsStore:
    """Open and check a counts store."""
    path = Location.of(path)
    attrs = read_attributes(path)
    meta = StoreAttrs.check(path, attrs)
    _check_chunking(path, meta)
    _check_chromosomes(path, meta)
    return CountsStore(path=path, attrs=attrs, meta=meta)


def _check_chromosomes(path: Location, meta: StoreAttrs) -> None:
    """Refuse a local store missing the directory of a chromosome, or of its index, that its
    root lists: zarr reads a missing array through the root's consolidated metadata as its
    fill value, so a chromosome directory removed by hand read as one without reads, and
    `hmr` wrote half the HMRs with no word of it (a helper's audit). (A missing zarr.json
    alone is not refused: readers go by the consolidated metadata, and the next commit
    writes it again.) Two checks per chromosome."""
    if not path.is_local:
        return
    for chrom in meta.chromosomes:
        for directory in (chrom, f"{chrom}/index/summary"):
            if not os.path.isdir(os.path.join(path.url, directory)):
                raise StoreError(f"{path}: chromosome {chrom} is listed in the store's metadata, but the directory "
                                 f"{path / directory} is missing: the store is damaged (removed by hand?). Restore "
                                 f"it, or ingest the samples again into a new store")


def _check_chunking(path: Location, meta: StoreAttrs) -> None:
    """Refuse arrays chunked otherwise than the format fixes them (rewritten by other
    software): read chunk by chunk they were refused as damaged or missing samples (a
    helper's audit), which sent the user to ingest again for the wrong reason."""
    try:  # the readers' own cached documents, so the root is not read again for them
        nodes = store_nodes(path.url, meta.generation)
    except StoreError:  # no consolidated metadata: a half-made root, which the next commit completes
        return
    fixed = {"methylated": [meta.chunk_size, 1], "coverage": [meta.chunk_size, 1],
             "index/summary": [INDEX_CHUNK, 1, len(FIELDS)]}
    for chrom in meta.chromosomes:
        for name, shape in fixed.items():
            document = nodes.get(f"{chrom}/{name}")
            grid = document.get("chunk_grid") if isinstance(document, dict) else None
            chunks = (grid.get("configuration") or {}).get("chunk_shape") if isinstance(grid, dict) else None
            if chunks is not None and list(chunks) != shape:
                raise StoreError(f"{path / chrom / name} was changed by another tool: chunks {list(chunks)} "
                                 f"(streambhmm writes {shape}, the store's chunk size being {meta.chunk_size:,} bins), "
                                 f"so its chunks are not where the store's index says. Ingest the samples again from "
                                 f"their files into a new store")


def store_inputs(store, *others) -> Inputs:
    """What a command on the counts store at ``store`` reads, for its outputs to be checked
    against (io.outputs.Inputs): the store, ``others`` (a model, a sample sheet...) and the
    files its samples were ingested from; nor may they replace the store's lock file."""
    location = Location.of(store)
    locks = [lock_file(location.real()).url] if location.is_local else []
    return Inputs(store, *others, ingested=recorded_inputs(store), locks=locks)


def recorded_format(path) -> str | None:
    """The format a store's root records (schema.COUNTS_FORMAT for a counts store); None
    when there is no readable root there (a helper's audit: a directory of garbage given as
    --moments was called a counts store)."""
    try:
        attrs = read_attributes(Location.of(path))
    except (OSError, StoreError):
        return None
    return attrs.get("format") if isinstance(attrs, dict) else None


def recorded_inputs(path) -> list[str]:
    """The files the samples of the local counts store at ``path`` were ingested from, as
    recorded (none when there is no readable store there): a command's output must not
    replace them."""
    location = Location.of(path)
    if not location.is_local:
        return []
    try:
        attrs = read_attributes(location)
    except (OSError, StoreError):
        return []
    return _ingested_files(attrs) if attrs.get("format") == COUNTS_FORMAT else []  # not a moment store's


def _ingested_files(attrs: dict) -> list[str]:
    """The input files' paths a counts store's attributes record for its samples."""
    samples = attrs.get("samples")
    if not isinstance(samples, dict):
        return []
    return [f["path"] for record in samples.values() if isinstance(record, dict)
            for f in record.get("files", []) if isinstance(f, dict) and isinstance(f.get("path"), str)]
