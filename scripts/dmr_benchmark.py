"""`streambhmm dmr` beside DSS (Debian's r-bioc-dss: DMLtest with smoothing, then callDMR
with its documented defaults), on simulated methylomes with known DMRs and on the real sets
(issue 27's acceptance).

    python scripts/dmr_benchmark.py --workdir DIR [--sets sim,null,...] [--rerun-dss] [--skip-dss]
        [--skip-dss-above N] [--no-curve] [--dmr-options="--em-iter 1000"]

Sets:
    sim          2 groups x 3 replicates, 2 chromosomes of 40 Mb (about 1.03 M CpGs;
                 streambhmm.testing.simulate_groups: CpG islands and sparse background, shores,
                 enhancer-like HMRs and PMDs shared by all samples, 250 planted DMRs per
                 chromosome, 200 bp - 5 kb, differences 0.1-0.6, and a 400 kb PMD of the second
                 group only per chromosome; beta-binomial replicates, coverage 5-30)
    null         the same without any planted difference (every call is false)
    unbalanced, one
                 the sim design with 2 vs 4 and 1 vs 3 samples
    scale4, scale16, scale100
                 the sim design at 4, 16 and 100 samples (2 groups): seconds per sample
    arabidopsis-CG, arabidopsis-CHG   DMRcaller's WT vs met1-3, Chr3:1-1,000,000 (1 vs 1)
    h1-imr90     dmrseq's H1 vs IMR90 chr21 (2 vs 2)
    biseq        BiSeq's APL vs control RRBS (5 vs 5)
    sle          DSS's RRBS of 16 samples, HC vs SLE (the design's `case`, 8 vs 8)
    m3d          M3D's H1 vs K562 RRBS chr1 (2 vs 2)
    dss-example  DSS's example data (its package's extdata: 2 vs 2, 20,000 CpGs of chr18)
    h1-null, imr90-null, mixed-null
                 real nulls: dmrseq's technical replicates against each other (H1 r1 vs r2, IMR90
                 r1 vs r2, H1 r1 + IMR90 r1 vs H1 r2 + IMR90 r2): every call is false

Each tool runs as a user runs it, every step a new process timed by
../shared/tools/peers/memtime.py (wall seconds, peak memory of the whole process tree):
streambhmm `ingest` (one per sample, from the set's files) then `dmr`; DSS reads its text
format (converted from the same files, untimed), makeBSseqData, DMLtest(smoothing=TRUE),
callDMR (scripts/dss_dmr.R). DSS's outputs are kept in DIR/SET/dss and reused unless
--rerun-dss (it runs for many minutes on a million CpGs).

Reported on simulations: region precision (a call overlapping a true difference) and recall
(a true difference overlapped by a call), base-pair F1, the observed FDR (1 - precision)
against the nominal one: ours at --fdr 0.05 and at DSS's nominal FDR (the Benjamini-Hochberg
FDR of DMLtest at callDMR's p-value threshold, 1e-5); DSS with delta 0 (its default) and
0.1. On the real sets: counts, median lengths, the share of each tool's calls that overlap
the other's, base-pair Jaccard, time and memory. The machine is shared: ratios from one run.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare_dnmtools import merged  # noqa: E402 - the scripts' interval helpers

SCRIPTS = Path(__file__).resolve().parent
SHARED = next((p / "shared" for p in SCRIPTS.parents if (p / "shared" / "data").is_dir()), Path("/work/shared"))
REAL = SHARED / "data" / "real"
PEERS = SHARED / "tools" / "peers"
DSS_SCRIPT = SCRIPTS / "dss_dmr.R"
NOMINAL = (0.01, 0.05, 0.1, 0.2)
SIM_LENGTH, SIM_CHROMOSOMES, SIM_DMRS = 40_000_000, 2, 250


# -- the sets ---------------------------------------------------------------------------------
def simulated(name: str) -> dict:
    """Replicates per group, DMRs per chromosome and seed of a simulated set."""
    if name == "sim":
        return {"replicates": (3, 3), "dmrs": SIM_DMRS, "seed": 6}
    if name == "null":
        return {"replicates": (3, 3), "dmrs": 0, "seed": 106}
    if name == "unbalanced":
        return {"replicates": (2, 4), "dmrs": SIM_DMRS, "seed": 7}
    if name == "one":
        return {"replicates": (1, 3), "dmrs": SIM_DMRS, "seed": 8}
    n = int(name.removeprefix("scale"))
    return {"replicates": (n // 2, n - n // 2), "dmrs": SIM_DMRS, "seed": 1000 + n}


def real_sets() -> dict:
    """{name: (samples [(sample, group, file, ingest options)], DSS converter)}."""
    ara = REAL / "DMRcaller_arabidopsis_chr3"
    h1 = REAL / "dmrseq_BS.chr21_H1_IMR90"
    biseq = REAL / "BiSeq_rrbs_APL"
    sle = REAL / "DSS_RRBS_SLE"
    m3d = REAL / "M3D_rrbsDemo_H1_K562"
    example = REAL / "DSS_extdata"
    sets = {}
    for context in ("CG", "CHG"):
        sets[f"arabidopsis-{context}"] = (
            [("WT", "WT", ara / "WT.Chr3_1-1Mb.CX_report.txt.gz", ["--context", context]),
             ("met1", "met1", ara / "met1-3.Chr3_1-1Mb.CX_report.txt.gz", ["--context", context])],
            ("cx", context))
    sets["h1-imr90"] = ([(f"{c}_{r}", c, h1 / f"{c}_{r}.chr21.hg18.tsv.gz", []) for c in ("H1", "IMR90")
                         for r in ("r1", "r2")], ("tsv", None))
    # technical replicates against each other: no true difference (every call is false)
    sets["h1-null"] = ([(f"H1_{r}", r, h1 / f"H1_{r}.chr21.hg18.tsv.gz", []) for r in ("r1", "r2")], ("tsv", None))
    sets["imr90-null"] = ([(f"IMR90_{r}", r, h1 / f"IMR90_{r}.chr21.hg18.tsv.gz", []) for r in ("r1", "r2")],
                          ("tsv", None))
    sets["mixed-null"] = ([(f"{c}_{r}", r, h1 / f"{c}_{r}.chr21.hg18.tsv.gz", []) for r in ("r1", "r2")
                           for c in ("H1", "IMR90")], ("tsv", None))
    sets["biseq"] = ([(p.name.split("_")[0], p.name.split("_")[1].split(".")[0], p, [])
                      for g in ("APL", "control") for p in sorted(biseq.glob(f"*_{g}.rrbs.tsv.gz"))], ("tsv", None))
    design = list(csv.DictReader(open(sle / "design.tsv"), delimiter="\t")) if sle.exists() else []
    sets["sle"] = ([(row["sample"], row["case"], sle / row["file"], []) for g in ("HC", "SLE") for row in design
                    if row["case"] == g], ("tsv", None))
    sets["m3d"] = ([(name, name.rstrip("0123456789").rstrip("-"), m3d / f"{name}.chr1.tsv.gz", [])
                    for name in ("H1-hESC1", "H1-hESC2", "K562-1", "K562-2")], ("tsv", None))
    sets["dss-example"] = ([(f"{c}_{r}", c, example / f"{c}_{r}.txt.gz", []) for c in ("cond1", "cond2")
                            for r in (1, 2)], ("dss", None))
    return sets


def dss_file(source: Path, target: Path, kind: tuple) -> None:
    """A real file in DSS's format (chr pos N X, 1-based; rows without reads left out)."""
    fmt, context = kind
    with gzip.open(source, "rt") as fh, open(target, "w") as out:
        out.write("chr\tpos\tN\tX\n")
        for line in fh:
            f = line.split("\t")
            if fmt == "dss":  # DSS's own format already
                if f[0] != "chr" and int(f[2]) > 0:
                    out.write(line)
                continue
            if fmt == "cx":
                if f[5] != context:
                    continue
                n, x = int(f[3]) + int(f[4]), int(f[3])
                chrom, pos = f[0], f[1]
            else:
                if f[0] == "chrom":
                    continue
                chrom, pos, x, n = f[0], f[1], int(f[3]), int(f[4])
            if n > 0:
                out.write(f"{chrom}\t{pos}\t{n}\t{x}\n")


