"""`hmr` and `pmd` on a simulated methylome with planted HMRs and PMDs: they find them, and
refuse with a reason where the data hold none."""

import fcntl
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import xarray as xr
import pytest
from click.testing import CliRunner
from scipy import stats

from streambhmm.app.cli import main
from streambhmm.app.modelio import read_model
from streambhmm.io.storage import FAULT_ENV
from streambhmm.io.store import open_store
from streambhmm.testing import write_store
from streambhmm.learn.domains import HYPO_MASS, hypomethylated, partially_methylated, unmethylated_share
from streambhmm.moments.sums import compute_moments

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster

N_BINS = 40_000  # 4 Mb of 100 bp bins per chromosome


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def beta_binomial(rng, coverage, level, dispersion):
    scale = (1 - dispersion) / dispersion
    return rng.binomial(coverage, rng.beta(level * scale, (1 - level) * scale))


def planted(seed: int, hmrs: bool = True, pmds: bool = True, truncated: bool = False, pmd_level: float = 0.5,
            background: float = 0.85):
    """Two chromosomes: a methylated background (``background``, 0.85) with PMDs (``pmd_level``,
    0.5; 300-500 kb) and HMRs (0.03, 1-3 kb, CpG-rich: more reads) both inside and outside them; 70% of the bins
    covered. Returns the store's chromosomes and the planted (start, end) bp per kind.
    ``truncated``: a bin's reads only if one is methylated (files listing methylcytosines only)."""
    rng = np.random.default_rng(seed)
    chromosomes, truth = {}, {"hmr": {}, "pmd": {}}
    for chrom in ("chr1", "chr2"):
        level = np.full(N_BINS, background)
        dispersion = np.full(N_BINS, 0.05)
        coverage = rng.poisson(15, N_BINS) * (rng.random(N_BINS) < 0.7)
        truth["pmd"][chrom], truth["hmr"][chrom] = [], []
        if pmds:
            for start in (4_000, 15_000, 27_000):
                end = start + int(rng.integers(3_000, 5_000))
                level[start:end], dispersion[start:end] = pmd_level, 0.15
                truth["pmd"][chrom].append((start * 100, end * 100))
        if hmrs:
            for start in np.sort(rng.choice(np.arange(100, N_BINS - 100, 400), 50, replace=False)):
                end = start + int(rng.integers(10, 30))
                level[start:end], dispersion[start:end] = 0.03, 0.05
                coverage[start:end] = rng.poisson(40, end - start)
                truth["hmr"][chrom].append((start * 100, end * 100))
        methylated = beta_binomial(rng, coverage, level, dispersion)
        if truncated:
            coverage = np.where(methylated > 0, coverage, 0)
        bins = np.flatnonzero(coverage)
        chromosomes[chrom] = (bins, methylated[bins, None], coverage[bins, None])
    return chromosomes, truth


def read_bed(path):
    out = {}
    for line in path.read_text().splitlines()[1:]:
        chrom, start, end = line.split("\t")[:3]
        out.setdefault(chrom, []).append((int(start), int(end)))
    return out


def mask(intervals: dict, chrom: str) -> np.ndarray:
    out = np.zeros(N_BINS * 100 + 1, bool)
    for start, end in intervals.get(chrom, []):
        out[start:end] = True
    return out


def overlap(found: dict, truth: dict) -> tuple[float, float]:
    """(share of the planted bases found, share of the found bases planted)."""
    hit = planted_bp = found_bp = 0
    for chrom in set(found) | set(truth):
        a, b = mask(found, chrom), mask(truth, chrom)
        hit, planted_bp, found_bp = hit + (a & b).sum(), planted_bp + b.sum(), found_bp + a.sum()
    return hit / max(planted_bp, 1), hit / max(found_bp, 1)


@pytest.fixture(scope="module")
def methylome(tmp_path_factory):
    path = tmp_path_factory.mktemp("calls") / "planted.zarr"
    chromosomes, truth = planted(0)
    write_store(path, chromosomes, ["S"], chunk_size=15_000)
    return path, truth


def test_hmr_finds_the_planted_hmrs_inside_and_outside_pmds(methylome, tmp_path):
    store, truth = methylome
    r = run("hmr", store, "-o", tmp_path / "hmr.bed", "-q")
    assert r.exit_code == 0, r.output
    assert re.search(r"hmr.bed: [0-9,]+ HMRs", r.output)
    recall, precision = overlap(read_bed(tmp_path / "hmr.bed"), truth["hmr"])
    assert recall > 0.8 and precision > 0.9, (recall, precision)
    # the PMDs (0.5, broad) are background: their HMRs are found, the rest of them is not
    found = read_bed(tmp_path / "hmr.bed")
    for chrom in truth["pmd"]:
        in_pmds = mask(found, chrom) & mask(truth["pmd"], chrom)
        assert (in_pmds & ~mask(truth["hmr"], chrom)).sum() < 0.1 * in_pmds.sum() + 1000
    table = (tmp_path / "hmr.tsv").read_text().splitlines()
    assert table[0].split("\t") == ["chrom", "start", "end", "name", "n_bins", "length", "score", "level_S",
                                    "reads_S"]
    assert all(float(row.split("\t")[-2]) < 0.2 for row in table[1:])
    # a region's level and reads are those of every read in its BED interval, as a user recounting it finds
    for row in table[1:]:
        chrom, start, end = row.split("\t")[:3]
        inside = xr.open_zarr(store, group=chrom).sel(position=slice(int(start), int(end) - 1))
        level = inside.methylated.values[:, 0].sum() / inside.coverage.values[:, 0].sum()
        assert abs(level - float(row.split("\t")[-2])) < 1e-4
        assert int(row.split("\t")[-1]) == inside.coverage.values[:, 0].sum()


def test_pmd_sums_the_bins_and_finds_the_planted_pmds(methylome, tmp_path):
    store, truth = methylome
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 0, r.output
    # -q hides progress, not results: the states and the summary on standard output
    assert re.match(r"states \(\* the PMD states\): 0\.\d\d \(overdispersion", r.stdout)
    assert "on 5000 bp bins" in r.stdout and not r.stderr
    # the steps are progress: on standard error
    r = run("pmd", store, "-o", tmp_path / "pmd.bed")
    assert "the regions: a posterior pass over the counts" in r.stderr and "the regions" not in r.stdout
    recall, precision = overlap(read_bed(tmp_path / "pmd.bed"), truth["pmd"])
    assert recall > 0.9 and precision > 0.9, (recall, precision)
    assert not list(tmp_path.glob(".pmd.bed.*")), "the coarse store went with the call"


def summed(chromosomes: dict, factor: int = 50) -> dict:
    """The store's chromosomes with their bins summed ``factor`` at a time (5 kb bins)."""
    out = {}
    for chrom, (bins, meth, cov) in chromosomes.items():
        coarse, first = np.unique(bins // factor, return_index=True)
        out[chrom] = (coarse, np.add.reduceat(meth, first, axis=0), np.add.reduceat(cov, first, axis=0))
    return out


def test_pmd_takes_moments_of_these_counts_at_its_bins_and_no_others(methylome, tmp_path):
    """pmd sums the store's bins, so the moments it may reuse are another store's (an ingest at
    5 kb, chunked otherwise): they are taken when that store holds the same reads, and refused
    when it holds other reads or is gone (a helper's audit: moments of another chromosome were
    taken, and PMDs fitted on it written)."""
    store, _ = methylome
    assert run("pmd", store, "-o", tmp_path / "plain.bed", "-q").exit_code == 0
    # the moments of the store's own bins: refused with the two ways out (a new user's trial)
    assert run("moments", store, "-o", tmp_path / "fine.mom", "-q").exit_code == 0
    r = run("pmd", store, "--moments", tmp_path / "fine.mom", "-o", tmp_path / "fine.bed", "-q")
    assert r.exit_code == 1 and "needs 5000 bp bins: leave out --moments (pmd sums the bins itself), or give those " \
        "of the calls ingested at --bin-size 5000" in r.output, r.output
    for name, seed in (("same", 0), ("other", 1)):
        write_store(tmp_path / f"{name}.zarr", summed(planted(seed)[0]), ["S"], bin_size=5000, chunk_size=70)
        assert run("moments", tmp_path / f"{name}.zarr", "-o", tmp_path / f"{name}.mom", "-q").exit_code == 0
    # the counts store the moments were computed from is read too: no output goes into it
    before = (tmp_path / "same.zarr" / "zarr.json").read_bytes()
    r = run("pmd", store, "--moments", tmp_path / "same.mom", "-o", tmp_path / "same.zarr" / "zarr.json", "-q")
    assert r.exit_code == 1 and f"is inside {tmp_path / 'same.zarr'}, which this command reads" in r.output, r.output
    assert (tmp_path / "same.zarr" / "zarr.json").read_bytes() == before
    r = run("pmd", store, "--moments", tmp_path / "same.mom", "-o", tmp_path / "same.bed", "-q")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "same.bed").read_text() == (tmp_path / "plain.bed").read_text().replace("plain", "same")
    r = run("pmd", store, "--moments", tmp_path / "other.mom", "-o", tmp_path / "other.bed", "-q")
    assert r.exit_code == 1 and "whose reads differ from" in r.output, r.output
    # the same reads in other bins (a coordinate shifted): the same totals, other moments
    shifted = {chrom: (bins + 1, meth, cov) for chrom, (bins, meth, cov) in summed(planted(0)[0]).items()}
    write_store(tmp_path / "shifted.zarr", shifted, ["S"], bin_size=5000, chunk_size=70)
    assert run("moments", tmp_path / "shifted.zarr", "-o", tmp_path / "shifted.mom", "-q").exit_code == 0
    r = run("pmd", store, "--moments", tmp_path / "shifted.mom", "-o", tmp_path / "other.bed", "-q")
    assert r.exit_code == 1 and "whose reads differ from" in r.output, r.output
    shutil.rmtree(tmp_path / "same.zarr")
    r = run("pmd", store, "--moments", tmp_path / "same.mom", "-o", tmp_path / "gone.bed", "-q")
    assert r.exit_code == 1 and "which is not there to check it against" in r.output, r.output
    assert not (tmp_path / "other.bed").exists() and not (tmp_path / "gone.bed").exists()


