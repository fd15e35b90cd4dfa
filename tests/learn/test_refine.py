"""The moment-only refinement's parts against independent code, and its gradient."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from scipy.special import gammaln, logsumexp
from scipy.stats import binom

from streambhmm import compute_moments, simulate
from streambhmm.moments.features import beta_map, decode_cells, encode, histogram_layout
from streambhmm.moments.histograms import grouped_histograms
from streambhmm.learn.criterion import Objective, Weights
from streambhmm.learn.expected import ExpectedFeatures
from streambhmm.learn.histograms import HistogramLikelihood, unique_rows
from streambhmm.learn.simulate import model, population_moments

from ..conftest import STICKY, WELL_SEPARATED


def log_bin(c, mu, p):
    return gammaln(c + 1) - gammaln(mu + 1) - gammaln(c - mu + 1) + mu * np.log(p) + (c - mu) * np.log1p(-p)


def reference_loglik(moments, width, levels, pi, transmat) -> float:
    """The histogram's log-likelihood given coverage, per triple: cell by cell from the raw
    histogram, in the log domain: log sum over state paths of pi (A) prod_slots Bin(mu' | c',
    level)."""
    layout = moments.histogram_layout(width)
    hist = moments.bin_histogram if width == 1 else moments.pair_histogram
    total = 0.0
    for row in range(hist.shape[0]):
        cells = np.flatnonzero(hist[row])
        cov, meth = decode_cells(cells, layout)
        slots = [log_bin(cov[:, g][:, None], meth[:, g][:, None], levels[:, s][None, :])
                 for g, s in enumerate(layout.slot_samples(row))]  # each (cells, m)
        if width == 1:
            values = logsumexp(np.log(pi) + sum(slots), axis=1)
        else:
            half = len(slots) // 2
            first, second = sum(slots[:half]), sum(slots[half:])
            joint = np.log(pi)[None, :, None] + first[:, :, None] + np.log(transmat)[None] + second[:, None, :]
            values = logsumexp(joint.reshape(len(cells), -1), axis=1)
        total += hist[row, cells] @ values
    return total / moments.n_triples


def histogram_setting(n_samples: int, underflow: bool):
    """Moments of a simulated methylome (60 reads per bin) and parameters at which to evaluate
    its histograms: 4 states at random levels, or with ``underflow`` 2 states at 1e-30 and
    1 - 1e-12 in opposite samples (state 0 unmethylated in the even samples, state 1 in the odd
    ones) and A's off-diagonal at 1e-300. Then a cell of two samples' unmethylated bins, of a
    single sample's unmethylated bin then a methylated one, or of three samples' methylated
    bins has a likelihood below the kernels' TINY relative to its entries' best states: the
    kernels take it to the log domain."""
    rng = np.random.default_rng(n_samples)
    sim = simulate(model(WELL_SEPARATED[:, :1].repeat(n_samples, axis=1), STICKY), [3000], coverage=60,
                   random_state=1)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=6)
    if underflow:
        parity = (np.arange(2)[:, None] + np.arange(n_samples)[None, :]) % 2
        levels = np.where(parity == 0, 1e-30, 1 - 1e-12)
        transmat = np.array([[1.0, 1e-300], [1e-300, 1.0]])
        pi = np.array([0.3, 0.7])
    else:
        levels = rng.uniform(0.05, 0.95, (4, n_samples))
        transmat = rng.dirichlet(np.ones(4), size=4)
        pi = rng.dirichlet(np.ones(4))
    return mom, levels, pi, transmat


@pytest.mark.parametrize("underflow", [False, True])
@pytest.mark.parametrize("n_samples", [1, 2, 3])
def test_compiled_histogram_likelihoods_equal_the_log_domain_sum(n_samples, underflow):
    mom, levels, pi, transmat = histogram_setting(n_samples, underflow)
    for width in (1, 2):
        value = HistogramLikelihood(mom, width)(levels, pi, transmat)[0]
        assert value == pytest.approx(-reference_loglik(mom, width, levels, pi, transmat),
                                      rel=1e-10)


def test_single_bins_and_pairs_of_both_emissions_call_the_kernels_with_one_signature(monkeypatch):
    """numba compiles a kernel once per signature of its arguments: both widths and both
    emissions pass the same types, so a new installation's first fit compiles each once."""
    import numba

    from streambhmm.learn import _emission_kernels, _refine_kernels

    signatures = {}

    def recording(module, name):
        kernel = getattr(module, name)

        def record(*args):
            signatures.setdefault(name, set()).add(tuple(numba.typeof(arg) for arg in args))
            return kernel(*args)
        return record

    for module, name in ((_emission_kernels, "entry_logliks"), (_refine_kernels, "mixture_loglik"),
                         (_emission_kernels, "entry_slopes")):
        monkeypatch.setattr(module, name, recording(module, name))
    mom, levels, pi, transmat = histogram_setting(2, underflow=False)
    for width in (1, 2):
        for dispersion in (None, np.full(levels.shape, 0.1)):
            HistogramLikelihood(mom, width)(levels, pi, transmat, dispersion)
    assert {name: len(found) for name, found in signatures.items()} == \
        {"entry_logliks": 1, "mixture_loglik": 1, "entry_slopes": 1}


