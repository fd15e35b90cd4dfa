"""States with a level per group of samples (learn.groups): the tied M-step, the start, the
pruning and the q-values, against known answers and the joint model."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from streambhmm.learn.emissions import PairWeights
from streambhmm.learn.groups import (MIN_PRIOR_REGIONS, REPLICATE_P, GroupedBinomialHMM, SampleGroups, _overdispersion,
                                     _variance_prior,
                                     candidate_start, differential, qvalues, replicate_pvalues,
                                     restricted, sum_pairs, support, supported_states)
from streambhmm.learn.hmm import BinomialHMM, EncodedCounts, run_em
from streambhmm.learn.simulate import model, simulate

GROUPS = SampleGroups.of(["A", "A", "B", "B", "B"])
LEVELS = np.array([[0.1, 0.1], [0.8, 0.8], [0.8, 0.3]])  # per group
TRANS = np.array([[0.95, 0.04, 0.01], [0.02, 0.96, 0.02], [0.05, 0.15, 0.8]])


def grouped_data(seed=0, n=3000, dispersion=None):
    sim = simulate(model(GROUPS.expand(LEVELS), TRANS), [n, n // 2], coverage=12.0, random_state=seed,
                   dispersion=None if dispersion is None else np.full((3, 5), dispersion))
    return sim.methylated, sim.coverage, np.array([n, n // 2])


def test_sample_groups_expand_collapse_average():
    assert GROUPS.names == ("A", "B") and GROUPS.members == (0, 0, 1, 1, 1)
    wide = GROUPS.expand(LEVELS)
    assert wide.shape == (3, 5) and np.array_equal(GROUPS.collapse(wide), LEVELS)
    assert np.allclose(GROUPS.average(np.arange(15.0).reshape(3, 5)), [[0.5, 3.0], [5.5, 8.0], [10.5, 13.0]])
    with pytest.raises(ValueError, match="C has none"):
        SampleGroups(("A", "B", "C"), (0, 1, 1))


def test_tied_binomial_em_is_em_on_the_groups_summed_counts():
    """For the binomial, the replicates' likelihood is the summed counts' up to binomial
    coefficients: tied EM on the samples follows EM on each group's summed counts."""
    meth, cov, lengths = grouped_data()
    summed = [np.stack([x[:, GROUPS.samples_of(g)].sum(axis=1) for g in range(2)], 1) for x in (meth, cov)]
    start = (np.full(3, 1 / 3), np.full((3, 3), 0.1) + np.eye(3) * 0.7, np.array([[0.2, 0.3], [0.6, 0.7], [0.7, 0.5]]))
    tied = GroupedBinomialHMM(3, GROUPS, emission="binomial", stationary_start=False).start_from(*start)
    plain = BinomialHMM(3, emission="binomial", init="random").start_from(*start)
    # 8 iterations each (tol -inf): EM converges within them, where a gain is rounding and may be negative
    tied_history = run_em(tied, lambda: tied.e_step(EncodedCounts(meth, cov, lengths)), 8, tol=-np.inf)
    plain_history = run_em(plain, lambda: plain.e_step(EncodedCounts(*summed, lengths)), 8, tol=-np.inf)
    assert np.allclose(tied.group_methylation_, plain.methylation_, atol=1e-9)
    assert np.allclose(tied.transmat_, plain.transmat_, atol=1e-9)
    # a constant apart (the gains agree to the rounding of a log-likelihood of -1e5)
    assert np.allclose(np.diff(tied_history), np.diff(plain_history), rtol=1e-9, atol=1e-8)
    assert np.abs(tied.group_methylation_ - LEVELS).max() < 0.02  # and it recovers the levels


