"""Which `fit` method should a counts store default to? The whole command as users run it.

For each real data set of scripts/real_data_fits.py (same splits) and M = 4 and 6, the
training bins are written into a counts store (one chromosome per training block) and

    streambhmm fit STORE -m M --method METHOD -o model.json -q

runs in a subprocess for each method (refined, refined-em, em, ftd-em; ftd is refused on
most of them), timed wall clock (Python start-up and the embedded Dask cluster included,
the same for every method). The written model is scored on the held-out bins. A method's
efficiency is its held-out log-likelihood gain per bin over the one-state model (each
sample's pooled level), per second. The default is the method with the best efficiency in
the most data sets and M.

    python scripts/fit_methods_cli.py [--datasets ...] [--states 4,6] [--methods ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import real_data_fits as data  # noqa: E402  (the same data sets and splits)

from streambhmm.learn.hmm import BinomialHMM  # noqa: E402
from streambhmm.app.modelio import read_model  # noqa: E402
from streambhmm.testing import hmm_from_model  # noqa: E402
from streambhmm.testing import write_store  # noqa: E402

METHODS = ("refined", "refined-em", "em", "ftd-em")


def write_counts(path: Path, meth, cov, lengths, samples) -> None:
    """One chromosome per sequence, consecutive 100 bp bins."""
    chromosomes, offset = {}, 0
    for i, length in enumerate(lengths):
        chromosomes[f"part{i + 1}"] = (np.arange(length), meth[offset:offset + length], cov[offset:offset + length])
        offset += length
    write_store(path, chromosomes, list(samples))


def one_state_score(train, test) -> float:
    """Held-out log-likelihood per bin of the one-state model."""
    hmm = BinomialHMM(1)
    hmm.startprob_, hmm.transmat_ = np.ones(1), np.ones((1, 1))
    hmm.methylation_ = (train[0].sum(axis=0) / train[1].sum(axis=0))[None, :]
    return hmm.score(*test) / test[0].shape[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", default=",".join(data.DATASETS))
    parser.add_argument("--states", default="4,6")
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    methods = args.methods.split(",")
    wins = dict.fromkeys(methods, 0)
    print(f"{'data set':<12} {'M':>2} {'method':<11} {'seconds':>8} {'test loglik/bin':>16} {'gain/bin':>9} "
          f"{'gain/bin/s':>11}")
    for name in args.datasets.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            train, test = data.load(name, tmp)
            samples = list(data.DATASETS[name]["train"])
            store = tmp / "train.zarr"
            write_counts(store, *train, samples)
            baseline = one_state_score(train, test)
            for m in (int(v) for v in args.states.split(",")):
                rows = {}
                for method in methods:
                    model = tmp / f"{method}.m{m}.json"
                    t = time.perf_counter()
                    proc = subprocess.run([sys.executable, "-m", "streambhmm.app.cli", "fit", str(store), "-m", str(m),
                                           "--method", method, "-o", str(model), "-q"], capture_output=True, text=True)
                    seconds = time.perf_counter() - t
                    if proc.returncode != 0:
                        print(f"{name:<12} {m:>2} {method:<11} failed: {proc.stderr.strip().splitlines()[-1][:100]}")
                        continue
                    value = hmm_from_model(read_model(model)).score(*test) / test[0].shape[0]  # as written
                    gain = value - baseline
                    rows[method] = (seconds, value, gain, gain / seconds)
                    print(f"{name:<12} {m:>2} {method:<11} {seconds:>8.1f} {value:>16.4f} {gain:>9.4f} "
                          f"{gain / seconds:>11.4f}", flush=True)
                    if args.json:
                        with open(args.json, "a") as fh:
                            fh.write(json.dumps(dict(dataset=name, m=m, method=method, seconds=seconds,
                                                     test_loglik=value, gain=gain)) + "\n")
                if rows:
                    wins[max(rows, key=lambda k: rows[k][3])] += 1
    print("\nbest held-out log-likelihood gain per second, cells won: "
          + ", ".join(f"{k} {v}" for k, v in wins.items()))


if __name__ == "__main__":
    main()
