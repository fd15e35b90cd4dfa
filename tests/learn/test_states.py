"""State labels: how the samples differ is named whenever their levels differ by 0.1 or more;
labels are unique and do not depend on the order of the states."""

import numpy as np
from hypothesis import given, settings, strategies as st

from streambhmm.learn.states import LEVEL_DIFFERENCE, state_colours, state_labels, without_repeat


def test_a_state_whose_samples_differ_below_the_differential_threshold_says_how():
    # Arabidopsis CHG, WT vs met1-3: met1's known CHG gain (0.21 apart, below --diff-threshold 0.3)
    assert state_labels([[0.031, 0.241], [0.02, 0.03], [0.6, 0.9]], ["WT", "met1"]) == [
        "low:met1|unmethylated:WT", "unmethylated", "high:met1|intermediate:WT"]


def test_samples_of_one_class_apart_by_a_tenth_are_ordered_with_a_chevron():
    levels = [[0.95, 0.82], [0.90, 0.86], [0.85, 0.663], [0.80, 0.91], [0.05, 0.07]]
    assert state_labels(levels, ["H1", "IMR90"]) == [
        "high:H1>IMR90", "high", "high:H1|intermediate:IMR90", "high:IMR90>H1", "unmethylated"]


def test_many_samples_name_three_per_class_and_count_the_rest():
    row = [0.9, 0.1, 0.88, 0.12, 0.87, 0.86, 0.11]
    samples = [f"S{i}" for i in range(7)]
    assert state_labels([row], samples) == ["high:S0,S2,S4,+1|unmethylated:S3,S6,S1"]


def test_levels_just_below_a_tenth_apart_are_one_class():
    assert state_labels([[0.9, 0.9 - LEVEL_DIFFERENCE + 1e-9]], ["A", "B"]) == ["high"]
    assert state_labels([[0.9, 0.9 - LEVEL_DIFFERENCE - 1e-9]], ["A", "B"]) == ["high:A>B"]


def test_one_sample_is_named_by_class_with_repeats_numbered_by_level():
    assert state_labels([[0.9], [0.8], [0.05], [0.95]], ["A"]) == ["high(2)", "high", "unmethylated", "high(3)"]
    assert [without_repeat(label) for label in ["high(2)", "high", "low:IMR90-2(3)"]] == ["high", "high", "low:IMR90-2"]


levels_strategy = st.integers(2, 8).flatmap(lambda m: st.integers(1, 4).flatmap(
    lambda s: st.lists(st.lists(st.sampled_from(np.round(np.linspace(0.01, 0.99, 13), 3).tolist()),
                                min_size=s, max_size=s), min_size=m, max_size=m, unique_by=tuple)))  # equal states: either label


@settings(max_examples=100, deadline=None)
@given(levels=levels_strategy, data=st.data())
def test_labels_are_unique_and_follow_their_state_under_reordering(levels, data):
    samples = [f"S{i}" for i in range(len(levels[0]))]
    labels = state_labels(levels, samples)
    assert len(set(labels)) == len(labels)
    order = data.draw(st.permutations(range(len(levels))))
    assert state_labels([levels[h] for h in order], samples) == [labels[h] for h in order]
    assert [state_colours([levels[h] for h in order])[k] for k in range(len(order))] == \
        [state_colours(levels)[h] for h in order]
    for row, label in zip(levels, labels):  # a difference of a tenth is always named
        differs = len(samples) > 1 and max(row) - min(row) >= LEVEL_DIFFERENCE - 1e-12
        assert (":" in label) == differs, (row, label)
