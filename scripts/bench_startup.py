"""Start-up of the `streambhmm` command, against the bare interpreter in the same run.

Each command runs ``--repeats`` times as a new process (after one unmeasured warm-up run, so
the disk cache is warm); the table gives the median wall seconds and the ratio to
``python -c pass``:

    python -c pass                 the interpreter alone (the floor)
    python -c "import numpy"       what any numerical tool pays first
    streambhmm --version           the installed console script
    streambhmm fit --help          a command's help (its options, nothing computed)

    python scripts/bench_startup.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def seconds(command: list[str], repeats: int) -> float:
    subprocess.run(command, check=True, capture_output=True)  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    command = shutil.which("streambhmm") or sys.exit("no `streambhmm` on PATH: install the package first")
    runs = [("python -c pass", [sys.executable, "-c", "pass"]),
            ('python -c "import numpy"', [sys.executable, "-c", "import numpy"]),
            ("streambhmm --version", [command, "--version"]),
            ("streambhmm fit --help", [command, "fit", "--help"])]
    base = None
    print(f"{'command':<28} {'median s':>9} {'/ python -c pass':>17}")
    for label, argv in runs:
        value = seconds(argv, args.repeats)
        base = base or value
        print(f"{label:<28} {value:>9.3f} {value / base:>17.1f}", flush=True)


if __name__ == "__main__":
    main()
