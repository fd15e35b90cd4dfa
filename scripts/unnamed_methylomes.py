"""`streambhmm hmr` and `pmd` on the real methylomes that compare_dnmtools.py does not name.

    python scripts/unnamed_methylomes.py [--workdir DIR] [--sets a,b] [--dnmtools PATH] [--polish]

Each set of ../shared/data/real is ingested as a user would (the format detected, or the
--columns its README calls for), one store per set, and `hmr` and `pmd` run on single
samples and, where a set has several, on two jointly, each command a new process. Printed per
call: the summary line's regions, median length and Mb, or the refusal's reason; from the
TSV, the highest mean level of any region in any sample and the regions without reads in
some sample (the rules allow none above 0.5 for HMRs, none at 0.7 or above for PMDs, and
none without reads); and whether the BED is in
`LC_ALL=C sort -k1,1 -k2,2n` order. These are the sets the rules were not tuned on
(docs/methods/hmr-pmd.md, *On methylomes no script names*).

Beside each single-sample call, DNMTools v1.5.1's (`dnmtools hmr` / `pmd`, default settings,
when --dnmtools, by default the build of ../shared/tools/peers/build_dnmtools.sh, exists) on
the same CpGs: the rows `ingest` reads (the same reader and options), sites under 2 bp after
the previous one folded into it as ../shared/tools/peers/convert.py folds them. Printed: its
calls' count, Mb and mean level (methylated over covered reads inside them), or its refusal,
with the seconds of its call (from its counts file, as ours are from the store: the inputs'
conversion and our ingest are left out of both), and the base-pair Jaccard of the two; for HMRs also where DNMTools is right (both sides away
from DNMTools' own PMD calls: in a methylome with PMDs its HMRs are PMD stretches, see
compare_dnmtools.py). DNMTools' calls are a reference, not the truth: its two-state models
call something on every input. The summary at the end: over the single-sample calls where
DNMTools' calls average below 0.4 (HMRs) or all of them (PMDs), the median Jaccard and how
many reach 0.6. With --polish each single-sample call is also run with --polish-em 1000 (EM
to convergence from the one-pass model): Jaccard between the two, and the summary again.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from compare_dnmtools import DEFAULT_DNMTOOLS, HIGH, away_from, jaccard_genome, read_beds
from streambhmm.io.bed import read_bed
from streambhmm.io.detect import detect_common_format
from streambhmm.io.formats import read_rows
from streambhmm.io.options import ReadOptions

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
REAL = SHARED / "data" / "real"

# set: (samples {name: (file under REAL, extra ingest options)}, calls [(kind, samples)])
SETS = {
    "methylPipe H1/IMR90 chr20": (
        {"H1": ("methylPipe_H1_IMR90_chr20/H1_chr20_CG_10k_tabix_out.txt.gz", []),
         "IMR90": ("methylPipe_H1_IMR90_chr20/IMR90_chr20_CG_10k_tabix_out.txt.gz", [])},
        [("hmr", "H1"), ("hmr", "IMR90"), ("hmr", "H1,IMR90"), ("pmd", "H1"), ("pmd", "IMR90")]),
    "methrix colon chr21-22": (
        {"C1": ("methrix_colon_chr21_22/C1.bedGraph.gz", []), "N1": ("methrix_colon_chr21_22/N1.bedGraph.gz", [])},
        [("hmr", "C1"), ("hmr", "C1,N1"), ("pmd", "C1")]),
    "DMCHMM blood chr8": (
        {"BC": ("DMCHMM_blood_chr8/blk.BCU1568_BC_BS_1.gz", ["--columns", "chrom=1,pos=2,meth=5,unmeth=6"]),
         "TC": ("DMCHMM_blood_chr8/blk.BCU173_TC_BS_1.gz", ["--columns", "chrom=1,pos=2,meth=5,unmeth=6"])},
        [("hmr", "BC"), ("hmr", "BC,TC"), ("pmd", "BC")]),
    "BiSeq APL RRBS": (
        {"APL1": ("BiSeq_rrbs_APL/APL1_APL.rrbs.tsv.gz", []),
         "APL10961": ("BiSeq_rrbs_APL/APL10961_control.rrbs.tsv.gz", [])},
        [("hmr", "APL1"), ("hmr", "APL10961"), ("hmr", "APL1,APL10961"), ("pmd", "APL1")]),
    "DSS SLE RRBS": (
        {"S1": ("DSS_RRBS_SLE/Sample1.tsv.gz", []), "S2": ("DSS_RRBS_SLE/Sample2.tsv.gz", [])},
        [("hmr", "S1"), ("hmr", "S1,S2"), ("pmd", "S1")]),
    "M3D H1/K562 RRBS": (
        {"H1": ("M3D_rrbsDemo_H1_K562/H1-hESC1.chr1.tsv.gz", []),
         "K562": ("M3D_rrbsDemo_H1_K562/K562-1.chr1.tsv.gz", [])},
        [("hmr", "H1"), ("hmr", "K562"), ("hmr", "H1,K562"), ("pmd", "H1"), ("pmd", "K562")]),
    "DMRcaller A. thaliana Chr3": (
        {"WT": ("DMRcaller_arabidopsis_chr3/WT.Chr3_1-1Mb.CX_report.txt.gz", []),
         "met1": ("DMRcaller_arabidopsis_chr3/met1-3.Chr3_1-1Mb.CX_report.txt.gz", [])},
        [("hmr", "WT"), ("hmr", "met1"), ("pmd", "WT"), ("pmd", "met1")]),
    "methimpute A. thaliana": (
        {"col": ("methimpute_arabidopsis/arabidopsis_bsseeker.txt.gz", [])},
        [("hmr", "col"), ("pmd", "col")]),
    "MethCP A. thaliana H2A.Z": (
        {"control1": ("MethCP_arabidopsis/twogroup_H2AZ/control1.txt.gz",
                      ["--columns", "chrom=1,pos=2,meth=3,total=4"]),
         "treatment1": ("MethCP_arabidopsis/twogroup_H2AZ/treatment1.txt.gz",
                        ["--columns", "chrom=1,pos=2,meth=3,total=4"])},
        [("hmr", "control1"), ("hmr", "treatment1"), ("hmr", "control1,treatment1"), ("pmd", "control1")]),
    "MethCP A. thaliana time course": (
        {"DS_r1": ("MethCP_arabidopsis/timecourse_GSE94712/GSM2481288_mC_Col-0_DS_r1.tsv.gz",
                   ["--columns", "chrom=1,pos=2,strand=3,meth=4,total=5", "--zero-based"])},
        [("hmr", "DS_r1"), ("pmd", "DS_r1")]),
    "ALLCools mouse cells": (
        {"Cell01": ("ALLCools_allc_mm10/Cell01.allc.tsv.gz", []),
         "Cell02": ("ALLCools_allc_mm10/Cell02.allc.tsv.gz", [])},
        [("hmr", "Cell01"), ("hmr", "Cell01,Cell02"), ("pmd", "Cell01")]),
    "bsseq nanopore (modkit, modbam2bed)": (
        {"HG002": ("bsseq_extdata/modkit/chr21.chr22.HG002.top1000.bed.gz", []),
         "ctr1": ("bsseq_extdata/modbam2bed/ctr1.chr10.chr11.bed.gz", [])},
        [("hmr", "HG002"), ("hmr", "ctr1"), ("pmd", "HG002")]),
    "methylKit RRBS chr21": (
        {"test1": ("methylKit_extdata/test1.myCpG.txt.gz", []),
         "control1": ("methylKit_extdata/control1.myCpG.txt.gz", [])},
        [("hmr", "test1"), ("hmr", "test1,control1"), ("pmd", "test1")]),
    "biscuiteer MCF7 chr11p15": (
        {"MCF7": ("biscuiteer_MCF7_chr11p15/MCF7_Cunha_chr11p15.bed.gz", [])},
        [("hmr", "MCF7"), ("pmd", "MCF7")]),
    "modkit lung chr20": (
        {"lung": ("modkit_lung_chr20/lung_00733-m_adjacent-normal_5mc-5hmc_chr20_cpg_pileup.bed.gz", [])},
        [("hmr", "lung"), ("pmd", "lung")]),
}

SUMMARY = re.compile(r": ([\d,]+) (?:HMRs?|PMDs?|regions? \(called as HMRs: see the warning\)), median ([\d,]+) bp, "
                     r"([\d.]+) Mb")


def run(args: list) -> tuple[int, str, float]:
    start = time.perf_counter()
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr, time.perf_counter() - start


def table_facts(tsv: Path) -> tuple[float, int]:
    """(the highest mean level of any region in any sample, regions with NA in some sample)."""
    with open(tsv) as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    levels = [[v for k, v in row.items() if k.startswith("level_")] for row in rows]
    finite = [float(v) for row in levels for v in row if v != "NA"]
    return max(finite, default=float("nan")), sum("NA" in row for row in levels)


def bed_sorted(bed: Path) -> bool:
    rows = [(item.chrom, item.start) for item in read_bed(bed)]
    return rows == sorted(rows)


def read_options(extra: list[str]) -> ReadOptions:
    """The ReadOptions of a sample's ingest options (--columns, --zero-based)."""
    columns = ReadOptions.parse_columns(extra[extra.index("--columns") + 1]) if "--columns" in extra else None
    return ReadOptions(columns=columns, zero_based="--zero-based" in extra)


