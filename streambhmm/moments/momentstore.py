"""Persisted moment stores: per-chunk partial sums keyed by content, so a pass is never paid twice.

    MOMENTS/zarr.json          Zarr group; attributes: format, version, feature, samples
    MOMENTS/manifest.json      the plan (chromosome, chunk, digest, n_triples, sha256 per
                               partial, in summation order) and whether it is complete
    MOMENTS/partials/<chrom>/<chunk>-<digest>/   one Zarr group per partial (raw sums)

A partial's digest covers the counts it sums (the digests of its chunk's counts of the
selected samples, from the counts store's index, and the two-bin halo before them) and
the feature settings, so adding a sample to the counts store leaves the partials of other
sample selections valid. A chunk task first computes its digest; if a verified partial
with that digest exists it is reused (no counts are read), otherwise the partial is
computed and written atomically (temporary directory, then rename) as soon as it is done. Resuming
a killed run and updating after an ingest are therefore the same operation: only
partials whose digest is new are computed. Partials no longer in the plan are dropped.
Totals are summed in plan order with a fixed tree, so they are bitwise reproducible.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zarr
from scipy import sparse

from .. import __version__
from .blocks import DEFAULT_BLOCK_SIZE, BlockStats, check_block_size
from .features import BLOCK_CELL_BUDGET, HISTOGRAM_CELL_BUDGET
from ..io.storage import write_json
from .sums import ARRAY_FIELDS, Moments
from .pipeline import (DEFAULT_SPLIT_EVERY, ChunkPartial, PlannedChunk, add_moments, chunk_tasks, plan_partial,
                       select_samples, tree_reduce)
from ..io.storage import Location
from ..io.store import CountsStore, locked, staging_path
from ..io.tasks import Waiter

MOMENT_STORE_FORMAT = "streambhmm-moment-store"
MOMENT_STORE_VERSION = 3  # 2: coverage and pair histograms; 3: per-state coverage (coverage_features)
MANIFEST = "manifest.json"


class MomentStoreError(ValueError):
    """A moment store that is incomplete, corrupted, incompatible or too new."""


def feature_settings(n_bins: int, samples, block_size: int = DEFAULT_BLOCK_SIZE, pooled: bool = False,
                     projection_dim: int = 0, projection_seed: int = 0) -> dict:
    """Everything a partial depends on besides the counts (part of its digest). ``pooled``
    and the projection are recorded only when set, so other stores keep their digests."""
    settings = {"kind": "projected" if projection_dim else "beta", "n_bins": int(n_bins), "samples": list(samples),
                "block_size": int(block_size), "histogram_budget": HISTOGRAM_CELL_BUDGET,
                "block_histogram_budget": BLOCK_CELL_BUDGET}
    if projection_dim:
        settings.update(dim=int(projection_dim), seed=int(projection_seed))
    return {**settings, "pooled": True} if pooled else settings


def _feature(settings: dict) -> dict:
    """The manifest's "feature": the settings without the samples."""
    return {k: v for k, v in settings.items() if k != "samples"}


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
    for name, value in _block_arrays(partial.blocks).items():
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def _block_arrays(blocks: BlockStats) -> dict[str, np.ndarray]:
    """A partial's block statistics as named arrays (sparse histograms by their CSR parts)."""
    arrays = {f"block_{name}": getattr(blocks, name) for name in BlockStats.ARRAYS}
    for name in BlockStats.HISTOGRAMS:
        matrix = getattr(blocks, name)
        arrays.update({f"block_{name}_data": matrix.data, f"block_{name}_indices": matrix.indices.astype(np.int64),
                       f"block_{name}_indptr": matrix.indptr.astype(np.int64)})
    return arrays


def plan_digest(plan: PlannedChunk, settings: dict) -> str:
    """Digest of exactly what a chunk's partial depends on: the settings, the chunk (its
    chromosome, index and bins), the digests of the selected samples' counts in it (from the
    counts store's index, so no counts are read) and the halo before it."""
    ref = plan.ref
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    # not the chunk's end: a later sample may lengthen the axis, which changes no count
    digest.update(json.dumps([ref.chrom, ref.chunk, ref.start, ref.bin_size, ref.digests]).encode())
    for halo in (plan.halo if settings.get("pooled") else [plan.halo]):
        for arr in halo:
            digest.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
            digest.update(b"|")
    return digest.hexdigest()


