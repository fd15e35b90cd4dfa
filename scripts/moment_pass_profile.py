"""Where a whole moment pass spends its CPU: `streambhmm moments STORE --output OUT` run in
this process, its steps timed by the CPU clock of the thread that runs them.

    python -W ignore scripts/moment_pass_profile.py STORE OUT

(OUT must not exist: every partial is computed.) bench_chunk.py times the parts of one chunk;
this times every chunk of a pass as the command runs it, beside what the pass does around them
(reading the counts, hashing and writing the partials, the process itself). Printed: the
process's CPU and wall seconds; per step, its CPU seconds and calls; then the chunks' cost
fitted as a fixed part plus a part per covered bin (least squares over the chunks), and the
marginal rate in M bins x samples per CPU second (the target of issue 24 is 2 per core).
"""

import argparse
import collections
import functools
import runpy
import sys
import threading
import time

import numpy as np

from streambhmm.io.store import chunks
from streambhmm.moments import momentstore, pipeline

SECONDS = collections.Counter()
CALLS = collections.Counter()
CHUNKS = []  # (covered bins, samples, CPU s) of each chunk's computation
LOCK = threading.Lock()


def timed(owner, name: str, label: str) -> None:
    """Replace owner.name by a wrapper that adds its thread CPU seconds to SECONDS[label]."""
    function = getattr(owner, name)

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent = time.thread_time() - start
            with LOCK:
                SECONDS[label] += spent
                CALLS[label] += 1
                if label == "chunks' computation":
                    rows = sum(len(sequence[1]) for sequence in args[0])
                    CHUNKS.append((rows, args[0][0][1].shape[1], spent))

    setattr(owner, name, wrapper)


ORDER = ["a task (all below)", "reading the counts", "chunks' computation", "  encoding",
         "  triple kernel and histograms", "  block statistics", "hashing the partials", "writing the partials"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store")
    parser.add_argument("output")
    args = parser.parse_args()
    timed(momentstore, "persisted_partial", "a task (all below)")
    timed(pipeline, "joined_partial", "chunks' computation")
    timed(pipeline, "moments_from_features", "  triple kernel and histograms")
    timed(pipeline, "block_stats", "  block statistics")
    timed(pipeline, "encode", "  encoding")
    timed(chunks.ChunkRef, "read", "reading the counts")
    timed(momentstore, "write_partial", "writing the partials")
    timed(momentstore, "partial_sha256", "hashing the partials")
    cpu, wall = time.process_time(), time.perf_counter()
    sys.argv = ["streambhmm", "moments", args.store, "--output", args.output, "-q"]
    try:
        runpy.run_module("streambhmm", run_name="__main__")
    except SystemExit as exc:
        if exc.code:
            raise
    print(f"the process after its imports: {time.process_time() - cpu:.2f} CPU s, {time.perf_counter() - wall:.2f} s wall")
    for label in ORDER:
        print(f"{label:32s} {SECONDS[label]:8.2f} CPU s  ({CALLS[label]} calls)")
    if len({rows for rows, _, _ in CHUNKS}) < 3:
        return  # too few chunk sizes to tell the fixed part from the part per bin
    rows, samples, spent = (np.array(column, float) for column in zip(*CHUNKS))
    (fixed, per_row), *_ = np.linalg.lstsq(np.c_[np.ones_like(rows), rows], spent, rcond=None)
    print(f"a chunk: {fixed:.3f} s + {per_row * 1e6:.2f} s per M covered bins ({len(rows)} chunks of "
          f"{rows.min():,.0f}-{rows.max():,.0f} covered bins, {samples.max():.0f} samples); marginal rate "
          f"{samples.max() / per_row / 1e6:.2f} M bins x samples per CPU second")


if __name__ == "__main__":
    main()
