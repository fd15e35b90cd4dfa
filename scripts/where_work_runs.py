"""A command's Dask tasks in its own process against an embedded cluster of worker processes.

    python scripts/where_work_runs.py STORE [STORE ...] [--workdir DIR] [--em-iter 3]

Without --scheduler every command runs its tasks in its own process, a thread per core
(docs/guide/cluster.md); STREAMBHMM_IN_PROCESS_MAX=0 sends them to an embedded LocalCluster of
one worker process per core instead. For each counts store, both ways, each command a new
process timed by ../shared/tools/peers/memtime.py (wall seconds, peak memory of the whole
process tree, workers included):

    hmr   streambhmm hmr STORE (all its samples): moments, one-pass fit, posterior pass
    em    streambhmm fit STORE -m 4 --method em --em-starts 1 --em-iter N: beta-binomial EM, whose
          E-steps on a store above $STREAMBHMM_IN_PROCESS_MAX cells read the chunks again in
          every iteration (in process as on the cluster)

and checks that both ways give the same regions (byte for byte) and the same model (the
files equal but for their `created_by`). Prints the seconds, memory and their ratios
(in process over the cluster). Use stores of genome size (scripts/genome_scale.py's
genome.zarr): a chromosome is below the limit, where EM keeps its counts in process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = next((p / "shared" for p in Path(__file__).resolve().parents if (p / "shared" / "data").is_dir()),
              Path(__file__).resolve().parents[2] / "shared")
MEMTIME = SHARED / "tools" / "peers" / "memtime.py"
WAYS = {"in process": "", "worker processes": "0"}  # $STREAMBHMM_IN_PROCESS_MAX


def timed(cmd: list, limit: str, log: Path) -> dict:
    log.unlink(missing_ok=True)
    env = {**os.environ, "STREAMBHMM_IN_PROCESS_MAX": limit}
    result = subprocess.run([sys.executable, str(MEMTIME), "--label", "run", "--log", str(log), "--",
                             *map(str, cmd)], capture_output=True, text=True, env=env)
    record = json.loads(log.read_text().splitlines()[-1])
    if record["rc"] != 0:
        sys.exit(f"failed ({' '.join(map(str, cmd))}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return record


def model_without_stamp(path: Path) -> dict:
    document = json.loads(path.read_text())
    document.pop("created_by", None)
    return document


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", type=Path)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--em-iter", type=int, default=3)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="where-work-runs-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "memtime.jsonl"
    rows = []
    for store in args.stores:
        for job in ("hmr", "em"):
            records, outputs = {}, {}
            for way, limit in WAYS.items():
                out = workdir / f"{store.stem}.{job}.{limit or 'here'}"
                if job == "hmr":
                    cmd = ["streambhmm", "hmr", store, "--output", out.with_suffix(".bed"), "-q"]
                    produced = out.with_suffix(".bed")
                else:
                    cmd = ["streambhmm", "fit", store, "-m", "4", "--method", "em", "--em-starts", "1",
                           "--em-iter", args.em_iter, "-o", out.with_suffix(".json"), "-q"]
                    produced = out.with_suffix(".json")
                records[way] = timed(cmd, limit, log)
                outputs[way] = produced.read_bytes() if job == "hmr" else model_without_stamp(produced)
                print(f"  {store} {job} ({way}): {records[way]['wall_s']:.1f} s, "
                      f"{records[way]['peak_tree_rss_mib']:.0f} MiB", flush=True)
            here, there = records.values()
            same = len({json.dumps(o, sort_keys=True) if isinstance(o, dict) else o for o in outputs.values()}) == 1
            rows.append((store, job, here, there, same))
    print("\n| store | job | in process: s, MiB | worker processes: s, MiB | time ratio | memory ratio | same output |")
    print("|---|---|---|---|---|---|---|")
    for store, job, here, there, same in rows:
        print(f"| {store} | {job} | {here['wall_s']:.1f}, {here['peak_tree_rss_mib']:,.0f} | {there['wall_s']:.1f}, "
              f"{there['peak_tree_rss_mib']:,.0f} | {here['wall_s'] / there['wall_s']:.2f} | "
              f"{here['peak_tree_rss_mib'] / there['peak_tree_rss_mib']:.2f} | {'yes' if same else 'NO'} |")
    print(f"\nfiles in {workdir}")
    if not all(row[-1] for row in rows):
        sys.exit("the two ways gave different outputs")


if __name__ == "__main__":
    main()