def prepare(name: str, work: Path) -> list:
    """Write the set's files into ``work``: [(sample, group, our file, our ingest options, DSS's file)]."""
    sheet = work / "samples.json"
    if sheet.exists():
        return json.loads(sheet.read_text())
    files = work / "files"
    files.mkdir(parents=True, exist_ok=True)
    if name in REAL_SETS:
        rows, kind = REAL_SETS[name]
        samples = []
        for sample, group, path, options in rows:
            target = files / f"{sample}.dss.txt"
            dss_file(path, target, kind)
            samples.append((sample, group, str(path), options, str(target)))
    else:
        from streambhmm.testing import simulate_groups

        spec = simulated(name)
        sim = simulate_groups(SIM_LENGTH, SIM_CHROMOSOMES, spec["replicates"], spec["dmrs"], domain=spec["dmrs"] > 0,
                              seed=spec["seed"])
        paths = sim.write_dss(files)
        samples = [(s, g, str(p), [], str(p)) for s, g, p in zip(sim.samples, sim.groups, paths)]
        with open(work / "truth.tsv", "w") as fh:
            fh.write("chrom\tstart\tend\tdifference\tkind\n")
            fh.writelines("\t".join(map(str, t)) + "\n" for t in sim.truth)
        (work / "cpgs.txt").write_text(str(sim.n_cpgs))
    with open(work / "sheet.tsv", "w") as fh:
        fh.write("sample\tgroup\tfile\n")
        fh.writelines(f"{s}\t{g}\t{dss}\n" for s, g, _, _, dss in samples)
    sheet.write_text(json.dumps(samples))
    return samples


