import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from streambhmm.app.cli import main
from streambhmm.app.modelio import MODEL_KEYS

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def test_demo_recovers_states():
    result = run("demo", "--bins-per-chromosome", "30000", "--seed", "1")
    assert result.exit_code == 0, result.output
    assert "sample_A.bismark.cov.gz" in result.output and "ingested sample_B" in result.output
    err = float(re.search(r"methylation error \(sum \|p - p_hat\|\): ([0-9.]+)", result.output).group(1))
    assert err < 0.05


def test_ingest_info_fit_end_to_end(tmp_path, dask_clients):
    store = tmp_path / "counts.zarr"
    r = run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", DATA / "dmrseq_H1_r2.chr21.tsv.gz",
            "--sample", "H1", "--store", store, "--chunk-size", "300")
    assert r.exit_code == 0, r.output
    assert "sample H1: 6,000 rows from 2 tsv file(s)" in r.output
    r = run("ingest", DATA / "dmrseq_IMR90_r1.chr21.tsv.gz", "--sample", "IMR90", "--store", store)
    assert r.exit_code == 0, r.output
    r = run("ingest", DATA / "dmrseq_IMR90_r1.chr21.tsv.gz", "--sample", "IMR90", "--store", store)
    assert "store unchanged" in r.output

    r = run("info", store)
    assert r.exit_code == 0, r.output
    assert "chr21" in r.output and "sample H1: 2 tsv file(s), context CG, 6,000 rows (0 without a methylated read)" \
        in r.output
    assert ("hmr refuses it: no row of H1's files dmrseq_H1_r1.chr21.tsv.gz (3,000 rows); dmrseq_H1_r2.chr21.tsv.gz "
            "(3,000 rows) that has reads is without a methylated read: they list") in r.output
    assert re.search(r"IMR90: [0-9,]+ of [0-9,]+ bins covered", r.output)

    model = tmp_path / "model.json"
    scheduler = dask_clients[1].scheduler.address
    r = run("fit", store, "--states", "2", "--seed", "3", "--output", model, "--scheduler", scheduler, "--quiet")
    assert r.exit_code == 0, r.output
    assert re.search(r"state\s+H1\s+IMR90\s+weight\s+stay", r.output)
    doc = json.loads(model.read_text())
    assert tuple(doc) == (*MODEL_KEYS, "labels", "bin_size", "sample_settings", "emission", "dispersion",
                          "moment_loss")
    assert doc["bin_size"] == 100 and doc["sample_settings"]["H1"] == {"context": "CG", "merge_strands": False}
    assert doc["format"] == "streambhmm-model" and doc["version"] == 1 and doc["method"] == "refined"
    assert doc["samples"] == ["H1", "IMR90"] and doc["chromosomes"] == ["chr21"] and doc["n_states"] == 2
    assert doc["feature"] == {"kind": "beta", "n_bins": 30}
    np.testing.assert_allclose(np.sum(doc["transmat"], axis=1), 1.0)
    assert np.array(doc["methylation"]).shape == (2, 2) and doc["n_triples"] > 0

    # one sample, through the environment variable instead of --scheduler
    r = run("fit", store, "--states", "2", "--samples", "IMR90", "--output", tmp_path / "m1.json", "-q",
            env={"STREAMBHMM_SCHEDULER": scheduler})
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "m1.json").read_text())["samples"] == ["IMR90"]


