"""Cheaper one-pass refinements for `hmr` and `pmd`, measured by the regions they call.

    python scripts/call_settings.py [--sets msr22,bsseq22,h1-21,imr90-21] [--workdir DIR]

On the four real sets of compare_dnmtools.py (each ingested once), every call kind is fitted
and called in process with the refinement's defaults (2 random starts besides FTD's estimate
and the quantiles, the 2 best screened starts run to convergence, relative tolerance 1e-8)
and with cheaper settings:

    keep1        1 screened start run to convergence
    tol5e-8      relative tolerance 5e-8 (`hmr`'s, learn/domains.py)
    tol1e-7      relative tolerance 1e-7 (`pmd`'s, with keep1)
    keep1-tol7   both
    no-random    no random start
    screen20     20 screening iterations instead of 40, 1 start run to convergence

Printed per set, kind and setting: the criterion's evaluations, the CPU seconds of the fit
and the regions, and the base-pair Jaccard of the calls against the defaults' calls. A
setting is adopted for a kind (learn/domains.py) only where it keeps Jaccard >= 0.97 on
every set (a refusal must stay a refusal). The CPU seconds are this process's, and the
machine may be shared: compare the evaluations.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import streambhmm.app.calls as calls
import streambhmm.learn.model as model_module
from compare_dnmtools import SETS, jaccard_genome, read_beds
from streambhmm.app.calls import CallSettings, run_call
from streambhmm.distributed.cluster import store_session
from streambhmm.learn.criterion import Objective
from streambhmm.learn.domains import HMR_MODEL, PMD_MODEL
from streambhmm.learn.refine import refine

RANDOM_STARTS = calls.CALL_RANDOM_STARTS
SETTINGS = {  # (random starts, finished starts, tolerance, screening iterations)
    "defaults": (2, 2, 1e-8, 40),
    "keep1": (2, 1, 1e-8, 40),
    "tol5e-8": (2, 2, 5e-8, 40),
    "tol1e-7": (2, 2, 1e-7, 40),
    "keep1-tol7": (2, 1, 1e-7, 40),
    "no-random": (0, 2, 1e-8, 40),
    "screen20": (2, 1, 1e-8, 20),
}


def call(kind: str, store: Path, out: Path, setting: tuple) -> tuple[int, float, str]:
    """(criterion evaluations, CPU seconds, refusal or "") of one call with ``setting``."""
    random_starts, finished, tol, screen = setting
    calls.HMR_MODEL, calls.PMD_MODEL = replace(HMR_MODEL, n_finished=finished, tol=tol), \
        replace(PMD_MODEL, n_finished=finished, tol=tol)
    calls.CALL_RANDOM_STARTS = random_starts
    model_module.refine = functools.partial(refine, screen_iter=screen)
    counted = [0]
    evaluate = Objective.__call__

    def counting(self, x, m):
        counted[0] += 1
        return evaluate(self, x, m)

    Objective.__call__ = counting
    start = time.process_time()
    refusal = ""
    try:
        with warnings.catch_warnings(), store_session(store, None) as opened:
            warnings.simplefilter("ignore")
            run_call(CallSettings(kind, str(store), str(out), quiet=True), opened)
    except ValueError as exc:
        refusal = str(exc).splitlines()[0][:100]
    finally:
        Objective.__call__ = evaluate
        model_module.refine = refine
        calls.HMR_MODEL, calls.PMD_MODEL = HMR_MODEL, PMD_MODEL
        calls.CALL_RANDOM_STARTS = RANDOM_STARTS
    return counted[0], time.process_time() - start, refusal


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="streambhmm-call-settings-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| set | kind | setting | evaluations | CPU s | Jaccard against the defaults' calls |")
    print("|---|---|---|---|---|---|")
    for key in args.sets.split(","):
        title, files, fmt = SETS[key]
        store = work / f"{key}.zarr"
        if not store.exists():
            subprocess.run(["streambhmm", "ingest", *map(str, files), "--sample", "S", "--store", str(store),
                            "--format", fmt, "-q"], check=True, capture_output=True)
        for kind in ("hmr", "pmd"):
            reference = None
            for name in ["defaults"] + [s for s in args.settings.split(",") if s != "defaults"]:
                out = work / f"{key}-{kind}-{name}.bed"
                out.unlink(missing_ok=True)
                evaluations, cpu, refusal = call(kind, store, out, SETTINGS[name])
                if name == "defaults":
                    reference = None if refusal else out
                if refusal:
                    agree = f"refused ({refusal})"
                elif reference is None:
                    agree = "called where the defaults refused"
                else:
                    agree = f"{jaccard_genome(read_beds(out), read_beds(reference)):.4f}"
                print(f"| {title} | {kind} | {name} | {evaluations} | {cpu:.1f} | {agree} |", flush=True)
    print(f"\nfiles in {work}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
