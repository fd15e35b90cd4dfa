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
