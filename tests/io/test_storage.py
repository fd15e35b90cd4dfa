"""Stores at fsspec URLs: memory:// (a non-local filesystem, in this process) and file://."""

import uuid

import numpy as np
import pytest
import xarray as xr

from streambhmm.learn.hmm import BinomialHMM, random_parameters
from streambhmm.io.ingest import ingest
from streambhmm.moments.momentstore import load_total, merge_moment_stores
from streambhmm.testing import update_moment_store
from streambhmm.moments.pipeline import moments_graph
from streambhmm.io.storage import Location
from streambhmm.io.store import open_store
from streambhmm.distributed.decode import POSTERIOR, decode_store
from streambhmm.distributed.em import fit_store_em

from ..app.test_cli import DATA, run

FILES = {"H1": [DATA / "dmrseq_H1_r1.chr21.tsv.gz", DATA / "dmrseq_H1_r2.chr21.tsv.gz"],
         "IMR90": [DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"]}


@pytest.fixture(scope="module")
def threaded_client():
    """memory:// is per process, so this cluster's workers are threads of the test process."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        yield client


def ingest_both(store, chunk_size=1000):
    for sample, files in FILES.items():
        ingest(files, sample, store, chunk_size=chunk_size)
    return open_store(store)


def test_location_paths():
    assert Location.of("file:///tmp/a/b").url == "/tmp/a/b" and Location.of("file:///tmp/a").is_local
    assert Location.of("local:///tmp/a/b").url == "/tmp/a/b"  # fsspec's other name (an ingest there failed)
    remote = Location.of("s3://bucket/runs/counts.zarr/")
    assert not remote.is_local and remote.name == "counts.zarr"
    assert str(remote.parent / "moments.zarr") == "s3://bucket/runs/moments.zarr"
    with pytest.raises(TypeError, match="not a local path"):
        open(remote)  # noqa: SIM115 - must refuse before opening anything


def test_making_a_directory_under_a_file_names_the_file(tmp_path):
    (tmp_path / "notes").write_text("x")
    with pytest.raises(ValueError, match=f"cannot make {tmp_path}/notes/sub: {tmp_path}/notes is a file"):
        Location.of(str(tmp_path / "notes" / "sub" / "c.zarr")).parent.mkdir()
    assert Location.of(str(tmp_path / "a" / "b")).file_in_the_way() is None


def ingest_one(path, store):
    ingest([path], "A", store, fmt="methylseekr", chunk_size=10)
    return open_store(store)


def test_chromosome_names_with_glob_characters_in_a_memory_store(tmp_path):
    """fsspec's mv and rm glob the path they are given: a chromosome named HLA-A*01:01 (hg38's
    alternative contigs) had its chunks moved elsewhere, and removing it would remove the
    chromosomes its name matches as a pattern. Moves and removals take names literally."""
    rows = "".join(f"{chrom}\t{pos}\t{cov}\t{meth}\n" for chrom in ("HLA-A*01:01", "HLA-A-01:01", "chr[1]", "chr1")
                   for pos, cov, meth in ((100, 5, 3), (2100, 4, 1)))
    (tmp_path / "a.tab").write_text(rows)
    root = f"memory://streambhmm-{uuid.uuid4().hex[:8]}"
    stores = {where: ingest_one(tmp_path / "a.tab", where)
              for where in (f"{root}/s.zarr", str(tmp_path / "s.zarr"))}
    remote, local = stores.values()
    assert remote.chromosomes == local.chromosomes and len(remote.chromosomes) == 4
    for chrom in local.chromosomes:
        for theirs, ours in zip(local.chunk_refs(chrom, ["A"]), remote.chunk_refs(chrom, ["A"])):
            assert np.array_equal(theirs.read(), ours.read()), chrom
    Location.of(f"{root}/s.zarr/HLA-A*01:01").rmtree()
    Location.of(f"{root}/s.zarr/chr[1]").rmtree()
    left = sorted(entry.name for entry in Location.of(f"{root}/s.zarr").children())
    assert "HLA-A-01:01" in left and "chr1" in left and "HLA-A*01:01" not in left and "chr[1]" not in left


@pytest.mark.slow
def test_memory_store_matches_local_store(tmp_path, threaded_client):
    root = f"memory://streambhmm-{uuid.uuid4().hex[:8]}"
    local = ingest_both(tmp_path / "counts.zarr")
    remote = ingest_both(f"{root}/counts.zarr")
    assert remote.path.url == f"{root}/counts.zarr" and remote.samples == local.samples == ["H1", "IMR90"]
    for chrom in local.chromosomes:
        a = xr.open_zarr(f"{root}/counts.zarr", group=chrom)  # plain xarray reads the URL
        b = xr.open_zarr(tmp_path / "counts.zarr", group=chrom)
        np.testing.assert_array_equal(a.coverage.values, b.coverage.values)
        np.testing.assert_array_equal(a.position.values, b.position.values)
    assert not Location.of(root).glob("counts.zarr.tmp-*")  # staging removed

    first = update_moment_store(remote, f"{root}/moments.zarr", threaded_client)
    assert first.computed > 1 and first.reused == 0
    again = update_moment_store(remote, f"{root}/moments.zarr", threaded_client)
    assert again.computed == 0 and again.reused == first.computed
    total, manifest = load_total(f"{root}/moments.zarr")
    expected = threaded_client.compute(moments_graph(local).total).result()
    np.testing.assert_allclose(total.p12, expected.p12, rtol=1e-12)
    np.testing.assert_allclose(total.p123, expected.p123, rtol=1e-12)
    assert manifest["complete"] and manifest["source"]["counts_store"] == f"{root}/counts.zarr"

    merge_moment_stores([f"{root}/moments.zarr"], tmp_path / "merged.zarr")  # remote to local
    np.testing.assert_array_equal(load_total(tmp_path / "merged.zarr")[0].p123, total.p123)


@pytest.mark.slow
def test_memory_store_em_and_decode(tmp_path, threaded_client):
    root = f"memory://streambhmm-{uuid.uuid4().hex[:8]}"
    store = ingest_both(f"{root}/counts.zarr")

    def start():
        hmm = BinomialHMM(3)
        hmm.start_from(*random_parameters(3, 2, 0))
        return hmm

    result = fit_store_em(store, start(), threaded_client, n_iter=3)
    reference = fit_store_em(ingest_both(tmp_path / "counts.zarr"), start(), threaded_client, n_iter=3)
    np.testing.assert_allclose(result.history, reference.history, rtol=1e-10)
    decode_store(store, result.hmm, threaded_client, tmp_path / "seg.bed", posteriors=True)
    posterior = xr.open_zarr(f"{root}/counts.zarr", group=store.chromosomes[0])[POSTERIOR].values
    covered = ~np.isnan(posterior).any(axis=1)
    assert covered.any()
    np.testing.assert_allclose(posterior[covered].sum(axis=1), 1, atol=1e-5)
    assert not Location.of(root).glob(f"counts.zarr/*/{POSTERIOR}_tmp_*")


@pytest.mark.slow
def test_cli_with_file_urls(tmp_path, dask_clients):
    scheduler = dask_clients[1].scheduler.address
    url = f"file://{tmp_path}/counts.zarr"
    for sample, files in FILES.items():
        assert run("ingest", *files, "--sample", sample, "--store", url, "--chunk-size", "1000").exit_code == 0
    r = run("moments", "compute", url, "-o", f"file://{tmp_path}/m.zarr", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    via_url = run("fit", url, "-m", "2", "--seed", "1", "-o", tmp_path / "a.json", "--scheduler", scheduler, "-q")
    via_path = run("fit", tmp_path / "counts.zarr", "-m", "2", "--seed", "1", "-o", tmp_path / "b.json",
                   "--scheduler", scheduler, "-q")
    assert via_url.exit_code == 0 and via_path.exit_code == 0, via_url.output + via_path.output
    assert (tmp_path / "a.json").read_text().split('"created_by"')[0] == \
        (tmp_path / "b.json").read_text().split('"created_by"')[0]
    assert run("fit", "file:///nonexistent/store.zarr", "-m", "3").exit_code == 2


@pytest.mark.parametrize("base", ["/tmp/a", "/tmp/a/", "a", "a/b", ".", "..", "./a", "/", "//x", "a//b", "a/./b"])
def test_a_location_joins_names_as_pathlib_does(base):
    from pathlib import Path

    for parts in (["b"], ["b", "c"], ["b/c"], [""], ["."], [".."], ["/abs"], ["c", "0", "0"], ["b/"], ["x", "."]):
        joined, path = Location.of(base), Path(base)
        for part in parts:
            joined, path = joined / part, path / part
        assert joined.url == str(path)
