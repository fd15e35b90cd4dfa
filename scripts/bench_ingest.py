"""Ingest against decompression: how close `streambhmm ingest` comes to `zcat`.

    python scripts/bench_ingest.py [--rows 2e7] [--workdir DIR] [--repeat 2] [--libraries] [--unsorted]

Writes a Bismark CX report (gzip level 6, as `gzip` writes it) of ``--rows`` cytosines
(all contexts, both strands, about 4% CG, some rows without coverage), then times in the
same run, ``--repeat`` times each:
- ``zcat FILE > /dev/null``;
- the whole ``streambhmm ingest FILE --sample A --store STORE`` as a user runs it (a new
  process: start-up, detection, checksum, parsing, binning, the store written);
- the parse alone: ``read_rows`` over the file in this process (context CG, and all).
It prints rows/s, the ratio of each to zcat's time, and the load average before and after
(the machine may be shared). ``--libraries`` also times the candidates behind the choice of
libraries on the same file: decompression alone (gzip, python-isal, rapidgzip with 1 and 2
threads) and the parse of the same text blocks (pyarrow, polars), where installed.
``--unsorted`` also writes a copy with the rows shuffled within each chromosome (as methylKit
writes its files) and times the whole ingest of both, alternated, with contexts CG and all,
with the peak memory of each (GNU time).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from streambhmm.io.formats import read_rows

CONTEXTS = np.array(["CG", "CHG", "CHH"])
BASES = np.array(list("ACT"))


def write_cx_report(path: Path, n_rows: int, seed: int = 0, per_chunk: int = 2_000_000) -> None:
    """A CX report with the shape of a human one: a row per C on either strand."""
    rng = np.random.default_rng(seed)
    n_chrom = 4
    with gzip.open(path, "wb", compresslevel=6) as out:
        for c in range(n_chrom):
            position = 10_000
            todo = n_rows // n_chrom + (n_rows % n_chrom if c == n_chrom - 1 else 0)
            while todo:
                n = min(per_chunk, todo)
                todo -= n
                pos = position + np.cumsum(rng.geometric(0.42, n))
                position = int(pos[-1])
                context = rng.choice(3, n, p=[0.04, 0.18, 0.78])
                cov = np.where(rng.random(n) < 0.15, 0, rng.poisson(10, n))
                meth = rng.binomial(cov, np.where(context == 0, 0.8, 0.02))
                second = np.where(context == 0, "G", BASES[rng.integers(0, 3, n)])
                third = np.where(context == 1, "G", BASES[rng.integers(0, 3, n)])
                table = pa.table({
                    "chrom": pa.array(np.full(n, f"chr{c + 1}")), "pos": pos,
                    "strand": np.where(rng.random(n) < 0.5, "+", "-"), "meth": meth, "unmeth": cov - meth,
                    "context": CONTEXTS[context],
                    "tri": np.char.add(np.char.add("C", second), third)})
                sink = pa.BufferOutputStream()
                pcsv.write_csv(table, sink, pcsv.WriteOptions(include_header=False, delimiter="\t",
                                                               quoting_style="none"))
                out.write(sink.getvalue().to_pybytes())


def drain(fh, size: int = 1 << 23) -> None:
    while fh.read(size):
        pass


def compare_libraries(path: Path) -> None:
    """Decompressors and CSV parsers on the same file, one after the other."""
    from isal import igzip

    from streambhmm.io.formats import FORMATS
    from streambhmm.io.blocks import blocks
    from streambhmm.io.parser import Parser

    print(f"{'library':<44} {'seconds':>8}")
    candidates = [("gzip (Python zlib)", lambda: drain(gzip.open(path, "rb"))),
                  ("python-isal igzip", lambda: drain(igzip.open(path, "rb")))]
    try:
        import rapidgzip
        candidates += [(f"rapidgzip, {n} thread(s)", lambda n=n: drain(rapidgzip.open(str(path), parallelization=n)))
                       for n in (1, 2)]
    except ImportError:
        print("(rapidgzip not installed)")
    for name, fn in candidates:
        print(f"{'decompress: ' + name:<44} {timed(fn):>8.2f}")
    text = [data for data, _, _ in blocks(path)]
    names = [f"f{i}" for i in range(7)]
    parser = Parser(FORMATS["bismark-report"].layouts[0])  # chrom pos strand meth unmeth context
    parsers = [("pyarrow read_csv (the reader's settings)", lambda: [parser(d) for d in text])]
    try:
        import polars as pl
        schema = {"f1": pl.Int64, "f3": pl.Int64, "f4": pl.Int64}
        parsers.append(("polars read_csv", lambda: [pl.read_csv(d, has_header=False, separator="\t", new_columns=names,
                                                                 columns=list(range(6)), schema_overrides=schema,
                                                                 quote_char=None) for d in text]))
    except ImportError:
        print("(polars not installed)")
    best = {name: min(timed(fn) for _ in range(1)) for name, fn in parsers}  # warm-up
    for _ in range(3):  # alternated, best of 3: the machine may be shared
        for name, fn in parsers:
            best[name] = min(best[name], timed(fn))
    for name, seconds in best.items():
        print(f"{'parse 6 of 7 columns: ' + name:<44} {seconds:>8.2f}")


def compare_unsorted(path: Path, exe: Path, repeat: int) -> None:
    """The whole ingest of the file and of a copy shuffled within each chromosome."""
    shuffled = path.with_name(path.name.replace(".CX_report", ".shuffled.CX_report"))
    if not shuffled.exists():
        rng = np.random.default_rng(1)
        with gzip.open(path, "rt") as fh:
            lines = fh.readlines()
        chroms = np.array([line.split("\t", 1)[0] for line in lines])
        starts = np.flatnonzero(np.r_[True, chroms[1:] != chroms[:-1]])
        order = np.concatenate([start + rng.permutation(end - start)
                                for start, end in zip(starts, np.r_[starts[1:], len(lines)])])
        with gzip.open(shuffled, "wt", compresslevel=6) as out:
            out.writelines(lines[i] for i in order)
    print(f"\n{'run':>3}  {'file':<9} {'context':<8} {'seconds':>8} {'peak MB':>8} {'/ sorted':>9}")
    for run in range(1, repeat + 1):
        for context in ("CG", "all"):
            seconds = {}
            for name, source in (("sorted", path), ("shuffled", shuffled)):
                store = path.with_name(f"{name}.zarr")
                shutil.rmtree(store, ignore_errors=True)
                result = subprocess.run(["/usr/bin/time", "-f", "%e %M", str(exe), "ingest", str(source), "--sample",
                                         "A", "--store", str(store), "--context", context, "--quiet"],
                                        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                wall, peak = result.stderr.strip().splitlines()[-1].split()
                seconds[name] = float(wall)
                shutil.rmtree(store, ignore_errors=True)
                print(f"{run:>3}  {name:<9} {context:<8} {float(wall):>8.2f} {int(peak) / 1024:>8.0f} "
                      f"{float(wall) / seconds['sorted']:>9.2f}")


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=float, default=2e7)
    parser.add_argument("--workdir", default=None, help="keep the generated file here (reused if present)")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--libraries", action="store_true", help="also compare decompressors and parsers")
    parser.add_argument("--unsorted", action="store_true", help="also ingest a copy shuffled within chromosomes")
    args = parser.parse_args()
    n_rows = int(args.rows)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-bench-ingest-"))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"cx_{n_rows}.CX_report.txt.gz"
    if not path.exists():
        start = time.perf_counter()
        write_cx_report(path.with_suffix(".tmp"), n_rows)
        path.with_suffix(".tmp").rename(path)
        print(f"wrote {path} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - start:.0f} s")
    store = workdir / "bench.zarr"
    exe = Path(sys.executable).with_name("streambhmm")
    print(f"{n_rows:,} rows, {path.stat().st_size / 1e6:.0f} MB gzip; {os.cpu_count()} cores; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'run':>3}  {'step':<44} {'seconds':>8} {'M rows/s':>9} {'/ zcat':>7}")
    for run in range(1, args.repeat + 1):
        zcat = timed(lambda: subprocess.run(f"zcat '{path}' > /dev/null", shell=True, check=True))
        shutil.rmtree(store, ignore_errors=True)
        ingest = timed(lambda: subprocess.run([str(exe), "ingest", str(path), "--sample", "A", "--store", str(store),
                                               "--quiet"], check=True, stdout=subprocess.DEVNULL))
        parse = {context: timed(lambda c=context: sum(r.pos0.size for r in read_rows(path, "bismark-report", c)))
                 for context in ("CG", "all")}
        for step, seconds in [("zcat FILE > /dev/null", zcat), ("streambhmm ingest FILE (whole command)", ingest),
                              ("read_rows, context CG (parse only)", parse["CG"]),
                              ("read_rows, context all (parse only)", parse["all"])]:
            print(f"{run:>3}  {step:<44} {seconds:>8.2f} {n_rows / seconds / 1e6:>9.2f} {seconds / zcat:>7.2f}")
    if args.libraries:
        compare_libraries(path)
    if args.unsorted:
        compare_unsorted(path, exe, args.repeat)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
