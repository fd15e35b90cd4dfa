"""Our HMR-like and PMD-like regions against DNMTools' own calls on the same CpGs (issue 15).

    python scripts/compare_dnmtools.py [--workdir DIR] [--variants default,binomial]

Data: IMR90 chr22 (MethylSeekR_IMR90_chr22, 200,000 CpGs, hg18) and DNMTools v1.5.1's
calls on it (../shared/data/reference/dnmtools_IMR90_chr22: `dnmtools hmr` and `dnmtools pmd`,
default settings). Each recipe runs the commands a user runs, each a new process:

  HMR  ingest --format methylseekr (100 bp bins); fit --states 3 --method refined-em
       (beta-binomial EM); regions --preset hmr
  PMD  ingest --format methylseekr --bin-size 5000; fit --states 2 --method refined-em;
       regions --preset pmd

Variant "binomial" fits with --emission binomial instead (what the beta-binomial changes).
Then, as a check that the recipes are not tuned to this chromosome, the same recipes on
other methylomes without reference calls (H1 and IMR90 chr21 from dmrseq, replicates
merged, hg18): counts, median lengths and megabases. H1 (embryonic stem cells) has no
PMDs; IMR90 (fibroblasts) does (Lister et al. 2009).
Reported per recipe: base-pair Jaccard (intersection over union), the fraction of
DNMTools' regions we touch, the fractions of their bases we cover and of ours they
cover, counts and median lengths. Targets: Jaccard >= 0.6 for both, median lengths within
a factor 2 of DNMTools'. With `bedtools` on PATH it also checks that `bedtools sort`,
`merge -s` and `intersect -s` accept our BED files.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
INPUT = ROOT / "real" / "MethylSeekR_IMR90_chr22"
REFERENCE = ROOT / "reference" / "dnmtools_IMR90_chr22"
OTHERS = {"H1 chr21": ROOT / "real" / "dmrseq_BS.chr21_H1_IMR90" / "H1",
          "IMR90 chr21": ROOT / "real" / "dmrseq_BS.chr21_H1_IMR90" / "IMR90"}
RECIPES = {
    "HMR": {"bin_size": 100, "states": 3, "preset": "hmr", "reference": "IMR90.hmr.bed"},
    "PMD": {"bin_size": 5000, "states": 2, "preset": "pmd", "reference": "IMR90.pmd.bed"},
}


def streambhmm(*args) -> str:
    result = subprocess.run([sys.executable, "-m", "streambhmm.app.cli", *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"streambhmm {' '.join(map(str, args))} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def read_bed(path: Path) -> dict[str, np.ndarray]:
    """{chrom: (n, 2) sorted, merged intervals}."""
    out = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith(("#", "track", "browser")):
            continue
        chrom, start, end = line.split("\t")[:3]
        out.setdefault(chrom, []).append((int(start), int(end)))
    return {c: merged(np.array(sorted(v), dtype=np.int64)) for c, v in out.items()}


def merged(intervals: np.ndarray) -> np.ndarray:
    out = []
    for start, end in intervals:
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def overlap(a: np.ndarray, b: np.ndarray) -> int:
    """Bases in both of two sorted, merged interval lists."""
    total, i, j = 0, 0, 0
    while i < len(a) and j < len(b):
        total += max(0, min(a[i, 1], b[j, 1]) - max(a[i, 0], b[j, 0]))
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return total


def touched(theirs: np.ndarray, ours: np.ndarray) -> int:
    """How many of ``theirs`` overlap one of ``ours``."""
    return sum(1 for start, end in theirs if ((ours[:, 0] < end) & (ours[:, 1] > start)).any())


def compare(ours_path: Path, theirs_path: Path) -> dict:
    ours, theirs = read_bed(ours_path), read_bed(theirs_path)
    chroms = set(ours) | set(theirs)
    empty = np.zeros((0, 2), np.int64)
    inter = sum(overlap(ours.get(c, empty), theirs.get(c, empty)) for c in chroms)
    size_o = sum(int((v[:, 1] - v[:, 0]).sum()) for v in ours.values())
    size_t = sum(int((v[:, 1] - v[:, 0]).sum()) for v in theirs.values())
    raw_ours = [int(l.split("\t")[2]) - int(l.split("\t")[1]) for l in ours_path.read_text().splitlines()
                if l and not l.startswith(("#", "track", "browser"))]
    raw_theirs = [int(l.split("\t")[2]) - int(l.split("\t")[1]) for l in theirs_path.read_text().splitlines() if l]
    return {"jaccard": inter / max(size_o + size_t - inter, 1), "touched": sum(touched(theirs[c], ours.get(c, empty))
                                                                               for c in theirs) / max(len(raw_theirs), 1),
            "their bases covered": inter / max(size_t, 1), "our bases theirs": inter / max(size_o, 1),
            "n ours": len(raw_ours), "n theirs": len(raw_theirs),
            "median ours": float(np.median(raw_ours)) if raw_ours else 0.0, "median theirs": float(np.median(raw_theirs)),
            "Mb ours": size_o / 1e6, "Mb theirs": size_t / 1e6}


def run_recipe(name: str, recipe: dict, variant: str, workdir: Path, files=None, fmt: str = "methylseekr"
               ) -> tuple[Path | None, float]:
    """The recipe's three commands; the BED, or None where the preset refused the model."""
    store, model, bed = (workdir / f"{name}-{variant}{suffix}".replace(" ", "_") for suffix in (".zarr", ".json", ".bed"))
    start = time.perf_counter()
    streambhmm("ingest", *(files or sorted(INPUT.glob("*.tab.gz"))), "--sample", "S", "--store", store,
               "--format", fmt, "--bin-size", recipe["bin_size"])
    emission = ["--emission", "binomial"] if variant == "binomial" else []
    streambhmm("fit", store, "--states", recipe["states"], "--method", "refined-em", *emission, "-o", model, "-q")
    result = subprocess.run([sys.executable, "-m", "streambhmm.app.cli", "regions", str(store), "--model", str(model),
                             "--preset", recipe["preset"], "-o", str(bed), "-q"], capture_output=True, text=True)
    print((result.stdout + result.stderr).strip())
    return (bed if result.returncode == 0 else None), time.perf_counter() - start


