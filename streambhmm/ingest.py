"""Ingest methylation calls into a counts store: parse, validate, bin, merge, stage, swap.

Rows are binned into fixed bins (a bin's 0-based start is floor(pos0 / bin) * bin) and a
bin's counts are the sums over its rows, both strands. All files of one call are
replicates of one sample and are summed. Memory is bounded by one chromosome: each
file's binned chromosomes are spilled to disk as they complete, then merged chromosome
by chromosome with the replicates and with the samples already in the store.
"""

from __future__ import annotations

import datetime
import hashlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from . import __version__
from .formats import (FORMATS, ReadOptions, check_input, check_replicates, detect_common_format, read_rows,
                      settings_for)
from .readers import COUNT_MAX
from .storage import Location
from .store import (COUNTS_FORMAT, COUNTS_VERSION, DEFAULT_CHUNK_SIZE, StoreError, finalize, locked,
                    open_store, read_chromosome, replace_store, staging_path, write_chromosome)


@dataclass
class IngestReport:
    sample: str
    format: str
    files: list[str]
    replaced: bool = False
    unchanged: bool = False
    chromosomes: list[str] = field(default_factory=list)
    n_bins: int = 0
    n_rows: int = 0


def file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _reduce_bins(bins: np.ndarray, meth: np.ndarray, cov: np.ndarray):
    """Sum counts over runs of equal, sorted bin indices."""
    if bins.size == 0:
        return bins, meth, cov
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    return bins[starts], np.add.reduceat(meth, starts), np.add.reduceat(cov, starts)


