"""Beta-binomial emissions: the pmf against scipy, the binomial limit, the M-step against a
direct optimization, EM recovering simulated overdispersion, and store EM equal to the
in-memory recursion."""

import json

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import minimize

from streambhmm.learn.emissions import EmissionTable, PairWeights, betabinomial_mstep, pair_loglik
from streambhmm.moments.features import pair_keys
from streambhmm.learn.hmm import BinomialHMM, run_em
from streambhmm.learn.simulate import model, simulate

LEVELS = np.array([[0.05, 0.1], [0.4, 0.8], [0.7, 0.2], [0.95, 0.9]])
STICKY = np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3)
DISPERSION = np.array([[0.05, 0.02], [0.15, 0.1], [0.1, 0.2], [0.03, 0.05]])


def test_beta_binomial_log_likelihood_is_scipy_s_and_tends_to_the_binomial():
    c = np.arange(0, 40)[:, None].repeat(3, axis=1).ravel()
    mu = np.concatenate([np.minimum(np.arange(40), k) for k in (0, 7, 39)])
    coef = stats.binom.logpmf(mu, c, 0.5) - c * np.log(0.5)  # log C(c, mu)
    p, rho = np.array([0.2, 0.7]), np.array([0.1, 0.4])
    got = pair_loglik(c[:, None].astype(float), mu[:, None].astype(float), coef[:, None], p, rho)
    alpha, beta = p * (1 - rho) / rho, (1 - p) * (1 - rho) / rho
    np.testing.assert_allclose(got, stats.betabinom.logpmf(mu[:, None], c[:, None], alpha, beta), rtol=1e-10, atol=1e-10)
    near = pair_loglik(c[:, None].astype(float), mu[:, None].astype(float), coef[:, None], p, np.array([1e-7, 1e-7]))
    np.testing.assert_allclose(near, stats.binom.logpmf(mu[:, None], c[:, None], p), rtol=1e-9, atol=1e-9)


def test_emission_table_sums_the_samples_log_likelihoods():
    rng = np.random.default_rng(0)
    cov = rng.integers(0, 30, (200, 2))
    meth = rng.binomial(cov, 0.4)
    got = EmissionTable(meth, cov).log_b(LEVELS, DISPERSION)
    a, b = LEVELS * (1 - DISPERSION) / DISPERSION, (1 - LEVELS) * (1 - DISPERSION) / DISPERSION
    expected = sum(stats.betabinom.logpmf(meth[:, [s]], cov[:, [s]], a[:, s], b[:, s]) for s in range(2))
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-9)


def test_the_m_step_finds_the_weighted_maximum_likelihood():
    rng = np.random.default_rng(1)
    c = rng.integers(1, 40, 300)
    mu = rng.binomial(c, rng.beta(2, 3, 300))
    keys, inverse = np.unique(pair_keys(mu, c), return_inverse=True)
    row_weights = rng.random((2, 300))  # each row's posterior in each of two states
    weights = np.stack([np.bincount(inverse, w, keys.size) for w in row_weights])
    levels, rho = betabinomial_mstep(PairWeights(keys, weights), np.array([0.5, 0.5]), np.array([0.05, 0.05]))
    for h in range(2):
        def nll(x, w=row_weights[h]):
            p, r = 1 / (1 + np.exp(-x[0])), 1 / (1 + np.exp(-x[1]))
            return -np.sum(w * stats.betabinom.logpmf(mu, c, p * (1 - r) / r, (1 - p) * (1 - r) / r))

        best = minimize(nll, [0.0, -2.0], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12,
                                                                          "maxiter": 4000})
        p, r = 1 / (1 + np.exp(-best.x))
        assert levels[h] == pytest.approx(p, abs=1e-4) and rho[h] == pytest.approx(r, abs=1e-4)


def test_pair_weights_add_across_chunks():
    a = PairWeights(np.array([1, 5]), np.array([[1.0, 2.0], [0.0, 1.0]]))
    b = PairWeights(np.array([2, 5]), np.array([[3.0, 4.0], [1.0, 1.0]]))
    total = a + b
    np.testing.assert_array_equal(total.keys, [1, 2, 5])
    np.testing.assert_array_equal(total.weights, [[1.0, 3.0, 6.0], [0.0, 1.0, 2.0]])


