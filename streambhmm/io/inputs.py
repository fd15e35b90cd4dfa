"""Input files: regular files that can be read more than once, and replicates told apart by
their content."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import sys
import tempfile
from pathlib import Path

from .blocks import open_binary
from .outputs import NO_ROOM
from .rows import FormatError


def check_input(path) -> None:
    """A regular file that can be read more than once (detection, checksum, parsing)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if str(path) == "-":  # DNMTools' and samtools' name for standard input
            raise FileNotFoundError("-: no such file; standard input is not read as '-': ingest reads each file more "
                                    "than once (to detect its format, checksum and parse it), so save the stream to a "
                                    "file first") from None
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


@contextlib.contextmanager
def readable_twice(path: str, max_bytes: int, too_large):
    """``path`` as a file that can be read twice (the readers look at its first bytes, then
    open it again): itself, or for standard input ("-"), a pipe (a shell's <(...)) or a FIFO a
    temporary copy, read from one opening (opened again, a FIFO waited for a writer forever and
    a pipe lost its first bytes). A file larger than ``max_bytes`` is refused with the message
    ``too_large(name)`` (``--groups /dev/zero`` filled the memory). The readers' FormatErrors
    name ``path``, not the copy."""
    name = "standard input" if path == "-" else path
    try:
        if path != "-" and (not os.path.exists(path) or stat.S_ISREG(os.stat(path).st_mode)):
            if os.path.exists(path) and os.path.getsize(path) > max_bytes:
                raise ValueError(too_large(name))
            yield path
            return
        with tempfile.TemporaryDirectory(prefix="streambhmm-input-") as directory:
            copy = Path(directory) / "copy"
            try:
                with (contextlib.nullcontext(sys.stdin.buffer) if path == "-" else open(path, "rb")) as source, \
                        open(copy, "wb") as out:
                    while piece := source.read(1 << 16):
                        out.write(piece)
                        if out.tell() > max_bytes:
                            raise ValueError(too_large(name))
            except OSError as exc:
                if exc.errno not in NO_ROOM:
                    raise
                raise ValueError(f"{name}: cannot be copied to read it ({exc.strerror.lower()} in "
                                 f"{tempfile.gettempdir()}); set TMPDIR to a directory with room") from None
            yield str(copy)
    except FormatError as exc:
        raise FormatError(path, exc.line, exc.text, exc.message, exc.fmt) from None


CONTENT_START = 1 << 20  # decompressed bytes compared first: replicates that differ, differ early


def content_sha256(path, limit: int | None = None) -> str | None:
    """SHA-256 of the file's decompressed text (its first ``limit`` bytes) as lines end in it:
    carriage returns left out and a last line's newline added, so the same rows saved on
    Windows or without their final newline are the same content (an audit summed such a copy
    as a second replicate); None if it cannot be decompressed (the reading names the line
    where it breaks)."""
    digest, left, last = hashlib.sha256(), limit, b"\n"
    try:
        with open_binary(path) as fh:
            while left is None or left > 0:
                piece = fh.read(1 << 20)
                if not piece:
                    if last != b"\n":
                        digest.update(b"\n")
                    break
                piece = piece.replace(b"\r", b"")[:left]
                if piece:
                    digest.update(piece)
                    last = piece[-1:]
                    left = None if left is None else left - len(piece)
    except (OSError, EOFError):
        return None
    return digest.hexdigest()


def check_replicates(paths) -> None:
    """Refuse a file given twice as replicates: the same path, or the same content once
    decompressed (a copy, a gzipped copy, one with other line ends: content_sha256): its counts
    would be summed twice. Only files whose first decompressed MiB is the same are read to the
    end."""
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
