"""Per-bin signal tracks as bigWig files, for IGV and the UCSC browser (`streambhmm tracks`):
each sample's methylation fraction, and the posterior probability of chosen states under a
model.

A bin is one entry (its start to its end, clipped to the chromosome's length); bins without
coverage have no entry (a gap in the browser, not a zero). The chromosome lengths in the
header are the store's bin axes (the last bin's end) unless a chrom.sizes file gives them.
Files are written with pyBigWig (the UCSC library's format, zoom levels included) to a
temporary name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..io.blocks import text_lines
from ..io.inputs import readable_twice
from ..io.outputs import defer_rename, held_temporary, rename_into_place
from ..io.store import CountsStore
from .chains import map_posteriors
from .messages import Params


BIGWIG_MAX_LENGTH = 2**32 - 1  # bigWig headers hold chromosome lengths as 32-bit unsigned integers


MAX_CHROM_SIZES_BYTES = 256 << 20  # 10 million contigs: the largest assemblies' have a few million


def _too_large(name: str) -> str:
    return f"{name}: more than {MAX_CHROM_SIZES_BYTES >> 20} MiB, too large for a chrom.sizes file: is it the file?"


def read_chrom_sizes(path, bigwig: bool = True) -> dict[str, int]:
    """{chrom: length} from a UCSC chrom.sizes file (name, length; tab- or space-separated);
    ``bigwig``: for a bigWig's header, which bounds the lengths."""
    sizes, lines = {}, {}
    # read once (a shell's <(...) or a FIFO), then the file closed before a refusal is raised
    with readable_twice(str(path), MAX_CHROM_SIZES_BYTES, _too_large) as readable, \
            contextlib.closing(text_lines(readable)) as read:
        numbered = list(read)
    for number, line, fields in numbered:
        if not fields or line.startswith("#"):
            continue
        if len(fields) < 2 or not (fields[1].isascii() and fields[1].isdigit()):
            raise ValueError(f"{path}, line {number}: expected 'chrom length', got {line[:200]!r}")
        if bigwig and int(fields[1]) > BIGWIG_MAX_LENGTH:
            raise ValueError(f"{path}, line {number}: {fields[0][:100]} is {int(fields[1]):,} bp long; a bigWig "
                             f"holds chromosomes of at most {BIGWIG_MAX_LENGTH:,} bp: {line[:200]!r}")
        if fields[0] in sizes:
            raise ValueError(f"{path}, line {number}: {fields[0][:100]} is listed again (first on line "
                             f"{lines[fields[0]]}): {line[:200]!r}")
        sizes[fields[0]], lines[fields[0]] = int(fields[1]), number
    if not sizes:  # "has no 'chr22'" would blame a line, not the file (an empty pipe)
        raise ValueError(f"{path}: no chromosome sizes in it (empty?); expected lines 'chrom length'")
    return sizes


@dataclass(frozen=True)
class ChromSizes:
    """A chrom.sizes file as read (read_chrom_sizes), named as the user named it. The commands
    read it before they take the store's lock: a FIFO without a writer held the lock, and a
    commit waited behind it (a helper's audit)."""

    path: str
    sizes: dict

    @classmethod
    def read(cls, path, bigwig: bool = True) -> "ChromSizes":
        return cls(str(path), read_chrom_sizes(path, bigwig))

    def __str__(self) -> str:
        return "standard input" if self.path == "-" else self.path

    def __fspath__(self) -> str:  # an input the outputs must not replace (io.outputs.Inputs)
        return self.path


def chromosome_lengths(store: CountsStore, chrom_sizes=None, bigwig: bool = True, unlisted=()) -> dict[str, int]:
    """Each chromosome's length: from the UCSC chrom.sizes file ``chrom_sizes`` (a path, or a
    ChromSizes read already) where given (``bigwig``: for a bigWig's header, read_chrom_sizes),
    each refused when the store's data reach past it; else the end of the store's last bin
    (also for the chromosomes ``unlisted`` the file need not list)."""
    if isinstance(chrom_sizes, ChromSizes):
        sizes = chrom_sizes.sizes
    else:
        sizes = read_chrom_sizes(chrom_sizes, bigwig) if chrom_sizes else None
    unlisted = set(unlisted)
    missing = [chrom for chrom in store.chromosomes if sizes is not None and chrom not in sizes
               and chrom not in unlisted]
    if missing:  # a spike-in (lambda, pUC19) is in no assembly's chrom.sizes
        raise ValueError(f"{chrom_sizes} has no {', '.join(map(repr, missing[:5]))[:300]}"
                         f"{f' or {len(missing) - 5:,} more' if len(missing) > 5 else ''}, which the store has: add a "
                         f"line 'NAME LENGTH' for each (a spike-in's length is its sequence's), or leave "
                         f"{'it' if len(missing) == 1 else 'them'} out of the store (ingest --exclude-chromosomes)")
    lengths = {}
    for chrom in store.chromosomes:
        axis_end = store.n_bins(chrom) * store.bin_size
        if sizes is None or chrom not in sizes:
            lengths[chrom] = axis_end
        elif sizes[chrom] <= axis_end - store.bin_size:
            raise ValueError(f"{chrom_sizes} gives {chrom} {sizes[chrom]:,} bp, but {store.path} has data on {chrom} up "
                             f"to its bin {axis_end - store.bin_size:,}-{axis_end:,}: the sizes are of another "
                             f"assembly than the data's")
        else:
            lengths[chrom] = sizes[chrom]
    return lengths


