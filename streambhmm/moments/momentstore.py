"""Persisted moment stores: per-chunk partial sums keyed by content, so a pass is never paid twice.

    MOMENTS/zarr.json          Zarr group; attributes: format, version, feature, samples
    MOMENTS/manifest.json      the plan (chromosome, chunk, digest, n_triples, sha256 per
                               partial, in summation order) and whether it is complete
    MOMENTS/partials/<chrom>/<chunk>-<digest>/   one Zarr group per partial (raw sums)
                               (partials/ and partials/<chrom>/ are Zarr groups too, so
                               xarray.open_datatree opens the whole store)

A partial's digest covers the counts it sums (the digests of its chunk's counts of the
selected samples, from the counts store's index, and the two-bin halo before them) and
the feature settings, so adding a sample to the counts store leaves the partials of other
sample selections valid. A chunk task first computes its digest; if a verified partial
with that digest exists it is reused (no counts are read), otherwise the partial is
computed and written atomically (temporary directory, then rename) as soon as it is done. Resuming
a killed run and updating after an ingest are therefore the same operation: only
partials whose digest is new are computed. Partials no longer in the plan are dropped.
Totals are summed in plan order with a fixed tree, so the same partials give bitwise the same
totals; a partial computed on another machine or worker may differ in its last bits (an audit saw
1e-17 relative after a run resumed on an external worker: a BLAS's order of summing).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Iterator
from pathlib import Path

import dask
import numpy as np

# zarr is imported where it is used: hmr and the store's readers start without it (0.1 s of start-up)
from ..io.formats import FORMATS, records_context
from ..io.names import Spellings
from ..io.outputs import Inputs, remove_leftovers
from ..io.storage import Location, put_in_place, replacing_dir, write_json
from ..io.store import CountsStore, locked, staging_path
from ..io.tasks import Waiter
from .manifest import (MANIFEST, MOMENT_STORE_FORMAT, MOMENT_STORE_VERSION, Manifest, MomentStoreError,
                       SettingsMismatch, SourceMismatch, is_moment_store, partial_relpath, read_manifest)
from .partials import (GROUP_DOC, WRITING_NAME, is_dir, is_link, is_our_partial, name_dimensions, partial_sha256,
                       read_partial, write_partial)
from .pipeline import (DEFAULT_SPLIT_EVERY, ChunkPartial, PlannedChunk, add_moments, plan_chunks,
                       plan_partial, select_samples, tree_reduce)
from .spec import DEFAULT_BLOCK_SIZE, FeatureSpec, check_block_size
from .sums import Moments

READ_THREADS = 4

__all__ = ["MANIFEST", "MOMENT_STORE_FORMAT", "MOMENT_STORE_VERSION", "Manifest", "MomentStoreError", "UpdateReport",
           "is_moment_store", "load_partials", "load_total", "merge_moment_stores", "read_manifest",
           "update_moments"]


def plan_digest(plan: PlannedChunk, settings: dict) -> str:
    """Digest of exactly what a chunk's partial depends on: the settings, the chunk (its
    chromosome, index and bins), the digests of the selected samples' counts in it (from the
    counts store's index, so no counts are read) and the halo before it."""
    ref = plan.ref
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    # not the chunk's end: a later sample may lengthen the axis, which changes no count
    digest.update(json.dumps([ref.chrom, ref.chunk, ref.start, ref.bin_size, ref.digests]).encode())
    for halo in plan.halos:
        for arr in halo:
            digest.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
            digest.update(b"|")
    return digest.hexdigest()


def stale_chunks(manifest: Manifest, counts: CountsStore) -> int:
    """How many of ``counts``' chunks the partials of ``manifest`` do not hold as they are now
    (other digests, missing or no longer there; the counts store's index: no counts are read)."""
    recorded = {(e["chromosome"], e["chunk"]): e["digest"] for e in manifest.partials}
    digested = {**manifest.feature, "samples": manifest.samples}  # what each partial's digest covers
    expected = {(plan.ref.chrom, plan.ref.chunk): plan_digest(plan, digested)
                for plan in plan_chunks(counts, manifest.samples)}
    return sum(recorded.get(key) != digest for key, digest in expected.items()) + len(recorded.keys() - expected)


