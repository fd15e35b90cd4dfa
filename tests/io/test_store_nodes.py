"""A store's nodes written as files (streambhmm.io.store.nodes): the bytes zarr writes, and the
store a commit leaves as zarr itself would describe it."""

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.codecs import BloscCodec, GzipCodec

from streambhmm.io.ingest import ingest
from streambhmm.io.storage import Location
from streambhmm.io.store import StoreError, mark_changed, open_store
from streambhmm.io.store.commit import _empty_chromosome, _sample_names
from streambhmm.io.store.nodes import read_chunk, read_document, write_chunk, write_document
from streambhmm.io.store.schema import FIELDS, INDEX_CHUNK, SAMPLE_CHUNK
from streambhmm.io.store.writer import _staged_chromosome

BLOSC = {"compressors": BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")}


def written_by_zarr(create) -> tuple[dict[str, dict], dict[str, bytes]]:
    """What zarr writes when ``create(group)`` makes nodes in an empty group: the documents by
    node path ("" is the group itself), and the chunk files by key."""
    held = {}
    create(zarr.open_group(zarr.storage.MemoryStore(held), mode="w", zarr_format=3))
    documents = {key.removesuffix("zarr.json").rstrip("/"): json.loads(value.to_bytes())
                 for key, value in held.items() if key.endswith("zarr.json")}
    return documents, {key: value.to_bytes() for key, value in held.items() if not key.endswith("zarr.json")}


def _chromosome_by_zarr(group, chunk_size: int) -> None:
    """A store's empty chromosome as zarr makes it."""
    for name in ("methylated", "coverage"):
        group.create_array(name, shape=(0, 0), chunks=(chunk_size, 1), dtype="uint32", fill_value=0,
                           dimension_names=("position", "sample"), **BLOSC)
    group.create_array("position", shape=(0,), chunks=(chunk_size,), dtype="int64", fill_value=0,
                       dimension_names=("position",),
                       attributes={"units": "bp", "description": "0-based start of the bin"})
    group.create_array("sample", shape=(0,), chunks=(SAMPLE_CHUNK,), dtype=str, dimension_names=("sample",))
    group.require_group("index").create_array(
        "summary", shape=(0, 0, len(FIELDS)), chunks=(INDEX_CHUNK, 1, len(FIELDS)), dtype="int64", fill_value=0,
        dimension_names=("chunk", "sample", "field"), attributes={"fields": list(FIELDS)})


def _staged_by_zarr(group, chunk_size: int) -> None:
    """A staged chromosome as zarr makes it."""
    for name in ("methylated", "coverage"):
        group.create_array(name, shape=(0, 1), chunks=(chunk_size, 1), dtype="uint32", fill_value=0,
                           dimension_names=("position", "sample"), **BLOSC)
    group.create_array("summary", shape=(0, 1, len(FIELDS)), chunks=(INDEX_CHUNK, 1, len(FIELDS)), dtype="int64",
                       fill_value=0)


@pytest.mark.parametrize("chunk_size", [20, 1_000_000])
def test_the_stores_documents_are_those_zarr_writes(chunk_size):
    """Written without zarr (a command that reads or stages counts does not import it), the
    documents of a chromosome and of a staged one are zarr's, key for key and in zarr's order."""
    for ours, create in ((_empty_chromosome(chunk_size), _chromosome_by_zarr),
                         (_staged_chromosome(chunk_size), _staged_by_zarr)):
        theirs = written_by_zarr(lambda group: create(group, chunk_size))[0]
        assert json.dumps(ours) == json.dumps(theirs)


@pytest.mark.parametrize("n_names", [1, 3, SAMPLE_CHUNK + 2])
def test_the_sample_coordinate_is_the_bytes_zarr_writes(n_names):
    names = [f"sample-{k}-é" for k in range(n_names)]
    document, chunks = _sample_names(names)

    def create(group):
        group.create_array("sample", shape=(n_names,), chunks=(SAMPLE_CHUNK,), dtype=str,
                           dimension_names=("sample",))[:] = np.array(names, dtype=object)

    documents, files = written_by_zarr(create)
    assert json.dumps(document) == json.dumps(documents["sample"])
    assert {f"sample/c/{k}": data for k, data in chunks.items()} == files


def _arrays(group):
    group.create_array("counts", shape=(25, 2), chunks=(10, 1), dtype="uint32", fill_value=0, **BLOSC)
    group.create_array("positions", shape=(25,), chunks=(10,), dtype="int64", fill_value=0)
    group.create_array("summary", shape=(7, 2, 3), chunks=(4, 1, 3), dtype="int64", fill_value=0)
    group.create_array("gzipped", shape=(25, 2), chunks=(10, 1), dtype="uint32", fill_value=0,
                       compressors=GzipCodec(level=5))


def _data(rng):
    return {"counts": rng.integers(0, 40, (25, 2)).astype(np.uint32),
            "positions": np.arange(25, dtype=np.int64) * 100,
            "summary": rng.integers(-2**40, 2**40, (7, 2, 3)),
            "gzipped": rng.integers(0, 40, (25, 2)).astype(np.uint32)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunks_written_as_files_are_the_bytes_zarr_writes(tmp_path, seed):
    data = _data(np.random.default_rng(seed))
    data["counts"][10:20, 1] = 0  # a chunk of only the fill value: zarr writes no file
    by_zarr = zarr.open_group(tmp_path / "zarr", mode="w", zarr_format=3)
    _arrays(by_zarr)
    for name, values in data.items():
        by_zarr[name][...] = values
    documents = written_by_zarr(_arrays)[0]
    ours = Location(str(tmp_path / "ours"))
    for name, document in documents.items():
        write_document(ours, ours / name if name else ours, document)
    for name, values in data.items():
        document, shape = documents[name], documents[name]["chunk_grid"]["configuration"]["chunk_shape"]
        grid = np.ndindex(*(-(-n // c) for n, c in zip(values.shape, shape)))
        for index in grid:
            part = values[tuple(slice(i * c, (i + 1) * c) for i, c in zip(index, shape))]
            if index == (0, 0) and name == "counts":
                write_chunk(ours, ours / name, document, index, np.ones_like(part))  # then written over
            write_chunk(ours, ours / name, document, index, part)
            chunk = read_chunk(ours / name, document, index)
            np.testing.assert_array_equal(chunk[tuple(slice(0, n) for n in part.shape)], part)
        np.testing.assert_array_equal(zarr.open_array(ours.url, path=name, mode="r")[...], values)
    files = sorted(p.relative_to(tmp_path / "zarr") for p in (tmp_path / "zarr").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "ours") for p in (tmp_path / "ours").rglob("*") if p.is_file())
    assert Path("counts/c/1/1") not in files
    for path in files:
        if path.parts[0] == "gzipped":  # zarr's own writes (gzip's header holds the time)
            continue
        assert (tmp_path / "zarr" / path).read_bytes() == (tmp_path / "ours" / path).read_bytes(), path
    # a chunk set to no rows holds the fill value, whichever codecs write it
    for name in ("counts", "gzipped"):
        write_chunk(ours, ours / name, documents[name], (1, 0), np.zeros((0, 1), np.uint32))
        assert not read_chunk(ours / name, documents[name], (1, 0)).any()
        data[name][10:20, 0] = 0
        np.testing.assert_array_equal(zarr.open_array(ours.url, path=name, mode="r")[...], data[name])


def test_a_chunk_file_is_not_written_through_a_link(tmp_path):
    documents = written_by_zarr(_arrays)[0]
    store = Location(str(tmp_path / "store"))
    write_document(store, store / "counts", documents["counts"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "store" / "counts" / "c").symlink_to(elsewhere)
    with pytest.raises(OSError, match="symbolic link"):
        write_chunk(store, store / "counts", documents["counts"], (0, 0), np.ones((10, 1), np.uint32))
    assert list(elsewhere.iterdir()) == []


def _contigs(path: Path, n_contigs: int, seed: int, reach: int = 60) -> Path:
    rng = np.random.default_rng(seed)
    lines = ["chrom\tpos\tstrand\tmc\tcov\n"]
    for k in range(n_contigs):
        pos = np.unique(rng.integers(1, reach * 100, 40))
        cov = rng.integers(1, 9, pos.size)
        lines += [f"scaffold_{k}\t{p}\t+\t{m}\t{c}\n" for p, m, c in zip(pos, rng.binomial(cov, 0.5), cov)]
    path.write_text("".join(lines))
    return path


def _consolidated(store: Path) -> dict:
    return json.loads((store / "zarr.json").read_text())["consolidated_metadata"]["metadata"]


def test_a_commit_describes_the_store_as_zarr_does(tmp_path):
    """The consolidated metadata a commit writes is what zarr finds on disk, after a store of
    many contigs gained a second sample reaching further, past decode's posteriors and a
    sample coordinate another zarr wrote with other codecs."""
    store = tmp_path / "s.zarr"
    ingest([_contigs(tmp_path / "a.tsv", 30, seed=0)], "A", store, chunk_size=20)
    for chrom in ("scaffold_3", "scaffold_4"):  # decode's posteriors, say
        zarr.create_array(str(store / chrom), name="posterior", shape=(open_store(store).n_bins(chrom), 2),
                          chunks=(20, 2), dtype="float32", fill_value=np.nan, dimension_names=("position", "state"))
    zarr.open_group(str(store / "scaffold_5"), mode="a").create_array(
        "sample", shape=(1,), chunks=(4,), dtype=str, dimension_names=("sample",), overwrite=True)[:] = ["A"]
    mark_changed(store)
    ingest([_contigs(tmp_path / "b.tsv", 35, seed=1, reach=90)], "B", store)

    ours = _consolidated(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        zarr.consolidate_metadata(str(store))
    assert ours == _consolidated(store)
    st = open_store(store)
    assert len(st.chromosomes) == 35
    for chrom in ("scaffold_3", "scaffold_5", "scaffold_33"):
        ds = xr.open_zarr(store, group=chrom)
        assert ds.sample.values.tolist() == ["A", "B"]
        np.testing.assert_array_equal(ds.position.values, np.arange(ds.sizes["position"]) * 100)
    ds = xr.open_zarr(store, group="scaffold_3")
    assert ds.posterior.shape == (ds.sizes["position"], 2)
    assert read_document(Location(str(store / "scaffold_5" / "sample")))["chunk_grid"]["configuration"][
        "chunk_shape"] == [4]


def test_chunk_summaries_past_the_first_index_chunk_read_as_zarr_reads_them(tmp_path):
    """With one bin per chunk, a chromosome of 4,200 bins has its chunk summaries in two index
    chunks (4,096 summaries each); two samples' columns read directly are zarr's."""
    store = tmp_path / "s.zarr"
    for sample, bins in (("A", (3, 4_099, 4_150)), ("B", (7, 4_100))):
        path = tmp_path / f"{sample}.tsv"
        path.write_text("chrom\tpos\tstrand\tmc\tcov\n" + "".join(f"chr1\t{b * 100 + 1}\t+\t{b % 5}\t5\n" for b in bins))
        ingest([path], sample, store, chunk_size=1)
    st = open_store(store)
    summary = st.summary("chr1", [st.column("A"), st.column("B")])
    expected = zarr.open_array(str(store / "chr1" / "index" / "summary"), mode="r")[:, [st.column("A"), st.column("B")]]
    np.testing.assert_array_equal(summary, expected)
    assert summary.shape[0] == 4_151 and summary[4_100, 1, 2] == 1  # covered bins of B's chunk 4,100
    refs = st.chunk_refs("chr1", ["A", "B"])
    assert [ref.chunk for ref in refs] == [3, 7, 4_099, 4_100, 4_150]
    meth, cov = refs[-1].read()
    assert meth.tolist() == [[4_150 % 5, 0]] and cov.tolist() == [[5, 0]]


@pytest.mark.parametrize("damaged", ["chr1/coverage/c/0/0", "chr1/index/summary/c/0/0/0"])
def test_a_chunk_file_that_cannot_be_read_is_refused_with_the_sample_named(tmp_path, damaged):
    store = tmp_path / "s.zarr"
    path = tmp_path / "a.tsv"
    path.write_text("chrom\tpos\tstrand\tmc\tcov\n" + "".join(f"chr1\t{p}\t+\t1\t4\n" for p in range(1, 5_000, 50)))
    ingest([path], "A", store, chunk_size=1_000)
    (store / damaged).unlink()
    (store / damaged).mkdir()  # a directory in its place: reading it fails with an OSError
    st = open_store(store)
    with pytest.raises(StoreError, match="sample A on chr1") as caught:
        st.chunk_refs("chr1", ["A"])[0].read()
    assert f"{store / damaged}" in str(caught.value) and "ingest sample a again" in str(caught.value).lower()


@pytest.mark.parametrize("whole_getitem", [True, False])
def test_a_chunks_first_rows_read_alone_are_its_first_rows(tmp_path, monkeypatch, whole_getitem):
    # short contigs and a chromosome's last chunk read only the rows they hold (blosc
    # decompresses only their blocks); without blosc_getitem the whole chunk is decoded
    from streambhmm.io.store import nodes

    if not whole_getitem:
        monkeypatch.setattr(nodes, "_blosc_getitem", lambda: None)
    rng = np.random.default_rng(3)
    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=(250_000, 2), chunks=(100_000, 1), dtype="uint32",
                              fill_value=0, compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"))
    values = (rng.poisson(4, (250_000, 2)) * (rng.random((250_000, 2)) < 0.6)).astype(np.uint32)
    array[:] = values
    document = read_document(Location.of(str(tmp_path / "a.zarr")))
    location = Location.of(str(tmp_path / "a.zarr"))
    for index in ((0, 0), (1, 1), (2, 0)):
        whole = read_chunk(location, document, index)
        for rows in (0, 1, 7, 4096, 4097, 65_536, 99_999, 100_000, 200_000):
            part = read_chunk(location, document, index, rows=rows)
            assert part.shape == (min(rows, 100_000), 1)
            np.testing.assert_array_equal(part, whole[:rows])
        start = index[0] * 100_000
        np.testing.assert_array_equal(whole[:50_000, 0], values[start:start + 50_000, index[1]])
    missing = read_chunk(location, document, (5, 0), rows=10)  # no file: the fill value
    assert missing.shape == (10, 1) and not missing.any()


def test_a_short_chunk_written_after_a_long_one_holds_only_its_own_rows(tmp_path):
    # the encoding buffer is kept for the next chunk of its kind: it must go back to the fill value
    array = zarr.create_array(str(tmp_path / "a.zarr"), shape=(0, 1), chunks=(1000, 1), dtype="uint32",
                              fill_value=0, compressors=BloscCodec(cname="zstd", clevel=3, shuffle="shuffle"))
    del array
    location = Location.of(str(tmp_path / "a.zarr"))
    document = read_document(location)
    write_chunk(location, location, document, (0, 0), np.full((1000, 1), 7, np.uint32))
    write_chunk(location, location, document, (1, 0), np.full((3, 1), 5, np.uint32))
    np.testing.assert_array_equal(read_chunk(location, document, (1, 0))[:, 0], np.r_[[5] * 3, [0] * 997])
    assert (read_chunk(location, document, (0, 0)) == 7).all()


@pytest.mark.parametrize("cname,shuffle", [("zstd", "shuffle"), ("lz4", "bitshuffle"), ("blosclz", "noshuffle")])
def test_a_short_chunk_is_the_frame_zarr_writes(tmp_path, monkeypatch, cname, shuffle):
    # a chunk mostly of the fill value is encoded as its leading blosc blocks followed by the
    # fill value's blocks (compressed once): the file must be byte for byte zarr's own (blosc
    # without threads, which store the blocks in the order they finish)
    from numcodecs import blosc

    monkeypatch.setattr(blosc, "use_threads", False)
    rng = np.random.default_rng(5)
    for dtype, fill, chunk_rows in (("uint32", 0, 1_000_000), ("int64", 3, 600_000), ("uint16", 0, 200_000)):
        path = tmp_path / f"{cname}-{dtype}.zarr"
        mine = tmp_path / f"{cname}-{dtype}-mine.zarr"
        for where in (path, mine):
            zarr.create_array(str(where), shape=(2 * chunk_rows, 2), chunks=(chunk_rows, 1), dtype=dtype,
                              fill_value=fill, compressors=BloscCodec(cname=cname, clevel=3, shuffle=shuffle))
        theirs = zarr.open_array(str(path), mode="r+")
        location = Location.of(str(mine))
        document = read_document(location)
        for k, rows in enumerate((1, 777, 40_000, 70_000, chunk_rows // 3, chunk_rows - 5)):
            values = rng.integers(0, 1000, (rows, 1)).astype(dtype)
            index = (k % 2, k // 2 % 2)
            write_chunk(location, location, document, index, values)
            block = np.full((chunk_rows, 1), fill, dtype)
            block[:rows] = values
            start = index[0] * chunk_rows
            theirs[start:start + chunk_rows, index[1]:index[1] + 1] = block
            name = f"c/{index[0]}/{index[1]}"
            assert (mine / name).read_bytes() == (path / name).read_bytes(), (dtype, rows)
            np.testing.assert_array_equal(read_chunk(location, document, index), block)



def test_the_same_counts_give_the_same_chunk_file_every_time(tmp_path):
    # blosc's threads stored a frame's blocks in the order they finished, so the same chunk
    # gave other bytes from one ingest to the next. zarr's import turns them off; ingest
    # writes its chunks without importing zarr, so this runs in a process without it.
    code = f"""
import sys
import numpy as np
from numcodecs import blosc
from streambhmm.io.storage import Location
from streambhmm.io.store.nodes import write_chunk
from streambhmm.io.store.schema import counts_document
blosc.set_nthreads(4)
values = np.where((np.arange(1_000_000) // 65_536) % 2 == 0,
                  np.random.default_rng(0).integers(0, 30, 1_000_000), 0).astype(np.uint32)[:, None]
root = Location({str(tmp_path)!r})
files = set()
for _ in range(20):
    write_chunk(root, root / "counts", counts_document(1_000_000, 1, 1_000_000), (0, 0), values)
    files.add((root / "counts" / "c" / "0" / "0").read_bytes())
assert "zarr" not in sys.modules
print(len(files))
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1"]