def bedtools_check(beds: list[Path]) -> list[str]:
    """What bedtools says of our BED files (sort, merge -s, intersect -s)."""
    if not shutil.which("bedtools"):
        return ["bedtools is not on PATH: skipped (apt install bedtools)"]
    lines = []
    for bed in beds:
        sort = subprocess.run(["bedtools", "sort", "-i", bed], capture_output=True, text=True)
        merge = subprocess.run(["bedtools", "merge", "-s", "-i", bed], capture_output=True, text=True)
        inter = subprocess.run(["bedtools", "intersect", "-s", "-u", "-a", bed, "-b", bed], capture_output=True,
                               text=True)
        n = sum(1 for line in bed.read_text().splitlines() if line and not line.startswith("track"))
        lines.append(f"{bed.name}: sort {'ok' if sort.returncode == 0 else sort.stderr.strip()[:100]} "
                     f"({len(sort.stdout.splitlines())} lines); merge -s {len(merge.stdout.splitlines())} "
                     f"intervals ({merge.returncode == 0 and 'ok' or merge.stderr.strip()[:100]}); "
                     f"intersect -s {len(inter.stdout.splitlines())} of {n} found in themselves")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--variants", default="default,binomial")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-dnmtools-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows, beds = [], []
    for variant in args.variants.split(","):
        for name, recipe in RECIPES.items():
            bed, seconds = run_recipe(name, recipe, variant, workdir)
            rows.append((name, variant, compare(bed, REFERENCE / recipe["reference"]), seconds))
            beds.append(bed)
    others = []
    for sample, prefix in OTHERS.items():
        files = sorted(prefix.parent.glob(f"{prefix.name}_r*.tsv.gz"))
        for name, recipe in RECIPES.items():
            bed, seconds = run_recipe(f"{sample}-{name}", recipe, "default", workdir, files, "auto")
            others.append((sample, name, bed, seconds))
    print("\n| regions | emission | Jaccard | DNMTools' regions we touch | their bases we cover | our bases they "
          "cover | ours (median bp, Mb) | DNMTools (median bp, Mb) | seconds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, variant, r, seconds in rows:
        emission = "beta-binomial" if variant == "default" else variant
        print(f"| {name} | {emission} | {r['jaccard']:.3f} | {r['touched']:.1%} | {r['their bases covered']:.1%} | "
              f"{r['our bases theirs']:.1%} | {r['n ours']} ({r['median ours']:,.0f}, {r['Mb ours']:.2f}) | "
              f"{r['n theirs']} ({r['median theirs']:,.0f}, {r['Mb theirs']:.2f}) | {seconds:.1f} |")
    print("\nThe same recipes (beta-binomial) on other methylomes:\n")
    print("| methylome | regions | count | median bp | Mb | seconds |")
    print("|---|---|---|---|---|---|")
    for sample, name, bed, seconds in others:
        if bed is None:
            print(f"| {sample} | {name} | refused (see above) | | | {seconds:.1f} |")
            continue
        lengths = [int(l.split("\t")[2]) - int(l.split("\t")[1]) for l in bed.read_text().splitlines()
                   if l and not l.startswith("track")]
        print(f"| {sample} | {name} | {len(lengths)} | {np.median(lengths) if lengths else 0:,.0f} | "
              f"{sum(lengths) / 1e6:.2f} | {seconds:.1f} |")
    print("\n" + "\n".join(bedtools_check(beds)))
    print(f"\nfiles in {workdir}")


if __name__ == "__main__":
    main()
