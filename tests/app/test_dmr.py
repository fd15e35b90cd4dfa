"""`dmr` on simulated groups of replicates with planted DMRs: it finds them where they are,
with unbalanced groups and a group of one; its FDR holds, under the null too; and a bad
sheet is refused before any work."""

import csv
import gzip
import os

import numpy as np
import pytest
import xarray as xr
from click.testing import CliRunner

from streambhmm.app.cli import main
from streambhmm.testing import simulate_groups, write_store

LENGTH = 3_000_000


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def simulated_store(directory, replicates=(3, 3), n_dmrs=30, domain=True, seed=3, chunk_size=None):
    sim = simulate_groups(LENGTH, 1, replicates, n_dmrs, domain=domain, seed=seed)
    kwargs = {} if chunk_size is None else {"chunk_size": chunk_size}
    store = write_store(directory / "counts.zarr", sim.binned(), sim.samples, **kwargs)
    sheet = directory / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{s}\t{g}\n" for s, g in zip(sim.samples, sim.groups)))
    return store, sheet, sim


def calls(path):
    with open(path) as fh:
        return [{**row, "start": int(row["start"]), "end": int(row["end"]), "difference": float(row["difference"]),
                 "qvalue": float(row["qvalue"]), "lfdr": float(row["lfdr"])}
                for row in csv.DictReader(fh, delimiter="\t")]


def overlaps(call, truth):
    return [t for t in truth if t[0] == call["chrom"] and t[1] < call["end"] and call["start"] < t[2]]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dmr")
    store, sheet, sim = simulated_store(directory)
    (directory / "hg.sizes").write_text(f"chrX\t1000\nchr1\t{LENGTH + 51}\n")
    result = run("dmr", store.path.url, "--groups", sheet, "--output", directory / "dmr.bed", "--fdr", "1", "-q",
                 "--bigwig", directory / "post.bw", "--chrom-sizes", directory / "hg.sizes")
    assert result.exit_code == 0, result.output
    return directory, sim


@pytest.mark.slow  # a whole dmr run
def test_em_graphs_on_the_threads_give_the_same_calls(planted, tmp_path):
    """Above $STREAMBHMM_IN_PROCESS_MAX cells EM's E-steps are graphs on the command's threads,
    not an in-memory E-step: the same calls, byte for byte."""
    directory, _ = planted
    store = directory / "counts.zarr"
    result = run("dmr", store, "--groups", directory / "sheet.tsv", "--output", tmp_path / "dmr.bed", "--fdr", "1",
                 "-q", env={"STREAMBHMM_IN_PROCESS_MAX": "1"})
    assert result.exit_code == 0, result.output
    for name in ("dmr.bed", "dmr.tsv", "dmr.domains.tsv"):
        assert (tmp_path / name).read_bytes() == (directory / name).read_bytes(), name


@pytest.mark.slow  # a whole dmr run
def test_planted_dmrs_found_at_their_places(planted):
    directory, sim = planted
    focal = [t for t in sim.truth if t[4] == "focal"]
    found = [c for c in calls(directory / "dmr.tsv") if c["qvalue"] <= 0.05]
    hits = [overlaps(c, sim.truth) for c in found]
    assert np.mean([bool(h) for h in hits]) >= 0.95  # precision
    for call, hit in zip(found, hits):  # each call says which way its DMR goes
        if hit and hit[0][4] == "focal":
            assert np.sign(call["difference"]) == np.sign(hit[0][3])
            assert (call["direction"] == "gain") == (call["difference"] > 0)
    recovered = [t for t in focal if any(overlaps(c, [t]) for c in found)]
    strong = [t for t in focal if abs(t[3]) >= 0.3]
    assert len(recovered) >= 0.55 * len(focal)  # the misses: differences of 0.1-0.25 over 2-3 bins
    assert sum(any(overlaps(c, [t]) for c in found) for t in strong) >= 0.9 * len(strong)
    # the PMD of one group is a domain, reported apart, and no focal call is a piece of it
    domain = [t for t in sim.truth if t[4] == "domain"][0]
    domains = calls(directory / "dmr.domains.tsv")
    assert len(domains) == 1 and overlaps(domains[0], [domain]) and domains[0]["direction"] == "loss"
    assert min(domains[0]["end"], domain[2]) - max(domains[0]["start"], domain[1]) >= 0.8 * (domain[2] - domain[1])
    inside = [c for c in found if overlaps(c, [domain]) and c["direction"] == "loss"]
    assert not inside


@pytest.mark.slow  # a whole dmr run
def test_outputs_are_what_users_load(planted):
    import pyBigWig

    directory, sim = planted
    bed = [line.split("\t") for line in (directory / "dmr.bed").read_text().splitlines()[1:]]
    table = calls(directory / "dmr.tsv")
    assert len(bed) == len(table) and all(len(fields) == 9 for fields in bed)
    assert {fields[8].strip() for fields in bed} <= {"215,48,39", "69,117,180"}  # gain red, loss blue
    starts = [(f[0], int(f[1])) for f in bed]
    assert starts == sorted(starts)  # genome order; the table is ranked
    lfdr = [c["lfdr"] for c in table]
    ranked = np.round(lfdr, 10)  # lfdr's last digits are rounding, ranked by area (RegionTable.ranked)
    assert (np.diff(ranked) >= 0).all() and [c["rank"] for c in table] == [str(k + 1) for k in range(len(table))]
    first = table[0]
    assert {f"level_{s}" for s in sim.samples} | {"level_A", "level_B"} <= set(first)
    assert np.isclose(float(first["level_B"]) - float(first["level_A"]), first["difference"], atol=1e-3)
    # each level is that of every read in the DMR's (or domain's) interval, as a user recounting
    # them finds; a domain's ends move out to its pieces, and its levels are those of that interval
    counts = xr.open_zarr(directory / "counts.zarr", group="chr1")
    domains = calls(directory / "dmr.domains.tsv")
    assert domains
    for call in table + domains:
        inside = counts.sel(position=slice(call["start"], call["end"] - 1))
        levels = inside.methylated.sum("position").values / inside.coverage.sum("position").values
        np.testing.assert_allclose([float(call[f"level_{s}"]) for s in sim.samples], levels, atol=1e-4)
        assert int(call["n_bins"]) == int((inside.coverage.values > 0).any(axis=1).sum())
    with pyBigWig.open(str(directory / "post.bw")) as bw:
        assert bw.chroms() == {"chr1": LENGTH + 51}  # --chrom-sizes' length
        values = bw.values("chr1", first["start"], first["end"])
        assert np.nanmax(values) >= 0.5 and np.nanmax(values) <= 1.0


