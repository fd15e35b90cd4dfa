"""What hypomethylated regions (HMRs) and partially methylated domains (PMDs) are in a
model's terms: which states they are made of, and the models `hmr` and `pmd` fit.

HMR. A state is *hypomethylated* when, in every sample, its mean level is at most
HYPO_LEVEL (0.2) and the Beta distribution of its bins' levels puts at least HYPO_MASS
(92%) of its mass below 0.5, so most of the state's CpGs are unmethylated. HYPO_MASS is
that of a state at the caps, level and overdispersion (HYPO_DISPERSION) both 0.2; a lower
state may be more dispersed (at level 0.1, up to 0.52; at 0.05 or below, any). Both are set by that definition,
not fitted to a data set (docs/methods/hmr-pmd.md, "HMRs and PMDs", shows how the calls move
with them). A model fitted freely spends its states on the bulk of the genome (methylated
background, PMDs) and often leaves none for regions that cover 1-3% of it, so `hmr` fits a
model with one state held to the caps and HMR_BACKGROUND_STATES free ones (a free state
within the definition is hypomethylated too): the data decide the background (one
methylated level, or a ladder with PMDs), the definition decides what is hypomethylated,
and a PMD (a broad state around 0.5) is background, not an HMR. DNMTools' two-state model has no
room for both, and in a methylome with PMDs its foreground becomes the PMDs.

PMD. A state is *partially methylated* when its level is below PMD_LEVEL (0.7) in every
sample (Lister et al. 2009's definition: mean methylation under 70%) on bins of
PMD_BIN_SIZE (5 kb), where a PMD spans dozens of bins and an HMR none; `pmd` fits two
states there (as DNMTools' pmd). What sets a PMD apart from an HMR is its length, not its
level: a cancer genome's deepest PMDs average 0.1 (MCF7's), so on such bins a hypomethylated
state counts too, and the rule's 50 kb keeps HMRs out (on narrower bins, where an HMR fills
bins of its own, it does not). A genome whose two states are both above
0.7 has no PMDs, and one whose two states are both below has no methylated background to
set them against (a mutant without CG methylation).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import betainc

from ..moments.features import decode_cells
from .criterion import StateLimits

HYPO_LEVEL = 0.2
HYPO_DISPERSION = 0.2
HALF_METHYLATED = 0.5
HMR_BACKGROUND_STATES = 3
PMD_LEVEL = 0.7
PMD_BIN_SIZE = 5000
PMD_STATES = 2
# the unmethylated check counts bins with at least this many reads (fewer say little)
UNMETHYLATED_CHECK_READS = 5
TARGET_STATES = {"hmr": "hypomethylated", "pmd": "partially methylated"}  # what a call's regions are made of
DEFINITIONS = {"hmr": f"{TARGET_STATES['hmr']}: level at most {HYPO_LEVEL} and at least 92% of the bins' levels "
                      f"below {HALF_METHYLATED} in every sample",
               "pmd": f"{TARGET_STATES['pmd']}: level below {PMD_LEVEL} in every sample"}


@dataclass(frozen=True)
class CallModel:
    """The model a call fits: its number of states, the states held to bounds (their level
    and overdispersion caps) and the target states' rule."""

    kind: str  # "hmr" or "pmd"
    n_states: int
    level_caps: tuple  # per state: upper bound of the level (1.0: free)
    dispersion_caps: tuple  # per state: upper bound of the overdispersion (1.0: free)
    # the one-pass refinement: screened starts run to convergence, and its relative tolerance
    n_finished: int = 2
    tol: float = 1e-8

    def limits(self) -> StateLimits:
        return StateLimits(np.array(self.level_caps, np.float64), np.array(self.dispersion_caps, np.float64))


# Measured on the four real sets (scripts/call_settings.py; a setting is kept where its calls
# keep base-pair Jaccard >= 0.97 with those of the refinement's defaults on every set): for
# PMDs one finished start at a relative tolerance of 1e-7 (2-4x fewer criterion evaluations);
# for HMRs two finished starts at 5e-8 (1.1-1.7x fewer there, up to 2.4x on other methylomes,
# whose calls kept >= 0.994; at 1e-7 one shoulder of H1's four calls moved: 0.87). The last
# iterations to 1e-8 creep along a flat optimum.
HMR_MODEL = CallModel("hmr", 1 + HMR_BACKGROUND_STATES, (HYPO_LEVEL,) + (1.0,) * HMR_BACKGROUND_STATES,
                      (HYPO_DISPERSION,) + (1.0,) * HMR_BACKGROUND_STATES, tol=5e-8)
PMD_MODEL = CallModel("pmd", PMD_STATES, (1.0,) * PMD_STATES, (1.0,) * PMD_STATES, n_finished=1, tol=1e-7)


def below_half(level, dispersion) -> np.ndarray:
    """The mass below HALF_METHYLATED of the Beta distribution of a state's levels (mean
    ``level``, overdispersion ``dispersion`` = 1 / (a + b + 1))."""
    level = np.clip(np.asarray(level, np.float64), 1e-12, 1.0 - 1e-12)
    dispersion = np.asarray(dispersion, np.float64)
    scale = 1.0 / np.clip(dispersion, 1e-12, 1.0 - 1e-12) - 1.0
    return betainc(level * scale, (1.0 - level) * scale, HALF_METHYLATED)


