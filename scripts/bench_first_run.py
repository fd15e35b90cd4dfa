"""A command's first run after installation: numba compiles the kernels it calls (and caches
them), so a new user's first `hmr` takes several times its later runs. Run here with an
empty numba cache each time, alternately from this checkout and from a baseline copy of the
package (for example the code before a change; each goes first in every other pair), in the
same conditions:

    git archive COMMIT streambhmm | tar -x -C /tmp/old
    python scripts/bench_first_run.py --baseline /tmp/old [--command hmr] [--repeats 3]

The store is the MethylSeekR IMR90 chr22 excerpt's 100 bp bins (ingested once, into a
temporary directory). Printed: each run's wall seconds, then the medians and their ratio;
then, from one more run of this checkout, the seconds numba spent compiling each kernel the
command called (numba's compile events, inclusive of the kernels it compiled on the way).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
EXCERPT = SHARED / "data" / "real" / "MethylSeekR_IMR90_chr22" / "Lister2009_imr90_hg18_chr22.tab.gz"
CHECKOUT = Path(__file__).resolve().parents[1]

# run the command line in-process with a listener on numba's compile events (top level only)
LISTENING = """
import json, runpy, sys, time
from numba.core import event
depth, found = [], []
class Listener(event.Listener):
    def on_start(self, e):
        depth.append(time.perf_counter())
    def on_end(self, e):
        start = depth.pop()
        if not depth:
            f = e.data["dispatcher"].py_func
            found.append((f.__module__ + "." + f.__name__, time.perf_counter() - start))
event.register("numba:compile", Listener())
sys.argv = ["streambhmm"] + sys.argv[2:]
try:
    runpy.run_module("streambhmm", run_name="__main__")
finally:
    with open(LOG, "w") as fh:
        json.dump(found, fh)
"""


def environment(package_dir: Path, cache: Path) -> dict:
    return dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(package_dir))


def imported_from(package_dir: Path, work: Path) -> None:
    """Exit unless a run with ``package_dir`` imports the package from there."""
    found = subprocess.run([sys.executable, "-c", "import streambhmm; print(streambhmm.__file__)"],
                           env=environment(package_dir, work), cwd=work, capture_output=True, text=True, check=True)
    if Path(found.stdout.strip()).resolve().parent != package_dir / "streambhmm":
        sys.exit(f"with PYTHONPATH={package_dir} the package comes from {found.stdout.strip()}")


def run(command: list[str], package_dir: Path, cache: Path, listen_log: Path | None = None) -> float:
    """Wall seconds of one run, in the cache's directory (``python -m`` puts the working
    directory first on the path: run from a checkout, it would shadow ``package_dir``)."""
    env = environment(package_dir, cache)
    if listen_log is None:
        argv = [sys.executable, "-m", "streambhmm", *command]
    else:
        argv = [sys.executable, "-c", f"LOG = {str(listen_log)!r}\n" + LISTENING, "-", *command]
    start = time.perf_counter()
    cache.mkdir(parents=True)
    subprocess.run(argv, env=env, check=True, cwd=cache, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True,
                        help="a directory holding another copy of the streambhmm package (its folder streambhmm/)")
    parser.add_argument("--command", default="hmr", help="hmr, pmd or fit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    baseline = Path(args.baseline).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for package_dir in (CHECKOUT, baseline):
            imported_from(package_dir, work)
        store = work / "counts.zarr"
        subprocess.run([sys.executable, "-m", "streambhmm", "ingest", str(EXCERPT), "--sample", "S", "--store",
                        str(store), "--format", "methylseekr", "-q"], check=True, cwd=work)
        outputs = {"hmr": ["-o", str(work / "calls.bed")], "pmd": ["-o", str(work / "calls.bed")],
                   "fit": ["--states", "4", "-o", str(work / "model.json")]}
        command = [args.command, str(store), *outputs[args.command], "-q"]
        seconds = {"this checkout": [], "baseline": []}
        pair = [("this checkout", CHECKOUT), ("baseline", baseline)]
        for i in range(args.repeats):
            for label, package in pair if i % 2 == 0 else pair[::-1]:  # the baseline first every other time
                cache = work / f"numba-{label}-{i}"
                seconds[label].append(run(command, package, cache))
                print(f"{label}: {seconds[label][-1]:.1f} s", flush=True)
        ours, theirs = (statistics.median(seconds[k]) for k in ("this checkout", "baseline"))
        print(f"\n`{args.command}` on an empty numba cache, median of {args.repeats}: {ours:.1f} s against "
              f"{theirs:.1f} s for the baseline ({ours / theirs:.2f}x)")
        log = work / "compiles.json"
        run(command, CHECKOUT, work / "numba-listened", log)
        found = json.loads(log.read_text())
        print(f"\nthis checkout's compilations: {sum(s for _, s in found):.1f} s in {len(found)} kernels")
        for name, sec in sorted(found, key=lambda item: -item[1]):
            print(f"  {sec:5.2f} s  {name}")


if __name__ == "__main__":
    main()
