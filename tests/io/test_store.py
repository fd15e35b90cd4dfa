"""The counts store, format version 2: a fixed bin axis, one sample per chunk column, commits
that touch only the sample written, concurrent ingests, recovery, checksums, upgrade."""

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from streambhmm.io.ingest import ingest
from streambhmm.io.store import StoreError, chunk_digest, open_store, upgrade_store
from streambhmm.testing import load_counts, write_store

from ..app.test_cli import run

HEADER = "chrom\tpos\tstrand\tmc\tcov\n"


def write_sample(path: Path, seed: int, chroms=("chr1", "chr2", "chr10"), n_rows: int = 400, step: int = 37) -> Path:
    """A TSV of random counts on a few chromosomes, each sample reaching its own extent."""
    rng = np.random.default_rng(seed)
    lines = [HEADER]
    for chrom in chroms:
        pos = np.cumsum(rng.integers(1, 2 * step, n_rows + seed * 50))
        cov = rng.integers(0, 9, pos.size)
        meth = rng.binomial(cov, 0.6)
        lines += [f"{chrom}\t{p}\t+\t{m}\t{c}\n" for p, m, c in zip(pos, meth, cov)]
    path.write_text("".join(lines))
    return path


def column_files(store: Path, column: int) -> dict[str, bytes]:
    """Every chunk file of one sample column, by its path without the column."""
    out = {}
    for path in sorted(store.rglob("*")):
        parts = path.relative_to(store).parts
        if path.is_file() and "c" in parts and len(parts) >= 5 and parts[1] in ("methylated", "coverage") \
                and parts[-1] == str(column):
            out[str(path.relative_to(store).parent)] = path.read_bytes()
    return out


def by_sample(store_path) -> dict:
    """Each sample's counts (covered bins) and index per chromosome, by name: what must not
    depend on the order of ingests."""
    st = open_store(store_path)
    out = {}
    for name in st.samples:
        for chrom in st.chromosomes:
            ds = xr.open_zarr(store_path, group=chrom).sel(sample=name)
            cov = ds.coverage.values
            covered = cov > 0
            out[name, chrom] = (ds.position.values[covered].tolist(), ds.methylated.values[covered].tolist(),
                                cov[covered].tolist(), st.summary(chrom, [st.column(name)]).tolist())
    return out


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    root = tmp_path_factory.mktemp("samples")
    return [write_sample(root / f"s{i}.tsv", seed=i) for i in range(3)]


def test_the_bin_axis_is_fixed_and_position_is_the_index(tmp_path, samples):
    store = tmp_path / "s.zarr"
    ingest(samples[:1], "A", store, chunk_size=100)
    ds = xr.open_zarr(store, group="chr1")
    n_before = ds.sizes["position"]
    np.testing.assert_array_equal(ds.position.values, np.arange(n_before) * 100)
    assert ds.methylated.data.chunks[1] == (1,)  # one sample per chunk
    window = ds.sel(position=slice(2_000, 2_999))  # plain xarray selects bins by position
    assert window.position.values.tolist() == list(range(2_000, 3_000, 100))
    ingest(samples[2:3], "C", store)  # reaches further: the axis grows, never moves
    ds = xr.open_zarr(store, group="chr1")
    assert ds.sizes["position"] > n_before
    np.testing.assert_array_equal(ds.position.values[:n_before], np.arange(n_before) * 100)
    np.testing.assert_array_equal(ds.sel(sample="A").coverage.values[n_before:], 0)


@pytest.mark.slow
def test_samples_ingested_in_any_order_give_the_same_store(tmp_path, samples):
    stores = []
    for k, order in enumerate(([0, 1, 2], [2, 0, 1])):
        path = tmp_path / f"s{k}.zarr"
        for i in order:
            ingest([samples[i]], "ABC"[i], path, chunk_size=300)
        stores.append(path)
    assert open_store(stores[0]).chromosomes == open_store(stores[1]).chromosomes == ["chr1", "chr2", "chr10"]
    assert by_sample(stores[0]) == by_sample(stores[1])
    np.testing.assert_array_equal(*(load_counts(open_store(p), ["A", "C"])[1] for p in stores))