@pytest.mark.slow  # a whole dmr run
def test_a_domain_ends_where_the_data_do(tmp_path):
    """A chromosome whose reads end inside a domain, 300 bp into a 5 kb window: the domain
    ends at the store's last bin, not at the window's end (a new user's trial: a domain ran
    2,700 bp past the data, where pmd's domains stop)."""
    sim = simulate_groups(LENGTH, 1, (3, 3), 30, domain=True, seed=3)
    _, start, end, _, _ = [t for t in sim.truth if t[4] == "domain"][0]
    last = (start + 273_300) // 100  # the store's last bin: data end at start + 273,300 bp
    bins, meth, cov = sim.binned()["chr1"]
    kept = bins < last
    bins, meth, cov = np.r_[bins[kept], last], np.vstack([meth[kept], meth[kept][-1:]]), np.vstack([cov[kept], cov[kept][-1:]])
    store = write_store(tmp_path / "counts.zarr", {"chr1": (bins, meth, cov)}, sim.samples)
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{s}\t{g}\n" for s, g in zip(sim.samples, sim.groups)))
    result = run("dmr", store.path, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q")
    assert result.exit_code == 0, result.output
    domains = calls(tmp_path / "dmr.domains.tsv")
    data_end = (last + 1) * 100
    assert [d["end"] for d in domains if d["end"] > start] == [data_end]


@pytest.mark.slow  # a whole dmr run
def test_calibrated_on_planted_differences(planted):
    """The observed FDR of the calls at q <= alpha stays within twice alpha."""
    directory, sim = planted
    table = calls(directory / "dmr.tsv") + calls(directory / "dmr.domains.tsv")
    for alpha in (0.01, 0.05, 0.1, 0.2):
        chosen = [c for c in table if c["qvalue"] <= alpha]
        false = sum(not overlaps(c, sim.truth) for c in chosen)
        assert false <= 2 * alpha * len(chosen) + 1, (alpha, false, len(chosen))


@pytest.mark.slow  # a whole dmr run
def test_null_calls_nothing(tmp_path):
    """No planted difference: the FDR of the calls is that any is made; none is, over seeds."""
    made = 0
    for seed in range(3):
        store, sheet, _ = simulated_store(tmp_path / f"s{seed}", n_dmrs=0, domain=False, seed=100 + seed) \
            if (tmp_path / f"s{seed}").mkdir() is None else None
        result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / f"s{seed}" / "dmr.bed", "-q")
        assert result.exit_code == 0, result.output
        made += bool(calls(tmp_path / f"s{seed}" / "dmr.tsv") + calls(tmp_path / f"s{seed}" / "dmr.domains.tsv"))
    assert made == 0


@pytest.mark.slow  # a whole dmr run
@pytest.mark.parametrize("replicates", [(2, 4), (1, 3)], ids=["unbalanced", "group-of-one"])
def test_unbalanced_groups_and_a_group_of_one(tmp_path, replicates):
    store, sheet, sim = simulated_store(tmp_path, replicates, seed=5)
    result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q")
    assert result.exit_code == 0, result.output
    found = calls(tmp_path / "dmr.tsv")
    focal = [t for t in sim.truth if t[4] == "focal"]
    assert np.mean([bool(overlaps(c, sim.truth)) for c in found]) >= 0.9
    assert sum(any(overlaps(c, [t]) for c in found) for t in focal) >= 0.5 * len(focal)
    # a group of one: runs of bins in wide differential states where the samples agree are no DMRs
    for call in found + calls(tmp_path / "dmr.domains.tsv"):
        shown = call["difference"] * (-1 if call["direction"] == "loss" else 1)
        assert shown >= 0.1 - 1e-3, call
        # replicates spread around their group's mean: the nearest pair is no further apart
        assert float(call["separation"]) <= shown + 1e-3, call
    carried = sum(float(call["separation"]) < 0 for call in found)
    carried_domains = sum(float(call["separation"]) < 0 for call in calls(tmp_path / "dmr.domains.tsv"))
    said = [line for line in result.output.splitlines() if "have a replicate of the lower group above" in line]
    which = [f"{carried:,} of the DMRs"] * bool(carried) + [f"{carried_domains:,} of the domains"] * bool(
        carried_domains)
    tables = [str(tmp_path / "dmr.tsv")] * bool(carried) + [str(tmp_path / "dmr.domains.tsv")] * bool(carried_domains)
    assert said == ([f"{' and '.join(which)} have a replicate of the lower group above one of the higher: small "
                     f"differences whose replicates' reads cross, yet bear them out as a whole (replicate_p) (a "
                     f"negative separation in {' and '.join(tables)})"] if which else [])
    header = (tmp_path / "dmr.tsv").read_text().splitlines()[0].split("\t")
    assert [h for h in header if h.startswith("level_")] == ["level_A", "level_B"] + [f"level_{s}" for s in
                                                                                      sim.samples]
    # each sample's reads in the region: its level's weight, for a depth filter (2 reads read as 1.0)
    assert header[-len(sim.samples):] == [f"reads_{s}" for s in sim.samples]
    for call in found:
        reads = np.array([call[f"reads_{s}"] for s in sim.samples], float)
        levels = np.array([np.nan if call[f"level_{s}"] == "NA" else call[f"level_{s}"] for s in sim.samples], float)
        assert (reads >= 0).all() and np.array_equal(reads == 0, np.isnan(levels)), call


