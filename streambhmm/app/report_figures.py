"""The report's figures (matplotlib; the command imports this module only when it writes a
report): levels, transitions, spectrum, occupancy, a genome track, bootstrap intervals and
the EM history."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from ..learn.states import state_colours as rgb_colours
from ..learn.states import state_order


@dataclass
class Region:
    chrom: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.chrom}:{self.start:,}-{self.end:,}"


def state_colours(methylation):
    """The states' colours (states.state_colours, as in the BED files) for matplotlib."""
    return [tuple(v / 255 for v in colour) for colour in rgb_colours(methylation)]


DPI = 110  # the page shows the figures at their size: a 5.5 in figure is 605 px wide


def _save(fig, path) -> None:
    """Saved with everything drawn (legends and colour-bar labels outside the axes included)."""
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)


def state_name(h: int, label: str) -> str:
    """A state as the figures name it: its index and label, one class per line."""
    return f"{h} " + label.replace("|", "\n")


def state_legend(fig, methylation, labels, anchor=(0.5, 0.0), columns: int = 4):
    """A legend of the states' colours (as in the BED files), least methylated first, under the figure."""
    colours = state_colours(methylation)
    order = state_order(methylation)
    handles = [Patch(color=colours[h], label=f"{h} {labels[h]}") for h in order]
    return fig.legend(handles=handles, loc="upper center", bbox_to_anchor=anchor, ncol=min(columns, len(order)),
                      fontsize=8, frameon=False, title="states", title_fontsize=8)


def megabases(ax, start: int, end: int, chrom: str) -> None:
    """The x axis in Mb (no offset), with as many decimals as the span needs."""
    span = max(end - start, 1)
    decimals = 1 if span >= 5e6 else 2 if span >= 5e5 else 3 if span >= 5e4 else 4
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:.{decimals}f}"))
    ax.set_xlabel(f"{chrom} position (Mb)")


def plot_methylation(path, methylation, samples, differential, labels) -> None:
    order = state_order(methylation)
    levels = np.asarray(methylation)[order].T  # samples x states
    fig, ax = plt.subplots(figsize=(max(4.5, 1.5 + 1.05 * len(order)), 1.3 + 0.42 * len(samples)))
    image = ax.imshow(levels, cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(levels.shape[0]):
        for j in range(levels.shape[1]):
            ax.text(j, i, f"{levels[i, j]:.2f}", ha="center", va="center",
                    color="white" if levels[i, j] < 0.6 else "black", fontsize=8)
    names = [state_name(h, labels[h]).replace(" ", "*\n" if h in differential else "\n", 1) for h in order]
    ax.set_xticks(range(len(order)), names, fontsize=7)
    ax.set_yticks(range(len(samples)), samples)
    ax.set_xlabel("state (* differential)")
    fig.colorbar(image, ax=ax, label="level", fraction=0.04, pad=0.02)
    _save(fig, path)


def plot_transmat(path, transmat, methylation) -> None:
    order = state_order(methylation)
    t = np.asarray(transmat)[np.ix_(order, order)]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.5 + 0.6 * len(order)), max(3.2, 1.0 + 0.55 * len(order))))
    image = ax.imshow(t, cmap="magma", vmin=0, vmax=1)
    for i in range(len(order)):
        for j in range(len(order)):
            ax.text(j, i, f"{t[i, j]:.2f}", ha="center", va="center", color="white" if t[i, j] < 0.5 else "black",
                    fontsize=7)
    ax.set_xticks(range(len(order)), order)
    ax.set_yticks(range(len(order)), order)
    ax.set_xlabel("to state")
    ax.set_ylabel("from state")
    fig.colorbar(image, ax=ax, label="probability")
    _save(fig, path)


def plot_spectrum(path, spectrum: dict, m: int) -> None:
    values = np.asarray(spectrum["p13_singular_values"], dtype=float)
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    index = np.arange(1, len(values) + 1)
    ax.semilogy(index, np.maximum(values, 1e-300), "o-", color="tab:gray")
    ax.semilogy(index[:m], np.maximum(values[:m], 1e-300), "o", color="tab:blue", label=f"the m = {m} kept")
    ax.axvline(m + 0.5, color="tab:blue", linestyle=":")
    ax.axhline(spectrum["noise_level"], color="tab:red", linestyle="--", label="noise level")
    ax.set_xlabel("index")
    ax.set_ylabel("singular value of P13")
    ax.legend()
    _save(fig, path)


OCCUPANCY_ROWS = 30  # chromosomes beyond these (the fewest covered bins) share one row


def plot_occupancy(path, chromosome_state_bins: dict, methylation, labels) -> None:
    """Each chromosome's share of covered bins per state: the OCCUPANCY_ROWS - 1 with the most
    covered bins and, in one row, the rest (a helper's genome of 3,010 contigs made a figure
    92,875 pixels high)."""
    chroms = list(chromosome_state_bins)
    counts = np.array([chromosome_state_bins[c] for c in chroms], dtype=float).reshape(len(chroms), -1)
    if len(chroms) > OCCUPANCY_ROWS:
        kept = np.sort(np.argsort(-counts.sum(axis=1), kind="stable")[:OCCUPANCY_ROWS - 1])
        rest = np.setdiff1d(np.arange(len(chroms)), kept)
        chroms = [chroms[i] for i in kept] + [f"{rest.size:,} others"]
        counts = np.vstack([counts[kept], counts[rest].sum(axis=0)])
    # each row's covered bins beside its name: a contig of 17 bins drew a bar as wide as chr1's
    chroms = [f"{c} ({int(n):,})" for c, n in zip(chroms, counts.sum(axis=1))]
    fractions = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    colours = state_colours(methylation)
    fig, ax = plt.subplots(figsize=(5.5, 0.9 + 0.28 * len(chroms)))
    left = np.zeros(len(chroms))
    for h in state_order(methylation):
        ax.barh(chroms, fractions[:, h], left=left, color=colours[h], edgecolor="white", linewidth=0.5)
        left += fractions[:, h]
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("fraction of covered bins")
    fig.tight_layout()
    state_legend(fig, methylation, labels, anchor=(0.5, 0.0), columns=3)
    _save(fig, path)


