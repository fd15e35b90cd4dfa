"""A call file's bytes: decompressed and cut into blocks of complete lines, read ahead in a
background thread."""

from __future__ import annotations

import contextlib
import queue
import re
import threading
from typing import Iterator

from .rows import BLOCK_BYTES, BOM, GZIP_MAGIC, MAX_LINE, SHOWN, FormatError, decoded, igzip


def open_binary(path):
    """The file's bytes, gzip/bgzip decompressed (detected by magic bytes, not the name)."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return igzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")


PIECE = 1 << 18  # decompressed per read: a corrupt stream loses at most this much before its error


def _pieces(fh, size: int):
    """(decompressed data in blocks of about ``size`` bytes, the bytes of the file read so
    far: compressed ones for a compressed file); a decompression error ends the blocks with
    the exception itself, after the data read before it."""
    parts, held = [], 0
    raw = getattr(fh, "fileobj", fh)  # a GzipFile's compressed file
    while True:
        try:
            piece = fh.read(min(PIECE, size))
        except (OSError, EOFError) as exc:  # BadGzipFile is an OSError, truncation an EOFError
            yield b"".join(parts), raw.tell()
            yield exc
            return
        if piece:
            parts.append(piece)
            held += len(piece)
        if held >= size or not piece:
            yield b"".join(parts), raw.tell()
            parts, held = [], 0
        if not piece:
            return


def lines(path) -> Iterator[bytes]:
    """The file's lines from the start, read as far as they are asked for (BOM and line
    ends removed); the line length bound applies."""
    for block, _, _ in blocks(path, 1 << 20):
        for line in block.split(b"\n")[:-1]:
            yield line.rstrip(b"\r")


def text_lines(path) -> Iterator[tuple[int, str, list[str]]]:
    """(number, text, fields) of the file's lines from the start, as far as they are asked for
    (close it when done)."""
    with contextlib.closing(lines(path)) as read:
        for number, line in enumerate(read, 1):
            text = decoded(line)
            yield number, text, text.split()


def blocks(path, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[bytes, int, int]]:
    """(text, number of its first line, bytes of the file read): complete lines, each ending
    with a newline, of at most about ``block_bytes``. A UTF-8 BOM at the start is dropped; lines longer than
    MAX_LINE, a carriage return inside a line, and corrupt compressed data are errors
    (naming the line reached)."""
    line, pending, start = 1, b"", True
    with open_binary(path) as fh:
        for piece in _pieces(fh, block_bytes):
            if isinstance(piece, Exception):
                raise FormatError(path, line, None, f"corrupt or truncated compressed data at this line "
                                                    f"({type(piece).__name__}: {piece})")
            chunk, offset = piece
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
                yield (data if cut == len(data) else data[:cut]), line, offset
                line += data.count(b"\n", 0, cut)
        if pending:  # a last line without a newline
            yield pending + b"\n", line, offset


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
