"""Reading a methylation call file whose layout is known: bytes to validated rows, fast.

The file is decompressed (python-isal's igzip for gzip/bgzip) and cut into blocks of
complete lines in a background thread. Each block is parsed by pyarrow's multi-threaded
CSV reader into typed columns (integers as int64, never through floats) and validated
with vectorized checks. Only when a block fails is it examined line by line, to name the
exact line: the first line pyarrow cannot parse (found by bisection), or the row a check
rejects. Memory is bounded by a block (``BLOCK_BYTES`` of text), never a chromosome.

Fields are separated by runs of tabs and/or spaces; leading and trailing blanks and
CRLF line ends are ignored, and blank lines are skipped.
"""

from __future__ import annotations

import fnmatch
import importlib
import queue
import re
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from .names import chromosome_name_problem  # noqa: F401 - also read from here
from .limits import POSITION_MAX


class _OnFirstUse:
    """A module imported when first used: the command line imports this module to start,
    and only ingest needs pyarrow and isal."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        return getattr(importlib.import_module(self._name), attr)


pa = _OnFirstUse("pyarrow")
pc = _OnFirstUse("pyarrow.compute")
pcsv = _OnFirstUse("pyarrow.csv")
igzip = _OnFirstUse("isal.igzip")

BLOCK_BYTES = 8 << 20  # text per parsed block
MAX_LINE = 1 << 16  # longer lines are refused: a file without newlines must not fill memory
SHOWN = 200  # at most this many characters of a line are quoted in a message
COUNT_MAX = int(np.iinfo(np.uint32).max)  # the counts store holds uint32
GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"


def quoted(text: str) -> str:
    """``text`` quoted for a message, cut to SHOWN characters."""
    if len(text) <= SHOWN:
        return repr(text)
    return f"{text[:SHOWN]!r} (the first {SHOWN} of {len(text):,} characters)"


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
    pos0: np.ndarray  # int64, 0-based, non-decreasing
    methylated: np.ndarray  # int64
    coverage: np.ndarray  # int64


STRANDS = (("+", 1), ("-", -1), (".", 0), ("*", 0))


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
    context_kind: str = ""  # "name": CG/CHG/CHH; "tri": C + 2 bases (allc); "bsmap": 5 bases centred on the C or G
    end: int | None = None
    end_offsets: tuple[int, ...] | None = None  # allowed end - start (None: any end > start)
    code: int | None = None  # modkit modification code: rows with m or C are kept

    def types(self) -> dict[int, pa.DataType]:
        out = {self.chrom: pa.string(), self.pos: pa.int64()}
        for i in (self.meth, self.total, self.unmeth, self.other_meth, self.end):
            if i is not None:
                out[i] = pa.int64()
        for i in (self.strand, self.context, self.code):
            if i is not None:
                out[i] = pa.string()
        if self.fraction is not None:
            out[self.fraction] = pa.float64()
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


# ---------------------------------------------------------------------------- bytes


def open_binary(path):
    """The file's bytes, gzip/bgzip decompressed (detected by magic bytes, not the name)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return igzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")


PIECE = 1 << 18  # decompressed per read: a corrupt stream loses at most this much before its error


def _pieces(fh, size: int):
    """Decompressed data in blocks of about ``size`` bytes; a decompression error ends the
    blocks with the exception itself, after the data read before it."""
    parts, held = [], 0
    while True:
        try:
            piece = fh.read(min(PIECE, size))
        except (OSError, EOFError) as exc:  # BadGzipFile is an OSError, truncation an EOFError
            yield b"".join(parts)
            yield exc
            return
        if piece:
            parts.append(piece)
            held += len(piece)
        if held >= size or not piece:
            yield b"".join(parts)
            parts, held = [], 0
        if not piece:
            return


def lines(path) -> Iterator[bytes]:
    """The file's lines from the start, read as far as they are asked for (BOM and line
    ends removed); the line length bound applies."""
    for block, _ in blocks(path, 1 << 20):
        for line in block.split(b"\n")[:-1]:
            yield line.rstrip(b"\r")


