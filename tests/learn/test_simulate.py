import numpy as np

from streambhmm import match_states, matched_error, paper_model, simulate
from streambhmm.learn.simulate import model, stationary_distribution


def test_paper_model_follows_the_protocol():
    for seed in range(20):
        m = paper_model(seed)
        p = m.methylation[:, 0]
        assert ((0 <= p[:2]) & (p[:2] <= 0.3)).all() and ((0.7 <= p[2:]) & (p[2:] <= 1)).all()
        np.testing.assert_allclose(m.transmat.sum(axis=1), 1.0)
        assert (np.diag(m.transmat) >= 0.2).all()
        assert m.startprob.sum() == np.float64(1.0) or abs(m.startprob.sum() - 1) < 1e-12


def test_simulated_chain_has_the_model_statistics():
    truth = model([[0.1, 0.5], [0.8, 0.3], [0.5, 0.9]],
                  [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.2, 0.2, 0.6]])
    cov = np.array([[30, 5], [10, 10], [20, 40]])
    sim = simulate(truth, [100_000, 50_000, 3], coverage=cov, random_state=0)
    assert sim.coverage.shape == (150_003, 2)
    h = sim.states
    freq = np.bincount(h, minlength=3) / h.size
    np.testing.assert_allclose(freq, stationary_distribution(truth.transmat), atol=0.01)
    # transitions counted only inside sequences
    inside = np.ones(h.size - 1, bool)
    inside[np.cumsum(sim.lengths)[:-1] - 1] = False
    counts = np.zeros((3, 3))
    np.add.at(counts, (h[:-1][inside], h[1:][inside]), 1)
    np.testing.assert_allclose(counts / counts.sum(1, keepdims=True), truth.transmat, atol=0.01)
    for state in range(3):
        sel = h == state
        np.testing.assert_allclose(sim.coverage[sel].mean(0), cov[state], rtol=0.02)
        np.testing.assert_allclose(sim.methylated[sel].sum(0) / sim.coverage[sel].sum(0),
                                   truth.methylation[state], atol=0.01)


def test_matched_error_undoes_a_permutation():
    p = np.array([[0.1, 0.2], [0.9, 0.8], [0.5, 0.4]])
    t = np.array([[0.8, 0.1, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]])
    perm = np.array([2, 0, 1])
    inv = np.argsort(perm)
    est_p, est_t = p[inv], t[np.ix_(inv, inv)]
    np.testing.assert_array_equal(match_states(p, est_p), perm)
    err = matched_error(p, est_p, t, est_t, np.ones(3) / 3, np.ones(3) / 3)
    assert err.methylation_error == 0 and err.transmat_error == 0 and err.startprob_error == 0
    assert matched_error(p, p + 0.01).methylation_error == np.float64(0.06) or \
        abs(matched_error(p, p + 0.01).methylation_error - 0.06) < 1e-12
