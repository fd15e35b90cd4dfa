"""What keeping a group's samples in the manifest's order costs `batch`.

    python -W ignore scripts/batch_group_order.py [--samples 192,384] [--workdir DIR]

A manifest of N samples in one group, each one of the 16 RRBS files of
../shared/data/real/DSS_RRBS_SLE under its own name, is run by `streambhmm batch` on a local
Dask cluster of 2 worker processes with a thread each (a scheduler and workers started as
the commands are, `dask scheduler` and `dask worker`: streambhmm.testing.ProcessCluster). Timed: until the command has said
every sample's status (the ingests and their commits, in the manifest's order), then it is
stopped (the group's moment pass is not timed). Baseline in the same run: the same samples
ingested one after another in one process (`ingest`, the API of `streambhmm ingest`),
which commits each as it ends. Checked: the store holds the samples in the manifest's order.
"""

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RRBS = ROOT.parent / "shared" / "data" / "real" / "DSS_RRBS_SLE"


def manifest(path: Path, n: int) -> list[str]:
    files = sorted(RRBS.glob("Sample*.tsv.gz"))
    names = [f"S{i:04d}" for i in range(n)]
    path.write_text("sample\tgroup\tformat\tfiles\n" + "".join(
        f"{name}\tG\tauto\t{files[i % len(files)]}\n" for i, name in enumerate(names)))
    return names


def timed_batch(manifest_path: Path, workdir: Path, address: str, n: int) -> float:
    start = time.monotonic()
    command = subprocess.Popen([sys.executable, "-W", "ignore", "-m", "streambhmm", "batch", str(manifest_path),
                                "--workdir", str(workdir), "--scheduler", address],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = 0
    for line in command.stdout:
        said += bool(re.match(r"sample \S+ \(G\): ", line))
        if said == n:
            break
    seconds = time.monotonic() - start
    command.send_signal(signal.SIGINT)
    command.communicate()
    if said < n:
        raise SystemExit(f"batch said {said} of {n} samples' statuses")
    return seconds


def one_by_one(names: list[str], store: Path) -> float:
    from streambhmm.io.ingest import ingest

    files = sorted(RRBS.glob("Sample*.tsv.gz"))
    start = time.monotonic()
    for i, name in enumerate(names):
        ingest([files[i % len(files)]], name, store)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="192,384")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    from streambhmm.io.store import open_store

    from streambhmm.testing import ProcessCluster

    top = args.workdir or Path(tempfile.mkdtemp(prefix="batch_order_"))
    top.mkdir(parents=True, exist_ok=True)
    try:
        with ProcessCluster(n_workers=2) as cluster:
            print(f"{'samples':>8} {'batch s':>8} {'one by one s':>13} {'ratio':>6}  order")
            for n in map(int, args.samples.split(",")):
                names = manifest(top / f"manifest{n}.tsv", n)
                shutil.rmtree(top / f"work{n}", ignore_errors=True)
                shutil.rmtree(top / f"alone{n}.zarr", ignore_errors=True)
                batch = timed_batch(top / f"manifest{n}.tsv", top / f"work{n}", cluster.address, n)
                alone = one_by_one(names, top / f"alone{n}.zarr")
                ordered = open_store(top / f"work{n}" / "G" / "counts.zarr").samples == names
                print(f"{n:>8} {batch:>8.1f} {alone:>13.1f} {batch / alone:>6.2f}  "
                      f"{'manifest' if ordered else 'NOT the manifest'}")
    finally:
        if args.workdir is None:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