def test_pmd_leaves_out_the_chromosomes_too_short_to_hold_a_pmd(tmp_path):
    """An assembly's contigs of less than 50 kb can hold no PMD; summing them cost a file each
    (3,010 contigs: 17 of pmd's 29 s) and their bins, chrM's thousands of reads deep, pulled
    on the fit. They are left out, said so, and the calls are those without them, also from a
    moment store of 5 kb bins that holds them."""
    chromosomes, truth = planted(0)
    rng = np.random.default_rng(3)
    contigs = {}
    for k in range(12):  # 20-45 kb of partially methylated bins: PMD-like, but shorter than any PMD
        n = int(rng.integers(200, 450))
        bins = np.arange(n)
        coverage = rng.poisson(15, (n, 1)) + 1
        contigs[f"chrUn_{k}"] = (bins, rng.binomial(coverage, 0.5), coverage)
    coverage = rng.poisson(15, (499, 1)) + 1  # data to 49.9 kb: 50 kb in 5 kb bins, where a PMD could not end
    contigs["chrUn_edge"] = (np.arange(499), rng.binomial(coverage, 0.5), coverage)
    coverage = rng.poisson(5000, (165, 1))
    contigs["chrM"] = (np.arange(165), rng.binomial(coverage, 0.01), coverage)
    write_store(tmp_path / "plain.zarr", chromosomes, ["S"], chunk_size=15_000)
    write_store(tmp_path / "contigs.zarr", {**chromosomes, **contigs}, ["S"], chunk_size=15_000)
    assert run("pmd", tmp_path / "plain.zarr", "-o", tmp_path / "plain.bed", "-q").exit_code == 0
    r = run("pmd", tmp_path / "contigs.zarr", "-o", tmp_path / "contigs.bed", "-q", "--save-model",
            tmp_path / "model.json")
    assert r.exit_code == 0, r.output
    assert ("note: 14 chromosomes with data over less than 50,000 bp, the shortest PMD, are left out of the fit and "
            "the calls: chrM, chrUn_0, chrUn_1 and 11 more") in r.stderr, r.stderr
    assert (tmp_path / "contigs.bed").read_text() == (tmp_path / "plain.bed").read_text().replace("plain", "contigs")
    assert json.loads((tmp_path / "model.json").read_text())["chromosomes"] == ["chr1", "chr2"]
    # from moments of 5 kb bins that hold the contigs too: the same calls
    write_store(tmp_path / "coarse.zarr", summed({**chromosomes, **contigs}), ["S"], bin_size=5000, chunk_size=70)
    assert run("moments", tmp_path / "coarse.zarr", "-o", tmp_path / "coarse.mom", "-q").exit_code == 0
    r = run("pmd", tmp_path / "contigs.zarr", "--moments", tmp_path / "coarse.mom", "-o", tmp_path / "mom.bed", "-q")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "mom.bed").read_text().splitlines()[1:] == (tmp_path / "plain.bed").read_text().splitlines()[1:]
    # moments of the contigs alone: not those of the chromosomes the call reads
    write_store(tmp_path / "short.zarr", summed(contigs), ["S"], bin_size=5000, chunk_size=70)
    assert run("moments", tmp_path / "short.zarr", "-o", tmp_path / "short.mom", "-q").exit_code == 0
    r = run("pmd", tmp_path / "contigs.zarr", "--moments", tmp_path / "short.mom", "-o", tmp_path / "short.bed", "-q")
    assert r.exit_code == 1 and "whose reads differ from" in r.output, r.output
    # and on a store of 5 kb bins, summed by no one
    r = run("pmd", tmp_path / "coarse.zarr", "--moments", tmp_path / "coarse.mom", "-o", tmp_path / "own.bed", "-q")
    # (chrUn_edge's data there end at 50 kb: a PMD could fill it)
    assert r.exit_code == 0 and "13 chromosomes with data over less than 50,000 bp" in r.stderr, r.output
    recall, precision = overlap(read_bed(tmp_path / "own.bed"), truth["pmd"])
    assert recall > 0.9 and precision > 0.9, (recall, precision)
    # the same chromosomes left out, whatever the call's bins (they were rounded up to them)
    r = run("pmd", tmp_path / "contigs.zarr", "--bin-size", 10_000, "-o", tmp_path / "wide.bed", "-q")
    assert r.exit_code == 0 and "note: 14 chromosomes with data over less than 50,000 bp" in r.stderr, r.output


def test_pmd_on_samples_with_reads_on_short_chromosomes_only(tmp_path):
    """Helpers 86 and 88: a sample whose reads all lie on chromosomes too short for a PMD had a
    garbled refusal ("these data hold 0 triples ... the 0 chromosomes"), or, called with others,
    was fitted levels no data support and then refused as if the samples covered no chromosome
    together ("U on ;"); --chrom-sizes had to list the chromosomes left out, and its shorter
    length did not count; chrM, with reads of one sample, had a second note, that no region is
    called there as the other has none."""
    chromosomes, truth = planted(0)
    rng = np.random.default_rng(4)
    store = {chrom: (bins, np.hstack([m, m, 0 * m]), np.hstack([v, v, 0 * v]))  # U: no reads there
             for chrom, (bins, m, v) in chromosomes.items()}
    coverage = rng.poisson(3000, (165, 2))
    store["chrM"] = (np.arange(165), np.hstack([np.zeros((165, 1), int), rng.binomial(coverage, 0.01)]),
                     np.hstack([np.zeros((165, 1), int), coverage]))  # T and U: S has none there
    coverage = rng.poisson(15, (500, 1)) + 1  # data to 50,000 bp, on a contig of 49,950 (the sizes below)
    edge = rng.binomial(coverage, 0.5)
    store["chrUn_edge"] = (np.arange(500), np.hstack([edge, edge, 0 * edge]), np.hstack([coverage] * 2 + [0 * coverage]))
    write_store(tmp_path / "s.zarr", store, ["S", "T", "U"], chunk_size=15_000)
    sizes = tmp_path / "chrom.sizes"
    sizes.write_text("chr1\t4000000\nchr2\t4000000\nchrUn_edge\t49950\n")  # no chrM: the call leaves it out
    r = run("pmd", tmp_path / "s.zarr", "--samples", "S,T", "--chrom-sizes", sizes, "-o", tmp_path / "st.bed", "-q")
    assert r.exit_code == 0, r.output
    notes = [line for line in r.stderr.splitlines() if line.startswith("note:")]
    assert notes == ["note: 2 chromosomes with data over less than 50,000 bp, the shortest PMD, are left out of the "
                     "fit and the calls: chrM, chrUn_edge"], r.stderr
    recall, precision = overlap(read_bed(tmp_path / "st.bed"), truth["pmd"])
    assert recall > 0.9 and precision > 0.9, (recall, precision)
    # a length the data pass is refused, listed for a chromosome left out or not
    (tmp_path / "other.sizes").write_text(sizes.read_text() + "chrM\t100\n")
    r = run("pmd", tmp_path / "s.zarr", "--chrom-sizes", tmp_path / "other.sizes", "-o", tmp_path / "o.bed", "-q")
    assert r.exit_code == 1 and "gives chrM 100 bp" in r.output and not (tmp_path / "o.bed").exists(), r.output
    # S has no reads on chrM (another's chromosome, or one excluded on a rerun): nothing to say of it
    r = run("pmd", tmp_path / "s.zarr", "--samples", "S", "-o", tmp_path / "s.bed", "-q")
    assert r.exit_code == 0 and "note:" not in r.stderr, r.output
    why = "U has reads only on chromosomes whose data end before 50,000 bp, the shortest PMD: chrM."
    r = run("pmd", tmp_path / "s.zarr", "--samples", "U", "-o", tmp_path / "u.bed", "-q")
    assert r.exit_code == 1, r.output
    assert f"no partially methylated domains in {tmp_path / 's.zarr'} (U): {why}" in " ".join(r.output.split())
    # called with the others (all the store's samples), before the fit
    r = run("pmd", tmp_path / "s.zarr", "-o", tmp_path / "u.bed", "-q")
    assert r.exit_code == 1, r.output
    assert f"(S,T,U): {why} Call S,T with --samples." in " ".join(r.output.split()), r.output
    assert not (tmp_path / "u.bed").exists()


def test_hmr_takes_the_moments_its_own_pass_computes(tmp_path):
    """Three samples: the call's own pass computes moments of the projected feature (auto), and
    --moments takes a moment store of those (the same calls) and refuses the Beta-map one,
    which would fit another model (a helper's audit: it was the other way round)."""
    chromosomes, _ = planted(5)
    tripled = {c: (bins, np.tile(m, 3), np.tile(v, 3)) for c, (bins, m, v) in chromosomes.items()}
    store = write_store(tmp_path / "three.zarr", tripled, ["A", "B", "C"]).path.url
    assert run("hmr", store, "-o", tmp_path / "own.bed", "-q").exit_code == 0
    assert run("moments", store, "-o", tmp_path / "auto.mom", "-q").exit_code == 0
    r = run("hmr", store, "--moments", tmp_path / "auto.mom", "-o", tmp_path / "again.bed", "-q")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "again.bed").read_text() == (tmp_path / "own.bed").read_text().replace("own", "again")
    assert run("moments", store, "--feature", "beta", "-o", tmp_path / "beta.mom", "-q").exit_code == 0
    r = run("hmr", store, "--moments", tmp_path / "beta.mom", "-o", tmp_path / "beta.bed", "-q")
    assert r.exit_code == 1 and "holds Beta-map moments of 3 sample(s); `hmr` fits moments of the 32-dimensional " \
        "projected feature" in r.output, r.output


@pytest.mark.parametrize("background", [0.15, 0.3])  # every state hypomethylated; or one low state besides them
def test_hmr_refuses_a_genome_without_a_methylated_background(tmp_path, background):
    """No state methylated (a genome without CG methylation, as Arabidopsis met1-3's): a helper
    found `hmr` calling the whole excerpt four "HMRs" of 250-420 kb; pmd refused the same."""
    chromosomes, _ = planted(4, pmds=False, background=background)
    store = write_store(tmp_path / "flat.zarr", chromosomes, ["S"]).path.url
    r = run("hmr", store, "-o", tmp_path / "hmr.bed", "-q")
    assert r.exit_code == 1 and "no methylated background to set regions against" in r.output, r.output
    assert not (tmp_path / "hmr.bed").exists()