@pytest.mark.parametrize("underflow", [False, True])
@pytest.mark.parametrize("n_samples", [1, 2, 3])
def test_histogram_gradients_equal_finite_differences(n_samples, underflow):
    """The compiled kernels' gradients in levels, pi and A against finite differences, in the
    linear domain and where cells underflow it."""
    mom, levels, pi, transmat = histogram_setting(n_samples, underflow)

    def numeric(x, f, near_one=False, h=1e-4):
        """x df/dx by central differences in log x (in log(1 - x), -(1 - x) df/dx, for
        ``near_one`` entries above 1/2): each entry's step well scaled however near 0 or 1.
        NaN for an entry within 1e-9 of 1, which float64 cannot move by a relative step."""
        flip = near_one & (x > 0.5)
        room = np.where(flip, 1 - x, x)
        out = np.full(x.shape, np.nan)
        for i in np.ndindex(x.shape):
            if flip[i] and room[i] < 1e-9:
                continue
            moved = [x.copy(), x.copy()]
            for k, sign in enumerate((1, -1)):
                step = room[i] * np.exp(sign * h)
                moved[k][i] = 1 - step if flip[i] else step
            out[i] = (f(moved[0]) - f(moved[1])) / (2 * h)
        return out, np.where(flip, -room, room)

    for width in (1, 2):
        histogram = HistogramLikelihood(mom, width)
        _, g_levels, _, g_pi, g_a = histogram(levels, pi, transmat)

        def value(lv=levels, p=pi, a=transmat):
            return histogram(lv, p, a)[0]

        checks = [(g_levels, *numeric(levels, lambda lv: value(lv=lv), near_one=True)),
                  (g_pi, *numeric(pi, lambda p: value(p=p)))]
        if width == 2:
            checks.append((g_a, *numeric(transmat, lambda a: value(a=a))))
        else:
            assert not g_a.any()  # a single bin does not depend on A
        for grad, fd, scale in checks:
            movable = np.isfinite(fd)
            assert movable.sum() >= grad.size // 2
            np.testing.assert_allclose((scale * grad)[movable], fd[movable], rtol=1e-5,
                                       atol=1e-7 * np.abs(scale * grad).max())


@pytest.mark.parametrize("n_samples", [1, 2])
def test_the_criterion_gradient_equals_finite_differences(n_samples):
    coverage = [[40, 0.5], [12, 20], [15, 8], [20, 20]]  # state-dependent, and uncovered bins in sample 2
    sim = simulate(model(WELL_SEPARATED[:, :n_samples], STICKY), [5000], coverage=np.array(coverage)[:, :n_samples],
                   random_state=2)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=8)
    objective = Objective(mom, Weights(1.0, 0.5, 1.0, 0.7), grid_points=64)
    m = 3
    x = np.random.default_rng(0).normal(size=sum(objective._sizes(m)))
    value, grad = objective(x, m)
    numeric = np.array([(objective(x + e, m)[0] - objective(x - e, m)[0]) / 2e-6 for e in np.eye(x.size) * 1e-6])
    np.testing.assert_allclose(grad, numeric, atol=1e-6 * max(1.0, np.abs(grad).max()))


