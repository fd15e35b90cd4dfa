import gzip
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from streambhmm.io.formats import FormatError
from streambhmm.io.ingest import ingest
from streambhmm.io.store import StoreError, open_store, recover

DATA = Path(__file__).parents[1] / "data"
HEADER = "chrom\tpos\tstrand\tmc\tcov\n"


def tsv(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text(HEADER + "".join(f"{c}\t{p}\t+\t{m}\t{v}\n" for c, p, m, v in rows))
    return path


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def chrom_table(store, chrom):
    """(positions, methylated, coverage) of the bins where some sample has coverage."""
    ds = xr.open_zarr(store, group=chrom)
    covered = ds.coverage.values.sum(axis=1) > 0
    return (ds.position.values[covered].tolist(), ds.methylated.values[covered].tolist(),
            ds.coverage.values[covered].tolist())


def test_binning_rule_and_strand_sum(tmp_path):
    # 1-based positions 1, 100 -> pos0 0, 99 -> bin 0; 101, 200 -> bin 100; 201 -> bin 200
    f = tsv(tmp_path, "a.tsv", [("chr1", 1, 1, 2), ("chr1", 100, 2, 3), ("chr1", 101, 0, 4),
                                ("chr1", 200, 4, 4), ("chr1", 201, 1, 1), ("chr2", 5000, 3, 3)])
    store = tmp_path / "s.zarr"
    ingest([f], "A", store)
    assert chrom_table(store, "chr1") == ([0, 100, 200], [[3], [4], [1]], [[5], [8], [1]])
    assert chrom_table(store, "chr2") == ([4900], [[3]], [[3]])
    store50 = tmp_path / "s50.zarr"
    ingest([f], "A", store50, bin_size=50)
    assert chrom_table(store50, "chr1")[0] == [0, 50, 100, 150, 200]


def test_replicates_are_summed_and_samples_merge(tmp_path):
    r1 = tsv(tmp_path, "r1.tsv", [("chr1", 10, 1, 2), ("chr1", 350, 1, 1)])
    r2 = tsv(tmp_path, "r2.tsv", [("chr1", 20, 2, 2), ("chr1", 550, 0, 5)])
    other = tsv(tmp_path, "b.tsv", [("chr1", 150, 3, 3), ("chr1", 560, 1, 2), ("chrX", 7, 1, 1)])
    store = tmp_path / "s.zarr"
    ingest([r1, r2], "A", store)
    assert chrom_table(store, "chr1") == ([0, 300, 500], [[3], [1], [0]], [[4], [1], [5]])
    ingest([other], "B", store)
    st = open_store(store)
    assert st.samples == ["A", "B"] and st.chromosomes == ["chr1", "chrX"]
    assert chrom_table(store, "chr1") == ([0, 100, 300, 500], [[3, 0], [0, 3], [1, 0], [0, 1]],
                                          [[4, 0], [0, 3], [1, 0], [5, 2]])
    assert chrom_table(store, "chrX") == ([0], [[0, 1]], [[0, 1]])
    # each sample's rows, and those without a methylated read, over its files (hmr reads them)
    assert [(st.meta.samples[s]["rows"], st.meta.samples[s]["unmethylated_rows"]) for s in "AB"] == [(4, 1), (3, 0)]
    assert st.meta.samples["A"]["file_rows"] == [[2, 0], [2, 1]]  # and each file's, in the order given


def test_replacing_a_sample_says_so_and_drops_its_old_bins(tmp_path):
    a1 = tsv(tmp_path, "a1.tsv", [("chr1", 10, 1, 2), ("chr1", 350, 1, 1)])
    a2 = tsv(tmp_path, "a2.tsv", [("chr1", 15, 1, 1)])
    b = tsv(tmp_path, "b.tsv", [("chr1", 150, 3, 3)])
    store = tmp_path / "s.zarr"
    ingest([a1], "A", store)
    ingest([b], "B", store)
    messages = []
    report = ingest([a2], "A", store, echo=messages.append)
    assert report.replaced and any("already existed and was replaced" in m for m in messages)
    assert open_store(store).samples == ["A", "B"]
    assert chrom_table(store, "chr1") == ([0, 100], [[1, 0], [0, 3]], [[1, 0], [0, 3]])


def test_identical_reingest_changes_nothing(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    before = tree_digest(store)
    messages = []
    report = ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store, echo=messages.append)
    assert report.unchanged and "store unchanged" in messages[0]
    assert tree_digest(store) == before


def test_a_sample_ingested_before_each_files_rows_were_counted_is_read_again(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    root = store / "zarr.json"  # a store of 2026-12-02: the sample's record without file_rows
    meta = json.loads(root.read_text())
    del meta["attributes"]["samples"]["H1"]["file_rows"]
    root.write_text(json.dumps(meta))
    messages = []
    report = ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store, echo=messages.append)
    assert not report.unchanged and "ingested before each file's rows were counted" in messages[0]
    assert not any("replaced" in m for m in messages)  # the same files read again, not new ones
    assert open_store(store).meta.samples["H1"]["file_rows"] == [[3_000, 0]]
    report = ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store, echo=messages.append)
    assert report.unchanged


