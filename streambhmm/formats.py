"""Methylation call formats: detection, parsing and validation, with file:line errors.

Every format is turned into rows of (chromosome, 0-based position, methylated, coverage).
Coordinate conventions (each format's own):

    bismark-cov     Bismark coverage (.cov): chrom start end pct meth unmeth, 1-based start
    bismark-report  Bismark CpG / CX report: chrom pos strand meth unmeth context trinuc, 1-based
    allc            methylpy / ALLCools allc: chrom pos strand context mc cov flag, 1-based
    bedmethyl       ENCODE bedMethyl, 11 columns: ..., coverage, percent; 0-based start.
                    methylated = round(coverage * percent / 100). The 14-column modbam2bed
                    variant adds n_canonical n_modified n_filtered, used exactly.
    modkit          modkit bedMethyl, 18 columns, 0-based start. Rows with code m (5mC) or C
                    (all C modifications) are used; methylated = Nmod + Nother_mod (all
                    modified calls, as bisulfite sees them), coverage = Nvalid_cov; h rows are
                    skipped so no call is counted twice. Older modkit separates the last
                    fields by spaces; any whitespace separates fields here.
    methyldackel    MethylDackel bedGraph: a 'track' header line, then
                    chrom start end pct nMethylated nUnmethylated, 0-based start
    tsv             header 'chrom pos strand mc cov', 1-based pos

Files are read in blocks of lines and parsed with pandas' C parser; any row that fails
is located exactly (by bisection for tokenizer errors) and reported with its line.
"""

from __future__ import annotations

import gzip
import io
import itertools
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import pandas as pd

CONTEXTS = ("CG", "CHG", "CHH", "all")
BLOCK_LINES = 1 << 18


class FormatError(ValueError):
    """Bad input: names the file, the 1-based line and the offending text."""

    def __init__(self, path, line: int | None, text: str | None, message: str):
        self.path, self.line, self.text = str(path), line, text
        where = f"{path}:{line}" if line is not None else f"{path}"
        shown = f": {text!r}" if text is not None else ""
        super().__init__(f"{where}: {message}{shown}")


@dataclass(frozen=True)
class Rows:
    """Validated rows of one chromosome from one block of a file."""

    chrom: str
    pos0: np.ndarray  # int64, 0-based, non-decreasing
    methylated: np.ndarray  # int64
    coverage: np.ndarray  # int64