def update_command(manifest: Manifest, counts: CountsStore, output) -> str:
    """The `moments compute` that brings the moment store at ``output`` up to date with
    ``counts``, the store it was computed from (its samples named unless they are all of ``counts``')."""
    samples = "" if manifest.samples == counts.samples else f" --samples {','.join(manifest.samples)}"
    return f"`streambhmm moments compute {counts.path} -o {output}{samples}`"


def _remove(path: Location, why: str) -> None:
    """Remove a partial directory, or stop: one left on disk would be read later."""
    _refuse_foreign(path)
    path.rmtree()
    if path.exists():
        raise MomentStoreError(f"could not remove the {why} partial {path} (check its permissions); remove it "
                               f"and rerun `streambhmm moments`")


def persisted_partial(plan: PlannedChunk, spec: FeatureSpec, settings: dict, root: str) -> dict:
    """Chunk task: reuse the partial with this chunk's digest (reading no counts), or read
    the chunk, compute the partial and write it."""
    digest = plan_digest(plan, settings)
    chrom, chunk = plan.ref.chrom, plan.ref.chunk
    rel = partial_relpath(chrom, chunk, digest)
    path = Location.of(root) / rel
    identity = {"chromosome": chrom, "chunk": chunk, "digest": digest}
    reused = False
    _refuse_foreign(path)
    if path.exists():
        try:
            partial, sha256 = read_partial(path, identity=identity)
            reused = True
        except MomentStoreError:
            _remove(path, "damaged")  # compute it again
        else:
            name_dimensions(path)  # one written before its arrays named them
    if not reused:
        partial = plan_partial(plan, spec)
        sha256 = partial_sha256(partial)
        write_partial(path, partial, identity, sha256)
    return {"chromosome": chrom, "chunk": chunk, "digest": digest, "path": rel,
            "n_triples": partial.moments.n_triples, "sha256": sha256, "reused": reused}


def partial_tasks(store: CountsStore, spec: FeatureSpec, samples: list, settings: dict, root: str) -> list:
    """One delayed persisted_partial per planned chunk. Not pure: a task reads and writes the
    moment store, so its key must be new each update; with the keys of a pure task a second
    update on the same client was handed the first one's results while the scheduler still
    held them (all computed, none reused: a test failed now and then)."""
    return [dask.delayed(persisted_partial, pure=False)(plan, spec, settings, root)
            for plan in plan_chunks(store, spec.grouping(samples))]


@dataclass(frozen=True)
class UpdateReport:
    computed: int
    reused: int
    dropped: int
    chromosomes: list[str]
    samples: list[str]
    foreign: list[str] = field(default_factory=list)  # entries under partials/ left alone: not ours
    was_complete: bool = False  # the manifest was complete before the run (else: a new or interrupted store)
    started_again: tuple = ()  # why it was made again: of another counts store ("source"), other "settings"


def _refuse_foreign(path: Location) -> None:
    """Where partials go is a directory of the store's own, or nothing yet: never a symbolic
    link (reading or removing through one would reach outside the store), nor a file."""
    what = "a symbolic link" if is_link(path) else "not a directory" if path.exists() and not is_dir(path) else ""
    if what:
        raise MomentStoreError(f"{path} is {what}, which streambhmm never makes in a moment store; move it away "
                               f"and rerun")


