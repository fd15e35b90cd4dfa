"""Reading a methylation call file whose layout is known: bytes to validated rows, fast.

The file is decompressed (python-isal's igzip for gzip/bgzip) and cut into blocks of
complete lines in a background thread (io/blocks.py). Each block is parsed by pyarrow's
multi-threaded CSV reader into typed columns (integers as int64, never through floats;
io/parser.py) and validated with vectorized checks. Only when a block fails is it examined
line by line, to name the exact line: the first line pyarrow cannot parse (found by
bisection), or the row a check rejects. Reading a sorted file, memory is bounded by a
block (``BLOCK_BYTES`` of text), never a chromosome.

Fields are separated by runs of tabs and/or spaces; leading and trailing blanks and
CRLF line ends are ignored, and blank lines are skipped.

Rows may come in any order within a chromosome (methylKit's files are not sorted by
position); a chromosome's rows must be contiguous. A row repeating the chromosome, position
and strand of an earlier one is refused: in a sorted chromosome neighbours are compared as
the rows are read; when a chromosome turns out unsorted, the file is read a second time
after the first pass, keeping one bit per position and strand of that chromosome (the
chromosome's length, never the file), and a third time only to name the earlier line of a
repeat found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from .blocks import blocks, prefetched
from .limits import COUNT_MAX, POSITION_MAX
from .names import chromosome_name_problem
from .parser import CONTEXT_INDEX, BadLine, Parser, changes, chars, code_table, contexts, explain, numbers
from .rows import BLOCK_BYTES, FormatError, Layout, Rows, Settings, decoded, quoted


@dataclass(frozen=True)
class _Block:
    """A block's text as read and as parsed, the number of its first line and the bytes of
    the file read up to its end."""

    data: bytes
    text: bytes  # normalized: the rows pyarrow read are its non-blank lines
    first: int
    offset: int = 0

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
    """The row that fails a check; ``earlier``: the row it repeats, named after the message
    (a _Row, or the (chromosome, key) of a row of an earlier block, found by reading again)."""

    def __init__(self, row: int, message: str, earlier: _Row | tuple | None = None):
        self.row, self.message, self.earlier = row, message, earlier


class _Found(Exception):
    """The row a search for a (chromosome, key) found (BlockReader.target)."""

    def __init__(self, row: _Row):
        self.row = row


class _Order:
    """Chromosomes contiguous, across blocks; the chromosomes whose positions go back; the
    kept rows at the last position, by strand (a repeat of one may start the next block)."""

    def __init__(self):
        self.finished: set[str] = set()
        self.chrom: str | None = None
        self.position = -1  # the last row's position as in the file
        self.last: dict[int, _Row] = {}  # strand -> a kept row at ``position`` of ``chrom``
        self.unsorted: set[str] = set()  # chromosomes (as in the file) whose positions go back


class _Seen:
    """The (position, strand) keys of one chromosome's kept rows read so far, one bit each."""

    def __init__(self):
        self.chrom: str | None = None
        self.bits = np.zeros(0, np.uint8)

    def first_repeat(self, chrom: str, keys: np.ndarray):
        """Of ``keys`` (a run of ``chrom``'s kept rows, in file order): (index of the first that
        repeats an earlier key, index of that earlier key in ``keys`` or None when it was in an
        earlier block), or None; the keys are recorded."""
        if chrom != self.chrom:
            self.chrom, self.bits = chrom, np.zeros(0, np.uint8)
        if keys.size == 0:
            return None
        need = int(keys.max() >> 3) + 1
        if need > self.bits.size:
            grown = np.zeros(max(need, 2 * self.bits.size), np.uint8)
            grown[:self.bits.size] = self.bits
            self.bits = grown
        byte, bit = keys >> 3, (keys & 7).astype(np.uint8)
        before = (self.bits[byte] >> bit) & 1
        order = np.argsort(keys, kind="stable")
        ordered = keys[order]
        again = np.flatnonzero(ordered[1:] == ordered[:-1]) + 1  # later rows of a key met in the run
        found = []
        if before.any():
            found.append((int(np.argmax(before)), None))
        if again.size:
            row = int(order[again].min())
            found.append((row, int(order[np.searchsorted(ordered, keys[row])])))
        np.bitwise_or.at(self.bits, byte, np.left_shift(np.uint8(1), bit))
        return min(found, key=lambda f: (f[0], f[1] is not None)) if found else None