def test_info_describes_a_moment_store(tmp_path):
    """`info` on a moment store (it said "not a streambhmm counts store"): its feature, samples,
    source and triples per chromosome, whose total is the moments' own count."""
    from streambhmm.moments.momentstore import load_total

    for args in (("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", tmp_path / "a.zarr", "-q"),
                 ("moments", "compute", tmp_path / "a.zarr", "--output", tmp_path / "a.m.zarr", "-q")):
        r = run(*args)
        assert r.exit_code == 0, (args, r.output)
    r = run("info", tmp_path / "a.m.zarr")
    moments, _ = load_total(tmp_path / "a.m.zarr")
    assert r.exit_code == 0 and "moment store v3, complete" in r.output, r.output
    assert "Beta map of 30 bins per sample" in r.output and "samples: H1" in r.output
    assert re.search(r"; blocks of [0-9,]+ bp$", r.output, re.M), r.output  # bp, as --block-size: it said bins
    assert f"from the counts store {tmp_path / 'a.zarr'} (100 bp bins)" in r.output
    assert re.search(rf"^total\s+1\s+{moments.n_triples:,}$", r.output, re.M), r.output
    # merged with the moments of another chromosome: the same rows, named chr22
    rows = gzip.decompress((DATA / "dmrseq_H1_r2.chr21.tsv.gz").read_bytes()).replace(b"chr21\t", b"chr22\t")
    (tmp_path / "chr22.tsv").write_bytes(rows)
    for args in (("ingest", tmp_path / "chr22.tsv", "--sample", "H1", "--store", tmp_path / "c.zarr", "-q"),
                 ("moments", "-q", tmp_path / "c.zarr", "--output", tmp_path / "c.m.zarr"),  # options first
                 ("moments", "merge", tmp_path / "a.m.zarr", tmp_path / "c.m.zarr", "--output", tmp_path / "m.zarr")):
        r = run(*args)
        assert r.exit_code == 0, (args, r.output)
    r = run("moments", "--help")  # compute's options (a new user's trial: it listed none)
    assert r.exit_code == 0 and "--output" in r.output and "moments merge" in r.output, r.output
    r = run("info", tmp_path / "m.zarr")
    assert r.exit_code == 0 and f"merged from {tmp_path / 'a.m.zarr'}, {tmp_path / 'c.m.zarr'}" in r.output, r.output
    assert re.search(r"^chr22\s+1\s", r.output, re.M) and re.search(r"^total\s+2\s", r.output, re.M), r.output


@pytest.mark.parametrize("body,fragment", [
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t5\n", ":3: malformed tsv line: expected 5 fields, found 4: 'chr1\\t20\\t+\\t5'"),
    ("chr1\t10\t+\t9\t5\n", ":2: methylated count 9 exceeds coverage 5"),
    ("chr1\t10\t+\t-2\t5\n", ":2: negative count"),
    ("chr1\t30\t+\t1\t5\nchr1\t20\t+\t1\t5\nchr1\t30\t+\t1\t5\n", ":4: repeats the chromosome, position and strand "
                                                                   "of line 2"),
    ("", ": the file is empty"),
    # pyarrow reads 0x10 as 16 (a helper's audit stored such counts); int() refuses 4,301 digits
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t0x10\t0x20\n", ":3: malformed tsv line: field 4 ('0x10'): hexadecimal"),
    ("chr1\t0x10\t+\t1\t5\n", ":2: malformed tsv line: field 2 ('0x10'): hexadecimal"),
    ("chr1\t10\t+\t1\t" + "9" * 4301 + "\n", ":2: malformed tsv line: field 5 ('999"),
])
def test_bad_input_exits_nonzero_and_keeps_the_store(tmp_path, body, fragment):
    store = tmp_path / "counts.zarr"
    assert run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", store).exit_code == 0
    before = sorted((p.relative_to(store), p.stat().st_size) for p in store.rglob("*"))
    bad = tmp_path / "bad.tsv"
    bad.write_text(("chrom\tpos\tstrand\tmc\tcov\n" + body) if body else "")
    r = run("ingest", bad, "--sample", "X", "--store", store)
    assert r.exit_code != 0
    assert f"{bad}{fragment}" in r.output
    assert sorted((p.relative_to(store), p.stat().st_size) for p in store.rglob("*")) == before


def test_unknown_and_mixed_formats_exit_nonzero(tmp_path):
    odd = tmp_path / "odd.txt"
    odd.write_text("hello there\n")
    r = run("ingest", odd, "--sample", "X", "--store", tmp_path / "s.zarr")
    assert r.exit_code != 0 and f"{odd}:1: unknown format" in r.output and "'hello there'" in r.output
    r = run("ingest", DATA / "bsseq_bismark.cov.gz", DATA / "ALLCools_Cell01.allc.tsv.gz",
            "--sample", "X", "--store", tmp_path / "s.zarr")
    assert r.exit_code != 0 and "mixed formats" in r.output
    assert not (tmp_path / "s.zarr").exists()


