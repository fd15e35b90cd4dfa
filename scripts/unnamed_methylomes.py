"""`streambhmm hmr` and `pmd` on the real methylomes that compare_dnmtools.py does not name.

    python scripts/unnamed_methylomes.py [--workdir DIR] [--sets a,b]

Each set of ../shared/data/real is ingested as a user would (the format detected, or the
--columns its README calls for), one store per set, and `hmr` and `pmd` run on single
samples and, where a set has several, on two jointly, each command a new process. Printed per
call: the summary line's regions, median length and Mb, or the refusal's reason; from the
TSV, the highest mean level of any region in any sample and the regions without reads in
some sample (the rules allow none above 0.5 for HMRs, none at 0.7 or above or at 0.2 or
below in every sample for PMDs, and none without reads); and whether the BED is in
`LC_ALL=C sort -k1,1 -k2,2n` order. Nothing here is compared with a peer: these are the
sets the rules were not tuned on (docs/guide/hmr-pmd.md, *On methylomes no script names*).
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import tempfile
import time
from pathlib import Path

from streambhmm.io.bed import read_bed

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

SUMMARY = re.compile(r": ([\d,]+) (?:HMRs|PMDs), median ([\d,]+) bp, ([\d.]+) Mb")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--sets", default=None, help="comma-separated names (as printed; default: all)")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-unnamed-"))
    work.mkdir(parents=True, exist_ok=True)
    chosen = [s.strip() for s in args.sets.split(",")] if args.sets else list(SETS)
    print("| set | call | samples | exit | s | regions, median bp, Mb / refusal | highest mean level | "
          "regions without reads in a sample | BED order |")
    print("|---|---|---|---|---|---|---|---|---|")
    for k, name in enumerate(chosen):
        samples, calls = SETS[name]
        store = work / f"set{k}.zarr"
        for sample, (path, options) in samples.items():
            code, output, _ = run(["streambhmm", "ingest", REAL / path, "--sample", sample, "--store", store, "-q",
                                   *options])
            if code:
                print(f"| {name} | ingest | {sample} | {code} | | {output.strip()[-300:]} | | | |", flush=True)
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
            print(f"| {name} | {kind} | {which} | {code} | {seconds:.1f} | {outcome} | {facts} |", flush=True)
    print(f"\nfiles in {work}")


if __name__ == "__main__":
    main()