def test_em_recovers_overdispersion_and_sticky_states_where_the_binomial_fragments():
    mdl = model(LEVELS, STICKY)
    sim = simulate(mdl, [20_000, 10_000], coverage=15, random_state=3, dispersion=DISPERSION)
    fits = {}
    for emission in ("binomial", "betabinomial"):
        hmm = BinomialHMM(4, emission=emission, n_iter=500, tol=1e-3, init="random", init_params="",
                          stationary_start=True)
        hmm.start_from(mdl.startprob, np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3),
                       np.clip(LEVELS + 0.05, 0, 1))
        fits[emission] = hmm.fit(sim.methylated, sim.coverage, sim.lengths)
    beta = fits["betabinomial"]
    np.testing.assert_allclose(beta.methylation_, LEVELS, atol=0.02)
    np.testing.assert_allclose(beta.dispersion_, DISPERSION, atol=0.02)
    assert np.diag(beta.transmat_).min() > 0.97  # (the truth: 0.98)
    assert np.diag(fits["binomial"].transmat_).min() < 0.94  # the binomial explains the spread by switching
    assert beta.score(sim.methylated, sim.coverage, sim.lengths) > fits["binomial"].score(sim.methylated,
                                                                                            sim.coverage, sim.lengths)


@pytest.mark.slow
def test_store_em_with_the_beta_binomial_equals_the_in_memory_recursion(tmp_path, dask_clients):
    from streambhmm.distributed.em import fit_store_em
    from streambhmm.testing import load_counts, write_store

    sim = simulate(model(LEVELS, STICKY), [3000, 1200], coverage=12, random_state=4, dispersion=DISPERSION)
    chroms = {"chr1": (np.arange(3000), sim.methylated[:3000], sim.coverage[:3000]),
              "chr2": (np.arange(1200), sim.methylated[3000:], sim.coverage[3000:])}
    store = write_store(tmp_path / "s.zarr", chroms, ["A", "B"], chunk_size=700)
    start = (np.full(4, 0.25), np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3), np.clip(LEVELS + 0.04, 0, 1))
    results = []
    for client in (dask_clients[1], None):  # Dask, and in this process
        hmm = BinomialHMM(4, emission="betabinomial", stationary_start=True).start_from(*start)
        results.append(fit_store_em(store, hmm, client, n_iter=4, rel_tol=0.0, check=False).hmm)
    memory = BinomialHMM(4, emission="betabinomial", stationary_start=True).start_from(*start)
    meth, cov, lengths = load_counts(store)
    run_em(memory, lambda: memory.e_step(meth, cov, lengths), 4, 0.0)
    for got in results:
        for name in ("methylation_", "dispersion_", "transmat_"):
            np.testing.assert_allclose(getattr(got, name), getattr(memory, name), rtol=1e-7, atol=1e-9)


def test_a_beta_binomial_model_file_round_trips_and_a_bad_dispersion_is_refused(tmp_path):
    from streambhmm.app.modelio import model_to_dict, read_model
    from streambhmm.testing import hmm_from_model

    hmm = BinomialHMM(4, emission="betabinomial").start_from(np.full(4, 0.25), STICKY, LEVELS, DISPERSION)
    document = model_to_dict(hmm, ["A", "B"], ["chr1"], method="em")
    assert document["emission"] == "betabinomial" and document["labels"][0] == "unmethylated"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(document))
    again = hmm_from_model(read_model(path))
    np.testing.assert_array_equal(again.dispersion_, DISPERSION)
    document["dispersion"][1][0] = 1.5
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"m.json: a beta-binomial model needs dispersion"):
        read_model(path)


def test_deep_coverage_uses_log_gamma_and_agrees_with_scipy():
    """A few pairs of coverage far above their number take the log-gamma branch of the table."""
    c = np.array([[0.0], [5.0], [40_000.0], [90_000.0]])
    mu = np.array([[0.0], [2.0], [31_000.0], [88_000.0]])
    coef = stats.binom.logpmf(mu, c, 0.5) - c * np.log(0.5)
    p, rho = np.array([0.3, 0.97]), np.array([0.02, 0.3])
    got = pair_loglik(c, mu, coef, p, rho)
    alpha, beta = p * (1 - rho) / rho, (1 - p) * (1 - rho) / rho
    np.testing.assert_allclose(got, stats.betabinom.logpmf(mu, c, alpha, beta), rtol=1e-9, atol=1e-8)


