"""Fit from a persisted moment store against the full pass over the counts, same data, same run.

    python scripts/bench_moment_store.py [--bins 1e7] [--workdir DIR]

Builds (or reuses) a two-sample synthetic counts store, then times with the CLI:
  1. `streambhmm moments STORE --output M`  the full pass (every partial computed)
  2. the same command again                 nothing changed: digests only, all reused
  3. `streambhmm fit M --states 4`           reads the moment store only
  4. `streambhmm fit STORE --states 4`       the full pass and the fit, for comparison
and prints the ratios. Each CLI call starts its own LocalCluster where it needs one.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streambhmm.testing.bench import build_synthetic_store


def timed(*args) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "streambhmm.app.cli", *map(str, args)], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=float, default=1e7)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        store = workdir / f"bench_{int(args.bins)}.zarr"
        if not store.exists():
            print(f"building {int(args.bins):,}-bin store: {build_synthetic_store(store, int(args.bins), 1_000_000):.0f} s")
        moments = workdir / "moments.zarr"
        shutil.rmtree(moments, ignore_errors=True)
        full = timed("moments", store, "--output", moments, "-q")
        rerun = timed("moments", store, "--output", moments, "-q")
        fit_moments = timed("fit", moments, "--states", "4", "-o", workdir / "m1.json")
        fit_counts = timed("fit", store, "--states", "4", "-o", workdir / "m2.json", "-q")
        print(f"{'step':<48} {'seconds':>8}")
        print(f"{'moments, full pass (all partials computed)':<48} {full:>8.1f}")
        print(f"{'moments again, nothing changed (all reused)':<48} {rerun:>8.1f}")
        print(f"{'fit from the moment store':<48} {fit_moments:>8.1f}")
        print(f"{'fit from the counts store (full pass + fit)':<48} {fit_counts:>8.1f}")
        print(f"\nfull pass / fit from moments: {full / fit_moments:.1f}x;  "
              f"fit from counts / fit from moments: {fit_counts / fit_moments:.1f}x")
        print("(every row includes Python start-up and imports; the moments rows include a LocalCluster start)")
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