def blocks(path, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[bytes, int]]:
    """(text, number of its first line): complete lines, each ending with a newline, of at
    most about ``block_bytes``. A UTF-8 BOM at the start is dropped; lines longer than
    MAX_LINE, a carriage return inside a line, and corrupt compressed data are errors
    (naming the line reached)."""
    line, pending, start = 1, b"", True
    with open_binary(path) as fh:
        for chunk in _pieces(fh, block_bytes):
            if isinstance(chunk, Exception):
                raise FormatError(path, line, None, f"corrupt or truncated compressed data at this line "
                                                    f"({type(chunk).__name__}: {chunk})")
            if start and chunk.startswith(BOM):
                chunk = chunk[len(BOM):]
            start = False
            data = pending + chunk if pending else chunk
            cut = data.rfind(b"\n") + 1
            _check_lines(path, data, cut, line)
            pending = data[cut:]
            if len(pending) > MAX_LINE:
                line += data.count(b"\n", 0, cut)
                raise FormatError(path, line, decoded(pending[:SHOWN * 4]),
                                  f"line longer than {MAX_LINE:,} bytes (no newline)")
            if cut:
                yield (data if cut == len(data) else data[:cut]), line
                line += data.count(b"\n", 0, cut)
        if pending:  # a last line without a newline
            yield pending + b"\n", line


def _check_lines(path, data: bytes, end: int, line: int) -> None:
    """Lines of data[:end] are at most MAX_LINE bytes, without a lone carriage return."""
    window = MAX_LINE // 2  # a longer line spans a whole window without a newline
    for start in range(0, end, window):
        if data.find(b"\n", start, min(start + window, end)) < 0:
            lo = data.rfind(b"\n", 0, start) + 1
            hi = data.find(b"\n", start, end)
            if hi - lo > MAX_LINE:
                raise FormatError(path, line + data.count(b"\n", 0, lo), decoded(data[lo:lo + SHOWN * 4]),
                                  f"line longer than {MAX_LINE:,} bytes")
    if b"\r" in data and data.count(b"\r", 0, end) != data.count(b"\r\n", 0, end):
        at = re.search(rb"\r(?!\n)", data).start()
        lo = data.rfind(b"\n", 0, at) + 1
        raise FormatError(path, line + data.count(b"\n", 0, lo), decoded(data[lo:data.find(b"\n", at)]),
                          "carriage return (\\r) inside a line")


def prefetched(items: Iterator, depth: int = 2) -> Iterator:
    """``items`` produced by a background thread, at most ``depth`` ahead (decompression
    overlaps parsing); an exception is raised here, in order."""
    channel: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    done = object()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        channel.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        pass
                if stop.is_set():
                    return
            channel.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            channel.put((done, exc))
        finally:
            items.close()

    thread = threading.Thread(target=produce, daemon=True, name="streambhmm-read")
    thread.start()
    try:
        while True:
            item, exc = channel.get()
            if exc is not None:
                raise exc
            if item is done:
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full channel
            try:
                channel.get(timeout=0.1)
            except queue.Empty:
                pass
        thread.join()


# ---------------------------------------------------------------------------- parsing


def normalized(data: bytes) -> bytes:
    """Runs of tabs and spaces as one tab; no blanks at line starts and ends; LF ends."""
    data = re.sub(rb"[ \t]+", b"\t", data.replace(b"\r\n", b"\n"))
    data = data.replace(b"\t\n", b"\n").replace(b"\n\t", b"\n")
    return data[1:] if data.startswith(b"\t") else data


