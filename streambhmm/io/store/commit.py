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

import contextlib
import copy
import functools
import json
import os
import uuid
import warnings

import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ... import __version__
from ..storage import Location, beside, fault_point, replacing_dir, write_json
from .nodes import chunk_path, read_chunk, read_document, why, write_chunk, write_document, write_file
from .schema import (COMMIT, COUNTS, COUNTS_FORMAT, COUNTS_VERSION, FIELDS, INDEX_CHUNK, INTEGER_CODECS, POSITION,
                     SAMPLE_CHUNK, STRING_CODECS, StoreError, array_document, counts_document, group_document, inline,
                     n_chunks, natural_sorted, new_attributes, per_position_variables, sample_document,
                     summary_document)


def staging_path(path) -> Location:
    """A new staging name beside the store (by its real path): ``STORE.tmp-<hex>``."""
    return beside(Location.of(path).real())


def consolidate(root) -> None:
    """Consolidate the metadata (so plain open_zarr reads quietly and our tasks open arrays
    without reading their metadata)."""
    import zarr

    with warnings.catch_warnings():
        # consolidated metadata is a zarr-python extension for v3; we want it deliberately
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(Location.of(root).url)


def mark_changed(root) -> None:
    """After a change outside a commit (decode's posteriors): a new generation, and the
    metadata consolidated again."""
    import zarr

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
    written = _sample_names(names)
    listed = nodes_by_chromosome(nodes)
    nodes = {k: v for k, v in nodes.items() if k.split("/")[0] not in new}  # the sample's chromosomes: anew
    for chrom in natural_sorted(new):
        documents = _put_chromosome(store, staging, chrom, listed.get(chrom), new[chrom], column, names, written,
                                    record)
        nodes.update(_chromosome_nodes(chrom, documents))
        fault_point("chromosome")
    others = [chrom for chrom in attrs["chromosomes"] if chrom not in new]
    if name in samples:
        for chrom in others:
            _clear_column(store, chrom, nodes, column, record["chunk_size"])
    else:
        for chrom in others:
            _add_column(store, chrom, nodes, names, written)
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


@functools.lru_cache(maxsize=4)
def _empty_chromosome(chunk_size: int) -> dict[str, dict]:
    """The documents of an empty chromosome (no bins, no samples), by path inside it ("": its
    group). Read them, do not change them: callers copy."""
    return {"": group_document(),
            **{name: counts_document(0, 0, chunk_size) for name in COUNTS},
            POSITION: array_document((0,), "int64", (chunk_size,), 0, INTEGER_CODECS, ("position",),
                                     {"units": "bp", "description": "0-based start of the bin"}),
            "sample": sample_document(0),
            "index": group_document(),
            "index/summary": summary_document(0, 0, attributes={"fields": list(FIELDS)})}


def _sample_names(names: list[str]) -> tuple[dict, dict[int, bytes]]:
    """The sample coordinate holding ``names`` as zarr writes it: its document and its chunk
    files by chunk index (each chunk whole, padded with the fill value "")."""
    from numcodecs import VLenUTF8, Zstd

    zstd = Zstd(**STRING_CODECS[1]["configuration"])
    chunks = {}
    for k in range(n_chunks(len(names), SAMPLE_CHUNK)):
        part = names[k * SAMPLE_CHUNK:(k + 1) * SAMPLE_CHUNK]
        chunks[k] = zstd.encode(VLenUTF8().encode(np.array(part + [""] * (SAMPLE_CHUNK - len(part)), dtype=object)))
    return sample_document(len(names)), chunks


def _encoding(document: dict) -> dict:
    return {k: v for k, v in document.items() if k != "shape"}


def _node(store: Location, chrom: str, path: str) -> Location:
    return store / chrom / path if path else store / chrom


def _chromosome(store: Location, chrom: str, listed: dict, n_samples: int, bin_size: int, chunk_size: int) -> dict:
    """A chromosome's documents by path inside it (its group "", its arrays, and the
    per-position variables it holds): those of the root's consolidated metadata, ``listed``
    (by path; what readers go by, whatever a damaged file on disk says); for a node of an
    existing chromosome the metadata lacks, its file if it reads; else empty ones (no bins)."""
    documents = copy.deepcopy(_empty_chromosome(chunk_size))
    documents[""]["attributes"] = {"chromosome": chrom, "bin_size": bin_size, "counts_format": COUNTS_FORMAT}
    for path in (*COUNTS, "index/summary"):
        documents[path]["shape"][1] = n_samples
    for path in documents if listed else ():
        if path not in listed:
            with contextlib.suppress(OSError, StoreError):
                documents[path] = read_document(_node(store, chrom, path))
    for path, document in copy.deepcopy(listed or {}).items():
        documents[path] = {k: v for k, v in document.items() if k != "consolidated_metadata"}
    return documents


def nodes_by_chromosome(nodes: dict) -> dict[str, dict[str, dict]]:
    """The root's consolidated metadata by chromosome, then by path inside it ("": its group)."""
    grouped = {}
    for key, document in nodes.items():
        chrom, _, path = key.partition("/")
        grouped.setdefault(chrom, {})[path] = document
    return grouped


