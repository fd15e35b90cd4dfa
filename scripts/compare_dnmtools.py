"""`streambhmm hmr` and `pmd` beside DNMTools v1.5.1 (`hmr`, `pmd`) on the same CpGs, in one run
(issue 24's acceptance).

    python scripts/compare_dnmtools.py [--dnmtools PATH] [--repeats 3] [--workdir DIR] [--sets a,b] [--timing-only]

(--timing-only: the seconds and memory of both jobs beside DNMTools', with the Jaccard of the calls;
no EM-polished calls, no quarter of the reads, no bedtools check.)

Also timed, as a floor under our job: a Python process that only imports the fixed stack the
call needs (numpy, scipy.optimize, dask, numba; it reads the store's files without zarr) and runs
one cached numba kernel, doing no work. Our job starts two processes (`ingest`, then the call;
`ingest` loads no numba kernel), so where DNMTools' whole job takes less than our measured
ingest plus that floor, no work we could save in the call would bring ours level with it. A
second, barer floor (numpy and scipy.optimize only: a call without numba kernels or Dask)
bounds what rewriting the call without them could gain.

Data (../shared/data/real, replicates summed as DNMTools' input converter sums them):

    msr22    MethylSeekR IMR90 chr22 (200,000 CpGs of 21.97-36.80 Mb, hg18)
    bsseq22  bsseq IMR90 chr22, r1 + r2 (the whole chromosome; see the caveat below)
    h1-21    dmrseq H1 chr21, r1 + r2
    imr90-21 dmrseq IMR90 chr21, r1 + r2

Each job runs as a user runs it, from the text files, every step a new process run under
../shared/tools/peers/memtime.py (peak memory of the whole process tree, CPU seconds) and timed
by /usr/bin/time inside it (wall seconds to 0.01 s: memtime's own wall clock counts its polls,
0.1 s apart, a step's end up to 0.1 s late):
streambhmm `ingest` then `hmr` (or `pmd`) against DNMTools' input conversion
(../shared/tools/peers/convert.py) then `dnmtools hmr` (or `pmd`), default settings for
both, ours and DNMTools' in turn. The fastest of --repeats runs is reported (memory: the
largest), and the least CPU seconds (user + system, all processes) of a run: on a shared
machine the CPU seconds move less with the load than the wall seconds.

Reported per set and job: base-pair Jaccard against DNMTools' calls, counts, median
lengths, megabases, the mean level inside the calls (methylated over covered reads of the
CpGs inside them) and how many calls have a mean above 0.4, and seconds and memory of both.
Also:
- "where DNMTools is right": on the MethylSeekR excerpt 87% of the bases of DNMTools' HMRs
  lie inside its own PMD calls (stretches of a PMD, not HMRs): Jaccard restricted to the
  calls outside DNMTools' PMDs (ours and theirs) is reported beside the plain one. On bsseq
  IMR90 chr22 the comparison is with DNMTools' calls on the MethylSeekR excerpt, inside its span.
- one pass against EM: `hmr`/`pmd --polish-em 1000` (EM to convergence from the one-pass
  model), Jaccard between the two region sets;
- coverage: the MethylSeekR excerpt thinned to a quarter of its reads (each read kept with
  probability 1/4, seeded): ours and DNMTools' calls on it against DNMTools' on the full data,
  and each tool's against its own on the full data.

Caveat found while building this: the bsseq and dmrseq files list only CpGs with at least one
methylated read in each replicate (Lister et al.'s mc files list methylcytosines; 17,936 CpGs
of the MethylSeekR excerpt, all with a level below 0.2, are missing from bsseq's chr22), so
the unmethylated cores of HMRs are absent from those three sets; `hmr` says so when it finds
nothing there.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from installed import byte_compile_package  # scripts/, beside this one

# the shared data beside the checkout (a worktree sits one level deeper than the main checkout)
SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
REAL = SHARED / "data" / "real"
PEERS = SHARED / "tools" / "peers"
SETS = {
    "msr22": ("MethylSeekR IMR90 chr22", [REAL / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"],
              "methylseekr"),
    "bsseq22": ("bsseq IMR90 chr22", sorted((REAL / "bsseq_BS.chr22_IMR90").glob("IMR90_r*.tsv.gz")), "tsv"),
    "h1-21": ("dmrseq H1 chr21", sorted((REAL / "dmrseq_BS.chr21_H1_IMR90").glob("H1_r*.tsv.gz")), "tsv"),
    "imr90-21": ("dmrseq IMR90 chr21", sorted((REAL / "dmrseq_BS.chr21_H1_IMR90").glob("IMR90_r*.tsv.gz")), "tsv"),
}
DEFAULT_DNMTOOLS = "/tmp/peers/dnmtools/install/bin/dnmtools"
HIGH = 0.4  # "nothing above 0.4 called an HMR"


# -- running and timing -----------------------------------------------------------------------
FLOOR = """import dask, numpy as np, scipy.optimize
from numba import njit


