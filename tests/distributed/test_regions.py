"""Regions from posteriors: the cutting rule on known answers, invariance to the chunking,
the presets' choice of states, and the command's BED9 and table; bigWig tracks."""

import json
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import beta

from streambhmm.learn.hmm import BinomialHMM
from streambhmm.distributed.regions import (NO_CORE, RegionRule, Regions, find_regions, join_regions, preset_rule, regions_of,
                                           bin_posteriors, level_posterior, with_shoulders)
from streambhmm.distributed.shoulders import Profile, _median, chunk_profile, expected_levels, widen
from streambhmm.learn.simulate import model, simulate
from streambhmm.testing import write_store

from ..app.test_cli import run

LEVELS = np.array([[0.05], [0.35], [0.7], [0.92]])
STICKY = np.full((4, 4), 0.03 / 3) + np.eye(4) * (0.97 - 0.03 / 3)


def test_regions_merge_across_small_gaps_and_keep_their_counts():
    positions = np.array([0, 100, 200, 500, 600, 1200, 1300]) * 1
    target = np.array([0.9, 0.2, 0.8, 0.7, 0.6, 0.95, 0.1])
    meth, cov = np.array([[1], [5], [2], [0], [1], [3], [9]]), np.array([[10], [5], [4], [2], [2], [3], [9]])
    columns = [(0, meth[:, 0], cov[:, 0])]
    got = regions_of(positions, target, columns, 1, 100, RegionRule((0,), 0.5, max_gap=200))
    # bins 0, 200 (gap 100 <= 200), 500 and 600 (gap 200): one region; 1200 is 500 bp further
    assert got.start.tolist() == [0, 1200] and got.end.tolist() == [700, 1300]
    assert got.n_bins.tolist() == [4, 1] and got.methylated[:, 0].tolist() == [4, 3]
    assert got.coverage[:, 0].tolist() == [18, 3] and got.posterior_sum.tolist() == pytest.approx([3.0, 0.95])
    assert got.posterior_max.tolist() == [0.9, 0.95]
    tight = regions_of(positions, target, columns, 1, 100, RegionRule((0,), 0.5, max_gap=0))
    assert tight.start.tolist() == [0, 200, 500, 1200]
    # a seam between chunks merges the same way
    left = regions_of(positions[:3], target[:3], [(0, meth[:3, 0], cov[:3, 0])], 1, 100, RegionRule((0,), 0.5, 200))
    right = regions_of(positions[3:], target[3:], [(0, meth[3:, 0], cov[3:, 0])], 1, 100, RegionRule((0,), 0.5, 200))
    joined = join_regions(left, right, 200)
    for name in ("start", "end", "n_bins", "posterior_sum", "methylated", "coverage", "posterior_max"):
        np.testing.assert_array_equal(getattr(joined, name), getattr(got, name))
    assert len(join_regions(Regions.empty(1), right, 200)) == len(right)


def test_presets_choose_states_by_their_levels():
    levels = np.array([[0.05, 0.1], [0.3, 0.6], [0.6, 0.7], [0.9, 0.9]])
    assert preset_rule("hmr", levels).targets == (0,)
    # below 0.7 in every sample: a hypomethylated state too (a cancer genome's deepest PMDs are),
    # but not on bins narrower than 5 kb, where an HMR fills bins of its own
    assert preset_rule("pmd", levels).targets == (0, 1)
    assert preset_rule("pmd", levels, bin_size=100).targets == (1,)
    assert preset_rule("pmd", levels).min_length == 50_000
    # a beta-binomial state at low levels but spread over every level is not hypomethylated:
    # at level 0.1 and overdispersion 0.6, 91% of its levels lie below 0.5 (the caps': 92%);
    # at overdispersion 0.3, 95% do
    dispersion = np.array([[0.05, 0.6], [0.1, 0.1], [0.1, 0.1], [0.02, 0.02]])
    with pytest.raises(ValueError, match="no state that a hmr is made of"):
        preset_rule("hmr", levels, dispersion)
    dispersion[0, 1] = 0.3
    assert preset_rule("hmr", levels, dispersion).targets == (0,)
    assert preset_rule("hmr", levels, np.full((4, 2), 0.1)).targets == (0,)
    with pytest.raises(ValueError, match="no state that a hmr is made of"):
        preset_rule("hmr", np.array([[0.8], [0.9]]))
    with pytest.raises(ValueError, match="every state of the model is one a pmd is made of"):
        preset_rule("pmd", np.array([[0.3], [0.6]]))


def test_regions_cut_at_the_data_end_keep_only_those_still_long_enough():
    # domains of 5 kb bins on a chromosome whose data end at 112,300 bp
    start, end = np.array([0, 40_000, 60_000]), np.array([55_000, 105_000, 115_000])
    n = len(start)
    regions = Regions(start, end, np.array([11, 13, 11]), np.array([10.0, 12.0, 10.5]), np.arange(n)[:, None] * 1.0,
                      np.full((n, 1), 50.0), np.array([0.9, 0.8, 0.95]))
    cut = regions.cut_at(112_300, 50_000)
    # the first ends before the data's end and stays; the third, cut to 52,300 bp, is still a
    # domain; the second ends before the data's end but is 65 kb: it stays as it was
    assert cut.start.tolist() == [0, 40_000, 60_000]
    assert cut.end.tolist() == [55_000, 105_000, 112_300]
    shorter = regions.cut_at(100_000, 50_000)  # the last two cut to 60 kb and 40 kb: the 40 kb one goes
    assert shorter.start.tolist() == [0, 40_000]
    assert shorter.end.tolist() == [55_000, 100_000]
    assert shorter.n_bins.tolist() == [11, 13] and shorter.posterior_max.tolist() == [0.9, 0.8]
    assert regions.end.tolist() == [55_000, 105_000, 115_000]  # the regions cut are copies


