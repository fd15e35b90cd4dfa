"""One partial of a moment store on disk: a Zarr group of a chunk's raw sums and block
statistics, its checksum, and its atomic write (temporary directory, then rename)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import uuid

import numpy as np
from scipy import sparse

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..io.outputs import remove_leftovers
from ..io.storage import Location, put_in_place
from .blocks import BlockStats
from .manifest import MomentStoreError
from .pipeline import ChunkPartial
from .sums import ARRAY_FIELDS, Moments

PARTIAL_NAME = re.compile(r"[0-9]{6,}-[0-9a-f]{32}")  # partial_relpath's last part
WRITING_NAME = re.compile(r"\.tmp-[0-9a-f]{12}")  # write_partial's temporary directory
CSR_PARTS = ("data", "indices", "indptr")  # a block histogram's arrays
GROUP_DOC = "zarr.json"  # a Zarr group's metadata: partials/ and partials/<chrom>/ are groups too

# Each array's dimensions, so a partial opens as a Dataset with xarray.open_zarr (F: the feature
# of the first, second and third bin of a triple; the histograms: a row per layout slot).
DIMENSIONS = {
    "p12": ("feature_1", "feature_2"), "p13": ("feature_1", "feature_3"), "p23": ("feature_2", "feature_3"),
    "p123": ("feature_1", "feature_2", "feature_3"),
    "b_methylated": ("sample", "feature_3"), "b_coverage": ("sample", "feature_3"), "inv_coverage": ("sample",),
    "coverage_histogram": ("sample", "coverage"),
    "coverage_features": ("sample", "coverage_bucket", "beta_bin"),
    "bin_histogram": ("bin_histogram_row", "bin_histogram_cell"),
    "pair_histogram": ("pair_histogram_row", "pair_histogram_cell"),
    "block_block": ("block",), "block_n_triples": ("block",),
    "block_p12": ("block", "feature_1", "feature_2"), "block_p13": ("block", "feature_1", "feature_3"),
    "block_coverage_features": ("block", "sample", "coverage_bucket", "beta_bin"),
    **{f"block_{name}_{part}": (f"block_{name}_{'edge' if part == 'indptr' else 'entry'}",)
       for name in ("bin_histogram", "pair_histogram") for part in CSR_PARTS},
}


def partial_sha256(partial: ChunkPartial) -> str:
    """Checksum of a partial's moments and block statistics."""
    moments = partial.moments
    digest = hashlib.sha256()
    digest.update(f"{moments.n_samples},{moments.n_bins},{moments.n_triples},{moments.sq_norm_13!r},"
                  f"{moments.histogram_budget}".encode())
    if moments.projected:  # (absent otherwise: other partials keep their checksums)
        digest.update(f",{moments.projection_dim},{moments.projection_seed}".encode())
    for name in ARRAY_FIELDS:
        digest.update(np.ascontiguousarray(getattr(moments, name), dtype=np.float64).tobytes())
    for name, value in block_arrays(partial.blocks).items():
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def block_arrays(blocks: BlockStats) -> dict[str, np.ndarray]:
    """A partial's block statistics as named arrays (sparse histograms by their CSR parts)."""
    values = [getattr(blocks, name) for name in BlockStats.ARRAYS]
    for name in BlockStats.HISTOGRAMS:
        matrix = getattr(blocks, name)
        values += [matrix.data, matrix.indices.astype(np.int64), matrix.indptr.astype(np.int64)]  # CSR_PARTS
    return dict(zip(_block_names(), values, strict=True))


def _block_names() -> list[str]:
    """The names of a partial's block statistics, in the order of block_arrays (and of its checksum)."""
    return [f"block_{name}" for name in BlockStats.ARRAYS] + [
        f"block_{name}_{part}" for name in BlockStats.HISTOGRAMS for part in CSR_PARTS]


def write_partial(path: Location, partial: ChunkPartial, attrs: dict, sha256: str) -> None:
    """Write a partial (with its checksum) as a Zarr group at a temporary path and rename it into place."""
    from zarr.core.sync import sync

    path.parent.mkdir()
    tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}"
    moments, blocks = partial.moments, partial.blocks
    arrays = {name: np.asarray(getattr(moments, name), dtype=np.float64) for name in ARRAY_FIELDS}
    sync(_write_group(tmp.url, {**arrays, **block_arrays(blocks)}, {
        **attrs, "n_samples": moments.n_samples, "n_bins": moments.n_bins, "n_triples": moments.n_triples,
        "sq_norm_13": moments.sq_norm_13, "histogram_budget": moments.histogram_budget,
        "projection_dim": moments.projection_dim, "projection_seed": moments.projection_seed,
        "chromosome_of_blocks": blocks.chromosome,
        "block_histogram_shapes": [list(getattr(blocks, n).shape) for n in BlockStats.HISTOGRAMS],
        "sha256": sha256}))
    try:
        put_in_place(tmp, path)
    except OSError as exc:
        tmp.rmtree()
        if not path.exists():
            raise MomentStoreError(f"could not write partial {path} ({exc})") from None
        # else another attempt of the same task got there first: same content


