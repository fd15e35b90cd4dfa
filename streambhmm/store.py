"""The counts store: Zarr v3, one group per chromosome, written with xarray.

    STORE/zarr.json          root attributes: format, version, bin size, samples and
                             their provenance, chromosome order
    STORE/<chrom>/           xarray Dataset, dims (bin, sample):
        methylated, coverage  uint32, chunked along bin
        position              0-based bin start (coordinate on bin); only bins where
                              some sample has coverage
        sample                sample names (coordinate)

Any zarr/xarray reader opens a chromosome with ``xarray.open_zarr(STORE, group=CHROM)``.
Stores change only by replacement: a new version is written beside the store and swapped
in by renames (see :func:`replace_store`), so a failed or killed run leaves the old one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
import warnings
from dataclasses import dataclass

import numpy as np
import xarray as xr
import zarr

from .storage import Location

COUNTS_FORMAT = "streambhmm-counts"
COUNTS_VERSION = 1
DEFAULT_CHUNK_SIZE = 1_000_000
COUNT_DTYPE = np.uint32


class StoreError(ValueError):
    """A store that is missing, of another kind or of a newer format version."""


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
        return list(self.attrs["samples"])

    def dataset(self, chrom: str) -> xr.Dataset:
        """Lazy (dask-backed) Dataset of one chromosome."""
        return xr.open_zarr(self.path.url, group=chrom)


def recover(path) -> None:
    """Finish or undo a swap that a killed run left half done, and drop its leftovers."""
    path = Location.of(path)
    old = path.parent.glob(f"{path.name}.old-*")
    if not path.exists() and old:
        old[-1].rename(path)  # killed between the two renames: keep the old store
        old = old[:-1]
    for leftover in old + path.parent.glob(f"{path.name}.tmp-*"):
        leftover.rmtree()


@contextlib.contextmanager
def locked(path, shared: bool = False):
    """Lock ``path`` through a sibling lock file: exclusive for writers, ``shared`` for
    readers, so a store never changes under a command reading it (an ingest waits for the
    readers, a reader waits for the ingest). fsspec URLs get no lock: there, one writer per
    store at a time, and no readers meanwhile, is the user's to ensure.

    The lock file is opened without following a symlink and never truncated (a planted
    link cannot make us clobber its target)."""
    path = Location.of(path)
    if not path.is_local:
        recover(path)
        yield
        return
    path.parent.mkdir()
    lock_file = path.parent / f".{path.name}.lock"
    try:
        fd = os.open(lock_file.url, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise StoreError(f"cannot open the lock file {lock_file} ({why}); remove it and retry") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        if not shared:
            recover(path)
        elif not path.exists() and path.parent.glob(f"{path.name}.old-*"):
            fcntl.flock(fd, fcntl.LOCK_EX)  # a writer killed mid-swap: put the store back first
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


def open_store(path) -> CountsStore:
    """Open and check a counts store."""
    path = Location.of(path)
    if not (path / "zarr.json").exists():
        raise StoreError(f"{path}: no counts store here (no zarr.json)")
    attrs = dict(zarr.open_group(path.url, mode="r").attrs)
    if attrs.get("format") != COUNTS_FORMAT:
        raise StoreError(f"{path}: not a streambhmm counts store (format {attrs.get('format')!r})")
    if int(attrs.get("format_version", 0)) > COUNTS_VERSION:
        raise StoreError(f"{path}: counts store format version {attrs['format_version']} is newer "
                         f"than this streambhmm supports ({COUNTS_VERSION}); upgrade streambhmm")
    return CountsStore(path=path, attrs=attrs)


def write_chromosome(root: Location, chrom: str, position: np.ndarray, methylated: np.ndarray,
                     coverage: np.ndarray, samples: list[str], chunk_size: int, attrs: dict) -> None:
    """Write one chromosome group (arrays of shape (n, S)) into a staged store."""
    ds = xr.Dataset(
        {
            "methylated": (("bin", "sample"), methylated.astype(COUNT_DTYPE)),
            "coverage": (("bin", "sample"), coverage.astype(COUNT_DTYPE)),
        },
        coords={"position": ("bin", position.astype(np.int64)),
                "sample": ("sample", np.array(samples, dtype=object))},
        attrs=attrs,
    )
    chunks = (max(1, min(chunk_size, len(position))), len(samples))
    encoding = {name: {"chunks": chunks} for name in ("methylated", "coverage")}
    encoding["position"] = {"chunks": (chunks[0],)}
    ds.to_zarr(Location.of(root).url, group=chrom, mode="w", zarr_format=3, consolidated=False, encoding=encoding)


def finalize(root: Location, attrs: dict) -> None:
    """Write root attributes and consolidate metadata (so plain open_zarr reads quietly)."""
    root = Location.of(root)
    group = zarr.open_group(root.url, mode="a", zarr_format=3)
    group.attrs.update(attrs)
    with warnings.catch_warnings():
        # consolidated metadata is a zarr-python extension for v3; we want it deliberately
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(root.url)


def read_chromosome(store: CountsStore, chrom: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(position, methylated, coverage) of one chromosome, in memory, all samples."""
    ds = store.dataset(chrom)
    return ds.position.values, ds.methylated.values, ds.coverage.values