def _open_or_create(root: Location, settings: dict, source: dict, start_again: bool = False) -> tuple[bool, tuple]:
    """Check an existing moment store against ``settings``, or create one; returns whether
    it was complete, and with ``start_again`` why a store of another counts store or other
    settings was started again (of "source", "settings"; else empty). A new store is created
    whole (Zarr root and an empty, incomplete manifest) and renamed into place, so a killed run
    always leaves a moment store that the next run can resume."""
    if (root / MANIFEST).exists():
        manifest = Manifest.read(root)
        mismatches = {}  # both are said: a moved workdir whose group's samples changed too
        try:
            _check_source(root, manifest.source, source)
        except SourceMismatch as exc:
            mismatches["source"] = exc
        try:
            manifest.check_settings(root, settings, advice=_other_settings_advice(manifest, settings))
        except SettingsMismatch as exc:
            mismatches["settings"] = exc
        if not mismatches:
            return manifest.complete, ()
        if not start_again:
            raise next(iter(mismatches.values()))
        _init_store(root, settings, source, mode="r+")
        return False, tuple(mismatches)
    _refuse_other_directory(root)
    staged = staging_path(root)
    _init_store(staged, settings, source)
    root.rmtree()  # an empty directory
    put_in_place(staged, root)
    return False, ""


def _other_settings_advice(manifest: Manifest, settings: dict) -> str:
    """What to do when a run's settings are not the moment store's: where only the samples
    differ (a sample ingested since, or --samples left out), updating it takes its own."""
    if {k: v for k, v in manifest.settings.items() if k != "samples"} == \
            {k: v for k, v in settings.items() if k != "samples"}:
        return (f"To update it, give its samples: --samples {','.join(manifest.samples)}; for the moments of "
                f"{','.join(settings['samples'])}, use another --output.")
    return "Use another --output."


def _refuse_other_directory(root: Location) -> None:
    """A moment store is written into a new or empty directory, or its own."""
    if not (root / MANIFEST).exists() and root.exists() and root.children():
        raise MomentStoreError(f"{root} exists and is not a moment store")


def _check_source(root: Location, have: dict, source: dict) -> None:
    """An update reads the counts store the moment store was computed from: another's (a
    typo, a merged store) would drop every partial it holds as stale, and it may be the only
    copy of them (a fit needs the moments only)."""
    if have.get("counts_store") == source["counts_store"] and have.get("bin_size") in (None, source["bin_size"]):
        return  # (a store written before the bin size was recorded has none)
    was = (f"merged from {', '.join(have['merged_from'])[:300]}" if "merged_from" in have else
           f"computed from {have.get('counts_store')} ({have.get('bin_size')} bp bins)")
    raise SourceMismatch(f"{root} was {was}, not from {source['counts_store']} ({source['bin_size']} bp bins); "
                         f"updating it would drop its partials. Use another --output (or remove {root} to "
                         f"start it again)")


def _init_store(path: Location, settings: dict, source: dict, mode: str = "w") -> None:
    """A moment store of ``settings`` with no partials: a new one (``mode`` "w"), or an existing one
    started again ("r+": its partials stay on disk, to be reused where their digests match, else
    dropped as stale, and the incomplete manifest is written last)."""
    import zarr

    manifest = Manifest.of(settings, [], False, source)
    group = zarr.open_group(path.url, mode=mode, zarr_format=3)
    group.attrs.update({"format": MOMENT_STORE_FORMAT, "format_version": MOMENT_STORE_VERSION,
                        "feature": manifest.feature, "samples": manifest.samples})
    write_json(path / MANIFEST, manifest.to_json())