@njit(cache=True)
def total(x):
    return x.sum()


total(np.ones(3))
"""
BARE_FLOOR = "import numpy, scipy.optimize\n"


def floor_seconds(work: Path, repeats: int, code: str = FLOOR) -> float:
    """The fastest of ``repeats`` runs of a process running ``code`` (its kernel cached by a first run)."""
    script = work / "floor.py"
    script.write_text(code)
    subprocess.run([sys.executable, script], check=True)
    return min(timed("floor", [sys.executable, script], work / "memtime.jsonl")["wall_s"] for _ in range(repeats))


def timed(label: str, cmd: list, log: Path) -> dict:
    """Run ``cmd`` under memtime.py; its JSON record, its wall seconds /usr/bin/time's."""
    log.unlink(missing_ok=True)
    elapsed = log.with_suffix(".elapsed")
    subprocess.run([sys.executable, str(PEERS / "memtime.py"), "--label", label, "--log", str(log), "--",
                    "/usr/bin/time", "-f", "%e", "-o", str(elapsed), *map(str, cmd)], capture_output=True, text=True)
    record = json.loads(log.read_text().splitlines()[-1])
    return {**record, "wall_s": float(elapsed.read_text().split()[-1])}


def best_of(runs: list[list[dict]]) -> dict:
    """Per job (a list of steps per run): the fastest run's wall seconds (steps summed), the least CPU
    seconds, the largest peak memory."""
    walls = [sum(step["wall_s"] for step in run) for run in runs]
    cpus = [sum(step["user_s"] + step["sys_s"] for step in run) for run in runs]
    return {"seconds": min(walls), "cpu": min(cpus),
            "memory_mib": max(step["peak_tree_rss_mib"] for run in runs for step in run),
            "steps": {step["label"]: step["wall_s"] for step in runs[int(np.argmin(walls))]},
            "rc": runs[-1][-1]["rc"]}


def our_run(kind: str, files, fmt: str, work: Path, extra=()) -> list[dict]:
    """One run of our job (ingest, then the call), each step a new process."""
    log = work / "memtime.jsonl"
    store, bed = work / f"ours-{kind}.zarr", work / f"ours-{kind}{'-polished' if extra else ''}.bed"
    shutil.rmtree(store, ignore_errors=True)
    ingest = timed("ingest", ["streambhmm", "ingest", *files, "--sample", "S", "--store", store, "--format", fmt,
                              "-q"], log)
    return [ingest, timed(kind, ["streambhmm", kind, store, "-o", bed, "-q", *extra], log)]


def our_outcome(kind: str, work: Path, runs: list, extra=()) -> tuple[dict, Path, str]:
    """The best of our runs, the BED, and the refusal's message when the call refused."""
    store, bed = work / f"ours-{kind}.zarr", work / f"ours-{kind}{'-polished' if extra else ''}.bed"
    message = subprocess.run(["streambhmm", kind, store, "-o", bed, "-q", *extra], capture_output=True,
                             text=True) if runs[-1][-1]["rc"] else None
    return best_of(runs), bed, (message.stderr.strip() if message else "")


def run_ours(kind: str, files, fmt: str, work: Path, repeats: int, extra=()) -> tuple[dict, Path, str]:
    return our_outcome(kind, work, [our_run(kind, files, fmt, work, extra) for _ in range(repeats)], extra)


def their_run(kind: str, files, work: Path, dnmtools: str) -> list[dict]:
    """One run of DNMTools' job (the input conversion, then the call)."""
    log = work / "memtime.jsonl"
    meth, bed = work / "dnmtools.meth", work / f"dnmtools-{kind}.bed"
    convert = timed("convert", [sys.executable, PEERS / "convert.py", "dnmtools", *files, "--out", meth], log)
    return [convert, timed(kind, [dnmtools, kind, "-o", bed, meth], log)]


def run_theirs(kind: str, files, work: Path, repeats: int, dnmtools: str) -> tuple[dict, Path, Path]:
    runs = [their_run(kind, files, work, dnmtools) for _ in range(repeats)]
    return best_of(runs), work / f"dnmtools-{kind}.bed", work / "dnmtools.meth"


