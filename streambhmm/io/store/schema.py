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
"""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..documents import version_problem
from ..limits import COUNT_MAX, POSITION_MAX  # noqa: F401 - the store's bounds, also read from here
from ..storage import Location

COUNTS_FORMAT = "streambhmm-counts"
COUNTS_VERSION = 2
DEFAULT_CHUNK_SIZE = 1_000_000
COUNT_DTYPE = np.uint32
INDEX_CHUNK = 4096  # chunk summaries per index chunk (of one sample)
SAMPLE_CHUNK = 1 << 16  # names per chunk of the sample coordinate
COMMIT = "COMMIT.json"
COMMIT_MARGIN = 1 << 20  # bytes free beyond a commit's upper bound
METADATA_BYTES = 4096  # an upper bound of one zarr.json of a chromosome's
COUNTS = ("methylated", "coverage")
POSITION = "position"  # the bin axis, its coordinate and the first dimension of every per-position variable
OWNER_LOCK = "owner.lock"
# index/summary fields; the digest is (0, 0) for a chunk without coverage
FIELDS = ("digest_hi", "digest_lo", "covered", "sum_methylated", "sum_coverage",
          "last_bin", "last_methylated", "last_coverage", "previous_bin", "previous_methylated",
          "previous_coverage")
DIGEST, COVERED, SUMS, LAST, PREVIOUS = slice(0, 2), 2, slice(3, 5), slice(5, 8), slice(8, 11)


class StoreError(ValueError):
    """A store that is missing, damaged, of another kind or of another format version."""


class NoRoomError(StoreError):
    """A disk with no room for a store's writes (or none writable): ``reason`` says which, for
    a command that writes a store of its own to word it (pmd's scratch store of summed bins)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def natural_key(name: str):
    """chr2 before chr10: digit runs compare as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part]


def natural_sorted(names) -> list[str]:
    return sorted(names, key=natural_key)


# The documents of a chromosome's nodes, key for key as zarr 3 writes them (tests/io/test_store_nodes.py
# checks them against zarr's own): a command that reads or stages counts never imports zarr (0.1 s).
_LITTLE_ENDIAN = {"name": "bytes", "configuration": {"endian": "little"}}
_ZSTD = {"name": "zstd", "configuration": {"level": 0, "checksum": False}}
# byte-shuffled zstd: counts are small integers, their high bytes mostly zero
COUNT_CODECS = (_LITTLE_ENDIAN, {"name": "blosc", "configuration": {
    "typesize": np.dtype(COUNT_DTYPE).itemsize, "cname": "zstd", "clevel": 3, "shuffle": "shuffle", "blocksize": 0}})
INTEGER_CODECS = (_LITTLE_ENDIAN, _ZSTD)  # zarr's default for int64
STRING_CODECS = ({"name": "vlen-utf8", "configuration": {}}, _ZSTD)  # zarr's default for strings


def group_document() -> dict:
    return {"attributes": {}, "zarr_format": 3, "node_type": "group"}


def array_document(shape, data_type: str, chunk_shape, fill_value, codecs: tuple, dimension_names=None,
                   attributes: dict | None = None) -> dict:
    """An array's zarr.json (a new dict each call: callers change its shape)."""
    document = {"shape": list(shape), "data_type": data_type,
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunk_shape)}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": fill_value, "codecs": copy.deepcopy(list(codecs)), "attributes": dict(attributes or {})}
    if dimension_names is not None:
        document["dimension_names"] = list(dimension_names)
    return {**document, "zarr_format": 3, "node_type": "array", "storage_transformers": []}


def counts_document(n_bins: int, n_samples: int, chunk_size: int, dimension_names=("position", "sample")) -> dict:
    """The document of a methylated or coverage array."""
    return array_document((n_bins, n_samples), np.dtype(COUNT_DTYPE).name, (chunk_size, 1), 0, COUNT_CODECS,
                          dimension_names)


def summary_document(n_chunks_: int, n_samples: int, dimension_names=("chunk", "sample", "field"),
                     attributes: dict | None = None) -> dict:
    """The document of a chromosome's chunk summaries (index/summary)."""
    return array_document((n_chunks_, n_samples, len(FIELDS)), "int64", (INDEX_CHUNK, 1, len(FIELDS)), 0,
                          INTEGER_CODECS, dimension_names, attributes)


def sample_document(n_samples: int) -> dict:
    """The document of the sample coordinate."""
    return array_document((n_samples,), "string", (SAMPLE_CHUNK,), "", STRING_CODECS, ("sample",))


