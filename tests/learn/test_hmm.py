import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streambhmm import matched_error
from streambhmm.learn.hmm import BinomialHMM, log_emissions
from streambhmm.learn.simulate import model, simulate

from ..conftest import STICKY, WELL_SEPARATED


def with_params(mdl, **kwargs):
    est = BinomialHMM(mdl.n_components, **kwargs)
    est.startprob_, est.transmat_, est.methylation_ = mdl.startprob, mdl.transmat, mdl.methylation
    return est


def hmmlearn_score(mdl, meth, cov, lengths):
    from hmmlearn.hmm import MultinomialHMM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = MultinomialHMM(n_components=mdl.n_components, n_trials=cov)
        ref.startprob_, ref.transmat_ = mdl.startprob, mdl.transmat
        ref.emissionprob_ = np.hstack([mdl.methylation, 1 - mdl.methylation])
        return ref.score(np.column_stack([meth, cov - meth]), lengths)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), lengths=st.lists(st.integers(1, 400), min_size=1, max_size=4),
       coverage=st.sampled_from([0.5, 5.0, 40.0]))
def test_score_equals_hmmlearn(seed, lengths, coverage):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 5))
    trans = rng.dirichlet(np.ones(m), size=m) * 0.6 + np.eye(m) * 0.4
    mdl = model(rng.uniform(0.01, 0.99, (m, 1)), trans, rng.dirichlet(np.ones(m)))
    sim = simulate(mdl, lengths, coverage=coverage, random_state=rng)
    ours = with_params(mdl).score(sim.methylated[:, 0], sim.coverage[:, 0], lengths)
    ref = hmmlearn_score(mdl, sim.methylated[:, 0], sim.coverage[:, 0], lengths)
    assert ours == pytest.approx(ref, rel=1e-6)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), lengths=st.lists(st.integers(2, 400), min_size=1, max_size=4))
def test_one_em_iteration_equals_hmmlearn(seed, lengths):
    """The whole iteration (expected starts, transitions and counts, then the M-step) against
    hmmlearn's fit(n_iter=1) from the same parameters."""
    from hmmlearn.hmm import MultinomialHMM

    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 9))
    trans = rng.dirichlet(np.ones(m), size=m) * 0.5 + np.eye(m) * 0.5
    mdl = model(rng.uniform(0.01, 0.99, (m, 1)), trans, rng.dirichlet(np.ones(m)))
    sim = simulate(mdl, lengths, coverage=8.0, random_state=rng)
    ours = with_params(mdl, n_iter=1, init_params="", tol=-np.inf, allow_degenerate=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # few bins give degenerate models: their arithmetic is compared all the same
        ours.fit(sim.methylated, sim.coverage, lengths)
        ref = MultinomialHMM(n_components=m, n_trials=sim.coverage[:, 0], n_iter=1, init_params="", tol=0,
                             implementation="scaling")
        ref.startprob_, ref.transmat_ = mdl.startprob, mdl.transmat
        ref.emissionprob_ = np.hstack([mdl.methylation, 1 - mdl.methylation])
        ref.fit(np.column_stack([sim.methylated[:, 0], sim.coverage[:, 0] - sim.methylated[:, 0]]), lengths)
    np.testing.assert_allclose(ours.startprob_, ref.startprob_, atol=1e-9)
    np.testing.assert_allclose(ours.transmat_, ref.transmat_, atol=1e-9)
    np.testing.assert_allclose(ours.methylation_[:, 0], ref.emissionprob_[:, 0], atol=1e-9)


def test_zero_coverage_carries_no_information():
    mdl = model(WELL_SEPARATED, STICKY)
    sim = simulate(mdl, [500], coverage=10, random_state=0)
    est = with_params(mdl)
    base = est.score(sim.methylated, sim.coverage)
    meth, cov = sim.methylated.copy(), sim.coverage.copy()
    meth[100:200, 1] = cov[100:200, 1] = 0
    np.testing.assert_allclose(log_emissions(meth[100:200], cov[100:200], mdl.methylation)[:, 0],
                               log_emissions(meth[100:200, :1], cov[100:200, :1], mdl.methylation[:, :1])[:, 0])
    assert est.score(meth, cov) > base  # fewer observations, higher likelihood


@pytest.mark.slow
@pytest.mark.parametrize("init", ["random", "spectral"])
def test_em_log_likelihood_never_decreases(init):
    mdl = model(WELL_SEPARATED, STICKY)
    sim = simulate(mdl, [4000, 3000], coverage=6, random_state=1)
    est = BinomialHMM(4, n_iter=40, tol=0, init=init, random_state=2).fit(sim.methylated, sim.coverage, sim.lengths)
    history = np.array(est.monitor_.history)
    assert len(history) >= 5  # it stops once the gain drops below tol (0): at float rounding
    assert (np.diff(history) >= -1e-7 * np.abs(history[1:])).all()
    np.testing.assert_allclose(est.transmat_.sum(axis=1), 1.0)


def test_decoding_a_sticky_chain_with_true_parameters():
    mdl = model([[0.05], [0.5], [0.95]], np.full((3, 3), 0.01) + np.eye(3) * 0.97)
    sim = simulate(mdl, [20_000, 10_000], coverage=5, random_state=3)
    est = with_params(mdl)
    states = est.predict(sim.methylated, sim.coverage, sim.lengths)
    assert (states == sim.states).mean() > 0.97
    post = est.predict_proba(sim.methylated, sim.coverage, sim.lengths)
    np.testing.assert_allclose(post.sum(axis=1), 1.0)
    assert (post.argmax(axis=1) == sim.states).mean() > 0.97


@pytest.mark.slow
def test_em_recovers_parameters_and_respects_user_settings():
    mdl = model(WELL_SEPARATED, STICKY)
    sim = simulate(mdl, [50_000], coverage=10, random_state=4)
    est = BinomialHMM(4, init="spectral", random_state=0).fit(sim.methylated, sim.coverage)
    err = matched_error(mdl.methylation, est.methylation_, mdl.transmat, est.transmat_)
    assert err.methylation_error < 0.02 and err.transmat_error < 0.03
    fixed = BinomialHMM(4, init="random", init_params="sm", params="sm", random_state=0)
    fixed.transmat_ = mdl.transmat
    fixed.fit(sim.methylated, sim.coverage)
    np.testing.assert_array_equal(fixed.transmat_, mdl.transmat)  # neither initialized nor updated


def test_sample_and_refit_round_trip():
    est = with_params(model([[0.1, 0.8], [0.9, 0.3]], [[0.95, 0.05], [0.1, 0.9]]))
    meth, cov, states = est.sample(20_000, coverage=12, random_state=5)
    assert meth.shape == cov.shape == (20_000, 2) and states.shape == (20_000,)
    refit = BinomialHMM(2, init="random", random_state=1).fit(meth, cov)
    assert matched_error(est.methylation_, refit.methylation_).methylation_error < 0.03


def test_bad_parameters_are_named():
    est = BinomialHMM(2)
    est.startprob_, est.transmat_ = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.3, 0.3]])
    est.methylation_ = np.array([[0.1], [0.9]])
    with pytest.raises(ValueError, match="BinomialHMM: transmat row 1 sums to 0.6, not 1"):
        est.score([1, 2], [3, 3])
    est.transmat_ = np.eye(2)
    with pytest.raises(ValueError, match=r"methylation_ has shape \(2, 1\), expected \(2, 2\)"):
        est.score(np.ones((3, 2), int), np.ones((3, 2), int))