def update_moments(store: CountsStore, output, client, spec: FeatureSpec, samples=None,
                   progress=lambda done, total: None, start_again: bool = False) -> UpdateReport:
    """Bring the moment store ``output`` up to date with the counts store ``store``, for the
    feature ``spec`` (resolved here for the samples; its block size None: the existing
    store's, or DEFAULT_BLOCK_SIZE for a new one). ``start_again``: a store of other settings or
    of another counts store is made again in place (batch's own; else it is refused)."""
    samples = select_samples(store, samples)
    root = Location.of(output)
    if is_link(root):  # made, or its contents replaced, through the link: somewhere the user did not name
        raise MomentStoreError(f"{root} is a symbolic link; give the directory itself")
    _refuse_overlap(store.path, root)
    _refuse_other_directory(root)  # before its lock file is made beside it (and again under the lock)
    if spec.block_size is None:
        existing = Manifest.read(root).feature if (root / MANIFEST).exists() else {}
        spec = replace(spec, block_size=existing.get("block_size", DEFAULT_BLOCK_SIZE))
    else:
        check_block_size(spec.block_size, store.bin_size)
    spec = spec.resolve(len(samples))
    settings = {**spec.record(), "samples": samples}
    source = {"counts_store": store.path.resolve(), "bin_size": store.bin_size, "chunk_size": store.chunk_size,
              "reading": {s: reading_of(store.meta.samples[s]) for s in samples}}
    with locked(root):
        was_complete, started_again = _open_or_create(root, settings, source, start_again)
        _remove_leftover_documents(root)
        _refuse_foreign(root / "partials")  # where the tasks write: never through a link
        for chrom in store.chromosomes:
            _refuse_foreign(root / "partials" / chrom)
        tasks = partial_tasks(store, spec, samples, settings, root.resolve())
        entries = _run_tasks(client, tasks, root, progress, lambda finished: write_json(
            root / MANIFEST, Manifest.of(settings, finished, False, source).to_json()))
        write_json(root / MANIFEST, Manifest.of(settings, entries, True, source).to_json())
        chromosomes = sorted({e["chromosome"] for e in entries})
        _write_group_docs(root, chromosomes)
        keep = {e["path"] for e in entries}
        ours, foreign = _partials_on_disk(root)
        gone = [path for rel, path in ours.items() if rel not in keep]
        stale = [path for path in gone if not WRITING_NAME.fullmatch(path.name)]  # not killed writes
        for path in gone:
            _remove(path, "stale")
        _drop_empty_chromosomes(root, chromosomes, emptied={path.parent.name for path in gone})
        reused = sum(1 for e in entries if e["reused"])
        return UpdateReport(computed=len(entries) - reused, reused=reused, dropped=len(stale),
                            chromosomes=store.chromosomes, samples=samples, foreign=[str(p) for p in foreign],
                            was_complete=was_complete, started_again=started_again)


GROUP_DOCUMENT = {"zarr_format": 3, "node_type": "group", "attributes": {}}


def _write_group_docs(root: Location, chromosomes) -> None:
    """Make partials/ and partials/<chrom>/ (the chromosomes with partials) Zarr groups, so the
    partials are one Zarr hierarchy that xarray.open_datatree and zarr.open_group read; a
    zarr.json already there, or a link by that name (dangling too), is left as it is."""
    for path in [root / "partials", *(root / "partials" / chrom for chrom in chromosomes)]:
        document = path / GROUP_DOC
        if not (document.exists() or is_link(document)):
            write_json(document, GROUP_DOCUMENT)


def _remove_leftover_documents(root: Location) -> None:
    """The temporaries that killed writes of the manifest and the group documents left (a
    partial's own are removed with it, or by name_dimensions)."""
    if not root.is_local:
        return  # written by a single put: no temporary
    remove_leftovers((root / MANIFEST).url)
    partials = root / "partials"
    if is_link(partials) or not is_dir(partials):
        return
    remove_leftovers((partials / GROUP_DOC).url)
    for chrom_dir in partials.children():
        if not is_link(chrom_dir) and is_dir(chrom_dir):
            remove_leftovers((chrom_dir / GROUP_DOC).url)


def _is_group_doc(path: Location) -> bool:
    """Whether ``path`` is a group document _write_group_docs wrote: a regular file holding it."""
    if path.name != GROUP_DOC or is_link(path) or is_dir(path):
        return False
    try:
        return json.loads(path.read_text()) == GROUP_DOCUMENT
    except (OSError, ValueError):
        return False