def test_fit_refuses_unsupported_states(tmp_path, dask_clients):
    store = tmp_path / "counts.zarr"
    run("ingest", DATA / "dmrseq_IMR90_r1.chr21.tsv.gz", "--sample", "IMR90", "--store", store)
    scheduler = dask_clients[0].scheduler.address
    r = run("fit", store, "--states", "8", "--method", "ftd", "--output", tmp_path / "m.json", "-q",
            "--scheduler", scheduler)
    assert r.exit_code != 0 and "do not support 8 states" in r.output
    r = run("fit", store, "--states", "25", "--output", tmp_path / "m.json", "-q", "--scheduler", scheduler)
    assert r.exit_code != 0 and "too few data for 25 states: 1,560 triples of bins for 625 parameters" in r.output
    assert not (tmp_path / "m.json").exists()


def test_ci_runs_the_readme_commands_in_order():
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    commands = [re.search(rf"^{name}='(.+)'$", ci, re.M).group(1) for name in ("INSTALL_COMMAND", "TEST_COMMAND")]
    assert all(command in readme for command in commands)
    assert readme.index(commands[0]) < readme.index(commands[1])
    assert ci.index('bash -c "$INSTALL_COMMAND"') < ci.index('bash -c "$TEST_COMMAND"')


@pytest.fixture
def two_sample_store(tmp_path, four_state_model):
    from ..moments.test_pipeline import synthetic_store

    return synthetic_store(tmp_path / "counts.zarr", four_state_model, [3000, 1500], chunk_size=700)


@pytest.mark.parametrize("method", ["em", "ftd-em"])
def test_fit_em_methods_write_loglik_and_score_agrees(tmp_path, dask_clients, two_sample_store, method):
    from streambhmm.learn.hmm import BinomialHMM
    from streambhmm.testing import load_counts

    scheduler = dask_clients[1].scheduler.address
    model = tmp_path / f"{method}.json"
    r = run("fit", two_sample_store.path, "-m", "4", "--method", method, "--em-iter", "8", "--seed", "2",
            "--output", model, "--scheduler", scheduler)
    assert r.exit_code == 0, r.output
    assert re.search(r"EM (converged|stopped at --em-iter 8) .*; log-likelihood", r.output)
    assert re.search(r"differential \(levels differ across samples by more than 0.3\): (none|states? \d)", r.output)
    doc = json.loads(model.read_text())
    assert tuple(doc) == (*MODEL_KEYS, "labels", "bin_size", "sample_settings", "emission", "dispersion", "loglik",
                          "loglik_history")
    assert doc["method"] == method and doc["emission"] == "betabinomial"  # the EM methods' default
    history = doc["loglik_history"]
    # fit's EM keeps startprob the stationary distribution of transmat: not the start term's
    # maximizer, so near convergence the likelihood may dip by a hair (here by 2e-4 in 1.3e4)
    assert 2 <= len(history) <= 9 and doc["loglik"] == history[-1]
    assert np.all(np.diff(history) >= -1e-7 * np.abs(history[1:]))
    assert (doc["n_triples"] > 0) == (method == "ftd-em")

    r = run("score", two_sample_store.path, "--model", model, "--scheduler", scheduler)
    assert r.exit_code == 0, r.output
    total = float(re.search(r"^total\s+(\S+)", r.output, re.M).group(1))
    hmm = BinomialHMM(4, emission="betabinomial")
    hmm.startprob_, hmm.transmat_, hmm.methylation_, hmm.dispersion_ = (
        np.array(doc[k]) for k in ("startprob", "transmat", "methylation", "dispersion"))
    assert total == pytest.approx(hmm.score(*load_counts(two_sample_store)), rel=1e-9)
    # the history's last entry is the log-likelihood of the written parameters
    assert total == pytest.approx(doc["loglik"], rel=1e-9)
    r = run("score", two_sample_store.path, "--model", model, "--chromosomes", "chr2", "--scheduler", scheduler)
    assert re.search(r"^chr2\s", r.output, re.M) and not re.search(r"^chr1\s", r.output, re.M)