@pytest.mark.slow
def test_adding_or_replacing_a_sample_writes_only_its_column(tmp_path, samples):
    store = tmp_path / "s.zarr"
    ingest(samples[:1], "A", store, chunk_size=300)
    ingest(samples[1:2], "B", store)
    before = column_files(store, 0)
    assert before
    ingest(samples[2:3], "C", store)
    ingest(samples[2:3], "B", store)  # replaces B's column
    assert column_files(store, 0) == before
    assert column_files(store, 1) == column_files(store, 2)  # B now holds C's counts


@pytest.mark.slow
def test_two_concurrent_ingests_both_land(tmp_path, samples):
    store = tmp_path / "s.zarr"
    ingest(samples[:1], "A", store, chunk_size=300)
    errors = []

    def add(i):
        try:
            ingest([samples[i]], "ABC"[i], store)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(open_store(store).samples) == ["A", "B", "C"]
    reference = tmp_path / "ref.zarr"
    for i in range(3):
        ingest([samples[i]], "ABC"[i], reference, chunk_size=300)
    assert by_sample(store) == by_sample(reference)


def test_a_staging_directory_is_never_seen_without_its_owner_lock(tmp_path, samples, monkeypatch):
    # another writer's commit recovers the store (removing stagings whose writer is gone) at
    # any moment: here, just as this writer's staging appears (its root's document written)
    from streambhmm.io.store import writer
    from streambhmm.io.store.recovery import recover

    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=300)
    real_write = writer.write_document
    seen = []

    def write_then_recover(root, path, document):
        real_write(root, path, document)
        if not seen:  # the staging's first document
            seen.append(Path(path.url).name)
            recover(store)

    monkeypatch.setattr(writer, "write_document", write_then_recover)
    ingest([samples[1]], "B", store, chunk_size=300)
    monkeypatch.undo()
    assert seen and seen[0].startswith("s.zarr.ingest-")
    assert open_store(store).samples == ["A", "B"] and not list(tmp_path.glob("*ingest-*"))


@pytest.mark.slow
def test_a_killed_ingest_leaves_the_other_samples_byte_identical_and_the_rerun_recovers(tmp_path, samples):
    store = tmp_path / "s.zarr"
    for i in (0, 1):
        ingest([samples[i]], "AB"[i], store, chunk_size=300)
    kept = {c: column_files(store, c) for c in (0, 1)}
    metadata = {p: p.read_bytes() for p in store.rglob("zarr.json")}
    big = write_sample(tmp_path / "big.tsv", seed=7, chroms=[f"chr{i}" for i in range(1, 23)], n_rows=40_000)
    code = ("import sys; from streambhmm.io.ingest import ingest; "
            f"ingest([{str(big)!r}], 'C', {str(store)!r}, progress=lambda *done: print(done, flush=True))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    for n, _ in enumerate(proc.stdout, 1):  # progress after each chromosome's rows are staged
        if n == 3:  # well into staging
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert {c: column_files(store, c) for c in (0, 1)} == kept
    assert {p: p.read_bytes() for p in store.rglob("zarr.json")} == metadata
    assert open_store(store).samples == ["A", "B"]
    assert list(tmp_path.glob("s.zarr.ingest-*"))  # the dead staging directory is still there
    ingest([samples[2]], "C", store)  # the rerun (or any writer) removes it
    assert not list(tmp_path.glob("s.zarr.ingest-*")) and open_store(store).samples == ["A", "B", "C"]
    assert {c: column_files(store, c) for c in (0, 1)} == kept


def test_a_damaged_root_metadata_file_is_named(tmp_path, samples):
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store)
    (store / "zarr.json").write_bytes((store / "zarr.json").read_bytes()[:300])
    with pytest.raises(StoreError, match=r"s.zarr/zarr.json: the store's metadata is damaged \(not JSON"):
        open_store(store)


