import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambhmm.io.storage import Location
from streambhmm.moments import moment_kernels
from streambhmm.moments.features import COVERAGE_HISTOGRAM_TOP, encode
from streambhmm.moments.momentstore import partial_sha256, read_partial, write_partial
from streambhmm.moments.pipeline import ChunkPartial, chunk_partial, empty_halo
from streambhmm.moments.sums import Moments, compute_moments
from streambhmm.testing.reference import naive_moments
from streambhmm.learn.simulate import population_moments, simulate


@st.composite
def counts_and_lengths(draw):
    n_samples = draw(st.integers(1, 3))
    lengths = draw(st.lists(st.integers(0, 25), min_size=1, max_size=5))
    n = sum(lengths)
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    cov = rng.poisson(draw(st.sampled_from([0.5, 4.0, 30.0])), (n, n_samples))
    mu = rng.binomial(cov, rng.uniform(0, 1, (n, n_samples)))
    n_bins = draw(st.integers(1, 8))
    return mu, cov, lengths, n_bins


@settings(max_examples=60, deadline=None)
@given(counts_and_lengths())
def test_grouped_kernel_equals_naive_einsum(case):
    mu, cov, lengths, n_bins = case
    fast = compute_moments(mu, cov, lengths, n_bins=n_bins)
    slow = naive_moments(mu, cov, lengths, n_bins=n_bins)
    assert fast.n_triples == slow.n_triples == sum(max(length - 2, 0) for length in lengths)
    assert fast.allclose(slow, rtol=1e-10)


def test_a_bin_of_millions_of_reads_does_not_widen_the_coverage_histogram():
    """Its width was the deepest bin's coverage: one 100 bp bin of 5e8 reads asked a partial
    for 4 GB, and deep 5 kb bins made `pmd` take 0.9 GB. Deeper bins count at the top, in
    the last coverage bucket, as in the oracle; the projected feature counts them alike."""
    rng = np.random.default_rng(3)
    cov = rng.poisson(20, (300, 2))
    cov[150, 0], cov[151, 1] = 500_000_000, COVERAGE_HISTOGRAM_TOP + 1
    mu = rng.binomial(cov, 0.5)
    fast = compute_moments(mu, cov, n_bins=4)
    assert fast.coverage_histogram.shape == (2, COVERAGE_HISTOGRAM_TOP + 1)
    assert fast.coverage_histogram[:, COVERAGE_HISTOGRAM_TOP].tolist() == [1, 1]
    np.testing.assert_array_equal(fast.coverage_histogram, naive_moments(mu, cov, n_bins=4).coverage_histogram)
    projected = compute_moments(mu, cov, n_bins=4, projection_dim=3)
    np.testing.assert_array_equal(projected.coverage_histogram, fast.coverage_histogram)


@settings(max_examples=60, deadline=None)
@given(counts_and_lengths(), st.integers(1, 5), st.integers(1, 9))
def test_the_triple_kernel_is_the_same_whatever_its_blocks_and_pieces(case, block, piece):
    """Groups split into pieces of a few runs (several gathers, loop and BLAS sums mixed in
    one group) and GEMMs of a few groups give the naive sums."""
    mu, cov, lengths, n_bins = case
    features = encode(mu, cov, n_bins)
    starts = moment_kernels.triple_starts(np.array(lengths, np.int64))
    out = Moments.zeros(mu.shape[1], n_bins)
    moment_kernels.accumulate_triples(features.codes, starts, features.table, features.coverage.astype(np.float64),
                                      features.methylated.astype(np.float64), out.p12, out.p13, out.p23, out.p123,
                                      out.b_methylated, out.b_coverage, out.inv_coverage, block, piece)
    slow = naive_moments(mu, cov, lengths, n_bins=n_bins)
    for name in ("p12", "p13", "p23", "p123", "b_methylated", "b_coverage", "inv_coverage"):
        expected = getattr(slow, name)
        np.testing.assert_allclose(getattr(out, name), expected, rtol=0, atol=1e-10 * max(np.abs(expected).max(), 1))