@pytest.mark.slow  # two dmr runs
def test_differences_one_replicate_carries_are_left_out(tmp_path):
    """A new user's trial: a domain where one treated replicate of two sat 0.3 below the three
    others was called with q 7e-11. Here group B's second replicate is group A's first
    (its reads copied), so every planted difference rests on B's first replicate alone: the
    model calls them (--ignore-replicates), and the replicates' test leaves almost all out,
    saying so; the calls kept are those their replicates bear out (replicate_p)."""
    sim = simulate_groups(LENGTH, 1, (2, 2), 30, domain=True, seed=7)
    a1, b2 = sim.samples.index("A1"), sim.samples.index("B2")
    binned = {}
    for chrom, (bins, meth, cov) in sim.binned().items():
        meth, cov = meth.copy(), cov.copy()
        meth[:, b2], cov[:, b2] = meth[:, a1], cov[:, a1]
        binned[chrom] = (bins, meth, cov)
    store = write_store(tmp_path / "counts.zarr", binned, sim.samples)
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{s}\t{g}\n" for s, g in zip(sim.samples, sim.groups)))
    found = {}
    for label, extra in (("model", ["--ignore-replicates"]), ("tested", [])):
        result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / f"{label}.bed", "-q", *extra)
        assert result.exit_code == 0, result.output
        found[label] = calls(tmp_path / f"{label}.tsv") + calls(tmp_path / f"{label}.domains.tsv")
        if label == "tested":
            assert "that the model called are left out: their replicates do not bear them out" in result.output
    assert len(found["model"]) >= 10 and len(found["tested"]) <= 0.2 * len(found["model"]), \
        (len(found["model"]), len(found["tested"]))
    assert all(float(c["replicate_p"]) <= 0.05 for c in found["tested"] if c["replicate_p"] != "NA")
    assert all(c["replicate_p"] != "NA" for c in found["model"])  # tested, shown, not applied


@pytest.mark.slow  # a whole dmr run
def test_the_chunking_changes_nothing(tmp_path):
    """Exact messages between chunks: small chunks give the regions of one chunk."""
    tables = []
    for chunk_size in (2_000, None):
        directory = tmp_path / str(chunk_size)
        directory.mkdir()
        store, sheet, _ = simulated_store(directory, n_dmrs=10, domain=False, seed=7, chunk_size=chunk_size)
        assert run("dmr", store.path.url, "--groups", sheet, "--output", directory / "dmr.bed", "-q").exit_code == 0
        tables.append([(c["name"], c["chrom"], c["start"], c["end"], c["direction"])
                       for c in calls(directory / "dmr.tsv")])
    assert tables[0] == tables[1] and tables[0]


def test_lfdrs_that_differ_by_rounding_rank_by_area():
    """1 - a posterior near 1 keeps only its rounding: 1.58e-14 against 1.6e-14 moved with the
    chunk size and renamed the DMRs (M3D). Such calls rank by their area, then place."""
    from streambhmm.app.dmr import RegionTable
    from streambhmm.learn.groups import SampleGroups

    groups = SampleGroups.of(["A", "B"])
    n_bins, lfdr = np.array([3, 5, 4, 2]), np.array([1.6e-14, 1.58e-14, 1.62e-14, 0.01])
    methylated, coverage = np.array([[2, 18]] * 4, float), np.full((4, 2), 20.0)
    table = RegionTable("DMR", ["chr1"] * 4, np.arange(4) * 1000, np.arange(4) * 1000 + 500, n_bins,
                        ["gain"] * 4, np.ones(4), lfdr, lfdr, methylated, coverage)
    assert table.ranked(groups).n_bins.tolist() == [5, 4, 3, 2]


@pytest.fixture
def small(tmp_path):
    store, sheet, sim = simulated_store(tmp_path, (2, 2), n_dmrs=2, domain=False, seed=9)
    return tmp_path, store.path.url, sheet


def test_samples_ingested_from_the_same_files_are_said_not_to_be_replicates(tmp_path):
    """An audit: a sample ingested twice under two names passed every call through the
    replicates' test (alike by construction) without a word."""
    sim = simulate_groups(LENGTH, 1, (2, 2), 2, domain=False, seed=9)
    files = {s: {"files": [{"path": f"/data/{s}.cov.gz", "sha256": f"{i:064x}", "bytes": 10}]}
             for i, s in enumerate(sim.samples)}
    files[sim.samples[1]] = files[sim.samples[0]]  # A2 is A1's file again
    store = write_store(tmp_path / "counts.zarr", sim.binned(), sim.samples, provenance=files)
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{s}\t{g}\n" for s, g in zip(sim.samples, sim.groups)))
    result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q")
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "were ingested from the same files" in line]
    assert said == [f"warning: samples {sim.samples[0]} and {sim.samples[1]} were ingested from the same files (the "
                    f"same SHA-256): their reads are identical, so they are not replicates of each other, and the "
                    f"calls and their replicates' test would count one sample twice"], result.output