def test_one_sample_per_group_is_the_joint_model():
    meth, cov, lengths = grouped_data(dispersion=0.05)
    own = SampleGroups.of(["a", "b", "c", "d", "e"])
    start = (np.full(3, 1 / 3), TRANS, GROUPS.expand(LEVELS) * 0.9 + 0.05)
    tied = GroupedBinomialHMM(3, own, stationary_start=False).start_from(*start)
    joint = BinomialHMM(3, emission="betabinomial", init="random").start_from(*start)
    data = EncodedCounts(meth, cov, lengths)
    tied.m_step(tied.e_step(data))
    joint.m_step(joint.e_step(data))
    assert np.allclose(tied.methylation_, joint.methylation_) and np.allclose(tied.dispersion_, joint.dispersion_)


def test_betabinomial_replicates_share_their_group_parameters():
    meth, cov, lengths = grouped_data(dispersion=0.05)
    hmm = GroupedBinomialHMM(3, GROUPS).start_from(np.full(3, 1 / 3), TRANS, LEVELS * 0.9 + 0.05)
    run_em(hmm, lambda: hmm.e_step(EncodedCounts(meth, cov, lengths)), 20)
    for x in (hmm.methylation_, hmm.dispersion_):
        assert np.array_equal(x, GROUPS.expand(GROUPS.collapse(x)))
    assert np.abs(hmm.group_methylation_ - LEVELS).max() < 0.03
    assert np.abs(hmm.group_dispersion_ - 0.05).max() < 0.03


def test_sum_pairs_is_the_pairs_added():
    rng = np.random.default_rng(1)
    parts = [PairWeights(np.unique(rng.integers(0, 50, 20)), None) for _ in range(4)]
    parts = [PairWeights(p.keys, rng.random((3, p.keys.size))) for p in parts]
    one, many = sum_pairs(parts), parts[0] + parts[1] + parts[2] + parts[3]
    assert np.array_equal(one.keys, many.keys) and np.allclose(one.weights, many.weights)


def test_candidate_start():
    startprob, trans, levels = candidate_start(np.array([0.05, 0.5, 0.9]), 2, spread=0.3)
    assert levels.shape == (9, 2) and np.allclose(trans.sum(axis=1), 1) and np.isclose(startprob.sum(), 1)
    assert not differential(levels[:3], 0.1).any() and differential(levels[3:], 0.1).all()
    assert np.allclose(levels[5], [0.65, 0.35]) and np.allclose(levels[6], [0.35, 0.65])
    assert levels.min() >= 0.02 and levels.max() <= 0.98
    three = candidate_start(np.array([0.5]), 3)[2]
    assert three.shape == (7, 3) and np.allclose(three[1], [0.65, 0.35, 0.35])


def test_qvalues_known_answer():
    assert np.allclose(qvalues(np.array([0.5, 0.0, 0.1])), [0.2, 0.0, 0.05])
    assert qvalues(np.zeros(0)).size == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_qvalues_are_the_mean_lfdr_of_a_list_ranked_by_lfdr(values):
    lfdr = np.array(values)
    q = qvalues(lfdr)
    order = np.argsort(lfdr, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-12) and np.all(q <= np.maximum(lfdr, q.max()) + 1e-12)
    assert np.isclose(q[order[-1]], lfdr.mean())


def test_bic_keeps_the_states_the_data_hold_and_drops_the_rest():
    """Fitted with a copy of a state and a state no bin is in, the model keeps the three real
    states; the support of a state (what its bins lose elsewhere) is exact: zero for its copy."""
    meth, cov, lengths = grouped_data(dispersion=0.05, n=20000)
    levels = np.vstack([LEVELS, LEVELS[1], [[0.5, 0.95]]])
    trans = np.full((5, 5), 0.005) + np.eye(5) * 0.975
    hmm = GroupedBinomialHMM(5, GROUPS).start_from(np.full(5, 0.2), trans, levels)
    data = EncodedCounts(meth, cov, lengths)
    run_em(hmm, lambda: hmm.e_step(data), 10)
    stats = hmm.e_step(data)
    loss = support(stats, hmm)
    assert np.allclose(np.diag(loss), 0) and loss[2, 0] > 1000
    keep = supported_states(stats, hmm)
    assert keep.size == 3
    kept = restricted(hmm, keep)
    assert np.abs(np.sort(kept.group_methylation_[:, 1]) - np.sort(LEVELS[:, 1])).max() < 0.05