def partial_relpath(chrom: str, chunk: int, digest: str) -> str:
    return f"partials/{chrom}/{chunk:06d}-{digest[:32]}"


PARTIAL_NAME = re.compile(r"[0-9]{6,}-[0-9a-f]{32}")  # partial_relpath's last part
WRITING_NAME = re.compile(r"\.tmp-[0-9a-f]{12}")  # write_partial's temporary directory


def write_partial(path: Location, partial: ChunkPartial, attrs: dict, sha256: str) -> None:
    """Write a partial (with its checksum) as a Zarr group at a temporary path and rename it into place."""
    path.parent.mkdir()
    tmp = path.parent / f".tmp-{uuid.uuid4().hex[:12]}"
    group = zarr.open_group(tmp.url, mode="w", zarr_format=3)
    moments, blocks = partial.moments, partial.blocks
    arrays = {name: np.asarray(getattr(moments, name), dtype=np.float64) for name in ARRAY_FIELDS}
    for name, data in {**arrays, **_block_arrays(blocks)}.items():
        group.create_array(name, data=data, chunks=tuple(max(n, 1) for n in data.shape) or None)
    group.attrs.update({**attrs, "n_samples": moments.n_samples, "n_bins": moments.n_bins,
                        "n_triples": moments.n_triples, "sq_norm_13": moments.sq_norm_13,
                        "histogram_budget": moments.histogram_budget, "projection_dim": moments.projection_dim,
                        "projection_seed": moments.projection_seed, "chromosome_of_blocks": blocks.chromosome,
                        "block_histogram_shapes": [list(getattr(blocks, n).shape) for n in BlockStats.HISTOGRAMS],
                        "sha256": sha256})
    try:
        tmp.rename(path)
    except OSError as exc:
        tmp.rmtree()
        if not path.exists():
            raise MomentStoreError(f"could not write partial {path} ({exc})") from None
        # else another attempt of the same task got there first: same content


def _remove(path: Location, why: str) -> None:
    """Remove a partial directory, or stop: one left on disk would be read later."""
    _refuse_foreign(path)
    path.rmtree()
    if path.exists():
        raise MomentStoreError(f"could not remove the {why} partial {path} (check its permissions); remove it "
                               f"and rerun `streambhmm moments`")


def read_partial(path: Location, expected_sha256: str | None = None, identity: dict | None = None
                 ) -> tuple[ChunkPartial, str]:
    """Read and verify one partial, returning it and its checksum; any damage raises
    MomentStoreError naming it. ``identity`` ({chromosome, chunk, digest}): the partial must
    be the one for that chunk and digest (a checksum alone cannot tell another chunk's
    self-consistent partial put in its place)."""
    try:
        group = zarr.open_group(path.url, mode="r")
        attrs = dict(group.attrs)
        arrays = {name: group[name][...] for name in ARRAY_FIELDS}
        moments = Moments(n_samples=int(attrs["n_samples"]), n_bins=int(attrs["n_bins"]),
                          n_triples=int(attrs["n_triples"]), sq_norm_13=float(attrs["sq_norm_13"]),
                          histogram_budget=int(attrs["histogram_budget"]),
                          projection_dim=int(attrs.get("projection_dim", 0)),
                          projection_seed=int(attrs.get("projection_seed", 0)), **arrays)
        histograms = [sparse.csr_matrix(tuple(group[f"block_{name}_{part}"][...] for part in ("data", "indices", "indptr")),
                                        shape=tuple(shape))
                      for name, shape in zip(BlockStats.HISTOGRAMS, attrs["block_histogram_shapes"])]
        blocks = BlockStats(attrs["chromosome_of_blocks"], moments.n_samples, moments.n_bins,
                            *(group[f"block_{name}"][...] for name in BlockStats.ARRAYS), *histograms)
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


def persisted_partial(plan: PlannedChunk, n_bins: int, settings: dict, root: str) -> dict:
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
    if not reused:
        partial = plan_partial(plan, n_bins, settings["block_size"], settings.get("pooled", False),
                               settings.get("dim", 0), settings.get("seed", 0))
        sha256 = partial_sha256(partial)
        write_partial(path, partial, identity, sha256)
    return {"chromosome": chrom, "chunk": chunk, "digest": digest, "path": rel,
            "n_triples": partial.moments.n_triples, "sha256": sha256, "reused": reused}