class _Checks:
    """The failures of a block's checks; the earliest row's is reported."""

    def __init__(self):
        self.failures: list[_Failure] = []

    def fail(self, row, message: str) -> None:
        self.failures.append(_Failure(int(row), message))

    def check(self, maybe: bool, mask, message) -> None:
        """``maybe``: a cheap question of the whole block, which may over-report (a decrease
        between chromosomes); only then is the row mask built and its first row failed."""
        if maybe:
            rows = mask()
            if rows.any():
                i = int(np.argmax(rows))
                self.failures.append(_Failure(i, message(i)))


@dataclass(frozen=True)
class _Runs:
    """A block's chromosome runs: their first rows and names, and whether the first run goes on
    from the previous block (whose last chromosome was ``previous``)."""

    starts: np.ndarray
    names: list
    n_rows: int
    previous: str | None

    @property
    def ends(self) -> np.ndarray:
        return np.r_[self.starts[1:], self.n_rows]

    @property
    def continues(self) -> bool:
        return self.names[0] == self.previous

    def chrom_at(self, i: int) -> str:
        return self.names[np.searchsorted(self.starts, i, side="right") - 1]

    def backwards(self, values, last):
        """Rows whose value is below the previous row's within a chromosome run."""
        drop = np.r_[last if self.continues else -1, values[:-1]] > values
        drop[self.starts[1:]] = False
        return drop