def _grow_chromosome(store: Location, chrom: str, documents: dict, entry: dict, names: list[str],
                     written: tuple, bin_size: int, chunk_size: int) -> None:
    """Grow a chromosome to the commit's bins and to ``len(names)`` samples (it never
    shrinks): its documents written (every one: a file damaged on disk is mended), then the
    positions from the axis' end before the commit, a chunk at a time (memory holds one chunk)."""
    n_bins = max(entry["n_bins"], *(documents[path]["shape"][0] for path in (*COUNTS, POSITION)))
    lo = entry.get("store_bins", documents[POSITION]["shape"][0])
    shapes = {name: [n_bins, len(names)] for name in COUNTS}
    for name in per_position_variables(documents):  # kept on the same axis, their other dimensions as they are
        shapes[name] = [n_bins, *documents[name]["shape"][1:]]
    shapes[POSITION] = [n_bins]
    shapes["index/summary"] = [n_chunks(n_bins, chunk_size), len(names), len(FIELDS)]
    if _encoding(documents["sample"]) == _encoding(written[0]):
        shapes["sample"] = [len(names)]
    for path, shape in shapes.items():
        documents[path]["shape"] = shape
    for path in sorted(documents, key=lambda path: documents[path]["node_type"] != "group"):  # groups first
        write_document(store, _node(store, chrom, path), documents[path])
    for k in range(lo // chunk_size, n_chunks(n_bins, chunk_size)):
        first = k * chunk_size
        write_chunk(store, store / chrom / POSITION, documents[POSITION], (k,),
                    np.arange(first, min(n_bins, first + chunk_size), dtype=np.int64) * bin_size)
    _write_names(store, chrom, documents, names, written)


def _write_names(store: Location, chrom: str, documents: dict, names: list[str], written: tuple) -> None:
    """The sample coordinate of a chromosome set to ``names`` (``written``: as zarr writes it,
    :func:`_sample_names`; a coordinate written with other codecs is set through zarr)."""
    sample = store / chrom / "sample"
    document, names_chunks = written
    if _encoding(documents["sample"]) != _encoding(document):
        import zarr

        array = zarr.open_array(sample.url, mode="r+")
        if array.shape[0] != len(names) or list(array[:]) != names:
            array.resize((len(names),))
            array[:] = np.array(names, dtype=object)
        documents["sample"] = read_document(sample)
        return
    if documents["sample"]["shape"] != [len(names)]:
        documents["sample"]["shape"] = [len(names)]
        write_document(store, sample, documents["sample"])
    for k in range(n_chunks(len(names), SAMPLE_CHUNK)):
        path = chunk_path(sample, (k,))
        if k not in names_chunks:
            path.unlink()
        elif not path.exists() or path.read_bytes() != names_chunks[k]:
            write_file(store, path, names_chunks[k])


def _put_chromosome(store: Location, staging: Location, chrom: str, listed: dict, entry: dict, column: int,
                    names: list[str], written: tuple, record: dict) -> dict:
    """One chromosome of a committed sample in place: the arrays grown, its staged chunk
    files renamed into its column (the column's other chunks removed), its chunk summaries.
    Returns the chromosome's documents."""
    bin_size, chunk_size = record["bin_size"], record["chunk_size"]
    documents = _chromosome(store, chrom, listed, len(names), bin_size, chunk_size)
    _grow_chromosome(store, chrom, documents, entry, names, written, bin_size, chunk_size)
    for array in COUNTS:
        files = set(entry.get("files", {}).get(array, entry["chunks"]))
        for i in range(n_chunks(documents[array]["shape"][0], chunk_size)):
            target = store / chrom / array / "c" / str(i) / str(column)
            source = staging / chrom / array / "c" / str(i) / "0"
            if i not in files:
                target.unlink()
            elif source.exists():  # else renamed by an earlier attempt
                _replace_file(source, target)
                fault_point("moved")
    staged = staging / chrom / "summary"
    staged_document = read_document(staged)
    target = store / chrom / "index" / "summary"
    for k in range(n_chunks(documents["index/summary"]["shape"][0], INDEX_CHUNK)):
        rows = read_chunk(staged, staged_document, (k, 0, 0)) if k * INDEX_CHUNK < staged_document["shape"][0] \
            else np.zeros((0, 1, len(FIELDS)), np.int64)
        write_chunk(store, target, documents["index/summary"], (k, column, 0), rows)
    return documents


def _chromosome_nodes(chrom: str, documents: dict) -> dict:
    """A chromosome's entries of the consolidated metadata (each node's zarr.json; a group's
    with its own, empty, consolidated metadata, as zarr writes them)."""
    return {f"{chrom}/{path}" if path else chrom:
            {**document, "consolidated_metadata": inline({})} if document["node_type"] == "group" else document
            for path, document in documents.items()}


def _add_column(store: Location, chrom: str, nodes: dict, names: list[str], written: tuple) -> None:
    """Give a new sample its column in a chromosome where it has no counts: the arrays'
    metadata only (a column without chunks reads as zeros), and the sample names.

    These files are written in place, not through a temporary file: nothing reads them
    before the commit is visible (readers go by the consolidated metadata of the root), and
    a commit completed again writes them again, from the consolidated metadata."""
    for array, axis in (("methylated", 1), ("coverage", 1), ("index/summary", 1)):
        node = nodes[f"{chrom}/{array}"]
        node["shape"][axis] = len(names)
        write_document(store, store / chrom / array, node)
    documents = {"sample": nodes[f"{chrom}/sample"]}
    _write_names(store, chrom, documents, names, written)
    nodes[f"{chrom}/sample"] = documents["sample"]


def _clear_column(store: Location, chrom: str, nodes: dict, column: int, chunk_size: int) -> None:
    """Remove a replaced sample's chunks (counts and summaries) from a chromosome where its
    new counts have none: a column without chunks reads as zeros."""
    chunks = n_chunks(nodes[f"{chrom}/methylated"]["shape"][0], chunk_size)
    for array in COUNTS:
        for i in range(chunks):
            (store / chrom / array / "c" / str(i) / str(column)).unlink()
    for k in range(n_chunks(chunks, INDEX_CHUNK)):
        (store / chrom / "index" / "summary" / "c" / str(k) / str(column) / "0").unlink()