def test_pmd_finds_pmds_at_any_depth_against_a_methylated_background(tmp_path):
    # a cancer genome's deepest PMDs average 0.1 (MCF7's): their length, not their level, tells
    # them from HMRs, and the HMRs planted beside them are not called PMDs
    chromosomes, truth = planted(3, pmd_level=0.1)
    store = write_store(tmp_path / "deep.zarr", chromosomes, ["S"], chunk_size=15_000).path
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 0, r.output
    recall, precision = overlap(read_bed(tmp_path / "pmd.bed"), truth["pmd"])
    assert recall > 0.9 and precision > 0.9, (recall, precision)
    # no methylated background (a genome without CG methylation): nothing to set domains against
    chromosomes, _ = planted(4, background=0.1, pmd_level=0.4)
    store = write_store(tmp_path / "unmethylated.zarr", chromosomes, ["S"], chunk_size=15_000).path
    r = run("pmd", store, "-o", tmp_path / "none.bed", "-q")
    assert r.exit_code == 1 and "no methylated background" in r.output, r.output
    assert "and so none to call" not in r.output  # its states are all below 0.7: not a genome without PMDs
    # said as a reader sees it: no state is methylated (not "every state is partially methylated")
    assert "no fitted state is methylated (a level of 0.7 or more" in r.output, r.output
    assert not (tmp_path / "none.bed").exists()


def test_a_domain_cut_by_the_data_end_is_kept_only_if_it_is_long_enough(tmp_path):
    """The reads of chr1 end 37.3 kb into its second PMD, those of chr2 60 kb into it: pmd's
    5 kb bins reach past both ends. chr1's is then no PMD (47.3 kb with the 10 kb before the
    planted start that pmd calls too; a new user's trial found one of 47,300 bp written),
    chr2's ends at the store's last bin."""
    chromosomes, _ = planted(0)
    for chrom, length in (("chr1", 373), ("chr2", 600)):
        bins, meth, cov = chromosomes[chrom]
        last = 15_000 + length - 1  # the second PMD starts at bin 15,000
        kept = bins < last
        chromosomes[chrom] = (np.r_[bins[kept], last], np.vstack([meth[kept], [[10]]]), np.vstack([cov[kept], [[20]]]))
    store = write_store(tmp_path / "cut.zarr", chromosomes, ["S"], chunk_size=15_000).path
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 0, r.output
    found = read_bed(tmp_path / "pmd.bed")
    assert all(end - start >= 50_000 for regions in found.values() for start, end in regions), found
    assert max(end for _, end in found["chr1"]) < 1_000_000, found  # the cut PMD is not there
    assert found["chr2"][-1] == (1_490_000, 1_560_000), found
    rows = (tmp_path / "pmd.tsv").read_text().splitlines()
    assert len(rows) == 1 + sum(map(len, found.values()))
    # with --chrom-sizes a region ends where its chromosome does, inside the last bin (UCSC refuses
    # an end past it; a helper's draft assembly found bedtools slop leaves the BED's thickEnd there)
    st = open_store(store)
    sizes = tmp_path / "chrom.sizes"
    sizes.write_text("".join(f"{chrom}\t{st.n_bins(chrom) * 100 - 40}\n" for chrom in st.chromosomes))
    r = run("pmd", store, "-o", tmp_path / "sized.bed", "--chrom-sizes", sizes, "-q")
    assert r.exit_code == 0, r.output
    line = (tmp_path / "sized.bed").read_text().splitlines()[-1].split("\t")
    assert line[0] == "chr2" and line[1:3] == ["1490000", "1559960"] and line[6:8] == line[1:3], line
    assert (tmp_path / "sized.tsv").read_text().splitlines()[-1].split("\t")[5] == "69960"
    # the same sizes from a pipe, as a shell's <(...) gives them (a helper's audit: "Illegal seek"),
    # and from a FIFO, opened once (opened twice, it waited for a second writer forever)
    read, write = os.pipe()
    os.write(write, sizes.read_bytes())
    os.close(write)
    os.mkfifo(tmp_path / "sizes.fifo")
    lock_free = []

    def feed():  # and see that the store's lock is free meanwhile: a FIFO without a writer held it
        with open(tmp_path / "sizes.fifo", "wb") as fifo:
            lock = os.open(store.parent / f".{store.name}.lock", os.O_RDONLY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                lock_free.append(True)
            except BlockingIOError:
                lock_free.append(False)
            finally:
                os.close(lock)
            fifo.write(sizes.read_bytes())

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    for streamed, name in ((f"/dev/fd/{read}", "piped"), (tmp_path / "sizes.fifo", "fifo"), ("-", "stdin")):
        r = CliRunner().invoke(main, ["pmd", str(store), "-o", str(tmp_path / f"{name}.bed"), "--chrom-sizes",
                                      str(streamed), "-q"], input=sizes.read_bytes())
        assert r.exit_code == 0 and (tmp_path / f"{name}.bed").read_text().splitlines()[1:] == \
            (tmp_path / "sized.bed").read_text().splitlines()[1:], r.output
    os.close(read)
    assert lock_free == [True]
    # sizes of another assembly, the data past their end, are refused before any work
    sizes.write_text("".join(f"{chrom}\t{st.n_bins(chrom) * 100 - 100}\n" for chrom in st.chromosomes))
    for kind in ("hmr", "pmd"):
        r = run(kind, store, "-o", tmp_path / f"{kind}-other.bed", "--chrom-sizes", sizes, "-q")
        assert r.exit_code == 1 and "the sizes are of another assembly than the data's" in r.output, r.output
        assert not (tmp_path / f"{kind}-other.bed").exists()
    # sizes without a chromosome of the store (a spike-in): refused saying what to do
    sizes.write_text(f"chr1\t{10 ** 8}\n")
    r = run("pmd", store, "-o", tmp_path / "spike.bed", "--chrom-sizes", sizes, "-q")
    assert r.exit_code == 1 and "has no 'chr2', which the store has: add a line 'NAME LENGTH' for each" in r.output
    assert "or leave it out of the store (ingest --exclude-chromosomes)" in r.output, r.output
    # a length beyond a bigWig's bound is no concern of a BED (a helper's audit heard of bigWigs)
    sizes.write_text("".join(f"{chrom}\t{10 ** 12}\n" for chrom in st.chromosomes))
    r = run("pmd", store, "-o", tmp_path / "long.bed", "--chrom-sizes", sizes, "-q")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "long.bed").read_bytes().split(b"\n", 1)[1] == (tmp_path / "pmd.bed").read_bytes().split(b"\n", 1)[1]


def test_the_regions_after_em_agree_with_the_one_pass_ones(methylome, tmp_path):
    store, _ = methylome
    for kind in ("hmr", "pmd"):
        assert run(kind, store, "-o", tmp_path / f"{kind}.bed", "-q").exit_code == 0
        r = run(kind, store, "-o", tmp_path / f"{kind}.em.bed", "--polish-em", "200", "-q")
        assert r.exit_code == 0, r.output
        recall, precision = overlap(read_bed(tmp_path / f"{kind}.bed"), read_bed(tmp_path / f"{kind}.em.bed"))
        assert recall > 0.9 and precision > 0.9, (kind, recall, precision)
        assert "EM stopped" not in r.output  # converged within 200
        # EM cut short is said, not handed out as the converged model's regions
        r = run(kind, store, "-o", tmp_path / f"{kind}.em1.bed", "--polish-em", "1", "-q")
        assert r.exit_code == 0 and "note: EM stopped at --polish-em 1 before converging" in r.output, r.output


def test_the_saved_model_is_the_one_the_regions_were_found_with(methylome, tmp_path):
    """--save-model writes the call's model as `fit` writes one: `regions --preset` finds the
    same regions with it, and `pmd`'s records its bins. It is refused before any work where
    the regions or their table go, or inside the store."""
    store, _ = methylome
    r = run("hmr", store, "-o", tmp_path / "hmr.bed", "--save-model", tmp_path / "hmr.json", "-q")
    assert r.exit_code == 0 and f"model written to {tmp_path / 'hmr.json'}" in r.output, r.output
    model = read_model(tmp_path / "hmr.json")
    lowest = int(np.argmin(model.methylation[:, 0]))
    assert model.document["call"] == {"command": "hmr", "target_states": [lowest]} and model.bin_size == 100
    assert model.emission == "betabinomial" and model.method == "refined" and model.n_states == 4
    printed = re.findall(r"(\d\.\d\d) \(overdispersion (\d\.\d+)\)", r.output)
    assert sorted((float(a), float(b)) for a, b in printed) == sorted(
        (round(m, 2), round(d, 3)) for m, d in zip(model.methylation[:, 0], model.dispersion[:, 0]))
    r = run("regions", store, "--model", tmp_path / "hmr.json", "--preset", "hmr", "-o", tmp_path / "again.bed", "-q")
    assert r.exit_code == 0, r.output
    assert read_bed(tmp_path / "again.bed") == read_bed(tmp_path / "hmr.bed")
    # a saved call's targets are kept: a second hypomethylated state (here made so) is not one of them
    document = json.loads((tmp_path / "hmr.json").read_text())
    second = int(np.argsort(model.methylation[:, 0])[1])
    document["methylation"][second], document["dispersion"][second] = [0.06], [0.05]
    for call, targets in ((document["call"], {lowest}), (None, {lowest, second})):
        edited = {**document, "call": call} if call else {k: v for k, v in document.items() if k != "call"}
        (tmp_path / "edited.json").write_text(json.dumps(edited))
        r = run("regions", store, "--model", tmp_path / "edited.json", "--preset", "hmr", "-o", tmp_path / "e.bed")
        named = re.search(r"regions of states (.*), median", r.output)[1].split(", ")
        assert r.exit_code == 0 and set(named) == {model.labels[h] for h in targets}, r.output
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "--save-model", tmp_path / "pmd.json", "--polish-em", "2", "-q")
    assert r.exit_code == 0, r.output
    model = read_model(tmp_path / "pmd.json")
    assert model.bin_size == 5000 and model.method == "refined-em" and model.document["call"]["command"] == "pmd"
    # HMRs and PMDs in colours of their own (each is its model's first state's: both were blue)
    colours = [{line.split("\t")[8] for line in (tmp_path / f"{kind}.bed").read_text().splitlines()[1:]}
               for kind in ("hmr", "pmd")]
    assert len(colours[0]) == len(colours[1]) == 1 and colours[0] != colours[1]
    (tmp_path / "alias").symlink_to(tmp_path)  # the BED's directory by another name: a helper's audit
    for bad, message in ((tmp_path / "x.tsv", "the regions' table is written there; give --save-model another name"),
                         (tmp_path / "x.bed", "the regions (--output) are written there"),
                         (tmp_path / "alias" / "x.bed", "the regions (--output) are written there"),
                         (tmp_path / "alias" / "x.tsv", "the regions' table is written there"),
                         (store / "m.json", f"is inside {store}")):
        r = run("hmr", store, "-o", tmp_path / "x.bed", "--save-model", bad, "-q")
        assert r.exit_code == 1 and message in r.output, r.output
        assert not (tmp_path / "x.bed").exists() and not bad.exists()