@dataclass(frozen=True)
class UpdateReport:
    computed: int
    reused: int
    dropped: int
    chromosomes: list[str]
    samples: list[str]
    foreign: list[str] = field(default_factory=list)  # entries under partials/ left alone: not ours


def _is_link(path: Location) -> bool:
    return path.is_local and os.path.islink(path.url)


def _refuse_foreign(path: Location) -> None:
    """Where partials go is a directory of the store's own, or nothing yet: never a symbolic
    link (reading or removing through one would reach outside the store), nor a file."""
    what = "a symbolic link" if _is_link(path) else "not a directory" if path.exists() and not _is_dir(path) else ""
    if what:
        raise MomentStoreError(f"{path} is {what}, which streambhmm never makes in a moment store; move it away "
                               f"and rerun")


def _open_or_create(root: Location, settings: dict, source: dict) -> None:
    """Check an existing moment store against ``settings``, or create one. A new store is
    created whole (Zarr root and an empty, incomplete manifest) and renamed into place, so
    a killed run always leaves a moment store that the next run can resume."""
    if (root / MANIFEST).exists():
        manifest = read_manifest(root)
        have = {**manifest["feature"], "samples": manifest["samples"]}
        if have != settings:
            differ = ", ".join(f"{k} {have.get(k)} (this run: {settings.get(k)})"
                               for k in dict.fromkeys([*have, *settings]) if have.get(k) != settings.get(k))
            raise MomentStoreError(f"{root}: mismatched feature settings: the moment store has {differ}. "
                                   f"Use another --output.")
        return
    if root.children():
        raise MomentStoreError(f"{root} exists and is not a moment store")
    staged = staging_path(root)
    _init_store(staged, settings, source)
    root.rmtree()  # an empty directory
    staged.rename(root)


def _init_store(path: Location, settings: dict, source: dict) -> None:
    group = zarr.open_group(path.url, mode="w", zarr_format=3)
    group.attrs.update({"format": MOMENT_STORE_FORMAT, "format_version": MOMENT_STORE_VERSION,
                        "feature": _feature(settings), "samples": settings["samples"]})
    write_json(path / MANIFEST, _manifest(settings, [], False, source))


def _manifest(settings: dict, entries: list[dict], complete: bool, source: dict) -> dict:
    chromosomes = list(dict.fromkeys(e["chromosome"] for e in entries))
    return {
        "format": MOMENT_STORE_FORMAT,
        "format_version": MOMENT_STORE_VERSION,
        "feature": _feature(settings),
        "samples": settings["samples"],
        "complete": complete,
        "chromosomes": chromosomes,
        "n_triples": int(sum(e["n_triples"] for e in entries)),
        "partials": [{k: e[k] for k in ("chromosome", "chunk", "digest", "path", "n_triples", "sha256")}
                     for e in entries],
        "source": source,
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "created_by": f"streambhmm {__version__}",
    }