def _drop_empty_chromosomes(root: Location, keep, emptied) -> None:
    """Remove the directories of chromosomes no longer in the plan that hold nothing but
    their group document, or nothing at all once this run removed their partials (``emptied``:
    a store written before the groups): no empty group is left."""
    for chrom_dir in (root / "partials").children():
        if chrom_dir.name in keep or is_link(chrom_dir) or not is_dir(chrom_dir):
            continue
        entries = chrom_dir.children()
        # an empty directory this run did not empty may be the user's
        if (entries or chrom_dir.name in emptied) and all(_is_group_doc(entry) for entry in entries):
            for entry in entries:
                entry.unlink()
            if chrom_dir.is_local:
                os.rmdir(chrom_dir.url)


def _run_tasks(client, tasks: list, root: Location, progress, checkpoint) -> list[dict]:
    """The chunk tasks' entries in plan order, ``checkpoint(finished entries)`` every two
    seconds (the manifest kept roughly current)."""
    entries: list[dict | None] = [None] * len(tasks)
    futures = client.compute(tasks)
    index = {f.key: i for i, f in enumerate(futures)}
    last_write, done = time.monotonic(), 0
    waiter = Waiter(client, futures, f"the moment partials of {root}")
    for future in waiter.as_completed():
        entries[index[future.key]] = waiter.result(future)
        done += 1
        progress(done, len(tasks))
        if time.monotonic() - last_write > 2.0:
            checkpoint([e for e in entries if e is not None])
            last_write = time.monotonic()
    return entries


def _refuse_overlap(counts: Location, root: Location) -> None:
    """The moment store can be neither the counts store nor inside it, nor hold it: the
    run would wait forever for its own lock, and its clean-up would reach the counts."""
    if counts.is_local != root.is_local:
        return
    if counts.is_local:
        a, b = Path(counts.resolve()), Path(root.resolve())
        overlap = a == b or a.is_relative_to(b) or b.is_relative_to(a)
    else:
        a, b = counts.url.rstrip("/") + "/", root.url.rstrip("/") + "/"
        overlap = a.startswith(b) or b.startswith(a)
    if overlap:
        raise MomentStoreError(f"--output {root} and the counts store {counts} overlap (the same directory, or "
                               f"one inside the other); give the moment store a path of its own")


def _partials_on_disk(root: Location) -> tuple[dict[str, Location], list[Location]]:
    """Our partial directories under partials/ by manifest path (the temporary ones of
    killed writes included), and the entries there that are not ours (symbolic links,
    files, other names). No symbolic link is followed: nothing outside the store is seen."""
    ours, foreign = {}, []
    partials = root / "partials"
    if is_link(partials):
        return ours, [partials]
    for chrom_dir in partials.children():
        if _is_group_doc(chrom_dir):
            continue
        if is_link(chrom_dir) or not is_dir(chrom_dir):
            foreign.append(chrom_dir)
            continue
        for entry in chrom_dir.children():
            if is_our_partial(entry):
                ours[f"partials/{chrom_dir.name}/{entry.name}"] = entry
            elif not _is_group_doc(entry):
                foreign.append(entry)
    return ours, foreign


def load_partials(root) -> tuple[list[ChunkPartial], Manifest]:
    """Every partial in plan order, verified, and the manifest."""
    partials, manifest = iter_partials(root)
    return list(partials), manifest