def test_the_log_gamma_branch_keeps_a_tiny_beta_parameter():
    """A state near full methylation has a tiny b; a deep bin with every read methylated then
    scores -b (digamma(a + c) - digamma(a)) to first order, and b + (c - mu) must not lose b's
    digits to c (1e-6 + 20,000 keeps 6 of them)."""
    from scipy.special import digamma

    from streambhmm.learn._emission_kernels import betabinomial_table

    a, b = np.array([50.0]), np.array([1e-6])
    c = mu = np.array([20_000], np.int64)
    out = np.empty((1, 1))
    betabinomial_table(c, mu, np.zeros(1), a, b, out)  # one pair this deep: the log-gamma branch
    np.testing.assert_allclose(out[0, 0], -b[0] * (digamma(a[0] + c[0]) - digamma(a[0])), rtol=1e-5)


def test_the_recursion_counts_each_pairs_posterior_weight():
    """The E-step's per-pair weights (summed in the compiled recursion) equal the posteriors
    of the bins summed per (coverage, methylated) pair, and give the posterior-weighted sums."""
    from streambhmm.learn.emissions import EmissionTable

    sim = simulate(model(LEVELS, STICKY), [700, 300], coverage=9, random_state=5, dispersion=DISPERSION)
    hmm = BinomialHMM(4, emission="betabinomial").start_from(np.full(4, 0.25), STICKY, LEVELS, DISPERSION)
    stats_ = hmm.e_step(sim.methylated, sim.coverage, sim.lengths)
    post = hmm.predict_proba(sim.methylated, sim.coverage, sim.lengths)
    table = EmissionTable(sim.methylated, sim.coverage)
    for s, pairs in enumerate(stats_.pairs):
        keys = pair_keys(sim.methylated[:, s], sim.coverage[:, s])
        for k, key in enumerate(pairs.keys):
            np.testing.assert_allclose(pairs.weights[:, k], post[keys == key].sum(axis=0), rtol=1e-9, atol=1e-12)
        assert set(pairs.keys) == set(keys[sim.coverage[:, s] > 0])
    np.testing.assert_allclose(stats_.methylated, post.T @ sim.methylated, rtol=1e-9)
    np.testing.assert_allclose(stats_.coverage, post.T @ sim.coverage, rtol=1e-9)
    assert table.keys.size >= max(p.keys.size for p in stats_.pairs)


def test_the_m_step_keeps_a_state_within_its_caps():
    """A capped state's M-step is the weighted maximum likelihood within the caps (against a
    bounded direct optimization); the free state is unchanged by the other's caps."""
    rng = np.random.default_rng(2)
    c = rng.integers(1, 60, 400)
    mu = rng.binomial(c, rng.beta(3, 3, 400))  # levels around 0.5: a cap at 0.2 binds
    keys, inverse = np.unique(pair_keys(mu, c), return_inverse=True)
    weights = np.stack([np.bincount(inverse, np.ones(400), keys.size)] * 2)
    pairs = PairWeights(keys, weights)
    free = betabinomial_mstep(pairs, np.array([0.5, 0.5]), np.array([0.05, 0.05]))
    capped = betabinomial_mstep(pairs, np.array([0.1, 0.5]), np.array([0.05, 0.05]), np.array([0.2, 1.0]),
                                np.array([0.2, 1.0]))
    assert capped[0][0] <= 0.2 + 1e-9 and capped[1][0] <= 0.2 + 1e-9
    assert capped[0][1] == pytest.approx(free[0][1], abs=1e-8) and capped[1][1] == pytest.approx(free[1][1], abs=1e-8)

    def nll(x):
        p, r = x
        return -np.sum(stats.betabinom.logpmf(mu, c, p * (1 - r) / r, (1 - p) * (1 - r) / r))

    best = minimize(nll, [0.1, 0.1], method="L-BFGS-B", bounds=[(1e-4, 0.2), (1e-6, 0.2)])
    assert capped[0][0] == pytest.approx(best.x[0], abs=1e-4) and capped[1][0] == pytest.approx(best.x[1], abs=1e-4)