@pytest.mark.parametrize("edit, what", [
    (lambda a: a["samples"].update(A=[0]), "samples"),  # a sample's record not a JSON object
    (lambda a: a["samples"]["A"].pop("column"), "samples"),
    (lambda a: a.update(chunk_size="1000"), "bin_size and chunk_size"),
    (lambda a: a.update(chromosomes="chr1"), "chromosomes"),
])
def test_hand_edited_records_are_refused_as_damaged_metadata(tmp_path, samples, edit, what):
    # they were tracebacks wherever a command read them (info, hmr, ingest)
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store)
    document = json.loads((store / "zarr.json").read_text())
    edit(document["attributes"])
    (store / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(StoreError, match=rf"the store's metadata is damaged \({what} not as this streambhmm"):
        open_store(store)
    r = run("info", store)
    assert r.exit_code == 1 and "metadata is damaged" in r.output and "Traceback" not in r.output


def test_the_root_metadata_is_parsed_once_for_the_same_bytes(tmp_path, samples, monkeypatch):
    # an assembly's root zarr.json is megabytes: parsed once however its path is spelled
    # and by whichever thread, again when its bytes change (a commit rewrites it in place,
    # perhaps to the same size within the same tick of the file's times)
    from streambhmm.io.store import schema

    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store)
    parses = []
    monkeypatch.setattr(schema, "_parsed", lambda file, data: parses.append(file) or json.loads(data))
    first = schema.root_document(store)
    threads = [threading.Thread(target=schema.root_document, args=(tmp_path / "." / "s.zarr",)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(parses) == 1 and schema.root_document(str(store) + "/") is first
    attributes = open_store(store).attrs
    attributes["samples"].clear()  # the caller's own copy
    assert open_store(store).samples == ["A"] and len(parses) == 1
    text = (store / "zarr.json").read_text()
    (store / "zarr.json").write_text(text.replace('"A"', '"B"'))  # the same size
    assert schema.root_document(store)["attributes"]["samples"].keys() == {"B"} and len(parses) == 2


def test_a_store_rechunked_by_other_software_is_refused_as_such(tmp_path, samples):
    # read chunk by chunk, such a store was refused as missing or damaged samples (a
    # helper's audit), which sent the user to ingest again for the wrong reason
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=100)
    document = json.loads((store / "zarr.json").read_text())
    document["consolidated_metadata"]["metadata"]["chr1/coverage"]["chunk_grid"]["configuration"]["chunk_shape"] = \
        [137, 1]
    (store / "zarr.json").write_text(json.dumps(document))
    with pytest.raises(StoreError, match=r"chr1/coverage was changed by another tool: chunks \[137, 1\] \(streambhmm "
                                         r"writes \[100, 1\]"):
        open_store(store)


def test_a_lost_index_file_is_refused_not_read_as_no_coverage(tmp_path, samples):
    """zarr reads a missing chunk of the index as zeros, which say "no coverage here": where
    the sample has counts, that is damage, and every reader of the index refuses the store
    (before, the sample's counts there were skipped, unchecked). A sample without counts on a
    chromosome has no index file there, and that is no damage."""
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=100)
    ingest([samples[1]], "B", store)
    st = open_store(store)
    assert st.summary("chr2", [0, 1]).any()
    (store / "chr2" / "index" / "summary" / "c" / "0" / "1" / "0").unlink()  # B's index on chr2
    st = open_store(store)
    with pytest.raises(StoreError, match=r"the index of sample B on chr2 \(chr2/index/summary, chunk 0\) is missing "
                                         r"or empty, but the sample has counts there .* Ingest sample B again"):
        st.summary("chr2", [0, 1])
    with pytest.raises(StoreError, match="the index of sample B on chr2"):
        st.overview()
    assert st.summary("chr2", [0]).any()  # A's index is whole
    ingest([samples[1]], "B", store)  # the same file again: not "unchanged", since its index is damaged
    assert open_store(store).summary("chr2", [0, 1])[:, 1].any()
    (store / "chr2" / "index" / "summary" / "c" / "0" / "1" / "0").unlink()
    for chunk in (store / "chr2" / "coverage" / "c").glob("*/1"):  # as if B had no counts on chr2 at all
        chunk.unlink()
    with pytest.raises(StoreError, match="the index of sample B on chr2 counts 0 bins with reads, where it was "
                                         "stored with 173"):  # but its commit recorded them
        open_store(store).summary("chr2", [1])


