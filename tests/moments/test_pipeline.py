import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambhmm.moments.sums import compute_moments
from streambhmm.moments.pipeline import chunk_partial, moments_graph
from streambhmm.testing import load_counts
from streambhmm.learn.simulate import simulate
from streambhmm.testing import write_store


def synthetic_store(path, model, chrom_lengths, chunk_size, seed=0, gap_fraction=0.2):
    """A counts store of simulated chromosomes; sample 1 misses some bins and sample 0
    others, so sample subsets drop different bins."""
    rng = np.random.default_rng(seed)
    sim = simulate(model, chrom_lengths, coverage=[[20, 10]] * model.n_components, random_state=rng)
    meth, cov = sim.methylated.copy(), sim.coverage.copy()
    for s in range(2):
        gone = rng.random(cov.shape[0]) < gap_fraction
        meth[gone, s] = cov[gone, s] = 0
    chroms, offset = {}, 0
    for i, length in enumerate(chrom_lengths):
        m, c = meth[offset:offset + length], cov[offset:offset + length]
        if c.any():
            chroms[f"chr{i + 1}"] = (np.arange(length), m, c)
        offset += length
    return write_store(path, chroms, ["A", "B"], chunk_size=chunk_size)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_size", [1, 2, 3, 7, 64, 10_000])
def test_store_moments_equal_in_memory_moments(tmp_path, four_state_model, dask_clients, chunk_size):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [40, 2, 1, 25, 3], chunk_size)
    meth, cov, lengths = load_counts(store)
    expected = compute_moments(meth, cov, lengths)
    for client, split_every in ((dask_clients[0], 2), (dask_clients[1], 3), (dask_clients[1], 8)):
        got = client.compute(moments_graph(store, split_every=split_every).total).result()
        assert got.n_triples == expected.n_triples == sum(max(n - 2, 0) for n in lengths)
        assert got.allclose(expected, rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("chunk_size", [1, 5])
@pytest.mark.parametrize("samples", [["B"], ["B", "A"]])
def test_sample_subsets_skip_bins_without_their_coverage(tmp_path, four_state_model, dask_clients, chunk_size,
                                                         samples):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [60, 30], chunk_size, gap_fraction=0.4)
    meth, cov, lengths = load_counts(store, samples)
    assert (cov.sum(axis=1) > 0).all() and meth.shape[1] == len(samples)
    got = dask_clients[1].compute(moments_graph(store, samples).total).result()
    assert got.allclose(compute_moments(meth, cov, lengths), rtol=1e-10)


@pytest.mark.parametrize("with_blocks", [True, False])
def test_the_graph_names_the_chromosomes_with_reads_in_the_samples(tmp_path, four_state_model, with_blocks):
    """As a moment store's manifest does: a model fitted on sample A does not list chr2, where
    only B has reads (a helper's trial found a re-ingested sample's emptied chromosome listed)."""
    sim = simulate(four_state_model, [30, 20], coverage=10, random_state=1)
    nothing = np.zeros(20, np.int64)
    chroms = {"chr1": (np.arange(30), sim.methylated[:30], sim.coverage[:30]),
              "chr2": (np.arange(20), np.c_[nothing, sim.methylated[30:, 1]], np.c_[nothing, sim.coverage[30:, 1]])}
    store = write_store(tmp_path / "s.zarr", chroms, ["A", "B"], chunk_size=8)
    block_size = 10_000 if with_blocks else None
    assert moments_graph(store, ["A"], block_size=block_size).chromosomes == ["chr1"]
    assert moments_graph(store, ["B"], block_size=block_size).chromosomes == ["chr1", "chr2"]


@pytest.mark.slow
def test_result_does_not_depend_on_chunk_size_or_workers(tmp_path, four_state_model, dask_clients):
    totals = []
    for chunk_size in (97, 1000):
        store = synthetic_store(tmp_path / f"s{chunk_size}.zarr", four_state_model, [3000, 1500], chunk_size)
        for client in dask_clients:
            totals.append(client.compute(moments_graph(store).total).result())
    for other in totals[1:]:
        assert other.allclose(totals[0], rtol=1e-12)
    # the same graph computed twice is bitwise reproducible
    again = dask_clients[1].compute(moments_graph(store).total).result()
    np.testing.assert_array_equal(again.p123, totals[-1].p123)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lengths=st.lists(st.integers(1, 60), min_size=1, max_size=4), chunk_size=st.integers(2, 25),
       split_every=st.integers(2, 5), seed=st.integers(0, 1000))
def test_any_chunking_property(tmp_path_factory, four_state_model, dask_clients, lengths, chunk_size, split_every,
                               seed):
    store = synthetic_store(tmp_path_factory.mktemp("p") / "s.zarr", four_state_model, lengths, chunk_size, seed)
    meth, cov, lens = load_counts(store)
    got = dask_clients[seed % 2].compute(moments_graph(store, split_every=split_every).total).result()
    assert got.allclose(compute_moments(meth, cov, lens), rtol=1e-10)


def test_chunk_partial_counts_only_triples_ending_in_the_chunk():
    meth = np.array([[1], [2], [0], [3]])
    cov = np.array([[4], [4], [0], [5]])  # the zero-coverage row is skipped
    positions = np.array([200, 300, 400, 500])
    halo = (np.array([[0], [1]]), np.array([[2], [2]]), np.array([0, 100]))
    part = chunk_partial(halo, meth, cov, positions, 5, "chr1", block_size=300)
    assert part.moments.n_triples == 3  # halo(2) + 3 kept rows -> 5 rows -> 3 triples
    whole = compute_moments(np.array([0, 1, 1, 2, 3]), np.array([2, 2, 4, 4, 5]), n_bins=5)
    assert part.moments.allclose(whole)
    # middle bins at 100, 200, 300: blocks 0, 0, 1 of 300 bp
    assert part.blocks.block.tolist() == [0, 1] and part.blocks.n_triples.tolist() == [2, 1]


