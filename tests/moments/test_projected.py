"""The projected feature (many samples): exact relation to the concatenated feature's sums,
invariance to chunking and reduction order, recovery, the moment store, the automatic choice,
and EM on a chunk whose samples are read one at a time."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streambhmm.distributed import chunks as storehmm
from streambhmm.learn.evaluate import matched_error
from streambhmm.moments.features import projected_layout, projection_for, projection_matrix
from streambhmm.learn.model import SpectralBinomialHMM
from streambhmm.moments.histograms import thinned_histogram
from streambhmm.moments.sums import compute_moments
from streambhmm.moments.features import encode
from streambhmm.moments.momentstore import load_total
from streambhmm.testing import assert_opens_with_xarray, update_moment_store
from streambhmm.moments.pipeline import moments_graph, plan_chunks
from streambhmm.testing import load_counts
from streambhmm.learn.simulate import model, simulate
from streambhmm.testing import write_store

from ..app.test_cli import run

STICKY4 = np.full((4, 4), 0.05 / 3) + np.eye(4) * (0.95 - 0.05 / 3)


def group_levels(n_samples: int) -> np.ndarray:
    """Four states; two of them differ between two groups of samples."""
    group = np.arange(n_samples) % 2
    return np.stack([np.full(n_samples, 0.05), np.full(n_samples, 0.92), np.where(group, 0.85, 0.25),
                     np.where(group, 0.45, 0.65)])


def simulated(n_samples, lengths, seed=0, coverage=10.0):
    mdl = model(group_levels(n_samples), STICKY4)
    return mdl, simulate(mdl, lengths, coverage=coverage, random_state=seed)


def test_projected_sums_are_the_beta_sums_projected_in_every_mode():
    """F = R [phi^1; ...; phi^S], and every sum is linear in each F: projecting the
    concatenated feature's sums gives the projected feature's, to rounding."""
    _, sim = simulated(3, [400, 250, 2], seed=1, coverage=6)
    d, k = 10, 7
    beta = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=d)
    proj = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=d, projection_dim=k, projection_seed=5)
    r = projection_matrix(3, d, k, 5).transpose(1, 0, 2).reshape(k, 3 * d)
    assert proj.n_triples == beta.n_triples and proj.dim == k and proj.projected
    for name in ("p12", "p13", "p23"):
        np.testing.assert_allclose(getattr(proj, name), r @ getattr(beta, name) @ r.T, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(proj.p123, np.einsum("abc,ia,jb,kc->ijk", beta.p123, r, r, r), rtol=1e-12, atol=1e-9)
    for name in ("b_methylated", "b_coverage"):
        np.testing.assert_allclose(getattr(proj, name), getattr(beta, name) @ r.T, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(proj.inv_coverage, beta.inv_coverage, rtol=1e-12)
    np.testing.assert_allclose(proj.coverage_features, beta.coverage_features, rtol=1e-12)
    np.testing.assert_array_equal(proj.coverage_histogram, beta.coverage_histogram)
    # the histograms: single bins of each pair of neighbouring samples (a ring), adjacent
    # bins of each sample; each row is the thinned histogram of its own samples
    starts = np.concatenate([np.arange(a, a + n - 2) for a, n in zip(np.r_[0, np.cumsum(sim.lengths)[:-1]],
                                                                      sim.lengths) if n > 2])
    rings = []
    for width, hist in ((1, proj.bin_histogram), (2, proj.pair_histogram)):
        layout = proj.histogram_layout(width)
        assert hist.shape == layout.shape == (3, layout.shape[1])
        for row in range(3):
            samples = layout.slot_samples(row)[:layout.slots // width]
            rings.append(samples.tolist()) if width == 1 else None
            own = encode(sim.methylated[:, samples], sim.coverage[:, samples], d)
            np.testing.assert_allclose(hist[row], thinned_histogram(own, starts + 1, width,
                                                                    layout=layout.row_layout())[0], rtol=1e-12)
    assert rings == [[0, 1], [1, 2], [2, 0]]


def test_the_projected_histograms_grow_linearly_with_the_samples():
    for n_samples in (2, 3, 100, 1000):
        single, pairs = projected_layout(n_samples, 1), projected_layout(n_samples, 2)
        assert single.ring and single.rows == (1 if n_samples == 2 else n_samples)
        assert not pairs.joint and pairs.rows == n_samples
        assert np.prod(single.shape) <= 1 << 19 and np.prod(pairs.shape) <= 1 << 19 and single.cap >= 1
    assert projected_layout(1, 1).rows == 1 and not projected_layout(1, 1).ring


def test_projection_is_seeded_nonnegative_and_sums_to_one_per_sample_bin():
    r = projection_matrix(4, 30, 16, seed=3)
    assert (r >= 0).all() and r.shape == (4, 16, 30)
    np.testing.assert_allclose(r.sum(axis=1), 1.0)
    np.testing.assert_array_equal(r, projection_matrix(4, 30, 16, seed=3))
    np.testing.assert_array_equal(r[:2], projection_matrix(2, 30, 16, seed=3))  # a sample's R: seed and place
    assert not np.allclose(r, projection_matrix(4, 30, 16, seed=4))


@pytest.mark.slow
@given(lengths=st.lists(st.integers(1, 50), min_size=1, max_size=3), chunk_size=st.integers(2, 30),
       split_every=st.integers(2, 5), seed=st.integers(0, 10_000))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_store_moments_of_the_projected_feature_do_not_depend_on_chunks_or_reduction(
        tmp_path_factory, dask_clients, lengths, chunk_size, split_every, seed):
    _, sim = simulated(3, lengths, seed=seed, coverage=4)
    gone = np.random.default_rng(seed).random(sim.coverage.shape) < 0.3
    meth, cov = np.where(gone, 0, sim.methylated), np.where(gone, 0, sim.coverage)
    bounds = np.r_[0, np.cumsum(lengths)]
    chroms = {f"chr{i + 1}": (np.arange(n), meth[a:b], cov[a:b]) for i, (n, a, b) in
              enumerate(zip(lengths, bounds[:-1], bounds[1:])) if cov[a:b].any()}
    if not chroms:
        return
    store = write_store(tmp_path_factory.mktemp("p") / "s.zarr", chroms, ["A", "B", "C"], chunk_size=chunk_size)
    expected = compute_moments(*load_counts(store), n_bins=8, projection_dim=6)
    got = dask_clients[seed % 2].compute(moments_graph(store, n_bins=8, split_every=split_every,
                                                       projection_dim=6).total).result()
    assert got.projected and got.allclose(expected, rtol=1e-10)


@pytest.mark.slow
def test_the_refined_fit_recovers_levels_of_many_samples(tmp_path):
    n_samples = 8
    mdl, sim = simulated(n_samples, [150_000], seed=2, coverage=12)
    mom = compute_moments(sim.methylated, sim.coverage, projection_dim=32)
    for method in ("ftd", "refined"):
        est = SpectralBinomialHMM(4, method=method, random_state=0).fit_moments(mom)
        assert est.spectrum_supported_
        err = matched_error(mdl.methylation, est.methylation_)
        assert err.methylation_error / mdl.methylation.size < 0.01, method


def test_auto_projects_above_64_dimensions():
    assert projection_for("auto", 2, 30) == 0 and projection_for("auto", 3, 30) == 32
    assert projection_for("beta", 100, 30) == 0 and projection_for("projected", 1, 30, 12) == 12
    with pytest.raises(ValueError, match="feature must be one of"):
        projection_for("pca", 3, 30)


@pytest.fixture(scope="module")
def five_sample_store(tmp_path_factory):
    _, sim = simulated(5, [12_000, 6_000], seed=3, coverage=10)
    chroms = {"chr1": (np.arange(12_000), sim.methylated[:12_000], sim.coverage[:12_000]),
              "chr2": (np.arange(6_000), sim.methylated[12_000:], sim.coverage[12_000:])}
    return write_store(tmp_path_factory.mktemp("p") / "s.zarr", chroms, [f"S{i}" for i in range(5)],
                       chunk_size=5_000)


@pytest.mark.slow
def test_projected_moment_store_resumes_and_fits(tmp_path, five_sample_store, dask_clients):
    out = tmp_path / "m.zarr"
    client = dask_clients[1]
    first = update_moment_store(five_sample_store, out, client, projection_dim=16, block_size=100_000)
    again = update_moment_store(five_sample_store, out, client, projection_dim=16)
    assert (again.computed, again.reused) == (0, first.computed)
    assert_opens_with_xarray(out)  # its empty block coverage features included
    total, manifest = load_total(out)
    assert manifest["feature"]["kind"] == "projected" and manifest["feature"]["dim"] == 16
    assert total.allclose(compute_moments(*load_counts(five_sample_store), projection_dim=16), rtol=1e-10)
    r = run("moments", five_sample_store.path, "-o", out, "--feature", "beta", "-q")
    assert r.exit_code == 1 and "mismatched feature settings" in r.output
    r = run("fit", out, "-m", "4", "-o", tmp_path / "model.json", "--bootstrap", "3", "--emission", "binomial")  # the intervals' shape
    assert r.exit_code == 0, r.output
    import json

    document = json.loads((tmp_path / "model.json").read_text())
    assert document["feature"] == {"kind": "projected", "n_bins": 30, "dim": 16, "seed": 0}
    assert np.array(document["methylation_ci"]).shape == (4, 5, 2)
    r = run("fit", out, "-m", "4", "-o", tmp_path / "x.json", "--feature", "beta")
    assert r.exit_code == 1 and "projected feature, not --feature beta" in r.output


@pytest.mark.parametrize("emission", ["binomial", "betabinomial"])
def test_em_statistics_read_one_sample_at_a_time_equal_the_in_memory_ones(five_sample_store, monkeypatch, emission):
    mdl = model(group_levels(5), STICKY4)
    from streambhmm.learn.hmm import BinomialHMM

    dispersion = np.linspace(0.01, 0.2, 4 * 5).reshape(4, 5) if emission == "betabinomial" else None
    hmm = BinomialHMM(4, emission=emission).start_from(mdl.startprob, mdl.transmat, mdl.methylation, dispersion)
    params = storehmm.Params.of(hmm)
    plans = plan_chunks(five_sample_store, five_sample_store.samples)
    together = [storehmm._chunk_stats(None, None, p.ref, params, True) for p in plans]
    monkeypatch.setattr(storehmm, "IN_MEMORY_CELLS", 0)
    apart = [storehmm._chunk_stats(None, None, p.ref, params, True) for p in plans]
    for (a, post_a, data_a), (b, post_b, data_b) in zip(together, apart):
        np.testing.assert_array_equal(data_a.rows, data_b.rows)
        np.testing.assert_allclose(post_a, post_b, rtol=1e-10, atol=1e-12)
        for name in ("loglik", "start", "trans", "methylated", "coverage"):
            np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-10, atol=1e-9)
        if emission == "betabinomial":  # the dispersion M-step's weights of each sample's distinct pairs
            assert len(a.pairs) == len(b.pairs) == 5
            for pairs_a, pairs_b in zip(a.pairs, b.pairs):
                np.testing.assert_array_equal(pairs_a.keys, pairs_b.keys)
                np.testing.assert_allclose(pairs_a.weights, pairs_b.weights, rtol=1e-10, atol=1e-9)
        else:
            assert a.pairs is None and b.pairs is None
