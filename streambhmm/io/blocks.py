"""A call file's bytes: decompressed and cut into blocks of complete lines, read ahead in a
background thread."""

from __future__ import annotations

import contextlib
import os
import queue
import re
import threading
import zlib
from typing import Iterator

from .rows import BLOCK_BYTES, BOM, GZIP_MAGIC, MAX_LINE, SHOWN, FormatError, decoded, igzip, isal_zlib


# how other compressed or binary files begin, and what to do with them (read as text, they
# failed with advice about line endings)
NOT_TEXT = ((re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)"), "bzip2 data: decompress it (bunzip2 -k FILE), or "
             "recompress it with gzip"),
            (b"\xfd7zXZ\x00", "xz data: decompress it (xz -dk FILE), or recompress it with gzip"),
            (b"\x28\xb5\x2f\xfd", "zstd data: decompress it (zstd -d FILE), or recompress it with gzip"),
            (b"PK\x03\x04", "a zip archive: unzip it and give the call file inside"),
            (b"BAM\x01", "a BAM file of aligned reads: call methylation first (e.g. Bismark's methylation "
                         "extractor, MethylDackel or modkit) and give its output"),
            (b"\x7fELF", "an executable program"))


# bgzip's end-of-file marker, an empty BGZF block (the SAM/BAM specification, section 4.1.2)
BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")


def open_binary(path):
    """The file's bytes, gzip/bgzip decompressed (detected by magic bytes, not the name); a
    file of another compression or a binary kind is refused, saying which, and so is a bgzip
    file without its end-of-file marker."""
    with open(path, "rb") as fh:
        magic = fh.read(18)
        cut = _bgzf(magic) and _bgzf_cut(fh)
    if cut:
        # bgzip's blocks are whole gzip members, often ending at a line's end: a copy or a
        # compression stopped part way decompresses without an error, short of its rows
        raise FormatError(path, None, None, "is a bgzip (BGZF) file without bgzip's end-of-file marker: it was cut "
                                            "short (a copy or a compression that did not finish), and its last rows "
                                            "are missing. Copy or compress it again (if it is whole, written by a "
                                            "tool that leaves the marker out: gzip -dc FILE | bgzip > FILE2)")
    magic = magic[:10]
    if magic[:2] == GZIP_MAGIC:
        head = igzip.open(path, "rb")
        try:
            inner = head.read(4)  # a BAM is gzipped (BGZF) too
        except (OSError, EOFError, isal_zlib.error):
            inner = b""  # corrupt or cut short: the reading says so, with the line
        head.close()
        if inner == b"BAM\x01":
            magic = inner
        else:
            return igzip.open(path, "rb")
    for signature, what in NOT_TEXT:
        if signature.match(magic) if isinstance(signature, re.Pattern) else magic.startswith(signature):
            raise FormatError(path, None, None, f"is not a text or gzip file: it is {what}")
    return open(path, "rb")


def _bgzf(head: bytes) -> bool:
    """Whether a file beginning with ``head`` (18 bytes) is BGZF: gzip with the extra field
    'BC' in its first member's header."""
    return len(head) >= 16 and head[:4] == GZIP_MAGIC + b"\x08\x04" and head[12:14] == b"BC"


def _bgzf_cut(fh) -> bool:
    """Whether the BGZF file ``fh`` ends with a data block, not bgzip's end-of-file marker:
    its blocks are walked by their sizes when its last bytes are not the marker. Bytes after
    a marker (gzip appended to it, padding) are not a cut; they are read, or refused, as any
    gzip file's (so is a block cut part way, which fails to decompress)."""
    size = fh.seek(0, os.SEEK_END)
    fh.seek(max(size - len(BGZF_EOF), 0))
    if fh.read() == BGZF_EOF:
        return False
    position, last = 0, b""
    while position < size:
        fh.seek(position)
        head = fh.read(18)
        if not _bgzf(head):
            return False  # not a block: another gzip member, or bytes the reading refuses
        length = int.from_bytes(head[16:18], "little") + 1
        last = head + fh.read(length - len(head)) if length == len(BGZF_EOF) else b""
        position += length
    return position == size and last != BGZF_EOF


# a gzip member's trailer that does not match its data (gzip's and isal's messages)
TRAILER_ERROR = re.compile(r"CRC check failed|Incorrect length of data produced")
PIECE = 1 << 18  # decompressed per read: a corrupt stream loses at most this much before its error


def _pieces(fh, size: int):
    """(decompressed data in blocks of about ``size`` bytes, the bytes of the file read so
    far: compressed ones for a compressed file); a decompression error ends the blocks with
    the exception itself, after the data read before it."""
    parts, held = [], 0
    raw = getattr(fh, "fileobj", fh)  # a GzipFile's compressed file
    # BadGzipFile is an OSError, truncation an EOFError, corrupt deflate data isal's own error
    errors = (OSError, EOFError) + ((isal_zlib.error,) if raw is not fh else ())
    while True:
        try:
            piece = fh.read(min(PIECE, size))
        except errors as exc:
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


def _gzip_end(path) -> int | None:
    """Where ``path``'s gzip members end, when whole members are followed by bytes that are
    not gzip (None otherwise: a member corrupt or cut short). The decompressor reads ahead,
    so its error names no line; this second reading, only after an error, finds the byte."""
    end, position, member = 0, 0, None
    with open(path, "rb") as fh:
        data = fh.read(PIECE)
        while data:
            if member is None:  # between members: the next bytes must begin one
                data += fh.read(1) if len(data) < 2 else b""
                if data[:2] != GZIP_MAGIC:
                    return end
                member = zlib.decompressobj(zlib.MAX_WBITS | 16)
            try:
                member.decompress(data, PIECE)  # the output is not needed, only where the member ends
            except zlib.error:
                return None
            if member.eof:
                rest = member.unused_data
                position += len(data) - len(rest)
                end, member, data = position, None, rest or fh.read(PIECE)
            else:
                tail = member.unconsumed_tail
                position += len(data) - len(tail)
                data = tail or fh.read(PIECE)
    return None


