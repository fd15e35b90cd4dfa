"""What the states are called and how they are drawn: labels from their levels, one colour
each, the same in the model JSON, the printed table, the BED files and the report.

A state's level class is the first of LEVEL_CLASSES whose upper bound its level is below:
unmethylated (< 0.15), low (< 0.5), intermediate (< 0.75), high. A state whose levels differ
across the samples by more than the differential threshold (fit --diff-threshold, 0.3) is
differential, and its label names each class with its samples, most methylated first:
``high:H1|low:IMR90`` (with many samples, the first three of each class and how many more).
Labels are unique: a repeated one gets ``-2``, ``-3``... in order of increasing methylation.
"""

from __future__ import annotations

import numpy as np

LEVEL_CLASSES = ((0.15, "unmethylated"), (0.5, "low"), (0.75, "intermediate"), (np.inf, "high"))
DIFF_THRESHOLD = 0.3
NAMED_SAMPLES = 3  # samples named per class in a differential label
# matplotlib's tab20 (tab10's ten colours first): states coloured by rank of mean methylation
PALETTE = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75),
           (227, 119, 194), (127, 127, 127), (188, 189, 34), (23, 190, 207), (174, 199, 232), (255, 187, 120),
           (152, 223, 138), (255, 152, 150), (197, 176, 213), (196, 156, 148), (247, 182, 210), (199, 199, 199),
           (219, 219, 141), (158, 218, 229))


def level_class(level: float) -> str:
    return next(name for bound, name in LEVEL_CLASSES if level < bound)


def state_order(methylation) -> np.ndarray:
    """States from least to most methylated (mean over samples)."""
    return np.argsort(np.asarray(methylation).mean(axis=1), kind="stable")


def state_labels(methylation, samples, diff_threshold: float = DIFF_THRESHOLD) -> list[str]:
    """One unique label per state (see the module docstring)."""
    levels = np.atleast_2d(np.asarray(methylation, dtype=np.float64))
    samples = list(samples)
    labels = []
    for row in levels:
        if len(samples) > 1 and row.max() - row.min() > diff_threshold:
            classes = {}
            for s in np.argsort(-row, kind="stable"):
                classes.setdefault(level_class(row[s]), []).append(samples[s])
            parts = []
            for name, members in classes.items():
                shown = ",".join(members[:NAMED_SAMPLES])
                more = f",+{len(members) - NAMED_SAMPLES}" if len(members) > NAMED_SAMPLES else ""
                parts.append(f"{name}:{shown}{more}")
            labels.append("|".join(parts))
        else:
            labels.append(level_class(row.mean()))
    seen = {}
    for h in state_order(levels):
        seen[labels[h]] = seen.get(labels[h], 0) + 1
        if seen[labels[h]] > 1:
            labels[h] = f"{labels[h]}-{seen[labels[h]]}"
    return labels


def state_colours(methylation) -> list[tuple[int, int, int]]:
    """One distinct RGB colour (0-255) per state, assigned from least to most methylated."""
    colours = [PALETTE[0]] * len(methylation)
    for rank, h in enumerate(state_order(methylation)):
        colours[h] = PALETTE[rank % len(PALETTE)]
    return colours


def item_rgb(colour) -> str:
    """A colour as BED's itemRgb field."""
    return ",".join(str(int(v)) for v in colour)
