"""A genome-browser-like figure of `streambhmm dmr` on H1 vs IMR90 chr21 (2 vs 2): each
sample's methylation per 100 bp bin, the posterior of difference (the --bigwig track), our
focal DMRs (gain red, loss blue), our differential domains and DSS's calls, around the
strongest focal DMR and over a stretch with an IMR90 PMD.

    python scripts/dmr_figure.py WORKDIR [--output docs/figures/dmr.png]

WORKDIR is a `scripts/dmr_benchmark.py --workdir` after its run on h1-imr90 (its store,
sheet and DSS's calls); `dmr` runs again there with --bigwig for the posterior track.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
from pathlib import Path

import numpy as np

SAMPLE_COLOURS = {"H1": ("#1b9e77", "#66c2a5"), "IMR90": ("#d95f02", "#fc8d62")}


def read_calls(path: Path, kind: str) -> list:
    rows = list(csv.DictReader(open(path), delimiter="\t"))
    if kind == "dss":
        return [(int(r["start"]) - 1, int(r["end"]), "dss") for r in rows]
    return [(int(r["start"]), int(r["end"]), r["direction"]) for r in rows]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--output", default="docs/figures/dmr.png")
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pyBigWig

    from streambhmm.io.store import open_store

    here = args.workdir / "h1-imr90"
    ours = here / "ours"
    bigwig = ours / "figure.posterior.bw"
    subprocess.run(["streambhmm", "dmr", ours / "counts.zarr", "--groups", ours / "sheet.tsv", "--output",
                    ours / "figure.bed", "--bigwig", bigwig, "-q"], check=True)
    focal = list(csv.DictReader(open(ours / "figure.tsv"), delimiter="\t"))
    dmrs = read_calls(ours / "figure.tsv", "ours")
    domains = read_calls(ours / "figure.domains.tsv", "ours")
    dss = read_calls(here / "dss" / "dmr.tsv", "dss")
    store = open_store(ours / "counts.zarr")
    chrom = store.chromosomes[0]
    top = focal[0]
    centre = (int(top["start"]) + int(top["end"])) // 2
    big = max(domains, key=lambda d: d[1] - d[0]) if domains else (centre - 500_000, centre + 500_000, "")
    windows = ((centre - 4_000, centre + 4_000, f"the strongest focal DMR ({top['name']}, {top['direction']} "
                                                f"{float(top['difference']):+.2f}, {top['n_bins']} bins)"),
               (big[0] - 300_000, big[1] + 300_000, "an IMR90 PMD: a differential domain, and the focal DMRs "
                                                    "around it"))
    fig = plt.figure(figsize=(13, 9.5), constrained_layout=True)
    outer = fig.add_gridspec(len(windows), 1, hspace=0.08)
    with pyBigWig.open(str(bigwig)) as bw:
        for row, (lo, hi, title) in enumerate(windows):
            lo = max(lo, 0)
            level, post, tracks = outer[row].subgridspec(3, 1, height_ratios=(3.2, 1, 1.1), hspace=0.05).subplots(
                sharex=True)
            scale, unit = (1e3, "kb") if hi - lo < 100_000 else (1e6, "Mb")
            _methylation(level, store, chrom, lo, hi, scale, domain_view=unit == "Mb")
            level.set_title(f"H1 (green) vs IMR90 (orange), 2 replicates each: {title}", loc="left")
            entries = bw.intervals(chrom, lo, hi) or []
            if entries:
                x = np.array([[e[0], e[1]] for e in entries]).ravel() / scale
                y = np.repeat([e[2] for e in entries], 2)
                post.fill_between(x, y, color="0.35", lw=0, step=None)
            post.set_ylim(0, 1.05)
            post.set_yticks([0, 1])
            post.set_ylabel("posterior of\ndifference", fontsize=8)
            for y, calls, label in ((2, dss, "DSS DMRs"), (1, domains, "streambhmm domains"),
                                    (0, dmrs, "streambhmm DMRs")):
                for start, end, direction in calls:
                    if end > lo and start < hi:
                        colour = {"gain": "#d73027", "loss": "#4575b4", "dss": "0.45"}[direction]
                        tracks.plot([start / scale, end / scale], [y, y], color=colour, lw=7,
                                    alpha=0.45 if calls is domains else 1.0, solid_capstyle="butt")
            tracks.set_ylim(-0.7, 2.7)
            tracks.set_yticks([0, 1, 2], ["streambhmm DMRs", "streambhmm domains", "DSS DMRs"], fontsize=8)
            tracks.set_xlim(lo / scale, hi / scale)
            tracks.set_xlabel(f"{chrom} position, {unit} (hg18)")
            tracks.ticklabel_format(axis="x", useOffset=False, style="plain")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.output, dpi=110)
    print(args.output)


def _methylation(ax, store, chrom, lo, hi, scale, domain_view: bool) -> None:
    """Each sample's methylation: per 100 bp bin (dot size: reads), or in a domain's view per 5 kb."""
    first, last = lo // store.bin_size, hi // store.bin_size
    width = 5000 // store.bin_size if domain_view else 1
    for ref in store.chunk_refs(chrom, store.samples):
        if ref.stop <= first or ref.start >= last:
            continue
        meth, cov = ref.read()
        rows = np.arange(max(first - ref.start, 0), min(last, ref.stop) - ref.start)
        for k, sample in enumerate(store.samples):
            group, replicate = sample.split("_")
            colour = SAMPLE_COLOURS[group][int(replicate[-1]) - 1]
            m, c, x = meth[rows, k], cov[rows, k], ref.positions(rows)
            if width > 1:
                window = x // (width * store.bin_size)
                keys, index = np.unique(window, return_index=True)
                m, c = np.add.reduceat(m, index), np.add.reduceat(c, index)
                x = keys * width * store.bin_size + width * store.bin_size // 2
                ax.plot(x / scale, m / np.maximum(c, 1), color=colour, lw=1, label=f"{sample} (5 kb)")
                continue
            covered = c > 0
            ax.scatter(x[covered] / scale, m[covered] / c[covered], s=np.clip(c[covered] / 3, 2, 25), color=colour,
                       alpha=0.7, linewidths=0, label=sample)
    ax.set_ylim(-0.03, 1.03)
    ax.set_yticks([0, 0.5, 1])
    ax.set_ylabel("methylation")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), loc="lower left", fontsize=8, frameon=False, ncol=4)


if __name__ == "__main__":
    main()
