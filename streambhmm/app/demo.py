"""The demo: a synthetic methylome written as real-format files, ingested, its moments
computed on Dask and fitted (synthetic stores for benchmarks: streambhmm.testing.bench).

Each simulated bin's counts are split over the two strands of one CpG (rows at offsets
o and o+1 in the bin), so binning the files gives back exactly the simulated counts.
The allc writer adds CHH rows, which the default CG context filter must drop.
"""

from __future__ import annotations

import gzip
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..distributed.cluster import store_session
from ..distributed.fitdata import load_moments
from ..io.ingest import ingest
from ..io.storage import write_json
from ..learn.evaluate import matched_error
from ..learn.selection import one_pass
from ..learn.simulate import model, simulate
from ..moments.spec import FeatureSpec
from .modelio import data_settings_of, model_to_dict

DEMO_SAMPLES = ("sample_A", "sample_B")
DEMO_TRUTH = model(
    methylation=[[0.03, 0.05], [0.90, 0.92], [0.85, 0.20], [0.50, 0.55]],
    transmat=np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3),
)
# unmethylated (CpG-island-like) bins get more reads, as in real methylomes
DEMO_COVERAGE = [[40, 35], [15, 18], [15, 18], [12, 14]]


def cpg_rows(bin_start: np.ndarray, methylated: np.ndarray, coverage: np.ndarray, rng, bin_size: int = 100):
    """Split bin counts over a CpG's two strands; returns sorted 0-based rows without zero coverage."""
    offset = rng.integers(0, bin_size - 2, bin_start.size)
    plus_cov = rng.binomial(coverage, 0.5)
    plus_meth = rng.hypergeometric(methylated, coverage - methylated, plus_cov)
    pos0 = np.stack([bin_start + offset, bin_start + offset + 1], axis=1).ravel()
    meth = np.stack([plus_meth, methylated - plus_meth], axis=1).ravel()
    cov = np.stack([plus_cov, coverage - plus_cov], axis=1).ravel()
    strand = np.tile(np.array(["+", "-"]), bin_start.size)
    keep = cov > 0
    return pos0[keep], meth[keep], cov[keep], strand[keep]


def write_bismark_cov(fh, chrom: str, pos0, meth, cov) -> None:
    """Append rows in Bismark coverage format (1-based start = end)."""
    pct = np.round(100.0 * meth / cov, 4)
    pd.DataFrame({"c": chrom, "s": pos0 + 1, "e": pos0 + 1, "p": pct, "m": meth, "u": cov - meth}).to_csv(
        fh, sep="\t", header=False, index=False)


def write_allc(fh, chrom: str, pos0, meth, cov, strand, rng) -> None:
    """Append rows in allc format (1-based), with a CHH row after each CpG row."""
    n = pos0.size
    chh_cov = rng.poisson(5, n)
    frame = pd.DataFrame({
        "c": chrom,
        "p": np.stack([pos0 + 1, pos0 + 1], axis=1).ravel(),  # the CHH row sits at the same base
        "s": np.stack([strand, strand], axis=1).ravel(),
        "x": np.tile(np.array(["CGA", "CTT"]), n),
        "m": np.stack([meth, rng.binomial(chh_cov, 0.02)], axis=1).ravel(),
        "v": np.stack([cov, chh_cov], axis=1).ravel(),
        "f": 1,
    })
    frame.to_csv(fh, sep="\t", header=False, index=False)


def write_demo_files(directory: Path, simulated, chromosomes: list[str], rng, bin_size: int = 100):
    """Write sample_A as a Bismark .cov.gz and sample_B as an allc.tsv.gz; returns the paths."""
    paths = [directory / "sample_A.bismark.cov.gz", directory / "sample_B.allc.tsv.gz"]
    per_chrom = np.array_split(np.arange(simulated.coverage.shape[0]), len(chromosomes))
    with gzip.open(paths[0], "wt", compresslevel=1) as cov_fh, gzip.open(paths[1], "wt", compresslevel=1) as allc_fh:
        for chrom, index in zip(chromosomes, per_chrom):
            bin_start = np.arange(index.size, dtype=np.int64) * bin_size
            a = cpg_rows(bin_start, simulated.methylated[index, 0], simulated.coverage[index, 0], rng, bin_size)
            write_bismark_cov(cov_fh, chrom, *a[:3])
            b = cpg_rows(bin_start, simulated.methylated[index, 1], simulated.coverage[index, 1], rng, bin_size)
            write_allc(allc_fh, chrom, *b, rng)
    return paths


@dataclass
class DemoResult:
    """The demo's fit: the estimator, the seconds of its moments and fit, and its errors
    against DEMO_TRUTH (learn.evaluate.MatchedError, with the matching permutation)."""

    estimator: object
    seconds: float
    error: object


def run_demo(directory: Path, n: int = 100_000, seed: int = 0, scheduler=None, quiet: bool = False,
             echo: Callable[[str], None] = print) -> DemoResult:
    """Simulate DEMO_TRUTH on three chromosomes of ``n`` bins, write the two samples as a
    Bismark .cov and an allc file, ingest them into DIRECTORY/counts.zarr, compute the
    moments on Dask, fit 4 states (refined) and write DIRECTORY/model.json."""
    chromosomes = ["chr1", "chr2", "chr3"]
    rng = np.random.default_rng(seed)
    simulated = simulate(DEMO_TRUTH, [n] * len(chromosomes), coverage=DEMO_COVERAGE, random_state=rng)
    files = write_demo_files(directory, simulated, chromosomes, rng)
    echo(f"wrote {n * len(chromosomes):,} bins x 2 samples: {files[0].name} (Bismark coverage), "
         f"{files[1].name} (allc, with CHH rows)")
    store = directory / "counts.zarr"
    for sample, path in zip(DEMO_SAMPLES, files):
        report = ingest([path], sample, store, echo=echo)
        echo(f"ingested {sample}: {report.n_rows:,} {report.format} rows -> {report.n_bins:,} bins")
    start = time.perf_counter()
    with store_session(store, scheduler, quiet=quiet) as opened:
        data = load_moments(opened.store, None, FeatureSpec(), opened.client, quiet)
        settings = data_settings_of(opened.store, data.samples)
    est = one_pass(data.moments, len(DEMO_TRUTH.methylation), "refined", seed)
    write_json(directory / "model.json", model_to_dict(est, data.samples, data.chromosomes, **settings))
    error = matched_error(DEMO_TRUTH.methylation, est.methylation_, DEMO_TRUTH.transmat, est.transmat_)
    return DemoResult(est, time.perf_counter() - start, error)
