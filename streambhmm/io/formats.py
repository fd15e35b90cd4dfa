"""Methylation call formats: what each column means, detection from the content, and the
reading options. Every format becomes rows of (chromosome, 0-based position,
methylated, coverage); the reading itself (fast, block by block) is in readers.py.

Detection looks at the first lines: leading '#', 'track' and 'browser' lines, and a line
of column names (a line whose fields after the first are not numbers), then up to
DETECT_LINES data lines. A file is given the format that every inspected line fits; when
none fits it is refused as unknown, and when several fit it is refused as ambiguous,
naming every candidate, unless ``--format`` says which. See FORMATS for each
format's columns and coordinate convention.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

from .names import CONVENTIONS, NAMING, chromosome_name_problem
from .blocks import lines, open_binary
from .readers import read_layout
from .rows import BLOCK_BYTES, STRANDS, FormatError, Layout, Rows, Settings, decoded, quoted

__all__ = ["CONTEXTS", "FORMATS", "Format", "FormatError", "ReadOptions", "Rows", "check_input",
           "check_replicates", "detect_common_format", "detect_format", "quoted", "read_rows"]

CONTEXTS = ("CG", "CHG", "CHH", "all")
DETECT_LINES = 100
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
INT = re.compile(r"-?\d+")
CONTEXT_NAMES = ("CG", "CHG", "CHH")


@dataclass(frozen=True)
class Format:
    """A named format: its layouts (one per number of fields), its header line of column
    names if it has one, what its rows are per strand, and how detection recognizes a
    data line (``fits``)."""

    name: str
    columns: str  # for messages and the README: the columns and the convention
    layouts: tuple[Layout, ...]
    strands: str  # "stranded": a strand column; "merged": one row per CpG; "unknown": per-C rows, strand not given
    headers: tuple[tuple[str, ...], ...] = ()  # accepted header lines (lowercased names); required when set
    fits: Callable[[list[str]], bool] | None = None  # a data line of this format (formats without a header)

    @property
    def has_context(self) -> bool:
        return any(layout.context is not None for layout in self.layouts)

    def layout(self, n_fields: int) -> Layout | None:
        return next((la for la in self.layouts if la.n_fields == n_fields), None)


def _ints(fields, *indexes) -> bool:
    return all(INT.fullmatch(fields[i]) for i in indexes)


def _nums(fields, *indexes) -> bool:
    return all(NUMBER.fullmatch(fields[i]) for i in indexes)


def _bed_span(fields, allowed) -> bool:
    return _ints(fields, 1, 2) and int(fields[2]) - int(fields[1]) in allowed


def _fits_cov(f):
    return len(f) == 6 and _bed_span(f, (0, 1)) and _nums(f, 3) and _ints(f, 4, 5)


def _fits_dackel(f):
    return len(f) == 6 and _bed_span(f, (1, 2)) and _nums(f, 3) and _ints(f, 4, 5)


def _fits_report(f):
    return len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 3, 4) and f[5] in CONTEXT_NAMES and f[6].isalpha()


def _fits_allc(f):
    return len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 4, 5, 6) and re.fullmatch("C[ACGTN]{2}", f[3]) is not None


def _fits_methylpipe(f):
    return len(f) == 7 and f[2] in ("+", "-") and _ints(f, 1, 4, 5, 6) and f[3] in CONTEXT_NAMES


def _fits_bedmethyl(f):
    return len(f) in (11, 14) and _ints(f, 1, 2, 9) and f[5] in ("+", "-", ".") and _nums(f, 10) and \
        (len(f) == 11 or _ints(f, 11, 12, 13))


def _fits_modkit(f):
    return len(f) == 18 and _ints(f, 1, 2, 9, 11, 12, 13, 14, 15, 16, 17) and _nums(f, 10)


def _fits_cgmap(f):
    return len(f) == 8 and f[1] in ("C", "G") and _ints(f, 2, 6, 7) and f[3] in CONTEXT_NAMES and _nums(f, 5)


def _fits_biscuit(f):
    return len(f) == 5 and _bed_span(f, (1, 2)) and _nums(f, 3) and 0 <= float(f[3]) <= 1 and _ints(f, 4)


def _fits_methylseekr(f):  # chr pos T M: the total comes first, so T >= M
    return len(f) == 4 and _ints(f, 1, 2, 3) and int(f[2]) >= int(f[3])


def _fits_methrix(f):
    return len(f) == 4 and _ints(f, 1, 2, 3)


ONE = (("+", 1), ("-", -1))
# an allc header line: only older methylpy wrote one, and the one such file checked against its
# genome is 0-based, while headerless allc files are 1-based: detection names both
METHYLPY = ("chrom", "pos", "strand", "mc_class", "methylated_bases", "total_bases", "methylation_call")
BSMAP = ("chr", "pos", "strand", "context", "ratio", "eff_ct_count", "c_count", "ct_count", "rev_g_count",
         "rev_ga_count")
FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("bismark-cov", "chrom start end pct meth unmeth; 1-based start, end = start (or start + 1 for a CpG "
                          "merged by coverage2cytosine --merge_CpG)",
           (Layout(6, 0, 1, 1, meth=4, unmeth=5, end=2, end_offsets=(0, 1)),), "unknown", fits=_fits_cov),
    Format("bismark-report", "chrom pos strand meth unmeth context trinucleotide; 1-based",
           (Layout(7, 0, 1, 1, meth=3, unmeth=4, strand=2, strand_codes=ONE, context=5, context_kind="name"),),
           "stranded", fits=_fits_report),
    Format("allc", "chrom pos strand context(C + 2 bases) mc cov flag; 1-based",
           (Layout(7, 0, 1, 1, meth=4, total=5, strand=2, strand_codes=ONE, context=3, context_kind="tri"),),
           "stranded", headers=(METHYLPY,), fits=_fits_allc),
    Format("allc-0based", "allc with 0-based positions, as in older methylpy files with a header line",
           (Layout(7, 0, 1, 0, meth=4, total=5, strand=2, strand_codes=ONE, context=3, context_kind="tri"),),
           "stranded", headers=(METHYLPY,)),
    Format("methylpipe", "chrom pos strand context(CG/CHG/CHH) meth unmeth score; 1-based",
           (Layout(7, 0, 1, 1, meth=4, unmeth=5, strand=2, strand_codes=ONE, context=3, context_kind="name"),),
           "stranded", fits=_fits_methylpipe),
    Format("cgmap", "BS-Seeker2 CGmap: chrom C/G pos context dinucleotide level meth total; 1-based; G = minus "
                    "strand",
           (Layout(8, 0, 2, 1, meth=6, total=7, strand=1, strand_codes=(("C", 1), ("G", -1)), context=3,
                   context_kind="name"),), "stranded", fits=_fits_cgmap),
    Format("bsmap", "BSMAP methratio, with its header: chr pos strand context(5 bases) ratio eff_CT_count "
                    "C_count CT_count ...; 1-based",
           tuple(Layout(n, 0, 1, 1, meth=6, total=7, strand=2, strand_codes=ONE, context=3, context_kind="bsmap")
                 for n in (10, 12)), "stranded", headers=(BSMAP, BSMAP + ("ci_lower", "ci_upper"))),
    Format("bedmethyl", "ENCODE bedMethyl, 11 columns (coverage, percent), or modbam2bed's 14 (+ n_canonical "
                        "n_modified n_filtered); 0-based start",
           (Layout(11, 0, 1, 0, total=9, fraction=10, scale=100, strand=5, end=2),
            Layout(14, 0, 1, 0, meth=12, unmeth=11, strand=5, end=2)), "stranded", fits=_fits_bedmethyl),
    Format("modkit", "modkit bedMethyl, 18 columns; 0-based start; rows with code m or C",
           (Layout(18, 0, 1, 0, meth=11, other_meth=13, total=9, strand=5, end=2, code=3),), "stranded",
           fits=_fits_modkit),
    Format("methyldackel", "MethylDackel bedGraph: chrom start end pct meth unmeth; 0-based start, end = "
                           "start + 1 (or + 2 for merged CpGs)",
           (Layout(6, 0, 1, 0, meth=4, unmeth=5, end=2, end_offsets=(1, 2)),), "unknown", fits=_fits_dackel),
    Format("biscuit", "BISCUIT BED: chrom start end beta coverage; 0-based start",
           (Layout(5, 0, 1, 0, total=4, fraction=3, end=2, end_offsets=(1, 2)),), "unknown", fits=_fits_biscuit),
    Format("tsv", "header chrom pos strand mc cov; 1-based",
           (Layout(5, 0, 1, 1, meth=3, total=4, strand=2),), "stranded",
           headers=(("chrom", "pos", "strand", "mc", "cov"),)),
    Format("dss", "DSS: header chr pos N X (N total, X methylated); 1-based",
           (Layout(4, 0, 1, 1, total=2, meth=3),), "unknown", headers=(("chr", "pos", "n", "x"),)),
    Format("methylkit", "methylKit text: header chrBase chr base strand coverage freqC freqT; 1-based; F/R strand",
           (Layout(7, 1, 2, 1, total=4, fraction=5, scale=100, strand=3, strand_codes=(("F", 1), ("R", -1))),),
           "stranded", headers=(("chrbase", "chr", "base", "strand", "coverage", "freqc", "freqt"),)),
    Format("methylseekr", "MethylSeekR: chrom pos T M, no header (T total, first); 1-based CpG positions",
           (Layout(4, 0, 1, 1, total=2, meth=3),), "merged", fits=_fits_methylseekr),
    Format("methrix", "methrix: chrom pos M U, no header; 1-based",
           (Layout(4, 0, 1, 1, meth=2, unmeth=3),), "unknown", fits=_fits_methrix),
    Format("columns", "described by --columns (1-based column numbers), --zero-based and --header", (), "unknown"),
]}


# ---------------------------------------------------------------------------- options


@dataclass(frozen=True)
class ReadOptions:
    """Reading options beyond the format and context; recorded in the store's provenance."""

    merge_strands: bool = False
    min_coverage: int = 1
    chromosomes: tuple[str, ...] | None = None  # glob patterns to keep (None: all)
    exclude_chromosomes: tuple[str, ...] = ()  # glob patterns to drop
    columns: tuple[tuple[str, int], ...] | None = None  # --columns: role -> 1-based field number
    zero_based: bool = False
    header: bool = False
    chromosome_names: str | None = None  # --chromosome-names: ucsc, ensembl or a mapping file (made absolute)
    chromosome_map: tuple[tuple[str, str], ...] | None = None  # the mapping file's pairs, read once

    def __post_init__(self):
        if self.min_coverage < 0:
            raise ValueError(f"--min-coverage must be >= 0, got {self.min_coverage}")
        if self.columns is None and (self.zero_based or self.header):
            raise ValueError("--zero-based and --header describe a --columns file; named formats have their own "
                             "conventions")
        if self.chromosome_names not in (None, *NAMING) and self.chromosome_map is None:
            path = Path(self.chromosome_names)
            object.__setattr__(self, "chromosome_names", str(path.resolve()))
            object.__setattr__(self, "chromosome_map", read_chromosome_map(path))

    def as_dict(self) -> dict:
        out = asdict(self)
        for key in ("chromosomes", "exclude_chromosomes"):
            out[key] = None if out[key] is None else list(out[key])
        out["columns"] = None if self.columns is None else dict(self.columns)
        if self.chromosome_names is None:  # as recorded before the option existed: a re-ingest is unchanged
            del out["chromosome_names"], out["chromosome_map"]
        elif self.chromosome_map is not None:  # the mapping's digest, not its (long) list
            out["chromosome_map"] = hashlib.sha256(json.dumps(self.chromosome_map).encode()).hexdigest()
        return out

    def renaming(self) -> Callable[[str], str] | None:
        """A chromosome's name in the files -> in the store, or None: names are kept."""
        if self.chromosome_map is not None:
            mapping = dict(self.chromosome_map)
            return lambda name: mapping.get(name, name)
        return None if self.chromosome_names is None else CONVENTIONS[self.chromosome_names]

    @staticmethod
    def parse_patterns(text: str | None) -> tuple[str, ...] | None:
        """'chr1,chr2,chrUn*' -> patterns; None or '' -> None."""
        return tuple(p.strip() for p in text.split(",") if p.strip()) if text else None

    @staticmethod
    def parse_columns(text: str) -> tuple[tuple[str, int], ...]:
        """'chrom=1,pos=2,meth=4,total=3' (or unmeth= for total=; strand= optional)."""
        roles = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = item.partition("=")
            if key not in COLUMN_ROLES or not value.isdigit() or int(value) < 1:
                raise ValueError(f"--columns: {item!r} is not ROLE=N with ROLE one of {', '.join(COLUMN_ROLES)} "
                                 f"and N a column number from 1")
            if key in roles:
                raise ValueError(f"--columns: {key} given twice")
            roles[key] = int(value)
        missing = [k for k in ("chrom", "pos", "meth") if k not in roles]
        if missing or ("total" in roles) == ("unmeth" in roles):
            raise ValueError(f"--columns needs chrom, pos, meth and one of total or unmeth; got {text!r}")
        if len(set(roles.values())) < len(roles):
            raise ValueError(f"--columns: two roles share a column in {text!r}")
        return tuple(roles.items())


