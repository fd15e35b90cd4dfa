"""The upgrade of a version-1 counts store (covered bins only, all samples in each chunk) to
the current version, in place."""

from __future__ import annotations

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..storage import Location, replacing_dir
from .commit import staging_path
from .locking import locked
from .schema import StoreError, check_format, read_attributes
from .writer import SampleWriter


def upgrade_store(path, echo=lambda message: None) -> int:
    """Convert a version-1 counts store (covered bins only, all samples in each chunk) into
    version 2 in place: a new store is written beside it, sample by sample from the old
    chunks, and swapped in. Returns the number of samples."""
    path = Location.of(path)
    with locked(path):
        attrs = read_attributes(path)
        check_format(path, attrs)
        if attrs.get("format_version") != 1:
            raise StoreError(f"{path}: a version-{attrs.get('format_version')} counts store; `upgrade` converts "
                             f"version 1 only")
        names = list(attrs["samples"])
        with replacing_dir(path.real(), replace=True, staged=staging_path(path)) as staged:
            writers = [SampleWriter(staged, attrs["bin_size"], attrs["chunk_size"]) for _ in names]
            try:
                for chrom in attrs["chromosomes"]:
                    n_rows = _stage_chromosome(path, chrom, attrs["bin_size"], writers)
                    echo(f"{chrom}: {n_rows:,} bins")
                for name, writer in zip(names, writers):
                    provenance = {k: v for k, v in attrs["samples"][name].items() if k != "column"}
                    writer.commit(name, provenance, lock=False)
            finally:
                for writer in writers:
                    writer.close()
                    writer.path.rmtree()  # a commit into the discarded new store goes with it
    return len(names)


def _stage_chromosome(path: Location, chrom: str, bin_size: int, writers: list[SampleWriter]) -> int:
    """Stage each sample's counts of one version-1 chromosome, a chunk of rows at a time;
    returns its rows."""
    import zarr

    group = zarr.open_group(path.url, path=chrom, mode="r")
    position = group["position"]
    step = group["methylated"].chunks[0]
    for lo in range(0, position.shape[0], step):
        bins = position[lo:lo + step] // bin_size
        meth, cov = group["methylated"][lo:lo + step], group["coverage"][lo:lo + step]
        for s, writer in enumerate(writers):
            keep = cov[:, s] > 0
            writer.add(chrom, bins[keep], meth[keep, s], cov[keep, s])
    return position.shape[0]
