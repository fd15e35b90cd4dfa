"""Methylation call formats: every format becomes rows of (chromosome, 0-based position,
methylated, coverage). The catalog of formats is in catalog.py, their detection in
detect.py, the reading options in options.py and the reading itself (fast, block by block)
in readers.py; here: a file's rows read in its format."""

from __future__ import annotations

import re
from typing import Iterator

from .catalog import CONTEXTS, FORMATS, Format
from .detect import detect_common_format, detect_format, fitting_formats, preamble
from .inputs import check_input, check_replicates
from .options import ReadOptions, columns_layout
from .readers import read_layout
from .rows import BLOCK_BYTES, FormatError, ReadTally, Rows, Settings, quoted

__all__ = ["CONTEXTS", "FORMATS", "Format", "FormatError", "ReadOptions", "Rows", "check_input", "records_context",
           "check_replicates", "detect_common_format", "detect_format", "quoted", "read_rows"]


def records_context(fmt: str, columns) -> bool:
    """Whether the rows of format ``fmt`` say each cytosine's context; ``columns``: --columns'
    roles (ReadOptions.columns' pairs, or a store's record of them, a mapping), or None."""
    return FORMATS[fmt].has_context or "context" in dict(columns or ())


def settings_for(fmt: str, context: str, options: ReadOptions) -> Settings:
    """The row selection for one format, or a ValueError for options it cannot honour."""
    spec = FORMATS[fmt]
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if context in ("CHG", "CHH") and not records_context(fmt, options.columns):
        raise ValueError(f"--context {context}: format {fmt} records no cytosine context, so its rows cannot be "
                         f"selected by context (use CG, the default, for files of CpG sites, or all)")
    strand_column = any(role == "strand" for role, _ in options.columns or ())
    if options.merge_strands and spec.strands == "unknown" and not strand_column:
        raise ValueError(f"--merge-strands: format {fmt} has one row per cytosine but no strand column, so the "
                         f"two C's of a CpG cannot be told from neighbouring CpGs (CGCG) without the sequence")
    return Settings(context, options.merge_strands, options.min_coverage, options.chromosomes,
                    options.exclude_chromosomes, options.renaming())


def _check_declared_context(path, pre, context: str, label: str) -> None:
    """Refuse a file whose track line says it holds CHG or CHH calls (MethylDackel writes a
    bedGraph per context, NAME_CHG.bedGraph, its description "... CHG methylation levels")
    where its rows, which name no context, would be stored as CpGs: they were, silently."""
    if pre.track is None or context != "CG":
        return
    declared = re.search(r"\b(CpG|CHG|CHH) methylation levels", pre.track[1])  # the prefix may hold anything
    if declared is not None and declared.group(1) != "CpG":
        raise FormatError(path, pre.track[0], pre.track[1],
                          f"the track line says the file holds {declared.group(1)} calls, which --context CG (the "
                          f"default) would store as CpGs: ingest the CpG file (MethylDackel writes one per "
                          f"context), or pass --context all to keep these rows", label)


def read_rows(path, fmt: str, context: str = "CG", *, options: ReadOptions | None = None,
              detected: bool = False, block_bytes: int = BLOCK_BYTES, tally: ReadTally | None = None
              ) -> Iterator[Rows]:
    """Yield validated rows of ``path`` per chromosome run, in file order (positions in any
    order within a chromosome).

    Raises :class:`FormatError` (file, line, text, format) for a malformed line,
    non-integer, negative, too large or inconsistent counts, a repeated row (chromosome,
    position and strand), a chromosome that reappears after another, an invalid
    chromosome name, or a file without data lines; ValueError for options the format
    cannot honour. ``tally`` (optional) adds up the rows left out by --min-coverage.
    """
    options = options or ReadOptions()
    settings = settings_for(fmt, context, options)
    label = f"{fmt}, {'detected' if detected else 'given'}"
    pre = preamble(path, header=options.header)
    spec = FORMATS[fmt]
    other = next((f.name for f in FORMATS.values() if pre.names in f.headers), None)
    if other is not None and pre.names not in spec.headers and fmt != "columns":
        raise FormatError(path, pre.skip, pre.header, f"this is the header line of format {other}, not {fmt}; "
                                                      f"pass --format {other} (or describe it with --columns)", label)
    if not pre.data:
        raise FormatError(path, None, None, "the file is empty (no data lines)", label)
    if not records_context(fmt, options.columns):
        _check_declared_context(path, pre, settings.context, label)
    line, text = pre.data[0]
    n_fields = len(text.split())
    layout = columns_layout(options, n_fields) if fmt == "columns" else spec.layout(n_fields)
    try:
        if layout is None:
            expected = " or ".join(str(la.n_fields) for la in spec.layouts)
            raise FormatError(path, line, text, f"malformed {fmt} line: expected {expected} fields, found {n_fields}",
                              label)
        variable = fmt == "columns" or len(spec.layouts) > 1
        yield from read_layout(path, fmt, label, layout, settings, pre.skip, variable, block_bytes, tally)
    except FormatError as exc:
        if detected or exc.line != line:
            raise
        raise FormatError(exc.path, exc.line, exc._given, exc.message + _format_hint(path, fmt), exc.fmt) from None


def _format_hint(path, given: str) -> str:
    """The formats to try when a --format given fails on the file's first data line (a
    helper's trial: the refusals named none); "" when no other fits."""
    found = [name for name in fitting_formats(path) if name != given]
    if len(found) == 1:
        return f"; the file fits format {found[0]} instead ({FORMATS[found[0]].columns}): pass --format {found[0]}"
    return f"; the file fits the formats {' and '.join(found)} instead: pass --format with the one it is" \
        if found else ""