# -- running ----------------------------------------------------------------------------------
def timed(label: str, cmd: list, log: Path) -> dict:
    """Run ``cmd`` under memtime.py; its record (stderr kept in LOG.stderr)."""
    done = subprocess.run([sys.executable, str(PEERS / "memtime.py"), "--label", label, "--log", str(log), "--",
                           *map(str, cmd)], capture_output=True, text=True)
    record = json.loads(log.read_text().splitlines()[-1])
    record["stdout"], record["stderr"] = done.stdout, done.stderr
    if record["rc"]:
        print(f"{label} failed: {done.stderr[-2000:]}", file=sys.stderr)
    return record


def run_ours(work: Path, samples: list, extra=()) -> dict:
    """Ingest each sample, then `dmr`: seconds and peak memory of each step."""
    out = work / "ours"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    log, store = out / "memtime.jsonl", out / "counts.zarr"
    ingests = [timed(f"ingest {s}", ["streambhmm", "ingest", path, "--sample", s, "--store", store, "-q", *options],
                     log) for s, _, path, options, _ in samples]
    with open(out / "sheet.tsv", "w") as fh:
        fh.write("sample\tgroup\n")
        fh.writelines(f"{s}\t{g}\n" for s, g, *_ in samples)
    call = timed("dmr", ["streambhmm", "dmr", store, "--groups", out / "sheet.tsv", "--output", out / "dmr.bed",
                         *extra], log)
    (out / "dmr.stdout").write_text(call["stdout"] + call["stderr"])
    if call["rc"] or any(r["rc"] for r in ingests):
        raise SystemExit(f"streambhmm failed on {work.name}: no row is reported (see {out})")
    return {"ingest_s": sum(r["wall_s"] for r in ingests), "dmr_s": call["wall_s"],
            "seconds": sum(r["wall_s"] for r in ingests) + call["wall_s"], "dmr_cpu_s": call["user_s"] + call["sys_s"],
            "memory_mib": max(r["peak_tree_rss_mib"] for r in ingests + [call]), "rc": call["rc"],
            "dir": out, "stdout": call["stdout"]}


def run_dss(work: Path, rerun: bool) -> dict | None:
    """DSS on the set (reused from an earlier run unless ``rerun``)."""
    out = work / "dss"
    record = out / "memtime.jsonl"
    if rerun or not (out / "dmr.tsv").exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        timed("dss", ["Rscript", DSS_SCRIPT, work / "sheet.tsv", out], record)
    if not (out / "dmr.tsv").exists():
        return None
    last = json.loads(record.read_text().splitlines()[-1])
    steps = {row["step"]: float(row["seconds"]) for row in csv.DictReader(open(out / "seconds.tsv"), delimiter="\t")}
    return {"seconds": last["wall_s"], "memory_mib": last["peak_tree_rss_mib"], "steps": steps, "dir": out}


