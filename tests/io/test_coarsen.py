"""Summing a store's bins into wider ones gives what an ingest at the wider bins gives."""

from pathlib import Path

import numpy as np
import pytest

from streambhmm.io.coarsen import coarsen
from streambhmm.io.ingest import ingest
from streambhmm.io.store import open_store

DATA = Path(__file__).parents[1] / "data"


@pytest.mark.slow
@pytest.mark.parametrize("factor, chunk_size", [(5, 2000), (50, 1000), (7, 1000)])
def test_coarsening_equals_an_ingest_at_the_coarser_bin_size(tmp_path, factor, chunk_size):
    files = [DATA / "dmrseq_H1_r1.chr21.tsv.gz", DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"]
    fine, wide = tmp_path / "fine.zarr", tmp_path / "wide.zarr"
    for sample, path in zip(("H1", "IMR90"), files):
        ingest([path], sample, fine, bin_size=100, chunk_size=chunk_size)
        ingest([path], sample, wide, bin_size=100 * factor, chunk_size=max(chunk_size // factor, 1))
    shown = []
    got = coarsen(open_store(fine), factor, tmp_path / "coarse.zarr", ["H1", "IMR90"],
                  lambda done, total: shown.append((done, total)))
    expected = open_store(wide)
    # progress after each chunk of each sample, up to all of them
    chunks = sum(len(open_store(fine).chunk_refs(c, [s])) for c in expected.chromosomes for s in ("H1", "IMR90"))
    assert shown == [(k, chunks) for k in range(1, chunks + 1)]
    assert got.bin_size == expected.bin_size == 100 * factor and got.samples == expected.samples
    assert got.chromosomes == expected.chromosomes
    for chrom in expected.chromosomes:
        a, b = got.dataset(chrom), expected.dataset(chrom)
        np.testing.assert_array_equal(a.position.values, b.position.values)
        for name in ("methylated", "coverage"):
            np.testing.assert_array_equal(a[name].values, b[name].values)
        np.testing.assert_array_equal(got.summary(chrom, [0, 1]), expected.summary(chrom, [0, 1]))
    assert got.attrs["samples"]["H1"]["coarsened"]["factor"] == factor