def test_presets_keep_regions_that_meet_their_definition_in_every_sample():
    # six joined regions of two samples, 1 kb long with 10 target bins each
    meth = np.array([[0, 0], [60, 5], [5, 0], [30, 20], [10, 12], [75, 50]], float)
    cov = np.array([[100, 100], [100, 100], [100, 0], [100, 100], [100, 100], [100, 100]], float)
    n = len(meth)
    regions = Regions(np.arange(n) * 2000, np.arange(n) * 2000 + 1000, np.full(n, 10), np.full(n, 9.0), meth, cov,
                      np.ones(n))
    levels = np.array([[0.05, 0.05], [0.5, 0.5], [0.9, 0.9]])
    hmr = preset_rule("hmr", levels)
    # 0.6 in sample 1 is mostly methylated; no read in sample 2 says nothing of it; no
    # methylated read at all (the first) is as hypomethylated as can be; and in a joint call
    # 0.30 in sample 1 is nearer its state at 0.5 than its hypomethylated one at 0.05 (the
    # ceiling is midway, 0.275), where 0.10 and 0.12 are not
    assert hmr.sample_ceilings == (0.275, 0.275)
    assert hmr.keeps(regions).tolist() == [True, False, False, False, True, False]
    assert "in each sample a level nearer its hypomethylated state's than its next state's (below 0.28, 0.28)" in \
        hmr.conditions(2)
    # a state hypomethylated in sample 2 only (a cell's island the other lacks) is no
    # background there: sample 2's next state is at 0.774 (the unnamed methylomes' two cells)
    cells = preset_rule("hmr", np.array([[0.0001, 0.0001], [1.0, 0.0003], [0.625, 0.774], [0.916, 0.923]]))
    np.testing.assert_allclose(cells.sample_ceilings, [0.31255, 0.38705])
    # nor is one sample's own region state above 0.2 (at 0.28, methylated in the other: a
    # second audit lost 5 of 210 joint HMRs at 0.15 to it); a PMD state low in both is
    assert preset_rule("hmr", np.array([[0.15, 0.15], [0.28, 0.85], [0.85, 0.28], [0.85, 0.85]])
                       ).sample_ceilings == (0.5, 0.5)
    np.testing.assert_allclose(preset_rule("hmr", np.array([[0.13, 0.11], [0.03, 0.45], [0.45, 0.45], [0.85, 0.85]])
                                           ).sample_ceilings, [0.29, 0.28])
    # one sample: its state is the sample's own, and its regions below 0.5 stay
    single = preset_rule("hmr", levels[:, :1])
    assert single.sample_ceilings is None
    first = Regions(regions.start, regions.end, regions.n_bins, regions.posterior_sum, meth[:, :1], cov[:, :1],
                    regions.posterior_max)
    assert single.keeps(first).tolist() == [True, False, True, True, True, False]
    pmd = RegionRule(**{**preset_rule("pmd", levels).__dict__, "min_length": 0})
    # PMDs: below 0.7 in every sample (0.75 in one is not), at any depth
    assert pmd.keeps(regions).tolist() == [True, True, False, True, True, False]
    assert RegionRule((0,), 0.5).keeps(regions).all()  # a rule of chosen states: no definition to meet


def profile(position, level, top=None, meth=None, cov=None) -> Profile:
    """A Profile of consecutive covered bins (without reads unless given)."""
    zeros = np.zeros((level.size, 1), np.int64)
    return Profile(np.arange(level.size), np.asarray(position), level, level if top is None else top,
                   zeros if meth is None else meth, zeros if cov is None else cov)


def test_the_walks_median_is_numpys():
    """The shoulders' background is the median of up to a window of levels, by the walks' own
    insertion sort: equal to np.median to the bit, odd and even counts, ties included."""
    rng = np.random.default_rng(1)
    scratch = np.empty(20)
    for n in range(1, 21):
        for values in (rng.random(n), rng.integers(0, 4, n) / 4.0, np.full(n, 0.3)):
            assert _median(values, scratch) == np.median(values)


def test_shoulders_widen_a_core_half_way_to_its_local_background():
    # levels of consecutive covered bins, 100 bp apart; cores (level 0.05) at rows 33-37 and 102-106
    background = [0.9] * 30
    left = background + [0.6, 0.4, 0.3] + [0.05] * 5 + [0.2, 0.5] + background
    # inside a PMD (0.5): half-way is 0.275, so 0.2 is a shoulder and 0.3 is not
    pmd = [0.5] * 30 + [0.3, 0.2] + [0.05] * 5 + [0.25, 0.3] + [0.5] * 30
    level = np.array(left + pmd)
    position = np.arange(level.size) * 100
    position[107:] += 5000  # a desert after the second core: no walk crosses it
    starts, ends = np.array([3300, 10200]), np.array([3800, 10700])
    got = widen(starts, ends, profile(position, level), level.size, 0.05, 1000, 100)
    # left of the first core 0.3 and 0.4 are nearer 0.05 than the 0.9 beyond, 0.6 is not; right, 0.2 but not 0.5
    assert got[0].tolist() == [3100, 10100] and got[1].tolist() == [3900, 10700] and got[2].tolist() == [0, 1]
    # a core at 0.2 in a background of 0.95: half-way is 0.575, but a shoulder stays below 0.5
    high = np.array([0.95] * 30 + [0.52, 0.45] + [0.2] * 4 + [0.45, 0.55] + [0.95] * 30)
    got = widen(np.array([3200]), np.array([3600]), profile(np.arange(high.size) * 100, high), high.size, 0.2,
                1000, 100)
    assert got[0].tolist() == [3100] and got[1].tolist() == [3700]
    # two samples: a bin whose expected level is 0.45 over the samples but 0.55 in one of them is
    # no shoulder (a helper's audit: such bins carried a joint HMR above 0.5 in one sample)
    top = high.copy()
    top[31] = 0.55
    got = widen(np.array([3200]), np.array([3600]), profile(np.arange(high.size) * 100, high, top), high.size, 0.2,
                1000, 100)
    assert got[0].tolist() == [3200] and got[1].tolist() == [3700]
    # two walks that meet merge their regions
    near = np.array([0.9] * 30 + [0.05] * 4 + [0.3] * 3 + [0.05] * 4 + [0.9] * 30)
    pos = np.arange(near.size) * 100
    got = widen(np.array([3000, 3700]), np.array([3400, 4100]), profile(pos, near), near.size, 0.05, 1000, 100)
    assert got[0].tolist() == [3000] and got[1].tolist() == [4100] and got[2].tolist() == [0, 0]
    # a chunk hands on the bins its regions' walks and its neighbours' may read
    counts = [(0, np.zeros(level.size, np.int64), np.ones(level.size, np.int64))]
    kept = chunk_profile(position, level[:, None], np.ones((1, 1)), None, counts, 1, starts, ends, 100, window=3)
    # the chunk's first and last 2 x 3 + 1 bins, and as many before each region's first bin and after its last
    assert kept.index.tolist() == sorted({*range(7), *range(26, 34), *range(37, 44), *range(95, 103), *range(106, 113),
                                          *range(level.size - 7, level.size)})


