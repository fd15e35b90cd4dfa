"""A figure of what DNMTools and streambhmm call HMRs on the MethylSeekR IMR90 chr22 excerpt:
each 100 bp bin's methylation (dot size: reads), DNMTools' HMRs and PMDs, and ours, in a
methylated stretch and inside a PMD.

    python scripts/hmr_figure.py WORKDIR [--output docs/figures/hmr_calls.png]

WORKDIR is a `scripts/compare_dnmtools.py --workdir` after its run (msr22/ours-hmr.bed,
msr22/dnmtools-hmr.bed, msr22/dnmtools-pmd.bed, msr22/dnmtools.meth).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from compare_dnmtools import read_bed

WINDOWS = ((29_740_000, 29_880_000, "methylated background"), (32_600_000, 32_740_000, "a PMD"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir")
    parser.add_argument("--output", default="docs/figures/hmr_calls.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    here = Path(args.workdir) / "msr22"
    rows = np.loadtxt(here / "dnmtools.meth", usecols=(1, 4, 5))
    pos, level, reads = rows[:, 0].astype(np.int64), rows[:, 1], rows[:, 2]
    bins = pos // 100
    first, index = np.unique(bins, return_index=True)
    meth = np.add.reduceat(level * reads, index)
    cov = np.add.reduceat(reads, index)
    calls = {"DNMTools HMR": (read_bed(here / "dnmtools-hmr.bed"), "tab:red", 1.10),
             "DNMTools PMD": (read_bed(here / "dnmtools-pmd.bed"), "tab:blue", 1.17),
             "streambhmm HMR": (read_bed(here / "ours-hmr.bed"), "tab:green", 1.03)}
    fig, axes = plt.subplots(len(WINDOWS), 1, figsize=(13, 3.2 * len(WINDOWS)), constrained_layout=True)
    for ax, (lo, hi, title) in zip(axes, WINDOWS):
        keep = (first * 100 >= lo) & (first * 100 < hi)
        ax.scatter(first[keep] * 100 / 1e6, meth[keep] / cov[keep], s=np.clip(cov[keep] / 4, 2, 30), c="0.3",
                   alpha=0.6, linewidths=0)
        for label, (intervals, colour, y) in calls.items():
            shown = intervals[(intervals[:, 1] > lo) & (intervals[:, 0] < hi)]
            for start, end in shown:
                ax.plot([start / 1e6, end / 1e6], [y, y], color=colour, lw=6, solid_capstyle="butt")
            ax.plot([], [], color=colour, lw=6, label=label)
        ax.set_xlim(lo / 1e6, hi / 1e6)
        ax.set_ylim(-0.03, 1.22)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1])
        ax.set_ylabel("methylation of a 100 bp bin")
        ax.set_xlabel("chr22 position, Mb (hg18)")
        ax.set_title(f"MethylSeekR IMR90 chr22: {title}", loc="left")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, frameon=False)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=80)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