# -- regions ----------------------------------------------------------------------------------
def ours_calls(directory: Path, fdr: float | None = None) -> list:
    """(chrom, start, end, kind) of our calls (focal and domains), those with q <= ``fdr`` if given."""
    calls = []
    for name, kind in (("dmr.tsv", "focal"), ("dmr.domains.tsv", "domain")):
        for row in csv.DictReader(open(directory / name), delimiter="\t"):
            if fdr is None or float(row["qvalue"]) <= fdr:
                calls.append((row["chrom"], int(row["start"]), int(row["end"]), kind))
    return calls


def dss_calls(path: Path) -> list:
    """(chrom, start, end, "focal") of DSS's calls (1-based CpG positions: to 0-based half-open)."""
    return [(row["chr"], int(row["start"]) - 1, int(row["end"]), "focal")
            for row in csv.DictReader(open(path), delimiter="\t")]


def dss_nominal(directory: Path, threshold: float = 1e-5) -> float:
    """DMLtest's Benjamini-Hochberg FDR at callDMR's p-value threshold."""
    worst = 0.0
    with gzip.open(directory / "dml.tsv.gz", "rt") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["pval"] not in ("", "NA") and float(row["pval"]) <= threshold:
                worst = max(worst, float(row["fdr"]))
    return worst


def read_truth(path: Path) -> list:
    return [(row["chrom"], int(row["start"]), int(row["end"]), row["kind"], float(row["difference"]))
            for row in csv.DictReader(open(path), delimiter="\t")]


def by_chrom(intervals: list) -> dict:
    out = {}
    for chrom, start, end, *_ in intervals:
        out.setdefault(chrom, []).append((start, end))
    return {c: np.array(sorted(v), np.int64) for c, v in out.items()}


def overlapping(a: list, b: list) -> np.ndarray:
    """Per interval of ``a``, whether it overlaps one of ``b``."""
    index = by_chrom(b)
    out = np.zeros(len(a), bool)
    for k, (chrom, start, end, *_) in enumerate(a):
        iv = index.get(chrom)
        if iv is not None and len(iv):
            out[k] = bool(((iv[:, 0] < end) & (iv[:, 1] > start)).any())
    return out


def bases(iv: dict) -> int:
    return int(sum((merged(v)[:, 1] - merged(v)[:, 0]).sum() for v in iv.values()))


def shared_bases(a: dict, b: dict) -> int:
    total = 0
    for chrom in set(a) & set(b):
        x, y = merged(a[chrom]), merged(b[chrom])
        for s, e in x:
            total += int(np.clip(np.minimum(y[:, 1], e) - np.maximum(y[:, 0], s), 0, None).sum())
    return total


def scores(calls: list, truth: list) -> dict:
    """Region precision and recall, base-pair F1, observed FDR."""
    hit = overlapping(calls, truth)
    found = overlapping(truth, calls)
    a, t = by_chrom(calls), by_chrom(truth)
    inter, called, true = shared_bases(a, t), bases(a), bases(t)
    bp_precision, bp_recall = inter / max(called, 1), inter / max(true, 1)
    precision = float(hit.mean()) if len(calls) else float("nan")
    return {"n": len(calls), "precision": precision, "recall": float(found.mean()) if len(truth) else float("nan"),
            "bp_f1": 2 * bp_precision * bp_recall / max(bp_precision + bp_recall, 1e-12),
            "observed_fdr": 1 - precision if len(calls) else 0.0}


def agreement(ours: list, theirs: list) -> dict:
    a, b = by_chrom(ours), by_chrom(theirs)
    inter = shared_bases(a, b)
    union = bases(a) + bases(b) - inter
    return {"ours_in_dss": float(overlapping(ours, theirs).mean()) if ours else float("nan"),
            "dss_in_ours": float(overlapping(theirs, ours).mean()) if theirs else float("nan"),
            "jaccard": inter / union if union else float("nan")}


def median_length(calls: list) -> float:
    return float(np.median([e - s for _, s, e, *_ in calls])) if calls else 0.0


# -- the tables -------------------------------------------------------------------------------
def fmt(value, digits=3) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and not np.isfinite(value)):
        return ""
    return f"{value:,.{digits}f}" if isinstance(value, float) else f"{value:,}"


