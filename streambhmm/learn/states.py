"""What the states are called and how they are drawn: labels from their levels, one colour
each, the same in the model JSON, the printed table, the BED files and the report.

A level's class is the first of LEVEL_CLASSES whose upper bound it is below: unmethylated
(< 0.15), low (< 0.5), intermediate (< 0.75), high.

A state whose samples' levels are within LEVEL_DIFFERENCE (0.1) of each other is named by
the class of their mean: ``high``. A state whose levels differ by 0.1 or more is named by how
they differ: each class with its samples, most methylated class first, ``|`` between classes
(``high:H1|intermediate:IMR90``; Arabidopsis CHG ``low:met1|unmethylated:WT``). Within a
class the samples go from most to least methylated, joined by ``>`` where the next one is
0.1 or more lower and by ``,`` where it is not (``high:H1>IMR90``: both high, H1 higher by
0.1 or more). With many samples a class names its first three and how many more
(``high:S0,S4,S8,+22|low:S1,S2,S3,+71``). The levels themselves are in the states' table.

Whether a state is *differential* (its levels differ by more than ``fit --diff-threshold``,
0.3) is said beside the table (learn.evaluate.differential_states); the label does not depend
on that threshold.

Labels are unique: a repeated one gets ``(2)``, ``(3)``... in order of increasing methylation
(mean over the samples, then the levels themselves), so a state's label does not depend on
the order of the states in the model. (Not ``-2``: ``intermediate:IMR90-2`` reads as a sample
named IMR90-2; nor ``#2``: R's read.table takes ``#`` for a comment.) File names, which carry
the state's index, leave the number out.
"""

from __future__ import annotations

import re

import numpy as np

LEVEL_CLASSES = ((0.15, "unmethylated"), (0.5, "low"), (0.75, "intermediate"), (np.inf, "high"))
DIFF_THRESHOLD = 0.3
LEVEL_DIFFERENCE = 0.1  # levels this far apart are named apart in a label
NAMED_SAMPLES = 3  # samples named per class in a label
# matplotlib's tab20 (tab10's ten colours first): states coloured by rank of mean methylation
PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (174, 199, 232), (255, 187, 120),
           (152, 223, 138), (255, 152, 150), (197, 176, 213), (196, 156, 148), (247, 182, 210), (199, 199, 199),
           (219, 219, 141), (158, 218, 229))


def level_class(level: float) -> str:
    return next(name for bound, name in LEVEL_CLASSES if level < bound)


def state_order(methylation) -> np.ndarray:
    """States from least to most methylated: by mean over the samples, ties by the levels
    themselves (so the order of equal-mean states does not depend on their indices)."""
    levels = np.atleast_2d(np.asarray(methylation, dtype=np.float64))
    return np.lexsort((*levels.T[::-1], levels.mean(axis=1)))


def _sample_label(row: np.ndarray, samples: list) -> str:
    """How the samples' levels differ: each class with its samples (see the module docstring)."""
    classes: dict[str, list[int]] = {}
    for s in np.argsort(-row, kind="stable"):
        classes.setdefault(level_class(row[s]), []).append(int(s))
    parts = []
    for name, members in classes.items():
        text = str(samples[members[0]])
        for before, s in zip(members, members[1:NAMED_SAMPLES]):
            text += (">" if row[before] - row[s] >= LEVEL_DIFFERENCE else ",") + str(samples[s])
        more = f",+{len(members) - NAMED_SAMPLES}" if len(members) > NAMED_SAMPLES else ""
        parts.append(f"{name}:{text}{more}")
    return "|".join(parts)


def state_labels(methylation, samples, diff_threshold: float | None = None) -> list[str]:
    """One unique label per state (see the module docstring). ``diff_threshold`` is accepted
    for callers of earlier versions and not used: labels name every difference of
    LEVEL_DIFFERENCE or more, differential or not."""
    levels = np.atleast_2d(np.asarray(methylation, dtype=np.float64))
    samples = list(samples)
    labels = [_sample_label(row, samples) if len(samples) > 1 and row.max() - row.min() >= LEVEL_DIFFERENCE
              else level_class(row.mean()) for row in levels]
    seen: dict[str, int] = {}
    for h in state_order(levels):
        seen[labels[h]] = seen.get(labels[h], 0) + 1
        if seen[labels[h]] > 1:
            labels[h] = f"{labels[h]}({seen[labels[h]]})"
    return labels


def without_repeat(label: str) -> str:
    """A label without the number that tells a repeated one apart (high(2) -> high)."""
    return re.sub(r"\([0-9]+\)$", "", label)


def state_colours(methylation) -> list[tuple[int, int, int]]:
    """One distinct RGB colour (0-255) per state, assigned from least to most methylated."""
    colours = [PALETTE[0]] * len(methylation)
    for rank, h in enumerate(state_order(methylation)):
        colours[h] = PALETTE[rank % len(PALETTE)]
    return colours


def item_rgb(colour) -> str:
    """A colour as BED's itemRgb field."""
    return ",".join(str(int(v)) for v in colour)