def test_a_beta_binomial_hmr_is_kept_when_its_pooled_reads_put_it_at_most_at_02_in_every_sample():
    """With overdispersions, a region's reads, pooled per sample, must put its level at most
    0.2 under one target state (its Beta updated by them, samples multiplied) with posterior
    at least 0.5: a sparse sample's bins count by their state's prior, its region's reads do
    not (known answers from scipy's Beta CDF)."""
    levels = np.array([[0.05, 0.16], [0.18, 0.10], [0.85, 0.85]])
    dispersion = np.array([[0.05, 0.15], [0.10, 0.10], [0.05, 0.05]])
    rule = preset_rule("hmr", levels, dispersion)
    assert rule.targets == (0, 1)
    # 1 kb regions of 10 bins: both samples low; sample 2 at 13 of 45 reads (0.29, sparse);
    # sample 2 at 9 of 45 (0.20); and at 5 of 100 in both
    meth = np.array([[3, 2], [3, 13], [3, 9], [5, 5]], float)
    cov = np.array([[300, 45], [300, 45], [300, 45], [100, 100]], float)
    n = len(meth)
    regions = Regions(np.arange(n) * 2000, np.arange(n) * 2000 + 1000, np.full(n, 10), np.full(n, 9.0), meth, cov,
                      np.ones(n))
    scale = 1 / dispersion - 1
    a, b = levels * scale, (1 - levels) * scale
    want = np.max([np.prod(beta.cdf(0.2, a[h] + meth, b[h] + cov - meth), axis=1) for h in (0, 1)], axis=0)
    assert rule.pooled_level_posterior(regions) == pytest.approx(want, rel=1e-10)
    assert want[1] < 0.2 and want[0] > 0.99 and want[3] > 0.99
    assert rule.keeps(regions).tolist() == (want >= 0.5).tolist() == [True, False, want[2] >= 0.5, True]
    assert "its reads, pooled, putting its level at most 0.2 in every sample" in rule.conditions(2)
    # a binomial model has no Beta of levels: its regions are kept by their mean level alone
    assert preset_rule("hmr", levels).state_betas is None and preset_rule("hmr", levels).keeps(regions).all()


def hmr_cores(hmm, positions, meth, cov) -> Regions:
    """One sample's HMR cores in memory, from scipy's Beta distribution and a loop over the
    covered bins: runs of consecutive ones (at most 1 kb apart) whose posterior of a level at
    most 0.5, sum_h P(h | data) P(p <= 0.5 | h, the bin's reads), is at least 0.5, cut to
    their outermost bins whose posterior of a level at most 0.2 is (at least 4 of them),
    whose pooled reads put the level at most 0.2 under the hypomethylated state (state 0)."""
    scale = (1 - hmm.dispersion[:, 0]) / hmm.dispersion[:, 0]
    a, b = hmm.methylation_[:, 0] * scale, (1 - hmm.methylation_[:, 0]) * scale
    post = hmm.predict_proba(meth, cov)
    below = {cap: (post * beta.cdf(cap, a + meth[:, None], b + cov[:, None] - meth[:, None])).sum(axis=1)
             for cap in (0.2, 0.5)}
    runs, current = [], []
    for i in range(positions.size):
        if below[0.5][i] >= 0.5 and current and positions[i] - positions[current[-1]] - 100 <= 1000:
            current.append(i)
            continue
        runs.append(current)
        current = [i] if below[0.5][i] >= 0.5 else []
    runs.append(current)
    rows = []
    for bins in runs:
        counted = [i for i in bins if below[0.2][i] >= 0.5]
        if len(counted) < 4:
            continue
        inside = np.arange(counted[0], counted[-1] + 1)
        m, c = meth[inside].sum(), cov[inside].sum()
        if m / c < 0.5 and beta.cdf(0.2, a[0] + m, b[0] + c - m) >= 0.5:
            rows.append((positions[counted[0]], positions[counted[-1]] + 100, len(counted),
                         below[0.2][counted].sum(), m, c))
    start, end, n_bins, score, m, c = (np.array(x) for x in zip(*rows))
    return Regions(start, end, n_bins, score, m[:, None] * 1.0, c[:, None] * 1.0, np.ones(len(rows)))