def test_ingest_notes_files_listing_methylated_cytosines_only(tmp_path):
    # replicates of one name in two folders are told apart by their paths
    for folder, replicate in (("a", "r1"), ("b", "r2")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "r.tsv.gz").write_bytes((DATA / f"dmrseq_H1_{replicate}.chr21.tsv.gz").read_bytes())
    messages = []
    ingest([tmp_path / "a" / "r.tsv.gz", tmp_path / "b" / "r.tsv.gz"], "H1", tmp_path / "s.zarr",
           echo=messages.append)
    assert [m for m in messages if m.startswith("note:")] == [
        f"note: no row of H1's files {tmp_path / 'a' / 'r.tsv.gz'} (3,000 rows); {tmp_path / 'b' / 'r.tsv.gz'} "
        f"(3,000 rows) that has reads is without a methylated read: they list methylated cytosines only (as Lister et al. 2009's "
        f"mc files do), so `hmr` will refuse sample H1, for want of the unmethylated CpGs at the core of every HMR"]


def test_failed_ingest_leaves_the_store_exactly_as_it_was(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    before = tree_digest(store)
    bad = tsv(tmp_path, "bad.tsv", [("chr21", 10, 1, 2), ("chr21", 5, 1, 1), ("chr21", 10, 1, 1)])
    with pytest.raises(FormatError, match="bad.tsv:4: repeats the chromosome"):
        ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz", bad], "IMR90", store)
    with pytest.raises(ValueError, match="mixed formats"):
        ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz", DATA / "bsseq_bismark.cov.gz"], "IMR90", store)
    with pytest.raises(StoreError, match="uses bin size 100; cannot ingest with --bin-size 200"):
        ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"], "IMR90", store, bin_size=200)
    assert tree_digest(store) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.zarr")) == ["s.zarr"]


class Stopped(Exception):
    pass


@pytest.mark.parametrize("at", ["first", "last"])
def test_a_stop_check_that_raises_leaves_the_store_as_it_was(tmp_path, at):
    """``stop_check`` (batch's stop, which reaches its ingest tasks on other processes) is
    called as the files are read and, last, right before the commit point: what it raises
    there stores nothing, and the staged counts are removed."""
    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    calls = []
    ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"], "IMR90", tmp_path / "other.zarr",
           stop_check=lambda: calls.append("check"), progress=lambda done, total, note: calls.append(note))
    assert calls[0] == "check" and calls[-2:] == ["committing sample IMR90", "check"]  # read, then the commit
    before = tree_digest(store)
    seen = []

    def stop_check():
        seen.append(1)
        if len(seen) == (1 if at == "first" else calls.count("check")):
            raise Stopped

    with pytest.raises(Stopped):
        ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"], "H1", store, stop_check=stop_check)
    assert tree_digest(store) == before and open_store(store).samples == ["H1"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.zarr")) == ["s.zarr"]


def test_a_run_killed_between_the_renames_is_undone(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    before = tree_digest(store)
    os.rename(store, tmp_path / "s.zarr.old-deadbeef0000")  # the state right after the first rename
    (tmp_path / "s.zarr.tmp-cafe00000000").mkdir()  # and an incomplete staged store
    recover(store)
    assert tree_digest(store) == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("s.zarr")) == ["s.zarr"]


def test_real_replicates_and_provenance(tmp_path):
    store = tmp_path / "s.zarr"
    r1, r2 = DATA / "dmrseq_H1_r1.chr21.tsv.gz", DATA / "dmrseq_H1_r2.chr21.tsv.gz"
    ingest([r1, r2], "H1", store, chunk_size=500)
    ingest([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"], "IMR90", store)
    ds = xr.open_zarr(store, group="chr21")
    assert ds.methylated.data.chunks[0][0] == 500 and ds.methylated.dtype == np.uint32
    # independent: sum both replicates' rows by bin with plain numpy
    expected = {}
    for f in (r1, r2):
        for line in __import__("gzip").open(f, "rt").read().splitlines()[1:]:
            _, pos, _, mc, cov = line.split("\t")
            key = (int(pos) - 1) // 100 * 100
            m, c = expected.get(key, (0, 0))
            expected[key] = (m + int(mc), c + int(cov))
    h1 = ds.sel(sample="H1")
    got = {int(p): (int(m), int(c)) for p, m, c in zip(ds.position.values, h1.methylated.values, h1.coverage.values)
           if c > 0}
    assert got == expected
    # each chunk's summary (digest, sums, last bins) is that of its summed counts, although the
    # second replicate met every chunk again (summarized once, at the end)
    from streambhmm.io.store.chunks import chunk_summary

    counts = open_store(store)
    summary = counts.summary("chr21", [0])[:, 0]
    meth, cov = (np.asarray(ds[name].values[:, 0], np.int64) for name in ("methylated", "coverage"))
    covered = [k for k in range(summary.shape[0]) if cov[k * 500:(k + 1) * 500].any()]
    assert len(covered) >= 5
    for k in covered:
        whole = [np.r_[x[k * 500:(k + 1) * 500], np.zeros(max(0, (k + 1) * 500 - x.size), np.int64)] for x in (meth, cov)]
        np.testing.assert_array_equal(summary[k], chunk_summary(k * 500, *whole))
    attrs = open_store(store).attrs
    files = attrs["samples"]["H1"]["files"]
    assert [f["sha256"] for f in files] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in (r1, r2)]
    assert attrs["samples"]["H1"]["format"] == "tsv" and attrs["bin_size"] == 100
    assert attrs["format"] == "streambhmm-counts" and attrs["format_version"] == 2 and "tool_version" in attrs
    assert attrs["samples"]["H1"]["context"] == "CG" and attrs["samples"]["IMR90"]["column"] == 1
    assert ds.attrs["chromosome"] == "chr21" and ds.attrs["bin_size"] == 100


@pytest.mark.slow
def test_store_opens_with_plain_xarray_without_streambhmm(tmp_path):
    store = tmp_path / "s.zarr"
    ingest([DATA / "bsseq_modkit_HG002.bed.gz"], "HG002", store)
    code = (
        "import sys; sys.modules['streambhmm'] = None\n"  # any import of streambhmm would fail
        "import warnings; warnings.simplefilter('error')\n"
        "import xarray as xr\n"
        f"ds = xr.open_zarr({str(store)!r}, group='chr22')\n"
        "print(list(ds.sample.values), int(ds.coverage.sum()), ds.position.values[:2].tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("['HG002']")


def test_files_without_usable_rows_are_refused(tmp_path):
    chh_only = DATA / "methylKit_CX_report.txt.gz"
    store = tmp_path / "s.zarr"
    with pytest.raises(ValueError, match=r"no rows with coverage in .*z.tsv \(left out: 1 row without reads\); "
                                         r"nothing to ingest"):
        ingest([tsv(tmp_path, "z.tsv", [("chr1", 5, 0, 0)])], "A", store)
    allc_chh = tmp_path / "chh.allc.tsv"
    allc_chh.write_text("chr1\t10\t+\tCTT\t1\t3\t1\nchr1\t12\t+\tCAA\t0\t2\t1\n")
    with pytest.raises(ValueError, match=r"no rows with coverage in context CG in .*chh.allc.tsv \(left out: 2 rows of "
                                         r"other contexts than CG\)"):
        ingest([allc_chh], "A", store)
    assert not store.exists()
    ingest([chh_only], "A", store, context="CHH")
    assert open_store(store).samples == ["A"]


@pytest.mark.slow
def test_an_ingest_waits_for_the_readers_of_the_store(tmp_path):
    """Audit 1: `moments` (a reader, shared lock) and an ingest replacing a sample never
    overlap; the ingest lands after the reader is done."""
    import threading

    from streambhmm.io.store import locked

    store = tmp_path / "s.zarr"
    ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", store)
    before = tree_digest(store)
    writer = threading.Thread(target=ingest, args=([DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"], "IMR90", store))
    with locked(store, shared=True), locked(store, shared=True):  # two readers at once
        writer.start()
        writer.join(timeout=3)
        assert writer.is_alive()  # blocked by the readers
        assert tree_digest(store) == before
    writer.join()
    assert open_store(store).samples == ["H1", "IMR90"]


def test_a_planted_lock_symlink_is_refused_and_its_target_untouched(tmp_path):
    """Audit 10: the lock file is opened without following links and never truncated."""
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (tmp_path / ".s.zarr.lock").symlink_to(target)
    with pytest.raises(StoreError, match="lock file .* is a symbolic link"):
        ingest([DATA / "dmrseq_H1_r1.chr21.tsv.gz"], "H1", tmp_path / "s.zarr")
    assert target.read_text() == "keep me"


def test_a_failed_first_ingest_leaves_no_lock_file(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("chrom\tpos\tstrand\tmc\tcov\nchr1\t10\t+\tx\t2\n")
    with pytest.raises(FormatError):
        ingest([bad], "A", tmp_path / "s.zarr")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tsv"]


@pytest.mark.slow
def test_contexts_ingested_as_samples_fit_jointly(tmp_path):
    """CG and CHG from one CX report, each ingested as a sample of its own, fitted jointly:
    the state methylated in CG only is named so (README: *Several contexts as samples*)."""
    import json

    from click.testing import CliRunner

    from streambhmm.app.cli import main
    from streambhmm.learn.simulate import model, simulate

    levels = np.array([[0.9, 0.85], [0.85, 0.05], [0.05, 0.04]])  # (CG, CHG): both, CG only, neither
    sim = simulate(model(levels, np.full((3, 3), 0.01) + np.eye(3) * 0.97), [15_000, 15_000],
                   coverage=12, random_state=3)
    rows = []
    for c, length in enumerate(sim.lengths):
        start = int(np.sum(sim.lengths[:c]))
        for i in range(length):
            meth, cov = sim.methylated[start + i], sim.coverage[start + i]
            pos = 100 * i + 1  # one CG and one CHG cytosine per 100 bp bin, in the order the report has them
            rows.append(f"chr{c + 1}\t{pos}\t+\t{meth[0]}\t{cov[0] - meth[0]}\tCG\tCGA\n")
            rows.append(f"chr{c + 1}\t{pos + 5}\t+\t{meth[1]}\t{cov[1] - meth[1]}\tCHG\tCAG\n")
    report = tmp_path / "WT.CX_report.txt.gz"
    report.write_bytes(gzip.compress("".join(rows).encode(), compresslevel=1))
    store, output = tmp_path / "at.zarr", tmp_path / "at.json"
    runner = CliRunner()
    for context in ("CG", "CHG"):
        r = runner.invoke(main, ["ingest", str(report), "--sample", f"WT_{context}", "--context", context,
                                 "--store", str(store), "-q"])
        assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["info", str(store)])
    assert "sample WT_CG: 1 bismark-report file(s), context CG" in r.output
    assert "sample WT_CHG: 1 bismark-report file(s), context CHG" in r.output
    r = runner.invoke(main, ["fit", str(store), "--states", "3", "--output", str(output), "-q"])
    assert r.exit_code == 0, r.output
    document = json.loads(output.read_text())
    assert document["samples"] == ["WT_CG", "WT_CHG"]
    assert sorted(document["labels"]) == ["high", "high:WT_CG|unmethylated:WT_CHG", "unmethylated"], r.output