def n_chunks(n_bins: int, chunk_size: int) -> int:
    return -(-n_bins // chunk_size)


def inline(nodes: dict) -> dict:
    """Consolidated metadata as zarr writes it into a group's zarr.json."""
    return {"kind": "inline", "must_understand": False, "metadata": nodes}


def new_attributes(record: dict) -> dict:
    return StoreAttrs(record["bin_size"], record["chunk_size"]).to_attributes()


def per_position_variables(documents: dict[str, dict]) -> list[str]:
    """The arrays of a chromosome (its documents, by name) that run along its bin axis besides
    the counts and the axis itself (decode's posteriors, say): declared so by their first
    dimension name, grown with the axis and their other dimensions kept."""
    return sorted(name for name, document in documents.items()
                  if name not in (*COUNTS, POSITION) and document.get("node_type") == "array"
                  and (document.get("dimension_names") or [None])[0] == POSITION)


def check_format(path, attrs: dict) -> None:
    """Refuse attributes that are not a streambhmm counts store's."""
    if attrs.get("format") == COUNTS_FORMAT:
        return
    store = store_around(path) if attrs.get("format") is None else None
    if store is not None:  # a chromosome's group or an array, given for the store
        raise StoreError(f"{path}: is a part of the counts store {store}, not a store; pass {store}")
    raise StoreError(f"{path}: not a streambhmm counts store (format {attrs.get('format')!r})")


def store_around(path) -> str | None:
    """The local counts store that ``path`` lies inside (not ``path`` itself), if any."""
    if "://" in str(path):
        return None
    for parent in Path(os.path.realpath(str(path))).parents:  # through a link to a part of a store too
        try:
            with open(parent / "zarr.json", "rb") as fh:
                document = json.load(fh)
        except (OSError, ValueError):
            continue
        if isinstance(document, dict) and (document.get("attributes") or {}).get("format") == COUNTS_FORMAT:
            return str(parent)
    return None


@dataclass(frozen=True)
class StoreAttrs:
    """The store's metadata document (the root's attributes), read with its version checked."""

    bin_size: int
    chunk_size: int
    samples: dict = field(default_factory=dict)  # name -> its column and provenance
    chromosomes: list = field(default_factory=list)  # natural order
    generation: str = ""  # a new value at every change
    format_version: int = COUNTS_VERSION
    tool_version: str = ""  # the streambhmm that made the last change

    @classmethod
    def read(cls, path) -> "StoreAttrs":
        """The attributes of the store at ``path``, refused (naming it) unless they are of this
        format version."""
        return cls.check(path, read_attributes(path))

    @classmethod
    def check(cls, path, attrs: dict) -> "StoreAttrs":
        check_format(path, attrs)
        version = attrs.get("format_version")
        problem = version_problem(version, COUNTS_VERSION, COUNTS_VERSION)
        if problem == "not an integer":
            raise StoreError(f"{path}: format_version is not an integer ({json.dumps(version)[:100]})")
        if problem == "newer":
            raise StoreError(f"{path}: counts store format version {version} is newer than this streambhmm supports "
                             f"({COUNTS_VERSION}); upgrade streambhmm")
        if problem == "older":
            raise StoreError(f"{path}: a version-{version} counts store (covered bins only, all samples in each "
                             f"chunk); this streambhmm reads version {COUNTS_VERSION}. Convert it with `streambhmm "
                             f"upgrade {path}` (it keeps every sample and its provenance), or ingest the files into a "
                             f"new store")
        samples, chromosomes = attrs.get("samples", {}), attrs.get("chromosomes", [])
        sizes = [attrs.get(key) for key in ("bin_size", "chunk_size")]
        damaged = [what for what, bad in (
            ("bin_size and chunk_size", not all(isinstance(v, int) and v >= 1 for v in sizes)),
            ("samples", not isinstance(samples, dict) or not all(
                isinstance(record, dict) and isinstance(record.get("column"), int) for record in samples.values())),
            ("chromosomes", not isinstance(chromosomes, list))) if bad]
        if damaged:  # a hand-edited record: said here, not as a traceback wherever it is read
            raise StoreError(f"{path}: the store's metadata is damaged ({' and '.join(damaged)} not as this streambhmm "
                             f"writes them); restore the store from a copy, or ingest its samples again into a new one")
        return cls(sizes[0], sizes[1], dict(samples), list(chromosomes), str(attrs.get("generation", "")), version,
                   str(attrs.get("tool_version", "")))

    def to_attributes(self) -> dict:
        """The attributes a new store starts with (in the order written)."""
        return {"format": COUNTS_FORMAT, "format_version": self.format_version, "bin_size": self.bin_size,
                "chunk_size": self.chunk_size, "samples": self.samples, "chromosomes": self.chromosomes}


def read_attributes(path) -> dict:
    """The root's attributes (the caller's own copy), refused when there is no store at ``path``."""
    path = Location.of(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"{path}: no counts store here (no zarr.json)")
    document = root_document(path)
    attributes = document.get("attributes", {}) if isinstance(document, dict) else None
    if not isinstance(attributes, dict):
        raise StoreError(f"{path / 'zarr.json'}: the store's metadata is damaged (not a JSON object with attributes)")
    return pickle.loads(pickle.dumps(attributes, pickle.HIGHEST_PROTOCOL))  # a deep copy, 3x copy.deepcopy's speed


_ROOTS: dict[str, tuple] = {}  # a root zarr.json's real path: (its bytes, its document)
_ROOTS_LOCK = threading.Lock()
ROOTS_KEPT = 2  # a command works on at most two stores at once (pmd: the counts and its summed store)


def root_document(path) -> dict:
    """The store's root zarr.json, parsed once for the same bytes and shared: read it, do not
    change it. Its consolidated metadata holds every node's document, 6.5 MB on an assembly
    of 2,000 contigs: a command parsed it six times (attributes, its outputs' checks, a thread
    each for the chunks' documents), 0.1 s each, where reading it again costs milliseconds."""
    file = Location.of(path) / "zarr.json"
    with _ROOTS_LOCK:  # threads that ask together parse it once
        data = file.read_bytes()
        key = os.path.realpath(file.url) if file.is_local else file.url
        kept = _ROOTS.pop(key, None)
        document = kept[1] if kept is not None and kept[0] == data else _parsed(file, data)
        while len(_ROOTS) >= ROOTS_KEPT:
            _ROOTS.pop(next(iter(_ROOTS)))
        _ROOTS[key] = (data, document)
        return document


def _parsed(file: Location, data: bytes):
    try:  # quicker than zarr's parse of all
        return json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{file}: the store's metadata is damaged (not JSON: {exc}); restore the "
                         f"store from a copy, or ingest its samples again into a new one") from None