def run_both(kind: str, files, fmt: str, work: Path, repeats: int, dnmtools: str):
    """Our job and DNMTools' in turn, ``repeats`` times (turns share a shared machine's load)."""
    ours, theirs = [], []
    for _ in range(repeats):
        ours.append(our_run(kind, files, fmt, work))
        theirs.append(their_run(kind, files, work, dnmtools))
    return (our_outcome(kind, work, ours),
            (best_of(theirs), work / f"dnmtools-{kind}.bed", work / "dnmtools.meth"))


# -- regions ----------------------------------------------------------------------------------------
def read_beds(path: Path) -> dict[str, np.ndarray]:
    """{chromosome: (n, 2) sorted, merged intervals} of a BED."""
    rows = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith(("track", "browser", "#")):
            chrom, start, end = line.split("\t")[:3]
            rows.setdefault(chrom, []).append((int(start), int(end)))
    return {chrom: merged(np.array(sorted(iv), np.int64)) for chrom, iv in rows.items()}


def jaccard_genome(a: dict, b: dict) -> float:
    """Base-pair Jaccard of two BEDs' intervals over all chromosomes."""
    inter = union = 0
    for chrom in set(a) | set(b):
        x, y = a.get(chrom, np.zeros((0, 2), np.int64)), b.get(chrom, np.zeros((0, 2), np.int64))
        both = covered_bases(intersect(x, y))
        inter, union = inter + both, union + covered_bases(x) + covered_bases(y) - both
    return inter / union if union else float("nan")


def read_bed(path: Path) -> np.ndarray:
    """(n, 2) sorted, merged intervals of one chromosome's BED (these sets have one)."""
    beds = read_beds(path)
    return next(iter(beds.values())) if beds else np.zeros((0, 2), np.int64)


def merged(iv: np.ndarray) -> np.ndarray:
    out = []
    for a, b in iv:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return np.array(out, np.int64).reshape(-1, 2)


def lengths_of(path: Path) -> np.ndarray:
    return np.array([int(line.split("\t")[2]) - int(line.split("\t")[1]) for line in path.read_text().splitlines()
                     if line and not line.startswith(("track", "browser", "#"))], np.int64)


def covered_bases(iv: np.ndarray) -> int:
    return int((iv[:, 1] - iv[:, 0]).sum()) if len(iv) else 0


def intersect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i, 0], b[j, 0]), min(a[i, 1], b[j, 1])
        if lo < hi:
            out.append((lo, hi))
        if a[i, 1] < b[j, 1]:
            i += 1
        else:
            j += 1
    return np.array(out, np.int64).reshape(-1, 2)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    inter = covered_bases(intersect(a, b))
    union = covered_bases(a) + covered_bases(b) - inter
    return inter / union if union else float("nan")