def test_chromosomes_without_a_samples_reads_and_samples_left_out_are_noted(tmp_path):
    """A chromosome that one replicate lacks (chrY, say) moves the calls elsewhere, as the model
    weighs it too; and a store's sample the sheet does not name is left out: both said (a
    helper's trial heard of neither)."""
    sim = simulate_groups(LENGTH, 1, (2, 3), 2, domain=False, seed=9)
    chromosomes = sim.binned()
    bins, meth, cov = next(iter(chromosomes.values()))
    meth, cov = meth.copy(), cov.copy()
    meth[:, 0] = cov[:, 0] = 0  # the first sample has no reads on chrZ
    chromosomes["chrZ"] = (bins, meth, cov)
    store = write_store(tmp_path / "counts.zarr", chromosomes, sim.samples).path.url
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{s}\t{g}\n" for s, g in list(zip(sim.samples, sim.groups))[:-1]))
    result = run("dmr", store, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stderr.split())
    assert f"note: 1 chromosome has reads in some of the sheet's samples but not in all: chrZ (no reads in " \
           f"{sim.samples[0]})" in said, said
    assert f"note: the store's samples that the sheet does not name are left out: {sim.samples[-1]}" in said, said
    # a sample the sheet names and --contrast leaves out is not one the sheet does not name
    groups = list(dict.fromkeys(sim.groups))
    with sheet.open("a") as fh:
        fh.write(f"{sim.samples[-1]}\tthird\n")
    result = run("dmr", store, "--groups", sheet, "--output", tmp_path / "dmr.bed", "--contrast", ",".join(groups), "-q")
    assert result.exit_code == 0 and "does not name" not in result.stderr, result.output


