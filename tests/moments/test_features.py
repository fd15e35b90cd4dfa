import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad
from scipy.stats import beta as beta_dist

from streambhmm.io.limits import COUNT_MAX
from streambhmm.moments.features import (_DIRECT_KEY_LIMIT, HISTOGRAM_MAX_CAP, KEPT_COVERAGE, SMALLEST_FEATURE,
                                         THINNING_FLOOR, _beta_map_of_coverage, _kept_table, beta_map, encode,
                                         flush_subnormals, log_factorials, pair_keys, pairs_from_keys, thinning)


def integrated_beta(c, mu, n_bins):
    """Independent reference: integrate the Beta(mu+1, c-mu+1) density over each bin."""
    dist = beta_dist(mu + 1, c - mu + 1)
    mean, sd = dist.mean(), dist.std()
    out = []
    for i in range(n_bins):
        lo, hi = i / n_bins, (i + 1) / n_bins
        # integrate only where the density lives, so quad sees it at high coverage
        a, b = max(lo, mean - 40 * sd), min(hi, mean + 40 * sd)
        out.append(quad(dist.pdf, a, b, epsabs=1e-14, epsrel=1e-12, limit=200)[0] if a < b else 0.0)
    return np.array(out)


@pytest.mark.parametrize("c,mu", [(0, 0), (1, 0), (1, 1), (10, 3), (37, 37), (200, 17), (5000, 4100), (10**6, 312_345)])
def test_beta_map_matches_integrated_density(c, mu):
    got = beta_map(np.array([c]), np.array([mu]), 30)[0]
    np.testing.assert_allclose(got, integrated_beta(c, mu, 30), atol=1e-11)
    assert abs(got.sum() - 1.0) < 1e-12
    assert (got >= 0).all()


def exact_beta_maps(c, n_bins):
    """Independent reference: the Beta maps of every pair of coverage c (row mu), each bin the
    exact difference of two binomial tails P(Y > mu), Y ~ Bin(c + 1, i / D), in integers."""
    n = c + 1
    comb = [1] * (n + 1)
    for k in range(1, n + 1):
        comb[k] = comb[k - 1] * (n - k + 1) // k
    tails = []  # D^n P(Y > mu) at each edge, mu = 0..c
    for i in range(n_bins + 1):
        terms = [comb[k] * i**k * (n_bins - i) ** (n - k) for k in range(n + 1)]
        tails.append(np.cumsum(terms[::-1], dtype=object)[::-1][1:])
    return np.array([[float(Fraction(int(tails[i + 1][mu] - tails[i][mu]), n_bins**n)) for i in range(n_bins)]
                     for mu in range(c + 1)])


@pytest.mark.parametrize("c,n_bins", [(KEPT_COVERAGE + 1, 30), (400, 7), (400, 30), (1100, 7)])
def test_deep_pairs_keep_their_relative_precision_in_both_tails(c, n_bins):
    """Every pair of a deep coverage against exact integer tails: bins in both tails down to
    the smallest normal double (2.2e-308) within 1e-12 relative (scipy's betainc was off by
    up to 100% there), and those below it (flushed by the moment sums) within that of zero."""
    got = beta_map(np.full(c + 1, c), np.arange(c + 1), n_bins)
    exact = exact_beta_maps(c, n_bins)
    normal = exact >= np.finfo(float).tiny
    assert exact[normal].min() < 1e-300  # the far tails are in the comparison
    np.testing.assert_allclose(got[normal], exact[normal], rtol=1e-12, atol=0)
    assert np.abs(got[~normal]).max(initial=0.0) < np.finfo(float).tiny


@pytest.mark.parametrize("c,mu,n_bins,bins,expected", [
    # the largest coverage a store holds: n = c + 1 = 2^32, whose square overflows int64
    (COUNT_MAX, 2**31 - 1, 30, slice(14, 16), [0.50000608737610440386, 0.49999391262389559614]),
    # an edge 37.5 standard deviations out: the tail's terms are subnormal until summed
    (COUNT_MAX - 1, 2146254846, 2, slice(1, 2), [4.5999046230470476921e-308]),
])
def test_the_deepest_pairs_against_high_precision_references(c, mu, n_bins, bins, expected):
    """Known answers from mpmath at 40 digits (a continued fraction for the incomplete beta
    function, checked against exact integer tails), at depths no exact sum here reaches."""
    got = beta_map(np.array([c]), np.array([mu]), n_bins)[0]
    np.testing.assert_allclose(got[bins], expected, rtol=1e-12)
    assert abs(got.sum() - 1.0) < 1e-13