def test_expected_features_equal_the_naive_expectation():
    """E[phi(c, mu) | p] for c from a histogram and mu ~ Bin(c, p), against beta_map summed
    over every (c, mu), with the tabulated derivative against finite differences."""
    histogram = np.zeros(400)
    histogram[[0, 3, 17, 40, 128, 300, 399]] = [5, 1, 2, 3, 1, 1, 2]  # 300 and 399 fall in buckets
    g = ExpectedFeatures(histogram, n_bins=10)
    levels = np.array([0.0, 0.013, 0.3, 0.71, 0.999, 1.0])
    value, slope = g(levels)
    expected = np.zeros((levels.size, 10))
    weights = histogram / histogram.sum()
    for c in np.flatnonzero(histogram):
        mu = np.arange(c + 1)
        expected += weights[c] * binom.pmf(mu[None, :], c, levels[:, None]) @ beta_map(np.full(c + 1, c), mu, 10)
    # coverage buckets 2% wide above 128 move the mass by far less than the interpolation error
    np.testing.assert_allclose(value, expected, atol=2e-3)
    np.testing.assert_allclose(value.sum(axis=1), 1.0, atol=1e-9)
    inner = levels[1:-1]
    numeric = (g(inner + 1e-6)[0] - g(inner - 1e-6)[0]) / 2e-6
    np.testing.assert_allclose(slope[1:-1], numeric, atol=1e-4)


@pytest.mark.slow
def test_simulated_histograms_approach_the_population_histograms(four_state_model):
    sim = simulate(four_state_model, [300_000], coverage=[[60, 12], [12, 60], [30, 30], [20, 40]],
                   random_state=5)
    emp = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=6)
    pop = population_moments(four_state_model, n_bins=6, coverage=[[60, 12], [12, 60], [30, 30], [20, 40]],
                             n_triples=emp.n_triples)
    for width, name in ((1, "bin_histogram"), (2, "pair_histogram")):
        a, b = getattr(emp, name)[0] / emp.n_triples, getattr(pop, name)[0] / pop.n_triples
        assert a.sum() == pytest.approx(1.0) and b.sum() == pytest.approx(1.0)
        cells = np.flatnonzero((a > 0) | (b > 0))
        cov, meth = decode_cells(cells, emp.histogram_layout(width))
        for slot in range(cov.shape[1]):  # each slot's thinned coverage, and its mean methylated reads
            coverage_a = np.bincount(cov[:, slot], a[cells])
            coverage_b = np.bincount(cov[:, slot], b[cells], minlength=coverage_a.size)
            assert np.abs(coverage_a - coverage_b).sum() < 0.01, (name, slot)
            assert meth[:, slot] @ a[cells] == pytest.approx(meth[:, slot] @ b[cells], rel=0.01)
        # the slots' dependence: their methylated reads' covariance
        assert ((meth[:, 0] * meth[:, -1]) @ a[cells] - (meth[:, 0] @ a[cells]) * (meth[:, -1] @ a[cells])
                == pytest.approx((meth[:, 0] * meth[:, -1]) @ b[cells] - (meth[:, 0] @ b[cells])
                                 * (meth[:, -1] @ b[cells]), rel=0.03))
    width = max(emp.coverage_histogram.shape[1], pop.coverage_histogram.shape[1])
    a = np.pad(emp.coverage_histogram, ((0, 0), (0, width - emp.coverage_histogram.shape[1]))) / emp.n_triples
    b = np.pad(pop.coverage_histogram, ((0, 0), (0, width - pop.coverage_histogram.shape[1]))) / pop.n_triples
    assert np.abs(a - b).sum(axis=1).max() < 0.02