@pytest.mark.realdata
@pytest.mark.slow  # four ingests and a dmr run
def test_every_call_compares_the_groups_in_bins_where_each_has_reads(tmp_path):
    """On DSS's example data (2 vs 2 RRBS of low coverage) calls rested on fewer than --min-bins
    bins with reads of both groups, one with an lfdr of 0.009 where one group's 40 reads were
    all methylated and the other's one read was not (a helper's trial): every call (focal
    DMRs, domains) now has --min-bins bins with reads of both (280 calls became 208)."""
    from ..conftest import REAL_DATA

    store, names = tmp_path / "counts.zarr", [f"cond{c}_{r}" for c in (1, 2) for r in (1, 2)]
    for name in names:
        result = run("ingest", REAL_DATA / "DSS_extdata" / f"{name}.txt.gz", "--sample", name, "--store", store, "-q")
        assert result.exit_code == 0, result.output
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\n" + "".join(f"{n}\t{n[:5]}\n" for n in names))
    for label, extra in (("dmr", []), ("model", ["--ignore-replicates"])):  # the model's calls: 208
        result = run("dmr", store, "--groups", sheet, "--output", tmp_path / f"{label}.bed", "-q", *extra)
        assert result.exit_code == 0, result.output
    covered = {}
    for name in names:
        with gzip.open(REAL_DATA / "DSS_extdata" / f"{name}.txt.gz", "rt") as fh:
            for line in fh:
                f = line.split()
                if f[0] != "chr" and int(f[2]) > 0:
                    covered.setdefault((f[0], (int(f[1]) - 1) // 100), set()).add(name[:5])
    both = {key for key, groups in covered.items() if len(groups) == 2}
    for label, fewest in (("model", 100), ("dmr", 20)):  # the replicates' test leaves most out (208 -> 33)
        found = calls(tmp_path / f"{label}.tsv") + calls(tmp_path / f"{label}.domains.tsv")
        assert len(found) > fewest, (label, len(found))
        for call in found:
            compared = sum((call["chrom"], b) in both for b in range(call["start"] // 100, call["end"] // 100))
            assert compared >= 2, call


@pytest.mark.parametrize("text, message", [
    ("sample\tgroup\nA1\tA\nA2\tA\nB1\tB\nX9\tB\n", r"sheet.tsv, line 5: sample 'X9' is not in the store"),
    ("sample\tcondition\nA1\tA\n", r"sheet.tsv, line 1: the header has no column group .*Name the column of the "
                                    r"groups with --group-column \(this header's others: condition\)"),
    ("sample\tgroup\nA1\tA\nA2\n", r"sheet.tsv, line 3: 1 field\(s\) where the header has 2"),
    ("sample\tgroup\nA1\tA\nNA\tB\n", r"sheet.tsv, line 3: no sample named for group 'B'"),
    ("sample\tgroup\nA1\tA\nA2\tA\n", r"sheet.tsv: the sheet has one group, 'A'"),
    ("sample\tgroup\nA1\tA\nB1\tB\nA1\tB\n", r"sheet.tsv, line 4: sample 'A1' is listed again \(first on line 2\)"),
    ("", r"sheet.tsv: the sample sheet is empty"),
    ("sample\tgroup\nA1\tA\nA2\tA\nB1\tB\nB2\tb\n", r"sheet.tsv, line 5: group 'b' differs from 'B' \(line 4\) "
                                                        r"only in case"),
    ("sample,group\nA1,A\nB1\tB\n", r"the header has no column sample or group .*Its header is comma-separated "
                                   r"and other lines hold tabs"),
    # a NUL or an escape in a group's name made a group of its own (a helper's audit)
    ("sample\tgroup\nA1\tA\x00\nA2\tA\nB1\tB\n", r"sheet.tsv, line 2: invalid group name with a control or "
                                                  r"whitespace character: 'A\\x00'"),
    ("sample\tgroup\nA1\tA,B\nB1\tB\n", r"line 2: invalid group name with ',' \(--contrast separates names"),
    # the first of two group columns was read, whichever the user meant
    ("sample\tgroup\tgroup\nA1\tA\tX\nB1\tB\tX\n", r"sheet.tsv, line 1: the header names the column 'group' 2 "
                                                   r"times"),
])
def test_a_bad_sheet_is_refused_before_any_work(small, text, message):
    """Refused before the cluster starts: the scheduler given does not exist, and the error
    is the sheet's; nothing is written."""
    directory, store, sheet = small
    sheet.write_text(text)
    result = run("dmr", store, "--groups", sheet, "--output", directory / "out.bed", "--scheduler",
                 "tcp://127.0.0.1:9")
    assert result.exit_code != 0
    import re
    assert re.search(message, result.output), result.output
    assert not list(directory.glob("out*"))


@pytest.mark.slow  # two dmr runs
def test_the_groups_may_come_from_another_column(small):
    """A DSS design table (sample, case, cell, file): --group-column case reads the groups
    from it, and the calls are those of a sheet with the same groups in a column named group."""
    directory, store, sheet = small
    design = directory / "design.tsv"
    rows = [line.split("\t") for line in sheet.read_text().splitlines()[1:]]
    design.write_text("sample\tcase\tcell\tfile\n" + "".join(f"{s}\t{g}\tT\t{s}.txt\n" for s, g in rows))
    for name, given in (("by-group", (sheet,)), ("by-case", (design, "--group-column", "case"))):
        result = run("dmr", store, "--groups", *given, "--output", directory / f"{name}.bed", "--fdr", "1", "-q")
        assert result.exit_code == 0, result.output
    assert (directory / "by-group.tsv").read_text() == (directory / "by-case.tsv").read_text() != ""


def test_groups_without_shared_reads_are_told(tmp_path):
    """Group A on chr1, group B on chr2: no DMR can have reads of both, which the user is told."""
    rng = np.random.default_rng(1)
    bins = np.arange(0, 20_000, 2)
    cov = rng.poisson(10, (bins.size, 4)) + 1
    meth = rng.binomial(cov, 0.7)
    on = {"chr1": np.array([1, 1, 0, 0]), "chr2": np.array([0, 0, 1, 1])}
    store = write_store(tmp_path / "apart.zarr", {c: (bins, meth * m, cov * m) for c, m in on.items()},
                        ["A1", "A2", "B1", "B2"])
    sheet = tmp_path / "sheet.tsv"
    sheet.write_text("sample\tgroup\nA1\tA\nA2\tA\nB1\tB\nB2\tB\n")
    result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q", "--no-domains")
    assert result.exit_code == 0, result.output
    assert "warning: every group has reads in only 0.0% of the 5 kb windows with reads" in result.output
    # the domains were not looked for: said so, not "0 differential domains"
    assert "dmr.domains.bed: none looked for (--no-domains); written empty" in result.output
    assert "inside a differential domain" not in result.output
    assert (tmp_path / "dmr.domains.bed").read_text().startswith("track ")


def test_a_contrast_group_without_samples_is_refused(small):
    directory, store, sheet = small
    result = run("dmr", store, "--groups", sheet, "--output", directory / "out.bed", "--contrast", "A,C")
    assert result.exit_code != 0 and "--contrast: group 'C' has no sample in" in result.output
    result = run("dmr", store, "--groups", sheet, "--output", directory / "out.bed", "--contrast", "A")
    assert result.exit_code != 0 and "--contrast names one group, 'A': a contrast needs two" in result.output
    assert not list(directory.glob("out*"))


@pytest.mark.parametrize("output, bigwig, message", [
    ("out.tsv", None, "taken for the table"),
    ("out.bed.gz", None, "not compressed"),
    ("out.bed", "out.domains.bed", "the track would replace one of the regions' files"),
])
def test_outputs_that_collide_are_refused(small, output, bigwig, message):
    directory, store, sheet = small
    options = ["--bigwig", directory / bigwig] if bigwig else []
    result = run("dmr", store, "--groups", sheet, "--output", directory / output, *options)
    assert result.exit_code != 0 and message in result.output, result.output
    assert not list(directory.glob("out*"))


def test_em_stopped_at_its_cap_is_said(small):
    """EM cut short by --em-iter while still improving is said (the calls can move with more
    iterations); EM that converges says nothing."""
    directory, store, sheet = small
    capped = run("dmr", store, "--groups", sheet, "--output", directory / "capped.bed", "--em-iter", "2", "-q")
    said = "note: EM stopped at its cap of 1 iteration(s) (after BIC removed states: a third of --em-iter) before"
    assert capped.exit_code == 0 and said in capped.output, capped.output  # 2 iterations, then BIC's removals
    # a converged fit says nothing; one at the first fit's cap says no more than that
    from streambhmm.app.dmr import em_stopped
    from streambhmm.distributed.dmr import DmrSettings
    from streambhmm.distributed.em import StoreEMResult

    def fit(converged, history):
        return StoreEMResult(None, history, 0.0, converged, 0.0)

    settings = DmrSettings(em_iter=3)
    assert em_stopped(fit(True, [-10.0, -5.0]), settings) == ""
    first = em_stopped(fit(False, [-9.0, -8.0, -7.0, -6.0]), settings)
    assert first.startswith("EM stopped at its cap of 3 iteration(s) before converging (its last iteration gained 1;")


def test_an_output_that_is_the_sheet_is_refused(small):
    """The sample sheet given as --output or --bigwig, or where the table beside the output
    goes: refused before any work, not replaced, and the message says which output it is."""
    directory, store, sheet = small
    before = sheet.read_text()
    copy, beside = directory / "sheet.bed", directory / "o.tsv"
    copy.write_text(before)
    beside.write_text(before)
    for given, named in ((("--groups", copy, "--output", copy), f"{copy}: "),
                         (("--groups", sheet, "--output", directory / "o.bed", "--bigwig", sheet), f"{sheet}: "),
                         (("--groups", beside, "--output", directory / "o.bed"),
                          f"{beside} (the table beside {directory / 'o.bed'}): ")):
        result = run("dmr", store, *given, "-q")
        assert result.exit_code == 1 and named + "is " in result.output and \
            "which this command reads, and the output would replace it; write it elsewhere" in result.output, \
            result.output
    assert sheet.read_text() == copy.read_text() == beside.read_text() == before
    assert not list(directory.glob("o*.bed"))


def test_chrom_sizes_of_another_assembly_are_refused_before_any_work(small):
    directory, store, sheet = small
    (directory / "short.sizes").write_text("chr1\t1000\n")
    result = run("dmr", store, "--groups", sheet, "--output", directory / "out.bed", "--bigwig",
                 directory / "out.bw", "--chrom-sizes", directory / "short.sizes", "-q")
    assert result.exit_code != 0 and "gives chr1 1,000 bp" in result.output, result.output
    assert "the summary" not in result.output
    result = run("dmr", store, "--groups", sheet, "--output", directory / "out.bed", "--chrom-sizes",
                 directory / "short.sizes")
    assert result.exit_code != 0 and "--chrom-sizes sets the --bigwig track's header" in result.output
    assert not list(directory.glob("out*"))


@pytest.mark.slow  # a whole dmr run
def test_three_groups(tmp_path):
    """More than two groups: a state differs when its largest and smallest levels do."""
    store, sheet, sim = simulated_store(tmp_path, (2, 2, 2), n_dmrs=20, domain=False, seed=11)
    result = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / "dmr.bed", "-q")
    assert result.exit_code == 0, result.output
    found = calls(tmp_path / "dmr.tsv")
    assert found and {c["direction"] for c in found} == {"differs"}
    assert np.mean([bool(overlaps(c, sim.truth)) for c in found]) >= 0.9
    assert all(c["difference"] >= 0 for c in found)  # the largest minus the smallest level
    assert {"level_A", "level_B", "level_C"} <= set(found[0])
    one_pair = run("dmr", store.path.url, "--groups", sheet, "--output", tmp_path / "ac.bed", "--contrast", "C,A",
                   "-q")
    assert one_pair.exit_code == 0, one_pair.output
    header = (tmp_path / "ac.tsv").read_text().splitlines()[0].split("\t")
    assert [h for h in header if h.startswith("level_")][:2] == ["level_C", "level_A"]
    assert {c["direction"] for c in calls(tmp_path / "ac.tsv")} <= {"gain", "loss"}


def test_a_dmr_differs_by_min_difference_in_its_own_reads():
    """A candidate whose samples agree (a run of bins in a wide differential state) is no DMR:
    its groups' levels must be --min-difference apart in its direction; no read in a group
    shows no difference."""
    from streambhmm.app.dmr import RegionTable
    from streambhmm.learn.groups import SampleGroups

    groups = SampleGroups.of(["A", "B", "B"])
    methylated = np.array([[10, 12, 12], [10, 10, 10], [30, 10, 14], [10, 0, 0], [10, 13, 11]], float)
    coverage = np.array([[20, 20, 20], [20, 20, 20], [40, 20, 20], [20, 0, 0], [20, 20, 20]], float)
    n = len(methylated)
    table = RegionTable("DMR", ["chr1"] * n, np.arange(n) * 1000, np.arange(n) * 1000 + 500, np.full(n, 3),
                        ["gain", "gain", "loss", "gain", "gain"], np.ones(n), np.zeros(n), np.zeros(n), methylated,
                        coverage)
    # B - A: 0.1 (a gain of 0.1), 0 (agree), 0.6 - 0.75 = -0.15 (a loss), no read in B, 0.6 - 0.5 = 0.1
    assert table.differ_by(groups, 0.1).tolist() == [True, False, True, False, True]
    assert table.differ_by(groups, 0.12).tolist() == [False, False, True, False, False]
    three = SampleGroups.of(["A", "B", "C"])
    table.direction = ["differs"] * n
    assert table.differ_by(three, 0.1).tolist() == [True, False, True, False, True]


def test_a_sheet_from_a_pipe_or_standard_input(tmp_path, monkeypatch):
    """A helper gave --groups <(printf ...): "Illegal seek" (the readers look at a file's first
    bytes, then read it again), and --groups - was no file."""
    import io
    import sys
    import threading

    from streambhmm.app.sheet import read_sheet

    text = b"sample\tgroup\nA1\tA\nB1\tB\n"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(text,))
    writer.start()
    assert read_sheet(fifo).samples == ("A1", "B1")
    writer.join()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    sheet = read_sheet("-")
    assert (sheet.samples, sheet.groups, sheet.lines) == (("A1", "B1"), ("A", "B"), (2, 3))
    assert not list(tmp_path.glob("*sheet*"))


def test_a_sheet_larger_than_a_sheet_can_be_is_refused_unread(tmp_path, monkeypatch):
    """A helper's --groups /dev/zero (or a huge standard input) was read into memory whole."""
    import contextlib
    import io
    import sys

    from streambhmm.app import sheet as sheets

    monkeypatch.setattr(sheets, "MAX_SHEET_BYTES", 1 << 10)
    text = b"sample\tgroup\n" + b"".join(b"S%d\t%s\n" % (k, b"AB"[k % 2:][:1]) for k in range(400))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    with pytest.raises(ValueError, match=r"standard input: more than 0 MiB, too large for a sample sheet"):
        sheets.read_sheet("-")
    big = tmp_path / "big.tsv"
    big.write_bytes(text)
    with pytest.raises(ValueError, match=r"big.tsv: more than 0 MiB, too large for a sample sheet .* is it the sheet"):
        sheets.read_sheet(big)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text[:200])))
    assert sheets.read_sheet("-").samples[:2] == ("S0", "S1")
    # a file that grows after its size is checked (written to as it is read) is refused as it is read
    growing = tmp_path / "growing.tsv"
    growing.write_bytes(text[:200])
    checked = sheets.readable_twice

    @contextlib.contextmanager
    def grown_after_the_check(path, *limits):
        with checked(path, *limits) as readable:
            growing.write_bytes(text)
            yield readable

    monkeypatch.setattr(sheets, "readable_twice", grown_after_the_check)
    with pytest.raises(ValueError, match=r"growing.tsv: more than 0 MiB, too large for a sample sheet"):
        sheets.read_sheet(growing)
    monkeypatch.setattr(sheets, "readable_twice", checked)
    # a bad sheet from standard input is named as the user named it, not as its copy
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("sample\tgroup\nA\tx\n".encode("utf-16"))))
    with pytest.raises(ValueError, match=r"^-:1: is UTF-16 text"):
        sheets.read_sheet("-")
    assert not list(tmp_path.glob("*sheet*"))