def test_a_methylome_without_hmrs_or_pmds_is_refused_with_the_reason(tmp_path):
    chromosomes, _ = planted(1, hmrs=False, pmds=False)
    store = write_store(tmp_path / "flat.zarr", chromosomes, ["S"], chunk_size=15_000).path
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 1 and "no partially methylated domains" in r.output and "and so none to call" in r.output
    assert not (tmp_path / "pmd.bed").exists()
    r = run("hmr", store, "-o", tmp_path / "hmr.bed", "--save-model", tmp_path / "hmr.json", "-q")
    assert r.exit_code == 1 and "no hypomethylated regions" in r.output and "levels" in r.output
    assert not (tmp_path / "hmr.json").exists()  # no model of a call refused
    # an earlier call's regions at the name are left, and the refusal says whose they are
    earlier = 'track name="PMD" description="PMD regions of S (pmd of another.zarr)" itemRgb="On"\nchr1\t0\t60000\tPMD1\n'
    (tmp_path / "pmd.bed").write_text(earlier)
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 1 and f"({tmp_path / 'pmd.bed'}: an earlier run's, left as it was)" in r.output, r.output
    assert (tmp_path / "pmd.bed").read_text() == earlier


def test_no_room_for_pmds_summed_bins_names_the_output_not_the_scratch_store(tmp_path, monkeypatch):
    """A helper's audit: on a full disk pmd's refusal named its scratch coarse.zarr as if it
    were a store of the user's ("the store is unchanged")."""
    from streambhmm.io.store import NoRoomError, writer

    chromosomes, _ = planted(1)
    store = write_store(tmp_path / "s.zarr", chromosomes, ["S"], chunk_size=15_000).path

    def full(store, record, document):
        raise NoRoomError(f"not enough free space to commit sample S into {store}", "not enough free space: 1 MiB "
                                                                                     "to write, and 0.0 MiB are free")

    monkeypatch.setattr(writer, "_check_space", full)
    r = run("pmd", store, "-o", tmp_path / "p.bed", "-q")
    assert r.exit_code == 1 and r.output.startswith(f"Error: {tmp_path / 'p.bed'}: no room in {tmp_path} for the "
                                                    f"5,000 bp bins that pmd sums into a scratch store") \
        and "coarse.zarr" not in r.output and "0.0 MiB are free; nothing was written" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == [".s.zarr.lock", "s.zarr"]  # no scratch directory left


def test_too_few_bins_for_domains_are_refused_with_the_reason(tmp_path):
    # 60 kb of covered 100 bp bins: 12 bins of 5 kb, 10 triples, where 2 states need 40
    rng = np.random.default_rng(3)
    bins = np.arange(600)
    coverage = rng.poisson(15, 600) + 1
    store = write_store(tmp_path / "short.zarr", {"chr1": (bins, rng.binomial(coverage, 0.5)[:, None],
                                                            coverage[:, None])}, ["S"]).path
    r = run("pmd", store, "-o", tmp_path / "pmd.bed", "-q")
    assert r.exit_code == 1 and "no partially methylated domains" in r.output
    assert "too few data" in r.output and "at least 40 triples" in r.output and "hold 10" in r.output
    assert "a PMD spans at least 50 kb" in r.output and "fewer states" not in r.output  # pmd has no --states
    assert not (tmp_path / "pmd.bed").exists()
    # the same bins on 300 contigs of 200 bp: no triple lies within one, which the message says (a
    # helper's draft assembly heard of a sparse assay)
    contigs = {f"ctg_{k}": (np.arange(2), rng.binomial(coverage[2 * k:2 * k + 2], 0.1)[:, None],
                            coverage[2 * k:2 * k + 2, None]) for k in range(300)}
    store = write_store(tmp_path / "contigs.zarr", contigs, ["S"]).path
    r = run("hmr", store, "-o", tmp_path / "hmr.bed", "-q")
    assert r.exit_code == 1 and "hold 0" in r.output and "No chromosome holds 3 bins (the longest holds data over " \
        "200 bp), and a triple lies within one: the 300 chromosomes" in " ".join(r.output.split()), r.output


def test_inputs_without_unmethylated_reads_are_named_as_such(tmp_path):
    chromosomes, _ = planted(2, truncated=True)
    store = write_store(tmp_path / "mc-only.zarr", chromosomes, ["S"], chunk_size=15_000)
    moments = compute_moments(np.concatenate([c[1] for c in chromosomes.values()]),
                              np.concatenate([c[2] for c in chromosomes.values()]))
    assert unmethylated_share(moments)[0] == 0.0
    full, _ = planted(2)
    assert unmethylated_share(compute_moments(np.concatenate([c[1] for c in full.values()]),
                                              np.concatenate([c[2] for c in full.values()])))[0] > 0.01
    r = run("hmr", store.path, "-o", tmp_path / "hmr.bed", "-q")
    if r.exit_code:
        assert "methylated cytosines only" in r.output
    else:
        assert "methylated cytosines only" in r.output  # a warning beside the regions
        assert re.search(r"hmr.bed: [0-9,]+ regions? \(called as HMRs: see the warning\), median", r.output)


