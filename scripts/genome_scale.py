"""HMRs and PMDs of a human-sized methylome, streambhmm beside DNMTools v1.5.1 (issue 24, part 4).

    python scripts/genome_scale.py [--dnmtools PATH] [--workdir DIR] [--repeats 1] [--skip-dnmtools]

The methylome: the real rows of the MethylSeekR IMR90 chr22 excerpt (200,000 CpGs over 14.8 Mb,
with HMRs and PMDs), tiled over hg38's 22 autosomes and X (3.1 Gb): 140 tiles spaced evenly
along the chromosomes, about 28 M CpGs in 13 M 100 bp bins, written as one MethylSeekR-format
file (chr pos T M, gzip), which both tools read. A second sample, the same tiles mirrored
(so it differs from the first along the genome), serves the two-sample moment pass.

Timed as a user runs the jobs, each step a new process under ../shared/tools/peers/memtime.py
(wall seconds, peak memory of the whole process tree, Dask workers included), on this machine's
2 cores:

    streambhmm   ingest; then hmr, and pmd (the ingest counts in both)
    DNMTools     convert.py (its input); then dnmtools hmr, and dnmtools pmd (the conversion counts in both)
    moments      streambhmm moments over two samples (every sum the refinement uses)
    fit          streambhmm fit MOMENTS --states 2-8

Targets: HMR and PMD at most half of DNMTools' wall time and a quarter of its peak memory; the
moment pass at least 2 M bins x samples per second per core; the sweep under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from installed import byte_compile_package  # scripts/, beside this one

# the shared data beside the checkout (a worktree sits one level deeper than the main checkout)
SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
SOURCE = SHARED / "data" / "real" / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"
PEERS = SHARED / "tools" / "peers"
HG38 = {"chr1": 248956422, "chr2": 242193529, "chr3": 198295559, "chr4": 190214555, "chr5": 181538259,
        "chr6": 170805979, "chr7": 159345973, "chr8": 145138636, "chr9": 138394717, "chr10": 133797422,
        "chr11": 135086622, "chr12": 133275309, "chr13": 114364328, "chr14": 107043718, "chr15": 101991189,
        "chr16": 90338345, "chr17": 83257441, "chr18": 80373285, "chr19": 58617616, "chr20": 64444167,
        "chr21": 46709983, "chr22": 50818468, "chrX": 156040895}
TILES = 140
DEFAULT_DNMTOOLS = "/tmp/peers/dnmtools/install/bin/dnmtools"


def build(path: Path, mirrored: bool = False) -> int:
    """Write the tiled methylome; returns its number of CpGs."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    rows = np.loadtxt(SOURCE, usecols=(1, 2, 3), dtype=np.int64)
    pos, total, meth = rows[:, 0] - rows[0, 0], rows[:, 1], rows[:, 2]
    span = int(pos[-1]) + 2
    if mirrored:
        pos, total, meth = (span - 2 - pos)[::-1], total[::-1], meth[::-1]
    genome = sum(HG38.values())
    n = 0
    with pa.CompressedOutputStream(str(path), "gzip") as out:
        for chrom, length in HG38.items():
            tiles = max(1, round(TILES * length / genome))
            step = length // tiles
            if step < span:
                raise ValueError(f"{chrom}: {tiles} tiles of {span:,} bp do not fit in {length:,} bp")
            starts = np.arange(tiles) * step + 10_000
            position = (starts[:, None] + pos[None, :] + 1).ravel()  # 1-based, as the source
            table = pa.table({"chrom": pa.array([chrom] * position.size), "pos": position,
                              "T": np.tile(total, tiles), "M": np.tile(meth, tiles)})
            pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none"))
            n += position.size
    return n


def timed(label: str, cmd: list, log: Path) -> dict:
    log.unlink(missing_ok=True)
    result = subprocess.run([sys.executable, str(PEERS / "memtime.py"), "--label", label, "--log", str(log), "--",
                             *map(str, cmd)], capture_output=True, text=True)
    record = json.loads(log.read_text().splitlines()[-1])
    if record["rc"] != 0:
        sys.exit(f"{label} failed ({' '.join(map(str, cmd))}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    print(f"  {label}: {record['wall_s']:.1f} s, {record['peak_tree_rss_mib']:.0f} MiB, "
          f"{record['user_s'] + record['sys_s']:.1f} CPU s", flush=True)
    return record


