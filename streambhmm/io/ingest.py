"""Ingest methylation calls into a counts store: parse, validate, bin, stage, commit.

Rows are binned into fixed bins (a bin's 0-based start is floor(pos0 / bin) * bin) and a
bin's counts are the sums over its rows, both strands. All files of one call are
replicates of one sample and are summed. The rows stream into a SampleWriter, which stages
the sample's chunks beside the store, one chunk in memory; the commit then puts them into
the sample's own column (store.py). Nothing else in the store is rewritten, so an ingest
costs what its own sample's data cost, whatever the number of samples already there.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .. import __version__
from .formats import (ReadOptions, check_input, check_replicates, detect_common_format, read_rows,
                      records_context, settings_for)
from .rows import ReadTally, shown
from .names import Spellings, check_sample_name
from .storage import Location
from .store import (DEFAULT_CHUNK_SIZE, SUMS, CountsStore, SampleWriter, StoreError, locked, natural_sorted,
                    needs_recovery, open_store)
from .store.schema import read_attributes


# a file of at least this many rows, none without a methylated read, lists methylated cytosines
# only (Lister et al. 2009's mc files), and `hmr` refuses its sample: none of 1,000 puts their
# share below 0.3% (the rule of three, 95%), where the 24 samples of ../shared/data/real that
# list every covered CpG hold 3.3-86% (docs/methods/hmr-pmd.md)
METHYLATED_ONLY_ROWS = 1_000


@dataclass
class IngestReport:
    sample: str
    format: str
    files: list[str]
    replaced: bool = False
    unchanged: bool = False
    stored_by: str | None = None  # unchanged: the ``run`` that stored the sample (None: none was named)
    chromosomes: list[str] = field(default_factory=list)
    n_bins: int = 0
    n_rows: int = 0
    n_unmethylated_rows: int = 0  # rows without a methylated read
    file_rows: list = field(default_factory=list)  # per file: [rows, rows without a methylated read]
    left_out: ReadTally = field(default_factory=ReadTally)  # rows left out, by reason

    @property
    def below_min_coverage(self) -> int:
        return self.left_out.below_min_coverage


def file_sha256(path, stop_check: Callable[[], None] = lambda: None) -> str:
    """The file's SHA-256 (``stop_check()`` called every 64 MiB: see ingest)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for i, block in enumerate(iter(lambda: fh.read(1 << 20), b"")):
            if i % 64 == 0:
                stop_check()
            digest.update(block)
    return digest.hexdigest()


def _plain(name: str) -> str:
    """A chromosome's name as conventions differ on it: no 'chr', upper case, M for MT."""
    plain = name.upper().removeprefix("CHR")
    return "M" if plain == "MT" else plain


def _unmatched_patterns(sample: str, options: ReadOptions, names: set) -> str:
    """What to say of --chromosomes and --exclude-chromosomes patterns that match no chromosome
    of the sample's files, ``names`` as the store names them ('' when each matches one): a
    helper's 'MT,Lambda' kept chrM and lambda, unsaid. Names like a pattern in another
    convention (chrM for MT) are listed first."""
    said, missed = [], []
    for flag, patterns in (("--chromosomes", options.chromosomes or ()),
                           ("--exclude-chromosomes", options.exclude_chromosomes)):
        these = [p for p in patterns if not any(fnmatch.fnmatchcase(name, p) for name in names)]
        if these:
            said.append(f"{flag} {', '.join(these)[:200]} matched no chromosome of the files")
            missed += these
    if not said:
        return ""
    ordered = natural_sorted(names)
    like = [name for name in ordered if any(fnmatch.fnmatchcase(_plain(name), _plain(p)) for p in missed)]
    named = ", ".join((like + [n for n in ordered if n not in like])[:12]) + \
        (f" and {len(names) - 12:,} more" if len(names) > 12 else "")
    renamed = (f" after --chromosome-names {Path(options.chromosome_names).name}"
               if options.chromosome_names else "")
    return (f"sample {sample}: {'; '.join(said)} (their chromosomes{renamed}: {named[:300]}; patterns match these "
            f"names exactly, case too)")


DEEPER = 20  # a chromosome this many times deeper than the rest, with a share of the reads ...
DEEP_SHARE = 0.01  # ... of at least this, is said (a mitochondrion, a spike-in)