def test_a_sheet_is_read_as_ingest_reads_text(tmp_path):
    """A byte-order mark (Excel's "UTF-8" export) and CRLF line ends are the sheet's encoding,
    not its columns; a chrom.sizes file that lists a chromosome twice is refused with the line."""
    from streambhmm.app.sheet import read_sheet
    from streambhmm.distributed.tracks import read_chrom_sizes

    sheet = tmp_path / "sheet.tsv"
    sheet.write_bytes(b"\xef\xbb\xbfsample\tgroup\r\nA1\tA\r\nB1\tB\r\n")
    assert read_sheet(sheet).samples == ("A1", "B1") and read_sheet(sheet).groups == ("A", "B")
    # a DSS design table saved by R's write.table with its defaults: quotes, blanks, row names
    sheet.write_text('"sample" "case" "cell"\n"1" "A1" "SLE" "T"\n"2" "B1" "HC" "T"\n')
    design = read_sheet(sheet, "case")
    assert (design.samples, design.groups, design.lines) == (("A1", "B1"), ("SLE", "HC"), (2, 3))
    # a quoted string keeps its blanks, as read.table reads it: one field, refused as a group name
    sheet.write_text('"sample" "case"\n"1" "A1" "SLE patient"\n"2" "B1" \'HC\'\n')
    with pytest.raises(ValueError, match="line 2: invalid group name with a control or whitespace character: "
                                         "'SLE patient'"):
        read_sheet(sheet, "case")
    sheet.write_text('"sample" "case"\n"1" "A1" "SLE"\n"2" "B1" \'HC\'\n')
    assert read_sheet(sheet, "case").groups == ("SLE", "HC")
    # R's write.csv (and a spreadsheet's CSV): comma-separated, quoted, the row names' column named ""
    sheet.write_text('"","sample","case"\n"1","A1","SLE"\n"2","B1","HC"\n')
    assert read_sheet(sheet, "case").samples == ("A1", "B1") and read_sheet(sheet, "case").groups == ("SLE", "HC")
    sheet.write_text('sample, group\r\nA1, A\r\n"B1","B"\r\n')
    assert read_sheet(sheet).groups == ("A", "B")
    sheet.write_text("sample group note,x\nA1 A n\nB1 B m\n")  # blank-separated, a comma in a column's name
    assert read_sheet(sheet).groups == ("A", "B")
    sheet.write_text('"sample" "case"\n"1" "A1" "SLE"\n"B1" "HC"\n')  # not every line: a line of the wrong width
    with pytest.raises(ValueError, match="line 2: 3 field"):
        read_sheet(sheet, "case")
    # "Sample Group" is the columns sample and group (and Group with --group-column Group); a header
    # with both "group" and "Group" takes the one named exactly
    sheet.write_text("Sample\tGroup\nA1\tA\nB1\tB\n")
    assert read_sheet(sheet).groups == ("A", "B") and read_sheet(sheet, "Group").samples == ("A1", "B1")
    sheet.write_text("sample\tgroup\tGroup\nA1\tA\tX\nB1\tB\tX\n")
    assert read_sheet(sheet).groups == ("A", "B")
    # two names in other cases than the column's are two columns of it: which to read is unclear
    with pytest.raises(ValueError, match="names the column 'GROUP' 2 times"):
        read_sheet(sheet, "GROUP")
    sheet.write_text("Sample\tSample\tgroup\nA1\tA1\tA\nB1\tB1\tB\n")
    with pytest.raises(ValueError, match="names the column 'sample' 2 times"):
        read_sheet(sheet)
    sizes = tmp_path / "hg.sizes"
    sizes.write_text("chr1\t100\nchr2\t50\nchr1\t120\n")
    with pytest.raises(ValueError, match=r"hg.sizes, line 3: chr1 is listed again \(first on line 1\)"):
        read_chrom_sizes(sizes)