def iter_partials(root, chromosomes=None) -> tuple[Iterator[ChunkPartial], Manifest]:
    """The partials in plan order, verified, read a few ahead in threads (each read waits
    on Zarr's I/O loop and on decompression, which release the GIL: measured on 40 partials
    of a genome, 3.5 s one at a time, 2.5 s in 4 threads), and the manifest. Memory holds
    the partials read ahead, not all of them: an assembly's thousands of contigs are as many
    partials of several MB. With ``chromosomes``, only the partials of those."""
    root = Location.of(root)
    manifest = Manifest.read(root)
    if not manifest.complete:
        raise MomentStoreError(f"{root} is incomplete (an interrupted run); rerun `streambhmm moments` to finish it")
    on_disk = {rel for rel, path in _partials_on_disk(root)[0].items()
               if not WRITING_NAME.fullmatch(path.name)}  # writes in progress (or killed) are not partials
    listed = {e["path"] for e in manifest.partials}
    unlisted = sorted(on_disk - listed)
    if unlisted:
        raise MomentStoreError(f"{root}: partial {unlisted[0]} has no manifest entry; the manifest is "
                               f"missing entries (rerun `streambhmm moments` to rebuild it)")
    for entry in manifest.partials:
        path = root / entry["path"]
        if not path.exists():
            raise MomentStoreError(f"partial {entry['chromosome']} chunk {entry['chunk']} ({path}) listed in "
                                   f"the manifest is missing")

    def read(entry: dict) -> ChunkPartial:
        return read_partial(root / entry["path"], entry["sha256"], _identity(entry))[0]

    def partials() -> Iterator[ChunkPartial]:
        with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
            ahead = collections.deque()
            for entry in manifest.partials:
                if chromosomes is not None and entry["chromosome"] not in chromosomes:
                    continue
                ahead.append(pool.submit(read, entry))
                if len(ahead) > 2 * READ_THREADS:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()

    return partials(), manifest


# the reading settings that decide which reads a sample's counts hold (the format, the
# chromosome filters and --columns may differ between stores of other chromosomes)
READING = ("context", "merge_strands", "min_coverage")


def reading_of(provenance: dict) -> dict:
    """The READING settings a sample was ingested with (a counts store's record of it); the
    context is None for a format without one (every row a CpG: CG and all read the same rows)."""
    options = provenance.get("options", {})
    reading = {key: provenance.get(key, options.get(key)) for key in READING}
    fmt = provenance.get("format")
    if fmt in FORMATS and not records_context(fmt, options.get("columns")):
        reading["context"] = None
    return reading


def _merged_source(inputs, manifests) -> dict:
    """The source of merged moment stores: their bin size (one for all) and each chromosome's
    counts store and chunk size. A chromosome's partials are keyed by chunk index, so only
    partials of one counts store and one chunking may meet: a chromosome from two counts
    stores, or from one rebuilt with other chunks, would be counted twice (chunks of 50,000
    and of 1,000,000 bins share no index); so would one chromosome spelt two ways (chr1, 1).
    A sample read with other settings in two of them (another context or --min-coverage:
    other reads counted) is refused too (stores computed before this was recorded pass)."""
    bin_sizes, counts_stores, chunk_sizes, readings = {}, {}, {}, {}
    spellings = Spellings()
    for path, manifest in zip(inputs, manifests):
        source = manifest.source
        for sample, reading in source.get("reading", {}).items():
            known = readings.setdefault(sample, (reading, path))
            if known[0] != reading:
                differ = "; ".join(f"{key} {known[0].get(key)} against {reading.get(key)}" for key in READING
                                   if known[0].get(key) != reading.get(key))
                raise MomentStoreError(f"{known[1]} and {path} hold sample {sample} read with other settings "
                                       f"({differ}): merged, its moments would mix two readings of its files. "
                                       f"Ingest it with the same settings everywhere")
        if source.get("bin_size") is not None:
            bin_sizes.setdefault(source["bin_size"], path)
        of = source.get("chromosomes") or {c: source.get("counts_store") for c in manifest.chromosomes}
        for chrom, store in of.items():
            try:
                spellings.add(chrom, str(path))
            except ValueError as exc:
                raise MomentStoreError(f"{exc}. Merging would count it twice") from None
            first = counts_stores.setdefault(chrom, (store, path))
            if first[1] != path and (first[0] != store or store is None):
                raise MomentStoreError(f"{first[1]} and {path} both hold moments of {chrom}, of the counts stores "
                                       f"{first[0]} and {store}: merging would count it twice. Merge moment stores "
                                       f"of other chromosomes, or of one counts store")
            size = source.get("chunk_sizes", {}).get(chrom, source.get("chunk_size"))
            known = chunk_sizes.setdefault(chrom, (size, path))
            if None not in (size, known[0]) and size != known[0]:
                raise MomentStoreError(f"{known[1]} and {path} both hold moments of {chrom} of {store}, in chunks of "
                                       f"{known[0]:,} and {size:,} bins (the store was rebuilt between them): merging "
                                       f"would count it twice. Compute the moments of the store as it is now")
    if len(bin_sizes) > 1:
        raise MomentStoreError("cannot merge moment stores of different bin sizes: " + ", ".join(
            f"{path} has {size} bp bins" for size, path in bin_sizes.items()))
    return {"merged_from": [str(p) for p in inputs], "bin_size": next(iter(bin_sizes), None),
            "chromosomes": {c: store for c, (store, _) in counts_stores.items()},
            "chunk_sizes": {c: size for c, (size, _) in chunk_sizes.items() if size is not None},
            "reading": {sample: reading for sample, (reading, _) in readings.items()}}


