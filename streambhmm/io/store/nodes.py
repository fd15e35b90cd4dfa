"""A chromosome's zarr nodes written and read as files: their documents (``zarr.json``) and
their chunks, byte for byte as zarr writes them.

A zarr call on a local store hands each file operation to zarr's I/O threads and costs
milliseconds; staging and committing a chromosome took about thirty of them, so an assembly
of hundreds of contigs took tens of seconds to ingest (0.1 s a contig). Here a node is a file
read or written. Zarr remains the authority on the documents: those of schema are checked
against what zarr writes (tests/io/test_store_nodes.py), and a chunk whose codecs are not the
two this store uses (bytes, then blosc or zstd), as a store made by another zarr may have, is
written through zarr."""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import threading

import numpy as np
from numcodecs import Blosc, Zstd, blosc

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..storage import Location
from .schema import StoreError

BLOSC_SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}

# One blosc thread per frame: its threads store a frame's blocks in the order they finish, so
# the same counts gave chunk files that differed byte for byte from one ingest to the next.
# (numcodecs already compresses single-threaded outside the main thread, as zarr's codecs run.)
blosc.use_threads = False


def why(exc: BaseException) -> str:
    """An error as a short phrase: an OSError's reason and file, else its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror.lower()}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def read_document(path: Location) -> dict:
    """``path``'s zarr.json; one that is not a JSON object is refused with the file named."""
    file = path / "zarr.json"
    data = file.read_bytes()
    try:
        document = json.loads(data)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        document = exc
    if not isinstance(document, dict):
        raise StoreError(f"{file} is damaged: not a zarr document (it begins {data[:80]!r}); restore it from a copy of "
                         f"the store")
    return document


def write_document(root: Location, path: Location, document: dict) -> None:
    """``path``'s zarr.json, written in place as zarr writes it (see :func:`write_file`)."""
    write_file(root, path / "zarr.json", json.dumps(document, indent=2).encode())