class Parser:
    """pyarrow's CSV reader set up for one layout."""

    def __init__(self, layout: Layout):
        self.layout = layout
        names = [f"f{i}" for i in range(layout.n_fields)]
        self.types = layout.types()
        self.read = pcsv.ReadOptions(column_names=names, use_threads=True, block_size=1 << 19)
        self.parse_options = pcsv.ParseOptions(delimiter="\t", quote_char=False, double_quote=False,
                                               escape_char=False, newlines_in_values=False, ignore_empty_lines=True)
        self.convert = pcsv.ConvertOptions(column_types={names[i]: t for i, t in self.types.items()},
                                           include_columns=[names[i] for i in sorted(self.types)],
                                           null_values=[], strings_can_be_null=False,
                                           quoted_strings_can_be_null=False, check_utf8=True)

    def __call__(self, data) -> dict[int, pa.Array]:
        table = pcsv.read_csv(pa.py_buffer(data), self.read, self.parse_options, self.convert)
        return {i: table.column(f"f{i}").combine_chunks() for i in self.types}

    def columns(self, data: bytes) -> tuple[dict[int, pa.Array], bytes]:
        """Columns of a block and the text they came from; a line that does not parse is a
        FormatError (found by bisection, then explained)."""
        if b" " in data:
            data = normalized(data)
        try:
            return self(data), data
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        data = normalized(data)  # empty fields (runs of tabs) and blank-only lines
        try:
            return self(data), data
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            reason = str(exc)
        lines = data.split(b"\n")
        lo, hi = 0, len(lines)  # invariant: lines[:lo] parse, lines[:hi] do not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            try:
                self(b"\n".join(lines[:mid]) + b"\n")
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                hi, reason = mid, str(exc)
        raise _BadLine(lo, reason, lines)


class _BadLine(Exception):
    """Line ``index`` of a (normalized) block does not parse."""

    def __init__(self, index: int, reason: str, lines: list[bytes]):
        self.index, self.reason, self.lines = index, reason, lines


INTEGER = re.compile(rb"-?[0-9]+")


def explain(line: bytes, layout: Layout, reason: str, variable: bool = False) -> str:
    """Why pyarrow could not parse ``line``, in the user's terms."""
    fields = line.split(b"\t")
    if len(fields) != layout.n_fields:
        changed = f" (the number of columns changed: the first data line has {layout.n_fields})" if variable else ""
        return f"expected {layout.n_fields} fields, found {len(fields)}{changed}"
    for i, kind in sorted(layout.types().items()):
        field = fields[i]
        what = f"field {i + 1} ({quoted(decoded(field))})"
        if kind == pa.string():
            try:
                field.decode("utf-8")
            except UnicodeDecodeError:
                return f"{what}: invalid UTF-8"
        elif kind == pa.int64() and not INTEGER.fullmatch(field):
            return f"{what}: {'not an integer' if _is_number(field) else 'not a number'}"
        elif kind == pa.int64() and not -2 ** 63 <= int(field) < 2 ** 63:
            return f"{what}: {'too large' if int(field) > 0 else 'negative'}"
        elif kind == pa.float64() and not _is_number(field):
            return f"{what}: not a number"
    return f"cannot parse ({reason.splitlines()[0]})"


def _is_number(field: bytes) -> bool:
    try:
        float(field)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------- checks