def update_moment_store(store: CountsStore, output, client, samples=None, n_bins: int = 30,
                        progress=lambda done, total: None, block_size: int | None = None,
                        pooled: bool = False, projection_dim: int = 0, projection_seed: int = 0) -> UpdateReport:
    """Bring the moment store ``output`` up to date with the counts store ``store``.
    ``block_size`` defaults to the existing store's, or DEFAULT_BLOCK_SIZE for a new one.
    ``pooled``: the samples' moments summed, each sample its own sequence (pipeline);
    ``projection_dim`` K > 0: the projected feature."""
    samples = select_samples(store, samples)
    root = Location.of(output)
    _refuse_overlap(store.path, root)
    if block_size is None:
        existing = read_manifest(root)["feature"] if (root / MANIFEST).exists() else {}
        block_size = existing.get("block_size", DEFAULT_BLOCK_SIZE)
    else:
        check_block_size(block_size, store.bin_size)
    settings = feature_settings(n_bins, samples, block_size, pooled, projection_dim, projection_seed)
    source = {"counts_store": store.path.resolve(), "bin_size": store.bin_size}
    with locked(root):
        _open_or_create(root, settings, source)
        _refuse_foreign(root / "partials")  # where the tasks write: never through a link
        for chrom in store.chromosomes:
            _refuse_foreign(root / "partials" / chrom)
        tasks = chunk_tasks(store, samples, persisted_partial, n_bins, settings, root.resolve(), pooled=pooled)
        entries: list[dict | None] = [None] * len(tasks)
        futures = client.compute(tasks)
        index = {f.key: i for i, f in enumerate(futures)}
        last_write, done = time.monotonic(), 0
        waiter = Waiter(client, futures, f"the moment partials of {root}")
        for future in waiter.as_completed():
            entries[index[future.key]] = waiter.result(future)
            done += 1
            progress(done, len(tasks))
            if time.monotonic() - last_write > 2.0:  # keep the manifest roughly current
                finished = [e for e in entries if e is not None]
                write_json(root / MANIFEST, _manifest(settings, finished, False, source))
                last_write = time.monotonic()
        write_json(root / MANIFEST, _manifest(settings, entries, True, source))
        keep = {e["path"] for e in entries}
        ours, foreign = _partials_on_disk(root)
        stale = [path for rel, path in ours.items() if rel not in keep]
        for path in stale:
            _remove(path, "stale")
        reused = sum(1 for e in entries if e["reused"])
        return UpdateReport(computed=len(entries) - reused, reused=reused, dropped=len(stale),
                            chromosomes=store.chromosomes, samples=samples, foreign=[str(p) for p in foreign])


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
    if _is_link(partials):
        return ours, [partials]
    for chrom_dir in partials.children():
        if _is_link(chrom_dir) or not _is_dir(chrom_dir):
            foreign.append(chrom_dir)
            continue
        for entry in chrom_dir.children():
            if _is_our_partial(entry):
                ours[f"partials/{chrom_dir.name}/{entry.name}"] = entry
            else:
                foreign.append(entry)
    return ours, foreign


def _is_dir(path: Location) -> bool:
    return os.path.isdir(path.url) if path.is_local else path.fs.isdir(path.fs_path)


def _is_our_partial(path: Location) -> bool:
    """A directory named as write_partial names them: a partial (a Zarr group) or one
    being written; never a symbolic link."""
    if _is_link(path) or not _is_dir(path):
        return False
    if WRITING_NAME.fullmatch(path.name):
        return True
    metadata = path / "zarr.json"
    return bool(PARTIAL_NAME.fullmatch(path.name)) and metadata.exists() and not _is_link(metadata)


def is_moment_store(path) -> bool:
    return (Location.of(path) / MANIFEST).exists()


