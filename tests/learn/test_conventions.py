"""hmmlearn's (and scikit-learn's) conventions of the public estimators, and what they refuse:
parameters as constructor arguments (get_params, set_params, clone), NotFittedError before a
fit, scoring and decoding with any fitted model, sample(n_samples, random_state), and no
model from data without reads."""

import numpy as np
import pytest

from streambhmm import BinomialHMM, SpectralBinomialHMM, simulate
from streambhmm.learn.checks import NotFittedError
from streambhmm.learn.groups import GroupedBinomialHMM, SampleGroups
from streambhmm.learn.simulate import Model


def two_states(emission="binomial"):
    hmm = BinomialHMM(2, emission=emission)
    hmm.startprob_, hmm.transmat_ = np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.1, 0.9]])
    hmm.methylation_ = np.array([[0.2], [0.8]])
    if emission == "betabinomial":
        hmm.dispersion_ = np.array([[0.05], [0.1]])
    return hmm


@pytest.fixture(scope="module")
def data():
    sim = simulate(Model(np.array([[0.1], [0.85]]), np.array([[0.95, 0.05], [0.05, 0.95]]), np.array([0.5, 0.5])),
                   [4000], coverage=12, random_state=3)
    return sim.methylated, sim.coverage


@pytest.mark.parametrize("estimator", [BinomialHMM(3, n_iter=7, emission="betabinomial"),
                                       SpectralBinomialHMM(4, n_bins=20, method="ftd"),
                                       GroupedBinomialHMM(2, SampleGroups.of(["x", "x", "y"]))])
def test_parameters_are_the_constructor_arguments(estimator):
    params = estimator.get_params()
    again = type(estimator)(**params)
    assert again.get_params() == params and repr(again) == repr(estimator)
    assert "n_components" in repr(estimator)
    assert estimator.set_params(random_state=5) is estimator and estimator.random_state == 5
    with pytest.raises(ValueError, match="has no parameter 'n_states'; its parameters: n_components"):
        estimator.set_params(n_states=3)


def test_scikit_learn_clones_them():
    base = pytest.importorskip("sklearn.base")
    hmm = BinomialHMM(3, tol=1e-3, random_state=2)
    copy = base.clone(hmm)
    assert copy is not hmm and copy.get_params() == hmm.get_params()
    assert repr(BinomialHMM(3, tol=1e-3)) == "BinomialHMM(n_components=3, tol=0.001)"


def test_a_model_without_parameters_says_so(data):
    meth, cov = data
    for method in ("score", "predict", "predict_proba", "decode", "score_samples"):
        with pytest.raises(NotFittedError, match="this BinomialHMM has no startprob_, transmat_, methylation_ yet"):
            getattr(BinomialHMM(2), method)(meth, cov)
    with pytest.raises(AttributeError):  # as scikit-learn's NotFittedError, also an AttributeError
        BinomialHMM(2).sample(5)
    with pytest.raises(NotFittedError, match="no dispersion_"):
        two_states("binomial").set_params(emission="betabinomial").score(meth, cov)


@pytest.mark.parametrize("name, value, message", [
    ("transmat_", [[1.2, -0.2], [0.1, 0.9]], "transmat has values outside"),
    ("methylation_", [[np.nan], [0.8]], "methylation contains NaN"),
    ("startprob_", [0.7, 0.7], "startprob sums to 1.4"),
    ("dispersion_", [[1.0], [0.1]], r"dispersion_ must lie in \[0, 0.95\]"),
    ("dispersion_", [[0.1, 0.1], [0.1, 0.1]], r"dispersion_ has shape \(2, 2\), expected \(2, 1\)"),
])
def test_parameters_set_by_hand_are_checked(data, name, value, message):
    meth, cov = data
    hmm = two_states("betabinomial")
    setattr(hmm, name, value)
    for method in ("score", "decode", "predict_proba"):
        with pytest.raises(ValueError, match=message):
            getattr(hmm, method)(meth, cov)


def test_parameters_set_as_lists_are_used_as_arrays(data):
    meth, cov = data
    hmm = two_states()
    by_lists = two_states()
    by_lists.transmat_, by_lists.startprob_, by_lists.methylation_ = [[0.9, 0.1], [0.1, 0.9]], [0.5, 0.5], [[0.2], [0.8]]
    assert by_lists.score(meth, cov) == hmm.score(meth, cov)
    assert isinstance(by_lists.transmat_, np.ndarray)