def write_file(root: Location, path: Location, data: bytes) -> None:
    """Write ``data`` at ``path`` inside ``root``, following no link: a store copied from
    elsewhere, or written by others, may hold one pointing at any file of the user's. In
    place and not flushed to disk, as zarr writes: readers go by the consolidated metadata
    of the root, written last, and a commit completed again writes these again."""
    if not path.is_local:
        path.write_bytes(data)
        return
    if not os.path.isdir(root.url):
        os.makedirs(root.url)
    directory = existing = os.path.dirname(path.url)
    while not os.path.isdir(existing):  # a stat each: mkdir on an existing directory costs more
        existing = os.path.dirname(existing)
    real_root = os.path.realpath(root.url)
    if os.path.commonpath([os.path.realpath(existing), real_root]) != real_root:
        raise OSError(errno.ELOOP, "a symbolic link leads out of the store", existing)
    if existing != directory:
        os.makedirs(directory, exist_ok=True)
    fd = os.open(path.url, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def chunk_path(array: Location, index) -> Location:
    return array / "c" / "/".join(str(int(i)) for i in index)


@functools.lru_cache(maxsize=64)
def _compressor(codecs: str):
    """The numcodecs codec zarr would compress with for an array's ``codecs`` (its JSON), or
    None for codecs we do not write ourselves."""
    codecs = json.loads(codecs)
    if len(codecs) != 2 or codecs[0] != {"name": "bytes", "configuration": {"endian": "little"}}:
        return None
    name, config = codecs[1]["name"], codecs[1].get("configuration", {})
    if name == "blosc" and config.get("shuffle") in BLOSC_SHUFFLES:
        return Blosc.from_config({"cname": config["cname"], "clevel": config["clevel"],
                                  "shuffle": BLOSC_SHUFFLES[config["shuffle"]],
                                  "blocksize": config.get("blocksize", 0), "typesize": config["typesize"]})
    if name == "zstd":
        return Zstd.from_config({"level": config.get("level", 0), "checksum": config.get("checksum", False)})
    return None


def _layout(document: dict):
    """(dtype, chunk shape, fill value, compressor or None) of an array's document."""
    try:
        dtype = np.dtype(document["data_type"]).newbyteorder("<")
    except TypeError:
        dtype = None
    shape = tuple(document["chunk_grid"]["configuration"]["chunk_shape"])
    compressor = _compressor(json.dumps(document["codecs"])) if dtype is not None and dtype.kind in "iu" else None
    return dtype, shape, document.get("fill_value", 0), compressor


def _chunk_selection(document: dict, index: tuple) -> tuple:
    """The array's region chunk ``index`` covers (the edge chunk cut at the array's shape)."""
    shape = document["chunk_grid"]["configuration"]["chunk_shape"]
    return tuple(slice(i * n, min((i + 1) * n, d)) for i, n, d in zip(index, shape, document["shape"]))


def write_chunk(root: Location, array: Location, document: dict, index: tuple, values: np.ndarray) -> None:
    """Chunk ``index`` of ``array`` (its ``document``) set to ``values`` (the chunk's shape, or
    less along the first axis: the rest is the fill value). A chunk of only the fill value
    is removed, as zarr does."""
    dtype, shape, fill, compressor = _layout(document)
    values = np.asarray(values)
    if compressor is not None and not (values != fill).any():
        chunk_path(array, index).unlink()
        return
    dtype = values.dtype if dtype is None else dtype
    written = tuple(slice(0, n) for n in values.shape)
    if compressor is None:  # codecs of another kind: zarr writes the whole chunk (within the array)
        import zarr

        chunk = np.full(shape, fill, dtype)
        chunk[written] = values
        selection = _chunk_selection(document, index)
        zarr.open_array(array.url, mode="r+")[selection] = chunk[tuple(slice(0, s.stop - s.start) for s in selection)]
        return
    chunk = _fill_chunk(shape, dtype, fill)
    chunk[written] = values
    try:
        data = _encoded(compressor, chunk, values.size, fill)
    finally:
        chunk[written] = fill  # the buffer back to the fill value for the next chunk
    write_file(root, chunk_path(array, index), data)


def _encoded(compressor, chunk: np.ndarray, used: int, fill) -> bytes:
    """``compressor.encode(chunk)`` where all but the first ``used`` items (C order) of
    ``chunk`` are ``fill``. Blosc compresses a chunk in independent blocks, so a short
    contig's chunk is the blosc frame of its leading blocks followed by the fill value's blocks,
    compressed once per kind of chunk: encoding 4 MB of fill cost 2-4 ms a chunk, most of an
    assembly's ingest (several chunks a contig). The same blocks, the same header, so the same
    frame as blosc writes."""
    if not isinstance(compressor, Blosc) or used >= chunk.size:
        return compressor.encode(chunk)
    config = {k: v for k, v in compressor.get_config().items() if k != "id"}
    filled = _fill_frame(json.dumps(config), chunk.shape, chunk.dtype.str, fill)
    if filled is None:
        return compressor.encode(chunk)
    header, block_size, fill_blocks = filled
    n_blocks = len(fill_blocks)
    lead = max(1, -(-used * chunk.dtype.itemsize // block_size))  # blocks that hold values
    # One fill block more, and frames that compress to a quarter at most, keep blosc's
    # limit on a block's output (the room left in the frame) from reaching either frame.
    if 2 * (lead + 1) > n_blocks:
        return compressor.encode(chunk)
    forced = Blosc(**{**config, "blocksize": block_size})
    head = forced.encode(chunk.reshape(-1)[:(lead + 1) * block_size // chunk.dtype.itemsize])
    if head[:4] != header[:4] or int.from_bytes(head[8:12], "little") != block_size \
            or 4 * len(head) > (lead + 1) * block_size:
        return compressor.encode(chunk)
    blocks = _blosc_blocks(head, lead + 1)[:lead] + fill_blocks[lead:]
    offset = 16 + 4 * n_blocks
    starts = np.cumsum([offset] + [len(b) for b in blocks]).astype("<u4")
    return b"".join([header[:12], int(starts[-1]).to_bytes(4, "little"), starts[:-1].tobytes(), *blocks])


@functools.lru_cache(maxsize=32)
def _fill_frame(config: str, shape: tuple, dtype: str, fill):
    """(header, block size, blocks) of the blosc frame (``config``: the codec's, as JSON) of a
    chunk of ``fill``, or None for a frame stored uncompressed (no blocks to reuse)."""
    frame = Blosc(**json.loads(config)).encode(np.full(shape, fill, np.dtype(dtype)))
    if len(frame) < 16 or frame[0] != 2 or frame[2] & 0x02:  # format 2; 0x02: stored as it is
        return None
    n_bytes, block_size = int.from_bytes(frame[4:8], "little"), int.from_bytes(frame[8:12], "little")
    return frame[:16], block_size, _blosc_blocks(frame, -(-n_bytes // block_size))


def _blosc_blocks(frame: bytes, n_blocks: int) -> list[bytes]:
    """The compressed blocks of a blosc frame, in block order (each runs to the next block's
    start in the frame, or to its end)."""
    starts = np.frombuffer(frame, "<u4", n_blocks, 16).astype(np.int64)
    ends = np.sort(np.r_[starts, len(frame)])
    return [frame[a:ends[np.searchsorted(ends, a, side="right")]] for a in starts]


_FILLED = threading.local()


def release_fill_chunks() -> None:
    """Let go of this thread's kept chunks: a batch's staged samples wait for their turns to
    commit, each in a thread of its own, and 160 of them kept 610 MB."""
    _FILLED.__dict__.pop("buffers", None)


def _fill_chunk(shape: tuple, dtype: np.dtype, fill) -> np.ndarray:
    """A chunk of the fill value, this thread's own, kept for the next chunk of its kind: a
    fresh chunk of 1 M bins costs more in page faults than encoding a short contig's rows."""
    buffers = _FILLED.__dict__.setdefault("buffers", {})
    key = (shape, np.dtype(dtype).str, fill)
    if key not in buffers:
        if len(buffers) >= 8:
            buffers.clear()
        buffers[key] = np.full(shape, fill, dtype)
    return buffers[key]


def read_chunk(array: Location, document: dict, index: tuple, rows: int | None = None) -> np.ndarray:
    """Chunk ``index`` of ``array`` (its whole chunk shape; the fill value where unwritten),
    read-only; with ``rows``, only its first ``rows`` along the first axis (a short contig, or
    a chromosome's last chunk: blosc decompresses only the blocks that hold them)."""
    dtype, shape, fill, compressor = _layout(document)
    path = chunk_path(array, index)
    if rows is not None:
        rows = min(rows, shape[0])
    if compressor is None:
        import zarr

        selection = _chunk_selection(document, index)
        chunk = np.full(shape, fill, document["data_type"])
        part = zarr.open_array(array.url, mode="r")[selection]
        chunk[tuple(slice(0, n) for n in part.shape)] = part
        return chunk[:rows]
    if not path.exists():
        return np.full(shape if rows is None else (rows, *shape[1:]), fill, dtype)
    raw = path.read_bytes()
    if rows is not None and rows < shape[0] and isinstance(compressor, Blosc):
        leading = _blosc_leading_items(raw, rows * int(np.prod(shape[1:], dtype=np.int64)), dtype,
                                       int(np.prod(shape, dtype=np.int64)))
        if leading is not None:
            return leading.reshape(rows, *shape[1:])
    return np.frombuffer(compressor.decode(raw), dtype).reshape(shape)[:rows]  # read-only


@functools.cache
def _blosc_getitem():
    """c-blosc's ``blosc_getitem`` from numcodecs' own build (it decompresses only the blocks
    that hold a range of items), or None where that build does not export it."""
    from numcodecs import blosc
    try:
        getitem = ctypes.CDLL(blosc.__file__).blosc_getitem
    except (OSError, AttributeError):
        return None
    getitem.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    getitem.restype = ctypes.c_int
    return getitem


def _blosc_leading_items(raw: bytes, count: int, dtype: np.dtype, chunk_items: int) -> np.ndarray | None:
    """The first ``count`` items of the blosc (format 2) buffer ``raw``; None (the caller then
    decompresses it all, and reports what is wrong) unless its header describes a buffer of
    exactly these bytes, holding a whole chunk of ``chunk_items`` items of ``dtype``'s size."""
    getitem = _blosc_getitem()
    if getitem is None or len(raw) < 16 or raw[0] != 2 or raw[3] != dtype.itemsize \
            or int.from_bytes(raw[12:16], "little") != len(raw) \
            or int.from_bytes(raw[4:8], "little") != chunk_items * dtype.itemsize:
        return None
    out = np.empty(count, dtype)
    if count and getitem(raw, 0, count, out.ctypes.data) != count * dtype.itemsize:
        return None
    return out