def deep_chromosomes(sample: str, reads: dict, covered: dict) -> str:
    """What to say of chromosomes read far deeper than most of the sample's bins, by each one's
    ``reads`` and ``covered`` bins ('' when none): a helper's chrM at 5,000 reads per CpG held
    14% of the reads, and moved EM's unmethylated state from 0.08 to 0.05 (a bin's likelihood
    sharpens with its reads). Most bins' depth is that of the chromosome of the median covered
    bin, so that two deep chromosomes (chrM, a spike-in) do not hide each other."""
    chroms = [c for c in reads if covered[c]]
    if len(chroms) < 2:
        return ""
    depths = np.array([reads[c] / covered[c] for c in chroms])
    order = np.argsort(depths)
    bins = np.cumsum([covered[chroms[i]] for i in order])
    typical = depths[order[np.searchsorted(bins, bins[-1] / 2)]]
    total = sum(reads.values())
    deep = [(c, f"{c} ({d:,.0f} reads per covered bin; {reads[c] / total:.1%} of the reads)")
            for c, d in zip(chroms, depths) if d > DEEPER * typical and reads[c] >= DEEP_SHARE * total]
    if not deep:
        return ""
    return (f"sample {sample}: {', '.join(said for _, said in deep[:5])[:400]} "
            f"{'is' if len(deep) == 1 else 'are'} read far deeper than most of the sample's bins ({typical:,.1f} "
            f"reads per covered bin): a mitochondrion or a spike-in? A fit by EM (fit --method em, --polish-em, dmr) "
            f"leans on such bins, whose likelihoods sharpen with their reads; to leave them out, ingest (or batch) "
            f"again with --exclude-chromosomes {','.join(chrom for chrom, _ in deep[:5])[:200]}")


