"""The one-pass beta-binomial pieces: the histograms' entry likelihoods against scipy, the
quadrature of a Beta-distributed level against direct integration, and their gradients."""

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln

from streambhmm.learn._emission_kernels import betabinomial_slopes, betabinomial_table, entry_logliks
from streambhmm.learn.overdispersion import QUADRATURE, beta_parameters


@pytest.mark.parametrize("level, dispersion", [(0.02, 0.03), (0.08, 0.15), (0.5, 0.001), (0.45, 0.3), (0.93, 0.02)])
def test_the_quadrature_integrates_smooth_functions_over_the_beta(level, dispersion):
    a, b = beta_parameters(np.array([level]), np.array([dispersion]))
    w, d_a, d_b = QUADRATURE.weights(a, b)
    assert w.sum() == pytest.approx(1.0) and (w >= 0).all()
    x = QUADRATURE.levels
    for g in (lambda p: p, lambda p: p ** 3, lambda p: stats.binom.pmf(5, 20, p)):
        exact = integrate.quad(lambda p: g(p) * stats.beta.pdf(p, a[0], b[0]), 0, 1, limit=400, points=[level])[0]
        assert w[0] @ g(x) == pytest.approx(exact, abs=5e-6)
        step = 1e-6 * a[0]
        numeric = (QUADRATURE.weights(a + step, b)[0][0] - QUADRATURE.weights(a - step, b)[0][0]) @ g(x) / (2 * step)
        assert d_a[0] @ g(x) == pytest.approx(numeric, rel=1e-5, abs=1e-9)
        step = 1e-6 * b[0]
        numeric = (QUADRATURE.weights(a, b + step)[0][0] - QUADRATURE.weights(a, b - step)[0][0]) @ g(x) / (2 * step)
        assert d_b[0] @ g(x) == pytest.approx(numeric, rel=1e-5, abs=1e-9)


def test_entry_likelihoods_are_scipys_and_their_slopes_exact():
    rng = np.random.default_rng(0)
    c = rng.integers(0, 40, 300)
    mu = np.floor(rng.random(300) * (c + 1)).astype(np.int64)
    coef = gammaln(c + 1.0) - gammaln(mu + 1.0) - gammaln(c - mu + 1.0)
    levels, dispersion = np.array([[0.1], [0.6], [0.9]]), np.array([[0.05], [0.2], [0.01]])
    a, b = beta_parameters(levels[:, 0], dispersion[:, 0])
    one_group = (c, mu, coef, np.array([0, 300]), np.array([0]), levels)
    for emission, found in (("betabinomial", entry_logliks(*one_group, a[:, None], b[:, None], True)),
                            ("binomial", entry_logliks(*one_group, levels, levels, False))):
        table, shift, centered = found
        expected = (stats.betabinom.logpmf(mu[:, None], c[:, None], a, b) if emission == "betabinomial" else
                    stats.binom.logpmf(mu[:, None], c[:, None], levels[:, 0]))
        np.testing.assert_allclose(table, expected, rtol=1e-10, atol=1e-10)
        np.testing.assert_array_equal(shift, table.max(axis=1))
        np.testing.assert_array_equal(centered, table - shift[:, None])
    resp = rng.random((300, 3))
    d_a, d_b = np.zeros(3), np.zeros(3)
    betabinomial_slopes(c, mu, resp, a, b, d_a, d_b)

    def weighted(a, b):
        table = np.empty((300, 3))
        betabinomial_table(c, mu, coef, a, b, table)
        return (resp * table).sum()
    for h in range(3):
        step = np.where(np.arange(3) == h, 1e-6, 0.0)
        assert d_a[h] == pytest.approx((weighted(a + step, b) - weighted(a - step, b)) / 2e-6, rel=1e-5)
        assert d_b[h] == pytest.approx((weighted(a, b + step) - weighted(a, b - step)) / 2e-6, rel=1e-5)


def test_the_quadrature_refuses_parameters_of_different_lengths():
    """The compiled weights read b[h] for every a[h]: a shorter b was read past its end (a
    helper's audit: garbage, or a ZeroDivisionError)."""
    with pytest.raises(ValueError, match="vectors of one length"):
        QUADRATURE.weights(np.array([1.0, 2.0, 3.0]), np.array([1.0]))