# -- the replicates' test (dmr: a call must be borne out by its replicates) ---------------------
def test_the_variance_prior_is_limmas():
    """Known answer: limma 3.54.1's eBayes (s2.prior, df.prior) on the arcsine-root levels of
    300 regions of 2 vs 2 samples (the values below, regenerated from the seed)."""
    rng = np.random.default_rng(5)
    base = rng.uniform(0.1, 0.9, (300, 1))
    levels = np.clip(base + rng.normal(0, 0.05 * rng.gamma(2, 1, (300, 1)), (300, 4)), 0, 1)
    levels[:, 2:] += 0.05
    y = np.arcsin(np.sqrt(np.clip(levels, 0, 1)))
    variance = (y[:, :2].var(axis=1, ddof=1) + y[:, 2:].var(axis=1, ddof=1)) / 2
    prior, prior_df = _variance_prior(variance, np.full(300, 2))
    assert prior == pytest.approx(0.003719644669, rel=1e-8) and prior_df == pytest.approx(1.581067184, rel=1e-8)
    assert _variance_prior(variance[:MIN_PRIOR_REGIONS - 1], np.full(MIN_PRIOR_REGIONS - 1, 2)) == (0.0, 0.0)


def test_replicate_pvalues_are_limmas_weighted_moderated_t(monkeypatch):
    """Known answer: limma 3.54.1's lmFit(y, design, weights = w) and eBayes on the Anscombe
    arcsine-root levels of 200 regions of 2 vs 3 samples of unequal depth, with the weights this
    code gives them (recomputed from the seed below; its robust step off, as eBayes' default):
    twice limma's one-sided p-value of the moderated t (1 where the difference is the other way)."""
    import streambhmm.learn.groups as groups_module

    monkeypatch.setattr(groups_module, "OUTLIER_P", 0.0)
    rng = np.random.default_rng(11)
    level = rng.uniform(0.1, 0.8, (200, 1)) + np.array([[0, 0, 0.1, 0.1, 0.1]])
    level = rng.beta(level * 30, (1 - level) * 30)
    cov = rng.poisson([[60, 15, 40, 120, 8]], (200, 5)) + 1
    meth = rng.binomial(cov, level)
    p = replicate_pvalues(meth, cov, SampleGroups.of("AABBB"), np.ones(200, int), np.zeros(200, int))
    limma = [0.241700435463, 0.733314614885, 1.0, 0.940502542057, 0.244662212572]
    assert np.allclose(p[[0, 1, 2, 50, 199]], limma, rtol=1e-9)


