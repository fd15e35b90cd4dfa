"""The refinement's expected-feature tables: the compiled binomial mixtures against dense sums."""

import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import binom

from streambhmm.learn._expected_kernels import LOG_FLOOR_BELOW_PEAK, LOG_SMALLEST_TERM, binomial_mixtures, edge_tails
from streambhmm.learn.expected import GRID_POINTS, ExpectedFeatures, _coverage_buckets
from streambhmm.moments.features import log_binomial_pmf, log_factorials


def dense_tables(histogram, n_bins, grid_points=GRID_POINTS):
    """ExpectedFeatures' tables as full matrix products over every mu (the kernel's reference)."""
    grid = np.linspace(0.0, 1.0, grid_points + 1)
    edges = np.arange(n_bins + 1) / n_bins
    values, slopes = np.zeros((grid.size, n_bins)), np.zeros((grid.size, n_bins))
    for c, w in zip(*_coverage_buckets(histogram)):
        pmf_x = np.exp(log_binomial_pmf(c + 1, edges, log_factorials(c + 1)))
        lower = np.cumsum(pmf_x, axis=1)[:, :-1].T
        upper = np.cumsum(pmf_x[:, ::-1], axis=1)[:, ::-1][:, 1:].T
        pmf_p = np.exp(log_binomial_pmf(c, grid, log_factorials(c)))
        in_upper = edges[None, :-1] >= grid[:, None]
        values += w * np.where(in_upper, -np.diff(pmf_p @ lower, axis=1), np.diff(pmf_p @ upper, axis=1))
        if c > 0:
            pmf_q = np.exp(log_binomial_pmf(c - 1, grid, log_factorials(c - 1)))
            slopes += w * c * np.diff(pmf_q @ (upper[1:] - upper[:-1]), axis=1)
    return values, slopes


@pytest.mark.parametrize("n", [0, 1, 7, 130, 4000])
def test_binomial_mixtures_equal_the_dense_sums(n):
    """Both mixtures: of the rows under Bin(n, p), and of the steps under Bin(n - 1, p), whose
    weights the kernel takes from the first's."""
    rng = np.random.default_rng(n)
    levels = np.array([0.0, 1e-4, 0.013, 0.3, 0.5, 0.71, 0.999, 1.0])
    rows = rng.uniform(-1, 1, (n + 1, 5))
    steps = rng.uniform(-1, 1, (n, 3))
    log_factorial = gammaln(np.arange(n + 1) + 1.0)
    got, got_steps = binomial_mixtures(n, levels, log_factorial, rows, steps, LOG_FLOOR_BELOW_PEAK)
    # the same log-pmf over every k (scipy's pmf differs from it by ~1e-12 at n = 4000: the
    # rounding of log n!), and scipy's where that is exact enough
    expected = np.exp(log_binomial_pmf(n, levels, log_factorials(n))) @ rows
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-15)
    scipy = binom.pmf(np.arange(n + 1)[None, :], n, levels[:, None]) @ rows
    np.testing.assert_allclose(got, scipy, rtol=0, atol=1e-10)
    if n == 0:
        np.testing.assert_array_equal(got_steps, np.zeros((levels.size, 3)))
        return
    # its weights come from Bin(n)'s log-pmf, which rounds otherwise than Bin(n - 1)'s (by ~1e-11
    # at n = 4,000, as both differ from scipy's)
    expected_steps = np.exp(log_binomial_pmf(n - 1, levels, log_factorials(n - 1))) @ steps
    np.testing.assert_allclose(got_steps, expected_steps, rtol=1e-10, atol=1e-15)
    scipy_steps = binom.pmf(np.arange(n)[None, :], n - 1, levels[:, None]) @ steps
    np.testing.assert_allclose(got_steps, scipy_steps, rtol=0, atol=1e-10)


def test_edge_tails_equal_the_cumulative_sums():
    """The binomial tails at each edge, summed from each end as numpy sums them, and their steps."""
    edges = np.arange(9) / 8
    for n in (1, 2, 9, 300, 5000):
        log_factorial = log_factorials(n)
        with np.errstate(divide="ignore"):
            rows, steps = edge_tails(n, np.log(edges), np.log1p(-edges), log_factorial)
        pmf = np.exp(log_binomial_pmf(n, edges, log_factorial))
        lower = np.cumsum(pmf, axis=1)[:, :-1].T
        upper = np.cumsum(pmf[:, ::-1], axis=1)[:, ::-1][:, 1:].T
        # (terms below exp(LOG_SMALLEST_TERM), 1.6e-270, are left out)
        np.testing.assert_allclose(rows, np.hstack([upper, lower]), rtol=1e-14, atol=1e-269)
        np.testing.assert_allclose(steps, upper[1:] - upper[:-1], rtol=1e-12, atol=1e-15)
        assert rows[:, 0].max() == 0.0 and rows[:, len(edges)].min() == 1.0  # x = 0: Y = 0
        assert rows[:, len(edges) - 1].min() == 1.0 and rows[:, -1].max() == 0.0  # x = 1: Y = n