HYPO_MASS = float(below_half(HYPO_LEVEL, HYPO_DISPERSION))  # 0.920


def hypomethylated(methylation, dispersion=None) -> np.ndarray:
    """Per state: hypomethylated in every sample (a binomial model: by its levels alone)."""
    levels = np.atleast_2d(methylation)
    low = (levels <= HYPO_LEVEL + 1e-9).all(axis=1)
    if dispersion is None:
        return low
    return low & (below_half(levels, np.atleast_2d(dispersion)) >= HYPO_MASS - 1e-9).all(axis=1)


def pinned_states(model: CallModel, methylation) -> np.ndarray:
    """Per state of a fit of ``model``: held to a level cap and fitted at it in some sample.
    The data push such a state past the definition (bins of intermediate levels, which it
    stands in for); it holds hypomethylated regions only where no free state does."""
    caps = np.asarray(model.level_caps, np.float64)
    return (caps < 1.0) & (np.atleast_2d(methylation) >= caps[:, None] - 1e-9).any(axis=1)


def partially_methylated(methylation, dispersion=None, bin_size: int = PMD_BIN_SIZE) -> np.ndarray:
    """Per state: below PMD_LEVEL in every sample, but for those left to HMRs (left_to_hmr)."""
    below = (np.atleast_2d(methylation) < PMD_LEVEL).all(axis=1)
    return below & ~left_to_hmr(methylation, dispersion, bin_size)


def left_to_hmr(methylation, dispersion=None, bin_size: int = PMD_BIN_SIZE) -> np.ndarray:
    """Per state: below PMD_LEVEL in every sample and hypomethylated, on bins narrower than
    PMD_BIN_SIZE. There an HMR fills bins of its own, so such a state is the HMRs', not a PMD's
    (on 100 bp bins its islands, 10 kb apart, would chain into "PMDs" of methylated background)."""
    below = (np.atleast_2d(methylation) < PMD_LEVEL).all(axis=1)
    if bin_size >= PMD_BIN_SIZE:
        return np.zeros_like(below)
    return below & hypomethylated(methylation, dispersion)


def target_states(kind: str, methylation, dispersion=None, bin_size: int = PMD_BIN_SIZE) -> np.ndarray:
    """Per state: whether the regions of ``kind`` ("hmr", "pmd") are made of it, on bins of
    ``bin_size``."""
    if kind == "hmr":
        return hypomethylated(methylation, dispersion)
    return partially_methylated(methylation, dispersion, bin_size)


def shared_coverage(moments) -> float | None:
    """The share of the bins with reads that have reads in every sample, from the single-bin
    histogram; None for one sample, or where that histogram is kept per sample (many samples).
    A joint call's regions need reads in every sample, so samples that share few covered
    bins (other assays, other chromosomes) have few regions to give."""
    layout = moments.histogram_layout(1)
    if moments.n_samples < 2 or not layout.joint:
        return None
    cells = np.flatnonzero(moments.bin_histogram[0])
    weight = moments.bin_histogram[0, cells]
    coverage, _ = decode_cells(cells, layout)
    total = weight[(coverage > 0).any(axis=1)].sum()
    return float(weight[(coverage > 0).all(axis=1)].sum() / total) if total > 0 else None


MOSTLY_APART = 0.5  # below this share of bins with reads in every sample, the data, not the biology, say it


def with_reads_in_every_sample(shared: float) -> str:
    """How many bins with reads have reads in every sample (shared_coverage), as a sentence's subject."""
    return "no bin with reads has" if shared == 0 else f"only {shared:.1%} of the bins with reads have"


def unmethylated_share(moments) -> np.ndarray:
    """Per sample, the share of bins with at least UNMETHYLATED_CHECK_READS reads that have
    no methylated read, from the single-bin histogram (exact cells only: coverage below its
    thinning cap); NaN where no such bin was counted. Zero over many bins means the input
    lists methylated cytosines only, as some pipelines' files do (Lister et al. 2009's mc
    files): unmethylated CpGs, the core of every HMR, are then missing from the data."""
    layout = moments.histogram_layout(1)
    totals = np.zeros(moments.n_samples)
    zeros = np.zeros(moments.n_samples)
    for row in range(moments.bin_histogram.shape[0]):
        cells = np.flatnonzero(moments.bin_histogram[row])
        weight = moments.bin_histogram[row, cells]
        coverage, methylated = decode_cells(cells, layout)
        for slot, sample in enumerate(layout.slot_samples(row)):
            exact = (coverage[:, slot] >= UNMETHYLATED_CHECK_READS) & (coverage[:, slot] < layout.cap)
            totals[sample] += weight[exact].sum()
            zeros[sample] += weight[exact & (methylated[:, slot] == 0)].sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, zeros / totals, np.nan)
