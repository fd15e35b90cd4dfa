import numpy as np
import pytest

from streambhmm import (SpectralBinomialHMM, compute_moments, matched_error, paper_model,
                        population_moments, simulate)
from streambhmm.learn.simulate import model

from ..conftest import STATE_DEPENDENT_COVERAGE, STICKY, WELL_SEPARATED


def errors(truth, est):
    return matched_error(truth.methylation, est.methylation_, truth.transmat, est.transmat_,
                         truth.startprob, est.startprob_)


@pytest.mark.parametrize("coverage", [20.0, STATE_DEPENDENT_COVERAGE], ids=["constant", "state-dependent"])
@pytest.mark.parametrize("n_samples", [1, 2])
def test_population_moments_return_the_parameters(coverage, n_samples):
    truth = model(WELL_SEPARATED[:, :n_samples], STICKY)
    cov = coverage if np.ndim(coverage) == 0 else coverage[:, :n_samples]
    est = SpectralBinomialHMM(4, method="ftd", random_state=0).fit_moments(population_moments(truth, coverage=cov))
    err = errors(truth, est)
    assert np.abs(truth.methylation - est.methylation_[err.permutation]).max() < 1e-3
    assert np.abs(truth.transmat - est.transmat_[np.ix_(err.permutation, err.permutation)]).max() < 1e-3
    assert np.abs(truth.startprob - est.startprob_[err.permutation]).max() < 1e-3


def test_population_moments_of_the_paper_protocol():
    for seed in range(5):
        truth = paper_model(seed)
        est = SpectralBinomialHMM(4, method="ftd", random_state=0).fit_moments(population_moments(truth, coverage=50.0))
        err = errors(truth, est)
        assert err.methylation_error < 4e-3 and err.transmat_error < 4e-3, seed


def test_paper_formula_is_biased_by_state_dependent_coverage():
    truth = model(WELL_SEPARATED, STICKY)
    pop = population_moments(truth, coverage=20.0)
    pop_dep = population_moments(truth, coverage=STATE_DEPENDENT_COVERAGE)
    paper = SpectralBinomialHMM(4, method="ftd", random_state=0, methylation_recovery="paper")
    assert errors(truth, paper.fit_moments(pop)).methylation_error < 0.01  # midpoint-rule bias only
    assert errors(truth, paper.fit_moments(pop_dep)).methylation_error > 0.05


@pytest.mark.slow
@pytest.mark.parametrize(
    "coverage,limit",
    [(20.0, 0.02), (STATE_DEPENDENT_COVERAGE, 0.03)],
    ids=["coverage-20", "state-dependent-coverage"],
)
def test_synthetic_recovery_at_genome_scale(four_state_model, coverage, limit):
    """~1.5e6 bins, 4 well-separated states, 2 samples, 3 sequences (acceptance test)."""
    sim = simulate(four_state_model, [500_000, 450_000, 550_000], coverage=coverage, random_state=11)
    est = SpectralBinomialHMM(4, method="ftd", random_state=0).fit(sim.methylated, sim.coverage,
                                                                   lengths=sim.lengths)
    err = errors(four_state_model, est)
    assert err.methylation_error <= limit
    assert err.transmat_error <= 0.02
    np.testing.assert_allclose(est.transmat_.sum(axis=1), 1.0, rtol=1e-12)
    assert est.startprob_.sum() == pytest.approx(1.0)
    assert est.methylation_.shape == (4, 2)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["refined", "ftd"])
def test_same_seed_same_model_and_fit_moments_equals_fit(four_state_model, method):
    sim = simulate(four_state_model, [30_000, 30_000], coverage=20, random_state=5)
    a = SpectralBinomialHMM(4, method=method, random_state=7).fit(sim.methylated, sim.coverage, sim.lengths)
    b = SpectralBinomialHMM(4, method=method, random_state=7).fit(sim.methylated, sim.coverage, sim.lengths)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
    c = SpectralBinomialHMM(4, method=method, random_state=7).fit_moments(mom)
    for attr in ("methylation_", "transmat_", "startprob_", "observation_"):
        np.testing.assert_array_equal(getattr(a, attr), getattr(b, attr))
        np.testing.assert_array_equal(getattr(a, attr), getattr(c, attr))


@pytest.mark.slow
@pytest.mark.parametrize("method,tolerance", [("refined", 1e-4), ("ftd", 1e-6)])
def test_seed_changes_the_restarts_not_the_answer(four_state_model, method, tolerance):
    sim = simulate(four_state_model, [100_000], coverage=20, random_state=6)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
    fits = [SpectralBinomialHMM(4, method=method, random_state=s).fit_moments(mom) for s in (1, 2)]
    err = matched_error(fits[0].methylation_, fits[1].methylation_)
    assert err.methylation_error < tolerance


@pytest.mark.slow
def test_recovers_a_chain_sampled_by_hmmlearn():
    """Cross-check with independent code: hmmlearn's MultinomialHMM with n_trials = coverage
    is the single-sample Binomial HMM; data it samples must be fitted by ours."""
    import warnings

    from hmmlearn.hmm import MultinomialHMM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # hmmlearn's notice about its MultinomialHMM semantics
        ref = MultinomialHMM(n_components=3, n_trials=20, random_state=0)
        ref.startprob_ = np.array([0.4, 0.3, 0.3])
        ref.transmat_ = np.array([[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.05, 0.15, 0.8]])
        ref.emissionprob_ = np.array([[0.1, 0.9], [0.5, 0.5], [0.85, 0.15]])
        x, _ = ref.sample(100_000, random_state=1)
    est = SpectralBinomialHMM(3, random_state=0).fit(x[:, 0], x.sum(axis=1))
    err = matched_error(ref.emissionprob_[:, :1], est.methylation_, ref.transmat_, est.transmat_)
    assert err.methylation_error < 0.01 and err.transmat_error < 0.02


@pytest.mark.slow
@pytest.mark.parametrize("n_samples", [1, 2])
def test_refinement_returns_the_parameters_from_population_moments(n_samples):
    """Exact moments and histograms of the model (coverage independent of the state, the
    refinement's assumption): the truth is the refinement's optimum, reached from FTD's
    estimate and the quantiles (random starts would only cost time)."""
    truth = model(WELL_SEPARATED[:, :n_samples], STICKY)
    est = SpectralBinomialHMM(4, random_state=0, n_random_starts=0).fit_moments(
        population_moments(truth, coverage=20.0))
    err = errors(truth, est)
    assert np.abs(truth.methylation - est.methylation_[err.permutation]).max() < 1e-3
    assert np.abs(truth.transmat - est.transmat_[np.ix_(err.permutation, err.permutation)]).max() < 1e-3
    assert np.abs(truth.startprob - est.startprob_[err.permutation]).max() < 1e-3


@pytest.mark.slow
def test_refinement_recovers_simulated_parameters_at_least_as_well_as_ftd(four_state_model):
    """Acceptance: 4 states, 2 samples, 1e6 bins."""
    sim = simulate(four_state_model, [1_000_000], coverage=20.0, random_state=12)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths)
    ftd = errors(four_state_model, SpectralBinomialHMM(4, method="ftd", random_state=0).fit_moments(mom))
    refined = errors(four_state_model, SpectralBinomialHMM(4, random_state=0).fit_moments(mom))
    assert refined.methylation_error <= ftd.methylation_error
    assert refined.methylation_error < 0.005
    # transitions: both within the sampling noise of 1e6 bins (about 0.002 here)
    assert refined.transmat_error < 0.005