def read_partial(path: Location, expected_sha256: str | None = None, identity: dict | None = None
                 ) -> tuple[ChunkPartial, str]:
    """Read and verify one partial, returning it and its checksum; any damage raises
    MomentStoreError naming it. ``identity`` ({chromosome, chunk, digest}): the partial must
    be the one for that chunk and digest (a checksum alone cannot tell another chunk's
    self-consistent partial put in its place)."""
    from zarr.core.sync import sync

    try:
        attrs, stored = sync(_read_group(path.url, [*ARRAY_FIELDS, *_block_names()]))
        arrays = {name: stored[name] for name in ARRAY_FIELDS}
        moments = Moments(n_samples=int(attrs["n_samples"]), n_bins=int(attrs["n_bins"]),
                          n_triples=int(attrs["n_triples"]), sq_norm_13=float(attrs["sq_norm_13"]),
                          histogram_budget=int(attrs["histogram_budget"]),
                          projection_dim=int(attrs.get("projection_dim", 0)),
                          projection_seed=int(attrs.get("projection_seed", 0)), **arrays)
        histograms = [sparse.csr_matrix(tuple(stored[f"block_{name}_{part}"] for part in CSR_PARTS),
                                        shape=tuple(shape))
                      for name, shape in zip(BlockStats.HISTOGRAMS, attrs["block_histogram_shapes"])]
        blocks = BlockStats(attrs["chromosome_of_blocks"], moments.n_samples, moments.n_bins,
                            *(stored[f"block_{name}"] for name in BlockStats.ARRAYS), *histograms)
        partial = ChunkPartial(moments, blocks)
    except Exception as exc:  # noqa: BLE001 - any failure to read is damage to report
        raise MomentStoreError(f"partial {path} is unreadable or truncated ({type(exc).__name__}: {exc})") from None
    if identity is not None:
        found = {key: attrs.get(key) for key in identity}
        if found != identity:
            raise MomentStoreError(f"partial {path} is not the partial it should be: it holds {found}, the "
                                   f"manifest expects {identity}")
    actual = partial_sha256(partial)
    if actual != attrs.get("sha256") or (expected_sha256 is not None and actual != expected_sha256):
        raise MomentStoreError(f"partial {path} is corrupted: its checksum does not match")
    return partial, actual


# A partial is twenty-two arrays, each a Zarr array of one chunk: all at once on Zarr's event
# loop, not one at a time with each waited for (scripts/bench_partials.py: 1.3x as fast to
# write, 1.6x to read).
async def _write_group(url: str, arrays: dict[str, np.ndarray], attrs: dict) -> None:
    import zarr.api.asynchronous

    group = await zarr.api.asynchronous.open_group(store=url, mode="w", zarr_format=3)
    await asyncio.gather(*(group.create_array(name, data=data, chunks=tuple(max(n, 1) for n in data.shape) or None,
                                              dimension_names=_dimension_names(name, data.shape))
                           for name, data in arrays.items()))
    await group.update_attributes(attrs)


def _dimension_names(name: str, shape: tuple) -> tuple[str, ...]:
    """An array's dimensions; an empty one's (the projected feature's block coverage features,
    (B, 0, 0, 0)) get names of their own, as a dimension has one length in a group."""
    names = DIMENSIONS[name]
    return tuple(f"no_{n}" if length == 0 else n for n, length in zip(names, shape, strict=True))


def name_dimensions(path: Location) -> None:
    """Give the arrays of a partial written before they named their dimensions their names
    (their zarr.json rewritten; data and checksum untouched), so its store opens with xarray.
    The first array (p12) is named last, so when it has its names every array has (a run
    killed midway is finished by the next), and a killed rewrite's temporaries are removed."""
    first, *rest = DIMENSIONS
    if _has_dimension_names(path / first):
        return
    for name in [*rest, first]:
        array = path / name
        document_path = array / "zarr.json"
        if is_link(array) or is_link(document_path):
            continue  # never written through a link
        if document_path.is_local:
            remove_leftovers(document_path.url)
        document = json.loads(document_path.read_bytes())
        if document.get("dimension_names") is None:
            document["dimension_names"] = list(_dimension_names(name, tuple(document["shape"])))
            document_path.write_text(json.dumps(document, indent=2))


def _has_dimension_names(array: Location) -> bool:
    document = array / "zarr.json"
    if is_link(array) or is_link(document):
        return False  # the arrays beside it may still need their names
    return json.loads(document.read_bytes()).get("dimension_names") is not None


async def _read_group(url: str, names: list[str]) -> tuple[dict, dict[str, np.ndarray]]:
    import zarr.api.asynchronous

    group = await zarr.api.asynchronous.open_group(store=url, mode="r")

    async def read(name):
        return await (await group.getitem(name)).getitem(Ellipsis)

    return dict(group.attrs), dict(zip(names, await asyncio.gather(*map(read, names))))


def is_link(path: Location) -> bool:
    return path.is_local and os.path.islink(path.url)


def is_dir(path: Location) -> bool:
    return os.path.isdir(path.url) if path.is_local else path.fs.isdir(path.fs_path)


def is_our_partial(path: Location) -> bool:
    """A directory named as write_partial names them: a partial (a Zarr group) or one
    being written; never a symbolic link."""
    if is_link(path) or not is_dir(path):
        return False
    if WRITING_NAME.fullmatch(path.name):
        return True
    metadata = path / "zarr.json"
    return bool(PARTIAL_NAME.fullmatch(path.name)) and metadata.exists() and not is_link(metadata)
