"""Fault campaign (issue 25's acceptance): kill every writing command at random moments, fill
the disk while a sample is staged and committed, put a store on read-only media; after each
fault, everything a reader takes as complete must equal a reference built without faults,
and running the command again must finish the job.

    python scripts/fault_campaign.py [--trials 6] [--seed 0] [--workdir DIR]

Inputs: the dmrseq chr21 excerpts in tests/data (H1: two replicates, IMR90: one). Every
command runs as a user runs it, a new process (`python -m streambhmm ...`) in a session of
its own, so SIGKILL reaches its Dask workers too. Kill moments are drawn uniformly over a
clean run's duration, half of them over its last third (where the commits are).

Cases and their checks:
- ingest (first commit of a new store, and a second sample's commit): after the kill,
  `info` answers with a message or a listing, never a traceback; every sample the store
  lists (read with plain ``xarray.open_zarr``) equals the reference's counts; the rerun
  completes and the whole store equals the reference.
- moments, decode --posteriors, report, batch: after the kill the output is absent, refused
  by its reader with a message, or equal to the reference; the rerun equals the reference.
- ingest killed at each named step of a commit (streambhmm.io.storage.fault_point: staged,
  commit point, root metadata, chunks moved, a chromosome's metadata, visible): as above.
- disk full (root only): the ingests run on a tmpfs of a tenth of the finished store to
  three times it and 2 MiB; each completes or exits with a message; what the store lists equals the
  reference; after the filesystem grows, rerunning the ingests completes the reference.
- the disk fills during a commit (root only): the second sample's ingest stops at each
  named step, a file fills the tmpfs, the ingest continues; it exits with a message, what
  the store lists equals the reference, and once the file is removed the next command
  completes the store.
- read-only media (a copy of the reference store on a tmpfs remounted read-only): info,
  score, decode, moments and tracks work and equal the reference; ingest is refused with a
  message.

It prints one row per case: trials; "ended first" (the command finished before its kill);
what the fault left, as a reader sees it: "absent" (no output, or no store), "refused" (a
reader or the command itself refused with a message), "complete" (equal to the reference);
then failures, each also printed in full (exit 1): "mismatch" (something read as complete
differs from the reference), "traceback" and "rerun failed" (running the command again did
not finish the job). Every trial that is not a failure also passed its rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
SAMPLES = {"H1": [DATA / "dmrseq_H1_r1.chr21.tsv.gz", DATA / "dmrseq_H1_r2.chr21.tsv.gz"],
           "IMR90": [DATA / "dmrseq_IMR90_r1.chr21.tsv.gz"]}
STATES = "3"
ROOMY = 256 << 20  # bytes of a tmpfs with room for everything
COMMIT_POINTS = ("staged", "commit", "root", "moved", "chromosome", "visible")  # in the order a commit passes them


def run(*args, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "streambhmm", *map(str, args)], capture_output=True, text=True,
                            timeout=timeout)
    if check and result.returncode != 0:
        raise SystemExit(f"streambhmm {' '.join(map(str, args))} failed:\n{result.stderr[-3000:]}")
    return result


def stopped_at(args, point: str, env: dict | None = None) -> subprocess.Popen | None:
    """Start the command and return once it has stopped itself at ``point`` (the store's
    fault points, streambhmm.io.storage.fault_point); None if it finished without passing
    there (the point is on another path: a first commit's root, say)."""
    proc = subprocess.Popen([sys.executable, "-m", "streambhmm", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=os.environ | {"STREAMBHMM_FAULT": f"{point}:stop"} | (env or {}))
    while proc.poll() is None:
        if Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "T":
            return proc
        time.sleep(0.05)
    if proc.returncode:
        raise SystemExit(f"streambhmm {' '.join(map(str, args))} failed: {proc.stderr.read()[-2000:]}")
    return None


def killed(args, after: float) -> subprocess.CompletedProcess | None:
    """Run the command, SIGKILL its whole session after ``after`` seconds; None if it ended first."""
    proc = subprocess.Popen([sys.executable, "-m", "streambhmm", *map(str, args)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        proc.wait(after)
        return None
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        with contextlib.suppress(ProcessLookupError):  # workers that outlived the session's leader
            os.killpg(proc.pid, signal.SIGKILL)
        return proc


def ingest_args(store: Path, sample: str) -> list:
    return ["ingest", *SAMPLES[sample], "--sample", sample, "--store", store, "-q"]


def disk_usage(path: Path) -> int:
    """Bytes a tree takes on disk (blocks, as a filesystem counts them)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*"))


def store_counts(store: Path) -> dict:
    """{sample: {chrom: (methylated, coverage)}} of every sample the store lists, read with
    plain xarray (no streambhmm code)."""
    import xarray as xr

    attrs = json.loads((store / "zarr.json").read_text()).get("attributes", {})
    out = {}
    for chrom in attrs.get("chromosomes", []):
        ds = xr.open_zarr(store, group=chrom)
        for sample in attrs.get("samples", {}):
            column = ds.sel(sample=sample)
            out.setdefault(sample, {})[chrom] = (np.trim_zeros(column.methylated.values, "b"),
                                                 np.trim_zeros(column.coverage.values, "b"))
    return out


def same_counts(listed: dict, reference: dict) -> bool:
    for sample, chroms in listed.items():
        if sample not in reference or chroms.keys() != reference[sample].keys():
            return False
        for chrom, (m, c) in chroms.items():
            rm, rc = reference[sample][chrom]
            if m.shape != rm.shape or c.shape != rc.shape or (m != rm).any() or (c != rc).any():
                return False
    return True


def model_parameters(path: Path) -> dict:
    model = json.loads(path.read_text())
    return {k: model[k] for k in ("startprob", "transmat", "levels") if k in model}


def same_tree(a: Path, b: Path, compare=True) -> bool:
    """Same file names; with ``compare`` same bytes too (figures and timings excepted)."""
    names = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    if names != sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()):
        return False
    return not compare or all(filecmp.cmp(a / n, b / n, shallow=False) for n in names
                              if n.suffix not in (".png", ".html", ".json"))


class Tally:
    def __init__(self):
        self.rows: dict[str, Counter] = {}
        self.failures: list[str] = []

    def add(self, case: str, outcome: str, detail: str = "") -> None:
        self.rows.setdefault(case, Counter())[outcome] += 1
        if outcome in ("mismatch", "traceback", "rerun failed"):
            self.failures.append(f"{case}: {outcome} {detail[-1500:]}")

    def table(self) -> str:
        kinds = ["ended first", "absent", "refused", "complete", "mismatch", "traceback", "rerun failed"]
        lines = ["| case | trials | " + " | ".join(kinds) + " |", "|---|---" + "|---" * len(kinds) + "|"]
        for case, counts in self.rows.items():
            trials = sum(counts.values())
            lines.append(f"| {case} | {trials} | " + " | ".join(str(counts[k]) for k in kinds) + " |")
        return "\n".join(lines)


def traceback_in(result: subprocess.CompletedProcess) -> bool:
    return "Traceback (most recent call last)" in (result.stdout + result.stderr)


class Campaign:
    def __init__(self, work: Path, trials: int, seed: int):
        self.work, self.trials, self.rng, self.tally = work, trials, random.Random(seed), Tally()
        self.ref = work / "reference"
        self.durations: dict[str, float] = {}

    def timed_reference(self, name: str, *args) -> None:
        t = time.perf_counter()
        run(*args)
        self.durations[name] = time.perf_counter() - t

    def build_reference(self) -> None:
        ref = self.ref
        shutil.rmtree(ref, ignore_errors=True)
        ref.mkdir(parents=True)
        self.timed_reference("ingest first", *ingest_args(ref / "counts.zarr", "H1"))
        self.timed_reference("ingest second", *ingest_args(ref / "counts.zarr", "IMR90"))
        self.timed_reference("moments", "moments", ref / "counts.zarr", "--output", ref / "moments.zarr", "-q")
        run("fit", ref / "moments.zarr", "--states", STATES, "--seed", "0", "--output", ref / "model.json", "-q")
        self.timed_reference("decode", "decode", ref / "counts.zarr", "--model", ref / "model.json", "--posteriors",
                             "--output", ref / "segments.bed", "-q")
        run("decode", ref / "counts.zarr", "--model", ref / "model.json", "--output", ref / "segments.plain.bed", "-q")
        self.timed_reference("report", "report", ref / "counts.zarr", "--model", ref / "model.json", "--output",
                             ref / "report", "-q")
        manifest = ref / "manifest.tsv"
        manifest.write_text("sample\tgroup\tformat\tfiles\n" + "".join(
            f"{s}\tg\ttsv\t{','.join(map(str, files))}\n" for s, files in SAMPLES.items()))
        self.timed_reference("batch", "batch", manifest, "--workdir", ref / "batch", "-q")
        self.counts = store_counts(ref / "counts.zarr")

    def moment(self, name: str) -> float:
        span = self.durations[name]
        return span * (self.rng.uniform(2 / 3, 1) if self.rng.random() < 0.5 else self.rng.uniform(0, 1))

    def trial_dir(self, case: str, i: int) -> Path:
        d = self.work / "trials" / f"{case}-{i}"
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        return d

    # ---- kills ----
    def check_store_after_kill(self, case: str, store: Path) -> str | None:
        """The outcome of a killed ingest as a reader sees it, or None when it is fine so far."""
        info = run("info", store, check=False)
        if traceback_in(info):
            self.tally.add(case, "traceback", info.stderr)
            return "failed"
        if not (store / "zarr.json").exists():
            return "absent"
        if not same_counts(store_counts(store), self.counts):
            self.tally.add(case, "mismatch", f"{store} lists counts that differ from the reference")
            return "failed"
        return "complete" if info.returncode == 0 else "refused"

    def rerun_store(self, case: str, store: Path, samples, expected) -> bool:
        """Ingest ``samples`` again; the store must then hold exactly ``expected``, as the reference."""
        for sample in samples:
            r = run(*ingest_args(store, sample), check=False)
            if r.returncode != 0 or traceback_in(r):
                self.tally.add(case, "rerun failed", r.stderr)
                return False
        listed = store_counts(store)
        if set(listed) != set(expected) or not same_counts(listed, self.counts):
            self.tally.add(case, "mismatch", "the rerun's store differs from the reference")
            return False
        return True

    def kill_ingests(self) -> None:
        for case, duration, before, sample in (("ingest, first commit", "ingest first", [], "H1"),
                                               ("ingest, second sample", "ingest second", ["H1"], "IMR90")):
            for i in range(self.trials):
                d = self.trial_dir("ingest", i)
                store = d / "counts.zarr"
                for s in before:
                    run(*ingest_args(store, s))
                if killed(ingest_args(store, sample), self.moment(duration)) is None:
                    self.tally.add(case, "ended first")
                    continue
                outcome = self.check_store_after_kill(case, store)
                if outcome != "failed" and self.rerun_store(case, store, [sample], [*before, sample]):
                    self.tally.add(case, outcome)

    def kill_at_commit_points(self) -> None:
        """SIGKILL at each named point of a commit (first commit and a second sample's)."""
        case = "ingest, kill at each commit step"
        for point in COMMIT_POINTS:
            for before, sample in (([], "H1"), (["H1"], "IMR90")):
                d = self.trial_dir(f"point-{point}", len(before))
                store = d / "counts.zarr"
                for s in before:
                    run(*ingest_args(store, s))
                proc = stopped_at(ingest_args(store, sample), point)
                if proc is None:
                    continue
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcome = self.check_store_after_kill(case, store)
                if outcome != "failed" and self.rerun_store(case, store, [sample], [*before, sample]):
                    self.tally.add(case, outcome)

    def kill_output(self, case: str, command, output: str, reader) -> None:
        """Kill ``command`` (a function of the trial directory), look at ``output`` with
        ``reader`` (None: absent, False: refused, True: equal to the reference), rerun."""
        for i in range(self.trials):
            d = self.trial_dir(case.split()[0], i)
            for name in ("counts.zarr", "moments.zarr", "model.json"):
                source = self.ref / name
                (shutil.copytree if source.is_dir() else shutil.copy)(source, d / name)
            if killed(command(d), self.moment(case.split()[0])) is None:
                self.tally.add(case, "ended first")
                continue
            seen = reader(d)
            if seen == "traceback":
                self.tally.add(case, "traceback", output)
                continue
            if seen == "mismatch":
                self.tally.add(case, "mismatch", f"{d / output} differs from the reference")
                continue
            r = run(*command(d), check=False)
            if r.returncode != 0 or traceback_in(r):
                self.tally.add(case, "rerun failed", r.stderr)
            elif reader(d) != "complete":
                self.tally.add(case, "mismatch", f"rerun: {d / output} differs from the reference")
            else:
                self.tally.add(case, seen)

    def read_moments(self, d: Path) -> str:
        if not (d / "moments.out.zarr").exists():
            return "absent"
        r = run("fit", d / "moments.out.zarr", "--states", STATES, "--seed", "0", "--output", d / "m.json", "-q",
                check=False)
        if traceback_in(r):
            return "traceback"
        if r.returncode != 0:
            return "refused"
        same = model_parameters(d / "m.json") == model_parameters(self.ref / "model.json")
        (d / "m.json").unlink()
        return "complete" if same else "mismatch"

    def read_file(self, name: str):
        def reader(d: Path) -> str:
            if not (d / name).exists():
                return "absent"
            return "complete" if filecmp.cmp(d / name, self.ref / name, shallow=False) else "mismatch"
        return reader

    def read_report(self, d: Path) -> str:
        if not (d / "report").exists():
            return "absent"
        return "complete" if same_tree(d / "report", self.ref / "report") else "mismatch"

    def read_batch(self, d: Path) -> str:
        store = d / "batch" / "g" / "counts.zarr"
        if not (store / "zarr.json").exists():
            return "absent"
        info = run("info", store, check=False)
        if traceback_in(info):
            return "traceback"
        if not same_counts(store_counts(store), self.counts):
            return "mismatch"
        summary = d / "batch" / "batch-summary.tsv"
        return "complete" if summary.exists() and store_counts(store).keys() == self.counts.keys() else "refused"

    def kill_writers(self) -> None:
        self.kill_output("moments", lambda d: ["moments", d / "counts.zarr", "--output", d / "moments.out.zarr", "-q"],
                         "moments.out.zarr", self.read_moments)
        self.kill_output("decode --posteriors", lambda d: ["decode", d / "counts.zarr", "--model", d / "model.json",
                                                           "--posteriors", "--output", d / "segments.bed", "-q"],
                         "segments.bed", self.read_file("segments.bed"))
        self.kill_output("report", lambda d: ["report", d / "counts.zarr", "--model", d / "model.json", "--output",
                                              d / "report", "-q"], "report", self.read_report)
        self.kill_output("batch", lambda d: ["batch", self.ref / "manifest.tsv", "--workdir", d / "batch", "-q"],
                         "batch", self.read_batch)

    # ---- media ----
    @contextlib.contextmanager
    def tmpfs(self, name: str, size: int):
        mount = self.work / "mounts" / name
        mount.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={max(size, 4096)}", "tmpfs", str(mount)], check=True)
        try:
            yield mount
        finally:
            subprocess.run(["umount", "-l", str(mount)], check=False)

    def disk_full(self) -> None:
        size = disk_usage(self.ref / "counts.zarr")
        case = "disk full, staging and commit"
        for room in np.linspace(0.1 * size, 3 * size + (2 << 20), max(2 * self.trials, 4)):
            with self.tmpfs("full", int(room)) as mount:
                store = mount / "counts.zarr"
                for sample in SAMPLES:
                    r = run(*ingest_args(store, sample), check=False)
                    if traceback_in(r):
                        self.tally.add(case, "traceback", r.stderr)
                        break
                    if r.returncode != 0:
                        break
                else:
                    r = None
                outcome = self.check_store_after_kill(case, store) if (store / "zarr.json").exists() else "absent"
                if outcome == "failed":
                    continue
                if r is not None and r.returncode != 0 and not traceback_in(r):
                    outcome = "refused"
                subprocess.run(["mount", "-o", f"remount,size={ROOMY}", str(mount)], check=True)
                if self.rerun_store(case, store, SAMPLES, SAMPLES):
                    self.tally.add(case, outcome)

    def disk_fills_during_commit(self) -> None:
        """The disk fills while a commit is under way (stopped at each named point, a file
        filling the tmpfs, then continued): the ingest exits with a message and, once room is
        made, the next command completes the commit."""
        case = "disk fills during the commit"
        for point in COMMIT_POINTS:
            with self.tmpfs("filling", ROOMY) as mount:
                store = mount / "counts.zarr"
                run(*ingest_args(store, "H1"))
                proc = stopped_at(ingest_args(store, "IMR90"), point)
                if proc is None:
                    continue
                filler = mount / "filler"
                with contextlib.suppress(OSError), open(filler, "wb") as fh:
                    while True:
                        fh.write(b"\0" * (1 << 20))
                proc.send_signal(signal.SIGCONT)
                _, err = proc.communicate()
                if "Traceback (most recent call last)" in err:
                    self.tally.add(case, "traceback", f"{point}: {err}")
                    continue
                outcome = self.check_store_after_kill(case, store)
                filler.unlink()
                if outcome != "failed" and self.rerun_store(case, store, ["IMR90"], SAMPLES):
                    self.tally.add(case, "refused" if proc.returncode else outcome)

    def read_only(self) -> None:
        case = "read-only media"
        out = self.work / "trials" / "read-only"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        with self.tmpfs("ro", ROOMY) as mount:
            shutil.copytree(self.ref / "counts.zarr", mount / "counts.zarr")
            subprocess.run(["mount", "-o", "remount,ro", str(mount)], check=True)
            store = mount / "counts.zarr"
            checks = [
                (["info", store], None),
                (["score", store, "--model", self.ref / "model.json"], None),
                (["decode", store, "--model", self.ref / "model.json", "--output", out / "segments.bed", "-q"],
                 lambda: filecmp.cmp(out / "segments.bed", self.ref / "segments.plain.bed", shallow=False)),
                (["moments", store, "--output", out / "moments.zarr", "-q"], None),
                (["tracks", store, "--output", out / "tracks", "-q"], None),
            ]
            for args, same in checks:
                r = run(*args, check=False)
                if traceback_in(r) or r.returncode != 0:
                    self.tally.add(case, "traceback" if traceback_in(r) else "rerun failed", f"{args[0]}: {r.stderr}")
                elif same is not None and not same():
                    self.tally.add(case, "mismatch", f"{args[0]} on read-only media")
                else:
                    self.tally.add(case, "complete")
            r = run("ingest", *SAMPLES["IMR90"], "--sample", "another", "--store", store, "-q", check=False)
            self.tally.add(case, "traceback" if traceback_in(r) else "refused" if r.returncode else "mismatch",
                           f"ingest into a read-only store: {r.stdout} {r.stderr}")
            if not same_counts(store_counts(store), self.counts):
                self.tally.add(case, "mismatch", "the read-only store changed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6, help="kills per case (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-faults-")).resolve()
    campaign = Campaign(work, args.trials, args.seed)
    t = time.perf_counter()
    campaign.build_reference()
    print("reference built; clean runs (s): " + ", ".join(f"{k} {v:.1f}" for k, v in campaign.durations.items()),
          flush=True)
    campaign.kill_ingests()
    campaign.kill_at_commit_points()
    campaign.kill_writers()
    if os.geteuid() == 0:
        campaign.disk_full()
        campaign.disk_fills_during_commit()
        campaign.read_only()
    else:
        print("not root: the disk-full and read-only cases (tmpfs mounts) are skipped")
    print(f"\n{campaign.tally.table()}\n\n{time.perf_counter() - t:.0f} s, files in {work}")
    for failure in campaign.tally.failures:
        print("FAILED", failure)
    sys.exit(1 if campaign.tally.failures else 0)


if __name__ == "__main__":
    main()