def safe_name(label: str) -> str:
    """A state label as part of a file name (high:H1|low:IMR90 -> high-H1_low-IMR90)."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", label.replace(":", "-"))


BIGWIG_HEAD = (0x888FFC26).to_bytes(4, "little")  # how a bigWig begins (its magic number), and ends
# Bytes per entry of a bigWig: 7.6 on IMR90 chr22's 100 bp bins, 13-50 on sparse bins (RRBS, DSS's
# examples: a zoom record each). A lone file is checked at the dense rate, a floor (libBigWig aborted
# at 1.1 bytes a bin free; short of room above it, it wrote a file cut short, which finish refuses);
# files written side by side at the rate a file of the run measured, else at the sparse one.
DENSE_ENTRY_BYTES = 6.0
SPARSE_ENTRY_BYTES = 64.0


def bigwig_entries(store: CountsStore, samples) -> int:
    """At most the entries of a bigWig over the bins where one of ``samples`` has reads (from
    the chunk summaries): their bins with reads, summed, and no more than the store's bins."""
    n_bins = sum(store.n_bins(chrom) for chrom in store.chromosomes)
    return min(int(store.bins_with_reads(list(samples)).sum()), n_bins)


def check_bigwig_room(directory, shown, n_files: int = 0, n_entries: int = 0, entry_bytes: float = 0.0) -> None:
    """Refuse bigWigs the disk of ``directory`` has no room for: ``n_files`` new files, or
    ``n_entries`` entries of ``entry_bytes`` each (and a quarter more). libBigWig meeting a full
    disk aborted the process (`malloc(): invalid size`, a double free, a segmentation fault)
    or wrote a file cut short with exit 0 (helpers' audits)."""
    fs = os.statvfs(directory)
    if n_files and fs.f_files and fs.f_favail < n_files + 2:  # + a scratch directory and its mark
        raise ValueError(f"{shown}: no room in {Path(directory).resolve()} for {n_files} new files "
                         f"({fs.f_favail} files are free); nothing was written")
    need, free = n_entries * entry_bytes * 1.25 + (64 << 10), fs.f_bavail * fs.f_frsize
    if n_entries and need > free:
        raise ValueError(f"{shown}: no room in {Path(directory).resolve()} for the bigWig data (about "
                         f"{need / 2**20:,.1f} MiB for {n_entries:,} bins, and {free / 2**20:,.1f} MiB are free); "
                         f"nothing was written. Free space there, or write the tracks elsewhere")