def _bin_file(path, fmt, context, bin_size, writer: SampleWriter, progress, spellings: Spellings, **read
              ) -> tuple[int, int]:
    """Stream one file's rows into ``writer``; returns the rows read and those of them without
    a methylated read. A chromosome spelt
    otherwise in ``spellings`` (the store, the files before) is refused. ``progress(bytes)``:
    the bytes of the file read."""
    n_rows = n_unmethylated = 0
    for rows in read_rows(path, fmt, context, **read):
        spellings.add(rows.chrom, str(path))
        writer.add(rows.chrom, rows.pos0 // bin_size, rows.methylated, rows.coverage)
        n_rows += rows.pos0.size
        n_unmethylated += int(np.count_nonzero((rows.methylated == 0) & (rows.coverage > 0)))
        progress(rows.read_bytes)
    return n_rows, n_unmethylated


def ingest(files, sample: str, store, fmt: str = "auto", bin_size: int = 100, context: str = "CG",
           chunk_size: int | None = None, echo: Callable[[str], None] = lambda message: None,
           progress: Callable[..., None] = lambda done, total, note=None: None,
           options: ReadOptions | None = None, stop_check: Callable[[], None] = lambda: None,
           run: str | None = None, turn: Callable[[], None] = lambda: None) -> IngestReport:
    """Add (or replace) ``sample`` in the counts store ``store`` from replicate ``files``.

    ``echo`` receives messages for the user; ``progress(done, total, note)`` the bytes of
    the files read (compressed ones for a compressed file), out of their size on disk;
    ``options`` are the reading options (strand merge, filters, --columns). Ingests of
    different samples into one store may run at once. ``stop_check()`` is called as the
    files are hashed and read, and right before the commit point; what it raises stops the
    ingest with nothing stored (batch's stop, which reaches its tasks on other processes).
    ``run`` names the command run that stores the sample (batch's: a task run again after its
    worker was lost finds the sample its first try stored, and says which run stored it).
    ``turn()`` is called once the sample is staged, before the store's lock is taken for the
    commit (batch's: its samples take their columns in the manifest's order).
    """
    files = _checked_arguments(files, sample, bin_size)
    options = options or ReadOptions()
    tally = ReadTally()
    read = {"options": options, "detected": fmt == "auto" and options.columns is None, "tally": tally}
    fmt = detect_common_format(files, fmt, options)
    settings_for(fmt, context, options)  # options the format cannot honour stop here, before any work
    store = Location.of(store)
    report = IngestReport(sample=sample, format=fmt, files=[str(f) for f in files])
    provenance = {
        "files": [{"path": str(f.resolve()), "sha256": file_sha256(f, stop_check), "bytes": f.stat().st_size}
                  for f in files],
        "format": fmt,
        "context": context,
        "options": options.as_dict(),
    }
    check_replicates(files)
    existing = _existing_store(store, bin_size, chunk_size)
    recounting = False  # the same files read again to count their rows: not a replacement to warn of
    if existing is not None:
        if sample in existing.meta.samples:
            previous = {k: existing.meta.samples[sample].get(k) for k in provenance}
            bins = _indexed_bins(existing, sample)
            damaged = bins is None
            same = previous == provenance and not damaged
            # a sample ingested before each file's rows were counted is read again to count them (hmr needs them)
            recounting = same and "file_rows" not in existing.meta.samples[sample]
            if same and not recounting:
                stored = existing.meta.samples[sample]
                report.unchanged, report.stored_by = True, stored.get("run")
                report.n_rows, report.n_unmethylated_rows = stored.get("rows", 0), stored.get("unmethylated_rows", 0)
                report.n_bins = bins
                echo(f"sample {sample}: same files, format, context and options as already stored; "
                     f"store unchanged")
                return report
            if damaged:
                echo(f"sample {sample}: the store's index of it is damaged; ingesting it again")
            elif recounting:
                echo(f"sample {sample}: same files as already stored, ingested before each file's rows were "
                     f"counted; ingesting them again to count them")
    chunk_size = existing.chunk_size if existing is not None else chunk_size or DEFAULT_CHUNK_SIZE
    spellings = existing.spellings(sample) if existing is not None else Spellings()
    sizes = [f.stat().st_size for f in files]
    with SampleWriter(store, bin_size, chunk_size) as writer:
        for i, f in enumerate(files):
            def read_bytes(done: int, before: int = sum(sizes[:i]), name: str = f.name) -> None:
                stop_check()
                progress(before + done, sum(sizes), name)
            n_rows, n_unmethylated = _bin_file(f, fmt, context, bin_size, writer, read_bytes, spellings, **read)
            report.n_rows += n_rows
            report.n_unmethylated_rows += n_unmethylated
            report.file_rows.append([n_rows, n_unmethylated])
        refused = methylated_only_in(provenance["files"], report.file_rows, report.n_rows, report.n_unmethylated_rows)
        if refused:
            echo(f"note: no row of {_files_named(sample, refused)} that has reads is without a methylated read: "
                 f"{_they(refused)} methylated cytosines only (as Lister et al. 2009's mc files do), so `hmr` will "
                 f"refuse sample {shown(sample)}, for want of the unmethylated CpGs at the core of every HMR")
        progress(sum(sizes), sum(sizes), f"committing sample {sample}")
        writer.flush()
        covered = writer.covered_by_chromosome
        if not any(covered.values()):
            filtered = records_context(fmt, options.columns) and context != "all"
            said = tally.said(context, options.min_coverage)
            raise ValueError(f"no rows with coverage{f' in context {context}' if filtered else ''} "
                             f"in {', '.join(map(str, files))}{f' (left out: {said})' if said else ''}; "
                             f"nothing to ingest")
        unmatched = _unmatched_patterns(sample, options, tally.seen)
        if unmatched:
            echo(f"warning: {unmatched}")
        report.chromosomes = [c for c, n in covered.items() if n]
        deep = deep_chromosomes(sample, {c: sum(int(s[SUMS][1]) for s in chunks.values())
                                         for c, chunks in writer.summaries.items()}, covered)
        if deep:
            echo(f"note: {deep}")
        report.n_bins = sum(covered.values())
        report.left_out = tally
        turn()
        report.replaced = writer.commit(sample, {
            **provenance, "rows": report.n_rows, "unmethylated_rows": report.n_unmethylated_rows,
            "file_rows": report.file_rows,
            "ingested": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "tool_version": __version__, **({"run": run} if run else {})}, ends_command=True,
            before_commit=stop_check)
    if report.replaced and not recounting:
        # a newcomer ingesting replicates one by one under one name keeps only the last
        echo(f"sample {sample} already existed and was replaced by these files' counts (to sum replicates "
             f"into one sample, give all their files to one ingest)")
    return report


def _checked_arguments(files, sample: str, bin_size: int) -> list[Path]:
    """The input files as paths, each checked, with the sample's name and the bin size."""
    files = [Path(f) for f in files]
    if not files:
        raise ValueError("no input files")
    for f in files:
        check_input(f)
    check_sample_name(sample)
    if bin_size < 1:
        raise ValueError(f"--bin-size must be >= 1, got {bin_size}")
    return files


def _indexed_bins(store: CountsStore, sample: str) -> int | None:
    """The bins with reads of ``sample`` in ``store``, from its index; None when that index is
    damaged (CountsStore.summary refuses it)."""
    try:
        return int(store.bins_with_reads([sample])[0])
    except StoreError:
        return None


def _existing_store(store: Location, bin_size: int, chunk_size: int | None):
    """The store as it is (None when there is none yet), refused when its bins or chunks are
    not those asked for."""
    if not store.exists() and not needs_recovery(store):
        return None  # nothing to read or to complete: no lock file for a store an ingest may never make
    if not needs_recovery(store):
        read_attributes(store)  # a directory that is no store is refused before a lock file is made beside it
    with locked(store, shared=True):
        existing = open_store(store) if store.exists() else None
    if existing is not None:
        if existing.bin_size != bin_size:
            raise StoreError(f"{store} uses bin size {existing.bin_size}; cannot ingest with --bin-size {bin_size}")
        if chunk_size not in (None, existing.chunk_size):
            raise StoreError(f"{store} has chunks of {existing.chunk_size:,} bins, fixed when it was created; "
                             f"ingest into a new store to use --chunk-size {chunk_size}")
    return existing


# -- what an ingest counted, read back (hmr, regions --preset hmr, info) ----------------------
def unmethylated_rows(store, sample: str) -> tuple[int, int] | None:
    """(rows ingested, those without a methylated read) of a sample, as its ingest counted
    them; None for a store ingested before they were counted."""
    record = store.meta.samples[sample]
    rows, free = record.get("rows"), record.get("unmethylated_rows")
    return (rows, free) if isinstance(rows, int) and isinstance(free, int) else None


NAMED_AT_MOST = 3  # samples, and files of a sample, that a refusal names (24 samples took 2,371 characters)


def methylated_only_in(files, file_rows, rows, unmethylated) -> list[tuple[str | None, int]]:
    """(file name, rows) of the ``files`` (a sample's record's) whose ``file_rows`` ([rows,
    rows without a methylated read] each) say they list methylated cytosines only:
    METHYLATED_ONLY_ROWS rows or more, none without a methylated read; else [(None, rows)]
    when all of them together do (``rows`` and ``unmethylated``: the sample's; None where a
    store ingested before they were counted has none)."""
    if isinstance(files, list) and isinstance(file_rows, list) and len(file_rows) == len(files):
        paths = [str(f.get("path", "?")) if isinstance(f, dict) else "?" for f in files]
        names = [Path(p).name for p in paths]
        names = paths if len(set(names)) < len(names) else names  # replicates of one name in other folders
        counts = [c if isinstance(c, list) and len(c) == 2 and all(isinstance(n, int) for n in c) else (0, 0)
                  for c in file_rows]  # a record edited by hand: its files are not judged
        found = [(shown(name), n) for name, (n, free) in zip(names, counts) if n >= METHYLATED_ONLY_ROWS and not free]
        if found:
            return found
    counted = isinstance(rows, int) and isinstance(unmethylated, int)
    return [(None, rows)] if counted and rows >= METHYLATED_ONLY_ROWS and unmethylated == 0 else []


def _files_named(sample: str, files: list[tuple[str | None, int]]) -> str:
    """The files of methylated_only_in in words."""
    if files[0][0] is None:
        return f"the files ingested for {shown(sample)} ({files[0][1]:,} rows)"
    listed = "; ".join(f"{name} ({rows:,} rows)" for name, rows in files[:NAMED_AT_MOST])
    unnamed = len(files) - NAMED_AT_MOST
    more = f" and {unnamed:,} more file{'s' if unnamed > 1 else ''}" if unnamed > 0 else ""
    return f"{shown(sample)}'s file{'s' if len(files) > 1 else ''} {listed}{more}"


def _they(files: list[tuple[str | None, int]]) -> str:
    """The verb for the files of methylated_only_in."""
    return "it lists" if len(files) == 1 and files[0][0] is not None else "they list"


def methylated_only(store, samples, others_instead=None) -> str | None:
    """Why ``samples`` have no HMRs, and the way out (without the last full stop), where a file
    some of them were ingested from lists methylated cytosines only (Lister et al. 2009's mc
    files; a CpG without a methylated read is left out): METHYLATED_ONLY_ROWS rows or more,
    none of them without a methylated read. Such a file holds none of the unmethylated CpGs at the core of every
    HMR, and the regions of lowest methylation in it are not HMRs (on the dmrseq excerpts,
    calls at 0.17, where the MethylSeekR excerpt's average 0.10); summed with a sample's other
    replicates it adds reads to the methylated CpGs only. Rows, not bins: a deep bin of an
    HMR at 0.02 holds a methylated read almost always, a CpG's row of 20 reads in it none two
    times in three. ``others_instead``: the other way out, for the samples without such files,
    as the command says it (a function of their names)."""
    found = {s: methylated_only_in(r.get("files"), r.get("file_rows"), r.get("rows"), r.get("unmethylated_rows"))
             for s, r in ((s, store.meta.samples[s]) for s in samples)}
    lacking = {s: files for s, files in found.items() if files}
    if not lacking:
        return None
    named = " or of ".join(_files_named(s, files) for s, files in list(lacking.items())[:NAMED_AT_MOST])
    if len(lacking) > NAMED_AT_MOST:
        others = len(lacking) - NAMED_AT_MOST
        owners = "samples'" if others > 1 else "sample's"
        named += f" or of {others:,} other {owners} files"
    listed = [f for files in lacking.values() for f in files]
    others = [s for s in samples if s not in lacking]
    return (f"no row of {named} that has reads is without a methylated read: {_they(listed)} methylated "
            f"cytosines only (as Lister et al. 2009's mc files do), so the unmethylated CpGs at the core of every HMR "
            f"are missing. Ingest files that list every covered CpG, the unmethylated ones too"
            + (f", or {others_instead(others)}" if others and others_instead else ""))