COLUMN_ROLES = ("chrom", "pos", "meth", "total", "unmeth", "strand")


def read_chromosome_map(path) -> tuple[tuple[str, str], ...]:
    """The pairs (name in the input files, name in the store) of a --chromosome-names FILE:
    two columns separated by blanks; '#' lines and blank lines are skipped."""
    try:
        check_input(path)
    except FileNotFoundError:
        raise ValueError(f"--chromosome-names {path}: no such file (give ucsc, ensembl or a file of two "
                         f"columns: a name in the input files and its name in the store)") from None
    pairs: dict[str, tuple[str, int, str]] = {}  # name -> (new name, line, text)
    with contextlib.closing(lines(path)) as read:
        for number, line in enumerate(read, 1):
            text = decoded(line)
            fields = text.split()
            if not fields or text.startswith("#"):
                continue
            if len(fields) != 2:
                raise FormatError(path, number, text, f"expected 2 columns (a chromosome's name in the input files "
                                                      f"and its name in the store), found {len(fields)}")
            old, new = fields
            problem = chromosome_name_problem(new)
            if problem:
                raise FormatError(path, number, text, f"invalid {problem}")
            if old in pairs and pairs[old][0] != new:
                raise FormatError(path, number, text, f"{old} is renamed {pairs[old][0]} at line {pairs[old][1]} "
                                                      f"({quoted(pairs[old][2])})")
            pairs.setdefault(old, (new, number, text))
    if not pairs:
        raise FormatError(path, None, None, "no names to map (expected lines of two columns: a chromosome's name "
                                            "in the input files and its name in the store)")
    return tuple((old, new) for old, (new, _, _) in pairs.items())