def read_manifest(root) -> dict:
    root = Location.of(root)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise MomentStoreError(f"{root}: no moment store here (no {MANIFEST})") from None
    except json.JSONDecodeError as exc:
        raise MomentStoreError(f"{root / MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MOMENT_STORE_FORMAT:
        raise MomentStoreError(f"{root}: not a streambhmm moment store ({MANIFEST} is not one's manifest)")
    if type(manifest.get("format_version")) is not int:
        raise MomentStoreError(f"{root / MANIFEST}: format_version is not an integer "
                               f"({json.dumps(manifest.get('format_version'))[:200]})")
    if manifest["format_version"] > MOMENT_STORE_VERSION:
        raise MomentStoreError(f"{root}: moment store format version {manifest['format_version']} is newer "
                               f"than this streambhmm supports ({MOMENT_STORE_VERSION}); upgrade streambhmm")
    if manifest["format_version"] < MOMENT_STORE_VERSION:
        raise MomentStoreError(f"{root}: moment store format version {manifest['format_version']} lacks the "
                               f"histograms that version {MOMENT_STORE_VERSION} fits with; rerun `streambhmm "
                               f"moments` with a new --output (or delete {root} and rerun it)")
    _check_entries(root, manifest)
    return manifest


_ENTRY_TYPES = {"chromosome": str, "chunk": int, "digest": str, "path": str, "n_triples": int, "sha256": str}


def _check_entries(root: Location, manifest: dict) -> None:
    """Each partial entry well formed, its path exactly the one its chromosome, chunk and
    digest name (so no entry reaches outside the store), and no chunk listed twice."""
    from ..io.readers import chromosome_name_problem, quoted  # pyarrow: only here

    entries = manifest.get("partials")
    if not isinstance(entries, list):
        raise MomentStoreError(f"{root / MANIFEST}: 'partials' is missing or not a list")
    seen = set()
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or any(type(entry.get(key)) is not kind for key, kind in _ENTRY_TYPES.items()):
            raise MomentStoreError(f"{root / MANIFEST}: partial entry {i} is malformed: {quoted(json.dumps(entry))}")
        chrom, chunk, digest = entry["chromosome"], entry["chunk"], entry["digest"]
        if (chromosome_name_problem(chrom) or chunk < 0 or not re.fullmatch("[0-9a-f]{64}", digest)
                or entry["path"] != partial_relpath(chrom, chunk, digest)):
            raise MomentStoreError(f"{root / MANIFEST}: partial entry {i} does not name a partial of this store "
                                   f"(path {quoted(entry['path'])})")
        if (chrom, chunk) in seen:
            raise MomentStoreError(f"{root / MANIFEST}: {chrom} chunk {chunk} is listed twice; it would be "
                                   f"counted twice")
        seen.add((chrom, chunk))


def load_partials(root) -> tuple[list[ChunkPartial], dict]:
    """Every partial in plan order, verified, and the manifest."""
    root = Location.of(root)
    manifest = read_manifest(root)
    if not manifest.get("complete"):
        raise MomentStoreError(f"{root} is incomplete (an interrupted run); rerun `streambhmm moments` to finish it")
    on_disk = {rel for rel, path in _partials_on_disk(root)[0].items()
               if not WRITING_NAME.fullmatch(path.name)}  # writes in progress (or killed) are not partials
    listed = {e["path"] for e in manifest["partials"]}
    unlisted = sorted(on_disk - listed)
    if unlisted:
        raise MomentStoreError(f"{root}: partial {unlisted[0]} has no manifest entry; the manifest is "
                               f"missing entries (rerun `streambhmm moments` to rebuild it)")
    partials = []
    for entry in manifest["partials"]:
        path = root / entry["path"]
        if not path.exists():
            raise MomentStoreError(f"partial {entry['chromosome']} chunk {entry['chunk']} ({path}) listed in "
                                   f"the manifest is missing")
        partials.append(read_partial(path, entry["sha256"], _identity(entry))[0])
    return partials, manifest


def _identity(entry: dict) -> dict:
    return {key: entry[key] for key in ("chromosome", "chunk", "digest")}


def load_total(root, split_every: int = DEFAULT_SPLIT_EVERY) -> tuple[Moments, dict]:
    """The summed moments of a moment store (same tree as the Dask pipeline), and its manifest."""
    partials, manifest = load_partials(root)
    if not partials:
        raise MomentStoreError(f"{root} holds no partials")
    return tree_reduce([p.moments for p in partials], add_moments, split_every), manifest


def merge_moment_stores(inputs, output) -> dict:
    """Combine moment stores of the same feature settings; identical partials are kept once
    and a chunk held with different contents is refused."""
    manifests = [read_manifest(p) for p in inputs]
    for path, manifest in zip(inputs, manifests):
        if not manifest.get("complete"):
            raise MomentStoreError(f"{path} is incomplete; finish it with `streambhmm moments` before merging")
    first = manifests[0]
    settings = {**first["feature"], "samples": first["samples"]}
    for path, manifest in zip(inputs[1:], manifests[1:]):
        other = {**manifest["feature"], "samples": manifest["samples"]}
        if other != settings:
            raise MomentStoreError(f"cannot merge {inputs[0]} and {path}: incompatible feature settings "
                                   f"{settings} vs {other}")
    chosen: dict[tuple[str, int], tuple[dict, Location]] = {}
    duplicates = 0
    for path, manifest in zip(inputs, manifests):
        for entry in manifest["partials"]:
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
    with locked(output):
        if output.exists():
            raise MomentStoreError(f"{output} exists; merge writes a new moment store")
        staged = staging_path(output)
        try:
            _init_store(staged, settings, {"merged_from": [str(p) for p in inputs]})
            entries = []
            for entry, source in chosen.values():
                read_partial(source / entry["path"], entry["sha256"], _identity(entry))  # verify before copying
                (source / entry["path"]).copytree(staged / entry["path"])
                entries.append({**entry, "reused": True})
            merged = _manifest(settings, entries, True, {"merged_from": [str(p) for p in inputs]})
            write_json(staged / MANIFEST, merged)
            staged.rename(output)
        finally:
            staged.rmtree()
    return {"partials": len(chosen), "duplicates": duplicates, "chromosomes": merged["chromosomes"]}
