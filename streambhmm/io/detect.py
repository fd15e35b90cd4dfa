"""Detection of a call file's format from its first lines: the preamble (comments, a header
line), then the formats every inspected data line fits.

Detection looks at the first lines: leading '#', 'track' and 'browser' lines, and a line
of column names (a line whose fields after the first are not numbers), then up to
DETECT_LINES data lines. A file is given the format that every inspected line fits; when
none fits it is refused as unknown, and when several fit it is refused as ambiguous,
naming every candidate, unless ``--format`` says which."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from .blocks import text_lines
from .catalog import DETECT_LINES, FORMATS, INT, NUMBER
from .inputs import check_input
from .options import ReadOptions
from .rows import FormatError, columns_spec


def _is_header(fields: list[str]) -> bool:
    """A line of column names: its fields after the first are not numbers."""
    return bool(fields) and not any(NUMBER.fullmatch(f) for f in fields[1:])


@dataclass
class Preamble:
    """The start of a file: lines before the data, the column names, the data lines."""

    skip: int  # lines before the first data line (comments, track lines, the header, blank lines)
    track: tuple[int, str] | None  # the first 'track' or 'browser' line (number, text)
    header: str | None  # the line of column names
    data: list[tuple[int, str]]  # (line number, text) of up to DETECT_LINES data lines

    @property
    def names(self) -> tuple[str, ...] | None:
        return None if self.header is None else tuple(self.header.lower().split())


def preamble(path, header: bool = False) -> Preamble:
    """Split the start of ``path``: any number of comment, track and blank lines, the
    header, then up to DETECT_LINES data lines. With ``header`` the first line that is not a
    comment, track line or blank is the header whatever it holds."""
    skip, track, names, data = 0, None, None, []
    with contextlib.closing(text_lines(path)) as read:
        for number, text, fields in read:
            if not data and names is None:  # before the data
                if not fields or text.startswith("#"):
                    skip += 1
                    continue
                if fields[0] in ("track", "browser") and _is_header(fields):
                    track, skip = track or (number, text), skip + 1
                    continue
                if header or _is_header(fields):
                    names, skip = text, skip + 1
                    continue
            if fields:
                data.append((number, text))
                if len(data) == DETECT_LINES:
                    break
    return Preamble(skip, track, names, data)


def fitting_formats(path) -> list[str]:
    """The formats whose header (or, without one, whose lines) the file's first lines fit."""
    return _candidates(preamble(path))


def _candidates(pre: Preamble) -> list[str]:
    if pre.header is not None:
        return [f.name for f in FORMATS.values() if pre.names in f.headers]
    return _fitting(pre)


def _fitting(pre: Preamble) -> list[str]:
    """The formats every inspected data line fits, whatever the header."""
    if not pre.data:
        return []
    found = [f.name for f in FORMATS.values() if f.fits and all(f.fits(t.split()) for _, t in pre.data)]
    if pre.track is not None and "bismark-cov" in found:  # a track line marks a bedGraph, never a Bismark .cov
        found.remove("bismark-cov")
    return found


HEADER_ROLES = {
    "chrom": ("chr", "chrom", "chromosome", "seqnames", "seqname", "contig"),
    "pos": ("pos", "position", "start", "base", "loc", "coordinate"),
    "strand": ("strand", "str"),
    "context": ("context", "ctx", "context_1"),
    "meth": ("m", "mc", "x", "meth", "methylated", "numcs", "nmeth", "c_count", "mc_count", "bases_meth",
             "methylated_bases", "count_methylated"),
    "total": ("cov", "coverage", "n", "t", "total", "depth", "reads", "ct_count", "total_count", "bases_tot",
              "total_bases"),
    "unmeth": ("u", "unmeth", "unmethylated", "numts", "nunmeth", "count_unmethylated"),
}


def columns_hint(names: list[str] | None) -> str:
    """A --columns suggestion from a header's column names, where they say enough."""
    generic = "describe its columns with --columns chrom=N,pos=N,meth=N,total=N (or unmeth=N) [--zero-based]"
    if not names:
        return generic
    lowered = [n.lower() for n in names]
    roles = {}
    for role, words in HEADER_ROLES.items():
        at = next((i for i, n in enumerate(lowered) if n in words), None)
        if at is not None and at not in roles.values() and not (role == "unmeth" and "total" in roles):
            roles[role] = at
    if not all(k in roles for k in ("chrom", "pos", "meth")) or not ("total" in roles or "unmeth" in roles):
        return generic
    spec = columns_spec(roles)
    return (f"if the header means what it seems to, pass --columns {spec} (add --zero-based if the positions are "
            f"0-based: the header does not say)")