def cpg_counts(path: Path, extra: list[str]) -> dict[str, tuple]:
    """A sample's CpG rows as `ingest` reads them: per chromosome, sorted 0-based positions,
    methylated and covered reads, a site under 2 bp after the previous one folded into it."""
    options = read_options(extra)
    fmt = detect_common_format([path], "auto", options)
    parts = {}
    for rows in read_rows(path, fmt, options=options):
        keep = rows.coverage > 0
        parts.setdefault(rows.chrom, []).append((rows.pos0[keep], rows.methylated[keep], rows.coverage[keep]))
    out = {}
    for chrom, chunks in parts.items():
        pos, mc, cov = (np.concatenate([c[i] for c in chunks]) for i in range(3))
        order = np.argsort(pos, kind="stable")
        pos, mc, cov = pos[order], mc[order], cov[order]
        group = np.cumsum(np.r_[True, np.diff(pos) >= 2]) - 1
        first = np.flatnonzero(np.r_[True, np.diff(group) > 0])
        out[chrom] = (pos[first], np.bincount(group, mc), np.bincount(group, cov))
    return out


def write_dnmtools_counts(cpgs: dict, out: Path) -> None:
    """DNMTools' counts format (chrom pos0 + CpG level reads), chromosomes in byte order."""
    with open(out, "w") as f:
        for chrom in sorted(cpgs):
            pos, mc, cov = cpgs[chrom]
            f.writelines(f"{chrom}\t{p}\t+\tCpG\t{m / c:.6g}\t{int(c)}\n" for p, m, c in zip(pos.tolist(), mc, cov))