@pytest.mark.parametrize("n", [700, 10_000])
def test_the_tails_leave_the_mixtures_no_subnormal_product(n):
    """binomial_mixtures weighs the tails by at least 1.4e-33 (the smallest weight or slope
    weight at the grid's levels up to 10,000 reads; 9e-37 here for a margin): the tails and
    their steps are 0 or large enough that no product is subnormal (such products made it 2x
    slower). At edges far from the mode the tails went down to exp(-750) before."""
    edges = np.arange(31) / 30
    with np.errstate(divide="ignore"):
        rows, steps = edge_tails(n, np.log(edges), np.log1p(-edges), log_factorials(n))
    for table in (rows, steps):
        nonzero = np.abs(table[table != 0])
        assert nonzero.min() >= np.exp(LOG_SMALLEST_TERM)
        assert (nonzero * 9e-37 >= np.finfo(np.float64).tiny).all()
    assert (rows == 0).sum() > (rows.shape[0] * 2)  # beyond the two edges where a tail is all 0


def test_expected_features_equal_the_dense_tables():
    """Exact coverages, geometric buckets up to the largest tabulated coverage (10,000), and
    an empty bucket's neighbours: the tables agree to rounding."""
    histogram = np.zeros(12_000)
    histogram[[0, 1, 2, 5, 30, 128, 129, 700, 701, 3000, 11_999]] = [4, 9, 3, 7, 2, 1, 5, 2, 2, 1, 1]
    table = ExpectedFeatures(histogram, n_bins=8)
    values, slopes = dense_tables(histogram, 8)
    np.testing.assert_allclose(table.values, values, rtol=1e-12, atol=1e-15)
    # (the slopes' weights come from the values' pmf: its rounding, not Bin(c - 1)'s)
    np.testing.assert_allclose(table.slopes, slopes, rtol=1e-10, atol=1e-13 * np.abs(slopes).max())


def test_expected_features_in_threads_are_bitwise_those_computed_in_turn():
    """SampleCoverage computes the coverages' terms in a thread pool; they are summed in the
    coverages' order, so the tables are the same to the last bit."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(3)
    histogram = np.zeros(4_000)
    histogram[rng.integers(0, histogram.size, 300)] = rng.integers(1, 50, 300)
    alone = ExpectedFeatures(histogram, n_bins=30)
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = ExpectedFeatures(histogram, n_bins=30, mapper=pool.map)
    np.testing.assert_array_equal(threaded.values, alone.values)
    np.testing.assert_array_equal(threaded.slopes, alone.slopes)


def test_expected_features_give_the_kernel_rows_in_one_layout(monkeypatch):
    """The kernel is compiled once per layout of its rows (numba types C and F arrays apart):
    every call gets C order, so a new installation's first fit compiles it once."""
    import streambhmm.learn.expected as expected

    layouts = set()

    def recording(n, levels, log_factorial, rows, steps, log_floor):
        for table in (rows, steps):
            layouts.add("C" if table.flags.c_contiguous else "F" if table.flags.f_contiguous else "neither")
        return binomial_mixtures(n, levels, log_factorial, rows, steps, log_floor)

    monkeypatch.setattr(expected, "binomial_mixtures", recording)
    histogram = np.zeros(200)
    histogram[[0, 1, 3, 40, 150]] = [2, 5, 1, 3, 1]
    ExpectedFeatures(histogram, n_bins=8)
    assert layouts == {"C"}


def test_coverages_above_the_largest_tabulated_share_one_term():
    """Buckets beyond LARGEST_TABULATED_COVERAGE are all tabulated at it: one term, their weights
    summed (the tables of 8 buckets of a deep methylome's 5 kb bins were the same table 8 times)."""
    from streambhmm.learn.expected import LARGEST_TABULATED_COVERAGE

    histogram = np.zeros(40_000)
    histogram[[3, 500, 12_000, 15_000, 20_000, 39_999]] = [1, 2, 3, 4, 5, 6]
    coverages, weights = _coverage_buckets(histogram)
    np.testing.assert_array_equal(coverages, [3, 500, LARGEST_TABULATED_COVERAGE])
    np.testing.assert_allclose(weights, np.array([1, 2, 18]) / 21)