def naive_thinned_histogram(methylated, coverage, width, layout):
    """Cell by cell: each tuple's slots thinned to at most ``cap`` reads by the hypergeometric
    law (scipy), their product added to the row-major cell of (pair_keys per slot)."""
    from scipy.stats import hypergeom
    cap = layout.cap
    n_cells = (cap + 1) * (cap + 2) // 2
    out = np.zeros(layout.shape)
    for row in range(out.shape[0]):
        samples = layout.slot_samples(row)
        for t in range(1, methylated.shape[0] - 1):  # middle bins of the triples (one sequence)
            dist = np.ones(1)
            for g, s in enumerate(samples):
                b = t + g // len(set(samples)) if layout.joint else t + g
                c, mu = int(coverage[b, s]), int(methylated[b, s])
                slot = np.zeros(n_cells)
                if c <= cap:
                    slot[c * (c + 1) // 2 + mu] = 1.0
                else:
                    j = np.arange(cap + 1)
                    slot[cap * (cap + 1) // 2 + j] = hypergeom(c, mu, cap).pmf(j)
                dist = np.outer(dist, slot).ravel()
            out[row] += dist
    return out


@pytest.mark.parametrize("n_samples, budget", [(1, 1 << 10), (2, 1 << 19), (2, 1 << 12), (3, 1 << 10), (3, 1 << 5)])
def test_thinned_histograms_equal_the_naive_hypergeometric_sum(n_samples, budget):
    rng = np.random.default_rng(7)
    n = 150
    coverage = rng.integers(0, 60, size=(n, n_samples))
    methylated = rng.binomial(coverage, rng.uniform(0.05, 0.95, size=(n, n_samples)))
    moments = compute_moments(methylated, coverage, histogram_budget=budget)
    for width, hist in ((1, moments.bin_histogram), (2, moments.pair_histogram)):
        layout = moments.histogram_layout(width)
        assert (coverage > layout.cap).mean() > 0.2 and (coverage <= layout.cap).any()  # both kinds of slot
        np.testing.assert_allclose(hist, naive_thinned_histogram(methylated, coverage, width, layout),
                                   rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_samples, budget, max_coverage", [(1, 1 << 10, 60), (2, 1 << 12, 60), (2, 1 << 12, 4),
                                                           (3, 1 << 10, 60)])
def test_grouped_histograms_are_each_groups_naive_histogram(n_samples, budget, max_coverage):
    """Groups of consecutive tuples (a genome's blocks) in one pass, some empty, with rows
    merged within a group (few codes) or not (many): each group's naive histogram."""
    rng = np.random.default_rng(3)
    n = 120
    coverage = rng.integers(0, max_coverage, size=(n, n_samples))
    methylated = rng.binomial(coverage, rng.uniform(0.05, 0.95, size=(n, n_samples)))
    features = encode(methylated, coverage, 8)
    bounds = np.array([0, 30, 30, 71, n - 2])  # over the n - 2 middle bins 1 .. n - 2
    for width in (1, 2):
        layout = histogram_layout(n_samples, width, budget)
        grouped = grouped_histograms(features, np.arange(1, n - 1), bounds, width, layout=layout)
        for g in range(bounds.size - 1):
            lo, hi = bounds[g], bounds[g + 1]
            part = slice(lo, hi + 2)  # the group's middle bins lo + 1 .. hi, with a bin on each side
            np.testing.assert_allclose(grouped[g], naive_thinned_histogram(methylated[part], coverage[part], width,
                                                                          layout), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_samples, budget", [(2, 1 << 12), (2, 1 << 19), (3, 1 << 10)])
def test_histograms_where_a_sample_has_no_reads_are_naive(n_samples, budget, monkeypatch):
    """Tuples thinned in some slots and without reads in the others (a sample uncovered, as
    is common where samples are compared) are added as matrix products, and each group's
    histogram is still the naive one."""
    from streambhmm.moments import histograms

    products = []
    add_product = histograms._add_product
    # every such set a product, however small (the thresholds only weigh the cost)
    monkeypatch.setattr(histograms, "PRODUCT_MIN_TUPLES", 1)
    monkeypatch.setattr(histograms, "PRODUCT_MIN_ENTRIES", 1)
    monkeypatch.setattr(histograms, "_add_product", lambda tuples, counts, free, *rest: (
        products.append((free.size, tuples.shape[1])), add_product(tuples, counts, free, *rest)))
    rng = np.random.default_rng(5)
    n = 400
    coverage = rng.integers(20, 60, size=(n, n_samples)) * (rng.random((n, n_samples)) > 0.3)
    methylated = rng.binomial(coverage, rng.uniform(0.05, 0.95, size=(n, n_samples)))
    features = encode(methylated, coverage, 8)
    bounds = np.array([0, 150, 150, 290, n - 2])
    for width in (1, 2):
        layout = histogram_layout(n_samples, width, budget)
        grouped = grouped_histograms(features, np.arange(1, n - 1), bounds, width, layout=layout)
        for g in range(bounds.size - 1):
            part = slice(bounds[g], bounds[g + 1] + 2)
            np.testing.assert_allclose(grouped[g], naive_thinned_histogram(methylated[part], coverage[part], width,
                                                                          layout), rtol=1e-10, atol=1e-12)
    assert any(2 <= free < slots for free, slots in products)  # some slots uncovered, at least two thinned


def test_histograms_of_no_tuples_are_zero():
    # two samples' pairs: the layout where sets of tuples with an uncovered sample are products
    features = encode(np.array([[3, 0], [4, 1]]), np.array([[9, 0], [8, 5]]), 8)
    for width in (1, 2):
        assert not grouped_histograms(features, np.arange(0), np.array([0, 0, 0]), width).any()


@pytest.mark.parametrize("n_samples", [1, 2])
def test_the_beta_binomial_criterion_gradient_equals_finite_differences(n_samples):
    sim = simulate(model(WELL_SEPARATED[:, :n_samples], STICKY), [4000], coverage=15, random_state=2,
                   dispersion=np.full((4, n_samples), 0.1))
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=8)
    objective = Objective(mom, Weights(1.0, 0.5, 1.0, 0.7), grid_points=64, emission="betabinomial")
    m = 3
    x = np.random.default_rng(0).normal(size=sum(objective._sizes(m)))
    value, grad = objective(x, m)
    numeric = np.array([(objective(x + e, m)[0] - objective(x - e, m)[0]) / 2e-6 for e in np.eye(x.size) * 1e-6])
    np.testing.assert_allclose(grad, numeric, atol=1e-6 * max(1.0, np.abs(grad).max()))


@pytest.mark.slow
@pytest.mark.parametrize("n_samples", [1, 2])
def test_the_one_pass_beta_binomial_fit_recovers_levels_dispersions_and_transitions(n_samples):
    from streambhmm import SpectralBinomialHMM

    levels = np.array([[0.05, 0.1], [0.4, 0.8], [0.7, 0.2], [0.95, 0.9]])[:, :n_samples]
    dispersion = np.array([[0.05, 0.02], [0.15, 0.1], [0.1, 0.2], [0.03, 0.05]])[:, :n_samples]
    sticky = np.full((4, 4), 0.02 / 3) + np.eye(4) * (0.98 - 0.02 / 3)
    sim = simulate(model(levels, sticky), [100_000], coverage=20, random_state=3, dispersion=dispersion)
    est = SpectralBinomialHMM(4, random_state=0, emission="betabinomial").fit(sim.methylated, sim.coverage)
    order = np.argsort(est.methylation_[:, 0])
    np.testing.assert_allclose(est.methylation_[order], levels, atol=0.01)
    np.testing.assert_allclose(est.dispersion_[order], dispersion, atol=0.01)
    np.testing.assert_allclose(np.diag(est.transmat_)[order], np.diag(sticky), atol=0.015)
    binomial = SpectralBinomialHMM(4, random_state=0).fit(sim.methylated, sim.coverage)
    assert np.diag(binomial.transmat_).min() < 0.9  # the binomial explains the spread by switching


@pytest.mark.slow
def test_caps_hold_a_state_and_change_nothing_when_they_do_not_bind():
    """A cap above the truth leaves the fit as it is free; one below holds the state at it."""
    from streambhmm import SpectralBinomialHMM
    from streambhmm.learn.refine import StateLimits

    levels, dispersion = np.array([[0.05], [0.5], [0.9]]), np.array([[0.05], [0.1], [0.02]])
    sticky = np.full((3, 3), 0.02 / 2) + np.eye(3) * (0.98 - 0.02 / 2)
    sim = simulate(model(levels, sticky), [60_000], coverage=20, random_state=4, dispersion=dispersion)
    fits = {}
    for name, cap in (("free", None), ("loose", 0.2), ("tight", 0.02)):
        limits = None if cap is None else StateLimits(np.array([cap, 1.0, 1.0]), np.array([cap, 1.0, 1.0]))
        est = SpectralBinomialHMM(3, random_state=0, emission="betabinomial", limits=limits,
                                  allow_degenerate=True).fit(sim.methylated, sim.coverage)
        order = np.argsort(est.methylation_[:, 0])
        fits[name] = est.methylation_[order, 0], est.dispersion_[order, 0]
    np.testing.assert_allclose(fits["free"][0], levels[:, 0], atol=0.01)
    np.testing.assert_allclose(fits["loose"][0], fits["free"][0], atol=1e-3)
    np.testing.assert_allclose(fits["loose"][1], fits["free"][1], atol=1e-3)
    assert fits["tight"][0][0] <= 0.02 + 1e-9 and fits["tight"][1][0] <= 0.02 + 1e-9


def test_an_interrupted_refinement_stops_its_starts_within_a_step(monkeypatch):
    """Ctrl-C during a fit: the pool waited for every start to converge (the audit's `hmr`
    took 8 s to stop); the starts now end at their next evaluation of the criterion."""
    import threading

    from streambhmm.learn import refine as refine_module
    from streambhmm.learn.criterion import objective_for

    monkeypatch.setattr(refine_module, "_fit_threads", 2)
    sim = simulate(model(np.array([[0.1], [0.5], [0.9]]), np.full((3, 3), 0.05) + np.eye(3) * 0.85), [20_000],
                   coverage=15, random_state=1)
    objective = objective_for(compute_moments(sim.methylated, sim.coverage))
    rng = np.random.default_rng(0)
    starts = [(f"random{i}", *refine_module.sticky_start(3, 1, rng)) for i in range(4)]
    calls, interrupted = [], threading.Event()

    class Counted:  # the criterion, each evaluation noted: before or after the interrupt
        def __getattr__(self, name):
            return getattr(objective, name)

        def __call__(self, x, m):
            calls.append(interrupted.is_set())
            return objective(x, m)

    def interrupt(done, total):  # the main thread, as the first start is screened: Ctrl-C
        interrupted.set()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        refine_module.refine(Counted(), starts, progress=interrupt)
    # each of the two threads evaluates at most once more after the interrupt
    assert sum(calls) <= 2 and len(calls) - sum(calls) >= 1


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.int64, st.tuples(st.integers(1, 40), st.integers(0, 4)),
                  elements=st.one_of(st.integers(0, 3), st.integers(0, 2 ** 40))))