@pytest.mark.slow
def test_a_missing_or_damaged_chunk_is_detected_when_read(tmp_path, samples):
    store = tmp_path / "s.zarr"
    ingest([samples[0]], "A", store, chunk_size=100)
    st = open_store(store)
    chunk = next(iter((store / "chr2" / "coverage" / "c").glob("*/0")))
    chunk.unlink()
    with pytest.raises(StoreError, match=r"sample A on chr2, chunk \d+ .* missing or damaged"):
        load_counts(st)
    r = run("fit", store, "-m", "2", "-o", tmp_path / "m.json", "-q")
    assert r.exit_code == 1 and "missing or damaged" in r.output
    other = store / "chr2" / "methylated" / "c" / chunk.parent.name / "0"  # read before the missing one
    other.write_bytes(b"garbage")  # no longer decompresses
    with pytest.raises(StoreError, match=r"sample A on chr2, chunk \d+ .* damaged \(they cannot be decoded"):
        load_counts(st)


def test_chunk_digest_covers_counts_up_to_the_last_covered_bin():
    meth, cov = np.array([1, 0, 2, 0, 0]), np.array([3, 0, 2, 0, 0])
    assert chunk_digest(meth, cov) == chunk_digest(meth[:3], cov[:3]) != (0, 0)
    assert chunk_digest(meth, cov) != chunk_digest(np.array([1, 0, 1, 0]), cov[:4])
    assert chunk_digest(np.zeros(4), np.zeros(4)) == (0, 0)


def write_version_1(path: Path, chromosomes: dict, names: list[str], chunk_size: int = 50) -> None:
    """A store as streambhmm 0.1 wrote it: covered bins only, all samples in each chunk."""
    import zarr

    attrs = {"format": "streambhmm-counts", "format_version": 1, "bin_size": 100, "chunk_size": chunk_size,
             "tool_version": "0.1.0", "samples": {n: {"files": [], "format": "tsv", "context": "CG"} for n in names}}
    for chrom, (position, meth, cov) in chromosomes.items():
        ds = xr.Dataset({"methylated": (("bin", "sample"), meth.astype(np.uint32)),
                         "coverage": (("bin", "sample"), cov.astype(np.uint32))},
                        coords={"position": ("bin", position), "sample": ("sample", np.array(names, dtype=object))})
        ds.to_zarr(path, group=chrom, mode="w", zarr_format=3, consolidated=False,
                   encoding={v: {"chunks": (chunk_size, len(names))} for v in ("methylated", "coverage")})
    group = zarr.open_group(path, mode="a")
    group.attrs.update({**attrs, "chromosomes": list(chromosomes)})