def _lines_before_damage(path) -> int:
    """The complete lines of ``path`` that decompress before its damage. The decompressor
    reads ahead, so its error comes before the lines it read are counted (a small file's,
    at line 1); this second reading, only after an error, counts them."""
    count, member = 0, zlib.decompressobj(zlib.MAX_WBITS | 16)
    with open(path, "rb") as fh:
        data = fh.read(PIECE)
        while data:
            try:
                count += member.decompress(data).count(b"\n")
            except zlib.error:
                break
            if not member.eof:
                data = fh.read(PIECE)
                continue
            data = member.unused_data or fh.read(PIECE)
            data += fh.read(1) if len(data) < 2 else b""  # a member may end a byte before a read's end
            if data[:2] != GZIP_MAGIC:  # no next member (the data after the last one are _gzip_end's)
                break
            member = zlib.decompressobj(zlib.MAX_WBITS | 16)
    return count


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
                end = _gzip_end(path)
                if end is not None:
                    junk = os.path.getsize(path) - end
                    what = "byte that is" if junk == 1 else "bytes that are"
                    raise FormatError(path, None, None, f"the gzip data end at byte {end:,}, followed by {junk:,} "
                                      f"{what} not gzip (appended to the file?); keep the data with head -c {end} "
                                      f"FILE > FIXED") from None
                if TRAILER_ERROR.search(str(piece)):  # found at a member's end: no line is to blame
                    raise FormatError(path, None, None, f"its data decompress whole but do not match the checksum or "
                                      f"length gzip recorded for them ({piece}): the file was damaged, or changed "
                                      f"after it was compressed, somewhere in it (`gzip -t` says the same). Copy or "
                                      f"make it again") from None
                raise FormatError(path, max(line, _lines_before_damage(path) + 1), None,
                                  f"corrupt or truncated compressed data at or after this line "
                                  f"({type(piece).__name__}: {piece})")
            chunk, offset = piece
            if start and chunk.startswith(BOM):
                chunk = chunk[len(BOM):]
            if start and _utf16(chunk):
                raise FormatError(path, 1, None, "is UTF-16 text (a spreadsheet's \"Unicode text\", or PowerShell's "
                                                 "output), which is not read: convert it to UTF-8 (iconv -f UTF-16 -t "
                                                 "UTF-8 FILE > FILE2)")
            start = False
            data = pending + chunk if pending else chunk
            cut = data.rfind(b"\n") + 1
            _check_lines(path, data, cut, line)
            pending = data[cut:]
            if len(pending) > MAX_LINE:
                line += data.count(b"\n", 0, cut)
                _check_carriage_returns(path, pending, len(pending), line)
                raise FormatError(path, line, decoded(pending[:SHOWN]),  # its length is not known: no count
                                  f"line longer than {MAX_LINE:,} bytes (no newline)")
            if cut:
                yield (data if cut == len(data) else data[:cut]), line, offset
                line += data.count(b"\n", 0, cut)
        if pending:  # a last line without a newline (its line end may be a \r alone)
            _check_carriage_returns(path, pending, len(pending.rstrip(b"\r")), line)
            yield pending + b"\n", line, offset


def _utf16(head: bytes) -> bool:
    """UTF-16 text of ASCII characters, with or without its byte-order mark: a NUL as every other
    byte of its start, and none between them (a file of NULs, UTF-32 and Latin-1 are not)."""
    start = head[2:66] if head.startswith((b"\xff\xfe", b"\xfe\xff")) else head[:64]
    return len(start) >= 4 and any(not nuls.strip(b"\x00") and 0 not in text
                                   for nuls, text in ((start[1::2], start[::2]), (start[::2], start[1::2])))


def _check_lines(path, data: bytes, end: int, line: int) -> None:
    """Lines of data[:end] are at most MAX_LINE bytes, without a lone carriage return."""
    _check_carriage_returns(path, data, end, line)
    window = MAX_LINE // 2  # a longer line spans a whole window without a newline
    for start in range(0, end, window):
        if data.find(b"\n", start, min(start + window, end)) < 0:
            lo = data.rfind(b"\n", 0, start) + 1
            hi = data.find(b"\n", start, end)
            if hi - lo > MAX_LINE:
                raise FormatError(path, line + data.count(b"\n", 0, lo), decoded(data[lo:hi]),  # counted in the message
                                  f"line longer than {MAX_LINE:,} bytes")


def _check_carriage_returns(path, data: bytes, end: int, line: int) -> None:
    """No carriage return in data[:end] but before a newline. Lines ended by one alone (old
    Mac files) would otherwise read as one line too long."""
    if b"\r" not in data or data.count(b"\r", 0, end) == data.count(b"\r\n", 0, end):
        return
    at = re.search(rb"\r(?!\n)", data).start()
    lo = data.rfind(b"\n", 0, at) + 1
    hi = data.find(b"\n", at)
    hi = hi if hi >= 0 else len(data)
    text = decoded(data[lo:min(hi, lo + SHOWN * 4)])
    if len(re.findall(rb"\r(?!\n)", data[at:hi + 1])) > 1:  # several lines in one: ended by \r alone
        raise FormatError(path, line + data.count(b"\n", 0, lo), text,
                          "lines end in a carriage return (\\r) alone, not a newline; convert them first, "
                          "e.g. tr '\\r' '\\n' < FILE > FILE.txt")
    raise FormatError(path, line + data.count(b"\n", 0, lo), text, "carriage return (\\r) inside a line")


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
