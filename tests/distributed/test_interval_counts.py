"""dmr's recount of its regions' reads (distributed.regions.interval_counts): every read of an
interval, across chunk seams, one sample's chunk in memory at a time."""

import numpy as np

from streambhmm.distributed.regions import interval_counts
from streambhmm.io.store.chunks import ChunkRef
from streambhmm.testing import write_store


def test_intervals_count_every_read_reading_one_sample_at_a_time(tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    n_bins, samples = 2_000, ["a", "b", "c"]
    bins = np.sort(rng.choice(n_bins, 900, replace=False))
    cov = rng.integers(0, 6, (bins.size, len(samples)))
    meth = rng.binomial(cov, 0.4)
    store = write_store(tmp_path / "s.zarr", {"chr1": (bins, meth, cov), "chr2": (bins, meth[::-1], cov[::-1])},
                        samples, chunk_size=300)  # intervals cross chunk seams
    starts = rng.integers(0, n_bins - 50, 40) * 100
    ends = starts + rng.integers(1, 700, 40) * 100
    chrom = np.where(np.arange(40) % 2, "chr1", "chr2")

    widths = []
    real_read = ChunkRef.read

    def read(self, which=None, verify=True):
        widths.append(len(self.columns) if which is None else len(which))
        return real_read(self, which, verify)

    monkeypatch.setattr(ChunkRef, "read", read)
    got = interval_counts(store, samples, list(chrom), starts, ends, members=(0, 1, 1))  # groups {a}, {b, c}
    assert widths and set(widths) == {1}  # memory: one sample's chunk, whatever the samples
    got_meth, got_cov, got_covered = got.methylated, got.coverage, got.covered
    for k in range(40):
        m, c = (meth, cov) if chrom[k] == "chr1" else (meth[::-1], cov[::-1])
        inside = (bins >= starts[k] // 100) & (bins < ends[k] // 100)
        np.testing.assert_array_equal(got_meth[k], m[inside].sum(axis=0))
        np.testing.assert_array_equal(got_cov[k], c[inside].sum(axis=0))
        assert got_covered[k] == int((c[inside] > 0).any(axis=1).sum())
        # bins where each group has reads: a's, and b's or c's
        assert got.compared[k] == int(((c[inside, 0] > 0) & (c[inside, 1:] > 0).any(axis=1)).sum())
    assert interval_counts(store, samples, list(chrom), starts, ends).compared is None
