import numpy as np
import pytest

from streambhmm import SpectralBinomialHMM, SpectrumError, compute_moments, simulate
from streambhmm.learn.simulate import model
from streambhmm.learn.spectral import tensor_power_method, truncated_pinv


def test_truncated_pinv_inverts_only_the_top_singular_values():
    rng = np.random.default_rng(0)
    u, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    v, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    s = np.array([5.0, 2.0, 1.0, 1e-9, 1e-10, 0.0])
    a = u @ np.diag(s) @ v.T
    p = truncated_pinv(a, 3)
    expected = v[:, :3] @ np.diag(1 / s[:3]) @ u[:, :3].T
    np.testing.assert_allclose(p, expected, atol=1e-12)
    assert np.abs(p).max() < 10  # a full pseudo-inverse would be ~1e10


def test_tensor_power_method_recovers_an_orthogonal_decomposition():
    rng = np.random.default_rng(1)
    m = 5
    v, _ = np.linalg.qr(rng.standard_normal((m, m)))
    lam = np.array([3.0, 2.5, 2.0, 1.6, 1.2])
    h = np.einsum("j,ij,kj,lj->ikl", lam, v, v, v)
    got_lam, got_v = tensor_power_method(h, np.random.default_rng(2))
    order = np.argsort(-got_lam)
    np.testing.assert_allclose(got_lam[order], lam, atol=1e-10)
    np.testing.assert_allclose(np.abs(got_v[order] @ v), np.eye(m), atol=1e-8)


def test_spectrum_error_when_data_hold_fewer_states():
    two_states = model([[0.1], [0.9]], [[0.95, 0.05], [0.05, 0.95]])
    sim = simulate(two_states, [200_000], coverage=20, random_state=0)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
    assert SpectralBinomialHMM(2, method="ftd", random_state=0).fit_moments(mom).spectrum_supported_
    with pytest.raises(SpectrumError, match=r"do not support 4 states(.|\n)*singular values of P13: \[") as info:
        SpectralBinomialHMM(4, method="ftd", random_state=0).fit_moments(mom)
    assert "noise level" in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.slow
def test_refinement_reports_an_unsupported_spectrum_and_starts_elsewhere():
    three_states = model([[0.1], [0.5], [0.9]], np.full((3, 3), 0.05) + np.eye(3) * 0.85)
    sim = simulate(three_states, [100_000], coverage=20, random_state=0)
    est = SpectralBinomialHMM(5, random_state=0, allow_degenerate=True).fit(sim.methylated, sim.coverage)
    assert not est.spectrum_supported_
    assert "ftd" not in est.starts_ and "quantiles" in est.starts_