def region_segments(bed_path, region: Region, labels: list[str]):
    """(start, end, state) of the BED runs (named by the states' ``labels``) overlapping ``region``."""
    state_of = {label: h for h, label in enumerate(labels)}
    out = []
    with open(bed_path) as bed:
        for line in bed:
            if line.startswith(("#", "track", "browser")):
                continue
            chrom, start, end, name = line.split("\t", 4)[:4]
            if chrom == region.chrom and int(end) > region.start and int(start) < region.end:
                out.append((max(int(start), region.start), min(int(end), region.end), state_of[name]))
    return out


def plot_track(path, counts, samples, region: Region, bed_path, methylation, labels, region_sets=()) -> None:
    """Each sample's methylation per covered bin, the decoded states below, and a row per
    (name, BedItems) of ``region_sets`` (calls of hmr, pmd or dmr, in their itemRgb colours)."""
    ds = counts.dataset(region.chrom).sel(sample=samples, position=slice(region.start, region.end - 1))
    meth = ds.methylated.values.astype(float)
    cov = ds.coverage.values.astype(float)
    pos = ds.position.values + counts.bin_size / 2
    fig, (top, bottom, *rows) = plt.subplots(2 + len(region_sets), 1, sharex=True,
                                             figsize=(11.5, 2.6 + 0.25 * len(samples) + 0.35 * len(region_sets)),
                                             gridspec_kw={"height_ratios": [4, 1] + [0.6] * len(region_sets)})
    for s, name in enumerate(samples):
        covered = cov[:, s] > 0
        size = 4 + 12 * np.sqrt(cov[covered, s] / max(cov[:, s].max(), 1))
        top.scatter(pos[covered], meth[covered, s] / cov[covered, s], s=size, alpha=0.6, label=name)
    top.set_ylim(-0.03, 1.03)
    top.set_ylabel("methylation\nfraction")
    top.legend(fontsize=8, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(samples), frameon=False,
               markerscale=1.5, title="samples", title_fontsize=8, alignment="left")
    colours = state_colours(methylation)
    # one collection per state (a broken_barh per segment rescaled the axes over all drawn before: quadratic)
    by_state = {}
    for start, end, state in region_segments(bed_path, region, labels):
        by_state.setdefault(state, []).append((start, end - start))
        if end - start > (region.end - region.start) / 40:
            bottom.text((start + end) / 2, 0.5, str(state), ha="center", va="center", fontsize=7)
    for state, spans in by_state.items():
        bottom.broken_barh(spans, (0, 1), color=colours[state])
    bottom.set_yticks([])
    bottom.set_ylabel("state")
    for ax, (name, items) in zip(rows, region_sets):
        _region_row(ax, name, items, region)
    last = rows[-1] if rows else bottom
    last.set_xlim(region.start, region.end)
    megabases(last, region.start, region.end, region.chrom)
    fig.tight_layout()
    state_legend(fig, methylation, labels, anchor=(0.5, 0.0), columns=6)
    _save(fig, path)


def _region_row(ax, name: str, items, region: Region) -> None:
    """The regions of one BED within ``region``, each a box in its itemRgb (grey without)."""
    by_colour = {}  # one collection per colour, as the states' above
    for item in items:
        if item.chrom == region.chrom and item.end > region.start and item.start < region.end:
            colour = tuple(v / 255 for v in item.colour) if item.colour else (0.45, 0.45, 0.45)
            by_colour.setdefault(colour, []).append((item.start, item.end - item.start))
    for colour, spans in by_colour.items():
        ax.broken_barh(spans, (0, 1), color=colour)
    ax.set_yticks([])
    ax.set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)


def plot_bootstrap(path, methylation, methylation_ci, samples) -> None:
    order = state_order(methylation)
    ci = np.asarray(methylation_ci)
    levels = np.asarray(methylation)
    fig, ax = plt.subplots(figsize=(1.5 + 0.7 * len(order), 3.2))
    width = 0.8 / len(samples)
    for s, name in enumerate(samples):
        x = np.arange(len(order)) + (s - (len(samples) - 1) / 2) * width
        y = levels[order, s]
        err = np.abs(np.vstack([y - ci[order, s, 0], ci[order, s, 1] - y]))
        ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, label=name)
    ax.set_xticks(range(len(order)), order)
    ax.set_xlabel("state")
    ax.set_ylabel("methylation level (95% interval)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(samples), frameon=False)
    _save(fig, path)


def plot_history(path, history) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.plot(range(len(history)), history, "o-")
    ax.set_xlabel("EM iteration")
    ax.set_ylabel("log-likelihood")
    _save(fig, path)