def test_a_bins_posterior_is_of_its_level_given_its_reads():
    """hmr's bins: the posterior of a level at most 0.2 in every sample, over states each
    state's Beta distribution of levels updated by the bin's reads (known answers: 12 of 77
    reads methylated, in a dispersed state at 0.41, at most 0.2 with probability 0.79, as the
    docstring has it); samples multiply. A bin counts by it, and is a run's by its posterior
    of a level at most 0.5 (the same sum); a binomial model keeps the states' alone."""
    methylation = np.array([[0.04, 0.04], [0.41, 0.41], [0.93, 0.93]])
    dispersion = np.array([[0.075, 0.075], [0.213, 0.213], [0.026, 0.026]])
    rule = preset_rule("hmr", methylation, dispersion)
    assert rule.targets == (0,) and rule.level_cap == 0.2
    post = np.array([[0.0, 1.0, 0.0], [0.3, 0.7, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    meth, cov = np.array([[12, 0], [12, 0], [1, 0], [9, 0]]), np.array([[77, 0], [77, 0], [2, 0], [10, 0]])
    one, half = level_posterior(post, [(0, meth[:, 0], cov[:, 0])], (0.2, 0.5), methylation[:, :1],
                                dispersion[:, :1]).T
    a, b = methylation[:, 0] * (1 / dispersion[:, 0] - 1), (1 - methylation[:, 0]) * (1 / dispersion[:, 0] - 1)
    cdf = [beta.cdf(0.2, a[h] + meth[:, 0], b[h] + cov[:, 0] - meth[:, 0]) for h in range(3)]
    assert one == pytest.approx(sum(post[:, h] * cdf[h] for h in range(3)), rel=1e-10)
    cdf_half = [beta.cdf(0.5, a[h] + meth[:, 0], b[h] + cov[:, 0] - meth[:, 0]) for h in range(3)]
    assert half == pytest.approx(sum(post[:, h] * cdf_half[h] for h in range(3)), rel=1e-10)
    assert one[0] == pytest.approx(0.791, abs=1e-3) and one[2] < 1e-6 and one[3] < 0.5  # 9 of 10 reads methylated
    # two samples: the product given each state (sample 1 has no reads: its states' prior mass below 0.2)
    both = level_posterior(post, [(k, meth[:, k], cov[:, k]) for k in range(2)], (0.2,), methylation,
                           dispersion)[:, 0]
    prior = [beta.cdf(0.2, a[h], b[h]) for h in range(3)]
    assert both == pytest.approx(sum(post[:, h] * cdf[h] * prior[h] for h in range(3)), rel=1e-10)
    # a run's bins by their reads at most half methylated (not the third, in a state at 0.93);
    # counted by the level at most 0.2 (the first two)
    assert rule.run_cap == 0.5
    run, core = bin_posteriors(post, [(0, meth[:, 0], cov[:, 0])], rule, methylation[:, :1], dispersion[:, :1])
    assert run == pytest.approx(half, rel=1e-12) and core == pytest.approx(one, rel=1e-12)
    assert (core >= 0.5).tolist() == [True, True, False, False] and run[2] < 1e-3
    states, none = bin_posteriors(post, [(0, meth[:, 0], cov[:, 0])], rule, methylation[:, :1], None)
    assert none is None and states == pytest.approx(post[:, 0], rel=1e-12)


def test_a_run_goes_on_through_its_bins_and_is_cut_to_its_counted_ones():
    """Bins of a run that do not count (the third, eighth and tenth) carry it on, but a run is
    cut to its outermost counted bins (the tenth), except at the segment's open ends (the
    first two); a bin of neither ends it. Its score and bins are the counted ones'."""
    positions = np.arange(12) * 100
    target = np.array([0.9, 0.9, 0.7, 0.9, 0.9, 0.2, 0.9, 0.8, 0.9, 0.6, 0.2, 0.9])
    core = np.array([0.1, 0.9, 0.3, 0.8, 0.7, 0.0, 0.9, 0.4, 0.6, 0.1, 0.0, 0.2])
    meth = np.arange(12.0)
    rule = RegionRule((0,), 0.5, 1000, 0, 1, "HMR", bridge_covered=False)
    found = regions_of(positions, target, [(0, meth, np.ones(12) * 10)], 1, 100, rule, core)
    assert found.start.tolist() == [0, 600, 1100] and found.end.tolist() == [500, 900, 1200]
    assert found.core_start.tolist() == [100, 600, NO_CORE[0]] and found.core_end.tolist() == [500, 900, NO_CORE[1]]
    assert found.n_bins.tolist() == [3, 2, 0] and found.posterior_sum == pytest.approx([2.4, 1.5, 0.0])
    assert found.posterior_max == pytest.approx([0.9, 0.9, 0.0])
    assert found.methylated[:, 0].tolist() == [meth[0:5].sum(), meth[6:9].sum(), meth[11]]
    assert found.open_start and found.open_end
    # inside a chromosome the open ends are cut once the next parts are joined (Regions.cut_to_cores)


def test_a_part_whose_region_is_merged_away_hands_on_its_closed_end():
    """A chunk's only region, merged into the region before it, ends before the chunk does:
    the next chunk's first region is no continuation of it (a seam once took numpy's False
    for an open end and joined two HMRs 6 kb apart)."""
    rule = RegionRule((0,), 0.5, 1000, 0, 1, "HMR", bridge_covered=False)
    ones = np.ones(5)
    parts = [regions_of(np.arange(5) * 100 + 500 * k, target, [(0, ones, ones)], 1, 100, rule)
             for k, target in enumerate([np.array([0, 0, 0.9, 0.9, 0.9]), np.array([0.9, 0.9, 0, 0, 0]),
                                         np.array([0.9, 0.9, 0, 0, 0])])]
    assert parts[1].open_start and parts[1].open_end is False
    joined = join_regions(join_regions(parts[0], parts[1], 1000, False), parts[2], 1000, False)
    assert joined.start.tolist() == [200, 1000] and joined.end.tolist() == [700, 1200]


@pytest.fixture(scope="module")
def one_sample(tmp_path_factory):
    sim = simulate(model(LEVELS, STICKY), [6000, 2500], coverage=8, random_state=0, dispersion=0.05)
    chroms = {"chr2": (np.arange(6000), sim.methylated[:6000], sim.coverage[:6000]),
              "chr10": (np.arange(2500), sim.methylated[6000:], sim.coverage[6000:])}
    root = tmp_path_factory.mktemp("regions")
    stores = [write_store(root / f"s{size}.zarr", chroms, ["A"], chunk_size=size) for size in (333, 100_000, 25)]
    hmm = BinomialHMM(4, emission="betabinomial").start_from(np.full(4, 0.25), STICKY, LEVELS, np.full((4, 1), 0.05))
    return stores, hmm


@pytest.mark.slow
def test_a_bins_expected_level_is_its_states_levels_moved_by_its_own_reads():
    """Beta-binomial: sum over states of the posterior times the Beta posterior's mean (a + mu) /
    (a + b + c) (known answers); a bin without reads in a sample, or a binomial model, has its
    states' levels; so a bin whose reads sit well below its dispersed state reads lower."""
    methylation = np.array([[0.05, 0.05], [0.4, 0.4]])
    dispersion = np.array([[0.1, 0.1], [0.2, 0.2]])  # a + b = 9 and 4
    post = np.array([[1.0, 0.0], [0.0, 1.0], [0.25, 0.75]])
    meth, cov = np.array([[0, 0], [2, 0], [2, 0]]), np.array([[20, 0], [10, 0], [10, 0]])
    counts = [(k, meth[:, k], cov[:, k]) for k in range(2)]
    got = expected_levels(post, counts, methylation, dispersion)
    a = methylation * (1 - dispersion) / dispersion
    assert got[:, 0] == pytest.approx([a[0, 0] / 29, (a[1, 0] + 2) / 14,
                                       0.25 * (a[0, 0] + 2) / 19 + 0.75 * (a[1, 0] + 2) / 14], rel=1e-12)
    assert got[1, 0] == pytest.approx(0.2571428, abs=1e-6)  # 0.2 read in a state at 0.4
    assert got[:, 1] == pytest.approx(post @ methylation[:, 1], rel=1e-12)  # no reads in sample 1
    assert expected_levels(post, counts, methylation, None) == pytest.approx(post @ methylation, rel=1e-12)


def test_regions_do_not_depend_on_the_chunking(one_sample, dask_clients):
    stores, hmm = one_sample
    rule = RegionRule((0, 1), 0.5, 300, 500, 2)
    found = [find_regions(store, hmm, dask_clients[1], rule, ["A"]) for store in stores]
    for chrom in ("chr2", "chr10"):
        a, b = found[0][chrom], found[1][chrom]
        assert len(a) > 3
        for name in ("start", "end", "n_bins", "methylated", "coverage"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_allclose(a.posterior_sum, b.posterior_sum, rtol=1e-9)
        assert ((a.end - a.start) >= 500).all() and (a.n_bins >= 2).all()


def test_a_region_that_bridges_covered_bins_has_its_intervals_levels(tmp_path):
    """A PMD bridges bins of other states within its gaps: its levels are every read of its
    interval, the bridged bins' too, as a user recounting the BED interval finds (a helper's
    joint call over 16 samples wrote 0.692 for a domain whose interval reads 0.764), and a
    domain whose interval is not partially methylated is dropped."""
    from streambhmm.io.tasks import InProcessClient

    # 100 bp bins: 20 methylated, 30 partially methylated with 2 methylated bins inside, 20 methylated
    level = np.r_[[0.95] * 20, [0.5] * 14, [0.95] * 2, [0.5] * 14, [0.95] * 20]
    cov = np.full((level.size, 1), 20)
    cov[34:36] = 200  # the bridged bins are deep: they carry the interval's level
    meth = np.rint(level[:, None] * cov).astype(np.int64)
    store = write_store(tmp_path / "s.zarr", {"chr1": (np.arange(level.size), meth, cov)}, ["A"], chunk_size=37)
    hmm = BinomialHMM(2).start_from(np.array([0.5, 0.5]), np.array([[0.97, 0.03], [0.03, 0.97]]),
                                    np.array([[0.5], [0.95]]))
    rule = RegionRule((0,), 0.5, max_gap=300, min_length=1000, name="PMD")
    found = find_regions(store, hmm, InProcessClient(1), rule, ["A"])["chr1"]
    assert found.start.tolist() == [2000] and found.end.tolist() == [5000] and found.n_bins.tolist() == [28]
    assert found.methylated[0, 0] == meth[20:50, 0].sum() and found.coverage[0, 0] == cov[20:50, 0].sum()
    assert found.levels()[0, 0] == pytest.approx(0.5 * 560 / 960 + 0.95 * 400 / 960)  # 0.6875, not 0.5
    # below 0.7 by its partially methylated bins, 0.73 by its interval: not a PMD
    cov[34:36] = 300
    meth = np.rint(level[:, None] * cov).astype(np.int64)
    deeper = write_store(tmp_path / "d.zarr", {"chr1": (np.arange(level.size), meth, cov)}, ["A"], chunk_size=37)
    assert len(find_regions(deeper, hmm, InProcessClient(1), replace(rule, max_level=0.7), ["A"])["chr1"]) == 0
    assert len(find_regions(store, hmm, InProcessClient(1), replace(rule, max_level=0.7), ["A"])["chr1"]) == 1


def test_a_domain_is_most_of_its_bins_not_one_islands_reads(tmp_path):
    """A helper's RRBS "PMD": methylated bins and one CpG island of many unmethylated reads,
    whose pooled level is below 0.7 while most of its bins are not. The PMD rule asks most of
    a domain's bins with reads to be below 0.7 by their own reads, in every sample."""
    from streambhmm.io.tasks import InProcessClient

    # 100 bp bins: 20 methylated, then 30 of the partially methylated state: 16 at 0.8, 4 at 0.5 and
    # an island of 10 unmethylated bins of deep reads; then 20 methylated
    level = np.r_[[0.95] * 20, [0.8] * 8, [0.5] * 4, [0.02] * 10, [0.8] * 8, [0.95] * 20]
    cov = np.full((level.size, 1), 20)
    cov[32:42] = 60
    meth = np.rint(level[:, None] * cov).astype(np.int64)
    store = write_store(tmp_path / "s.zarr", {"chr1": (np.arange(level.size), meth, cov)}, ["A"], chunk_size=37)
    hmm = BinomialHMM(2).start_from(np.array([0.5, 0.5]), np.array([[0.97, 0.03], [0.03, 0.97]]),
                                    np.array([[0.5], [0.97]]))
    pooled = RegionRule((0,), 0.5, max_gap=300, min_length=1000, name="PMD", max_level=0.7)
    found = find_regions(store, hmm, InProcessClient(1), pooled, ["A"])["chr1"]
    assert len(found) == 1 and found.start[0] <= 3200 and found.end[0] >= 4200 and found.levels()[0, 0] < 0.7
    # 14 of its (at most) 30 bins below 0.7, the island's 10 among them: no domain
    assert len(find_regions(store, hmm, InProcessClient(1), replace(pooled, most_bins_below=True), ["A"])["chr1"]) == 0
    level[20:24] = 0.5  # 18 of 30
    meth = np.rint(level[:, None] * cov).astype(np.int64)
    more = write_store(tmp_path / "m.zarr", {"chr1": (np.arange(level.size), meth, cov)}, ["A"], chunk_size=37)
    assert len(find_regions(more, hmm, InProcessClient(1), replace(pooled, most_bins_below=True), ["A"])["chr1"]) == 1
    assert preset_rule("pmd", np.array([[0.5], [0.9]])).most_bins_below


@pytest.mark.slow
def test_hmr_shoulders_do_not_depend_on_the_chunking(one_sample, dask_clients):
    stores, hmm = one_sample
    rule = preset_rule("hmr", LEVELS, hmm.dispersion)
    found = [find_regions(store, hmm, dask_clients[1], rule, ["A"]) for store in stores]
    for chrom in ("chr2", "chr10"):
        # in memory: the cores of the whole chromosome, widened over a profile of every covered bin
        ds = stores[0].dataset(chrom).sel(sample="A")
        covered = ds.coverage.values > 0
        meth, cov = ds.methylated.values[covered].astype(np.int64), ds.coverage.values[covered].astype(np.int64)
        positions = ds.position.values[covered]
        post = hmm.predict_proba(meth, cov)
        cores = hmr_cores(hmm, positions, meth, cov)
        levels = expected_levels(post, [(0, meth, cov)], LEVELS, hmm.dispersion)[:, 0]  # as the chunks' profiles
        whole = profile(positions, levels, meth=meth[:, None], cov=cov[:, None])
        widened = with_shoulders(cores, whole, positions.size, 0.05, rule, 100)
        assert (widened.end - widened.start).sum() > (cores.end - cores.start).sum() and len(widened) > 3
        for regions in (f[chrom] for f in found):
            for name in ("start", "end", "n_bins", "methylated", "coverage"):
                np.testing.assert_array_equal(getattr(regions, name), getattr(widened, name))
        # every widened region's reads are below the ceiling in its sample, and its counts are
        # those reads (its shoulders' with its cores'), as a user recounting its interval finds
        for start, end, m, c in zip(widened.start, widened.end, widened.methylated[:, 0], widened.coverage[:, 0]):
            inside = (positions >= start) & (positions < end)
            assert meth[inside].sum() < 0.5 * cov[inside].sum()
            assert (m, c) == (meth[inside].sum(), cov[inside].sum())


def test_a_widened_region_whose_reads_are_not_hypomethylated_keeps_its_core():
    """A bin's expected level may be below the ceiling while its reads are not: a helper's audit
    found a joint HMR whose shoulders took one sample's interval to 0.51. Such a widened region
    is its cores again (two here, which its walks had merged); the other is widened."""
    level = np.array([0.9] * 30 + [0.3] + [0.05] * 4 + [0.3] * 2 + [0.05] * 4 + [0.3] + [0.9] * 30
                     + [0.05] * 4 + [0.3] + [0.9] * 30)
    meth, cov = np.zeros((level.size, 1), np.int64), np.full((level.size, 1), 10)
    meth[:, 0] = np.rint(10 * level)
    meth[35:37, 0] = cov[35:37, 0] = 50  # the two shoulder bins between the first two cores: every read methylated
    position = np.arange(level.size) * 100
    cores = Regions(np.array([3100, 3700, 7200]), np.array([3500, 4100, 7600]), np.full(3, 4), np.full(3, 3.8),
                    np.full((3, 1), 2.0), np.full((3, 1), 40.0), np.ones(3))
    got = with_shoulders(cores, profile(position, level, meth=meth, cov=cov), level.size, 0.05,
                         preset_rule("hmr", LEVELS), 100)
    assert got.start.tolist() == [3100, 3700, 7200] and got.end.tolist() == [3500, 4100, 7700]


def test_a_joint_regions_shoulders_stay_below_each_samples_ceiling():
    """A joint call's walk follows the samples' mean expected level, so it can take a bin far
    up in one sample (0.45 there, 0.05 in the other: a mean of 0.25). A widened region whose
    reads in a sample reach that sample's ceiling (0.275 here, midway to its next state at 0.5)
    is its core again; the one whose shoulders stay low in both is widened."""
    level = np.array([0.9] * 30 + [0.05] * 4 + [0.9] * 34 + [0.05] * 4 + [0.9] * 30)
    meth, cov = np.zeros((level.size, 2), np.int64), np.full((level.size, 2), 20)
    meth[:] = np.rint(20 * level)[:, None]
    meth[29], cov[29] = [1, 90], [20, 200]  # beside the first core: 0.05 in A, 0.45 (and deep) in B
    meth[72] = [1, 2]  # beside the second: 0.05 and 0.10
    mean, top = level.copy(), level.copy()  # the samples' mean and highest expected levels
    mean[[29, 72]], top[[29, 72]] = (0.25, 0.075), (0.45, 0.10)
    cores = Regions(np.array([3000, 6800]), np.array([3400, 7200]), np.full(2, 4), np.full(2, 3.8),
                    np.full((2, 2), 4.0), np.full((2, 2), 80.0), np.ones(2))
    walked = profile(np.arange(level.size) * 100, mean, top=top, meth=meth, cov=cov)
    joint = preset_rule("hmr", np.array([[0.05, 0.05], [0.5, 0.5], [0.9, 0.9]]))
    assert joint.sample_ceilings == (0.275, 0.275)
    got = with_shoulders(cores, walked, level.size, 0.05, joint, 100)
    assert got.start.tolist() == [3000, 6800] and got.end.tolist() == [3400, 7300]
    # a single sample's ceiling is the shoulders' own, 0.5: B alone keeps the bin at 0.45
    core_b = Regions(np.array([3000]), np.array([3400]), np.full(1, 4), np.full(1, 3.8), np.full((1, 1), 4.0),
                     np.full((1, 1), 80.0), np.ones(1))
    single = with_shoulders(core_b, profile(np.arange(level.size) * 100, top, meth=meth[:, 1:], cov=cov[:, 1:]),
                            level.size, 0.05, preset_rule("hmr", np.array([[0.05], [0.5], [0.9]])), 100)
    assert single.start.tolist() == [2900] and single.end.tolist() == [3400]


@pytest.mark.slow
def test_regions_command_writes_bed9_and_a_table(tmp_path, one_sample, scheduler):
    from streambhmm.app.modelio import model_to_dict

    stores, hmm = one_sample
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model_to_dict(hmm, ["A"], ["chr2", "chr10"], method="em")))
    r = run("regions", stores[0].path, "--model", path, "--preset", "hmr", "-o", tmp_path / "hmr.bed",
            "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    assert "regions of states unmethylated," in r.output
    lines = (tmp_path / "hmr.bed").read_text().splitlines()
    assert lines[0] == 'track name="hmr" description="HMR regions of A (model m.json)" itemRgb="On"'
    rows = [line.split("\t") for line in lines[1:]]
    # the order of LC_ALL=C sort -k1,1 -k2,2n (bedToBigBed's): chr10 before chr2; decode's too
    assert {r[0] for r in rows} == {"chr2", "chr10"} and rows == sorted(rows, key=lambda r: (r[0], int(r[1])))
    r = run("regions", stores[0].path, "--model", path, "--preset", "hmr", "--min-bins", 10**9, "-o",
            tmp_path / "none.bed", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0 and "none.bed: no regions of states unmethylated: no run of their bins passed" in r.output
    r = run("decode", stores[0].path, "--model", path, "-o", tmp_path / "seg.bed", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    segments = [line.split("\t") for line in (tmp_path / "seg.bed").read_text().splitlines()[1:]]
    assert {s[0] for s in segments} == {"chr2", "chr10"}
    assert segments == sorted(segments, key=lambda s: (s[0], int(s[1])))
    for i, (chrom, start, end, name, score, strand, thick_start, thick_end, rgb) in enumerate(rows):
        assert name == f"HMR{i}" and strand == "+" and (thick_start, thick_end) == (start, end)
        assert 0 <= int(score) <= 1000 and int(start) < int(end) and len(rgb.split(",")) == 3
    table = [line.split("\t") for line in (tmp_path / "hmr.tsv").read_text().splitlines()]
    assert table[0] == ["chrom", "start", "end", "name", "n_bins", "length", "score", "level_A", "reads_A"]
    # against the in-memory recursion: the counted bins of the cores in each region; its level,
    # that of every read in its interval (shoulders too)
    ds = stores[0].dataset("chr2").sel(sample="A")
    covered = ds.coverage.values > 0
    meth, cov, positions = ds.methylated.values[covered], ds.coverage.values[covered], ds.position.values[covered]
    meth, cov = meth.astype(np.int64), cov.astype(np.int64)
    cores = hmr_cores(hmm, positions, meth, cov)
    chr2 = [row for row in table[1:] if row[0] == "chr2"]
    assert len(chr2) > 5
    for chrom, start, end, name, n_bins, length, score, level, reads in chr2:
        inside = (cores.start >= int(start)) & (cores.end <= int(end))
        assert int(length) == int(end) - int(start) and int(n_bins) == cores.n_bins[inside].sum() >= 4
        interval = (positions >= int(start)) & (positions < int(end))
        assert float(level) == pytest.approx(meth[interval].sum() / cov[interval].sum(), abs=5.1e-5)  # 4 decimals
        assert int(reads) == cov[interval].sum()
    r = run("regions", stores[0].path, "--model", path, "--targets", "unmethylated", "--min-length", "1000",
            "-o", tmp_path / "u.bed", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "u.bed").read_text().splitlines()
    assert all(int(e) - int(s) >= 1000 for _, s, e, *_ in (line.split("\t") for line in lines[1:]))
    assert 'description="regions of ' in lines[0] and lines[1].split("\t")[3] == "region0"
    r = run("regions", stores[0].path, "--model", path, "--targets", "nope", "-o", tmp_path / "x.bed")
    assert r.exit_code != 0 and "no state 'nope'" in r.output
    r = run("regions", stores[0].path, "--model", path, "-o", tmp_path / "x.bed")
    assert r.exit_code != 0 and "give one of --preset and --targets" in r.output


@pytest.mark.slow
def test_tracks_command_writes_bigwigs_of_methylation_and_posteriors(tmp_path, one_sample, scheduler):
    import pyBigWig

    from streambhmm.app.modelio import model_to_dict

    stores, hmm = one_sample
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model_to_dict(hmm, ["A"], ["chr2", "chr10"], method="em")))
    sizes = tmp_path / "chrom.sizes"
    sizes.write_text("chr10\t249950\nchr2\t700000\n")  # chr10's last bin (249900-250000) is clipped
    r = run("tracks", stores[0].path, "--model", path, "--targets", "unmethylated,3", "--min-coverage", "2",
            "--chrom-sizes", sizes, "-o", tmp_path / "t", "--scheduler", scheduler, "-q")
    assert r.exit_code == 0, r.output
    for chrom, n, length in (("chr2", 6000, 700000), ("chr10", 2500, 249950)):
        ds = stores[0].dataset(chrom).sel(sample="A")
        meth, cov = ds.methylated.values.astype(np.int64), ds.coverage.values.astype(np.int64)
        with pyBigWig.open(str(tmp_path / "t.A.methylation.bw")) as bw:
            assert bw.chroms() == {"chr2": 700000, "chr10": 249950}
            got = np.array(bw.values(chrom, 0, bw.chroms(chrom)))[::100][:n]
        expected = np.where(cov >= 2, meth / np.maximum(cov, 1), np.nan)
        np.testing.assert_allclose(got, expected, rtol=1e-6)  # NaN where no entry
        covered = cov > 0
        post = hmm.predict_proba(meth[covered], cov[covered])
        for h, name in ((0, "state0-unmethylated"), (3, "state3-high")):
            with pyBigWig.open(str(tmp_path / f"t.{name}.posterior.bw")) as bw:
                intervals = np.array(bw.intervals(chrom))
            np.testing.assert_array_equal(intervals[:, 0], ds.position.values[covered])
            np.testing.assert_array_equal(intervals[:, 1], np.minimum(ds.position.values[covered] + 100, length))
            np.testing.assert_allclose(intervals[:, 2], post[:, h], atol=1e-6)
    r = run("tracks", stores[0].path, "--model", path, "--targets", "nope", "-o", tmp_path / "x")
    assert r.exit_code != 0 and "no state 'nope'" in r.output
    sizes.write_text("chr2\t700000\n")
    r = run("tracks", stores[0].path, "--chrom-sizes", sizes, "-o", tmp_path / "x")
    assert r.exit_code != 0 and "no 'chr10'" in r.output


def test_tracks_stopped_half_way_leave_no_track(tmp_path, one_sample, monkeypatch):
    """The tracks are renamed into place together at the end: a run that fails (or is
    interrupted) after the methylation tracks, in the posterior pass, leaves none of them, and
    no temporary."""
    from streambhmm.app import segments
    from streambhmm.app.modelio import model_to_dict

    stores, hmm = one_sample
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model_to_dict(hmm, ["A"], ["chr2", "chr10"], method="em")))

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(segments, "write_posteriors", stopped)
    r = run("tracks", stores[0].path, "--model", path, "-o", tmp_path / "t", "-q")
    assert r.exit_code != 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]