def clip(iv: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return intersect(iv, np.array([[lo, hi]], np.int64))


def away_from(iv: np.ndarray, domains: np.ndarray) -> np.ndarray:
    """The intervals of ``iv`` that touch none of ``domains``."""
    keep = [not ((domains[:, 0] < b) & (domains[:, 1] > a)).any() for a, b in iv]
    return iv[np.array(keep, bool)] if len(iv) else iv


class CpGs:
    """A DNMTools counts file (pos0, level, reads) for the mean level inside calls."""

    def __init__(self, meth: Path):
        rows = np.loadtxt(meth, usecols=(1, 4, 5))
        self.pos, self.cov = rows[:, 0].astype(np.int64), rows[:, 2]
        self.mc = np.rint(rows[:, 1] * rows[:, 2])
        self.cum_mc, self.cum_cov = np.r_[0, np.cumsum(self.mc)], np.r_[0, np.cumsum(self.cov)]

    def levels(self, path: Path) -> np.ndarray:
        """The mean level of each call of a BED (methylated / covered reads of its CpGs)."""
        rows = [line.split("\t")[1:3] for line in path.read_text().splitlines()
                if line and not line.startswith(("track", "browser", "#"))]
        out = []
        for a, b in rows:
            i, j = np.searchsorted(self.pos, int(a)), np.searchsorted(self.pos, int(b))
            cov = self.cum_cov[j] - self.cum_cov[i]
            out.append((self.cum_mc[j] - self.cum_mc[i]) / cov if cov else np.nan)
        return np.array(out)

    def pooled(self, iv: np.ndarray) -> float:
        mc = cov = 0.0
        for a, b in iv:
            i, j = np.searchsorted(self.pos, a), np.searchsorted(self.pos, b)
            mc, cov = mc + self.cum_mc[j] - self.cum_mc[i], cov + self.cum_cov[j] - self.cum_cov[i]
        return mc / cov if cov else float("nan")


def describe(path: Path | None, cpgs: CpGs) -> dict:
    if path is None or not path.exists():
        return {"n": 0, "median": 0, "Mb": 0.0, "level": float("nan"), "high": 0}
    lengths, iv = lengths_of(path), read_bed(path)
    levels = cpgs.levels(path)
    return {"n": int(lengths.size), "median": float(np.median(lengths)) if lengths.size else 0,
            "Mb": covered_bases(iv) / 1e6, "level": cpgs.pooled(iv), "high": int((levels > HIGH).sum())}


def thin(files, fmt: str, out: Path, fraction: float = 0.25, seed: int = 0) -> Path:
    """Each read kept with probability ``fraction``: a MethylSeekR-format file (chr pos T M)."""
    rng = np.random.default_rng(seed)
    assert fmt == "methylseekr" and len(files) == 1
    data = np.loadtxt(files[0], dtype=str)
    total, meth = data[:, 2].astype(np.int64), data[:, 3].astype(np.int64)
    kept = rng.binomial(total, fraction)
    kept_meth = rng.hypergeometric(meth, total - meth, kept) if kept.size else kept
    keep = kept > 0
    with gzip.open(out, "wt") as fh:
        for chrom, pos, t, m in zip(data[keep, 0], data[keep, 1], kept[keep], kept_meth[keep]):
            fh.write(f"{chrom}\t{pos}\t{t}\t{m}\n")
    return out


# -- the comparison ---------------------------------------------------------------------------------
def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dnmtools", default=os.environ.get("DNMTOOLS") or shutil.which("dnmtools") or DEFAULT_DNMTOOLS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--timing-only", action="store_true",
                        help="only the jobs' seconds and memory (and Jaccard): no EM polish, quarter reads or bedtools")
    args = parser.parse_args()
    byte_compile_package()
    if not Path(args.dnmtools).exists():
        sys.exit(f"no dnmtools at {args.dnmtools}: build it with {PEERS / 'build_dnmtools.sh'} (see its README)")
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-dnmtools-"))
    work.mkdir(parents=True, exist_ok=True)
    results, beds = {}, []
    floor, bare = floor_seconds(work, args.repeats), floor_seconds(work, args.repeats, BARE_FLOOR)
    print(f"floor: a process importing the stack and loading one cached numba kernel, doing no work: {floor:.2f} s; "
          f"importing numpy and scipy.optimize only: {bare:.2f} s", flush=True)
    for key in args.sets.split(","):
        title, files, fmt = SETS[key]
        here = work / key
        here.mkdir(exist_ok=True)
        for kind in ("hmr", "pmd"):
            (ours, our_bed, message), (theirs, their_bed, meth) = run_both(kind, files, fmt, here, args.repeats,
                                                                          args.dnmtools)
            polished, polished_bed = ({"rc": 1}, None) if args.timing_only else \
                run_ours(kind, files, fmt, here, 1, ("--polish-em", "1000"))[:2]
            results[key, kind] = dict(ours=ours, theirs=theirs, our_bed=our_bed if ours["rc"] == 0 else None,
                                      their_bed=their_bed, polished_bed=polished_bed if polished["rc"] == 0 else None,
                                      message=message, meth=meth)
            if ours["rc"] == 0:
                beds.append(our_bed)
            steps = (lambda run: ", ".join(f"{step} {sec:.2f}" for step, sec in run["steps"].items()))
            print(f"{title} {kind}: ours {ours['seconds']:.2f} s ({steps(ours)}) {message[:300]}; DNMTools "
                  f"{theirs['seconds']:.2f} s ({steps(theirs)}); ratio {ours['seconds'] / theirs['seconds']:.2f}; "
                  f"CPU s {ours['cpu']:.2f} / {theirs['cpu']:.2f}; "
                  f"our ingest + floor {ours['steps']['ingest'] + floor:.2f} s "
                  f"(bare {ours['steps']['ingest'] + bare:.2f} s)", flush=True)
    report(results, work)
    if args.timing_only:
        print(f"\nfiles in {work}")
        return
    if "msr22" in args.sets.split(","):
        robustness(work, args.dnmtools)
    print("\n" + "\n".join(bedtools_check(beds)))
    print(f"\nfiles in {work}")