def _bin_file(path, fmt, context, bin_size, spill: Path, chrom_files: dict, progress, **read) -> int:
    """Bin one file; each completed chromosome is saved to ``spill``. Returns rows read."""
    current, parts, n_rows = None, [], 0

    def flush():
        if current is None:
            return
        bins, meth, cov = (np.concatenate(a) for a in zip(*parts))
        out = spill / f"{len(list(spill.iterdir()))}.npz"
        np.savez(out, *_reduce_bins(bins, meth, cov))
        chrom_files.setdefault(current, []).append(out)

    for rows in read_rows(path, fmt, context, **read):
        if rows.chrom != current:
            flush()
            current, parts = rows.chrom, []
        parts.append(_reduce_bins(rows.pos0 // bin_size, rows.methylated, rows.coverage))
        n_rows += rows.pos0.size
        progress(f"{Path(path).name}: {n_rows:,} rows, at {rows.chrom}:{int(rows.pos0[-1]) + 1:,}")
    flush()
    return n_rows


def _merge_replicates(paths: list[Path]):
    loaded = [np.load(p) for p in paths]
    bins = np.concatenate([f["arr_0"] for f in loaded])
    order = np.argsort(bins, kind="stable")
    meth = np.concatenate([f["arr_1"] for f in loaded])[order]
    cov = np.concatenate([f["arr_2"] for f in loaded])[order]
    return _reduce_bins(bins[order], meth, cov)


def _merge_into(old_position, old_meth, old_cov, column: int, new_position, new_meth, new_cov):
    """Put one sample's counts into column ``column`` of the existing arrays (grown as
    needed), then keep only bins where some sample has coverage."""
    position = np.union1d(old_position, new_position)
    n_samples = max(old_meth.shape[1], column + 1)
    meth = np.zeros((position.size, n_samples), np.int64)
    cov = np.zeros((position.size, n_samples), np.int64)
    at_old = np.searchsorted(position, old_position)
    meth[at_old, :old_meth.shape[1]] = old_meth
    cov[at_old, :old_cov.shape[1]] = old_cov
    meth[:, column] = cov[:, column] = 0
    at_new = np.searchsorted(position, new_position)
    meth[at_new, column] = new_meth
    cov[at_new, column] = new_cov
    covered = cov.sum(axis=1) > 0
    return position[covered], meth[covered], cov[covered]


def ingest(files, sample: str, store, fmt: str = "auto", bin_size: int = 100, context: str = "CG",
           chunk_size: int | None = None, echo: Callable[[str], None] = lambda message: None,
           progress: Callable[[str], None] = lambda message: None,
           options: ReadOptions | None = None) -> IngestReport:
    """Add (or replace) ``sample`` in the counts store ``store`` from replicate ``files``.

    ``echo`` receives messages for the user; ``progress`` receives frequent status lines;
    ``options`` are the reading options (strand merge, filters, --columns).
    """
    files = [Path(f) for f in files]
    if not files:
        raise ValueError("no input files")
    for f in files:
        check_input(f)
    if not sample or "/" in sample:
        raise ValueError(f"invalid sample name {sample!r}")
    if bin_size < 1:
        raise ValueError(f"--bin-size must be >= 1, got {bin_size}")
    options = options or ReadOptions()
    read = {"options": options, "detected": fmt == "auto" and options.columns is None}
    fmt = detect_common_format(files, fmt, options)
    settings_for(fmt, context, options)  # options the format cannot honour stop here, before any work
    store = Location.of(store)
    report = IngestReport(sample=sample, format=fmt, files=[str(f) for f in files])
    provenance = {
        "files": [{"path": str(f.resolve()), "sha256": file_sha256(f), "bytes": f.stat().st_size} for f in files],
        "format": fmt,
        "context": context,
        "options": options.as_dict(),
    }
    check_replicates(files, [f["sha256"] for f in provenance["files"]])
    with locked(store):
        existing = open_store(store) if store.exists() else None
        if existing is not None and existing.bin_size != bin_size:
            raise StoreError(f"{store} uses bin size {existing.bin_size}; cannot ingest with --bin-size {bin_size}")
        if existing is not None and sample in existing.samples:
            previous = {k: existing.attrs["samples"][sample].get(k) for k in provenance}
            if previous == provenance and chunk_size in (None, existing.chunk_size):
                report.unchanged = True
                echo(f"sample {sample}: same files, format, context and options as already stored; "
                     f"store unchanged")
                return report
            report.replaced = True
        staged = staging_path(store)
        # binned chromosomes spill beside a local store (same disk), else to a local temporary directory
        spill = Path(staging_path(store).url) if store.is_local else Path(tempfile.mkdtemp(prefix="streambhmm-"))
        try:
            spill.mkdir(parents=True, exist_ok=True)
            _ingest_staged(files, fmt, context, bin_size, chunk_size, sample, provenance, existing,
                           staged, spill, report, progress, read)
            replace_store(staged, store)
        finally:
            staged.rmtree()
            shutil.rmtree(spill, ignore_errors=True)
    if report.replaced:
        echo(f"sample {sample} already existed and was replaced")
    return report


def _ingest_staged(files, fmt, context, bin_size, chunk_size, sample, provenance, existing, root: Location,
                   spill: Path, report: IngestReport, progress, read: dict) -> None:
    """Write the complete new store at ``root`` (a staging path)."""
    chrom_files: dict[str, list[Path]] = {}
    for f in files:
        report.n_rows += _bin_file(f, fmt, context, bin_size, spill, chrom_files, progress, **read)
    if not chrom_files:
        filtered = FORMATS[fmt].has_context and context != "all"
        raise ValueError(f"no rows with coverage{f' in context {context}' if filtered else ''} "
                         f"in {', '.join(map(str, files))}; nothing to ingest")
    samples = existing.samples if existing is not None else []
    column = samples.index(sample) if sample in samples else len(samples)
    samples = samples[:column] + [sample] + samples[column + 1:]
    sample_attrs = dict(existing.attrs["samples"]) if existing is not None else {}
    sample_attrs[sample] = {**provenance, "ingested": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                            "tool_version": __version__}
    chunk_size = chunk_size or (existing.chunk_size if existing is not None else DEFAULT_CHUNK_SIZE)
    attrs = {"format": COUNTS_FORMAT, "format_version": COUNTS_VERSION, "bin_size": bin_size,
             "chunk_size": chunk_size, "tool_version": __version__, "samples": sample_attrs}
    old_chroms = existing.chromosomes if existing is not None else []
    chromosomes = []
    for chrom in old_chroms + [c for c in chrom_files if c not in old_chroms]:
        if existing is not None and chrom in old_chroms:
            old = read_chromosome(existing, chrom)
        else:
            old = (np.zeros(0, np.int64), np.zeros((0, len(samples)), np.int64), np.zeros((0, len(samples)), np.int64))
        if chrom in chrom_files:
            bins, meth, cov = _merge_replicates(chrom_files[chrom])
            report.chromosomes.append(chrom)
            report.n_bins += bins.size
        else:
            bins = meth = cov = np.zeros(0, np.int64)
        position, m, c = _merge_into(old[0], old[1], old[2], column, bins * bin_size, meth, cov)
        if c.size and c.max() > COUNT_MAX:  # each row fits the store's uint32; a bin's sum may not
            at = np.unravel_index(np.argmax(c), c.shape)
            raise ValueError(f"{chrom}: the bin at {position[at[0]]:,} sums coverage {c[at]:,}, more than the "
                             f"store's uint32 holds ({COUNT_MAX:,}); use a smaller --bin-size")
        progress(f"writing {chrom}: {position.size:,} bins")
        if position.size:
            write_chromosome(root, chrom, position, m, c, samples, chunk_size,
                             {**attrs, "chromosome": chrom})
            chromosomes.append(chrom)
    finalize(root, {**attrs, "chromosomes": chromosomes})