def _identity(entry: dict) -> dict:
    return {key: entry[key] for key in ("chromosome", "chunk", "digest")}


def load_total(root, split_every: int = DEFAULT_SPLIT_EVERY) -> tuple[Moments, Manifest]:
    """The summed moments of a moment store (same tree as the Dask pipeline), and its manifest."""
    partials, manifest = iter_partials(root)
    if not manifest.partials:
        raise MomentStoreError(f"{root} holds no partials")
    return tree_reduce((p.moments for p in partials), add_moments, split_every), manifest


def merge_moment_stores(inputs, output) -> dict:
    """Combine moment stores of the same feature settings; identical partials are kept once
    and a chunk held with different contents is refused."""
    manifests = [Manifest.read(p) for p in inputs]
    for path, manifest in zip(inputs, manifests):
        if not manifest.complete:
            raise MomentStoreError(f"{path} is incomplete; finish it with `streambhmm moments` before merging")
    settings = manifests[0].settings
    for path, manifest in zip(inputs[1:], manifests[1:]):
        manifest.check_settings(path, settings, f"cannot merge it with {inputs[0]}: incompatible feature settings",
                                str(inputs[0]), "Merge moment stores made with the same settings.")
    source = _merged_source(inputs, manifests)
    chosen: dict[tuple[str, int], tuple[dict, Location]] = {}
    duplicates = 0
    for path, manifest in zip(inputs, manifests):
        for entry in manifest.partials:
            key = (entry["chromosome"], entry["chunk"])
            if key in chosen:
                if chosen[key][0]["digest"] != entry["digest"]:
                    raise MomentStoreError(
                        f"{chosen[key][1]} and {path} both hold {key[0]} chunk {key[1]} with different contents; "
                        f"merging would double count it")
                duplicates += 1
                continue
            chosen[key] = (entry, Location.of(path))
    output = Location.of(output)
    if output.is_local:
        Inputs(*(str(p) for p in inputs)).check(output)  # not inside a moment store it reads
    with locked(output):
        if output.exists():
            raise MomentStoreError(f"{output} exists; merge writes a new moment store")
        with replacing_dir(output, staged=staging_path(output)) as staged:
            _init_store(staged, settings, source)
            entries = []
            for entry, holder in chosen.values():
                read_partial(holder / entry["path"], entry["sha256"], _identity(entry))  # verify before copying
                (holder / entry["path"]).copytree(staged / entry["path"])
                name_dimensions(staged / entry["path"])
                entries.append({**entry, "reused": True})
            _write_group_docs(staged, sorted({entry["chromosome"] for entry, _ in chosen.values()}))
            merged = Manifest.of(settings, entries, True, source)
            write_json(staged / MANIFEST, merged.to_json())
    return {"partials": len(chosen), "duplicates": duplicates, "chromosomes": merged.chromosomes}