@pytest.mark.slow
def test_every_command_that_reads_a_store_waits_while_a_writer_holds_it(tmp_path, one_sample):
    """Audit 1: a command sees the store as it was before a commit or as it is after it, never
    during one: while a writer (an ingest's commit) holds the lock, each command waits."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from streambhmm.app.modelio import model_to_dict
    from streambhmm.io.store import locked

    stores, hmm = one_sample
    store = str(stores[0].path)
    model_path = tmp_path / "m.json"
    model_path.write_text(json.dumps(model_to_dict(hmm, ["A"], ["chr2", "chr10"], method="em")))
    model = ["--model", str(model_path)]
    commands = {"score": ["score", store, *model],
                "regions": ["regions", store, *model, "--targets", "0", "-o", str(tmp_path / "r.bed")],
                "tracks": ["tracks", store, "-o", str(tmp_path / "t")],
                "decode": ["decode", store, *model, "-o", str(tmp_path / "d.bed")],
                "report": ["report", store, *model, "-o", str(tmp_path / "report")]}
    def blocked_on_a_lock() -> set[int]:  # pids of processes waiting for a lock (" -> " in /proc/locks)
        lines = Path("/proc/locks").read_text().splitlines()
        return {int(line.split("->", 1)[1].split()[3]) for line in lines if " -> " in line}

    with locked(store):
        running = {name: subprocess.Popen([sys.executable, "-m", "streambhmm", *args, "-q"], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True) for name, args in commands.items()}
        waiting = set()
        while len(waiting) < len(running):  # each command reaches the lock and waits there
            finished = [name for name, process in running.items() if process.poll() is not None]
            assert finished == [], f"{finished} ran while a writer held the store"
            waiting = {name for name, process in running.items() if process.pid in blocked_on_a_lock()}
            time.sleep(0.05)
    for name, process in running.items():
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, (name, output)
    for written in ("r.bed", "d.bed", "t.A.methylation.bw", "report/index.html"):
        assert (tmp_path / written).exists()


def test_each_command_replaces_only_its_own_regions_and_tables(tmp_path):
    """hmr, pmd and regions write BEDs and tables alike, but each may replace only its own
    (a helper's audit: `hmr -o` replaced `pmd`'s), whatever the table's header length (one of
    130 samples of long names passed the bytes read, and a rerun was refused)."""
    from streambhmm.distributed.regions import regions_heads, write_regions
    from streambhmm.io.outputs import HEAD_BYTES, _replaceable

    hmm = BinomialHMM(2)
    hmm.methylation_ = np.array([[0.1], [0.9]])
    found = {"chr1": Regions(start=np.array([100]), end=np.array([900]), n_bins=np.array([8]),
                             posterior_sum=np.array([7.5]), methylated=np.array([[3]]), coverage=np.array([[40]]),
                             posterior_max=np.array([0.99]))}
    written = {}
    for command, rule, source in (("hmr", preset_rule("hmr", hmm.methylation_), "hmr of s.zarr"),
                                  ("pmd", preset_rule("pmd", hmm.methylation_), "pmd of s.zarr"),
                                  ("regions", replace(preset_rule("hmr", hmm.methylation_), name="region"), "model m.json")):
        bed = tmp_path / f"{command}.bed"
        write_regions(found, rule, hmm.methylation_, ["S"], bed, source)
        written[command] = (bed, bed.with_suffix(".tsv"))
    for command in written:
        track, table = regions_heads(command)
        for other, (bed, tsv) in written.items():
            # `regions --preset hmr` names its regions as hmr does: its table alone is not told apart
            assert _replaceable(bed, track) == (other == command) and \
                _replaceable(tsv, table) == (other == command or command == "regions"), (command, other)
    long_header = tmp_path / "long.tsv"
    long_header.write_bytes(b"chrom\tstart\tend\tname\tn_bins\tlength\tscore\t" + b"level_" * HEAD_BYTES + b"\n")
    assert _replaceable(long_header, regions_heads("hmr")[1])
    long_header.write_bytes(b"chrom\tstart\tend\tname\tn_bins\tlength\tscore\tlevel_S\nchr1\t1\t9\tPMD0\t1\t8\t9\n")
    assert not _replaceable(long_header, regions_heads("hmr")[1])


def test_a_bigwig_cut_short_or_without_room_is_refused_not_put_in_place(tmp_path):
    """A helper's audit: on a full disk libBigWig wrote a bigWig cut short (no end marker, no
    zoom levels) and `tracks` exited 0, or it aborted the process; the room is checked first,
    and a file that does not end as a bigWig does is refused."""
    import os

    from streambhmm.distributed.tracks import BigWigWriter, check_bigwig_room

    writer = BigWigWriter(tmp_path / "x.bw", {"chr1": 10_000}, 100)
    writer.add("chr1", np.arange(0, 10_000, 100), np.linspace(0, 1, 100))
    class CutShort:  # the file as a disk filling meanwhile leaves it
        def __init__(self, bigwig):
            self.bigwig = bigwig

        def close(self):
            self.bigwig.close()
            with open(writer.tmp, "r+b") as fh:
                fh.truncate(os.path.getsize(writer.tmp) - 100)

    writer.file = CutShort(writer.file)
    with pytest.raises(ValueError, match=r"x.bw: the bigWig could not be written whole \(.* bytes written, .* MiB "
                                         r"free in .*: a full disk\?\); it is not put in place"):
        writer.finish()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nor its temporary left
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    check_bigwig_room(tmp_path, "x.bw", n_files=1, n_entries=1000, entry_bytes=8.0)
    with pytest.raises(ValueError, match=r"x.bw: no room in .* for the bigWig data \(about .* MiB for .* bins, and "
                                         r".* MiB are free\); nothing was written"):
        check_bigwig_room(tmp_path, "x.bw", n_entries=free // 10 + 1, entry_bytes=8.0)
