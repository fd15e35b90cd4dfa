"""EM, scoring and decoding on a store equal the whole-sequence computation for any chunking."""

from pathlib import Path

import numpy as np
import pytest

from streambhmm.learn.hmm import BinomialHMM
from streambhmm.distributed.em import fit_store_em, score_store, stats_graph
from streambhmm.distributed.messages import Params
from streambhmm.testing import load_counts, segment_backward, segment_forward, segment_stats

from ..moments.test_pipeline import synthetic_store

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster


def _hmm(truth, seed=0):
    """A model near (not at) the truth, so statistics are not trivially symmetric."""
    rng = np.random.default_rng(seed)
    hmm = BinomialHMM(truth.n_components)
    hmm.startprob_ = rng.dirichlet(np.ones(truth.n_components))
    hmm.transmat_ = 0.8 * truth.transmat + 0.2 * rng.dirichlet(np.ones(truth.n_components), truth.n_components)
    hmm.methylation_ = np.clip(truth.methylation + rng.normal(0, 0.05, truth.methylation.shape), 0.01, 0.99)
    return hmm


def _assert_stats_close(got, expected, rtol=1e-9):
    assert got.loglik == pytest.approx(expected.loglik, rel=rtol)
    for name in ("start", "trans", "methylated", "coverage"):
        np.testing.assert_allclose(getattr(got, name), getattr(expected, name), rtol=rtol, atol=1e-9, err_msg=name)


@pytest.mark.parametrize("cuts", [[0, 1], [1, 2, 3], [5, 5, 17], [40]])
def test_segments_with_messages_equal_the_whole_sequence(four_state_model, cuts):
    sim_hmm = _hmm(four_state_model)
    meth, cov, _ = sim_hmm.sample(60, coverage=15, random_state=1)
    expected = sim_hmm.e_step(meth, cov)
    expected_post = sim_hmm.predict_proba(meth, cov)
    bounds = [0, *cuts, 60]
    params = Params.of(sim_hmm)
    forward = [None]
    for a, b in zip(bounds[:-1], bounds[1:]):
        forward.append(segment_forward(forward[-1], meth[a:b], cov[a:b], params)[1])
    backward = [None]
    for a, b in reversed(list(zip(bounds[:-1], bounds[1:]))):
        backward.insert(0, segment_backward(backward[0], meth[a:b], cov[a:b], params))
    total, posts = None, []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        stats, post = segment_stats(forward[k], backward[k + 1], meth[a:b], cov[a:b], params, True)
        total = stats if total is None else total + stats
        posts.append(post)
    _assert_stats_close(total, expected)
    np.testing.assert_allclose(np.vstack(posts), expected_post, atol=1e-10)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 10_000])
def test_store_statistics_equal_in_memory_statistics(tmp_path, four_state_model, dask_clients, chunk_size):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [50, 2, 1, 33], chunk_size)
    meth, cov, lengths = load_counts(store)
    hmm = _hmm(four_state_model)
    expected = hmm.e_step(meth, cov, lengths)
    for client in dask_clients:
        got = client.compute(stats_graph(store, store.samples, Params.of(hmm), split_every=3)).result()
        _assert_stats_close(got, expected)


@pytest.mark.parametrize("chunk", [0, 3, 6])
def test_a_damaged_chunk_stops_the_e_step_though_its_message_tasks_do_not_check(tmp_path, four_state_model,
                                                                                 dask_clients, chunk):
    # the forward and backward tasks read unchecked; the statistics task of every chunk checks
    import zarr

    from streambhmm.io.store import StoreError

    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [400], chunk_size=64)
    counts = zarr.open_group(str(store.path), mode="r+")["chr1/methylated"]
    rows = slice(chunk * 64, chunk * 64 + 64)
    counts[rows, 0] = np.where(counts[rows, 0] > 0, counts[rows, 0] - 1, counts[rows, 0])
    with pytest.raises(StoreError, match=rf"sample A on chr1, chunk {chunk} .* missing or damaged"):
        dask_clients[1].compute(stats_graph(store, store.samples, Params.of(_hmm(four_state_model)))).result()


def test_store_em_equals_in_memory_em_and_never_decreases(tmp_path, four_state_model, dask_clients):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [400, 250], chunk_size=64)
    meth, cov, lengths = load_counts(store)
    reference = _hmm(four_state_model)
    reference.n_iter, reference.init_params, reference.tol = 5, "", -np.inf
    reference.fit(meth, cov, lengths)
    result = fit_store_em(store, _hmm(four_state_model), dask_clients[1], n_iter=5, rel_tol=-np.inf)
    np.testing.assert_allclose(result.history, reference.monitor_.history, rtol=1e-9)
    assert np.all(np.diff(result.history) >= -1e-9)
    for name in ("startprob_", "transmat_", "methylation_"):
        np.testing.assert_allclose(getattr(result.hmm, name), getattr(reference, name), rtol=1e-8, atol=1e-10)


def test_score_per_chromosome(tmp_path, four_state_model, dask_clients):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [70, 90, 5], chunk_size=8)
    hmm = _hmm(four_state_model)
    per_chrom = score_store(store, hmm, dask_clients[0], samples=["B", "A"])
    for chrom, value in per_chrom.items():
        ds = store.dataset(chrom).sel(sample=["B", "A"])
        meth, cov = ds.methylated.values.astype(np.int64), ds.coverage.values.astype(np.int64)
        keep = cov.sum(axis=1) > 0
        assert value == pytest.approx(hmm.score(meth[keep], cov[keep]), rel=1e-10)
    only = score_store(store, hmm, dask_clients[0], samples=["B", "A"], chromosomes=["chr2"])
    assert list(only) == ["chr2"] and only["chr2"] == pytest.approx(per_chrom["chr2"], rel=1e-12)
    with pytest.raises(ValueError, match="no chromosome chr9"):
        score_store(store, hmm, dask_clients[0], chromosomes=["chr9"])