def columns_layout(options: ReadOptions, n_fields: int) -> Layout:
    roles = {k: v - 1 for k, v in options.columns}
    if max(roles.values()) >= n_fields:
        raise ValueError(f"--columns names column {max(roles.values()) + 1}, but the first data line has "
                         f"{n_fields} fields")
    return Layout(n_fields, roles["chrom"], roles["pos"], 0 if options.zero_based else 1, meth=roles["meth"],
                  total=roles.get("total"), unmeth=roles.get("unmeth"), strand=roles.get("strand"),
                  strand_codes=STRANDS + (("F", 1), ("R", -1)))


# ---------------------------------------------------------------------------- detection


def _is_header(fields: list[str]) -> bool:
    """A line of column names: its fields after the first are not numbers."""
    return bool(fields) and not any(NUMBER.fullmatch(f) for f in fields[1:])


@dataclass
class Preamble:
    """The start of a file: lines before the data, the column names, the data lines."""

    skip: int  # lines before the first data line (comments, track lines, the header, blank lines)
    track: bool  # a 'track' or 'browser' line
    header: str | None  # the line of column names
    data: list[tuple[int, str]]  # (line number, text) of up to DETECT_LINES data lines

    @property
    def names(self) -> tuple[str, ...] | None:
        return None if self.header is None else tuple(self.header.lower().split())