def test_unique_rows_are_numpys_in_numpys_order(rows):
    # the histograms' cells: one key per row, or numpy's record sort where keys would overflow
    mine, theirs = unique_rows(rows), np.unique(rows, axis=0, return_inverse=True, return_counts=True)
    assert all(np.array_equal(a.ravel(), b.ravel()) for a, b in zip(mine, theirs))
    assert mine[0].shape == theirs[0].shape


@pytest.mark.parametrize("n_samples", [1, 2])
def test_the_triples_term_is_the_kl_of_the_models_tensor(n_samples):
    """The compiled third-order term against the tensor written out with einsum."""
    sim = simulate(model(WELL_SEPARATED[:, :n_samples], STICKY), [3000], coverage=20, random_state=4)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=6)
    objective = Objective(mom, Weights(1.0, 0.5, 1.0, 0.7), grid_points=64)
    m = 3
    x = np.random.default_rng(1).normal(size=sum(objective._sizes(m)))
    terms = {}
    objective(x, m, terms)
    levels, transmat, coverage, _ = objective.unpack(x, m)
    pi = np.linalg.matrix_power(transmat.T, 4000)[:, 0]  # the stationary distribution
    obs = objective.observation(levels, coverage)[0]
    tensor = np.einsum("i,ij,jk,ai,bj,ck->abc", pi, transmat, transmat, obs, obs, obs)
    emp = mom.p123 / mom.n_triples
    blocks = n_samples ** 3  # the KL is averaged over the samples' blocks
    kl = np.sum(emp * np.log(np.where(emp > 0, emp, 1.0) / tensor)) / blocks
    assert terms["feature triples"] == pytest.approx(objective.triples_weight * kl, rel=1e-9)