def detect_format(path) -> str:
    """The format of ``path`` from its first lines; raises :class:`FormatError` when no
    format or more than one fits."""
    check_input(path)
    pre = preamble(path)
    found = _candidates(pre)
    if pre.header is not None and not found:
        if '"' in pre.header:  # R's write.table quotes names and strings unless quote = FALSE
            bare = tuple(name.strip('"') for name in pre.names)
            known = next((f.name for f in FORMATS.values() if bare in f.headers), None)
            raise FormatError(path, pre.skip, pre.header, "unknown format: its names are in quotes, as R's "
                              "write.table writes names and strings by default (and row names first); write the "
                              "file with quote = FALSE, row.names = FALSE"
                              + (f" (its header is then format {known}'s)" if known else
                                 f"; then, {columns_hint(list(bare))}"))
        below = _fitting(pre)  # a header of the user's own above a known format's lines (a helper's modkit file)
        if len(below) == 1:  # several read the columns differently (T M against M U): the header's names say
            raise FormatError(path, pre.skip, pre.header, f"unknown format (no known format has this header line, "
                                                          f"but the data lines below it fit {below[0]}: "
                                                          f"{FORMATS[below[0]].columns}); pass --format {below[0]} if "
                                                          f"the file is that; if not, {columns_hint(pre.names)}")
        raise FormatError(path, pre.skip, pre.header, f"unknown format (no known format has this header line); "
                                                      f"{columns_hint(pre.names)}")
    if not pre.data:
        raise FormatError(path, None, None, "the file is empty (no data lines)")
    alike = _counts_alike(path, pre, found)
    if alike is not None:
        reading, why, columns = alike
        raise FormatError(path, None, None, f"ambiguous format: the first {len(pre.data)} data lines fit {found[0]} "
                                            f"({FORMATS[found[0]].columns}) and {reading}: {why}. Pass --format "
                                            f"{found[0]}, or --columns {columns} if the file holds counts")
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        listing = "; ".join(f"{name} ({FORMATS[name].columns})" for name in found)
        raise FormatError(path, None, None, f"ambiguous format: the first {len(pre.data)} data lines fit "
                                            f"{len(found)} formats: {listing}. Pass --format "
                                            f"{' or --format '.join(found)}; if it is none of them, "
                                            f"{columns_hint(None)}")
    cov = FORMATS["bismark-cov"]
    if pre.track is not None and all(cov.fits(t.split()) for _, t in pre.data):  # _fitting's rule refused it
        raise FormatError(path, pre.track[0], pre.track[1], "unknown format: the data lines fit bismark-cov "
                          f"({cov.columns}), but this line marks a bedGraph, which a Bismark .cov file never begins "
                          "with (its bedGraph has the methylation percent alone). Pass --format bismark-cov if it is "
                          "a .cov file with a track line added")
    line, text = _first_misfit(pre)
    raise FormatError(path, line, text, f"unknown format (none of {', '.join(n for n in FORMATS if n != 'columns')}"
                                        f" fits this line and those before it); {columns_hint(None)}")


DEEPER_LINES = 100_000  # data lines read further for a line that tells a format from a count file


def _counts_alike(path, pre: Preamble, found: list[str]) -> tuple[str, str, str] | None:
    """(the other reading, why the lines fit it too, its --columns) when the one format found
    fits the file's lines no better than a file of methylated and total reads that no named
    format has: such files were read as that format, their counts wrong (a helper's audit).
    Up to DEEPER_LINES lines beyond the first are read for a line that tells them apart (a
    methrix file's first 100 lines may all be of unmethylated CpGs)."""
    if pre.header is not None or len(found) != 1 or found[0] not in ("methrix", "biscuit"):
        return None
    if found == ["methrix"]:  # M > U rules out M T; M <= U on every line fits both
        def tells(f):
            return len(f) == 4 and INT.fullmatch(f[2]) and INT.fullmatch(f[3]) and int(f[2]) > int(f[3])
        alike = ("chrom pos M T (methylated, then all reads)", "col3 <= col4 on every line, as M <= T always is",
                 "chrom=1,pos=2,meth=3,total=4")
    else:  # BISCUIT writes its betas with decimals, 0.000-1.000
        def tells(f):
            return len(f) >= 5 and NUMBER.fullmatch(f[3]) and not INT.fullmatch(f[3])
        alike = ("chrom start end M T (methylated, then all reads; 0-based start)",
                 "column 4 holds only 0 and 1, written without a decimal point as BISCUIT never writes a beta",
                 "chrom=1,pos=2,meth=4,total=5 --zero-based")
    if any(tells(text.split()) for _, text in pre.data):
        return None
    last = pre.data[-1][0]
    with contextlib.closing(text_lines(path)) as read:
        for number, _, fields in read:
            if number > last + DEEPER_LINES:
                break
            if number > last and tells(fields):
                return None
    return alike


def _first_misfit(pre: Preamble) -> tuple[int, str]:
    fitting = [f for f in FORMATS.values() if f.fits]
    for line, text in pre.data:
        fitting = [f for f in fitting if f.fits(text.split())]
        if not fitting:
            return line, text
    return pre.data[0]


def detect_common_format(paths, fmt: str = "auto", options: ReadOptions | None = None) -> str:
    """One format for all files of a call: detected or given, never mixed."""
    if options is not None and options.columns is not None:
        if fmt not in ("auto", "columns"):
            raise ValueError(f"--columns describes the columns itself; it cannot be combined with --format {fmt}")
        return "columns"
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of auto, {', '.join(FORMATS)}")
        if fmt == "columns":
            raise ValueError("--format columns needs --columns chrom=N,pos=N,meth=N,total=N (or unmeth=N)")
        return fmt
    found = {str(p): detect_format(p) for p in paths}
    kinds = set(found.values())
    if len(kinds) > 1:
        listing = "; ".join(f"{p}: {k}" for p, k in found.items())
        raise ValueError(f"mixed formats in one call (replicates must share a format): {listing}")
    return kinds.pop()
