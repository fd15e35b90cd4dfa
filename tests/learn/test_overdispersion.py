"""The one-pass beta-binomial pieces: the histograms' entry likelihoods against scipy, the
quadrature of a Beta-distributed level against direct integration, and their gradients."""

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import gammaln

from streambhmm.learn.overdispersion import QUADRATURE, beta_parameters, entry_loglik


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


def test_entry_likelihoods_are_scipys_and_their_gradient_exact():
    rng = np.random.default_rng(0)
    c = rng.integers(0, 40, 300).astype(float)
    mu = np.floor(rng.random(300) * (c + 1))
    coef = gammaln(c + 1) - gammaln(mu + 1) - gammaln(c - mu + 1)
    levels, dispersion = np.array([0.1, 0.6, 0.9]), np.array([0.05, 0.2, 0.01])
    table, gradient = entry_loglik(c, mu, coef, levels, dispersion)
    a, b = beta_parameters(levels, dispersion)
    np.testing.assert_allclose(table, stats.betabinom.logpmf(mu[:, None], c[:, None], a, b), rtol=1e-10, atol=1e-10)
    binomial, _ = entry_loglik(c, mu, coef, levels, None)
    np.testing.assert_allclose(binomial, stats.binom.logpmf(mu[:, None], c[:, None], levels), rtol=1e-10, atol=1e-10)
    resp = rng.random((300, 3))
    d_level, d_scale = gradient(resp)
    for h in range(3):
        step = np.zeros(3)
        step[h] = 1e-6
        up = (resp * entry_loglik(c, mu, coef, levels + step, dispersion)[0]).sum()
        down = (resp * entry_loglik(c, mu, coef, levels - step, dispersion)[0]).sum()
        assert d_level[h] == pytest.approx((up - down) / 2e-6, rel=1e-5)
        scale = (1 - dispersion) / dispersion
        moved = [1 / (1 + scale * np.exp(np.where(np.arange(3) == h, e, 0.0))) for e in (1e-6, -1e-6)]
        up, down = ((resp * entry_loglik(c, mu, coef, levels, r)[0]).sum() for r in moved)
        assert d_scale[h] == pytest.approx((up - down) / 2e-6, rel=1e-5)


def test_the_quadrature_refuses_parameters_of_different_lengths():
    """The compiled weights read b[h] for every a[h]: a shorter b was read past its end (a
    helper's audit: garbage, or a ZeroDivisionError)."""
    with pytest.raises(ValueError, match="vectors of one length"):
        QUADRATURE.weights(np.array([1.0, 2.0, 3.0]), np.array([1.0]))