def report(results: dict, work: Path) -> None:
    msr_hmr = results.get(("msr22", "hmr"))
    msr_pmd = work / "msr22" / "dnmtools-pmd.bed"
    for kind in ("hmr", "pmd"):
        print(f"\n### {kind.upper()}\n")
        print("| data set | Jaccard | Jaccard where DNMTools is right | ours: n, median bp, Mb, level, calls > 0.4 | "
              "DNMTools: n, median bp, Mb, level, calls > 0.4 | one pass vs EM (Jaccard) | seconds: ours / DNMTools "
              "| CPU s: ours / DNMTools | memory MiB: ours / DNMTools |")
        print("|---|---|---|---|---|---|---|---|---|")
        for key, (title, _, _) in SETS.items():
            if (key, kind) not in results:
                continue
            r = results[key, kind]
            cpgs = CpGs(r["meth"])
            ours, theirs = describe(r["our_bed"], cpgs), describe(r["their_bed"], cpgs)
            mine = read_bed(r["our_bed"]) if r["our_bed"] else np.zeros((0, 2), np.int64)
            reference = read_bed(r["their_bed"])
            right = ""
            if kind == "hmr" and key in ("msr22", "bsseq22") and msr_hmr:
                reference = read_bed(msr_hmr["their_bed"])  # DNMTools on the excerpt: where its calls are HMRs
                lo, hi = int(reference[0, 0]), int(reference[-1, 1])
                mine = clip(mine, lo, hi)
                pmds = read_bed(msr_pmd)
                right = f"{jaccard(away_from(mine, pmds), away_from(reference, pmds)):.3f}"
            plain = jaccard(mine, reference) if len(mine) else float("nan")
            agree = (f"{jaccard(read_bed(r['our_bed']), read_bed(r['polished_bed'])):.3f}"
                     if r["our_bed"] and r["polished_bed"] else "n/a")
            cell = (lambda d: f"{d['n']}, {d['median']:,.0f}, {d['Mb']:.2f}, {d['level']:.2f}, {d['high']}")
            our_cell = cell(ours) if r["our_bed"] else f"refused: {r['message'][:160]}"
            print(f"| {title} | {plain:.3f} | {right} | {our_cell} | {cell(theirs)} | {agree} | "
                  f"{r['ours']['seconds']:.2f} / {r['theirs']['seconds']:.2f} | "
                  f"{r['ours']['cpu']:.2f} / {r['theirs']['cpu']:.2f} | "
                  f"{r['ours']['memory_mib']:.0f} / {r['theirs']['memory_mib']:.0f} |")


def robustness(work: Path, dnmtools: str) -> None:
    """The MethylSeekR excerpt thinned to a quarter of its reads, both tools."""
    _, files, fmt = SETS["msr22"]
    here = work / "msr22-quarter"
    here.mkdir(exist_ok=True)
    thinned = [thin(files, fmt, here / "quarter.tab.gz")]
    print("\n### A quarter of the reads (MethylSeekR IMR90 chr22)\n")
    print("| job | ours (quarter) vs DNMTools (full) | the same where DNMTools is right | ours (quarter) vs ours (full) "
          "| DNMTools (quarter) vs DNMTools (full) | the same where DNMTools is right |")
    print("|---|---|---|---|---|---|")
    pmds = read_bed(work / "msr22" / "dnmtools-pmd.bed")  # DNMTools' HMRs are HMRs outside its PMDs (see above)
    for kind in ("hmr", "pmd"):
        _, ours, _ = run_ours(kind, thinned, fmt, here, 1)
        _, theirs_bed, _ = run_theirs(kind, thinned, here, 1, dnmtools)
        full_ours, full_theirs = read_bed(work / "msr22" / f"ours-{kind}.bed"), read_bed(work / "msr22" /
                                                                                       f"dnmtools-{kind}.bed")
        quarter = read_bed(ours) if ours.exists() else np.zeros((0, 2), np.int64)
        theirs = read_bed(theirs_bed)
        right = [f"{jaccard(away_from(a, pmds), away_from(full_theirs, pmds)):.3f}" if kind == "hmr" else ""
                 for a in (quarter, theirs)]
        print(f"| {kind} | {jaccard(quarter, full_theirs):.3f} | {right[0]} | {jaccard(quarter, full_ours):.3f} | "
              f"{jaccard(theirs, full_theirs):.3f} | {right[1]} |")


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
        lines.append(f"{bed.parent.name}/{bed.name}: sort {'ok' if sort.returncode == 0 else sort.stderr.strip()[:100]}; "
                     f"merge -s {len(merge.stdout.splitlines())} intervals; intersect -s {len(inter.stdout.splitlines())} "
                     f"of {n} found in themselves")
    return lines


if __name__ == "__main__":
    main()
