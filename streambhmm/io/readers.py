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

The checks, and how repeated rows are found, are in blockcheck.py.
"""

from __future__ import annotations

from typing import Iterator

from .blockcheck import EARLIER, Block, BlockChecks, RowFound
from .fieldchecks import CheckFailure
from .blocks import blocks, prefetched
from .parser import BadLine, Parser, explain
from .rows import BLOCK_BYTES, FormatError, Layout, ReadTally, Rows, Settings, quoted


class BlockReader:
    """Reads the blocks of one file, parses them and has them checked (blockcheck.BlockChecks)
    into Rows; a failure becomes a FormatError naming the file, the line and its text."""

    def __init__(self, path, fmt: str, label: str, layout: Layout, settings: Settings, variable: bool,
                 skip: int = 0, block_bytes: int = BLOCK_BYTES):
        self.path, self.fmt, self.label, self.layout, self.settings = path, fmt, label, layout, settings
        self.variable = variable  # the number of fields was set by the first data line
        self.skip, self.block_bytes = skip, block_bytes
        self.parser = Parser(layout)
        self.checks = BlockChecks(layout, settings)

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
        if not self.checks.order.unsorted:
            return
        again = self.like()
        again.checks.checked = set(self.checks.order.unsorted)
        for data, first, offset in prefetched(again.data_blocks()):
            for _ in again.rows(data, first, offset=offset):
                pass

    def line_of(self, chrom: str, key: int) -> tuple[int, str]:
        """The number and text of the first kept row of ``chrom`` with ``key`` (read again)."""
        finder = self.like()
        finder.checks.target = (chrom, key)
        try:
            for data, first, offset in finder.data_blocks():
                for _ in finder.rows(data, first, offset=offset):
                    pass
        except RowFound as found:
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
                self._validated_or_raise(self.parser(before), Block(data, before, first))
            message = explain(bad.lines[bad.index], self.layout, bad.reason, self.variable)
            raise self._error(Block(data, b"", first), bad.index, f"malformed {self.fmt} line: {message}") from None
        yield from self._validated_or_raise(columns, Block(data, text, first, offset))

    def _validated_or_raise(self, columns, block: Block) -> list[Rows]:
        try:
            return self.checks.validated(columns, block)
        except CheckFailure as failure:
            message = failure.message
            if isinstance(failure.earlier, tuple):
                line, text = self.line_of(*failure.earlier)
                message = message.replace(EARLIER, f"line {line} ({quoted(text)})")
            elif failure.earlier is not None:
                earlier = failure.earlier.block
                line, text = earlier.line(earlier.index(failure.earlier.row))
                message = message.replace(EARLIER, f"line {line} ({quoted(text)})")
            raise self._error(block, block.index(failure.row), message) from None

    def _error(self, block: Block, index: int, message: str) -> FormatError:
        line, text = block.line(index)
        return FormatError(self.path, line, text, message, self.label)


def read_layout(path, fmt: str, label: str, layout: Layout, settings: Settings, skip: int, variable: bool,
                block_bytes: int = BLOCK_BYTES, tally: ReadTally | None = None) -> Iterator[Rows]:
    """Rows of ``path`` after its first ``skip`` lines (the header), per chromosome run.
    ``label`` names the format in messages ("tsv, detected"). Three stages overlap:
    decompression, parsing (the next block) and checking (this block). A file whose
    positions go back within a chromosome is read again at the end for repeats
    (BlockReader.check_unsorted). ``tally`` adds up the rows left out, by reason."""
    reader = BlockReader(path, fmt, label, layout, settings, variable, skip, block_bytes)

    def parsed():
        for data, first, offset in prefetched(reader.data_blocks()):
            yield data, first, offset, reader.parsed(data)

    for data, first, offset, columns in prefetched(parsed(), depth=1):
        yield from reader.rows(data, first, columns, offset)
    if reader.checks.n_rows == 0:
        raise FormatError(path, None, None, "the file is empty (no data lines)", label)
    reader.check_unsorted()
    if tally is not None:
        for reason, rows in reader.checks.left_out.items():
            setattr(tally, reason, getattr(tally, reason) + rows)
        for chrom, rows in reader.checks.not_selected.items():
            tally.not_selected[chrom] = tally.not_selected.get(chrom, 0) + rows
        tally.seen |= set(reader.checks.names) | set(reader.checks.not_selected)