def test_every_fitted_model_scores_and_decodes(data):
    """The one-pass estimator has the scoring methods too, and they equal BinomialHMM's with
    its parameters; score_samples is (score, posteriors); decode's "map" takes each bin's
    most probable state."""
    meth, cov = data
    one_pass = SpectralBinomialHMM(2, random_state=0, n_random_starts=1).fit(meth, cov)
    same = BinomialHMM(2)
    same.startprob_, same.transmat_, same.methylation_ = one_pass.startprob_, one_pass.transmat_, one_pass.methylation_
    assert one_pass.score(meth, cov) == same.score(meth, cov)
    np.testing.assert_array_equal(one_pass.predict(meth, cov), same.predict(meth, cov))
    loglik, posteriors = same.score_samples(meth, cov)
    assert loglik == same.score(meth, cov)
    np.testing.assert_array_equal(posteriors, same.predict_proba(meth, cov))
    log_prob, states = same.decode(meth, cov, algorithm="map")
    np.testing.assert_array_equal(states, posteriors.argmax(axis=1))
    assert np.isclose(log_prob, np.log(posteriors.max(axis=1)).sum())
    assert same.decode(meth, cov, algorithm="viterbi")[0] == same.decode(meth, cov)[0]
    with pytest.raises(ValueError, match="algorithm must be one of viterbi, map"):
        same.decode(meth, cov, algorithm="posterior")


def test_sample_as_hmmlearn():
    hmm = two_states().set_params(random_state=4)
    first, second = hmm.sample(50), hmm.sample(50)  # the model's seed: the same draw each time
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    seeded = hmm.sample(50, 9)  # the second argument is the random state, as hmmlearn's
    assert seeded[1].sum() > 0 and not np.array_equal(seeded[0], first[0])
    assert [len(x) for x in hmm.sample()] == [1, 1, 1]
    assert len(hmm.sample(lengths=[3, 4])[2]) == 7
    with pytest.raises(ValueError, match="n_samples=100 but lengths sum to 7"):
        hmm.sample(100, lengths=[3, 4])
    with pytest.raises(ValueError, match="n_samples must be a non-negative integer, got -1"):
        hmm.sample(-1)


@pytest.mark.parametrize("estimator", [BinomialHMM(2, random_state=0), BinomialHMM(2, init="random", random_state=0),
                                       SpectralBinomialHMM(2, random_state=0)])
@pytest.mark.parametrize("n", [0, 500])
def test_no_model_from_data_without_reads(estimator, n):
    with pytest.raises(ValueError, match="no reads to fit: " + ("there are no bins" if n == 0 else
                                                                 "all 500 bins have coverage 0")):
        estimator.fit(np.zeros(n, int), np.zeros(n, int))


@pytest.mark.parametrize("make, message", [
    (lambda: BinomialHMM(2, n_iter=-1), "n_iter must be a non-negative integer, got -1"),
    (lambda: BinomialHMM(2, params="xyz"), "params may hold the letters stmd"),
    (lambda: SpectralBinomialHMM(3, method="ftd", n_restarts=0), "n_restarts must be an integer of at least 1"),
    (lambda: SpectralBinomialHMM(3, n_random_starts=-1), "n_random_starts must be an integer of at least 0"),
    (lambda: SpectralBinomialHMM(3, n_finished=0), "n_finished must be an integer of at least 1"),
])
def test_bad_settings_are_named(data, make, message):
    meth, cov = data
    with pytest.raises(ValueError, match=message):
        make().fit(meth, cov)


@pytest.mark.parametrize("methylated, coverage, message", [
    ([4 * 10**9, 1], [5 * 10**9, 3], r"methylated\[0\] = 4000000000: counts above 2,147,483,647 reads"),
    ([1e20, 1.0], [1e20, 2.0], r"methylated\[0\] = 1e\+20: counts above"),
    ([-1e20, 1.0], [1.0, 2.0], r"negative count: methylated\[0\] = -1e\+20"),
])
def test_counts_beyond_the_tables_are_refused(methylated, coverage, message):
    with pytest.raises(ValueError, match=message):
        two_states().score(np.array(methylated), np.array(coverage))


def test_empty_lengths_are_a_sum_of_zero():
    from streambhmm import compute_moments

    with pytest.raises(ValueError, match="lengths sum to 0 but the counts have 2 rows"):
        two_states().score([1, 2], [3, 3], lengths=[])
    with pytest.raises(ValueError, match="projection_dim must be a non-negative integer"):
        compute_moments([1, 2, 3], [3, 3, 3], projection_dim=-1)