def replicated_regions(seed, n, shift, carried_by_one=False, coverage=(30, 30, 30, 30)):
    """Reads of ``n`` regions of 2 vs 2 replicates: levels spread between replicates as
    Beta(level x 40, (1 - level) x 40) (a region's replicates differ beyond binomial
    sampling), group B's ``shift`` higher in both replicates, or in its first alone."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.1, 0.3, (n, 1)) + np.array([[0, 0, shift, 0 if carried_by_one else shift]])
    level = rng.beta(level * 40, (1 - level) * 40)
    cov = rng.poisson(np.asarray(coverage, float)[None, :], (n, 4)) + 1
    return rng.binomial(cov, level), cov


@pytest.mark.parametrize("coverage", [(30, 30, 30, 30), (200, 10, 200, 10), (200, 200, 10, 10), (3, 1, 8, 2)])
def test_replicate_pvalues_hold_their_level_under_the_null(coverage):
    """Under the null the p-values hold their level, the pair's direction taken from the data
    as dmr's calls take it, replicates of equal depth or not (an audit: reads pooled per group
    let one deep replicate speak for its group, 18% at 0.05), down to a read or two (4.0-5.8%)."""
    meth, cov = replicated_regions(0, 4000, 0.0, coverage=coverage)
    levels = (meth + 0.375) / (cov + 0.75)
    high = (levels[:, 2:].mean(axis=1) > levels[:, :2].mean(axis=1)).astype(int)
    p = replicate_pvalues(meth, cov, SampleGroups.of("AABB"), high, 1 - high)
    assert np.isfinite(p).all()
    assert 0.01 <= (p <= 0.05).mean() <= 0.075 and (p <= 0.01).mean() <= 0.02, ((p <= 0.05).mean(), (p <= 0.01).mean())


def test_three_groups_pay_for_the_pair_they_compare():
    """An audit: with three groups the highest against the lowest, picked from the same reads,
    passed 21% of null regions at 0.05; the p-value is two-sided and Bonferroni over the pairs."""
    rng = np.random.default_rng(4)
    level = rng.beta(0.4 * 40, 0.6 * 40, (3000, 6))
    cov = rng.poisson(30, (3000, 6)) + 1
    meth = rng.binomial(cov, level)
    groups = SampleGroups.of("AABBCC")
    means = np.stack([((meth + 0.375) / (cov + 0.75))[:, groups.samples_of(g)].mean(axis=1) for g in range(3)], 1)
    p = replicate_pvalues(meth, cov, groups, means.argmax(axis=1), means.argmin(axis=1))
    assert (p <= 0.05).mean() <= 0.075, (p <= 0.05).mean()


def test_the_overdispersion_is_found_at_any_depth():
    """An audit: arcsine-root levels of a read or two overstated rho 57-fold (0.57 for 0.01),
    which weighed a sample of 2 reads almost as one of 386; the moments are of x / n now."""
    rng = np.random.default_rng(9)
    for rho, depth in ((0.01, (1, 10)), (0.05, (1, 10)), (0.01, (30, 300))):
        level = rng.uniform(0.1, 0.9, (3000, 1))
        a, b = level * (1 - rho) / rho, (1 - level) * (1 - rho) / rho
        cov = rng.poisson(np.exp(rng.uniform(*np.log(depth), (3000, 4))))
        meth = rng.binomial(cov, rng.beta(np.broadcast_to(a, (3000, 4)), np.broadcast_to(b, (3000, 4))))
        assert abs(_overdispersion(meth.astype(float), cov.astype(float), SampleGroups.of("AABB")) - rho) < 0.04


def test_a_difference_one_replicate_carries_is_not_borne_out():
    """The model's lfdr weighs the groups' reads, so a difference in one replicate of two, on
    deep reads, was a call of q 7e-11 (a new user's trial on methylKit's data); its
    replicates' test is not, while most of the calls both replicates show pass it (2 vs 2, 30
    reads each, a difference of 0.3 between replicates overdispersed as Beta(40)). Where half
    the list is carried by one replicate the carried calls still fail, but they widen the
    prior, and fewer of the others pass (16%)."""
    both = replicated_regions(1, 300, 0.3)
    for n_carried, share_passing in ((30, 0.55), (300, 0.1)):
        one = replicated_regions(2, n_carried, 0.6, carried_by_one=True, coverage=(200,) * 4)  # the same mean shift
        meth, cov = np.vstack([both[0], one[0]]), np.vstack([both[1], one[1]])
        n = len(meth)
        p = replicate_pvalues(meth, cov, SampleGroups.of("AABB"), np.ones(n, int), np.zeros(n, int))
        passing = (p[:300] <= REPLICATE_P).mean(), (p[300:] <= REPLICATE_P).mean()
        assert passing[0] >= share_passing and passing[1] <= 0.2, (n_carried, passing)


def test_what_the_replicates_test_cannot_judge():
    """One sample per group and no prior, or a group without reads: NaN (no test, the call stands)."""
    meth, cov = np.array([[5, 20], [1, 9]]), np.array([[30, 30], [10, 10]])
    assert np.isnan(replicate_pvalues(meth, cov, SampleGroups.of("AB"), np.ones(2, int), np.zeros(2, int))).all()
    meth, cov = np.array([[5, 6, 20, 22]]), np.array([[30, 30, 0, 0]])
    assert np.isnan(replicate_pvalues(meth, cov, SampleGroups.of("AABB"), np.ones(1, int), np.zeros(1, int))).all()