def test_the_separation_shows_a_call_that_one_replicate_carries():
    """The smallest difference in the call's direction between a replicate of each group: a
    new user's 2 vs 2 call (test1 1.00, test2 0.26, control 0.94 and one control unread) is a
    loss that test1 does not show."""
    from streambhmm.app.dmr import RegionTable
    from streambhmm.learn.groups import SampleGroups

    groups = SampleGroups.of(["control", "control", "test", "test"])
    cov = np.array([[50, 0, 50, 50], [50, 50, 50, 50], [50, 50, 50, 0], [0, 0, 50, 50]], float)
    levels = np.array([[0.94, 0, 0.26, 1.00], [0.90, 0.80, 0.10, 0.30], [0.20, 0.30, 0.70, 0], [0, 0, 0.5, 0.5]])
    n = len(cov)
    table = RegionTable("DMR", ["chr1"] * n, np.arange(n) * 1000, np.arange(n) * 1000 + 500, np.full(n, 5),
                        ["loss", "loss", "gain", "gain"], np.ones(n), np.zeros(n), np.zeros(n), levels * cov, cov)
    separation = table.separation(groups)
    # test1 (1.00) lies above control1 (0.94): -0.06; 0.80 - 0.30; 0.70 - 0.30; no control read
    assert np.allclose(separation[:3], [-0.06, 0.50, 0.40]) and np.isnan(separation[3])
    assert np.allclose(table.differences(groups)[:3], [0.63 - 0.94, 0.20 - 0.85, 0.70 - 0.25])
    # more groups: the highest group's lowest replicate minus the lowest group's highest
    three = SampleGroups.of(["a", "a", "b", "c"])
    table.direction = ["differs"] * n
    assert np.allclose(table.separation(three)[:2], [1.00 - 0.26, 0.80 - 0.10])
    assert np.isnan(table.separation(three)[3])  # group a has no read there