def best(runs: list[dict]) -> dict:
    return {"wall_s": min(r["wall_s"] for r in runs), "peak_tree_rss_mib": max(r["peak_tree_rss_mib"] for r in runs)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dnmtools", default=os.environ.get("DNMTOOLS") or shutil.which("dnmtools") or DEFAULT_DNMTOOLS)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--skip-dnmtools", action="store_true")
    args = parser.parse_args()
    byte_compile_package()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-genome-"))
    work.mkdir(parents=True, exist_ok=True)
    log = work / "memtime.jsonl"
    genome, mirror = work / "genome.tab.gz", work / "genome_b.tab.gz"
    for path, mirrored in ((genome, False), (mirror, True)):
        if not path.exists():  # written beside and renamed: an interrupted build leaves no partial file
            t = time.perf_counter()
            partial = path.with_name(f".{path.name}.partial")
            n = build(partial, mirrored=mirrored)
            partial.rename(path)
            print(f"built {path}: {n:,} CpGs in {time.perf_counter() - t:.0f} s", flush=True)
    store, counts = work / "genome.zarr", {}
    ours = {"ingest": [], "hmr": [], "pmd": []}
    for _ in range(args.repeats):
        shutil.rmtree(store, ignore_errors=True)
        ours["ingest"].append(timed("streambhmm ingest", ["streambhmm", "ingest", genome, "--sample", "A", "--store",
                                                          store, "--format", "methylseekr", "-q"], log))
        ours["hmr"].append(timed("streambhmm hmr", ["streambhmm", "hmr", store, "-o", work / "ours.hmr.bed", "-q"], log))
        ours["pmd"].append(timed("streambhmm pmd", ["streambhmm", "pmd", store, "-o", work / "ours.pmd.bed", "-q"], log))
    info = subprocess.run(["streambhmm", "info", store], capture_output=True, text=True).stdout
    counts["bins"] = int(next(line.split()[2].replace(",", "") for line in info.splitlines()
                              if line.startswith("total")))  # total, bins, covered in A
    theirs = {"convert": [], "hmr": [], "pmd": []}
    if not args.skip_dnmtools:
        if not Path(args.dnmtools).exists():
            sys.exit(f"no dnmtools at {args.dnmtools}: build it with {PEERS / 'build_dnmtools.sh'}")
        meth = work / "genome.meth"
        for _ in range(args.repeats):
            theirs["convert"].append(timed("DNMTools convert", [sys.executable, PEERS / "convert.py", "dnmtools",
                                                                genome, "--out", meth], log))
            theirs["hmr"].append(timed("dnmtools hmr", [args.dnmtools, "hmr", "-o", work / "dnmtools.hmr.bed", meth],
                                       log))
            theirs["pmd"].append(timed("dnmtools pmd", [args.dnmtools, "pmd", "-o", work / "dnmtools.pmd.bed", meth],
                                       log))
    # the two-sample moment pass and the sweep, from scratch (a moment store left by an earlier run would resume)
    shutil.rmtree(work / "moments.zarr", ignore_errors=True)
    timed("streambhmm ingest (sample B)", ["streambhmm", "ingest", mirror, "--sample", "B", "--store", store,
                                           "--format", "methylseekr", "-q"], log)
    moments = timed("streambhmm moments (A, B)", ["streambhmm", "moments", store, "--output", work / "moments.zarr",
                                                  "-q"], log)
    sweep = timed("streambhmm fit --states 2-8", ["streambhmm", "fit", work / "moments.zarr", "--states", "2-8",
                                                  "--output", work / "sweep.json", "-q"], log)
    report(ours, theirs, counts["bins"], moments, sweep, work)


def report(ours, theirs, bins, moments, sweep, work: Path) -> None:
    ingest = best(ours["ingest"])
    print(f"\nA human-sized methylome: {bins:,} covered bins of 100 bp (sample A)\n")
    print("| job | streambhmm s | DNMTools s | ratio | streambhmm peak MiB | DNMTools peak MiB | ratio |")
    print("|---|---|---|---|---|---|---|")
    for job in ("hmr", "pmd"):
        mine = best(ours[job])
        wall = ingest["wall_s"] + mine["wall_s"]
        memory = max(ingest["peak_tree_rss_mib"], mine["peak_tree_rss_mib"])
        if theirs["convert"]:
            convert, call = best(theirs["convert"]), best(theirs[job])
            their_wall = convert["wall_s"] + call["wall_s"]
            their_memory = max(convert["peak_tree_rss_mib"], call["peak_tree_rss_mib"])
            print(f"| ingest + {job} | {wall:.1f} ({ingest['wall_s']:.1f} + {mine['wall_s']:.1f}) | {their_wall:.1f} "
                  f"({convert['wall_s']:.1f} + {call['wall_s']:.1f}) | {wall / their_wall:.2f} | {memory:.0f} | "
                  f"{their_memory:.0f} | {memory / their_memory:.2f} |")
        else:
            print(f"| ingest + {job} | {wall:.1f} | | | {memory:.0f} | | |")
    cores = os.cpu_count() or 1
    rate = 2 * bins / moments["wall_s"]
    cpu = moments["user_s"] + moments["sys_s"]
    print(f"\nmoment pass over 2 samples: {moments['wall_s']:.1f} s, {rate / 1e6:.2f} M bins x samples per second "
          f"({rate / cores / 1e6:.2f} per core on {cores} cores), {moments['peak_tree_rss_mib']:.0f} MiB; "
          f"{cpu:.1f} CPU s, {2 * bins / cpu / 1e6:.2f} M bins x samples per CPU second (a core's rate when the "
          f"machine is shared)")
    print(f"fit MOMENTS --states 2-8: {sweep['wall_s']:.1f} s")
    from compare_dnmtools import jaccard_genome, read_beds

    for job in ("hmr", "pmd"):
        mine, their = work / f"ours.{job}.bed", work / f"dnmtools.{job}.bed"
        if mine.exists() and their.exists():
            print(f"{job}: Jaccard against DNMTools {jaccard_genome(read_beds(mine), read_beds(their)):.3f}")
    print(f"\nfiles in {work}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