@pytest.mark.slow
def test_a_version_1_store_is_refused_by_name_and_upgraded_in_place(tmp_path):
    rng = np.random.default_rng(3)
    chroms = {}
    for chrom, n in (("chr2", 130), ("chr1", 90)):
        position = np.sort(rng.choice(1_000, n, replace=False)) * 100  # 20 chunks of 50 bins
        cov = rng.integers(0, 6, (n, 2))
        cov[cov.sum(axis=1) == 0, 0] = 1
        chroms[chrom] = (position, rng.binomial(cov, 0.3), cov)
    v1 = tmp_path / "old.zarr"
    write_version_1(v1, chroms, ["A", "B"])
    with pytest.raises(StoreError, match=r"version-1 counts store .* `streambhmm upgrade"):
        open_store(v1)
    r = run("fit", v1, "-m", "2", "-o", tmp_path / "m.json", "-q")
    assert r.exit_code == 1 and "streambhmm upgrade" in r.output
    r = run("upgrade", v1)
    assert r.exit_code == 0 and "2 sample(s) converted" in r.output, r.output
    st = open_store(v1)
    assert st.samples == ["A", "B"] and st.chromosomes == ["chr1", "chr2"]
    assert st.attrs["samples"]["B"]["format"] == "tsv"
    for chrom, (position, meth, cov) in chroms.items():
        ds = xr.open_zarr(v1, group=chrom)
        np.testing.assert_array_equal(ds.coverage.values[position // 100], cov)
        np.testing.assert_array_equal(ds.methylated.values[position // 100], meth)
        assert ds.coverage.values.sum() == cov.sum()
    with pytest.raises(StoreError, match="converts version 1 only"):
        upgrade_store(v1)
    assert not list(tmp_path.glob("old.zarr.*"))


@pytest.mark.slow
def test_write_store_round_trips_through_load_counts(tmp_path):
    rng = np.random.default_rng(0)
    cov = rng.integers(0, 4, (500, 3))
    meth = rng.binomial(cov, 0.5)
    st = write_store(tmp_path / "w.zarr", {"chrX": (np.arange(500), meth, cov)}, ["a", "b", "c"], chunk_size=64)
    got_meth, got_cov, lengths = load_counts(st)
    keep = cov.sum(axis=1) > 0
    np.testing.assert_array_equal(got_cov, cov[keep])
    np.testing.assert_array_equal(got_meth, meth[keep])
    assert lengths.tolist() == [int(keep.sum())]


def test_overview_sums_each_samples_counts_from_the_index(tmp_path):
    rng = np.random.default_rng(1)
    chromosomes = {}
    for chrom, n in (("chr1", 700), ("chr2", 90)):
        cov = rng.integers(0, 5, (n, 2))
        chromosomes[chrom] = (np.arange(n), rng.binomial(cov, 0.3), cov)
    view = write_store(tmp_path / "o.zarr", chromosomes, ["a", "b"], chunk_size=64).overview()
    assert view.samples == ["a", "b"] and list(view.chromosomes) == ["chr1", "chr2"]
    assert view.n_bins == 790 and [n for n, _ in view.chromosomes.values()] == [700, 90]
    for chrom, (_, meth, cov) in chromosomes.items():
        assert view.chromosomes[chrom][1].tolist() == (cov > 0).sum(axis=0).tolist()
    assert view.covered.tolist() == sum((c > 0).sum(axis=0) for _, _, c in chromosomes.values()).tolist()
    assert view.coverage.tolist() == sum(c.sum(axis=0) for _, _, c in chromosomes.values()).tolist()
    assert view.methylated.tolist() == sum(m.sum(axis=0) for _, m, _ in chromosomes.values()).tolist()


def test_a_sample_without_counts_gets_its_column_everywhere(tmp_path):
    """A sample with no covered bin commits no chromosome of its own; the others still list
    it, with zeros (its names chunk written by zarr, not copied from a chromosome it wrote)."""
    counts = np.array([[3, 0], [5, 0], [2, 0]])
    chroms = {c: (np.arange(3) * 7, counts, 2 * counts) for c in ("chr1", "chr2")}
    store = write_store(tmp_path / "s.zarr", chroms, ["A", "B"], chunk_size=4)
    for chrom in ("chr1", "chr2"):
        ds = xr.open_zarr(store.path.url, group=chrom)
        assert list(ds.sample.values) == ["A", "B"]
        assert ds.coverage.sel(sample="B").values.sum() == 0 and ds.coverage.sel(sample="A").values.sum() == 20
