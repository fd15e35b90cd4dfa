"""What reading a call file is about: the layout of a format's columns, the settings of a
read, the rows it yields, the error that names a line, and pyarrow and isal imported when
first used."""

from __future__ import annotations

import fnmatch
import importlib
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


class _OnFirstUse:
    """A module imported when first used: the command line imports this module to start,
    and only ingest needs pyarrow and isal."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


pa = _OnFirstUse("pyarrow")
pcsv = _OnFirstUse("pyarrow.csv")
igzip = _OnFirstUse("isal.igzip")
isal_zlib = _OnFirstUse("isal.isal_zlib")

BLOCK_BYTES = 8 << 20  # text per parsed block
MAX_LINE = 1 << 16  # longer lines are refused: a file without newlines must not fill memory
SHOWN = 200  # at most this many characters of a line are quoted in a message
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"


def quoted(text: str) -> str:
    """``text`` quoted for a message, cut to SHOWN characters as shown: escapes count, but for a
    tab's (a field of NULs, each shown as four, made a message of 950 characters in a helper's
    audit)."""
    kept, size = 0, 0
    for c in text[:SHOWN]:
        size += 1 if c == "\t" else len(repr(c)) - 2
        if size > SHOWN:
            break
        kept += 1
    if kept == len(text):
        return repr(text)
    return f"{text[:kept]!r} (the first {kept} of {len(text):,} characters)"


def shown(text) -> str:
    """``text`` for the terminal: control characters escaped (a name in a store written by
    an older version, or by hand, must not send escape sequences)."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def first_few(names, at_most: int = 3) -> str:
    """The first ``at_most`` of ``names`` for a message (at most SHOWN characters of them), and
    how many more there are."""
    names = list(names)
    listed = ", ".join(names[:at_most])
    listed = listed if len(listed) <= SHOWN else listed[:SHOWN] + "..."
    return listed + (f" and {len(names) - at_most:,} more" if len(names) > at_most else "")


# a field between blanks: quoted whole, as R's write.table quotes strings (blanks inside), or not (Bob's)
_BLANK_SEPARATED = re.compile(r'"[^"]*"(?=\s|$)|\'[^\']*\'(?=\s|$)|\S+')


def sheet_fields(line: str) -> list:
    """A sample sheet's or manifest's fields: tab-separated when the line has a tab, else
    separated by blanks (a table lined up with spaces, as pasted from a page, or saved by R's
    write.table, whose quoted strings keep their blanks)."""
    if "\t" in line:
        return [f.strip() for f in line.rstrip("\r\n").split("\t")]
    return _BLANK_SEPARATED.findall(line)


def decoded(line: bytes) -> str:
    return line.decode("utf-8", errors="backslashreplace")


class FormatError(ValueError):
    """Bad input: names the file, the 1-based line, at most SHOWN characters of the
    offending text, and (where known) the format it was read as."""

    def __init__(self, path, line: int | None, text: str | None, message: str, fmt: str | None = None):
        self.path, self.line, self._given = str(path), line, text
        self.text = None if text is None else text[:SHOWN]
        self.message, self.fmt = message, fmt
        where = f"{path}:{line}" if line is not None else f"{path}"
        shown = f": {quoted(text)}" if text is not None else ""
        super().__init__(f"{where}: {message}{shown}" + (f" (format {fmt})" if fmt else ""))

    def __reduce__(self):  # pickled across Dask workers
        return type(self), (self.path, self.line, self._given, self.message, self.fmt)


@dataclass(frozen=True)
class Rows:
    """Validated rows of one chromosome from one block of a file."""

    chrom: str
    pos0: np.ndarray  # int64, 0-based, in file order (not always sorted)
    methylated: np.ndarray  # int64
    coverage: np.ndarray  # int64
    read_bytes: int = 0  # bytes of the file read up to the end of the rows' block (compressed ones if it is)