def simulation_rows(name: str, work: Path, ours: dict, dss: dict | None) -> list:
    truth = read_truth(work / "truth.tsv")
    rows = []
    nominal_dss = dss_nominal(dss["dir"]) if dss else float("nan")
    all_ours = ours_calls(ours["dir"]) if not ours["rc"] else []
    levels = sorted(set(NOMINAL) | ({round(nominal_dss, 4)} if dss and nominal_dss > 0 else set()))
    for alpha in levels if ours.get("all_dir") else [0.05]:
        calls = all_ours if alpha == 0.05 else ours_calls(ours["all_dir"], alpha)  # 0.05: the default run itself
        row = {"tool": "streambhmm dmr", "setting": f"--fdr {alpha:g}", "nominal": alpha, **scores(calls, truth)}
        if alpha == 0.05:
            row.update(seconds=ours["seconds"], memory=ours["memory_mib"], focal=sum(c[3] == "focal" for c in calls),
                       domains=sum(c[3] == "domain" for c in calls))
        rows.append(row)
    if dss:
        for setting, file in (("callDMR defaults (delta 0)", "dmr.tsv"), ("callDMR delta 0.1", "dmr_delta0.1.tsv")):
            calls = dss_calls(dss["dir"] / file)
            rows.append({"tool": "DSS", "setting": setting, "nominal": nominal_dss, **scores(calls, truth),
                         "seconds": dss["seconds"], "memory": dss["memory_mib"]})
    return rows


def print_simulation(name: str, rows: list, work: Path) -> None:
    cpgs = (work / "cpgs.txt").read_text() if (work / "cpgs.txt").exists() else "?"
    print(f"\n{name}: {int(cpgs):,} CpGs\n")
    print("| tool | setting | nominal FDR | calls | region precision | region recall | bp F1 | observed FDR | "
          "seconds | peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tool']} | {r['setting']} | {fmt(r['nominal'], 4)} | {r['n']:,} | {fmt(r['precision'])} | "
              f"{fmt(r['recall'])} | {fmt(r['bp_f1'])} | {fmt(r['observed_fdr'])} | {fmt(r.get('seconds'), 1)} | "
              f"{fmt(r.get('memory'), 0)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--sets", default="sim,null,arabidopsis-CG,arabidopsis-CHG,h1-imr90,biseq,sle,m3d")
    parser.add_argument("--rerun-dss", action="store_true")
    parser.add_argument("--skip-dss-above", type=int, default=16, metavar="N",
                        help="DSS is not run on sets of more than N samples (hours)")
    parser.add_argument("--skip-dss", action="store_true")
    parser.add_argument("--dmr-options", default="", metavar="OPTIONS",
                        help="more options for every `dmr` run, e.g. --dmr-options=\"--em-iter 1000\"")
    parser.add_argument("--no-curve", action="store_true",
                        help="simulations: only the default run (--fdr 0.05), not a second `dmr --fdr 1` for the "
                             "other nominal levels (the scale sets, where a run takes minutes)")
    args = parser.parse_args()
    saved = args.workdir / "results.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}  # the other sets' of earlier runs
    for name in args.sets.split(","):
        work = args.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        samples = prepare(name, work)
        ours = run_ours(work, samples, args.dmr_options.split())
        dss = None
        if not args.skip_dss and len(samples) <= args.skip_dss_above:
            dss = run_dss(work, args.rerun_dss)
        if name not in REAL_SETS:
            if not args.no_curve:
                ours["all_dir"] = run_ours_all(work, samples, args.dmr_options.split())
            rows = simulation_rows(name, work, ours, dss)
            print_simulation(name, rows, work)
            results[name] = {"rows": rows, "n_samples": len(samples), "ours": _brief(ours), "dss": _brief(dss)}
        else:
            results[name] = real_row(name, samples, ours, dss)
            print_real([results[name]])
        saved.write_text(json.dumps(results, indent=1, default=str))
    summary(results, args.workdir)


def run_ours_all(work: Path, samples: list, extra=()) -> Path:
    """`dmr --fdr 1` on the store of the timed run: every candidate with its q-value (the FDR curve)."""
    out = work / "ours"
    subprocess.run(["streambhmm", "dmr", out / "counts.zarr", "--groups", out / "sheet.tsv", "--output",
                    out / "all.bed", "--fdr", "1", "-q", *extra], capture_output=True, text=True, check=True)
    every = work / "ours-all"
    every.mkdir(exist_ok=True)
    for source, target in (("all.tsv", "dmr.tsv"), ("all.domains.tsv", "dmr.domains.tsv")):
        shutil.copy(out / source, every / target)
    return every


