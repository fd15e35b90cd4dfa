"""EM iteration time against hmmlearn's MultinomialHMM, and the FTD fit against one iteration.

    python scripts/bench_em.py [--bins 1000000] [--states 4] [--store-bins 10000000]
    python scripts/bench_em.py --real [--states 4,6,8]

Same simulated single-sample data (Poisson(20) coverage) for both, in this run. hmmlearn's
MultinomialHMM with n_trials = coverage per row is the same model. One "iteration" is an
E-step plus M-step as `BinomialHMM.fit` runs it (the counts encoded once per fit); for
hmmlearn, fit(n_iter=1) with init_params="" from the same start. Best of 10 for both: one of
our iterations on a chromosome takes 5-50 ms, so a single run is at the mercy of the scheduler.

With --real, the same comparison on real single-sample data (100 bp bins, CG, replicates
merged): IMR90 and H1 chr21 (dmrseq_BS.chr21_H1_IMR90), IMR90 chr22 (MethylSeekR_IMR90_chr22
and bsseq_BS.chr22_IMR90) and MCF7 chr11p15 (biscuiteer), for each number of states in
--states, from evenly spread levels; whole fits of 10 iterations from the same start (ours
makes one more E-step, for the final log-likelihood); and one beta-binomial iteration
against one binomial iteration (issue 24: at most 1.5x).

With --store-bins N it also times EM iterations on a two-sample synthetic counts store of
N bins (1e6-bin chunks) on a LocalCluster of two worker processes, against the in-memory
EM iteration on the same counts in this process.
"""

import argparse
import logging
import time
import warnings

import numpy as np

from streambhmm import SpectralBinomialHMM
from streambhmm.learn.hmm import BinomialHMM
from streambhmm.learn.simulate import model, simulate


FIT_ITER = 10  # iterations of the whole fits compared with --real


def best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def betabinomial_seconds(meth: np.ndarray, cov: np.ndarray, m: int) -> float:
    """Seconds per beta-binomial EM iteration from the same start (overdispersion 0.05), best of 10."""
    from streambhmm.learn.hmm import EncodedCounts

    start_levels = np.linspace(0.1, 0.9, m)[:, None]
    start_trans = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    hmm = BinomialHMM(m, n_iter=1, init_params="", tol=0, emission="betabinomial")
    hmm.start_from(np.full(m, 1 / m), start_trans, start_levels, np.full((m, 1), 0.05))
    data = EncodedCounts(meth[:, None], cov[:, None], np.array([meth.size]))

    def iteration():
        hmm.m_step(hmm.e_step(data))

    iteration()  # compile outside the timing
    return best(iteration, repeat=10)