def _chars(arr: pa.Array, count: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """The lengths of the strings and their first ``count`` bytes (0 past the end), read
    from the raw buffers: vectorized, without Python strings."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    values = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    values = np.r_[values, np.zeros(count, np.uint8)]  # reads past the last string stay in bounds
    lengths = np.diff(offsets)
    starts = offsets[:-1]
    return lengths, [np.where(lengths > k, values[starts + k], 0) for k in range(count)]


def _code_table(pairs) -> tuple[np.ndarray, np.ndarray]:
    """Lookup tables for one-character values: valid[byte], value[byte]."""
    valid, value = np.zeros(256, bool), np.zeros(256, np.int64)
    for text, v in pairs:
        valid[ord(text)], value[ord(text)] = True, v
    return valid, value


C, G, H = ord("C"), ord("G"), ord("H")
BASE = np.zeros(256, bool)
BASE[list(b"ACGTN")] = True


def _contexts(arr: pa.Array, kind: str, strand: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, str]:
    """Per row: 0 = CG, 1 = CHG, 2 = CHH, and whether the value is valid (plus what a
    valid value looks like, for the message)."""
    if kind == "name":  # CG, CHG or CHH
        n, (c0, c1, c2) = _chars(arr, 3)
        ok = (c0 == C) & np.where(n == 2, c1 == G, (n == 3) & (c1 == H) & ((c2 == G) | (c2 == H)))
        return np.where(n == 2, 0, np.where(c2 == G, 1, 2)), ok, "CG, CHG or CHH"
    if kind == "tri":  # the C and the two bases after it
        n, (c0, c1, c2) = _chars(arr, 3)
        ok = (n == 3) & (c0 == C) & BASE[c1] & BASE[c2]
        return np.where(c1 == G, 0, np.where(c2 == G, 1, 2)), ok, "C and two bases (ACGTN)"
    # bsmap: 5 bases of the + strand centred on the position: a C (+ strand) or G (- strand)
    n, (c0, c1, c2, c3, c4) = _chars(arr, 5)
    plus = strand > 0
    ok = (n == 5) & np.where(plus, c2 == C, c2 == G)
    cg = np.where(plus, c3 == G, c1 == C)
    chg = np.where(plus, c4 == G, c0 == C)
    return np.where(cg, 0, np.where(chg, 1, 2)), ok, "5 bases centred on the C (+) or G (-)"


_CONTEXT_INDEX = {"CG": 0, "CHG": 1, "CHH": 2}


@dataclass(frozen=True)
class _Block:
    """A block's text as read and as parsed, and the number of its first line."""

    data: bytes
    text: bytes  # normalized: the rows pyarrow read are its non-blank lines
    first: int

    def index(self, row: int) -> int:
        """The index of row ``row``'s line in the block: pyarrow skips blank lines, the line
        numbers count them."""
        return [i for i, line in enumerate(self.text.split(b"\n")) if line.rstrip(b"\r")][row]

    def line(self, index: int) -> tuple[int, str]:
        """The number and text (as in the file, not normalized) of line ``index``."""
        return self.first + index, decoded(self.data.split(b"\n", index + 1)[index].rstrip(b"\r"))


@dataclass(frozen=True)
class _Row:
    """A row of a block: where an earlier row is, for a message that names its line."""

    block: _Block
    row: int


EARLIER = "<earlier line>"  # where a _Failure's message names the row it repeats


class _Failure(Exception):
    """The row that fails a check; ``earlier``: the row it repeats, named after the message."""

    def __init__(self, row: int, message: str, earlier: _Row | None = None):
        self.row, self.message, self.earlier = row, message, earlier


class _Order:
    """Chromosomes contiguous and positions non-decreasing, across blocks; the kept rows at
    the last position, by strand (a repeat of one may start the next block)."""

    def __init__(self):
        self.finished: set[str] = set()
        self.chrom: str | None = None
        self.position = -1  # the last row's position as in the file
        self.shifted = -1  # and as yielded (after --merge-strands)
        self.last: dict[int, _Row] = {}  # strand -> a kept row at ``position`` of ``chrom``


class BlockReader:
    """Validates blocks of one file and turns them into Rows."""

    def __init__(self, path, fmt: str, label: str, layout: Layout, settings: Settings, variable: bool):
        self.path, self.fmt, self.label, self.layout, self.settings = path, fmt, label, layout, settings
        self.variable = variable  # the number of fields was set by the first data line
        self.parser = Parser(layout)
        self.order = _Order()
        self.names: dict[str, str | None] = {}  # chromosome -> problem with its name (kept ones only)
        self.stored: dict[str, str] = {}  # chromosome as named in the store (--chromosome-names) -> in the file
        self.strand_table = _code_table(layout.strand_codes)
        self.n_rows = 0
        c, p = layout.chrom + 1, layout.pos + 1
        self.sort_hint = (f"the file must be sorted by chromosome, then position, e.g. with sort -k{c},{c} "
                          f"-k{p},{p}n, the header line kept first")

    def parsed(self, data: bytes):
        """The block's columns and text, or the _BadLine that stopped the parse (run ahead
        in a thread: pyarrow releases the GIL, so parsing overlaps the checks)."""
        try:
            return self.parser.columns(data)
        except _BadLine as bad:
            return bad

    def rows(self, data: bytes, first: int, parsed=None) -> Iterator[Rows]:
        parsed = self.parsed(data) if parsed is None else parsed
        try:
            if isinstance(parsed, _BadLine):
                raise parsed
            columns, text = parsed
        except _BadLine as bad:
            if bad.index:  # the rows before the bad line may hold an earlier error
                before = b"\n".join(bad.lines[:bad.index]) + b"\n"
                self._validated_or_raise(self.parser(before), _Block(data, before, first))
            message = explain(bad.lines[bad.index], self.layout, bad.reason, self.variable)
            raise self._error(_Block(data, b"", first), bad.index, f"malformed {self.fmt} line: {message}") from None
        yield from self._validated_or_raise(columns, _Block(data, text, first))

    def _validated_or_raise(self, columns, block: _Block) -> list[Rows]:
        try:
            return self._validated(columns, block)
        except _Failure as failure:
            message = failure.message
            if failure.earlier is not None:
                earlier = failure.earlier.block
                line, text = earlier.line(earlier.index(failure.earlier.row))
                message = message.replace(EARLIER, f"line {line} ({quoted(text)})")
            raise self._error(block, block.index(failure.row), message) from None

    def _error(self, block: _Block, index: int, message: str) -> FormatError:
        line, text = block.line(index)
        return FormatError(self.path, line, text, message, self.label)

    def stored_name(self, name: str) -> str:
        """``name`` as the store will name it (--chromosome-names)."""
        return name if self.settings.rename is None else self.settings.rename(name)

    def _validated(self, col, block: _Block) -> list[Rows]:
        """Rows of one block's columns, or a _Failure naming the earliest bad row. Each
        check first asks a cheap question of the whole block (a min, a max, an any) and
        builds its row mask only when that fails."""
        lay, settings, order = self.layout, self.settings, self.order
        n = len(col[lay.chrom])
        if n == 0:
            return []
        self.n_rows += n
        chrom = col[lay.chrom]
        starts = np.flatnonzero(np.r_[True, pc.not_equal(chrom[1:], chrom[:-1]).to_numpy(zero_copy_only=False)])
        names = chrom.take(pa.array(starts)).to_pylist()
        ends = np.r_[starts[1:], n]
        pos = col[lay.pos].to_numpy()
        failures: list[_Failure] = []  # the first check at the earliest row is reported

        def check(maybe: bool, mask, message):
            if maybe:  # the cheap question may over-report (a decrease between chromosomes)
                rows = mask()
                if rows.any():
                    i = int(np.argmax(rows))
                    failures.append(_Failure(i, message(i)))

        def chrom_at(i):
            return names[np.searchsorted(starts, i, side="right") - 1]

        # chromosome runs: contiguous, valid names (kept chromosomes only, as the store names them)
        kept_run = np.zeros(len(starts), bool)
        stored = [self.stored_name(name) for name in names]
        previous, finished = order.chrom, set(order.finished)
        for r, (start, name) in enumerate(zip(starts, names)):
            if name != previous:
                if name in finished:
                    failures.append(_Failure(int(start), f"chromosome {name} appears again after other chromosomes "
                                                         f"({self.sort_hint})"))
                    break
                if previous is not None:
                    finished.add(previous)
                previous = name
            kept_run[r] = settings.keeps(stored[r])
            if kept_run[r]:
                problem = self.names.setdefault(stored[r], chromosome_name_problem(stored[r]))
                if problem:
                    failures.append(_Failure(int(start), f"invalid {problem}"))
                    break
                if self.stored.setdefault(stored[r], name) != name:
                    failures.append(_Failure(int(start), f"chromosomes {self.stored[stored[r]]} and {name} of this "
                                                         f"file both become {stored[r]} (--chromosome-names)"))
                    break
        continues = names[0] == order.chrom  # the first run goes on from the previous block

        def backwards(values, last):
            """Rows whose value is below the previous row's within a chromosome run."""
            drop = np.r_[last if continues else -1, values[:-1]] > values
            drop[starts[1:]] = False
            return drop

        check(pos.min() < lay.base, lambda: pos < lay.base,
              lambda i: f"position {pos[i]} below {lay.base} ({lay.base}-based positions)")
        check(pos.max() > POSITION_MAX, lambda: pos > POSITION_MAX,
              lambda i: f"position {pos[i]} too large (a counts store takes positions up to {POSITION_MAX:,})")
        check(bool((pos[1:] < pos[:-1]).any()) or (continues and pos[0] < order.position),
              lambda: backwards(pos, order.position),
              lambda i: f"position out of order within {chrom_at(i)} ({self.sort_hint})")
        if lay.end is not None:
            span = col[lay.end].to_numpy() - pos
            if lay.end_offsets is None:
                check(span.min() < 1, lambda: span < 1, lambda i: f"end {pos[i] + span[i]} not after start {pos[i]}")
            else:
                allowed = " or ".join(map(str, lay.end_offsets))
                outside = ~np.isin(span, lay.end_offsets)
                check(outside.any(), lambda: outside,
                      lambda i: f"end - start is {span[i]}, expected {allowed} (one cytosine or CpG per line)")
        meth, cov = self._counts(col, check)
        strand = None
        if lay.strand is not None:
            lengths, (codes,) = _chars(col[lay.strand], 1)
            valid, value = self.strand_table
            bad = ~valid[codes] | (lengths != 1)
            texts = ", ".join(t for t, _ in lay.strand_codes)
            check(bad.any(), lambda: bad, lambda i: f"strand {col[lay.strand][i].as_py()!r} (expected one of {texts})")
            strand = value[codes]
        keep = cov >= max(settings.min_coverage, 1)
        is_cg = None
        if lay.context is not None:
            ctx, ok, looks = _contexts(col[lay.context], lay.context_kind, strand)
            check(not ok.all(), lambda: ~ok,
                  lambda i: f"context {col[lay.context][i].as_py()!r} (expected {looks})")
            is_cg = ctx == 0
            if settings.context != "all":
                keep &= ctx == _CONTEXT_INDEX[settings.context]
        if lay.code is not None:
            keep &= pc.is_in(col[lay.code], pa.array(["m", "C"])).to_numpy(zero_copy_only=False)
        pos0 = pos - lay.base
        if settings.merge_strands and strand is not None and not failures:
            # the minus-strand C of a CpG (at pos + 1) joins the plus-strand C at pos
            pos0 = pos0 - ((strand < 0) & (is_cg if is_cg is not None else True))
            check(bool((pos0[1:] < pos0[:-1]).any()) or (continues and pos0[0] < order.shifted),
                  lambda: backwards(pos0, order.shifted),
                  lambda i: f"with --merge-strands this minus-strand row moves to {pos0[i] + lay.base}, before "
                            f"the previous row")
            check(pos0.min() < 0, lambda: pos0 < 0,
                  lambda i: "with --merge-strands this minus-strand row moves before the chromosome start")
        repeat, last = self._repeated(block, pos, strand, keep & np.repeat(kept_run, ends - starts), starts,
                                      continues)
        failures += [repeat] if repeat else []
        if failures:
            raise min(failures, key=lambda f: f.row)
        order.finished, order.chrom = finished, names[-1]
        order.position, order.shifted, order.last = int(pos[-1]), int(pos0[-1]), last
        out = []
        for r, (start, end) in enumerate(zip(starts, ends)):
            sel = keep[start:end]
            if kept_run[r] and sel.any():
                out.append(Rows(stored[r], pos0[start:end][sel], meth[start:end][sel], cov[start:end][sel]))
        return out

    def _repeated(self, block: _Block, pos, strand, kept, starts, continues: bool):
        """The first kept row with the chromosome, position and strand of an earlier kept row
        (their counts would be summed twice), as a _Failure, or None; and the kept rows at the
        block's last position, by strand (the next block may repeat one). The file is sorted
        by position within a chromosome, so repeats are neighbours: in most blocks one
        comparison of neighbouring positions finds none."""
        n, order = len(pos), self.order
        strands = np.zeros(n, np.int64) if strand is None else strand
        same = np.empty(n, bool)  # the row's chromosome and position are the previous row's
        same[0] = continues and pos[0] == order.position
        np.equal(pos[1:], pos[:-1], out=same[1:])
        same[starts[1:]] = False
        if not same.any():
            return None, ({int(strands[-1]): _Row(block, n - 1)} if kept[-1] else {})
        group = np.cumsum(~same)  # one number per chromosome and position; 0: the previous block's last
        found = []  # (row, the earlier row it repeats)
        rows = np.flatnonzero(kept & (same | np.r_[same[1:], False]))
        by = np.lexsort((rows, strands[rows], group[rows]))
        g, st, r = group[rows][by], strands[rows][by], rows[by]
        twice = np.flatnonzero((g[1:] == g[:-1]) & (st[1:] == st[:-1]))
        if twice.size:
            k = twice[np.argmin(r[twice + 1])]
            found.append((int(r[k + 1]), _Row(block, int(r[k]))))
        if same[0] and order.last:
            first_group = np.flatnonzero(kept[:np.argmax(group > 0) if group[-1] > 0 else n])
            hits = first_group[np.isin(strands[first_group], list(order.last))]
            if hits.size:
                found.append((int(hits[0]), order.last[int(strands[hits[0]])]))
        if found:
            row, earlier = min(found, key=lambda f: f[0])
            what = "chromosome, position and strand" if strand is not None else "chromosome and position"
            return _Failure(row, f"repeats the {what} of {EARLIER}: a file may hold each cytosine once (its "
                                 f"counts would be summed twice)", earlier), {}
        starts_of_groups = np.flatnonzero(~same)
        last_start = int(starts_of_groups[-1]) if starts_of_groups.size else 0
        last = dict(order.last) if not starts_of_groups.size else {}  # the whole block is at one position
        for i in np.flatnonzero(kept[last_start:]) + last_start:
            last[int(strands[i])] = _Row(block, int(i))
        return None, last

    def _counts(self, col, check) -> tuple[np.ndarray, np.ndarray]:
        lay = self.layout
        get = {name: col[i].to_numpy() for name, i in (("meth", lay.meth), ("total", lay.total),
               ("unmeth", lay.unmeth), ("other", lay.other_meth)) if i is not None}
        for values in get.values():
            check(values.min() < 0, lambda v=values: v < 0, lambda i, v=values: f"negative count {v[i]}")
            check(values.max() > COUNT_MAX, lambda v=values: v > COUNT_MAX,
                  lambda i, v=values: f"count {v[i]} too large (the store holds counts up to {COUNT_MAX:,})")
        if lay.fraction is not None:
            frac = col[lay.fraction].to_numpy()
            what = "percent" if lay.scale == 100 else "fraction"
            bad = ~np.isfinite(frac) | (frac < 0) | (frac > lay.scale)
            check(bad.any(), lambda: bad, lambda i: f"methylation {what} {frac[i]} outside 0 to {lay.scale:g}")
            cov = get["total"]
            meth = np.round(cov * np.where(bad, 0, frac) / lay.scale).astype(np.int64)
            return meth, cov
        meth = get["meth"] + get["other"] if "other" in get else get["meth"]
        cov = get["total"] if "total" in get else get["meth"] + get["unmeth"]
        check(cov.max() > COUNT_MAX, lambda: cov > COUNT_MAX,
              lambda i: f"coverage {cov[i]} too large (the store holds counts up to {COUNT_MAX:,})")
        over = meth > cov
        check(over.any(), lambda: over, lambda i: f"methylated count {meth[i]} exceeds coverage {cov[i]}")
        return meth, cov


def read_layout(path, fmt: str, label: str, layout: Layout, settings: Settings, skip: int, variable: bool,
                block_bytes: int = BLOCK_BYTES) -> Iterator[Rows]:
    """Rows of ``path`` after its first ``skip`` lines (the header), per chromosome run.
    ``label`` names the format in messages ("tsv, detected"). Three stages overlap:
    decompression, parsing (the next block) and checking (this block)."""
    reader = BlockReader(path, fmt, label, layout, settings, variable)

    def data_lines():
        todo = skip
        for data, first in blocks(path, block_bytes):
            if todo:
                lines = data.split(b"\n", todo)
                dropped = min(todo, len(lines) - 1)
                data, first, todo = (lines[-1] if dropped == todo else b""), first + dropped, todo - dropped
            if data:
                yield data, first

    def parsed():
        for data, first in prefetched(data_lines()):
            yield data, first, reader.parsed(data)

    for data, first, columns in prefetched(parsed(), depth=1):
        yield from reader.rows(data, first, columns)
    if reader.n_rows == 0:
        raise FormatError(path, None, None, "the file is empty (no data lines)", label)