def _bed_states(path, store, samples, levels):
    """Per chromosome, the state of each kept bin according to the BED9 file, whose names are
    the labels of the decoding model's ``levels``."""
    from streambhmm.learn.states import state_labels

    lines = Path(path).read_text().splitlines()
    assert lines[0].startswith('track name="') and lines[0].endswith('itemRgb="On"')
    labels = state_labels(levels, samples)
    rows = [line.split("\t") for line in lines[1:]]
    states = {}
    for chrom in store.chromosomes:
        ds = store.dataset(chrom).sel(sample=samples)
        position = ds.position.values[ds.coverage.values.sum(axis=1) > 0]
        got = np.full(len(position), -1)
        for row in (r for r in rows if r[0] == chrom):
            start, end, state, score = int(row[1]), int(row[2]), labels.index(row[3]), int(row[4])
            assert start < end and 0 <= score <= 1000 and len(row) == 9
            assert row[5] == "+" and (int(row[6]), int(row[7])) == (start, end) and len(row[8].split(",")) == 3
            inside = (position >= start) & (position < end)
            assert (got[inside] == -1).all(), "BED runs overlap"
            got[inside] = state
        states[chrom] = got
    return states, rows


@pytest.mark.parametrize("chunk_size", [7, 10_000])
def test_decode_writes_bed_and_posteriors(tmp_path, four_state_model, dask_clients, chunk_size):
    import xarray as xr

    from streambhmm.distributed.decode import decode_store

    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [300, 120], chunk_size)
    hmm = _hmm(four_state_model)
    report = decode_store(store, hmm, dask_clients[1], tmp_path / "seg.bed", max_gap=10**9, posteriors=True)
    states, rows = _bed_states(tmp_path / "seg.bed", store, store.samples, hmm.methylation_)
    assert report.n_segments == len(rows) and report.posterior_written
    for chrom in store.chromosomes:
        ds = store.dataset(chrom)
        keep = ds.coverage.values.sum(axis=1) > 0
        expected = hmm.predict_proba(ds.methylated.values[keep].astype(np.int64),
                                     ds.coverage.values[keep].astype(np.int64))
        np.testing.assert_array_equal(states[chrom], expected.argmax(axis=1))
        posterior = xr.open_zarr(tmp_path / "s.zarr", group=chrom)["state_posterior"]
        assert posterior.dims == ("position", "state")
        np.testing.assert_allclose(posterior.values[keep], expected, atol=1e-6)
    # consecutive runs of one chromosome differ in state (merged across chunk seams)
    for a, b in zip(rows[1:-1], rows[2:]):
        assert a[0] != b[0] or a[3] != b[3]
    assert report.state_bins.sum() == sum(len(s) for s in states.values())


def test_decode_breaks_runs_at_long_gaps_and_replaces_posteriors(tmp_path, four_state_model, dask_clients):
    import xarray as xr

    from streambhmm.distributed.decode import decode_store

    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [200], 50, gap_fraction=0.3)
    hmm = _hmm(four_state_model)
    hmm.transmat_ = np.eye(4) * 0.999 + 0.001 / 4  # nearly one state throughout
    levels = hmm.methylation_
    hmm.methylation_ = levels[:, :1]
    decode_store(store, hmm, dask_clients[0], tmp_path / "a.bed", samples=["A"], max_gap=0, posteriors=True)
    decode_store(store, hmm, dask_clients[0], tmp_path / "b.bed", samples=["A"], max_gap=10**9)
    _, tight = _bed_states(tmp_path / "a.bed", store, ["A"], hmm.methylation_)
    _, loose = _bed_states(tmp_path / "b.bed", store, ["A"], hmm.methylation_)
    hmm.methylation_ = levels
    assert len(tight) > len(loose)
    for row in tight:  # with max_gap 0 a run never spans a bin without coverage in A
        ds = store.dataset("chr1").sel(sample="A")
        inside = (ds.position.values >= int(row[1])) & (ds.position.values < int(row[2]))
        assert (ds.coverage.values[inside] > 0).all() and inside.sum() == (int(row[2]) - int(row[1])) // 100
    # a second run with other samples replaces the variable; no temporary arrays remain
    decode_store(store, hmm, dask_clients[0], tmp_path / "c.bed", samples=["A", "B"], posteriors=True)
    posterior = xr.open_zarr(tmp_path / "s.zarr", group="chr1")["state_posterior"]
    assert posterior.attrs["samples"] == ["A", "B"]
    assert not list((tmp_path / "s.zarr").glob("*/state_posterior_tmp_*"))


def test_short_contigs_taken_together_give_the_same_statistics(tmp_path, four_state_model, dask_clients):
    from streambhmm.distributed.chains import batch_budget, grouped_sequences, sequences
    from streambhmm.distributed.em import LocalEStep
    from streambhmm.moments.spec import Grouping

    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [5, 1, 2, 40, 3, 7, 90, 4, 6], chunk_size=32)
    groups = grouped_sequences(sequences(store, store.samples), batch_budget(store, store.samples))
    assert any(batched and len(refs) > 1 for batched, refs in groups)  # one recursion over several contigs
    meth, cov, lengths = load_counts(store)
    hmm = _hmm(four_state_model)
    expected = hmm.e_step(meth, cov, lengths)
    _assert_stats_close(dask_clients[0].compute(stats_graph(store, store.samples, Params.of(hmm))).result(), expected)
    local = LocalEStep(store, Grouping.of(store.samples))
    try:
        _assert_stats_close(local(Params.of(hmm)), expected)
    finally:
        local.close()
