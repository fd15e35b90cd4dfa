import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from streambhmm.cli import main
from streambhmm.modelio import MODEL_KEYS

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


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
    assert "chr21" in r.output and "sample H1: 2 tsv file(s), context CG" in r.output
    assert re.search(r"IMR90: [0-9,]+ of [0-9,]+ bins covered", r.output)

    model = tmp_path / "model.json"
    scheduler = dask_clients[1].scheduler.address
    r = run("fit", store, "--states", "2", "--seed", "3", "--output", model, "--scheduler", scheduler, "--quiet")
    assert r.exit_code == 0, r.output
    assert re.search(r"state\s+H1\s+IMR90\s+weight\s+stay", r.output)
    doc = json.loads(model.read_text())
    assert tuple(doc) == MODEL_KEYS
    assert doc["format"] == "streambhmm-model" and doc["version"] == 1 and doc["method"] == "ftd"
    assert doc["samples"] == ["H1", "IMR90"] and doc["chromosomes"] == ["chr21"] and doc["n_states"] == 2
    assert doc["feature"] == {"kind": "beta", "n_bins": 30}
    np.testing.assert_allclose(np.sum(doc["transmat"], axis=1), 1.0)
    assert np.array(doc["methylation"]).shape == (2, 2) and doc["n_triples"] > 0

    # one sample, through the environment variable instead of --scheduler
    r = run("fit", store, "--states", "2", "--samples", "IMR90", "--output", tmp_path / "m1.json", "-q",
            env={"STREAMBHMM_SCHEDULER": scheduler})
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "m1.json").read_text())["samples"] == ["IMR90"]


@pytest.mark.parametrize("body,fragment", [
    ("chr1\t10\t+\t1\t5\nchr1\t20\t+\t5\n", ":3: malformed tsv line: expected 5 fields, found 4: 'chr1\\t20\\t+\\t5'"),
    ("chr1\t10\t+\t9\t5\n", ":2: methylated count 9 exceeds coverage 5"),
    ("chr1\t10\t+\t-2\t5\n", ":2: negative count"),
    ("chr1\t30\t+\t1\t5\nchr1\t20\t+\t1\t5\n", ":3: position out of order within chr1"),
    ("", ": the file is empty"),
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
    r = run("fit", store, "--states", "25", "--output", tmp_path / "m.json", "-q",
            "--scheduler", dask_clients[0].scheduler.address)
    assert r.exit_code != 0 and "do not support 25 states" in r.output
    assert not (tmp_path / "m.json").exists()


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^TEST_COMMAND='(.+)'$", ci, re.M).group(1)
    assert command in (ROOT / "README.md").read_text()