@dataclass
class ReadTally:
    """What reading files left out, for the user: rows of the kept chromosomes, by reason
    (fieldchecks.LeftOut), and the rows of each chromosome the options did not select."""

    without_reads: int = 0
    other_context: int = 0
    other_code: int = 0
    below_min_coverage: int = 0
    not_selected: dict = field(default_factory=dict)  # chromosome -> its rows, left out by --(exclude-)chromosomes
    seen: set = field(default_factory=set)  # every chromosome of the files (as the store names them)

    def said(self, context: str, min_coverage: int) -> str:
        """'5,285 rows without reads, 3 rows of other contexts than CG, 912 rows of 2 chromosomes
        not selected (chrM, lambda)' ('' when none)."""
        reasons = [(self.without_reads, "without reads"), (self.other_context, f"of other contexts than {context}"),
                   (self.other_code, "of other modifications than 5mC (codes m, C)"),
                   (self.below_min_coverage, f"with fewer than --min-coverage {min_coverage} reads")]
        said = [f"{n:,} row{'' if n == 1 else 's'} {why}" for n, why in reasons if n]
        if self.not_selected:
            n, names = sum(self.not_selected.values()), list(self.not_selected)
            listed = ", ".join(names[:5]) + (f" and {len(names) - 5:,} more" if len(names) > 5 else "")
            said.append(f"{n:,} row{'' if n == 1 else 's'} of {len(names):,} "
                        f"chromosome{'' if len(names) == 1 else 's'} not selected ({listed[:200]})")
        return ", ".join(said)


STRANDS = (("+", 1), ("-", -1), (".", 0), ("*", 0))


def columns_spec(roles: dict) -> str:
    """A --columns spec of 0-based field indexes by role: 'chrom=1,pos=2,...'."""
    return ",".join(f"{role}={index + 1}" for role, index in roles.items())


@dataclass(frozen=True)
class Layout:
    """Where a format keeps what: 0-based indexes into a data line's fields.

    Coverage is ``total``, or ``meth + unmeth``; methylated is ``meth`` (plus
    ``other_meth``), or ``round(total * fraction / scale)``."""

    n_fields: int
    chrom: int
    pos: int
    base: int  # 1: positions are 1-based; 0: 0-based
    meth: int | None = None
    total: int | None = None
    unmeth: int | None = None
    other_meth: int | None = None
    fraction: int | None = None
    scale: float = 1.0
    strand: int | None = None
    strand_codes: tuple[tuple[str, int], ...] = STRANDS  # text -> +1, -1 or 0 (both strands / unknown)
    context: int | None = None
    # "name": CG/CHG/CHH; "tri": C + 2 bases (allc); "name-or-tri": either (--columns); "bsmap": 5 bases
    # centred on the C or G
    context_kind: str = ""
    end: int | None = None
    end_offsets: tuple[int, ...] | None = None  # allowed end - start (None: any end > start)
    code: int | None = None  # modkit modification code: rows with m or C are kept
    percent: int | None = None  # a methylation percent beside the counts: checked to agree with them

    def as_columns(self) -> str | None:
        """This layout's counts as a --columns spec (1-based fields), or None when they are not
        plain counts (a fraction of the coverage)."""
        if self.meth is None or (self.total is None and self.unmeth is None):
            return None
        roles = {"chrom": self.chrom, "pos": self.pos, "meth": self.meth}
        roles.update({"total": self.total} if self.total is not None else {"unmeth": self.unmeth})
        return columns_spec(roles) + (" --zero-based" if self.base == 0 else "")

    def types(self) -> dict[int, pa.DataType]:
        out = {self.chrom: pa.string(), self.pos: pa.int64()}
        for i in (self.meth, self.total, self.unmeth, self.other_meth, self.end):
            if i is not None:
                out[i] = pa.int64()
        for i in (self.strand, self.context, self.code):
            if i is not None:
                out[i] = pa.string()
        for i in (self.fraction, self.percent):
            if i is not None:
                out[i] = pa.float64()
        return out


@dataclass(frozen=True)
class Settings:
    """How rows are selected: a format's reading of the user's options."""

    context: str = "CG"
    merge_strands: bool = False
    min_coverage: int = 1
    chromosomes: tuple[str, ...] | None = None
    exclude_chromosomes: tuple[str, ...] = ()
    rename: Callable[[str], str] | None = None  # a chromosome's name in the file -> in the store

    def keeps(self, chrom: str) -> bool:
        if self.chromosomes is not None and not any(fnmatch.fnmatchcase(chrom, p) for p in self.chromosomes):
            return False
        return not any(fnmatch.fnmatchcase(chrom, p) for p in self.exclude_chromosomes)