def preamble(path, header: bool = False) -> Preamble:
    """Split the start of ``path``: any number of comment, track and blank lines, the
    header, then up to DETECT_LINES data lines. With ``header`` the first line that is not a
    comment, track line or blank is the header whatever it holds."""
    skip, track, names, data = 0, False, None, []
    with contextlib.closing(lines(path)) as read:
        for number, line in enumerate(read, 1):
            text = decoded(line)
            fields = text.split()
            if not data and names is None:  # before the data
                if not fields or text.startswith("#"):
                    skip += 1
                    continue
                if fields[0] in ("track", "browser") and _is_header(fields):
                    track, skip = True, skip + 1
                    continue
                if header or _is_header(fields):
                    names, skip = text, skip + 1
                    continue
            if fields:
                data.append((number, text))
                if len(data) == DETECT_LINES:
                    break
    return Preamble(skip, track, names, data)


def _candidates(pre: Preamble) -> list[str]:
    if pre.header is not None:
        return [f.name for f in FORMATS.values() if pre.names in f.headers]
    found = [f.name for f in FORMATS.values() if f.fits and all(f.fits(t.split()) for _, t in pre.data)]
    if pre.track and "bismark-cov" in found:  # a track line marks a bedGraph, never a Bismark .cov
        found.remove("bismark-cov")
    return found


