import numpy as np
import pytest

from streambhmm import SpectralBinomialHMM, compute_moments


@pytest.mark.parametrize(
    "mu,cov,lengths,message",
    [
        ([1, -2, 0], [3, 3, 3], None, r"negative count: methylated\[1, 0\] = -2"),
        ([1, 2, 0], [3, 3, -1], None, r"negative count: coverage\[2, 0\] = -1"),
        ([1, 4, 0], [3, 3, 3], None, r"methylated > coverage at index \[1, 0\]: methylated = 4, coverage = 3"),
        ([1.0, 2.5, 0], [3, 3, 3], None, r"integer counts; methylated\[1\] = 2.5"),
        ([1, 2, 0], [3.0, np.nan, 3], None, r"integer counts; coverage\[1\] = nan"),
        (["1", "2", "0"], [3, 3, 3], None, r"methylated must hold integer counts"),
        ([1, 2, 0], [3, 3], None, r"methylated has shape \(3,\) but coverage has shape \(2,\)"),
        ([1, 2, 0], [3, 3, 3], [2, 2], r"lengths sum to 4 but the counts have 3 rows"),
        ([1, 2, 0], [3, 3, 3], [4, -1], r"lengths\[1\] = -1 is negative"),
    ],
)
def test_bad_counts_are_named(mu, cov, lengths, message):
    with pytest.raises(ValueError, match=message):
        compute_moments(mu, cov, lengths)
    with pytest.raises(ValueError, match=message):
        SpectralBinomialHMM(2).fit(mu, cov, lengths)


def test_first_offending_index_in_two_samples():
    mu = np.zeros((5, 2), int)
    cov = np.ones((5, 2), int)
    mu[3, 1] = 2
    mu[4, 0] = 2
    with pytest.raises(ValueError, match=r"\[3, 1\]"):
        compute_moments(mu, cov)


def test_integral_floats_are_accepted():
    rng = np.random.default_rng(0)
    cov = rng.poisson(10, 50)
    mu = rng.binomial(cov, 0.4)
    assert compute_moments(mu.astype(float), cov.astype(float)).allclose(compute_moments(mu, cov), rtol=0)


def test_too_many_components_for_the_feature():
    cov = np.full(100, 10)
    with pytest.raises(ValueError, match=r"n_components=7 \(fit --states\) is larger than the feature dimension n_samples \* n_bins = 1 \* 5 = 5"):
        SpectralBinomialHMM(7, n_bins=5).fit(cov // 2, cov)


def test_too_few_triples():
    # 6 bins in sequences of 4 and 2 hold 2 triples
    with pytest.raises(ValueError, match="too few data for 3 states: 2 triples of bins for 9 parameters"):
        SpectralBinomialHMM(3).fit([1, 2, 3, 1, 2, 0], [5, 5, 5, 5, 5, 5], lengths=[4, 2])


def test_the_states_option_refuses_typos():
    import click

    from streambhmm.app.cli.fit import parse_states

    assert parse_states("4") == [4] and parse_states("2-4") == [2, 3, 4] and parse_states("2,6") == [2, 6]
    for text, message in (("2,,3", "expected M"), ("2,2", "names a number of states twice"), ("0", "no valid")):
        with pytest.raises(click.BadParameter, match=message):
            parse_states(text)
