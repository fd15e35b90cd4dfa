"""How `hmr`'s one-pass fit moves when the same reads are ingested with another --chunk-size.

    python scripts/chunk_size_fits.py [--workdir DIR] [--chunk-sizes 1000000,5000]

The moments are sums, equal across chunkings to rounding (about 1e-13 relative), and the
fit is seeded, so one store always gives the same regions. But the refinement stops at a
relative tolerance (5e-8 for `hmr`) on a flat optimum, and rounding-level changes to its
input move where it stops. For each methylome this ingests the same file at each chunk size,
runs `hmr --save-model` on each store (each a new process), and prints the fitted levels,
whether the regions are the same and how far their scores differ; then it fits the same
moments in this process at tighter tolerances (and the time each fit takes), to show the
two fits meeting as the tolerance tightens.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
METHYLOMES = {  # name: (file, ingest options)
    "DMCHMM B cell chr8": ("DMCHMM_blood_chr8/blk.BCU1568_BC_BS_1.gz", ["--columns", "chrom=1,pos=2,meth=5,unmeth=6"]),
    "modkit lung chr20 (normal)": ("modkit_lung_chr20/lung_00733-m_adjacent-normal_5mc-5hmc_chr20_cpg_pileup.bed.gz",
                                   []),
    "MethylSeekR IMR90 chr22": ("MethylSeekR_IMR90_chr22/Lister2009_imr90_hg18_chr22.tab.gz",
                                ["--format", "methylseekr"]),
}
TOLERANCES = (5e-8, 1e-8, 1e-9, 1e-10)


def ordered(levels: np.ndarray) -> np.ndarray:
    """The held hypomethylated state, then the free states by level (their order is the fit's)."""
    return np.r_[levels[0], np.sort(levels[1:])]


def streambhmm(*args) -> None:
    subprocess.run([sys.executable, "-m", "streambhmm", *map(str, args)], check=True, capture_output=True)


def bed_rows(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text().splitlines()[1:]]


def jaccard(a: list, b: list) -> float:
    """Base-pair Jaccard of two sets of disjoint regions (one chromosome or many)."""
    def covered(rows):
        return {(r[0], p) for r in rows for p in range(int(r[1]) // 100, int(r[2]) // 100)}  # 100 bp bins
    x, y = covered(a), covered(b)
    return len(x & y) / len(x | y) if x | y else 1.0


def fits_at(store: Path, tolerances) -> list[tuple[float, np.ndarray, float]]:
    """(tolerance, levels of sample 0, seconds) of hmr's one-pass fit to the store's moments."""
    from streambhmm.app.calls import fit_call_model
    from streambhmm.distributed.cluster import store_session
    from streambhmm.distributed.fitdata import load_moments
    from streambhmm.learn.domains import HMR_MODEL
    from streambhmm.moments.spec import FeatureSpec

    with store_session(store) as opened:
        moments = load_moments(opened.store, opened.store.samples, FeatureSpec(), opened.client, True).moments
    found = []
    for tol in tolerances:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            estimate, _ = fit_call_model(moments, dataclasses.replace(HMR_MODEL, tol=tol), 0)
        found.append((tol, ordered(estimate.methylation_[:, 0]), time.perf_counter() - start))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("chunk_size_fits"))
    parser.add_argument("--chunk-sizes", default="1000000,5000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.chunk_sizes.split(",")]
    args.workdir.mkdir(parents=True, exist_ok=True)
    for name, (file, options) in METHYLOMES.items():
        print(f"\n## {name}")
        stores, beds, levels = [], [], []
        for size in sizes:
            store = args.workdir / f"{Path(file).name}.{size}.zarr"
            if not store.exists():
                streambhmm("ingest", REAL / file, "--sample", "s", "--store", store, "--chunk-size", size, "-q",
                           *options)
            bed, model = store.with_suffix(".hmr.bed"), store.with_suffix(".hmr.json")
            streambhmm("hmr", store, "-o", bed, "--save-model", model, "-q")
            stores.append(store)
            beds.append(bed_rows(bed))
            levels.append(ordered(np.array(json.loads(model.read_text())["methylation"])[:, 0]))
            print(f"--chunk-size {size:>9,}: {len(beds[-1])} HMRs, levels {np.round(levels[-1], 4).tolist()}")
        for size, b in zip(sizes[1:], beds[1:]):
            first = {tuple(r[:3]): int(r[4]) for r in beds[0]}
            here = {tuple(r[:3]): int(r[4]) for r in b}
            both = sorted(set(first) & set(here))
            diff = np.abs(np.array([here[k] - first[k] for k in both])) if both else np.zeros(1)
            print(f"--chunk-size {size:,} against {sizes[0]:,}: {len(both)} HMRs the same, "
                  f"{len(set(first) - set(here))} and {len(set(here) - set(first))} not; base-pair Jaccard "
                  f"{jaccard(beds[0], b):.4f}; scores of the same HMRs differ by {diff.mean():.1f} of 1,000 "
                  f"on average, {diff.max()} at most")
        by_store = [fits_at(store, TOLERANCES) for store in stores]
        print("| tolerance | " + " | ".join(f"levels at --chunk-size {s:,} (fit s)" for s in sizes)
              + " | largest level difference |")
        print("|---|" + "---|" * len(sizes) + "---|")
        for i, tol in enumerate(TOLERANCES):
            cells = [f"{np.round(fits[i][1], 5).tolist()} ({fits[i][2]:.2f})" for fits in by_store]
            spread = max(np.abs(fits[i][1] - by_store[0][i][1]).max() for fits in by_store)
            print(f"| {tol:.0e} | " + " | ".join(cells) + f" | {spread:.1e} |")


if __name__ == "__main__":
    main()
