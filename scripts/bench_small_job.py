"""A small job end to end, as a user runs it, against hmmlearn in the same run: IMR90 chr22.

    python scripts/bench_small_job.py [--states 4] [--repeat 3]

Data: ../shared/data/real/MethylSeekR_IMR90_chr22 (200,000 CpGs, Lister et al. 2009).
  streambhmm  three commands, each a new process, as the README shows them:
              `ingest FILE --format methylseekr`, `fit STORE --method em --em-starts 1
              --emission binomial` (the model hmmlearn fits; EM to convergence: --em-tol
              1e-7) and `decode`.
  hmmlearn    one process: read the same file (numpy), sum it into the same 100 bp bins,
              MultinomialHMM (n_trials = coverage: the same Binomial HMM) fitted for as
              many EM iterations as streambhmm's fit ran (tol 0), then predict.
  dnmtools    `dnmtools hmr` on the same CpGs, when a dnmtools binary is on PATH.
Wall seconds and peak resident memory (GNU time's maximum RSS; for streambhmm the largest
of its three commands) are the medians of --repeat runs.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "MethylSeekR_IMR90_chr22"
FILE = DATA / "Lister2009_imr90_hg18_chr22.tab.gz"

HMMLEARN = """
import sys, warnings
import numpy as np
from hmmlearn.hmm import MultinomialHMM
path, m, n_iter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = np.loadtxt(path, dtype=np.int64, usecols=(1, 2, 3))
bins, index = np.unique((rows[:, 0] - 1) // 100, return_inverse=True)
total = np.bincount(index, rows[:, 1]).astype(np.int64)
meth = np.bincount(index, rows[:, 2]).astype(np.int64)
keep = total > 0
x = np.column_stack([meth[keep], total[keep] - meth[keep]])
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    hmm = MultinomialHMM(n_components=m, n_trials=total[keep], n_iter=n_iter, tol=0, random_state=0)
    hmm.fit(x)
    states = hmm.predict(x)
print(x.shape[0], hmm.monitor_.iter, np.bincount(states, minlength=m).tolist())
"""


def timed(args: list, **kwargs) -> tuple[float, float, str]:
    """(wall seconds, peak MiB, stdout) of a command run under GNU time."""
    with tempfile.NamedTemporaryFile("r") as report:
        done = subprocess.run(["/usr/bin/time", "-o", report.name, "-f", "%e %M", *map(str, args)],
                              capture_output=True, text=True, **kwargs)
        if done.returncode:
            sys.exit(f"{' '.join(map(str, args))} failed:\n{done.stdout}{done.stderr}")
        seconds, kib = report.read().split()[-2:]
    return float(seconds), int(kib) / 1024, done.stdout


def streambhmm_run(workdir: Path, m: int) -> tuple:
    """(wall, peak MiB, EM iterations, decode's summary line, per-command walls) of ingest + fit + decode."""
    command = [sys.executable, "-m", "streambhmm.app.cli"]
    store, model = workdir / "counts.zarr", workdir / "model.json"
    shutil.rmtree(store, ignore_errors=True)
    steps = [timed([*command, "ingest", FILE, "--format", "methylseekr", "--sample", "IMR90", "--store", store]),
             timed([*command, "fit", store, "-m", m, "--method", "em", "--em-starts", "1", "--emission", "binomial",
                    "-o", model, "-q"]),
             timed([*command, "decode", store, "--model", model, "-o", workdir / "segments.bed", "-q"])]
    iterations = len(json.loads(model.read_text())["loglik_history"]) - 1
    return (sum(s[0] for s in steps), max(s[1] for s in steps), iterations,
            steps[2][2].splitlines()[0], [s[0] for s in steps])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--states", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not FILE.exists():
        sys.exit(f"no {FILE} (the shared data must sit beside the repository)")
    workdir = Path(tempfile.mkdtemp(prefix="streambhmm-small-"))
    try:
        ours = [streambhmm_run(workdir, args.states) for _ in range(args.repeat)]
        iterations = ours[0][2]
        plain = workdir / "imr90.tab"
        plain.write_bytes(subprocess.run(["zcat", FILE], capture_output=True, check=True).stdout)
        theirs = [timed([sys.executable, "-c", HMMLEARN, plain, args.states, iterations])
                  for _ in range(args.repeat)]
        rows = [("streambhmm ingest + fit (EM) + decode", ours),
                (f"hmmlearn read + bin + fit ({iterations} iterations) + predict", theirs)]
        if shutil.which("dnmtools"):
            meth = workdir / "IMR90.meth"
            data = np.loadtxt(plain, dtype=str)
            with open(meth, "w") as fh:
                for chrom, pos, total, methylated in data:
                    t, mm = int(total), int(methylated)
                    fh.write(f"{chrom}\t{int(pos) - 1}\t+\tCpG\t{mm / t if t else 0:.6f}\t{t}\n")
            rows.append(("dnmtools hmr", [timed(["dnmtools", "hmr", "-o", workdir / "hmr.bed", meth])
                                          for _ in range(args.repeat)]))
        print(f"IMR90 chr22, {args.states} states, {args.repeat} runs each (medians)")
        print(f"{'pipeline':<58} {'wall s':>7} {'peak MiB':>9}")
        medians = []
        for label, runs in rows:
            wall, peak = float(np.median([r[0] for r in runs])), float(np.median([r[1] for r in runs]))
            medians.append((wall, peak))
            print(f"{label:<58} {wall:>7.2f} {peak:>9.0f}")
        steps = np.median([r[4] for r in ours], axis=0)
        print(f"\nstreambhmm per command (s): ingest {steps[0]:.2f}, fit {steps[1]:.2f}, decode {steps[2]:.2f}; "
              f"EM ran {iterations} iterations")
        print(f"decode: {ours[0][3]}")
        print(f"hmmlearn: bins, iterations, bins per state: {theirs[0][2].strip()}")
        base = medians[2] if len(medians) > 2 else medians[1]
        name = "dnmtools hmr" if len(medians) > 2 else "hmmlearn"
        print(f"streambhmm / {name}: wall {medians[0][0] / base[0]:.2f}x, peak memory {medians[0][1] / base[1]:.2f}x")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