@settings(max_examples=40, deadline=None)
@given(counts_and_lengths(), st.data())
def test_sums_of_split_sequences_equal_the_whole(case, data):
    """Cutting the sequences anywhere and adding the parts' moments changes nothing
    when each part carries the two bins before it (the chunk halo)."""
    mu, cov, lengths, n_bins = case
    whole = compute_moments(mu, cov, lengths, n_bins=n_bins)
    parts = []
    offset = 0
    for length in lengths:
        cuts = sorted(data.draw(st.lists(st.integers(0, length), max_size=4)))
        bounds = [0, *cuts, length]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi > lo:
                start = offset + max(lo - 2, 0)
                parts.append(compute_moments(mu[start:offset + hi], cov[start:offset + hi], n_bins=n_bins))
        offset += length
    total = sum(parts, Moments.zeros(mu.shape[1] if mu.ndim > 1 else 1, n_bins))
    assert total.allclose(whole, rtol=1e-10)


def test_no_triple_crosses_a_sequence_boundary():
    # two sequences whose bins are all distinct: any crossing triple would add a term
    mu = np.array([0, 0, 0, 5, 5, 5])
    cov = np.array([5, 5, 5, 5, 5, 5])
    split = compute_moments(mu, cov, [3, 3], n_bins=4)
    assert split.n_triples == 2
    first = compute_moments(mu[:3], cov[:3], n_bins=4)
    second = compute_moments(mu[3:], cov[3:], n_bins=4)
    assert split.allclose(first + second)
    assert not split.allclose(compute_moments(mu, cov, n_bins=4) + Moments.zeros(1, 4))


@pytest.mark.slow
def test_empirical_moments_approach_population_moments(four_state_model):
    """Independent check of population_moments: a long simulation's means agree with it
    to a few sampling standard errors, and much better than a wrong model does."""
    sim = simulate(four_state_model, [400_000], coverage=20.0, random_state=3)
    emp = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=10)
    pop = population_moments(four_state_model, n_bins=10, coverage=20.0, n_triples=emp.n_triples)
    n = emp.n_triples
    for name in ("p12", "p13", "p23", "p123"):
        diff = np.abs(getattr(emp, name) - getattr(pop, name)).max() / n
        assert diff < 4e-3, name
    np.testing.assert_allclose(emp.b_coverage / n, pop.b_coverage / n, rtol=0, atol=0.1)
    np.testing.assert_allclose(emp.inv_coverage / n, pop.inv_coverage / n, rtol=2e-3)
    wrong = population_moments(four_state_model, n_bins=10, coverage=30.0, n_triples=n)
    assert np.abs(emp.p123 - wrong.p123).max() / n > 5 * np.abs(emp.p123 - pop.p123).max() / n


def test_add_requires_same_feature_settings():
    with pytest.raises(ValueError, match="different feature settings"):
        Moments.zeros(1, 30) + Moments.zeros(1, 20)
    with pytest.raises(ValueError, match="different feature settings"):
        Moments.zeros(2, 30) + Moments.zeros(1, 30)


def test_save_and_load_round_trip(tmp_path):
    # the moment store's partials are where Moments are written (the .npz file format is gone;
    # its newer-version refusal is the moment store's: test_momentstore "newer")
    rng = np.random.default_rng(0)
    cov = rng.poisson(10, (200, 2))
    mom = compute_moments(rng.binomial(cov, 0.5), cov, [100, 100], n_bins=6)
    blocks = chunk_partial(empty_halo(2), rng.binomial(cov, 0.5), cov, np.arange(200) * 100, 6, "chr1").blocks
    partial = ChunkPartial(mom, blocks)
    path = tmp_path / "m"
    write_partial(Location.of(path), partial, {}, partial_sha256(partial))
    back = read_partial(Location.of(path))[0].moments
    assert back.allclose(mom, rtol=0)
    assert back.n_triples == mom.n_triples == 196
    assert os.listdir(tmp_path) == ["m"]  # no temporary left behind
    umask = os.umask(0)
    os.umask(umask)
    assert (path / "zarr.json").stat().st_mode & 0o777 == 0o666 & ~umask  # the user's permissions, not 0600


@settings(max_examples=30, deadline=None)
@given(counts_and_lengths())
def test_coverage_features_per_triple_equal_the_product_over_codes(case):
    """The block statistics' kernel (per triple) against coverage_features (per code)."""
    from streambhmm.moments import moment_kernels
    from streambhmm.moments.features import coverage_bucket, encode
    from streambhmm.moments.histograms import coverage_features

    mu, cov, lengths, n_bins = case
    features = encode(mu, cov, n_bins)
    starts = moment_kernels.triple_starts(np.asarray(lengths, np.int64))
    expected = coverage_features(features, starts)
    got = np.zeros_like(expected)
    moment_kernels.add_coverage_features(features.codes, starts, coverage_bucket(features.coverage), features.table, got)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