def test_very_deep_pairs_match_scipy_betainc_away_from_underflow():
    """Pairs far deeper than the exact reference reaches, against scipy's incomplete beta
    functions (each bin from the tail below it), where those are far from underflow."""
    from scipy.special import betainc, betaincc

    rng = np.random.default_rng(7)
    c = rng.integers(KEPT_COVERAGE + 1, 2_000_000, 400)
    mu = rng.binomial(c, rng.uniform(size=c.size))
    mu[:3], mu[3:6] = 0, c[3:6]  # every bin below the mean, and every bin at or above it
    for n_bins in (1, 2, 30):
        a, b = (mu + 1.0)[:, None], (c - mu + 1.0)[:, None]
        edges = np.arange(n_bins + 1) / n_bins
        reference = np.where(edges[:-1] >= a / (a + b), -np.diff(betaincc(a, b, edges), axis=1),
                             np.diff(betainc(a, b, edges), axis=1))
        got = beta_map(c, mu, n_bins)
        far = reference < 1e-200
        np.testing.assert_allclose(got[~far], reference[~far], rtol=1e-10, atol=1e-300)
        assert (got >= 0).all() and (got[far] < 1e-190).all()
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-13)


@pytest.mark.parametrize("cap", [1, 8, 256])
def test_thinning_is_the_exact_hypergeometric_law_to_the_deepest_count(cap):
    """A pair deeper than the cap spreads over j = 0..cap methylated reads by the
    hypergeometric law; against exact fractions, from one read over the cap to COUNT_MAX
    (where a table of log-factorials would take 34 GB): the entries at or above the floor,
    and only those, kept within 2e-14 relative, between lo and hi. Pairs within the cap are
    their own cell."""
    pairs = sorted({(c, mu) for c in (cap + 1, cap + 2, 1000, 123_457, COUNT_MAX)
                    for mu in (0, 1, 2, c // 100, c // 3, c // 2, c - 1, c)} | {(0, 0), (cap, 1), (cap, cap)})
    c, mu = (np.array(column, dtype=np.int64) for column in zip(*pairs))
    got = thinning(c, mu, cap)
    within = c <= cap
    assert (got.row[within] == -1).all() and (got.base[within] == pair_keys(mu[within], c[within])).all()
    assert (got.base[~within] == pair_keys(np.array(0), np.array(cap))).all()
    assert (got.row[~within] == np.arange((~within).sum())).all()
    for r, (cc, mm) in enumerate(zip(c[~within].tolist(), mu[~within].tolist())):
        total = math.comb(cc, cap)
        exact = np.array([float(Fraction(math.comb(mm, j) * math.comb(cc - mm, cap - j), total))
                          for j in range(cap + 1)])
        kept = np.flatnonzero(exact >= THINNING_FLOOR)
        assert (got.lo[r], got.hi[r]) == (kept[0], kept[-1])
        assert np.array_equal(got.rows[r] > 0, exact >= THINNING_FLOOR)
        np.testing.assert_allclose(got.rows[r, kept], exact[kept], rtol=2e-14)


@pytest.mark.parametrize("coverage, methylated, cap", [([3], [1], -1), ([1031], [1031], HISTOGRAM_MAX_CAP + 1),
                                                       ([10], [-100], 5), ([10], [12], 5)])
def test_thinning_refuses_what_its_compiled_rows_cannot_hold(coverage, methylated, cap):
    """Out-of-range caps overflowed the mode's product (inf rows) or wrote outside the rows,
    as did counts outside 0..c: refused instead."""
    with pytest.raises(ValueError):
        thinning(np.array(coverage), np.array(methylated), cap)


def test_the_tables_kept_for_shallow_coverages_give_each_pairs_own_map_bitwise():
    """Every chunk holds the same shallow pairs (a store of short contigs has a chunk per
    contig), so their tables are kept for the process: a lookup must be what the pair's own
    computation gives, pairs of one coverage alone or with others, and nobody may change them."""
    rng = np.random.default_rng(3)
    for n_bins in (1, 7, 30):
        edges = np.arange(n_bins + 1) / n_bins
        for c in (0, 1, 2, 17, KEPT_COVERAGE):
            alone = [_beta_map_of_coverage(c, np.array([mu]), edges, log_factorials(c + 1))[0] for mu in range(c + 1)]
            assert np.array_equal(_kept_table(c, n_bins), np.array(alone))
        c = rng.integers(0, KEPT_COVERAGE + 50, 5000)
        mu = rng.binomial(c, rng.uniform(size=c.size))
        direct = np.array([_beta_map_of_coverage(int(ci), np.array([mi]), edges, log_factorials(ci + 1))[0]
                           if ci <= KEPT_COVERAGE else beta_map(np.array([ci]), np.array([mi]), n_bins)[0]
                           for ci, mi in zip(c, mu)])
        assert np.array_equal(beta_map(c, mu, n_bins), direct)  # deep pairs too: each mapped on its own
    assert _kept_table(5, 30) is _kept_table(5, 30) and not _kept_table(5, 30).flags.writeable


def test_zero_coverage_is_uniform():
    np.testing.assert_allclose(beta_map(np.array([0]), np.array([0]), 7)[0], np.full(7, 1 / 7), rtol=1e-14)


def test_upper_tail_keeps_relative_precision():
    # mass in the last bin when mu = c: 1 - (1 - 1/D)^(c+1), computed without cancellation
    c, d = 2000, 30
    got = beta_map(np.array([c]), np.array([c]), d)[0]
    np.testing.assert_allclose(got[-1], -np.expm1((c + 1) * np.log1p(-1 / d)), rtol=1e-12)
    # the bin just below: (1-1/D)^(c+1) - (1-2/D)^(c+1), tiny but positive and exact
    expected = np.exp((c + 1) * np.log1p(-1 / d)) - np.exp((c + 1) * np.log1p(-2 / d))
    np.testing.assert_allclose(got[-2], expected, rtol=1e-9)


@given(st.lists(st.tuples(st.integers(0, 10**7), st.integers(0, 10**7)), min_size=1, max_size=50))
def test_pair_keys_round_trip(pairs):
    c = np.array([max(a, b) for a, b in pairs])
    mu = np.array([min(a, b) for a, b in pairs])
    c2, mu2 = pairs_from_keys(pair_keys(mu, c))
    np.testing.assert_array_equal(c2, c)
    np.testing.assert_array_equal(mu2, mu)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 60), st.integers(0, 2**31 - 1), st.booleans())
def test_encode_reproduces_features(n_samples, n, seed, huge):
    rng = np.random.default_rng(seed)
    cov = rng.poisson(15, (n, n_samples))
    if huge:  # keys beyond the direct-address limit take the np.unique path
        cov[0, 0] = 5 * int(np.sqrt(_DIRECT_KEY_LIMIT))
    mu = rng.binomial(cov, 0.3)
    ft = encode(mu, cov, 9)
    np.testing.assert_array_equal(ft.coverage[ft.codes], cov)
    np.testing.assert_array_equal(ft.methylated[ft.codes], mu)
    # the Beta map itself, but for entries below SMALLEST_FEATURE: 0, so that no product of
    # three (a tensor entry) is subnormal (the huge coverage's tails go down to 1e-323)
    mapped = beta_map(cov, mu, 9)
    np.testing.assert_array_equal(ft.table[ft.codes], np.where(mapped < SMALLEST_FEATURE, 0.0, mapped))
    kept = ft.table[ft.table > 0]
    assert (kept ** 3 >= np.finfo(np.float64).tiny).all()
    assert len(np.unique(pair_keys(ft.methylated, ft.coverage))) == len(ft.table)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_flush_subnormals_zeroes_only_the_subnormal_entries(dtype):
    tiny = np.finfo(dtype).tiny
    x = np.array([0.0, tiny / 4, -tiny / 2, tiny, -tiny, 0.5, 1e-3], dtype)
    out = flush_subnormals(x)
    assert out is x and out.dtype == dtype
    assert np.array_equal(out, np.array([0.0, 0.0, 0.0, tiny, -tiny, 0.5, 1e-3], dtype))


def test_a_high_coverage_beta_map_in_float32_holds_no_subnormals_once_flushed():
    """The Beta map's far tail is subnormal in float32 (the block statistics' dtype)."""
    table = beta_map(np.array([400]), np.array([2]), 30).astype(np.float32)
    assert ((table != 0) & (np.abs(table) < np.finfo(np.float32).tiny)).any()
    flushed = flush_subnormals(table.copy())
    assert not ((flushed != 0) & (np.abs(flushed) < np.finfo(np.float32).tiny)).any()
    assert np.isclose(flushed.sum(), table.sum(), rtol=1e-6)