def test_blocks_add_up_to_the_chunk(four_state_model):
    sim = simulate(four_state_model, [5000], coverage=[[30, 5]] * 4, random_state=3)
    positions = np.arange(5000) * 100
    empty = (np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.int64))
    part = chunk_partial(empty, sim.methylated, sim.coverage, positions, 6, "chr1", block_size=70_000)
    n = part.moments.n_triples
    assert part.blocks.n_triples.sum() == n and len(part.blocks.block) == 8
    np.testing.assert_allclose(part.blocks.p12.sum(axis=0), part.moments.p12, rtol=1e-5)
    np.testing.assert_allclose(part.blocks.p13.sum(axis=0), part.moments.p13, rtol=1e-5)
    for name in ("bin_histogram", "pair_histogram"):
        # the blocks' histograms are at a coarser budget: they hold the same number of tuples
        assert getattr(part.blocks, name).sum() == pytest.approx(n, rel=1e-5)


@pytest.mark.parametrize("n_bins", [0, 1, 2, 3])
def test_a_chunk_of_fewer_than_three_kept_bins_has_no_blocks(four_state_model, n_bins):
    """Its blocks are empty (0, cells) histograms, as a moment store's partial expects."""
    sim = simulate(four_state_model, [5000], coverage=[[30, 5]] * 4, random_state=3)
    empty = (np.zeros((0, 2), np.int64), np.zeros((0, 2), np.int64), np.zeros(0, np.int64))
    part = chunk_partial(empty, sim.methylated[:n_bins], sim.coverage[:n_bins], np.arange(n_bins) * 100, 6, "chr1",
                         block_size=70_000)
    whole = chunk_partial(empty, sim.methylated, sim.coverage, np.arange(5000) * 100, 6, "chr1", block_size=70_000)
    assert part.moments.n_triples == len(part.blocks.block) == max(n_bins - 2, 0)
    for name in ("bin_histogram", "pair_histogram"):
        assert getattr(part.blocks, name).shape == (max(n_bins - 2, 0), getattr(whole.blocks, name).shape[1])


def test_unknown_sample_is_named(tmp_path, four_state_model):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [50], 10)
    with pytest.raises(ValueError, match="unknown sample.* C; the store has A, B"):
        moments_graph(store, ["A", "C"])


@pytest.mark.slow
def test_moments_without_block_statistics_are_the_same(tmp_path, four_state_model, dask_clients):
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [300, 200], chunk_size=90)
    client = dask_clients[1]
    bare = moments_graph(store, block_size=None)
    partials = client.compute(bare.partials, sync=True)
    assert all(p.blocks is None for p in partials)
    got, expected = client.compute([bare.total, moments_graph(store).total], sync=True)
    np.testing.assert_array_equal(got.p123, expected.p123)
    np.testing.assert_array_equal(got.pair_histogram, expected.pair_histogram)


@pytest.mark.slow
def test_short_contigs_share_a_task_and_give_the_same_moments(tmp_path, four_state_model, dask_clients):
    # an assembly's short contigs are summed by one task (one pass of the kernels), not one each
    store = synthetic_store(tmp_path / "s.zarr", four_state_model, [7, 1, 30, 4, 2, 90, 3, 5, 12], chunk_size=40)
    batched, per_chunk = moments_graph(store, block_size=None), moments_graph(store)
    assert batched.n_chunks < per_chunk.n_chunks
    got, expected = dask_clients[0].compute([batched.total, per_chunk.total], sync=True)
    meth, cov, lengths = load_counts(store)
    assert got.allclose(expected) and got.allclose(compute_moments(meth, cov, lengths))


def test_batched_plans_keep_their_order_within_a_chunks_worth():
    from types import SimpleNamespace

    from streambhmm.moments.pipeline import batched_plans

    sizes = [3, 40, 1, 1, 20, 19, 2, 100, 5, 36]
    plans = [SimpleNamespace(ref=SimpleNamespace(n_bins=n)) for n in sizes]
    batches = batched_plans(plans, 40)
    assert [p for batch in batches for p in batch] == plans
    assert all(sum(p.ref.n_bins for p in batch) <= 40 or len(batch) == 1 for batch in batches)
    assert [len(batch) for batch in batches] == [1, 1, 3, 2, 1, 1, 1]
    # and at most MAX_BATCH chunks a task, however short (a task's objects per chunk add up)
    many = [SimpleNamespace(ref=SimpleNamespace(n_bins=1)) for _ in range(600)]
    assert [len(batch) for batch in batched_plans(many, 10_000)] == [512, 88]


def test_the_tree_is_the_same_when_items_come_one_at_a_time():
    # tree_reduce sums a moment store's partials as they are read: the same tree, so the same
    # total bitwise, as the level-by-level reduction of them all
    from streambhmm.moments.pipeline import tree_reduce

    def level_by_level(items, split_every):
        level = list(items)
        while len(level) > 1:
            level = [combine(*level[i:i + split_every]) for i in range(0, len(level), split_every)]
        return level[0]

    def combine(*parts):
        return parts[0] if len(parts) == 1 else ("+", parts)

    for split_every in (2, 3, 8):
        for n in (1, 2, 7, 8, 9, 63, 64, 65, 200):
            assert tree_reduce(iter(range(n)), combine, split_every) == level_by_level(range(n), split_every)
    with pytest.raises(IndexError):
        tree_reduce(iter([]), combine)