def test_a_dispersed_states_features_integrate_over_its_beta():
    """O of a beta-binomial state: each coverage bucket's expected features integrated over the
    Beta distribution of levels (by scipy's quad), mixed by the state's bucket weights."""
    from scipy import integrate, stats

    sim = simulate(model(WELL_SEPARATED[:, :1], STICKY), [3000], coverage=[[40], [12], [15], [20]], random_state=2)
    mom = compute_moments(sim.methylated, sim.coverage, sim.lengths, n_bins=5)
    objective = Objective(mom, Weights(), grid_points=64, emission="betabinomial")
    levels, dispersion = np.array([[0.1], [0.6]]), np.array([[0.05], [0.2]])
    sample = objective.coverage[0]
    q = np.random.default_rng(0).dirichlet(np.ones(sample.buckets.size), size=2)
    obs = objective.observation(levels, [q], dispersion)[0]
    for h in range(2):
        a, b = levels[h, 0] * (1 / dispersion[h, 0] - 1), (1 - levels[h, 0]) * (1 / dispersion[h, 0] - 1)
        for j in range(5):
            by_bucket = [integrate.quad(lambda p: sample.features(np.array([p]))[0][k, 0, j] * stats.beta.pdf(p, a, b),
                                        0, 1, limit=200)[0] for k in range(sample.buckets.size)]
            assert obs[j, h] == pytest.approx(q[h] @ by_bucket, abs=5e-6)