class BigWigWriter:
    """One bigWig file written chromosome by chromosome in the header's order; entries of a
    chromosome arrive in position order, chunk by chunk. Written under a locked temporary
    name beside ``path`` (io.outputs), or into ``scratch``, a locked directory of the caller's
    that holds a set of files put in place together (no descriptor held per file)."""

    def __init__(self, path, lengths: dict[str, int], bin_size: int, scratch: Path | None = None):
        import pyBigWig

        self.path = Path(path)
        self.lengths, self.bin_size = lengths, bin_size
        self._temporary = contextlib.ExitStack()  # pyBigWig writes our locked temporary (io.outputs) by name
        if scratch is None:
            self.tmp, self._fd = self._temporary.enter_context(held_temporary(self.path))
        else:
            self.tmp, self._fd = Path(scratch) / self.path.name, None
        self.file = pyBigWig.open(str(self.tmp), "w")
        if self.file is not None and not self.tmp.exists():  # no file made (no inode left): addHeader would crash
            self.file = None
        if self.file is None:  # pyBigWig gives None, not an error, when it cannot open the file
            self._temporary.close()
            raise ValueError(f"{self.path}: cannot be written (pyBigWig could not open {self.tmp.name} in "
                             f"{self.path.parent})")
        self.file.addHeader(list(lengths.items()), maxZooms=10)
        self.entries, self.size = 0, 0  # bytes, once finished

    def add(self, chrom: str, starts: np.ndarray, values: np.ndarray) -> None:
        """Bins starting at ``starts`` (bp, ascending), one value each (NaN: no entry)."""
        keep = np.isfinite(values) & (starts < self.lengths[chrom])
        starts, values = starts[keep].astype(np.int64), values[keep].astype(np.float64)
        if not starts.size:
            return
        # the last bin may pass the chromosome's end: its entry is clipped
        whole = starts + self.bin_size <= self.lengths[chrom]
        if whole.all():
            self.file.addEntries(chrom, starts, values=values, span=self.bin_size)
        else:
            self.file.addEntries([chrom] * int(starts.size), starts,
                                 ends=np.minimum(starts + self.bin_size, self.lengths[chrom]), values=values)
        self.entries += int(starts.size)

    def finish(self) -> None:
        """Complete the file, still under its temporary name (put_in_place renames it), and
        check that it ends as a bigWig does: libBigWig says nothing of a write that failed."""
        self.file.close()
        self.file = None
        with open(self.tmp, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(size - len(BIGWIG_HEAD), 0))
            whole = size > 64 and fh.read() == BIGWIG_HEAD
        self.size = size
        if not whole:
            fs = os.statvfs(self.tmp.parent)  # before the temporary goes
            self._temporary.close()  # removes the temporary
            raise ValueError(f"{self.path}: the bigWig could not be written whole ({size:,} bytes written, "
                             f"{fs.f_bavail * fs.f_frsize / 2**20:,.1f} MiB free in {self.path.parent.resolve()}: "
                             f"a full disk?); it is not put in place")

    def put_in_place(self) -> None:
        """Rename the finished file into place (in a written_together block, when that ends)."""
        if self._fd is not None and defer_rename(self.tmp, self._fd, self.path, self._temporary):
            return
        fd = self._fd if self._fd is not None else os.open(self.tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            rename_into_place(fd, self.tmp, self.path)
        finally:
            if self._fd is None:
                os.close(fd)
        self._temporary.close()

    def close(self) -> None:
        self.finish()
        self.put_in_place()

    def abort(self) -> None:
        if self.file is not None:
            self.file.close()
        self._temporary.close()  # removes the temporary


def write_methylation(store: CountsStore, sample: str, path, lengths: dict, min_coverage: int = 1,
                      progress=None, scratch: Path | None = None) -> BigWigWriter:
    """The methylation fraction (methylated / covered reads) of each bin of ``sample`` with at
    least ``min_coverage`` reads, one chunk in memory at a time (``progress(done, total)``
    after each); returns the finished writer (its file still a temporary, in ``scratch`` if
    given: put_in_place)."""
    writer = BigWigWriter(path, lengths, store.bin_size, scratch)
    refs = [ref for chrom in store.chromosomes for ref in store.chunk_refs(chrom, [sample])]
    try:
        for done, ref in enumerate(refs, 1):
            meth, cov = ref.read()
            with np.errstate(invalid="ignore", divide="ignore"):
                fraction = np.where(cov[:, 0] >= max(min_coverage, 1), meth[:, 0] / cov[:, 0], np.nan)
            writer.add(ref.chrom, ref.positions(), fraction)
            if progress is not None:
                progress(done, len(refs))
    except BaseException:
        writer.abort()
        raise
    writer.finish()
    return writer


def _chunk_posteriors(post, data, states: tuple):
    """A chunk's kept bins' positions and posteriors of ``states`` (in a task, map_posteriors)."""
    return data.ref.positions(data.rows), post[:, list(states)].astype(np.float32)


def write_posteriors(store: CountsStore, hmm, client, samples: list[str], states: list[int], paths: list,
                     lengths: dict, progress=None, scratch: Path | None = None) -> list[BigWigWriter]:
    """The posterior of each of ``states`` (one file each, ``paths``) in every bin the
    ``samples`` cover, computed on Dask with exact messages between chunks (as decoding);
    returns the finished writers (their files still temporaries, in ``scratch`` if given:
    put_in_place)."""
    writers = []
    try:
        writers = [BigWigWriter(path, lengths, store.bin_size, scratch) for path in paths]
        for ref, (positions, post) in map_posteriors(store, samples, Params.of(hmm), client, _chunk_posteriors,
                                                     (tuple(states),), f"the posterior tracks of {store.path}",
                                                     progress):
            for k, writer in enumerate(writers):
                writer.add(ref.chrom, positions, post[:, k])
    except BaseException:
        for writer in writers:
            writer.abort()
        raise
    for writer in writers:
        writer.finish()
    return writers