def test_the_tables_columns_have_distinct_names():
    """One sample per group, named like its group (modkit's normal and tumour): the samples'
    level columns must not repeat the groups' (pandas and R would rename them)."""
    from streambhmm.app.dmr import level_columns

    assert level_columns(["normal", "tumour"], ["normal", "tumour"]) == [
        "level_normal", "level_tumour", "level_sample_normal", "level_sample_tumour"]
    assert level_columns(["B", "x"], ["B", "sample_B"]) == ["level_B", "level_x", "level_sample_B",
                                                             "level_sample_sample_B"]
    assert level_columns(["H1", "IMR90"], ["H1_r1", "IMR90_r1"]) == [
        "level_H1", "level_IMR90", "level_H1_r1", "level_IMR90_r1"]


def test_domains_that_meet_through_their_pieces_become_one():
    """A domain's ends move out to the focal candidates that are its pieces; where that carries
    it into another domain of its direction, the two are one domain (the union of their
    windows: bins and posteriors added, the best lfdr; its counts are then read over the
    interval), never two overlapping lines."""
    from streambhmm.app.dmr import RegionTable, _merge_overlapping, _pieces_of_domains

    def table(kind, starts, ends, directions, lfdr, methylated, coverage):
        n = len(starts)
        return RegionTable(kind, ["chr1"] * n, np.array(starts), np.array(ends), np.full(n, 10), directions,
                           np.linspace(0.8, 0.9, n), np.array(lfdr, float), np.array(lfdr, float) / 2,
                           np.array(methylated, float), np.array(coverage, float))

    # loss domains at 0-50 kb and 60-100 kb, a gain domain beside them, a loss one far away
    domains = table("domain", [0, 60_000, 100_000, 500_000], [50_000, 100_000, 120_000, 550_000],
                    ["loss", "loss", "gain", "loss"], [0.01, 0.001, 0.02, 0.03],
                    [[5, 50], [6, 60], [70, 7], [8, 80]], [[10, 100], [10, 100], [100, 10], [10, 100]])
    # a loss piece past the first domain's end, overlapping the second; a gain piece of the gain one
    candidates = table("DMR", [48_000, 105_000], [62_000, 106_000], ["loss", "gain"], [0.1, 0.1],
                       [[1, 2], [3, 4]], [[5, 5], [5, 5]])
    assert _pieces_of_domains(candidates, domains).tolist() == [True, True]
    assert domains.end[0] == 62_000 > domains.start[1]  # the first now overlaps the second
    merged = _merge_overlapping(domains)
    rows = sorted(zip(merged.start.tolist(), merged.end.tolist(), merged.direction))
    assert rows == [(0, 100_000, "loss"), (100_000, 120_000, "gain"), (500_000, 550_000, "loss")]
    both = merged.start.tolist().index(0)
    assert merged.n_bins[both] == 20 and merged.lfdr[both] == 0.001 and merged.qvalue[both] == 0.0005
    assert np.isclose(merged.posterior[both], (domains.posterior[0] + domains.posterior[1]) / 2)
    assert _merge_overlapping(merged) is merged  # nothing left to merge


@pytest.mark.slow  # a whole dmr run
def test_a_design_without_replicates_is_told(tmp_path):
    """One sample per group: the differences found are between the samples, and the user is
    told so; with a replicate in a group, not."""
    for replicates in ((1, 1), (1, 2)):
        directory = tmp_path / f"{replicates[1]}"
        directory.mkdir()
        store, sheet, _ = simulated_store(directory, replicates, n_dmrs=5, domain=False, seed=13)
        result = run("dmr", store.path.url, "--groups", sheet, "--output", directory / "dmr.bed", "-q")
        assert result.exit_code == 0, result.output
        told = "warning: every group has one sample" in result.stderr
        assert told == (replicates == (1, 1))


def test_em_progress_counts_on_across_the_restarts_after_bic(monkeypatch):
    """A helper's trial saw "EM: 5 of at most 30" after BIC had removed states: the restart's
    iterations counted from 0 again, out of the first fit's cap. They now count on, out of the
    cap of all of them."""
    from types import SimpleNamespace

    from streambhmm.distributed import dmr

    settings = dmr.DmrSettings(em_iter=12)
    lengths = iter([12, 3, 4])  # the first fit's iterations, then each restart's

    def fake_em(store, model, client, samples, n_iter, tol, report, check):
        n = next(lengths)
        for iteration in range(n + 1):  # E-step 0, then one per iteration
            report(iteration, -float(iteration))
        return SimpleNamespace(history=list(range(n + 1)), stats=None)

    kept = iter([np.array([0, 1]), np.array([0]), np.array([0])])
    monkeypatch.setattr(dmr, "fit_store_em", fake_em)
    monkeypatch.setattr(dmr, "supported_states", lambda stats, hmm: next(kept))
    monkeypatch.setattr(dmr, "restricted", lambda hmm, keep: SimpleNamespace(n_components=keep.size))
    seen = []
    dmr.fit_on_store(None, [], SimpleNamespace(n_components=3), None, settings, report=lambda i, ll: seen.append(i))
    assert seen == list(range(13)) + list(range(12, 16)) + list(range(15, 20))
    assert max(seen) <= settings.most_iterations == 12 + dmr.PRUNING_ROUNDS * 4

