"""The commit of a staged sample into the store (steps 3-5), the store's staging names and its
consolidated metadata.

Writing a sample touches only that sample's column. A :class:`SampleWriter` stages the
sample's chunks beside the store (``STORE.ingest-<id>``, one chunk in memory at a time). The
commit, under the store's exclusive lock:

1. checks everything that can refuse it: the store's bin and chunk sizes, that the staged
   files can be renamed into the store (one filesystem), and that the disk has room for what
   the commit writes (an upper bound: the chunk files are renamed, not copied). Positions
   were bounded when added (POSITION_MAX), so nothing after this point allocates by them;
2. writes ``COMMIT.json`` into the staging directory: the commit point;
3. creates the store's root if there is none (attributes complete from the start, appearing
   at once), puts the sample's chromosomes in place (arrays grown, chunk files renamed into
   its column, chunk summaries), gives the store's other chromosomes the sample's column (a
   new sample: metadata only) or clears it (a replaced sample);
4. rewrites the root's ``zarr.json`` once, with the new attributes and the consolidated
   metadata together: the sample becomes visible at once;
5. removes the staging directory, ``COMMIT.json`` with it.

Steps 3-5 can be repeated: a commit that stopped after its commit point (a kill, a full disk,
a failure) keeps its ``COMMIT.json``, and the next command that takes the store's lock,
reader or writer, completes it. A staging directory without ``COMMIT.json`` whose owner died
is removed (its owner lock is taken before it has its staging name, so a starting one is
never taken for dead). So a killed or failed ingest leaves every other sample's chunks and, until step 4,
the store's metadata exactly as they were; ingests of different samples can run concurrently
(only their commits take turns). Locks and staging directories go by the store's real path
(symbolic links resolved). On read-only media (nobody can write) readers take no lock.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
import warnings

import numpy as np
import zarr

from ... import __version__
from ..storage import Location, beside, fault_point, replacing_dir, write_json
from .schema import (COMMIT, COUNT_DTYPE, COUNTS, COUNTS_FORMAT, COUNTS_VERSION, FIELDS, INDEX_CHUNK, POSITION,
                     SAMPLE_CHUNK, StoreError, codecs, inline, n_chunks, natural_sorted, new_attributes,
                     per_position_variables)


def staging_path(path) -> Location:
    """A new staging name beside the store (by its real path): ``STORE.tmp-<hex>``."""
    return beside(Location.of(path).real())


def consolidate(root) -> None:
    """Consolidate the metadata (so plain open_zarr reads quietly and our tasks open arrays
    without reading their metadata)."""
    with warnings.catch_warnings():
        # consolidated metadata is a zarr-python extension for v3; we want it deliberately
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(Location.of(root).url)


def mark_changed(root) -> None:
    """After a change outside a commit (decode's posteriors): a new generation, and the
    metadata consolidated again."""
    group = zarr.open_group(Location.of(root).url, mode="a", use_consolidated=False)
    group.attrs.update({"generation": uuid.uuid4().hex})
    consolidate(root)


def _replace_file(source: Location, target: Location) -> None:
    target.parent.mkdir()
    if source.is_local:
        os.replace(source.url, target.url)
    else:
        target.unlink()
        source.rename(target)


def _create_root(store: Location, record: dict) -> None:
    """A new store's root, its attributes complete (no samples yet), appearing at once:
    locally a directory renamed into place."""
    document = {"attributes": new_attributes(record), "zarr_format": 3, "consolidated_metadata": inline({}),
                "node_type": "group"}
    if not store.is_local:
        write_json(store / "zarr.json", document)
        return
    with replacing_dir(store, staged=staging_path(store)) as new:  # replaces an empty directory
        write_json(new / "zarr.json", document)


def apply_commit(store: Location, staging: Location) -> None:
    """Steps 3-5 of a commit (module docstring): put the sample committed in ``staging`` in
    place. Idempotent: a commit stopped half way is completed by running it again."""
    record = json.loads((staging / COMMIT).read_text())
    if not (store / "zarr.json").exists():
        _create_root(store, record)
        fault_point("root")
    document = json.loads((store / "zarr.json").read_text())
    if document.get("consolidated_metadata") is None:  # a root an earlier streambhmm left half made
        consolidate(store)
        document = json.loads((store / "zarr.json").read_text())
    attrs = document.get("attributes") or new_attributes(record)
    nodes = dict(document["consolidated_metadata"]["metadata"])
    samples, name, new = dict(attrs["samples"]), record["sample"], record["chromosomes"]
    column = samples[name]["column"] if name in samples else len(samples)
    names = sorted(samples, key=lambda s: samples[s]["column"]) + ([] if name in samples else [name])
    staged = zarr.open_group(staging.url, mode="r", use_consolidated=False)
    nodes = {k: v for k, v in nodes.items() if k.split("/")[0] not in new}  # the sample's chromosomes: anew
    for chrom in natural_sorted(new):
        group = _put_chromosome(store, staging, staged, chrom, new[chrom], column, names, record)
        nodes.update(_chromosome_nodes(store, group, chrom))
        fault_point("chromosome")
    others = [chrom for chrom in attrs["chromosomes"] if chrom not in new]
    if name in samples:
        for chrom in others:
            _clear_column(store, chrom, nodes, column, record["chunk_size"])
    elif others:
        reference = natural_sorted(new)[0] if new else None  # the commit wrote the sample names there
        names_chunks = [(store / reference / "sample" / "c" / str(k)).read_bytes()
                        for k in range(n_chunks(len(names), SAMPLE_CHUNK))] if reference else []
        for chrom in others:
            _add_column(store, chrom, nodes, names, reference, names_chunks)
    samples[name] = {**record["provenance"], "column": column}
    attrs = {**attrs, "format_version": COUNTS_VERSION, "samples": samples, "tool_version": __version__,
             "chromosomes": natural_sorted(set(attrs["chromosomes"]) | set(new)), "generation": uuid.uuid4().hex}
    (store / "zarr.json").write_text(json.dumps({  # the sample becomes visible, at once
        "attributes": attrs, "zarr_format": 3, "consolidated_metadata": inline(nodes), "node_type": "group"}))
    fault_point("visible")
    staging.rmtree()


def complete_commit(store: Location, staging: Location, failed: str, what: str) -> None:
    """:func:`apply_commit`, its failure a StoreError that says ``failed``, why, and that any
    command on the store completes ``what`` once that is fixed."""
    try:
        apply_commit(store, staging)
    except Exception as exc:
        raise StoreError(f"{failed}: {why(exc)}. Once that is fixed, any command on the store completes "
                         f"{what}") from exc


def why(exc: BaseException) -> str:
    """An error as a short phrase: an OSError's reason and file, else its message."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror.lower()}" + (f" ({exc.filename})" if exc.filename else "")
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _chromosome(store: Location, chrom: str, names: list[str], bin_size: int, chunk_size: int):
    """A chromosome group: created empty (no bins), or completed where an attempt stopped."""
    group = zarr.open_group(store.url, path=chrom, mode="a", zarr_format=3, use_consolidated=False, attributes={
        "chromosome": chrom, "bin_size": bin_size, "counts_format": COUNTS_FORMAT})
    for name in COUNTS:
        if name not in group:
            group.create_array(name, shape=(0, len(names)), chunks=(chunk_size, 1), dtype=COUNT_DTYPE, fill_value=0,
                               dimension_names=("position", "sample"), **codecs())
    if "position" not in group:
        group.create_array("position", shape=(0,), chunks=(chunk_size,), dtype="int64", fill_value=0,
                           dimension_names=("position",),
                           attributes={"units": "bp", "description": "0-based start of the bin"})
    if "sample" not in group:
        group.create_array("sample", shape=(0,), chunks=(SAMPLE_CHUNK,), dtype=str, dimension_names=("sample",))
    index = group.require_group("index")
    if "summary" not in index:
        index.create_array("summary", shape=(0, len(names), len(FIELDS)), chunks=(INDEX_CHUNK, 1, len(FIELDS)),
                           dtype="int64", fill_value=0, dimension_names=("chunk", "sample", "field"),
                           attributes={"fields": list(FIELDS)})
    return group


def _grow_chromosome(group, entry: dict, names: list[str], bin_size: int, chunk_size: int) -> None:
    """Grow a chromosome group to the commit's bins and to ``len(names)`` samples (it never
    shrinks). The positions are written from the axis' end before the commit, a chunk at a
    time (memory holds one chunk)."""
    n_bins = max(entry["n_bins"], group["methylated"].shape[0])
    for name in COUNTS:
        group[name].resize((n_bins, len(names)))
    for name in per_position_variables(group):  # kept on the same axis, their other dimensions as they are
        group[name].resize((n_bins, *group[name].shape[1:]))
    position = group[POSITION]
    lo = entry.get("store_bins", position.shape[0])
    if position.shape[0] < n_bins:
        position.resize((n_bins,))
    while lo < n_bins:
        hi = min(n_bins, (lo // chunk_size + 1) * chunk_size)
        position[lo:hi] = np.arange(lo, hi, dtype=np.int64) * bin_size
        lo = hi
    group["index/summary"].resize((n_chunks(n_bins, chunk_size), len(names), len(FIELDS)))
    if group["sample"].shape[0] != len(names) or list(group["sample"][:]) != names:
        group["sample"].resize((len(names),))
        group["sample"][:] = np.array(names, dtype=object)


def _put_chromosome(store: Location, staging: Location, staged, chrom: str, entry: dict, column: int,
                    names: list[str], record: dict):
    """One chromosome of a committed sample in place: the arrays grown, its staged chunk
    files renamed into its column (the column's other chunks removed), its chunk summaries.
    Returns the chromosome's group."""
    bin_size, chunk_size = record["bin_size"], record["chunk_size"]
    group = _chromosome(store, chrom, names, bin_size, chunk_size)
    _grow_chromosome(group, entry, names, bin_size, chunk_size)
    for array in COUNTS:
        files = set(entry.get("files", {}).get(array, entry["chunks"]))
        for i in range(n_chunks(group[array].shape[0], chunk_size)):
            target = store / chrom / array / "c" / str(i) / str(column)
            source = staging / chrom / array / "c" / str(i) / "0"
            if i not in files:
                target.unlink()
            elif source.exists():  # else renamed by an earlier attempt
                _replace_file(source, target)
                fault_point("moved")
    summary = np.zeros((group["index/summary"].shape[0], len(FIELDS)), np.int64)
    rows = staged[f"{chrom}/summary"][:, 0, :]
    summary[:rows.shape[0]] = rows
    group["index/summary"][:, column, :] = summary
    return group


def _chromosome_nodes(store: Location, group, chrom: str) -> dict:
    """A chromosome's entries of the consolidated metadata (each node's zarr.json; a group's
    with its own, empty, consolidated metadata, as zarr writes them)."""
    paths = [chrom] + [f"{chrom}/{name}" for name, _ in
                       group.members(max_depth=None, use_consolidated_for_children=False)]
    nodes = {}
    for path in paths:
        node = json.loads((store / path / "zarr.json").read_text())
        if node["node_type"] == "group":
            node["consolidated_metadata"] = inline({})
        nodes[path] = node
    return nodes


def _add_column(store: Location, chrom: str, nodes: dict, names: list[str], reference: str | None,
                names_chunks: list[bytes]) -> None:
    """Give a new sample its column in a chromosome where it has no counts: the arrays'
    metadata only (a column without chunks reads as zeros), and the sample names, encoded
    as in the chromosome ``reference`` (``names_chunks``, which the commit wrote; None: a
    sample without counts anywhere, whose names zarr encodes here).

    These files are written in place, not through a temporary file: nothing reads them
    before the commit is visible (readers go by the consolidated metadata of the root), and
    a commit completed again writes them again, from the consolidated metadata."""
    for array, axis in (("methylated", 1), ("coverage", 1), ("index/summary", 1), ("sample", 0)):
        node = nodes[f"{chrom}/{array}"]
        node["shape"][axis] = len(names)
        _write_in_place(store, store / chrom / array / "zarr.json", json.dumps(node).encode())

    def encoding(path: str) -> dict:
        return {k: v for k, v in nodes[path].items() if k != "shape"}

    if reference is not None and encoding(f"{chrom}/sample") == encoding(f"{reference}/sample"):
        for k, data in enumerate(names_chunks):
            _write_in_place(store, store / chrom / "sample" / "c" / str(k), data)
    else:  # written with other codecs (by another zarr version)
        zarr.open_array(store.url, path=f"{chrom}/sample", mode="r+")[:] = np.array(names, dtype=object)


def _write_in_place(store: Location, path: Location, data: bytes) -> None:
    """Write ``data`` at ``path`` inside ``store``, following no link: a store copied from
    elsewhere, or written by others, may hold one pointing at any file of the user's."""
    if not path.is_local:
        path.write_bytes(data)
        return
    directory = os.path.dirname(path.url)
    os.makedirs(directory, exist_ok=True)
    if os.path.commonpath([os.path.realpath(directory), os.path.realpath(store.url)]) != os.path.realpath(store.url):
        raise OSError(errno.ELOOP, "a symbolic link leads out of the store", directory)
    fd = os.open(path.url, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _clear_column(store: Location, chrom: str, nodes: dict, column: int, chunk_size: int) -> None:
    """Remove a replaced sample's chunks (counts and summaries) from a chromosome where its
    new counts have none: a column without chunks reads as zeros."""
    chunks = n_chunks(nodes[f"{chrom}/methylated"]["shape"][0], chunk_size)
    for array in COUNTS:
        for i in range(chunks):
            (store / chrom / array / "c" / str(i) / str(column)).unlink()
    for k in range(n_chunks(chunks, INDEX_CHUNK)):
        (store / chrom / "index" / "summary" / "c" / str(k) / str(column) / "0").unlink()