def test_the_far_series_are_scipy_s_digamma_and_trigamma():
    from scipy.special import digamma, polygamma

    from streambhmm.learn._emission_kernels import MIN_CUT, _digamma_far, _trigamma_far

    for x in np.geomspace(MIN_CUT, 1e7, 60):
        assert _digamma_far(x) == pytest.approx(digamma(x), rel=1e-14)
        assert _trigamma_far(x) == pytest.approx(polygamma(1, x), rel=1e-13)


def test_the_m_step_beside_a_few_far_deeper_pairs_is_the_weighted_maximum_likelihood():
    """A helper's genome with a mitochondrion at 100,000 reads per bin beside tens elsewhere: EM
    took 1.8 s an iteration, against 0.1 without it, the M-step summing over every coverage up to
    the deepest. The sums now stop at a cut, and the deeper pairs add their terms in closed form:
    the same objective (its gradient equal, its optimum that of a direct optimization)."""
    from streambhmm.learn import _emission_kernels as kernels
    from streambhmm.moments.features import pairs_from_keys

    rng = np.random.default_rng(3)
    c = np.r_[rng.integers(1, 60, 2000), rng.integers(50_000, 160_000, 40)]
    mu = rng.binomial(c, rng.beta(1, 12, c.size))
    keys, inverse = np.unique(pair_keys(mu, c), return_inverse=True)
    row_weights = rng.random((2, c.size))
    weights = np.stack([np.bincount(inverse, w, keys.size) for w in row_weights])
    coverage, methylated = pairs_from_keys(keys)
    cut = kernels.sum_cut(coverage, weights[0])
    assert kernels.MIN_CUT <= cut < 60 * 2 and cut < coverage.max()  # the split is taken
    top = kernels.tail_weights(coverage, methylated, weights[0], coverage.max())
    split = kernels.tail_weights(coverage, methylated, weights[0], cut)
    assert top[3].shape[1] == 0 and split[3].shape[1] == 40
    for a, b in ((0.5, 9.0), (3.0, 40.0), (0.01, 0.2)):
        whole, parts = kernels._value_and_derivatives(*top, a, b), kernels._value_and_derivatives(*split, a, b)
        assert parts[0] == pytest.approx(whole[0], rel=1e-12)
        np.testing.assert_allclose(parts[1:], whole[1:], rtol=1e-9)
    levels, rho = betabinomial_mstep(PairWeights(keys, weights), np.array([0.5, 0.5]), np.array([0.05, 0.05]))
    for h in range(2):
        def nll(x, w=row_weights[h]):
            p, r = 1 / (1 + np.exp(-x[0])), 1 / (1 + np.exp(-x[1]))
            return -np.sum(w * stats.betabinom.logpmf(mu, c, p * (1 - r) / r, (1 - p) * (1 - r) / r))

        best = minimize(nll, [-2.0, -2.0], method="Nelder-Mead", options={"xatol": 1e-9, "fatol": 1e-12,
                                                                          "maxiter": 4000})
        p, r = 1 / (1 + np.exp(-best.x))
        assert levels[h] == pytest.approx(p, abs=1e-4) and rho[h] == pytest.approx(r, abs=1e-4)


def test_the_m_step_of_ordinary_depths_sums_to_the_deepest_coverage():
    """The closed form is taken only where it is far cheaper: tens of reads per bin with a
    tail of hundreds keep every sum (the fits of the real sets as they were)."""
    from streambhmm.learn._emission_kernels import sum_cut

    rng = np.random.default_rng(4)
    coverage = np.unique(np.r_[rng.integers(1, 80, 3000), rng.integers(80, 2500, 60)]).astype(np.int64)
    assert sum_cut(coverage, np.ones(coverage.size)) == coverage.max()
    assert sum_cut(coverage, np.zeros(coverage.size)) == 0
    deep = np.r_[coverage, [100_000]]  # and one far deeper pair: the sums stop below it
    assert 64 <= sum_cut(deep, np.ones(deep.size)) <= coverage.max()