HEADER_ROLES = {
    "chrom": ("chr", "chrom", "chromosome", "seqnames", "seqname", "contig"),
    "pos": ("pos", "position", "start", "base", "loc", "coordinate"),
    "strand": ("strand", "str"),
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
    spec = ",".join(f"{k}={v + 1}" for k, v in roles.items())
    return (f"if the header means what it seems to, pass --columns {spec} (add --zero-based if the positions are "
            f"0-based: the header does not say)")


def detect_format(path) -> str:
    """The format of ``path`` from its first lines; raises :class:`FormatError` when no
    format or more than one fits."""
    check_input(path)
    pre = preamble(path)
    found = _candidates(pre)
    if pre.header is not None and not found:
        raise FormatError(path, pre.skip, pre.header, f"unknown format (no known format has this header line); "
                                                      f"{columns_hint(pre.names)}")
    if not pre.data:
        raise FormatError(path, None, None, "the file is empty (no data lines)")
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        listing = "; ".join(f"{name} ({FORMATS[name].columns})" for name in found)
        raise FormatError(path, None, None, f"ambiguous format: the first {len(pre.data)} data lines fit "
                                            f"{len(found)} formats: {listing}. Pass --format "
                                            f"{' or --format '.join(found)}")
    line, text = _first_misfit(pre)
    raise FormatError(path, line, text, f"unknown format (none of {', '.join(n for n in FORMATS if n != 'columns')}"
                                        f" fits this line and those before it); {columns_hint(None)}")


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


# ---------------------------------------------------------------------------- reading


def settings_for(fmt: str, context: str, options: ReadOptions) -> Settings:
    """The row selection for one format, or a ValueError for options it cannot honour."""
    spec = FORMATS[fmt]
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    if context in ("CHG", "CHH") and not spec.has_context:
        raise ValueError(f"--context {context}: format {fmt} records no cytosine context, so its rows cannot be "
                         f"selected by context (use CG, the default, for files of CpG sites, or all)")
    strand_column = any(role == "strand" for role, _ in options.columns or ())
    if options.merge_strands and spec.strands == "unknown" and not strand_column:
        raise ValueError(f"--merge-strands: format {fmt} has one row per cytosine but no strand column, so the "
                         f"two C's of a CpG cannot be told from neighbouring CpGs (CGCG) without the sequence")
    return Settings(context, options.merge_strands, options.min_coverage, options.chromosomes,
                    options.exclude_chromosomes, options.renaming())


def read_rows(path, fmt: str, context: str = "CG", *, options: ReadOptions | None = None,
              detected: bool = False, block_bytes: int = BLOCK_BYTES) -> Iterator[Rows]:
    """Yield validated rows of ``path`` per chromosome run, in file order.

    Raises :class:`FormatError` (file, line, text, format) for a malformed line,
    non-integer, negative, too large or inconsistent counts, positions out of order
    within a chromosome, a chromosome that reappears after another, an invalid
    chromosome name, or a file without data lines; ValueError for options the format
    cannot honour.
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
    line, text = pre.data[0]
    n_fields = len(text.split())
    layout = columns_layout(options, n_fields) if fmt == "columns" else spec.layout(n_fields)
    if layout is None:
        expected = " or ".join(str(la.n_fields) for la in spec.layouts)
        raise FormatError(path, line, text, f"malformed {fmt} line: expected {expected} fields, found {n_fields}",
                          label)
    variable = fmt == "columns" or len(spec.layouts) > 1
    yield from read_layout(path, fmt, label, layout, settings, pre.skip, variable, block_bytes)


# ---------------------------------------------------------------------------- input files


def check_input(path) -> None:
    """A regular file that can be read more than once (detection, checksum, parsing)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    if stat.S_ISDIR(mode):
        raise ValueError(f"{path}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else \
            "a device"
        raise ValueError(f"{path}: is {kind}, not a regular file; ingest reads each file more than once (to detect "
                         f"its format, checksum and parse it), so save the stream to a file first")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{path}: no permission to read it")


CONTENT_START = 1 << 20  # decompressed bytes compared first: replicates that differ, differ early


def content_sha256(path, limit: int | None = None) -> str | None:
    """SHA-256 of the file's decompressed content (its first ``limit`` bytes), or None if it
    cannot be decompressed (the reading names the line where it breaks)."""
    digest, left = hashlib.sha256(), limit
    try:
        with open_binary(path) as fh:
            while left is None or left > 0:
                piece = fh.read(1 << 20 if left is None else min(1 << 20, left))
                if not piece:
                    break
                digest.update(piece)
                left = None if left is None else left - len(piece)
    except (OSError, EOFError):
        return None
    return digest.hexdigest()


def check_replicates(paths) -> None:
    """Refuse a file given twice as replicates: the same path, or the same content once
    decompressed (a copy, a gzipped copy): its counts would be summed twice. Only files
    whose first decompressed MiB is the same are read to the end."""
    seen: dict = {}
    for path in paths:
        key = Path(path).resolve()
        if key in seen:
            raise ValueError(f"{path} is the same file as {seen[key]}: each replicate must be given once, or its "
                             f"counts would be summed twice")
        seen[key] = path
    if len(paths) < 2:
        return
    starting: dict = {}
    for path in paths:
        starting.setdefault(content_sha256(path, CONTENT_START), []).append(path)
    for start, group in starting.items():
        whole: dict = {}
        for path in group if start is not None and len(group) > 1 else ():
            digest = content_sha256(path)
            if digest is not None and digest in whole:
                raise ValueError(f"{path} has the same content (SHA-256 of the decompressed text) as "
                                 f"{whole[digest]}: each replicate must be given once, or its counts would be "
                                 f"summed twice")
            whole[digest] = path
