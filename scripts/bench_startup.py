"""Start-up of the `streambhmm` command, against the bare interpreter in the same run, and the
floor a chromosome job cannot go below, against DNMTools' whole job.

Each command runs ``--repeats`` times as a new process (after one unmeasured warm-up run, so
the disk cache is warm); the table gives the median wall seconds, the median CPU seconds
(user + system) and the wall ratio to ``python -c pass``:

    python -c pass                 the interpreter alone (the floor)
    python -c "import numpy"       what any numerical tool pays first
    streambhmm --version           the installed console script
    streambhmm fit --help          a command's help (its options, nothing computed)
    ingest's imports               numpy, zarr, pyarrow's CSV reader, isal: before the first row is read
    hmr's and pmd's imports        everything `hmr` imports (scipy, numba, Dask, Zarr) and the
                                   loading of one cached numba kernel (numba's own start-up):
                                   before the first count is read

With ``--dnmtools`` (a DNMTools binary; ../shared/tools/peers) the same run also times, on
the MethylSeekR IMR90 chr22 excerpt, DNMTools' jobs (convert.py then `dnmtools hmr` or `pmd`)
and ours (`streambhmm ingest` then `hmr` or `pmd`), each step a new process: a job of ours
cannot take less than the two floors above (ingest's and the call's imports), whatever it computes.

    python scripts/bench_startup.py [--repeats 15] [--dnmtools PATH]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from installed import byte_compile_package  # scripts/, beside this one

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
EXCERPT = SHARED / "data" / "real" / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"
CONVERT = SHARED / "tools" / "peers" / "convert.py"
# each ends as a command does (streambhmm.app.console): its objects frozen, so the interpreter's
# shutdown does not collect them
INGEST_IMPORTS = "import numpy, zarr, pyarrow.csv, isal.igzip, gc; gc.freeze()"
CALL_IMPORTS = ("import streambhmm.app.cli, streambhmm.app.calls, numpy as np, gc; "
                "from streambhmm.moments import moment_kernels; moment_kernels.triple_starts(np.array([3])); "
                "gc.freeze()")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(commands: list[list[str]]) -> tuple[float, float]:
    """(wall, CPU) seconds of running ``commands`` one after the other."""
    cpu, start = children_cpu(), time.perf_counter()
    for command in commands:
        subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start, children_cpu() - cpu


def medians(commands: list[list[str]], repeats: int, before=None) -> tuple[float, float]:
    (before or (lambda: None))()
    timed(commands)  # warm-up
    walls, cpus = [], []
    for _ in range(repeats):
        (before or (lambda: None))()
        wall, cpu = timed(commands)
        walls.append(wall)
        cpus.append(cpu)
    return statistics.median(walls), statistics.median(cpus)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--dnmtools", default=None, help="a DNMTools binary: also time the chromosome jobs")
    args = parser.parse_args()
    byte_compile_package()
    command = shutil.which("streambhmm") or sys.exit("no `streambhmm` on PATH: install the package first")
    runs = [("python -c pass", [[sys.executable, "-c", "pass"]], None),
            ('python -c "import numpy"', [[sys.executable, "-c", "import numpy"]], None),
            ("streambhmm --version", [[command, "--version"]], None),
            ("streambhmm fit --help", [[command, "fit", "--help"]], None),
            ("ingest's imports", [[sys.executable, "-c", INGEST_IMPORTS]], None),
            ("hmr's and pmd's imports", [[sys.executable, "-c", CALL_IMPORTS]], None)]
    work = Path(tempfile.mkdtemp(prefix="streambhmm-startup-"))
    if args.dnmtools:
        if not EXCERPT.exists():
            sys.exit(f"no {EXCERPT}")
        store, meth = work / "counts.zarr", work / "excerpt.meth"
        ingest = [command, "ingest", str(EXCERPT), "--sample", "S", "--store", str(store), "--format", "methylseekr",
                  "-q"]
        fresh = (lambda: shutil.rmtree(store, ignore_errors=True))
        convert = [sys.executable, str(CONVERT), "dnmtools", str(EXCERPT), "--out", str(meth)]
        for kind in ("hmr", "pmd"):
            runs.append((f"ingest + {kind} (ours)", [ingest, [command, kind, str(store), "-o",
                                                              str(work / f"ours.{kind}.bed"), "-q"]], fresh))
            runs.append((f"convert + {kind} (DNMTools)", [convert, [args.dnmtools, kind, "-o",
                                                                   str(work / f"dnmtools.{kind}.bed"), str(meth)]],
                         None))
    base = None
    print(f"{'command':<28} {'median wall s':>14} {'median CPU s':>13} {'/ python -c pass':>17}")
    try:
        for label, commands, before in runs:
            wall, cpu = medians(commands, args.repeats, before)
            base = base or wall
            print(f"{label:<28} {wall:>14.3f} {cpu:>13.3f} {wall / base:>17.1f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