class BlockReader:
    """Validates blocks of one file and turns them into Rows."""

    def __init__(self, path, fmt: str, label: str, layout: Layout, settings: Settings, variable: bool,
                 skip: int = 0, block_bytes: int = BLOCK_BYTES):
        self.path, self.fmt, self.label, self.layout, self.settings = path, fmt, label, layout, settings
        self.variable = variable  # the number of fields was set by the first data line
        self.skip, self.block_bytes = skip, block_bytes
        self.parser = Parser(layout)
        self.order = _Order()
        self.checked: set[str] = set()  # chromosomes whose every key is checked (the second reading)
        self.seen = _Seen()
        self.target: tuple | None = None  # (chromosome, key): raise _Found at its first kept row
        self.names: dict[str, str | None] = {}  # chromosome -> problem with its name (kept ones only)
        self.stored: dict[str, str] = {}  # chromosome as named in the store (--chromosome-names) -> in the file
        self.strand_table = code_table(layout.strand_codes)
        self.n_rows = 0
        c, p = layout.chrom + 1, layout.pos + 1
        self.sort_hint = (f"a chromosome's rows must be contiguous, e.g. sorted with sort -k{c},{c} -k{p},{p}n, "
                          f"the header line kept first")

    def like(self) -> "BlockReader":
        """A new reader of the same file and settings (to read it again)."""
        return BlockReader(self.path, self.fmt, self.label, self.layout, self.settings, self.variable, self.skip,
                           self.block_bytes)

    def data_blocks(self) -> Iterator[tuple[bytes, int, int]]:
        """(text, number of its first line, bytes read) of the file's blocks after its header."""
        todo = self.skip
        for data, first, offset in blocks(self.path, self.block_bytes):
            if todo:
                lines = data.split(b"\n", todo)
                dropped = min(todo, len(lines) - 1)
                data, first, todo = (lines[-1] if dropped == todo else b""), first + dropped, todo - dropped
            if data:
                yield data, first, offset

    def check_unsorted(self) -> None:
        """After the first reading: read the file again, checking every kept row of the
        chromosomes that went back against all earlier ones (a FormatError names the first
        repeat and the line it repeats)."""
        if not self.order.unsorted:
            return
        again = self.like()
        again.checked = set(self.order.unsorted)
        for data, first, offset in prefetched(again.data_blocks()):
            for _ in again.rows(data, first, offset=offset):
                pass

    def line_of(self, chrom: str, key: int) -> tuple[int, str]:
        """The number and text of the first kept row of ``chrom`` with ``key`` (read again)."""
        finder = self.like()
        finder.target = (chrom, key)
        try:
            for data, first, offset in finder.data_blocks():
                for _ in finder.rows(data, first, offset=offset):
                    pass
        except _Found as found:
            block = found.row.block
            return block.line(block.index(found.row.row))
        raise AssertionError(f"{self.path}: the repeated row's first line was not found again")

    def parsed(self, data: bytes):
        """The block's columns and text, or the BadLine that stopped the parse (run ahead
        in a thread: pyarrow releases the GIL, so parsing overlaps the checks)."""
        try:
            return self.parser.columns(data)
        except BadLine as bad:
            return bad

    def rows(self, data: bytes, first: int, parsed=None, offset: int = 0) -> Iterator[Rows]:
        parsed = self.parsed(data) if parsed is None else parsed
        try:
            if isinstance(parsed, BadLine):
                raise parsed
            columns, text = parsed
        except BadLine as bad:
            if bad.index:  # the rows before the bad line may hold an earlier error
                before = b"\n".join(bad.lines[:bad.index]) + b"\n"
                self._validated_or_raise(self.parser(before), _Block(data, before, first))
            message = explain(bad.lines[bad.index], self.layout, bad.reason, self.variable)
            raise self._error(_Block(data, b"", first), bad.index, f"malformed {self.fmt} line: {message}") from None
        yield from self._validated_or_raise(columns, _Block(data, text, first, offset))

    def _validated_or_raise(self, columns, block: _Block) -> list[Rows]:
        try:
            return self._validated(columns, block)
        except _Failure as failure:
            message = failure.message
            if isinstance(failure.earlier, tuple):
                line, text = self.line_of(*failure.earlier)
                message = message.replace(EARLIER, f"line {line} ({quoted(text)})")
            elif failure.earlier is not None:
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
        starts = changes(chrom)
        runs = _Runs(starts, [chrom[int(start)].as_py() for start in starts], n, order.chrom)
        pos = numbers(col[lay.pos])
        checks = _Checks()  # the first check at the earliest row is reported
        kept_run, stored, finished = self._chromosome_runs(runs, checks)
        self._check_positions(col, pos, runs, checks)
        meth, cov = self._counts(col, checks.check)
        strand = self._strand(col, checks)
        keep, is_cg = self._kept(col, cov, strand, checks)
        pos0 = pos - lay.base
        if settings.merge_strands and strand is not None and not checks.failures:
            pos0 = self._merged(pos0, strand, is_cg, checks)
        kept = keep & np.repeat(kept_run, runs.ends - starts)
        repeat, last = self._repeated(block, pos, strand, kept, starts, runs.continues)
        checks.failures += [repeat] if repeat else []
        if (self.checked or self.target) and not checks.failures:
            checks.failures += self._repeated_anywhere(block, pos, strand, kept, runs)
        if checks.failures:
            raise min(checks.failures, key=lambda f: f.row)
        self._note_unsorted(pos, runs)
        order.finished, order.chrom = finished, runs.names[-1]
        order.position, order.last = int(pos[-1]), last
        out = []
        for r, (start, end) in enumerate(zip(starts, runs.ends)):
            sel = keep[start:end]
            if kept_run[r] and sel.any():
                out.append(Rows(stored[r], pos0[start:end][sel], meth[start:end][sel], cov[start:end][sel],
                                block.offset))
        return out

    def _chromosome_runs(self, runs: "_Runs", checks: "_Checks"):
        """Chromosome runs contiguous, with valid names (kept chromosomes only, as the store
        names them): (whether each run is kept, its stored name, the chromosomes finished)."""
        kept_run = np.zeros(len(runs.starts), bool)
        stored = [self.stored_name(name) for name in runs.names]
        previous, finished = self.order.chrom, set(self.order.finished)
        for r, (start, name) in enumerate(zip(runs.starts, runs.names)):
            if name != previous:
                if name in finished:
                    checks.fail(start, f"chromosome {name} appears again after other chromosomes ({self.sort_hint})")
                    break
                if previous is not None:
                    finished.add(previous)
                previous = name
            kept_run[r] = self.settings.keeps(stored[r])
            if kept_run[r]:
                problem = self.names.setdefault(stored[r], chromosome_name_problem(stored[r]))
                if problem:
                    checks.fail(start, f"invalid {problem}")
                    break
                if self.stored.setdefault(stored[r], name) != name:
                    checks.fail(start, f"chromosomes {self.stored[stored[r]]} and {name} of this file both become "
                                       f"{stored[r]} (--chromosome-names)")
                    break
        return kept_run, stored, finished

    def _note_unsorted(self, pos, runs: "_Runs") -> None:
        """The chromosomes whose positions go back in this block (their repeats are looked
        for by check_unsorted)."""
        if bool((pos[1:] < pos[:-1]).any()) or (runs.continues and pos[0] < self.order.position):
            back = np.flatnonzero(runs.backwards(pos, self.order.position))
            self.order.unsorted.update(runs.names[r] for r in np.unique(
                np.searchsorted(runs.starts, back, side="right") - 1))

    def _repeated_anywhere(self, block: _Block, pos, strand, kept, runs: "_Runs") -> list:
        """The second reading (``checked`` chromosomes) and the search for a ``target``: the
        first kept row whose key (position and strand) came before in its chromosome."""
        keys = pos * 3 + (strand + 1) if strand is not None else pos.copy()
        found = []
        for name, start, end in zip(runs.names, runs.starts, runs.ends):
            rows = np.flatnonzero(kept[start:end]) + start
            if self.target is not None and name == self.target[0]:
                hit = np.flatnonzero(keys[rows] == self.target[1])
                if hit.size:
                    raise _Found(_Row(block, int(rows[hit[0]])))
            if name not in self.checked:
                continue
            repeat = self.seen.first_repeat(name, keys[rows])
            if repeat is not None:
                row, earlier = repeat
                what = "chromosome, position and strand" if strand is not None else "chromosome and position"
                found.append(_Failure(int(rows[row]), f"repeats the {what} of {EARLIER}: a file may hold each "
                                                      f"cytosine once (its counts would be summed twice)",
                                      (name, int(keys[rows[row]])) if earlier is None else _Row(block,
                                                                                                int(rows[earlier]))))
                break
        return found

    def _check_positions(self, col, pos, runs: "_Runs", checks: "_Checks") -> None:
        lay, check = self.layout, checks.check
        check(pos.min() < lay.base, lambda: pos < lay.base,
              lambda i: f"position {pos[i]} below {lay.base} ({lay.base}-based positions)")
        check(pos.max() > POSITION_MAX, lambda: pos > POSITION_MAX,
              lambda i: f"position {pos[i]} too large (a counts store takes positions up to {POSITION_MAX:,})")
        if lay.end is not None:
            span = numbers(col[lay.end]) - pos
            if lay.end_offsets is None:
                check(span.min() < 1, lambda: span < 1, lambda i: f"end {pos[i] + span[i]} not after start {pos[i]}")
            else:
                allowed = " or ".join(map(str, lay.end_offsets))
                outside = ~np.isin(span, lay.end_offsets)
                check(outside.any(), lambda: outside,
                      lambda i: f"end - start is {span[i]}, expected {allowed} (one cytosine or CpG per line)")

    def _strand(self, col, checks: "_Checks"):
        """The rows' strands (+1, -1), or None for a format without them."""
        lay = self.layout
        if lay.strand is None:
            return None
        lengths, (codes,) = chars(col[lay.strand], 1)
        valid, value = self.strand_table
        bad = ~valid[codes] | (lengths != 1)
        texts = ", ".join(t for t, _ in lay.strand_codes)
        checks.check(bad.any(), lambda: bad,
                     lambda i: f"strand {col[lay.strand][i].as_py()!r} (expected one of {texts})")
        return value[codes]

    def _kept(self, col, cov, strand, checks: "_Checks"):
        """The rows kept (coverage, context, modification code) and which are CpGs (None
        without a context column)."""
        lay, settings = self.layout, self.settings
        keep = cov >= max(settings.min_coverage, 1)
        is_cg = None
        if lay.context is not None:
            ctx, ok, looks = contexts(col[lay.context], lay.context_kind, strand)
            checks.check(not ok.all(), lambda: ~ok,
                         lambda i: f"context {col[lay.context][i].as_py()!r} (expected {looks})")
            is_cg = ctx == 0
            if settings.context != "all":
                keep &= ctx == CONTEXT_INDEX[settings.context]
        if lay.code is not None:  # a modification code of one character, m or C
            lengths, (code,) = chars(col[lay.code], 1)
            keep &= (lengths == 1) & ((code == ord("m")) | (code == ord("C")))
        return keep, is_cg

    def _merged(self, pos0, strand, is_cg, checks: "_Checks"):
        """--merge-strands: the minus-strand C of a CpG (at pos + 1) joins the plus-strand C at pos."""
        pos0 = pos0 - ((strand < 0) & (is_cg if is_cg is not None else True))
        checks.check(pos0.min() < 0, lambda: pos0 < 0,
                     lambda i: "with --merge-strands this minus-strand row moves before the chromosome start")
        return pos0

    def _repeated(self, block: _Block, pos, strand, kept, starts, continues: bool):
        """The first kept row with the chromosome, position and strand of an earlier kept row
        (their counts would be summed twice), as a _Failure, or None; and the kept rows at the
        block's last position, by strand (the next block may repeat one). The file is sorted
        by position within a chromosome, so repeats are neighbours: in most blocks one
        comparison of neighbouring positions finds none. (In a chromosome that is not sorted,
        repeats that are not neighbours are found by BlockReader.check_unsorted.)"""
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
        get = {name: numbers(col[i]) for name, i in (("meth", lay.meth), ("total", lay.total),
               ("unmeth", lay.unmeth), ("other", lay.other_meth)) if i is not None}
        for values in get.values():
            check(values.min() < 0, lambda v=values: v < 0, lambda i, v=values: f"negative count {v[i]}")
            check(values.max() > COUNT_MAX, lambda v=values: v > COUNT_MAX,
                  lambda i, v=values: f"count {v[i]} too large (the store holds counts up to {COUNT_MAX:,})")
        if lay.fraction is not None:
            frac = numbers(col[lay.fraction])
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
    decompression, parsing (the next block) and checking (this block). A file whose
    positions go back within a chromosome is read again at the end for repeats
    (BlockReader.check_unsorted)."""
    reader = BlockReader(path, fmt, label, layout, settings, variable, skip, block_bytes)

    def parsed():
        for data, first, offset in prefetched(reader.data_blocks()):
            yield data, first, offset, reader.parsed(data)

    for data, first, offset, columns in prefetched(parsed(), depth=1):
        yield from reader.rows(data, first, columns, offset)
    if reader.n_rows == 0:
        raise FormatError(path, None, None, "the file is empty (no data lines)", label)
    reader.check_unsorted()
