"""References to a store's chunks as tasks read them, and the digests and summaries of a
chunk column kept in the store's index."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass

import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..storage import Location
from .nodes import read_chunk, why
from .schema import COVERED, DIGEST, FIELDS, LAST, PREVIOUS, SUMS, StoreError, root_document


@functools.lru_cache(maxsize=16)
def root_group(url: str, generation: str):
    """The store's root group through its consolidated metadata (no metadata reads per
    array); cached per generation, which every change of the store renews."""
    import zarr

    return zarr.open_group(url, mode="r", use_consolidated=True)


@functools.lru_cache(maxsize=16)
def store_nodes(url: str, generation: str) -> dict[str, dict]:
    """The documents of the store's nodes by path, from the consolidated metadata of its
    root; cached per generation, which every change of the store renews (the file parsed
    once, however its path is spelled: schema.root_document). Read them, do not change them.
    Zarr parses a node's document each time an array is taken from a group: a millisecond,
    paid per chromosome and per chunk read, seconds on an assembly of thousands of contigs."""
    document = root_document(url)
    nodes = (document.get("consolidated_metadata") or {}).get("metadata") if isinstance(document, dict) else None
    if nodes is None:
        raise StoreError(f"{url}: the root's zarr.json holds no consolidated metadata, which every commit writes: "
                         f"the store is damaged; ingest its samples again into a new store")
    return nodes


def store_node(url: str, generation: str, path: str) -> dict:
    """The document of the store's node at ``path`` (store_nodes), refused when the consolidated
    metadata lacks it."""
    try:
        return store_nodes(url, generation)[path]
    except KeyError:
        raise StoreError(f"{url}: the root's consolidated metadata has no entry for {path}: the store is damaged; "
                         f"ingest its samples again into a new store") from None


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
        for k, w in enumerate(which):
            if self.digests[w] == (0, 0):
                continue  # no coverage: nothing written
            m, c = self._column("methylated", w), self._column("coverage", w)
            if verify and chunk_digest(m, c) != self.digests[w]:
                raise self._damaged(w, "their checksum does not match the store's index")
            meth[:, k], cov[:, k] = m, c
        return meth, cov

    def _damaged(self, w: int, why: str) -> StoreError:
        return StoreError(f"{self.url}: the counts of sample {self.samples[w]} on {self.chrom}, chunk {self.chunk} "
                          f"(bins {self.start:,} to {self.stop:,}) are missing or damaged ({why}); ingest sample "
                          f"{self.samples[w]} again")

    def covered_rows(self) -> np.ndarray:
        """The rows where one of the columns has coverage, read one column at a time (memory:
        one sample's chunk, whatever the samples; not verified: the reads of the counts are)."""
        covered = np.zeros(self.n_bins, bool)
        for w, digest in enumerate(self.digests):
            if digest != (0, 0):  # else no coverage here: nothing written
                covered |= self._column("coverage", w) > 0
        return np.flatnonzero(covered)

    def _column(self, array: str, w: int) -> np.ndarray:
        """This chunk of column ``w``'s ``array`` ("methylated" or "coverage"), unchecked."""
        document = store_node(self.url, self.generation, f"{self.chrom}/{array}")
        try:
            chunk = read_chunk(Location.of(self.url) / self.chrom / array, document, (self.chunk, self.columns[w]),
                               rows=self.n_bins)
        except (RuntimeError, ValueError) as exc:  # a chunk file that no longer decompresses
            raise self._damaged(w, f"they cannot be decoded: {exc}") from None
        except OSError as exc:  # one that cannot be read (a directory in its place, say)
            raise self._damaged(w, f"they cannot be read: {why(exc)}") from None
        return chunk[:, 0]

    def positions(self, rows=None) -> np.ndarray:
        """0-based bp starts of the chunk's rows (default: all of them)."""
        rows = np.arange(self.n_bins) if rows is None else np.asarray(rows, np.int64)
        return (self.start + rows) * self.bin_size


def covered_bins(coverage: np.ndarray) -> np.ndarray:
    """Whether each bin (row) of a (bins, samples) coverage array has reads in some sample, a
    column at a time (numpy's sum or any over a few columns runs at about 45 ns a row: 10 ms
    for a million bins of two samples, against 1.3 ms)."""
    out = coverage[:, 0] > 0
    for s in range(1, coverage.shape[1]):
        out |= coverage[:, s] > 0
    return out


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