@dataclass(frozen=True)
class Columns:
    """What a format's parsed columns mean. ``counts`` maps the DataFrame to
    (pos0, methylated, coverage, keep); ``keep`` filters rows (context, code)."""

    n_fields: tuple[int, ...]
    numeric: tuple[int, ...]
    counts: Callable[[pd.DataFrame, str], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    has_context: bool = False


def _context_of_trinucleotide(tri: pd.Series) -> np.ndarray:
    s = tri.astype(str).str.upper()
    second, third = s.str[1], s.str[2]
    return np.where(second == "G", "CG", np.where(third == "G", "CHG", "CHH"))


def _keep_context(context_values, wanted: str) -> np.ndarray:
    if wanted == "all":
        return np.ones(len(context_values), dtype=bool)
    return np.asarray(context_values, dtype=object) == wanted


def _bismark_cov(df, context):
    meth, unmeth = df[4].to_numpy(), df[5].to_numpy()
    return df[1].to_numpy() - 1, meth, meth + unmeth, np.ones(len(df), bool)


def _bismark_report(df, context):
    meth, unmeth = df[3].to_numpy(), df[4].to_numpy()
    return df[1].to_numpy() - 1, meth, meth + unmeth, _keep_context(df[5].astype(str), context)


def _allc(df, context):
    return df[1].to_numpy() - 1, df[4].to_numpy(), df[5].to_numpy(), _keep_context(_context_of_trinucleotide(df[3]), context)


def _bedmethyl(df, context):
    cov = df[9].to_numpy()
    if 13 in df.columns and df[13].notna().any():
        meth, cov = df[12].to_numpy(), df[11].to_numpy() + df[12].to_numpy()
    else:
        meth = np.round(cov * df[10].to_numpy() / 100.0)
    return df[1].to_numpy(), meth, cov, np.ones(len(df), bool)


def _modkit(df, context):
    keep = df[3].astype(str).isin(["m", "C"]).to_numpy()
    return df[1].to_numpy(), df[11].to_numpy() + df[13].to_numpy(), df[9].to_numpy(), keep


def _methyldackel(df, context):
    meth, unmeth = df[4].to_numpy(), df[5].to_numpy()
    return df[1].to_numpy(), meth, meth + unmeth, np.ones(len(df), bool)


def _tsv(df, context):
    return df[1].to_numpy() - 1, df[3].to_numpy(), df[4].to_numpy(), np.ones(len(df), bool)


FORMATS: dict[str, Columns] = {
    "bismark-cov": Columns((6,), (1, 2, 3, 4, 5), _bismark_cov),
    "bismark-report": Columns((7,), (1, 3, 4), _bismark_report, has_context=True),
    "allc": Columns((7,), (1, 4, 5), _allc, has_context=True),
    "bedmethyl": Columns((11, 14), (1, 2, 9, 10), _bedmethyl),
    "modkit": Columns((18,), (1, 2, 9, 10, 11, 12, 13), _modkit),
    "methyldackel": Columns((6,), (1, 2, 3, 4, 5), _methyldackel),
    "tsv": Columns((5,), (1, 3, 4), _tsv),
}
TSV_HEADER = ["chrom", "pos", "strand", "mc", "cov"]


def open_text(path) -> io.TextIOBase:
    """Open plain or gzip/bgzip-compressed text (detected by magic bytes, not the name)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace", newline="")
    return open(path, encoding="utf-8", errors="replace", newline="")


def _is_int(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _header_lines(lines: list[str]) -> int:
    """Leading lines that are headers: track/browser/# lines or a line of column names."""
    n = 0
    for line in lines:
        fields = line.split()
        if line.startswith(("track", "browser", "#")):
            n += 1
        elif n == 0 and fields and fields[0].lower() in ("chrom", "chr", "chromosome"):
            n += 1  # a line of column names (tsv, methylpy allc)
        else:
            break
    return n


def _guess(first_lines: list[str]) -> str | None:
    """The format of the data lines, or None if none fits."""
    header = _header_lines(first_lines)
    data = [line.split() for line in first_lines[header:] if line.strip()]
    if not data:
        return None
    if first_lines[0].startswith("track"):
        return "methyldackel" if len(data[0]) == 6 else None
    if header and first_lines[0].split() == TSV_HEADER:
        return "tsv"
    fields = data[0]
    n = len(fields)
    if not (n >= 3 and _is_int(fields[1])):
        return None
    if n == 18:
        return "modkit"
    if n in (11, 14) and _is_int(fields[2]):
        return "bedmethyl"
    if n == 7 and fields[3].isalpha() and _is_int(fields[4]) and _is_int(fields[5]):
        return "allc"
    if n == 7 and fields[5] in ("CG", "CHG", "CHH") and _is_int(fields[3]) and _is_int(fields[4]):
        return "bismark-report"
    if n == 6 and all(_is_number(f) for f in fields[1:]):
        return "bismark-cov"
    return None


def _first_lines(path, count: int = 20) -> list[str]:
    with open_text(path) as fh:
        return [line.rstrip("\r\n") for line in itertools.islice(fh, count)]


def detect_format(path) -> str:
    """Detect a file's format from its first lines; raises :class:`FormatError`."""
    lines = _first_lines(path)
    if not any(line.strip() for line in lines[_header_lines(lines):]):
        raise FormatError(path, None, None, "the file is empty (no data lines)")
    fmt = _guess(lines)
    if fmt is None:
        raise FormatError(path, 1, lines[0], f"unknown format (none of {', '.join(FORMATS)}); pass --format")
    return fmt


def detect_common_format(paths, fmt: str = "auto") -> str:
    """One format for all files of a call: detected or given, never mixed."""
    if fmt != "auto":
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; choose one of auto, {', '.join(FORMATS)}")
        return fmt
    found = {str(p): detect_format(p) for p in paths}
    kinds = set(found.values())
    if len(kinds) > 1:
        listing = "; ".join(f"{p}: {k}" for p, k in found.items())
        raise ValueError(f"mixed formats in one call (replicates must share a format): {listing}")
    return kinds.pop()


def _parse_block(text: str, spec: Columns) -> pd.DataFrame:
    n_cols = max(spec.n_fields)
    dtypes = {i: "float64" for i in spec.numeric}
    dtypes[0] = str
    return pd.read_csv(io.StringIO(text), sep=r"\s+", header=None, names=list(range(n_cols)),
                       dtype=dtypes, skip_blank_lines=False, quoting=3, engine="c",
                       na_filter=True, keep_default_na=False, na_values=[""])


def _bisect_bad_line(lines: list[str], spec: Columns) -> tuple[int, str]:
    """Index of the first line that the parser rejects, and the parser's message."""
    lo, hi = 0, len(lines)  # invariant: lines[:lo] parse, lines[:hi] fail
    message = "cannot parse"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            _parse_block("\n".join(lines[:mid]) + "\n", spec)
            lo = mid
        except (ValueError, pd.errors.ParserError) as exc:
            hi, message = mid, str(exc)
    try:
        _parse_block(lines[lo] + "\n", spec)
    except (ValueError, pd.errors.ParserError) as exc:
        message = str(exc)
    return lo, message.split("\n")[0]


def read_rows(path, fmt: str, context: str = "CG", block_lines: int = BLOCK_LINES) -> Iterator[Rows]:
    """Yield validated rows of ``path`` per chromosome run, in file order.

    Raises :class:`FormatError` for a malformed line, non-integer, negative or
    inconsistent counts, positions out of order within a chromosome, a chromosome that
    reappears after another, or a file without data lines.
    """
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, got {context!r}")
    spec = FORMATS[fmt]
    n_header = _header_lines(_first_lines(path))
    order = _SortCheck()
    n_data = 0
    with open_text(path) as fh:
        for _ in range(n_header):
            next(fh)
        line_no = n_header  # lines consumed so far
        while True:
            lines = [line.rstrip("\r\n") for line in itertools.islice(fh, block_lines)]
            if not lines:
                break
            first = line_no + 1
            line_no += len(lines)
            try:
                df = _parse_block("\n".join(lines) + "\n", spec)
            except (ValueError, pd.errors.ParserError):
                i, message = _bisect_bad_line(lines, spec)
                raise FormatError(path, first + i, lines[i], f"malformed {fmt} line ({message})") from None
            yield from _validated(path, fmt, spec, df, lines, first, context, order)
            n_data += len(df)
    if n_data == 0:
        raise FormatError(path, None, None, "the file is empty (no data lines)")


class _SortCheck:
    """Chromosomes contiguous and positions non-decreasing, across blocks."""

    def __init__(self):
        self.finished: set[str] = set()
        self.chrom: str | None = None
        self.position = -1

    def first_violation(self, chrom: str, pos0: np.ndarray) -> tuple[int, str] | None:
        if chrom != self.chrom:
            if chrom in self.finished:
                return 0, f"chromosome {chrom} appears again after other chromosomes (the file must be sorted)"
            if self.chrom is not None:
                self.finished.add(self.chrom)
            self.chrom, self.position = chrom, -1
        breaks = np.flatnonzero(np.diff(np.r_[self.position, pos0]) < 0)
        if breaks.size:
            return int(breaks[0]), f"position out of order within {chrom} (the file must be sorted)"
        self.position = int(pos0[-1])
        return None


def _validated(path, fmt, spec, df, lines, first, context, order: _SortCheck) -> Iterator[Rows]:
    def fail(i, message):
        raise FormatError(path, first + int(i), lines[int(i)], message)

    n_fields = np.array([len(line.split()) for line in lines]) if len(set(spec.n_fields)) > 1 else None
    required = df[list(spec.numeric)].to_numpy()
    missing = np.isnan(required).any(axis=1) | df[0].isna().to_numpy()
    if n_fields is not None:
        missing |= ~np.isin(n_fields, spec.n_fields)
    if missing.any():
        i = int(np.argmax(missing))
        fail(i, f"malformed {fmt} line: expected {' or '.join(map(str, spec.n_fields))} fields, "
                f"found {len(lines[i].split())}")
    pos0, meth, cov, keep = (np.asarray(a) for a in spec.counts(df, context))
    numeric = np.stack([pos0, meth, cov]).astype(np.float64)
    bad = (numeric != np.round(numeric)).any(axis=0)
    if bad.any():
        fail(np.argmax(bad), "counts and positions must be integers")
    pos0, meth, cov = (a.astype(np.int64) for a in (pos0, meth, cov))
    for name, arr in (("negative position", pos0), ("negative count", np.minimum(meth, cov))):
        if (arr < 0).any():
            fail(np.argmax(arr < 0), name)
    if (meth > cov).any():
        i = int(np.argmax(meth > cov))
        fail(i, f"methylated count {meth[i]} exceeds coverage {cov[i]}")
    chroms = df[0].astype(str).to_numpy()
    starts = np.flatnonzero(np.r_[True, chroms[1:] != chroms[:-1]])
    ends = np.r_[starts[1:], len(chroms)]
    for lo, hi in zip(starts, ends):
        chrom = chroms[lo]
        violation = order.first_violation(chrom, pos0[lo:hi])
        if violation is not None:
            fail(lo + violation[0], violation[1])
        sel = keep[lo:hi] & (cov[lo:hi] > 0)
        if sel.any():
            yield Rows(chrom, pos0[lo:hi][sel], meth[lo:hi][sel], cov[lo:hi][sel])