def _brief(run: dict | None) -> dict | None:
    return None if run is None else {k: v for k, v in run.items() if k not in ("stdout", "dir", "all_dir")}


def real_row(name: str, samples: list, ours: dict, dss: dict | None) -> dict:
    calls = ours_calls(ours["dir"]) if not ours["rc"] else []
    focal = [c for c in calls if c[3] == "focal"]
    domains = [c for c in calls if c[3] == "domain"]
    row = {"set": name, "samples": " vs ".join(f"{sum(1 for s in samples if s[1] == g)}" for g in
                                               dict.fromkeys(s[1] for s in samples)),
           "ours_dmrs": len(focal), "ours_median": median_length(focal), "ours_domains": len(domains),
           "ours_seconds": ours["seconds"], "ours_dmr_seconds": ours["dmr_s"], "ours_memory": ours["memory_mib"]}
    if dss:
        theirs = dss_calls(dss["dir"] / "dmr.tsv")
        # the DMRs alone (DSS calls no domains), then with the domains: they are long (h1-imr90's 24
        # cover 43% of chr21), so they hold most of DSS's calls (a helper found the table gave that alone)
        with_domains = agreement(calls, theirs)
        row.update(dss_dmrs=len(theirs), dss_median=median_length(theirs), dss_seconds=dss["seconds"],
                   dss_memory=dss["memory_mib"], **agreement(focal, theirs),
                   dss_in_ours_domains=with_domains["dss_in_ours"], jaccard_domains=with_domains["jaccard"])
    return row


def print_real(rows: list) -> None:
    print("\n| set | samples | ours: DMRs, median bp, domains | DSS: DMRs, median bp | our DMRs overlapping DSS | "
          "DSS overlapping our DMRs (or domains) | bp Jaccard, DMRs (with domains) | seconds ours (dmr) / DSS | "
          "peak MiB ours / DSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        with_domains = r["ours_domains"] and "jaccard_domains" in r
        in_ours = fmt(r.get("dss_in_ours")) + (f" ({fmt(r['dss_in_ours_domains'])})" if with_domains else "")
        jaccard = fmt(r.get("jaccard")) + (f" ({fmt(r['jaccard_domains'])})" if with_domains else "")
        print(f"| {r['set']} | {r['samples']} | {r['ours_dmrs']:,}, {r['ours_median']:,.0f}, {r['ours_domains']} | "
              f"{fmt(r.get('dss_dmrs'))}, {fmt(r.get('dss_median'), 0)} | {fmt(r.get('ours_in_dss'))} | "
              f"{in_ours} | {jaccard} | {r['ours_seconds']:.1f} "
              f"({r['ours_dmr_seconds']:.1f}) / {fmt(r.get('dss_seconds'), 1)} | {r['ours_memory']:,.0f} / "
              f"{fmt(r.get('dss_memory'), 0)} |")


def summary(results: dict, workdir: Path) -> None:
    for name in ("sim", "null", "unbalanced", "one"):
        if name in results:
            print_simulation(name, results[name]["rows"], workdir / name)
    real = [r for name, r in results.items() if name in REAL_SETS]
    if real:
        print("\nreal sets:")
        print_real(real)
    scale = {name: r for name, r in results.items() if name.startswith("scale") or name == "sim"}
    if len(scale) > 1:
        print("\n| samples | ingest s per sample | dmr s | dmr s per sample | dmr CPU s per sample | peak MiB | "
              "DSS s | DSS s per sample |")
        print("|---|---|---|---|---|---|---|---|")
        for name, r in sorted(scale.items(), key=lambda kv: kv[1]["n_samples"]):
            n, ours, dss = r["n_samples"], r["ours"], r["dss"]
            cpu = ours["dmr_cpu_s"] / n if "dmr_cpu_s" in ours else None
            print(f"| {n} | {ours['ingest_s'] / n:.2f} | {ours['dmr_s']:.1f} | {ours['dmr_s'] / n:.2f} | "
                  f"{fmt(cpu, 2)} | "
                  f"{ours['memory_mib']:,.0f} | {fmt(dss['seconds'] if dss else None, 1)} | "
                  f"{fmt(dss['seconds'] / n if dss else None, 1)} |")


REAL_SETS = real_sets()

if __name__ == "__main__":
    main()
