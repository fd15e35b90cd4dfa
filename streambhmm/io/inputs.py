"""Input files: regular files that can be read more than once, and replicates told apart by
their content."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .blocks import open_binary


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