def iteration_seconds(meth: np.ndarray, cov: np.ndarray, m: int, fit_iter: int = 0) -> tuple[float, ...]:
    """(ours, hmmlearn's) seconds per EM iteration on one sample's counts, from the same
    start; with ``fit_iter``, also (ours, hmmlearn's) seconds of a whole ``fit`` of that many
    iterations (validation and encoding of the counts included; best of 3)."""
    from hmmlearn.hmm import MultinomialHMM

    from streambhmm.learn.hmm import EncodedCounts

    logging.getLogger("hmmlearn").setLevel(logging.ERROR)  # its notice that MultinomialHMM changed in 0.2.8

    start_prob, start_levels = np.full(m, 1 / m), np.linspace(0.1, 0.9, m)[:, None]
    start_trans = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    ours = BinomialHMM(m, n_iter=1, init_params="", tol=0)
    ours.startprob_, ours.transmat_, ours.methylation_ = start_prob, start_trans, start_levels
    data = EncodedCounts(meth[:, None], cov[:, None], np.array([meth.size]))  # as fit encodes it, once

    def our_iteration():
        ours.m_step(ours.e_step(data))

    our_iteration()  # compile outside the timing
    ours.methylation_ = start_levels
    t_ours = best(our_iteration, repeat=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")

        def reference(n_iter):  # its convergence monitor takes n_iter when constructed
            ref = MultinomialHMM(n_components=m, n_trials=cov, n_iter=n_iter, init_params="", tol=-np.inf,
                                 implementation="scaling")
            ref.startprob_, ref.transmat_ = start_prob, start_trans  # ours has moved on: the timing ran EM
            ref.emissionprob_ = np.hstack([start_levels, 1 - start_levels])
            return ref

        x = np.column_stack([meth, cov - meth])
        ref = reference(1)
        t_ref = best(lambda: ref.fit(x), repeat=10)
        if not fit_iter:
            return t_ours, t_ref

        def our_fit():
            hmm = BinomialHMM(m, n_iter=fit_iter, init_params="", tol=-np.inf)
            hmm.startprob_, hmm.transmat_, hmm.methylation_ = start_prob, start_trans, start_levels
            hmm.fit(meth, cov)
            assert len(hmm.monitor_.history) == fit_iter + 1, "streambhmm stopped early"

        whole = reference(fit_iter)
        t_fit, t_fit_ref = best(our_fit), best(lambda: whole.fit(x))
        assert len(whole.monitor_.history) == fit_iter, "hmmlearn stopped early"
    return t_ours, t_ref, t_fit, t_fit_ref


def real_data(states: list[int]) -> None:
    import tempfile
    from pathlib import Path

    from streambhmm.io.ingest import ingest
    from streambhmm.testing import load_counts
    from streambhmm.io.store import open_store

    real = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
    sets = {"IMR90 chr21": ("dmrseq_BS.chr21_H1_IMR90", "IMR90_r*", "auto"),
            "H1 chr21": ("dmrseq_BS.chr21_H1_IMR90", "H1_r*", "auto"),
            "IMR90 chr22 (MethylSeekR)": ("MethylSeekR_IMR90_chr22", "*.tab.gz", "methylseekr"),
            "IMR90 chr22 (bsseq)": ("bsseq_BS.chr22_IMR90", "IMR90_r*", "auto"),
            "MCF7 chr11p15": ("biscuiteer_MCF7_chr11p15", "*.bed.gz", "auto")}
    print("| data set | bins | states | streambhmm s/iteration | hmmlearn s/iteration | ratio "
          f"| streambhmm fit of {FIT_ITER} iterations, s | hmmlearn, s | ratio | beta-binomial s/iteration "
          "| beta-binomial / binomial |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, (directory, pattern, fmt) in sets.items():
            store = Path(tmp) / f"{name.split()[0]}{name.split()[1]}.zarr"
            ingest(sorted((real / directory).glob(pattern)), "s", store, fmt=fmt)
            meth, cov, _ = load_counts(open_store(store))
            for m in states:
                t_ours, t_ref, fit_ours, fit_ref = iteration_seconds(meth[:, 0], cov[:, 0], m, FIT_ITER)
                t_beta = betabinomial_seconds(meth[:, 0], cov[:, 0], m)
                print(f"| {name} | {meth.shape[0]:,} | {m} | {t_ours:.4f} | {t_ref:.4f} | {t_ref / t_ours:.1f}x "
                      f"| {fit_ours:.3f} | {fit_ref:.3f} | {fit_ref / fit_ours:.1f}x | {t_beta:.4f} "
                      f"| {t_beta / t_ours:.2f}x |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bins", type=int, default=1_000_000)
    parser.add_argument("--states", default="4")
    parser.add_argument("--store-bins", type=float, default=0)
    parser.add_argument("--real", action="store_true")
    args = parser.parse_args()
    if args.real:
        real_data([int(v) for v in args.states.split(",")])
        return
    m = int(args.states)
    truth = model(np.linspace(0.05, 0.95, m)[:, None], np.full((m, m), 0.02 / (m - 1)) + np.eye(m) * (0.98 - 0.02 / (m - 1)))
    sim = simulate(truth, [args.bins], coverage=20.0, random_state=0)
    meth, cov = sim.methylated[:, 0], sim.coverage[:, 0]
    t_ours, t_ref = iteration_seconds(meth, cov, m)
    SpectralBinomialHMM(m, method="ftd", allow_degenerate=True).fit(meth[:10_000], cov[:10_000])
    t_ftd = best(lambda: SpectralBinomialHMM(m, random_state=0, method="ftd", allow_degenerate=True).fit(meth, cov))
    print(f"{args.bins:,} bins, {m} states, one sample")
    print(f"{'':<40} {'seconds':>9}")
    print(f"{'streambhmm EM iteration':<40} {t_ours:>9.3f}")
    print(f"{'hmmlearn MultinomialHMM EM iteration':<40} {t_ref:>9.3f}")
    print(f"{'streambhmm FTD fit (moments included)':<40} {t_ftd:>9.3f}")
    print(f"\nhmmlearn / streambhmm per EM iteration: {t_ref / t_ours:.1f}x (target >= 5)")
    print(f"one hmmlearn iteration / FTD fit: {t_ref / t_ftd:.1f}x")
    if args.store_bins:
        bench_store(int(args.store_bins), m)


def bench_store(n_bins: int, m: int):
    import tempfile
    from pathlib import Path

    from streambhmm.distributed.cluster import dask_client
    from streambhmm.testing.bench import build_synthetic_store
    from streambhmm.testing import load_counts
    from streambhmm.io.store import open_store
    from streambhmm.distributed.em import fit_store_em

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "counts.zarr"
        build_synthetic_store(path, n_bins, 1_000_000)
        store = open_store(path)
        hmm = BinomialHMM(m)
        hmm.start_from(np.full(m, 1 / m), np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1)),
                       np.column_stack([np.linspace(0.1, 0.9, m), np.linspace(0.9, 0.1, m)]))
        with dask_client(n_workers=2) as client:
            fit_store_em(store, hmm, client, n_iter=0)  # compile on the workers
            result = fit_store_em(store, hmm, client, n_iter=2, rel_tol=-np.inf)
        meth, cov, lengths = load_counts(store)
        in_memory = BinomialHMM(m, init_params="")
        in_memory.start_from(hmm.startprob_, hmm.transmat_, hmm.methylation_)
        t_mem = best(lambda: in_memory.m_step(in_memory.e_step(meth, cov, lengths)), repeat=2)
    print(f"\n{n_bins:,} bins, 2 samples, {len(store.chromosomes)} chromosome(s) in 1e6-bin chunks, {m} states")
    print(f"{'store EM iteration (Dask, 2 worker processes)':<48} {result.seconds_per_iteration:>9.3f} s "
          f"({n_bins / result.seconds_per_iteration / 1e6:.2f} M bins/s)")
    print(f"{'in-memory EM iteration (this process)':<48} {t_mem:>9.3f} s ({n_bins / t_mem / 1e6:.2f} M bins/s)")
    print(f"in-memory / store: {t_mem / result.seconds_per_iteration:.2f}x "
          f"(the store pass reads each chunk three times: forward, backward, statistics)")


if __name__ == "__main__":
    main()