def test_files_listing_methylated_cytosines_only_are_refused_hmrs(tmp_path):
    # the ingest counts the rows without a methylated read: none among 3,000 (a dmrseq excerpt of
    # Lister et al.'s mc file) is refused before any work, with the reason and no output
    data = Path(__file__).resolve().parents[1] / "data"
    store = tmp_path / "mc.zarr"
    assert run("ingest", data / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", store, "-q").exit_code == 0
    r = run("hmr", store, "-o", tmp_path / "mc.bed")
    assert r.exit_code == 1 and "the moments" not in r.output  # said before the pass it would waste
    assert "no row of H1's file dmrseq_H1_r1.chr21.tsv.gz (3,000 rows) that has reads is without a methylated " \
           "read: it lists" in r.output
    assert "--samples" not in r.output and not (tmp_path / "mc.bed").exists() and not (tmp_path / "mc.tsv").exists()
    assert run("pmd", store, "-o", tmp_path / "pmd.bed", "-q").exit_code in (0, 1)  # no such check for PMDs
    assert "without a methylated read" not in run("pmd", store, "-o", tmp_path / "pmd.bed", "-q").output
    # `regions --preset hmr` under a model of these counts too; --targets names states, not HMRs
    assert run("fit", store, "--states", "3", "-o", tmp_path / "mc.json", "-q").exit_code == 0
    r = run("regions", store, "--model", tmp_path / "mc.json", "--preset", "hmr", "-o", tmp_path / "preset.bed", "-q")
    assert r.exit_code == 1 and "no row of H1's file dmrseq_H1_r1.chr21.tsv.gz (3,000 rows)" in r.output
    assert not (tmp_path / "preset.bed").exists()
    assert run("regions", store, "--model", tmp_path / "mc.json", "--targets", "0", "-o", tmp_path / "state0.bed",
               "-q").exit_code == 0

    # jointly, the sample with unmethylated rows is the way out; fewer rows than the threshold, or
    # a store whose ingest did not count them, fall back to the bins (a warning)
    chromosomes, _ = planted(2)
    bins, methylated, coverage = chromosomes["chr1"]
    both = {"chr1": (bins, np.hstack([methylated, methylated]), np.hstack([coverage, coverage]))}
    counted = {"A": {"rows": 5_000, "unmethylated_rows": 0}, "B": {"rows": 5_000, "unmethylated_rows": 700}}
    store = write_store(tmp_path / "joint.zarr", both, ["A", "B"], provenance=counted).path
    r = run("hmr", store, "-o", tmp_path / "joint.bed", "-q")
    assert r.exit_code == 1 and "ingested for A (5,000 rows)" in r.output and "call B with --samples" in r.output
    assert run("hmr", store, "--samples", "B", "-o", tmp_path / "b.bed", "-q").exit_code == 0
    # the samples without such files on chromosomes apart: each alone is the way out (jointly
    # they are refused: a helper's trial followed the advice)
    none = np.zeros_like(methylated)
    apart = {"chr1": (bins, np.hstack([methylated, methylated, none]), np.hstack([coverage, coverage, none])),
             "chr2": (bins, np.hstack([methylated, none, methylated]), np.hstack([coverage, none, coverage]))}
    counted["C"] = counted["B"]
    store = write_store(tmp_path / "apart.zarr", apart, ["A", "B", "C"], provenance=counted).path
    r = run("hmr", store, "-o", tmp_path / "apart.bed", "-q")
    assert r.exit_code == 1 and "call B, C each alone with --samples (no chromosome has reads in all of them)" \
        in r.output, r.output
    # a replicate listing methylated cytosines only, summed into a sample with one that lists every CpG
    replicates = {"A": {"rows": 6_000, "unmethylated_rows": 700, "file_rows": [[3_000, 700], [3_000, 0]],
                        "files": [{"path": "/data/A_all.tsv"}, {"path": "/data/A_mc.tsv"}]}}
    store = write_store(tmp_path / "replicates.zarr", {"chr1": chromosomes["chr1"]}, ["A"], provenance=replicates).path
    r = run("hmr", store, "-o", tmp_path / "replicates.bed", "-q")
    assert r.exit_code == 1
    assert "no row of A's file A_mc.tsv (3,000 rows) that has reads is without a methylated read" in r.output
    small = {"A": {"rows": 1_400, "unmethylated_rows": 0, "file_rows": [[700, 0], [700, 0]],
                   "files": [{"path": "/a/r1.tsv"}, {"path": "/b/r1.tsv"}]}}
    store = write_store(tmp_path / "small.zarr", {"chr1": chromosomes["chr1"]}, ["A"], provenance=small).path
    r = run("hmr", store, "-o", tmp_path / "small.bed", "-q")
    assert r.exit_code == 1 and "no row of the files ingested for A (1,400 rows)" in r.output, r.output
    # many samples of such files: the first three are named, and three files of each
    many = {f"S{i}": {"rows": 25_000, "unmethylated_rows": 0, "file_rows": [[5_000, 0]] * 5,
                      "files": [{"path": f"/data/S{i}_r{j}.tsv"} for j in range(5)]} for i in range(5)}
    store = write_store(tmp_path / "many.zarr", {"chr1": (bins, np.repeat(methylated, 5, axis=1),
                                                          np.repeat(coverage, 5, axis=1))},
                        list(many), provenance=many).path
    r = run("hmr", store, "-o", tmp_path / "many.bed", "-q")
    assert r.exit_code == 1 and ("no row of S0's files S0_r0.tsv (5,000 rows); S0_r1.tsv (5,000 rows); S0_r2.tsv "
                                 "(5,000 rows) and 2 more files or of S1's files") in r.output, r.output
    assert "S2_r2.tsv (5,000 rows) and 2 more files or of 2 other samples' files that has reads" in r.output, r.output
    r = run("hmr", store, "-o", tmp_path / "many.bed", "--samples", "S0,S1,S2,S3", "-q")
    assert "or of 1 other sample's files that has reads" in r.output, r.output
    assert "S3_r0" not in r.output and len(r.output) < 1_000, r.output
    few = {"A": {"rows": 999, "unmethylated_rows": 0}}
    store = write_store(tmp_path / "few.zarr", {"chr1": chromosomes["chr1"]}, ["A"], provenance=few).path
    r = run("hmr", store, "-o", tmp_path / "few.bed", "-q")
    assert r.exit_code == 0 and "without a methylated read" not in r.output


def joint_hmrs(tmp_path, counts) -> tuple:
    """(methylated, coverage, chr5's HMRs) of `hmr` on samples A and B, ``counts`` their
    (methylated, coverage) per bin of chr5."""
    meth, cov = np.stack([c[0] for c in counts], axis=1), np.stack([c[1] for c in counts], axis=1)
    bins = np.flatnonzero(cov.sum(axis=1))
    store = write_store(tmp_path / "two.zarr", {"chr5": (bins, meth[bins], cov[bins])}, ["A", "B"]).path
    r = run("hmr", store, "-o", tmp_path / "joint.bed", "-q")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("states (levels of A/B; * the HMR states): ")  # a helper's "0.11/0.09" named nothing
    return meth, cov, read_bed(tmp_path / "joint.bed")["chr5"]


def test_a_joint_hmr_is_hypomethylated_in_every_sample(tmp_path):
    """Both samples have PMDs (0.45) at the same places; A has an island (0.03, 1.5 kb) every
    20 kb, B every other one of those and others of its own. A joint HMR is an island of both:
    not one of A's inside B's PMD, where B's reads average 0.45-0.5 (a helper's audit: 38 of 113
    joint calls were such, below the region's 0.5, inside the joint state's wide levels)."""
    rng = np.random.default_rng(11)
    n_bins = 30_000
    position = np.arange(n_bins) * 100
    islands = {"A": np.arange(10_000, 3_000_000, 20_000),
               "B": np.r_[np.arange(10_000, 3_000_000, 40_000), np.arange(25_000, 3_000_000, 40_000)]}
    pmd = np.zeros(n_bins, bool)
    for start in range(200_000, 3_000_000, 1_000_000):
        pmd |= (position >= start) & (position < start + 300_000)
    counts, island_bins = [], {}
    for sample in "AB":
        level = np.where(pmd, 0.45, 0.85)
        island_bins[sample] = np.zeros(n_bins, bool)
        for start in islands[sample]:
            island_bins[sample] |= (position >= start) & (position < start + 1500)
        level[island_bins[sample]] = 0.03
        coverage = rng.poisson(15 * 3, n_bins)  # three CpGs of 15 reads a bin
        counts.append((rng.binomial(coverage, level), coverage))
    meth, cov, found = joint_hmrs(tmp_path, counts)
    both = island_bins["A"] & island_bins["B"]
    assert all(both[start // 100:end // 100].any() for start, end in found), found
    assert sum(both[start // 100:end // 100].any() for start, end in found) >= 0.9 * len(islands["A"]) / 2
    table = np.genfromtxt(tmp_path / "joint.tsv", names=True, dtype=None, encoding=None, delimiter="\t")
    assert table["level_A"].max() < 0.2 and table["level_B"].max() < 0.2


def test_a_joint_hmr_with_a_sparse_sample_is_hypomethylated_by_that_samples_reads(tmp_path):
    """A at 45 reads a bin, B at 3 (a helper's audit): islands of both (0.03) every 40 kb, and
    A's alone in between, where B is at 0.3. B's few reads leave a bin's level to its fitted
    state, so every one of A's islands was called jointly (B's reads averaging 0.13-0.49 over
    them); a region's pooled reads say it is not an HMR of B. B's 45 reads over an island
    cannot tell 0.2 from 0.3 every time: some islands whose reads fall at 0.2 or below are
    called, a few widened by their shoulders (18 of 75 when written, B's levels 0.13-0.31)."""
    rng = np.random.default_rng(11)
    n_bins = 30_000
    position = np.arange(n_bins) * 100
    starts = np.arange(10_000, 3_000_000, 20_000)
    shared = np.isin(position // 100, [s // 100 + k for s in starts[::2] for k in range(15)])
    a_only = np.isin(position // 100, [s // 100 + k for s in starts[1::2] for k in range(15)])
    counts = []
    for depth, level_there in ((45, 0.03), (3, 0.3)):
        level = np.where(shared, 0.03, np.where(a_only, level_there, 0.85))
        coverage = rng.poisson(depth, n_bins)
        counts.append((beta_binomial(rng, coverage, level, 0.05), coverage))
    meth, cov, found = joint_hmrs(tmp_path, counts)
    assert sum(shared[start // 100:end // 100].any() for start, end in found) == len(starts[::2])
    on_a_only = [(start, end) for start, end in found if a_only[start // 100:end // 100].any()]
    b_levels = [meth[start // 100:end // 100, 1].sum() / cov[start // 100:end // 100, 1].sum()
                for start, end in on_a_only]
    assert len(on_a_only) <= 0.3 * len(starts[1::2]), b_levels
    assert np.median(b_levels) < 0.25 and max(b_levels, default=0) < 0.35, b_levels


@pytest.mark.parametrize("kind", ["hmr", "pmd"])
def test_a_joint_call_on_samples_without_shared_bins_says_so(tmp_path, kind):
    """A on chr1, B on chr2: no region can have reads in both, which the refusal says, in place
    of a note on the biology."""
    chromosomes, _ = planted(3)
    (bins1, meth1, cov1), (bins2, meth2, cov2) = chromosomes["chr1"], chromosomes["chr2"]
    apart = {"chr1": (bins1, np.c_[meth1, 0 * meth1], np.c_[cov1, 0 * cov1]),
             "chr2": (bins2, np.c_[0 * meth2, meth2], np.c_[0 * cov2, cov2])}
    store = write_store(tmp_path / "apart.zarr", apart, ["A", "B"], chunk_size=15_000).path
    r = run(kind, store, "-o", tmp_path / "calls.bed", "--samples", "A,B", "-q")
    assert r.exit_code == 1 and "No bin with reads has reads in every sample (A, B) among the runs" in r.output, r.output
    assert "Call the samples one at a time" in r.output and "A genome without PMDs" not in r.output
    assert not (tmp_path / "calls.bed").exists()
    r = run(kind, store, "-o", tmp_path / "calls.bed", "--samples", "A", "-q")
    assert r.exit_code == 0, r.output
    # three samples: the single-bin histogram is kept per sample, and the store's index says it
    three = {chrom: (bins, np.c_[meth, meth[:, :1]], np.c_[cov, cov[:, :1]])
             for chrom, (bins, meth, cov) in apart.items()}
    store = write_store(tmp_path / "three.zarr", three, ["A", "B", "C"], chunk_size=15_000).path
    r = run(kind, store, "-o", tmp_path / "calls.bed", "-q")
    assert r.exit_code == 1 and ("No chromosome has reads in every sample (A, B, C), and a region needs reads in "
                                 "each of them: A on chr1; B on chr2; C on chr1.") in r.output, r.output
    assert "Call the samples one at a time" in r.output and "A genome without PMDs" not in r.output


@pytest.mark.parametrize("kind", ["hmr", "pmd"])
def test_a_joint_call_names_the_chromosomes_left_out_for_want_of_a_samples_reads(tmp_path, kind):
    """A on chr1 and chr2, B on chr2 only: the joint call's regions are on chr2 alone, and it
    says why chr1 has none (a helper's joint call on such a store named nothing)."""
    chromosomes, _ = planted(3)
    (bins1, meth1, cov1), (bins2, meth2, cov2) = chromosomes["chr1"], chromosomes["chr2"]
    partial = {"chr1": (bins1, np.c_[meth1, 0 * meth1], np.c_[cov1, 0 * cov1]),
               "chr2": (bins2, np.c_[meth2, meth2], np.c_[cov2, cov2])}
    store = write_store(tmp_path / "partial.zarr", partial, ["A", "B"], chunk_size=15_000).path
    r = run(kind, store, "-o", tmp_path / "calls.bed", "--samples", "A,B", "-q")
    assert r.exit_code == 0, r.output
    assert set(read_bed(tmp_path / "calls.bed")) == {"chr2"}
    assert ("note: no region is called on 1 chromosome with reads in some of the samples but not in all, as a "
            "region needs reads in each: chr1 (no reads in B)") in r.output, r.output
    r = run(kind, store, "-o", tmp_path / "calls.bed", "--samples", "A", "-q")
    assert r.exit_code == 0 and "no region is called on" not in r.output, r.output


def test_the_table_beside_the_regions_is_named_after_the_whole_output_unless_it_is_a_bed():
    """calls.hmr and calls.pmd shared calls.tsv, and the second call replaced the first's table."""
    from streambhmm.distributed.regions import regions_table

    assert regions_table("out/calls.bed") == regions_table("out/calls.BED") == Path("out/calls.tsv")
    assert [regions_table(f"calls.{kind}") for kind in ("hmr", "pmd")] == [Path("calls.hmr.tsv"), Path("calls.pmd.tsv")]
    assert regions_table("calls") == Path("calls.tsv")


def test_outputs_that_cannot_hold_the_regions_are_refused_before_any_work(methylome, tmp_path, monkeypatch):
    store, _ = methylome
    monkeypatch.chdir(tmp_path)
    for name, why in (("calls.tsv", "taken for the table"), ("calls.bed.gz", "not compressed"),
                      ("-", "not to standard output")):
        r = run("pmd", store, "-o", name, "-q")
        assert r.exit_code == 1 and why in r.output and "a name ending in .bed" in r.output, r.output
    assert not list(tmp_path.iterdir())
    # pmd's scratch directory (.NAME.scratch-<12 hex>) is the longest temporary name: a name of
    # 234-237 bytes passed the check and crashed on it (a helper's audit)
    r = run("pmd", store, "-o", "y" * 230 + ".bed", "-q")
    assert r.exit_code == 2 and "the file name is 234 bytes; at most 233 fit" in r.output, r.output
    assert not list(tmp_path.iterdir())
    for size, why in ((150, "pmd's bins of 150 bp (--bin-size, 5,000 unless given) are not a multiple of the store's "
                            "bin size (100 bp)"),
                      (10**20 + 1, "pmd's bins of 100,000,000,000,000,000,001 bp (--bin-size) are longer than "
                                   "the longest stretch of the store's chromosomes that has data")):
        r = run("pmd", store, "-o", "calls.bed", "--bin-size", size, "-q")
        assert r.exit_code == 1 and why in r.output, r.output
    assert not list(tmp_path.iterdir())
    coarse = write_store(tmp_path.parent / f"{tmp_path.name}-5kb.zarr", {"chr1": ([0, 1, 2], [[0]] * 3, [[9]] * 3)},
                         ["S"], bin_size=5000).path
    r = run("hmr", coarse, "-o", "calls.bed", "-q")  # an HMR is narrower than one bin
    assert r.exit_code == 1 and "has bins of 5,000 bp, and hmr needs bins of at most 1,000 bp" in r.output, r.output
    assert not list(tmp_path.iterdir())
    # scaffolds shorter than a PMD: refused before the fit (a helper's draft assembly ran it, then heard of RRBS),
    # and before pmd's 5 kb bins are said to be too long for them (no bin size helps)
    bins = np.arange(0, 40, 2)
    scaffolds = write_store(tmp_path.parent / f"{tmp_path.name}-scaffolds.zarr",
                            {f"scaffold_{i}": (bins, [[5]] * bins.size, [[9]] * bins.size) for i in range(3)},
                            ["S"]).path
    r = run("pmd", scaffolds, "-o", "calls.bed", "-q")
    assert r.exit_code == 1 and "no partially methylated domains in" in r.output and "(S): no chromosome has data " \
        "over 50,000 bp, the shortest PMD (the longest stretch, from 0 to its last bin with reads: 3,900 bp)" in \
        " ".join(r.output.split()), r.output
    assert not list(tmp_path.iterdir())
    r = run("pmd", store, "-o", "calls.bed", "--samples", " S ,", "-q")  # names are trimmed
    assert r.exit_code == 0, r.output
    r = run("pmd", store, "-o", tmp_path / "other.bed", "--samples", " , ", "-q")
    assert r.exit_code == 2 and "names nothing" in r.output


def test_an_output_that_is_an_ingested_file_is_refused(tmp_path):
    """The file a sample was ingested from, named as the output (a BED of calls written back
    onto a BED of counts): refused, and the file kept."""
    calls = tmp_path / "calls.bed"
    calls.write_text("".join(f"chr1\t{p}\t{p + 1}\t{p % 7}\t{3 + p % 5}\n" for p in range(100, 90_000, 37)))
    r = run("ingest", calls, "--columns", "chrom=1,pos=2,meth=4,unmeth=5", "--zero-based", "--sample", "S",
            "--store", tmp_path / "s.zarr", "-q")
    assert r.exit_code == 0, r.output
    before = calls.read_bytes()
    for kind in ("hmr", "pmd"):
        r = run(kind, tmp_path / "s.zarr", "-o", calls, "-q")
        said = "a file the store's samples were ingested from, and the output would replace it"
        assert r.exit_code == 1 and said in r.output, r.output
    assert calls.read_bytes() == before
    calls.unlink()  # gone, it is no longer anyone's to lose
    r = run("pmd", tmp_path / "s.zarr", "-o", calls, "-q")
    assert "ingested from" not in r.output, r.output


def test_state_rules():
    levels = np.array([[0.1, 0.15], [0.1, 0.5], [0.5, 0.6], [0.9, 0.9]])
    assert hypomethylated(levels).tolist() == [True, False, False, False]
    # the Beta of the bins' levels must put as much mass below 0.5 as at the caps (0.2, 0.2): 92%
    assert stats.beta.cdf(0.5, 0.2 * 4, 0.8 * 4) == pytest.approx(HYPO_MASS) and HYPO_MASS > 0.92
    dispersed = np.array([[0.3, 0.1]] + [[0.1, 0.1]] * 3)  # state 0's first sample: level 0.1, 95% below 0.5
    assert stats.beta.cdf(0.5, 0.1 * (1 / 0.3 - 1), 0.9 * (1 / 0.3 - 1)) > 0.95
    assert hypomethylated(levels, dispersed).tolist() == [True, False, False, False]
    at_cap = np.array([[0.2, 0.05], [0.01, 0.01], [0.2, 0.2], [0.2, 0.01]])
    # level 0.2 at overdispersion 0.3 has 87% below 0.5; level 0.01 at 0.55 has 98%
    assert hypomethylated(at_cap, np.array([[0.3, 0.1], [0.55, 0.55], [0.2, 0.2], [0.201, 0.1]])).tolist() == \
        [False, True, True, False]
    assert partially_methylated(levels).tolist() == [True, True, True, False]  # any level below 0.7 on 5 kb bins
    assert partially_methylated(levels, bin_size=100).tolist() == [False, True, True, False]


def test_a_held_state_at_its_cap_gives_way_to_a_free_hypomethylated_one():
    """hmr's held state fitted at its level cap stands in for bins the data put above the
    definition; where a free state is hypomethylated too, the regions are that state's alone
    (levels and overdispersions of M3D's K562 RRBS, whose two replicates' fits put those bins
    in the held state at 0.20 and in a free one at 0.26)."""
    from streambhmm.app.calls import _free_targets_first
    from streambhmm.distributed.regions import preset_rule
    from streambhmm.learn.domains import HMR_MODEL, pinned_states

    def targets(levels, dispersions):
        levels, dispersions = np.array(levels)[:, None], np.array(dispersions)[:, None]
        rule = preset_rule("hmr", levels, dispersions, 100)
        return rule.targets, _free_targets_first(rule, pinned_states(HMR_MODEL, levels)).targets

    assert targets([0.2, 0.022, 0.70, 0.93], [0.141, 0.007, 0.119, 0.023]) == ((0, 1), (1,))
    assert targets([0.026, 0.258, 0.76, 0.94], [0.011, 0.162, 0.100, 0.019]) == ((0,), (0,))
    # held at its cap with no free state to give way to (a methylome without unmethylated CpGs): kept
    assert targets([0.2, 0.48, 0.79, 0.94], [0.001, 0.100, 0.076, 0.020]) == ((0,), (0,))
    # held below its cap beside a free hypomethylated state: both are the data's
    assert targets([0.15, 0.01, 0.7, 0.9], [0.1, 0.26, 0.1, 0.02]) == ((0, 1), (0, 1))
    # at its cap in one sample of two
    assert pinned_states(HMR_MODEL, np.array([[0.05, 0.2], [0.01, 0.02], [0.7, 0.7], [0.9, 0.9]])).tolist() == \
        [True, False, False, False]


def hangs_up_by_default():
    """For a command's process: SIGHUP as on a terminal. Under nohup (SIGHUP ignored, which a
    child inherits) a command rightly ignores a hang-up, and these tests would see none."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGHUP"])
def test_a_terminated_call_leaves_nothing(methylome, tmp_path, stop):
    """SIGTERM (a scheduler's time limit) and SIGHUP (a closed terminal or ssh session) unwind
    as Ctrl-C does: pmd's scratch store goes (SIGHUP left it behind, a helper's audit)."""
    stop = getattr(signal, stop)
    store, _ = methylome
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    log = (tmp_path / "log.txt").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "streambhmm", "pmd", str(store), "-o", str(out / "r.bed"), "-q"],
                            env=env, stdout=log, stderr=log, preexec_fn=hangs_up_by_default)
    try:
        while not list(out.glob(".r.bed.scratch-*")) and proc.poll() is None:
            time.sleep(0.01)
        assert proc.poll() is None, "the call ended before its scratch store appeared"
        proc.send_signal(stop)
        assert proc.wait(timeout=120) == 128 + stop, (tmp_path / "log.txt").read_text()
    finally:
        proc.kill()
        log.close()
    assert not list(out.iterdir())


def test_a_stop_while_pmd_commits_its_summed_store_stops_it(methylome, tmp_path):
    """Ctrl-C and SIGTERM are held off while a sample is committed; pmd commits its summed
    store half way through, and a stop there was dropped: it ran on to the end, exit 0 (found
    by interrupting it at a range of delays). Now it is delivered once the commit is done."""
    store, _ = methylome
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), FAULT_ENV: "commit:term"}
    proc = subprocess.run([sys.executable, "-m", "streambhmm", "pmd", str(store), "-o", str(out / "r.bed")],
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout + proc.stderr
    assert "summing 100 bp bins" in proc.stderr and "fitting" not in proc.stderr, proc.stderr
    assert not list(out.iterdir())


def test_ctrl_c_on_a_cluster_of_worker_processes_prints_no_traceback(methylome, tmp_path):
    """Ctrl-C during the moment pass on the embedded cluster of worker processes: distributed
    logs tracebacks as the run stops (a future cancelled before it exists, a worker's heartbeat
    cut off by its closing) and errors (a gather of results already forgotten);
    streambhmm.distributed.stopping_logs filters them out."""
    store, _ = methylome
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "STREAMBHMM_IN_PROCESS_MAX": "0"}
    log_path = tmp_path / "log.txt"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streambhmm", "hmr", str(store), "-o", str(tmp_path / "r.bed"),
                                 "--polish-em", "1000"], env=env, stdout=log, stderr=log,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            while "the moments" not in log_path.read_text() and proc.poll() is None:
                time.sleep(0.01)
            time.sleep(1.0)  # into the pass: the workers are running its tasks
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        finally:
            proc.kill()
    text = log_path.read_text()
    assert proc.returncode == 128 + signal.SIGINT and "Aborted!" in text, text
    assert "Traceback" not in text and "ERROR" not in text, text
    assert not list(tmp_path.glob("r.*"))


def test_a_closed_terminal_stops_a_cluster_of_worker_processes_without_a_traceback(methylome, tmp_path):
    """A closed terminal's SIGHUP reaches the whole process group: the workers died at once,
    and multiprocessing's resource tracker was relaunched, each worker printing KeyError
    tracebacks (a helper's audit). The workers and the tracker ignore it; the command stops."""
    store, _ = methylome
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "STREAMBHMM_IN_PROCESS_MAX": "0"}
    log_path = tmp_path / "log.txt"
    with log_path.open("w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streambhmm", "hmr", str(store), "-o", str(tmp_path / "r.bed"),
                                 "--polish-em", "1000"], env=env, stdout=log, stderr=log, start_new_session=True,
                                preexec_fn=hangs_up_by_default)
        try:
            while "the moments" not in log_path.read_text() and proc.poll() is None:
                time.sleep(0.01)
            time.sleep(1.0)  # into the pass: the workers are running its tasks
            os.killpg(proc.pid, signal.SIGHUP)
            proc.wait(timeout=120)
        finally:
            proc.kill()
    time.sleep(1.0)  # what the group's others print as they end
    text = log_path.read_text()
    assert proc.returncode == 128 + signal.SIGHUP, text
    assert "Traceback" not in text and "ERROR" not in text and "resource_tracker" not in text, text
    assert not list(tmp_path.glob("r.*"))


def test_the_stopping_filters_drop_only_what_they_name():
    from distributed.comm.core import CommClosedError
    from streambhmm.distributed import stopping_logs

    def record(message, error):
        return logging.LogRecord("x", logging.ERROR, __file__, 1, message, (), (type(error), error, None))

    cancel = "Exception in callback functools.partial(<function sync.<locals>.cancel at 0x7f1acc727e20>)"
    assert not stopping_logs._interrupted_sync(record(cancel, NameError("future")))
    assert stopping_logs._interrupted_sync(record(cancel, ValueError("x")))
    assert stopping_logs._interrupted_sync(record("Exception in callback other", NameError("future")))
    heartbeat = "Failed to communicate with scheduler during heartbeat."
    assert not stopping_logs._closing_heartbeat(record(heartbeat, CommClosedError("ConnectionPool closing.")))
    assert not stopping_logs._closing_heartbeat(record(heartbeat, CommClosedError("in <TLS (closed)>: Stream is closed")))
    assert stopping_logs._closing_heartbeat(record(heartbeat, OSError("Timed out trying to connect")))

    def gather(states):  # as distributed's scheduler logs it
        return logging.LogRecord("distributed.scheduler", logging.ERROR, __file__, 1, "Couldn't gather keys: %s",
                                 (states,), None)

    assert not stopping_logs._forgotten_gather(gather({"add_moments-5d1f": "forgotten"}))
    assert stopping_logs._forgotten_gather(gather({"add_moments-5d1f": "forgotten", "x": "memory"}))
    assert stopping_logs._forgotten_gather(gather({}))

    def get_data(who, error):  # as a worker logs a failed send (logger.exception)
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, "failed during get data with %s -> %s",
                                 ("tls://127.0.0.1:33283", who), (type(error), error, None))

    closed = CommClosedError("in <TLS (closed) local=tls://127.0.0.1:33283>: Stream is closed")
    assert not stopping_logs._client_gone(get_data(None, closed))  # the client, gone with Ctrl-C
    assert stopping_logs._client_gone(get_data("tls://127.0.0.1:40001", closed))  # another worker: kept
    assert stopping_logs._client_gone(get_data(None, OSError("Timed out")))

    def gather_dep(error):  # a worker's fetch of an input from another worker (logger.exception)
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1,
                                 "Worker stream died during communication: %s", ("tls://127.0.0.1:34923",),
                                 (type(error), error, None))

    assert not stopping_logs._peer_gone(gather_dep(closed))  # its peer closed: distributed fetches it again
    assert stopping_logs._peer_gone(gather_dep(OSError("Timed out trying to connect")))


def test_ctrl_c_while_the_command_imports_ends_it_without_a_traceback(monkeypatch, capsys):
    import builtins

    from streambhmm.app import console

    real_import = builtins.__import__

    def interrupted(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "cli" and level == 1:
            raise KeyboardInterrupt
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    stops = list(console.STOPS)
    try:
        with pytest.raises(SystemExit) as stopped:
            console.run()
    finally:
        for signum, handler in before.items():  # run() installs its handlers
            signal.signal(signum, handler)
        console.STOPS[:] = stops
    assert stopped.value.code == 128 + signal.SIGINT and capsys.readouterr().err == "Aborted!\n"


@pytest.mark.parametrize("wrapped", [SystemError("CPUDispatcher(<function f>) returned a result with an exception set"),
                                     RuntimeError("Error calling __set_name__ on '_ProhibitReuse' instance")])
@pytest.mark.parametrize("stop, status", [(KeyboardInterrupt(), 128 + signal.SIGINT),
                                          (SystemExit(128 + signal.SIGTERM), 128 + signal.SIGTERM)])
def test_a_signal_wrapped_by_what_it_interrupted_stops_the_command(monkeypatch, tmp_path, stop, status, wrapped):
    """Ctrl-C during `dmr`'s EM ended in a traceback and exit 1: the signal came while numba's
    dispatcher ran Python, which raised SystemError("... returned a result with an exception
    set") from the KeyboardInterrupt (SIGTERM's SystemExit likewise); during a lazy import,
    class creation wraps it in a RuntimeError (a helper's audit, under load)."""
    from streambhmm.app.cli import main

    def dispatcher(*args, **kwargs):
        try:
            raise stop
        except BaseException as exc:
            raise wrapped from exc

    monkeypatch.setattr(sys.modules["streambhmm.app.cli.store"], "store_session", dispatcher)
    r = CliRunner().invoke(main, ["info", str(tmp_path)])
    assert r.exit_code == status and "Traceback" not in r.output, r.output


def _interrupted():
    raise KeyboardInterrupt


def test_the_worker_processes_a_command_spawns_leave_ctrl_c_to_it(tmp_path):
    """A Ctrl-C in a terminal reaches the whole process group: an embedded cluster's workers
    printed tracebacks when it came while they started, and batch could not stop their
    ingests in order. A process spawned from the console script (multiprocessing runs it
    there as __mp_main__) ignores SIGINT; the command itself does not."""
    script = tmp_path / "script.py"
    script.write_text("import multiprocessing, signal\n"
                      "signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever the test's shell ignores\n"
                      "import streambhmm.app.console\n"
                      "def handler():\n"
                      "    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN\n"
                      "if __name__ == '__main__':\n"
                      "    with multiprocessing.get_context('spawn').Pool(1) as pool:\n"
                      "        print(handler(), pool.apply(handler))\n")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]  # the command's process, the worker


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_stop_after_the_command_ended_keeps_its_exit_status(stop):
    """A Ctrl-C that landed as the interpreter shut down, after `pmd` had written its regions,
    made the exit status -2 (a pipeline took the run for failed)."""
    script = ("import os, signal, time\n"
              "from streambhmm.app.console import exit_on_late_stop\n"
              "exit_on_late_stop(3)\n"
              f"os.kill(os.getpid(), signal.{stop})\n"
              "time.sleep(30)\n")
    assert subprocess.run([sys.executable, "-c", script]).returncode == 3


def test_an_ended_command_leaves_its_objects_to_the_operating_system():
    """The interpreter's shutdown ran full garbage collections over every object a command's
    imports made (0.3-0.5 s a process): once the command has ended they are frozen, and the
    exit handlers still run."""
    script = ("import atexit, gc, sys\n"
              "from streambhmm.app import console\n"
              "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 1000))\n"
              "sys.argv = ['streambhmm', '--version']\n"
              "console.run()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "frozen True", done.stdout + done.stderr


def test_a_stop_that_a_callback_swallows_is_delivered_again(monkeypatch):
    """Ctrl-C during `dmr` once landed in llvmlite's ctypes callback while numba compiled:
    Python printed "Exception ignored on calling ctypes callback function" and the command ran
    on. The console's unraisable hook delivers it to the main thread again."""
    import ctypes

    from streambhmm.app import console

    assert threading.current_thread() is threading.main_thread()  # where the signal goes
    monkeypatch.setattr(sys, "unraisablehook", console._stop_swallowed(lambda args: None))
    callback = ctypes.CFUNCTYPE(None)(_interrupted)
    with pytest.raises(KeyboardInterrupt):
        callback()  # returns: the callback's KeyboardInterrupt went to the hook
        for _ in range(400):
            time.sleep(0.05)


def test_a_path_that_is_no_store_is_said_so_first(tmp_path):
    """A first hour's mistakes: a directory that is no store (the output inside it was refused
    as an input's part, which hid the cause), a chromosome's group of a store given for the
    store, a directory given as --moments (said to be no counts store), and `--store`, which
    only `ingest` takes."""
    store = tmp_path / "s.zarr"
    write_store(store, {"chr1": (np.array([10, 20]), np.array([[1], [2]]), np.array([[4], [4]]))}, ["S"])
    (tmp_path / "plain").mkdir()
    other = tmp_path / "other.zarr"  # a counts store given as --moments: the way out is not its path
    write_store(other, {"chr1": (np.array([10, 20]), np.array([[1], [2]]), np.array([[4], [4]]))}, ["S"])
    for kind in ("hmr", "pmd"):
        r = run(kind, tmp_path / "plain", "-o", tmp_path / "plain" / "x.bed", "-q")
        assert r.exit_code == 1 and f"{tmp_path / 'plain'}: no counts store here" in r.output, r.output
        r = run(kind, store / "chr1", "-o", tmp_path / "x.bed", "-q")
        assert r.exit_code == 1 and f"is a part of the counts store {store}, not a store; pass {store}" in r.output, \
            r.output
        r = run(kind, store, "--moments", tmp_path / "plain", "-o", tmp_path / "x.bed", "-q")
        assert r.exit_code == 1 and f"{tmp_path / 'plain'}: no moment store here" in r.output, r.output
        assert f"moments compute {store} --output {tmp_path / 'plain'}` makes one" in r.output
        r = run(kind, store, "--moments", store, "-o", tmp_path / "x.bed", "-q")  # the way out is another path
        assert r.exit_code == 1 and "it is the counts store; leave out --moments" in r.output, r.output
        assert f"moments compute {store} --output MOMENTS.zarr` makes one" in r.output
        r = run(kind, store, "--moments", other, "-o", tmp_path / "x.bed", "-q")
        assert r.exit_code == 1 and f"{other}: no moment store here (no manifest.json): it is a counts store; give " \
            f"the path of one: `streambhmm moments compute {store} --output MOMENTS.zarr` makes one" in r.output, \
            r.output
        (tmp_path / "garbage.zarr").mkdir()  # another tool's directory, or a damaged one: not "a counts store"
        (tmp_path / "garbage.zarr" / "zarr.json").write_text("garbage")
        r = run(kind, store, "--moments", tmp_path / "garbage.zarr", "-o", tmp_path / "x.bed", "-q")
        assert r.exit_code == 1 and "(no manifest.json); give the path of one" in r.output, r.output
        shutil.rmtree(tmp_path / "garbage.zarr")
        (tmp_path / "x.tsv").mkdir()  # where the table goes: said so, not "give a file name"
        r = run(kind, store, "-o", tmp_path / "x.bed", "-q")
        assert r.exit_code == 1 and f"{tmp_path / 'x.tsv'}: is a directory, where the output named after " \
            f"{tmp_path / 'x.bed'} goes" in r.output, r.output
        (tmp_path / "x.tsv").rmdir()
        r = run(kind, "--store", store, "-o", tmp_path / "x.bed")
        assert r.exit_code == 2 and f"the store is the first argument of `main {kind}`" in r.output, r.output
        assert "Did you mean" not in r.output
    r = run("info", tmp_path / "plain")
    assert r.exit_code == 1 and "no counts store here" in r.output, r.output
    # nor is a new store made inside one (a link to a part of it is seen through)
    (tmp_path / "link").symlink_to(store / "chr1")
    for args in (("ingest", tmp_path / "x.tsv", "--sample", "T", "--store", store / "new.zarr"),
                 ("moments", "compute", store, "--output", store / "m")):
        r = run(*args)
        assert r.exit_code == 2 and f"is inside the counts store {store}; make the new one beside it" in r.output, \
            r.output
    r = run("info", tmp_path / "link")
    assert r.exit_code == 1 and f"is a part of the counts store {store}, not a store" in r.output, r.output
    (tmp_path / "link").unlink()
    # readers leave no lock file beside a path that is no store (`info` left .plain.lock)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.zarr.lock", ".s.zarr.lock", "other.zarr", "plain",
                                                           "s.zarr"]
    assert sorted(p.name for p in store.iterdir()) == ["chr1", "zarr.json"]
    assert not any((tmp_path / "plain").iterdir())


def _hmr_outcome(samples, regions_by_chromosome):
    """A call's outcome as hmr_notes reads it: {chromosome: [(start, end, n_bins)]}."""
    from types import SimpleNamespace

    from streambhmm.distributed.regions import Regions

    found = {}
    for chrom, rows in regions_by_chromosome.items():
        start, end, n_bins = (np.array(column, np.int64).reshape(-1) for column in zip(*rows)) if rows else \
            (np.zeros(0, np.int64),) * 3
        found[chrom] = Regions(start, end, n_bins, np.zeros(len(end)), np.zeros((len(end), len(samples))),
                               np.zeros((len(end), len(samples))), np.zeros(len(end)))
    lengths = np.concatenate([r.end - r.start for r in found.values()])
    return SimpleNamespace(samples=samples, n=lengths.size, lengths=lengths, found=found)


def test_hmrs_over_most_of_the_bases_with_reads_are_said_to_be_the_background(tmp_path):
    """A helper's Arabidopsis trial: 192 HMRs over 0.80 of DMRcaller's 1 Mb of Chr3, without a
    word; in a methylome mostly unmethylated they are its background more than focal regions."""
    from streambhmm.app.calls import hmr_notes
    from streambhmm.testing import write_store

    bins = np.arange(0, 1000, 2)  # 500 bins with reads, 100 bp each, every other bin of 100 kb
    counts = np.full((bins.size, 2), 10)
    store = write_store(tmp_path / "s.zarr", {"chr1": (bins, counts // 2, counts)}, ["A", "B"])

    def outcome(ends):  # each region over every other bin, as the reads are: n_bins, its bins with reads
        return _hmr_outcome(["A", "B"], {"chr1": [(0, end, end // 200) for end in ends]})

    assert hmr_notes(store, outcome([50_000])) == []  # half: focal enough
    assert hmr_notes(store, outcome([])) == []
    said, = hmr_notes(store, outcome([80_000]))
    assert said.startswith("the HMRs hold 80% of the bins with reads: most of this methylome is hypomethylated")


def test_a_chromosome_that_is_one_hmr_is_said_so(tmp_path):
    """A genome as users have it (helper 81): chrM and a lambda spike-in are each one HMR, as
    DNMTools calls them, without a word; the note names them and how to leave them out."""
    from streambhmm.app.calls import hmr_notes
    from streambhmm.testing import write_store

    def chromosome(n_bins):
        counts = np.full((n_bins, 1), 10)
        return np.arange(n_bins), counts // 2, counts

    store = write_store(tmp_path / "s.zarr", {"chr1": chromosome(1000), "chrM": chromosome(166),
                                              "lambda": chromosome(485), "chrUn": chromosome(12)}, ["A"])
    said, = hmr_notes(store, _hmr_outcome(["A"], {
        "chr1": [(0, 2000, 20), (50_000, 51_000, 10)], "chrM": [(0, 16_600, 166)], "lambda": [(0, 48_500, 480)],
        "chrUn": [(0, 1200, 12)]}))  # 12 bins with reads: too few to say
    assert said.startswith("chrM (16,600 bp), lambda (48,500 bp) are each one HMR over all their bins with reads (90% or "
                           "more): "
                           "an unmethylated genome")
    assert "--exclude-chromosomes" in said
    # a region over part of a chromosome, or two regions, make no note
    assert hmr_notes(store, _hmr_outcome(["A"], {"chrM": [(0, 8000, 80)], "lambda": [(0, 20_000, 200),
                                                                                     (20_500, 48_500, 280)]})) == []


def test_a_joint_calls_region_over_one_samples_island_is_not_a_whole_chromosome(tmp_path):
    """Helper 86: in a joint call, B covers only an island of chrX that A covers whole; the
    region over the island held all of B's bins with reads, and the note called chrX one HMR.
    The region must hold 90% of every sample's bins with reads."""
    from streambhmm.app.calls import hmr_notes
    from streambhmm.testing import write_store

    bins = np.arange(500)
    a = np.full((500, 1), 10)
    b = np.where((bins >= 100) & (bins < 130), 10, 0)[:, None]
    store = write_store(tmp_path / "s.zarr", {"chrX": (bins, np.hstack([a, b]) // 2, np.hstack([a, b]))}, ["A", "B"])
    assert hmr_notes(store, _hmr_outcome(["A", "B"], {"chrX": [(10_000, 13_000, 30)]})) == []
    said = hmr_notes(store, _hmr_outcome(["A", "B"], {"chrX": [(0, 50_000, 460)]}))[-1]
    assert said.startswith("chrX (50,000 bp) is one HMR over all its bins with reads (90% or more)")
    # A covers 0-15 kb, B 14-30 kb: a region over A's part holds 90% of each one's bins with reads
    a = np.where(bins < 150, 10, 0)[:, None]
    b = np.where((bins >= 140) & (bins < 300), 10, 0)[:, None]
    apart = write_store(tmp_path / "apart.zarr", {"chrY": (bins[:300], np.hstack([a, b])[:300] // 2,
                                                           np.hstack([a, b])[:300])}, ["A", "B"])
    said = hmr_notes(apart, _hmr_outcome(["A", "B"], {"chrY": [(0, 16_000, 160)]}))
    assert not any("one HMR" in note for note in said), said


def test_pmd_on_narrow_bins_says_which_state_it_left_to_hmr():
    """On bins under 5 kb a state below 0.7 that is hypomethylated is not a PMD state
    (domains.partially_methylated): the refusal names it and the rule, and does not claim
    that no state lies below 0.7."""
    from types import SimpleNamespace

    from streambhmm.app.calls import _left_to_hmr

    hmm = SimpleNamespace(methylation_=np.array([[0.15], [0.81]]), dispersion=np.array([[0.01], [0.05]]))
    assert _left_to_hmr("pmd", hmm, 1000) == "0.150"
    assert _left_to_hmr("pmd", hmm, 5000) == ""  # on 5 kb bins it is a PMD state
    assert _left_to_hmr("hmr", hmm, 100) == ""
    dispersed = SimpleNamespace(methylation_=hmm.methylation_, dispersion=np.array([[0.4], [0.05]]))
    assert _left_to_hmr("pmd", dispersed, 1000) == ""  # too spread to be hypomethylated: a PMD state
    assert partially_methylated(dispersed.methylation_, dispersed.dispersion, 1000).tolist() == [True, False]


def test_a_joint_refusal_says_that_a_sample_alone_may_hold_regions(tmp_path):
    """A wild type beside a mutant without CG methylation (as Arabidopsis met1-3): jointly no
    state is methylated in every sample, so no HMR; the wild type alone has them, and the
    refusal says to call it alone (a helper's trial: the joint refusal gave no such hint)."""
    chromosomes, _ = planted(4, pmds=False)
    rng = np.random.default_rng(4)
    both = {chrom: (bins, np.hstack([meth, rng.binomial(cov, 0.01)]), np.hstack([cov, cov]))
            for chrom, (bins, meth, cov) in chromosomes.items()}
    store = write_store(tmp_path / "pair.zarr", both, ["WT", "mutant"]).path.url
    r = run("hmr", store, "-o", tmp_path / "joint.bed", "-q")
    assert r.exit_code == 1 and "no methylated background" in r.output, r.output
    assert "a sample alone may hold regions of its own: call it with --samples NAME" in r.output, r.output
    r = run("hmr", store, "--samples", "WT", "-o", tmp_path / "wt.bed", "-q")
    assert r.exit_code == 0 and len(read_bed(tmp_path / "wt.bed")) > 0, r.output