def pooled_level(cpgs: dict, beds: dict) -> float:
    """Methylated over covered reads of the CpGs inside a BED's intervals."""
    mc = cov = 0.0
    for chrom, intervals in beds.items():
        if chrom not in cpgs or not len(intervals):
            continue
        pos, m, c = cpgs[chrom]
        cum_m, cum_c = np.r_[0, np.cumsum(m)], np.r_[0, np.cumsum(c)]
        lo, hi = np.searchsorted(pos, intervals[:, 0]), np.searchsorted(pos, intervals[:, 1])
        mc, cov = mc + (cum_m[hi] - cum_m[lo]).sum(), cov + (cum_c[hi] - cum_c[lo]).sum()
    return mc / cov if cov else float("nan")


def outside(beds: dict, domains: dict) -> dict:
    """Per chromosome, the intervals that touch none of ``domains``."""
    empty = np.zeros((0, 2), np.int64)
    return {chrom: away_from(iv, domains.get(chrom, empty)) for chrom, iv in beds.items()}


class DNMTools:
    """DNMTools' calls on a sample's CpGs, made once per (sample, kind) in ``work``."""

    def __init__(self, binary: str, work: Path):
        self.binary, self.work, self.cpgs, self.calls = binary, work, {}, {}
        self.agreement = {"hmr": [], "pmd": []}  # Jaccard (HMRs: where it is right) where its calls average below HIGH
        self.only_theirs = {"hmr": [], "pmd": []}  # the samples where we refused and it called
        self.polished_agreement = {"hmr": [], "pmd": []}  # the same calls' after EM (--polish)

    def call(self, key: str, path: Path, extra: list[str], kind: str) -> tuple[Path | None, str, float]:
        """(its BED, or None and its message; the seconds of its call, from its counts file)."""
        if (key, kind) not in self.calls:
            meth = self.work / f"{key}.meth"
            if key not in self.cpgs:
                self.cpgs[key] = cpg_counts(path, extra)
                write_dnmtools_counts(self.cpgs[key], meth)
            bed = self.work / f"{key}.dnmtools-{kind}.bed"
            code, output, seconds = run([self.binary, kind, "-o", bed, meth])
            message = (output.strip().splitlines() or [f"exit {code}, no BED written"])[-1]
            self.calls[key, kind] = (bed, "", seconds) if code == 0 and bed.exists() else (None, message, seconds)
        return self.calls[key, kind]

    def columns(self, key: str, path: Path, extra: list[str], kind: str, ours: Path | None,
                polished: Path | None = None) -> str:
        """Its calls (count, Mb, level) or refusal | Jaccard | Jaccard where it is right (HMRs);
        the agreement of ``polished`` (our calls after EM) kept for the summary."""
        bed, message, seconds = self.call(key, path, extra, kind)
        if bed is None:
            return f"{message.replace('|', '/')[:120]} ({seconds:.1f} s) | | "
        theirs = read_beds(bed)
        n = sum(1 for line in bed.read_text().splitlines() if line.strip())
        mb = sum(int((iv[:, 1] - iv[:, 0]).sum()) for iv in theirs.values()) / 1e6
        level = pooled_level(self.cpgs[key], theirs)
        cell = f"{n:,}, {mb:.2f}, {level:.2f}, {seconds:.1f} s"
        if ours is None:
            if n:
                self.only_theirs[kind].append(key)
            return f"{cell} | | "
        mine = read_beds(ours)
        plain = jaccard_genome(mine, theirs)
        # where it is right: HMRs away from its own PMD calls (PMDs: all of them, nothing to leave out)
        pmd_bed = self.call(key, path, extra, "pmd")[0] if kind == "hmr" else None
        pmds = read_beds(pmd_bed) if pmd_bed is not None else {}
        theirs_right = outside(theirs, pmds)
        right = jaccard_genome(outside(mine, pmds), theirs_right)
        if level < HIGH or kind == "pmd":
            self.agreement[kind].append(right)
            if polished is not None:
                self.polished_agreement[kind].append(jaccard_genome(outside(read_beds(polished), pmds), theirs_right))
        return f"{cell} | {plain:.3f} | {'' if kind == 'pmd' else f'{right:.3f}'}"

    def summary(self) -> str:
        lines = []
        for kind, values in self.agreement.items():
            if values:
                lines.append(f"{kind}: {len(values)} single-sample calls beside DNMTools' with calls"
                             f"{f' averaging below {HIGH}' if kind == 'hmr' else ''}; Jaccard"
                             f"{' where DNMTools is right' if kind == 'hmr' else ''}: median {np.median(values):.3f}, "
                             f"{sum(v >= 0.6 for v in values)} of them at 0.6 or more, range "
                             f"{min(values):.3f}-{max(values):.3f}; refused by us where DNMTools called: "
                             f"{len(self.only_theirs[kind])}")
            after = self.polished_agreement[kind]
            if after:
                lines.append(f"    after EM (--polish-em 1000) on the same calls: median {np.median(after):.3f}, "
                             f"{sum(v >= 0.6 for v in after)} at 0.6 or more, range {min(after):.3f}-{max(after):.3f}")
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--sets", default=None, help="comma-separated names (as printed; default: all)")
    parser.add_argument("--dnmtools", default=DEFAULT_DNMTOOLS, help="DNMTools' binary (none there: no columns)")
    parser.add_argument("--polish", action="store_true",
                        help="also each single-sample call with --polish-em 1000 (EM to convergence): its "
                             "Jaccard with the one-pass calls, and with DNMTools'")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-unnamed-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = [s.strip() for s in args.sets.split(",")] if args.sets else list(SETS)
    peer = DNMTools(args.dnmtools, work) if Path(args.dnmtools).exists() else None
    one_pass_vs_em = {"hmr": [], "pmd": []}
    print("| set | call | samples | exit | s | regions, median bp, Mb / refusal | highest mean level | "
          "regions without reads in a sample | BED order | DNMTools: n, Mb, level, s / refusal | Jaccard | "
          "Jaccard where DNMTools is right |" + (" one pass vs EM (Jaccard) |" if args.polish else ""))
    print("|---" * (12 + args.polish) + "|")
    for k, name in enumerate(chosen):
        samples, calls = SETS[name]
        store = work / f"set{k}.zarr"
        for sample, (path, options) in samples.items():
            code, output, _ = run(["streambhmm", "ingest", REAL / path, "--sample", sample, "--store", store, "-q",
                                   *options])
            if code:
                print(f"| {name} | ingest | {sample} | {code} | | {output.strip()[-300:]} | | | | | | |", flush=True)
        for kind, which in calls:
            bed = work / f"set{k}.{kind}.{which.replace(',', '+')}.bed"
            code, output, seconds = run(["streambhmm", kind, store, "--samples", which, "-o", bed, "-q"])
            found = SUMMARY.search(output)
            if code == 0 and found:
                level, missing = table_facts(bed.with_suffix(".tsv"))
                outcome = f"{found.group(1)}, {found.group(2)}, {found.group(3)}"
                facts = f"{level:.2f} | {missing} | {'sorted' if bed_sorted(bed) else 'NOT sorted'}"
            else:
                reason = output.strip().splitlines()[-1] if output.strip() else ""
                outcome, facts = reason.replace("|", "/")[:300], " | | "
            polished, agree = None, ""
            if args.polish and code == 0 and which in samples:
                polished = bed.with_name(bed.stem + ".em.bed")
                polish_code, _, _ = run(["streambhmm", kind, store, "--samples", which, "-o", polished, "-q",
                                         "--polish-em", "1000"])
                polished = polished if polish_code == 0 else None
                if polished:
                    one_pass_vs_em[kind].append(jaccard_genome(read_beds(bed), read_beds(polished)))
                agree = f" {one_pass_vs_em[kind][-1]:.3f} |" if polished else " refused |"
            theirs = " | | "
            if peer is not None and which in samples:
                path, options = samples[which]
                theirs = peer.columns(f"set{k}.{which}", REAL / path, options, kind, bed if code == 0 else None,
                                      polished)
            print(f"| {name} | {kind} | {which} | {code} | {seconds:.1f} | {outcome} | {facts} | {theirs} |"
                  + (agree or (" |" if args.polish else "")), flush=True)
    if peer is not None:
        print("\n" + peer.summary())
    for kind, values in one_pass_vs_em.items():
        if values:
            print(f"{kind}, one pass vs EM on {len(values)} single-sample calls: median Jaccard "
                  f"{np.median(values):.3f}, {sum(v >= 0.9 for v in values)} at 0.9 or more, range "
                  f"{min(values):.3f}-{max(values):.3f}")
    print(f"\nfiles in {work}")


if __name__ == "__main__":
    main()