def test_decode_cli_writes_bed_and_posteriors(tmp_path, dask_clients, two_sample_store):
    import xarray as xr

    scheduler = dask_clients[0].scheduler.address
    model = tmp_path / "m.json"
    assert run("fit", two_sample_store.path, "-m", "4", "-o", model, "--scheduler", scheduler, "-q").exit_code == 0
    r = run("decode", two_sample_store.path, "--model", model, "--output", tmp_path / "seg.bed", "--posteriors",
            "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    n_segments = int(re.search(r"seg.bed: ([0-9,]+) segments", r.output).group(1).replace(",", ""))
    lines = (tmp_path / "seg.bed").read_text().splitlines()
    assert lines[0] == 'track name="m states" description="states of A,B" itemRgb="On"'
    assert len(lines) == n_segments + 1
    document = json.loads(model.read_text())
    colours = {}
    for line in lines[1:]:  # BED9: chrom start end name score strand thickStart thickEnd itemRgb
        chrom, start, end, name, score, strand, thick_start, thick_end, rgb = line.split("\t")
        assert chrom in ("chr1", "chr2") and int(start) < int(end) and 0 <= int(score) <= 1000
        assert name in document["labels"] and strand == "+" and (thick_start, thick_end) == (start, end)
        assert colours.setdefault(name, rgb) == rgb and all(0 <= int(v) <= 255 for v in rgb.split(","))
    assert len(set(colours.values())) == len(colours)  # one colour per state
    table = (tmp_path / "seg.states.tsv").read_text().splitlines()
    assert table[0].split("\t") == ["state", "label", "itemRgb", "weight", "stay", "level_A", "level_B",
                                     "dispersion_A", "dispersion_B"]
    for h, row in enumerate(table[1:]):
        fields = row.split("\t")
        assert fields[1] == document["labels"][h] and colours.get(fields[1], fields[2]) == fields[2]
        np.testing.assert_allclose([float(v) for v in fields[5:]], document["methylation"][h] + document["dispersion"][h],
                                   atol=1e-6)
    ds = xr.open_zarr(two_sample_store.path, group="chr2")
    assert ds.state_posterior.shape == (ds.sizes["position"], 4)
    covered = ds.coverage.values.sum(axis=1) > 0  # the bin axis also holds bins nobody covers: NaN there
    np.testing.assert_allclose(ds.state_posterior.values[covered].sum(axis=1), 1.0, atol=1e-5)
    assert np.isnan(ds.state_posterior.values[~covered]).all()


def test_em_refuses_a_moment_store_and_a_foreign_model(tmp_path, dask_clients, two_sample_store):
    scheduler = dask_clients[0].scheduler.address
    moments = tmp_path / "m.zarr"
    assert run("moments", two_sample_store.path, "-o", moments, "--scheduler", scheduler, "-q").exit_code == 0
    r = run("fit", moments, "-m", "3", "--method", "em", "-o", tmp_path / "x.json")
    assert r.exit_code != 0 and "needs the counts store" in r.output
    model = tmp_path / "a.json"
    assert run("fit", moments, "-m", "3", "-o", model).exit_code == 0
    doc = json.loads(model.read_text())
    doc["samples"] = ["A", "Z"]
    model.write_text(json.dumps(doc))
    r = run("score", two_sample_store.path, "--model", model, "--scheduler", scheduler)
    assert r.exit_code != 0 and "sample(s) Z" in r.output


@pytest.mark.parametrize("method", ["refined", "ftd-em"])
def test_report_renders_every_figure(tmp_path, dask_clients, two_sample_store, method):
    import matplotlib.image

    scheduler = dask_clients[1].scheduler.address
    model = tmp_path / "m.json"
    # the refined fit binomial (its bootstrap figure is what it adds); ftd-em's model is beta-binomial
    extra = (("--bootstrap", "3", "--block-size", "20000", "--emission", "binomial") if method == "refined"
             else ("--em-iter", "3"))
    r = run("fit", two_sample_store.path, "-m", "4", "--method", method, *extra, "-o", model, "--scheduler",
            scheduler, "-q")
    assert r.exit_code == 0, r.output
    out = tmp_path / "report"
    spectrum_source = ()
    if method == "refined":  # the spectrum from a moment store instead of a moment pass
        moments = tmp_path / "moments.zarr"
        assert run("moments", two_sample_store.path, "-o", moments, "--scheduler", scheduler, "-q").exit_code == 0
        spectrum_source = ("--moments", moments)
    calls = tmp_path / "calls.bed"  # regions drawn under the track: BED9 with itemRgb, and BED3
    calls.write_text('track name="calls"\nchr2\t1000\t5000\tdmr\t900\t+\t1000\t5000\t200,0,0\nchr2\t9000\t9500\n')
    r = run("report", two_sample_store.path, "--model", model, "--output", out, "--region", "chr2:0-50,000",
            "--regions", calls, *spectrum_source, "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    page = (out / "index.html").read_text()
    assert "calls: its regions in their BED colours" in page
    referenced = re.findall(r'<img src="([^"]+)"', page)
    expected = {"methylation.png", "transmat.png", "spectrum.png", "occupancy.png", "track.png",
                "bootstrap.png" if method == "refined" else "loglik.png"}
    assert set(referenced) == expected
    for name in referenced:
        image = matplotlib.image.imread(out / name)  # a valid PNG, not an empty file
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    assert "chr2:0-50,000" in page and "segments.bed" in page and "zarr" in page and "numpy" in page
    for level in json.loads(model.read_text())["methylation"][0]:
        assert f"{level:.3f}" in page
    assert (out / "segments.bed").read_text().startswith('track name="')
    assert not list(tmp_path.glob(".report.tmp-*"))
    loglik = re.search(r"<td>log-likelihood</td><td>([^<]*)</td>", page).group(1)
    if method == "refined":  # no likelihood: what was fitted instead, and why
        assert loglik.startswith("none: --method refined fits the moments of one pass and never computes the "
                                 "likelihood of the counts (moment-fit criterion "), loglik
    else:
        assert loglik.endswith(" (EM, on the counts)"), loglik
    # a bad region fails cleanly and keeps the previous report
    r = run("report", two_sample_store.path, "--model", model, "--output", out, "--region", "chr9:0-10",
            "--scheduler", scheduler, "-q")
    assert r.exit_code != 0 and "no chromosome chr9" in r.output
    calls.write_text("chr2\t1000\t5000\nchr2 9000 9500\n")  # spaces, not tabs
    r = run("report", two_sample_store.path, "--model", model, "--output", out, "--regions", calls,
            "--scheduler", scheduler, "-q")
    assert r.exit_code != 0 and f"{calls}:2: not BED" in r.output and "'chr2 9000 9500'" in r.output, r.output
    # calls of another chromosome (the tutorial's chr22 HMRs on its chr21 store) drew an empty row
    calls.write_text("chr22\t1000\t5000\nchrUn\t10\t20\n")
    r = run("report", two_sample_store.path, "--model", model, "--output", out, "--regions", calls,
            "--region", "chr1:0-20000", "--scheduler", scheduler, "-q")
    assert r.exit_code != 0 and f"--regions {calls.stem}: none of its regions is on a chromosome of" in r.output
    assert "they are on chr22, chrUn" in r.output, r.output
    assert (out / "index.html").read_text() == page and not list(tmp_path.glob(".report.tmp-*"))


def test_em_sweep_prints_bic_and_recommends(tmp_path, dask_clients, two_sample_store):
    scheduler = dask_clients[1].scheduler.address
    r = run("fit", two_sample_store.path, "-m", "2-3", "--method", "em", "--em-starts", "1", "--em-iter", "6",
            "-o", tmp_path / "em.json", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    bics = [float(v) for v in re.findall(r"^\s+[23]\s+([0-9.e+]+)\s+written to", r.output, re.M)]
    assert len(bics) == 2
    best = 2 + int(np.argmin(bics))
    assert f"recommended: M = {best}: the lowest BIC" in r.output
    assert sorted(p.name for p in tmp_path.glob("em.m*.json")) == ["em.m2.json", "em.m3.json"]


def test_starting_the_command_imports_no_heavy_library():
    """--version and --help must be quick: scipy, numba, zarr, xarray, dask, distributed,
    pyarrow, isal and tqdm are imported only by the commands that use them."""
    heavy = ("scipy", "numba", "zarr", "xarray", "dask", "distributed", "matplotlib", "pyarrow", "isal", "tqdm")
    code = ("import sys; from streambhmm.app.cli import main; import streambhmm; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    version = subprocess.run([sys.executable, "-m", "streambhmm.app.cli", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and "version" in version.stdout


@pytest.mark.parametrize("args", [
    ("ingest", "{file}", "--sample", "B", "--store", "{store}", "--chunk-size", "0"),
    ("ingest", "{file}", "--sample", "B", "--store", "{store}", "--bin-size", "-100"),
    ("moments", "compute", "{store}", "-o", "{out}", "--bins", "0"),
    ("moments", "compute", "{store}", "-o", "{out}", "--block-size", "-1"),
    ("fit", "{store}", "--states", "2", "--bootstrap", "-3", "-o", "{out}"),
    ("fit", "{store}", "--states", "2", "--method", "em", "--em-iter", "0", "-o", "{out}"),
    ("fit", "{store}", "--states", "2", "--method", "em", "--em-tol", "-1", "-o", "{out}"),
    ("decode", "{store}", "--model", "{file}", "--max-gap", "-1", "-o", "{out}"),
])
def test_numeric_options_are_checked_before_any_work(tmp_path, args):
    """Audit 6 and 16: `moments --bins 0` used to leave a moment store recorded with n_bins 0."""
    store = tmp_path / "s.zarr"
    assert run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "A", "--store", store).exit_code == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    values = {"file": DATA / "dmrseq_H1_r1.chr21.tsv.gz", "store": store, "out": tmp_path / "out"}
    r = run(*(str(a).format(**values) for a in args))
    assert r.exit_code == 2 and "Invalid value for '--" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_work_runs_in_process_with_a_clusters_results(tmp_path, two_sample_store, monkeypatch):
    from streambhmm.distributed.cluster import IN_PROCESS_ENV, is_small, store_session
    from streambhmm.moments.momentstore import load_total

    assert is_small(two_sample_store.path)
    # a store that cannot be read is refused in this process: no cluster is started for a message
    (tmp_path / "other.zarr").mkdir()
    assert is_small(tmp_path / "missing.zarr") and is_small(tmp_path / "other.zarr")
    with monkeypatch.context() as patch:
        patch.setattr("streambhmm.distributed.cluster._embedded_client", None)  # starting one fails
        r = run("fit", tmp_path / "other.zarr", "-m", "2", "-o", tmp_path / "m.json", env={IN_PROCESS_ENV: "0"})
    assert r.exit_code == 1 and "other.zarr" in r.output and "NoneType" not in r.output, r.output
    # counted: covered bins x samples (EM in memory keeps no bin without reads), per chunk the
    # samples' covered bins added, at most the chunk's bins; a sparse store (RRBS, single cells)
    # is small however long its chromosomes
    sparse = tmp_path / "sparse.zarr"
    for sample, step in (("A", 9_000), ("B", 15_000)):
        rows = "".join(f"chr{c}\t{p}\t+\t1\t2\n" for c in (1, 2) for p in range(5_000, 3_000_000, step))
        (tmp_path / f"{sample}.tsv").write_text("chrom\tpos\tstrand\tmc\tcov\n" + rows)
        assert run("ingest", tmp_path / f"{sample}.tsv", "--sample", sample, "--store", sparse,
                   "--chunk-size", "1000").exit_code == 0
    spans = 2 * 29_951 * 2
    cells = 2 * (len(range(5_000, 3_000_000, 9_000)) + len(range(5_000, 3_000_000, 15_000))) * 2
    monkeypatch.setenv(IN_PROCESS_ENV, str(cells))
    assert is_small(sparse) and cells < spans / 20
    monkeypatch.setenv(IN_PROCESS_ENV, str(cells - 1))
    assert not is_small(sparse)
    # a command that sums the bins (pmd) works on those: a chunk of 1,000 bins summed 500 at a
    # time holds at most 2 of them, whatever reads its bins hold
    summed = 2 * sum(min(2, count) for count in np.bincount(
        [p // 100 // 1000 for step in (9_000, 15_000) for p in range(5_000, 3_000_000, step)]) if count) * 2
    monkeypatch.setenv(IN_PROCESS_ENV, str(summed))
    assert is_small(sparse, 500 * 100) and not is_small(sparse, 100)
    monkeypatch.setenv(IN_PROCESS_ENV, str(summed - 1))
    assert not is_small(sparse, 500 * 100)
    # the work runs here at any size; EM keeps the counts here only for a small store
    monkeypatch.setenv(IN_PROCESS_ENV, "1")
    for em in (False, True):
        with store_session(two_sample_store.path, em=em) as opened:  # an E-step is a graph on the threads
            assert opened.in_process and opened.em_client is opened.client is not None
    monkeypatch.setenv(IN_PROCESS_ENV, "")
    with store_session(two_sample_store.path, em=True) as opened:
        assert opened.in_process and opened.em_client is None  # distributed.em.LocalEStep
    with store_session(two_sample_store.path) as opened:
        assert opened.in_process and opened.em_client is opened.client  # said no EM: nothing kept
    outputs = {}
    # "1": EM's E-steps are graphs on the command's threads
    for path, limit in (("in_process", ""), ("processes", "0"), ("em_graphs", "1")):
        env = {IN_PROCESS_ENV: limit}
        out = tmp_path / path
        out.mkdir()
        assert run("moments", two_sample_store.path, "-o", out / "m.zarr", "-q", env=env).exit_code == 0
        r = run("fit", two_sample_store.path, "-m", "4", "--method", "ftd-em", "--em-iter", "3", "-o",
                out / "model.json", "-q", env=env)
        assert r.exit_code == 0, r.output
        r = run("decode", two_sample_store.path, "--model", out / "model.json", "-o", out / "seg.bed", "-q", env=env)
        assert r.exit_code == 0, r.output
        outputs[path] = (load_total(out / "m.zarr")[0], (out / "model.json").read_text(),
                         (out / "seg.bed").read_bytes())
    (m1, model1, bed1), *others = outputs.values()
    for m2, model2, bed2 in others:
        for name in ("p12", "p123", "pair_histogram", "coverage_features"):
            np.testing.assert_array_equal(getattr(m1, name), getattr(m2, name))
        assert model1 == model2 and bed1 == bed2
    r = run("moments", two_sample_store.path, "-o", tmp_path / "x.zarr", env={IN_PROCESS_ENV: "many"})
    assert r.exit_code != 0 and "STREAMBHMM_IN_PROCESS_MAX must be an integer" in r.output


def test_a_reader_that_leaves_the_pipe_loses_no_output(tmp_path):
    """`streambhmm fit ... | head -1`: the pipe's reader gone, the next line printed raised
    BrokenPipeError before the model was in place, and fit ended with status 1 and no model (a
    helper's audit; decode lost its segments so). What is printed is now dropped, the files written."""
    import os

    store = tmp_path / "counts.zarr"
    assert run("ingest", DATA / "dmrseq_H1_r1.chr21.tsv.gz", "--sample", "H1", "--store", store, "-q").exit_code == 0
    for args, outputs in ((("fit", store, "--states", "2", "-o", tmp_path / "m.json"), ["m.json"]),
                          (("decode", store, "--model", tmp_path / "m.json", "-o", tmp_path / "s.bed"),
                           ["s.bed", "s.states.tsv"])):
        read, write = os.pipe()
        os.close(read)  # the reader has left before the first line
        done = subprocess.run([sys.executable, "-m", "streambhmm", *map(str, args)], stdout=write,
                              stderr=subprocess.PIPE, text=True)
        os.close(write)
        assert done.returncode == 0, done.stderr
        assert all((tmp_path / name).exists() for name in outputs), done.stderr


def test_a_socket_whose_reader_resets_it_drops_what_is_written():
    """Standard output on a TCP socket whose reader left with data unread: ECONNRESET, not
    EPIPE, ended fit with a traceback and no model (a helper's audit)."""
    import socket
    import struct

    from streambhmm.app.console import _DroppedOnceGone

    with socket.create_server(("127.0.0.1", 0)) as server:
        writer = socket.create_connection(server.getsockname())
        reader, _ = server.accept()
        writer.sendall(b"a line\n")  # unread by the reader, which leaves with a reset
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        reader.close()
        out = _DroppedOnceGone(writer.fileno())
        for _ in range(3):  # the first write may still be accepted before the reset arrives
            assert out.write(b"x" * 100_000) == 100_000
        assert out.gone
        writer.close()


def test_a_joint_fit_of_samples_without_shared_bins_is_told(tmp_path):
    """`fit` of two samples on other chromosomes: its states' levels come from other bins in
    each sample, which the user is told (a helper's cohort trial saw "differential" states)."""
    rng = np.random.default_rng(2)
    bins = np.arange(0, 6_000)
    cov = rng.poisson(10, (bins.size, 2)) + 1
    meth = rng.binomial(cov, np.where(bins % 400 < 100, 0.1, 0.8)[:, None])
    on = {"chr1": np.array([1, 0]), "chr2": np.array([0, 1])}
    from streambhmm.testing import write_store

    store = write_store(tmp_path / "apart.zarr", {c: (bins, meth * m, cov * m) for c, m in on.items()}, ["A", "B"])
    result = run("fit", store.path.url, "--states", "2", "-o", tmp_path / "m.json", "--emission", "binomial")
    assert result.exit_code == 0, result.output
    assert "warning: no bin with reads has reads in every sample: a state's levels in different samples" in \
        result.output
    both = write_store(tmp_path / "both.zarr", {"chr1": (bins, meth, cov)}, ["A", "B"])
    result = run("fit", both.path.url, "--states", "2", "-o", tmp_path / "m2.json", "--emission", "binomial")
    assert result.exit_code == 0 and "warning: " not in result.output, result.output
    # three samples: the moments keep a histogram per sample, and the store says where each has reads
    # (a helper's audit: no warning with the default, projected, feature)
    three = {"chr1": np.array([1, 0, 1]), "chr2": np.array([0, 1, 0])}
    cov3, meth3 = np.tile(cov, (1, 2))[:, :3], np.tile(meth, (1, 2))[:, :3]
    store = write_store(tmp_path / "three.zarr", {c: (bins, meth3 * m, cov3 * m) for c, m in three.items()},
                        ["A", "B", "C"])
    result = run("fit", store.path.url, "--states", "2", "-o", tmp_path / "m3.json", "--emission", "binomial")
    assert result.exit_code == 0, result.output
    assert "warning: no chromosome has reads in every sample (A on chr1; B on chr2; C on chr1): a state's levels" \
        in " ".join(result.output.split()), result.output
    # and from its moment store, asking the counts store it came from
    assert run("moments", store.path.url, "-o", tmp_path / "three_m.zarr", "-q").exit_code == 0
    result = run("fit", tmp_path / "three_m.zarr", "--states", "2", "-o", tmp_path / "m4.json")
    assert result.exit_code == 0, result.output
    assert "warning: no chromosome has reads in every sample (A on chr1; B on chr2; C on chr1)" \
        in " ".join(result.output.split()), result.output


def test_a_recommended_model_size_below_the_spectrums_noise_is_explained():
    """A new user's trial: `fit --states 2-6` recommended M = 3 beside "below noise" in its own
    table, with no word on which column to trust."""
    from types import SimpleNamespace

    from streambhmm.app.cli.fit import spectrum_note

    outcomes = [SimpleNamespace(m=2, spectrum=True), SimpleNamespace(m=3, spectrum=False),
                SimpleNamespace(m=4, spectrum=None)]
    note = spectrum_note((3, "the smallest M ..."), outcomes)
    assert note.startswith("(M = 3's spectrum is below noise") and "held-out criterion" in note
    assert spectrum_note((2, "..."), outcomes) == "" and spectrum_note((4, "the lowest BIC"), outcomes) == ""
    assert spectrum_note(None, outcomes) == ""
