"""What each chromosome or contig costs: the same CpGs on one chromosome and split over many
contigs (draft assemblies, hg38's unplaced and alternative contigs).

    python scripts/many_contigs.py [--contigs 200] [--beside-chromosome] [--workdir DIR] [--dnmtools PATH]

The rows of the MethylSeekR IMR90 chr22 excerpt (200,000 CpGs) are written twice in its own
format: as they are (one chromosome, 14.8 Mb), and cut into --contigs contigs of equal numbers
of rows, each contig's positions counted from its first CpG (contigs of about 50 kb at 200).
With --beside-chromosome the second file holds the excerpt as it is too, before its contigs:
an assembly's chromosome beside its unplaced contigs (twice the CpGs of the first file).
Each is ingested into a new store, and `hmr` and `pmd` run on it, each step a new process as a
user runs it; printed: the seconds of each step for both, their ratio, and the seconds per
contig. A command that finds no regions to call (no 50 kb PMD fits on contigs of 5 kb) has done
its work all the same: its seconds are printed, marked refused. Beside them, in the same run,
DNMTools v1.5.1 on the same files (../shared/tools/peers: its input conversion, then `dnmtools
hmr` and `dnmtools pmd`), when its build is found (--dnmtools, default where the peers' build
script puts it).
"""

from __future__ import annotations

import argparse
import gzip
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
SOURCE = SHARED / "data" / "real" / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"
PEERS = SHARED / "tools" / "peers"
DEFAULT_DNMTOOLS = "/tmp/peers/dnmtools/install/bin/dnmtools"


def write_contigs(path: Path, n_contigs: int, beside_chromosome: bool = False) -> None:
    """The excerpt's rows cut into ``n_contigs`` contigs, positions from each contig's first CpG
    (``beside_chromosome``: after the excerpt's own rows, as they are)."""
    rows = [line.split("\t") for line in gzip.open(SOURCE, "rt").read().splitlines()]
    per_contig = -(-len(rows) // n_contigs)
    with open(path, "w") as out:
        if beside_chromosome:
            out.writelines("\t".join(row) + "\n" for row in rows)
        for i, row in enumerate(rows):
            contig = i // per_contig
            first = int(rows[contig * per_contig][1])
            out.write(f"ctg_{contig}\t{int(row[1]) - first + 1}\t{row[2]}\t{row[3]}\n")


REFUSALS = ("no hypomethylated regions", "no partially methylated domains")  # the work done, nothing to call


STEPS = {}  # the command's own account of its steps ("moments 0.5 s, fit 1.2 s, ..."), by command line


def timed(*args) -> tuple[float, str]:
    """Seconds of one command, and "refused" when it found no regions to call (contigs too
    short for 50 kb PMDs, say)."""
    start = time.perf_counter()
    result = subprocess.run(["streambhmm", *map(str, args), "-q"], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    steps = re.search(r"\(([\d.]+ s: [^)]*)\)", result.stdout + result.stderr)
    if steps:
        STEPS[args] = steps.group(1)
    if result.returncode and any(refusal in result.stderr for refusal in REFUSALS):
        return seconds, "refused"
    if result.returncode:
        sys.exit(f"streambhmm {' '.join(map(str, args))} failed:\n{result.stdout}{result.stderr}")
    return seconds, ""


def timed_peer(*args) -> float:
    """Seconds of one DNMTools step (or of its input conversion)."""
    start = time.perf_counter()
    result = subprocess.run(list(map(str, args)), capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"{' '.join(map(str, args))} failed:\n{result.stdout}{result.stderr}")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contigs", type=int, default=200)
    parser.add_argument("--beside-chromosome", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--dnmtools", default=DEFAULT_DNMTOOLS)
    args = parser.parse_args()
    dnmtools = args.dnmtools if Path(args.dnmtools).is_file() else None
    work = Path(args.workdir or tempfile.mkdtemp(prefix="many_contigs_"))
    work.mkdir(parents=True, exist_ok=True)
    contigs = work / "contigs.tab"
    write_contigs(contigs, args.contigs, args.beside_chromosome)
    seconds, theirs = {}, {}
    split = f"{args.contigs} contigs" + (" beside it" if args.beside_chromosome else "")
    for label, source in (("one chromosome", SOURCE), (split, contigs)):
        store = work / f"{label.replace(' ', '_')}.zarr"
        seconds[label] = {
            "ingest": timed("ingest", source, "--format", "methylseekr", "--sample", "S", "--store", store),
            "hmr": timed("hmr", store, "-o", store.with_suffix(".hmr.bed")),
            "pmd": timed("pmd", store, "-o", store.with_suffix(".pmd.bed")),
        }
        if dnmtools:
            meth = store.with_suffix(".meth")
            theirs[label] = {
                "ingest": timed_peer(sys.executable, PEERS / "convert.py", "dnmtools", source, "--out", meth),
                "hmr": timed_peer(dnmtools, "hmr", "-o", store.with_suffix(".dnmtools-hmr.bed"), meth),
                "pmd": timed_peer(dnmtools, "pmd", "-o", store.with_suffix(".dnmtools-pmd.bed"), meth),
            }
    one, many = seconds.values()
    print(f"the MethylSeekR excerpt's 200,000 CpGs, each step a new process (work in {work}):")
    peer = " DNMTools (one / contigs), s |" if dnmtools else ""
    print(f"| step | one chromosome, s | {split}, s | ratio | s per contig |{peer}\n"
          f"|---|---|---|---|---|{'---|' if dnmtools else ''}")
    for step in one:
        (a, a_note), (b, b_note) = one[step], many[step]
        extra = (b - a) / (args.contigs - (0 if args.beside_chromosome else 1))
        their = f" {theirs['one chromosome'][step]:.1f} / {theirs[split][step]:.1f} |" \
            if dnmtools else ""
        print(f"| {step} | {a:.1f} {a_note} | {b:.1f} {b_note} | {b / a:.1f}x | {extra:.3f} |{their}")
    if dnmtools:
        print("(DNMTools' ingest row is its input conversion, ../shared/tools/peers/convert.py)")
    for args_, steps in STEPS.items():
        print(f"streambhmm {args_[0]} {Path(args_[1]).name}: {steps}")


if __name__ == "__main__":
    main()
