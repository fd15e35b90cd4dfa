"""How `hmr`'s model and rule were chosen, measured on the four real chromosome sets (README,
"HMRs and PMDs").

    python scripts/hmr_rule_choices.py [--dnmtools-calls DIR] [--parts 1,2,3]

1. Free models: beta-binomial EM with 2-8 states (best of 3 random starts), the lowest
   state's level and overdispersion per set: whether a hypomethylated state exists without
   being defined; and EM on bsseq IMR90 chr22 started from the MethylSeekR excerpt's 6-state
   model (the same cell line and chromosome).
2. The call's choices: background states (2, 3, 5), minimum bins (3, 4, 5), and whether a
   region bridges covered bins of other states: on the MethylSeekR excerpt the Jaccard with
   DNMTools' HMRs outside its PMDs (where its calls are HMRs), on dmrseq IMR90 chr21 (no
   unmethylated CpGs) the megabases called and the calls averaging above 0.4. Then, with
   hmr's choices, the shoulders' window (none, 10, 20, 40 covered bins).
3. What the data are: CpGs of the MethylSeekR excerpt missing from bsseq's chr22 and their
   levels; rows without methylated reads in each file.
4. DNMTools' own cut instead of the minimum of bins: each run of hypomethylated bins scored
   as DNMTools scores a domain (the sum of its bins' unmethylated fractions), against the
   scores of the runs the same model finds in the same chromosome with its covered bins
   shuffled; runs kept at an empirical p-value under the Benjamini-Hochberg step-up cutoff
   at 0.01 (DNMTools' hmr); then, as hmr does, a level below 0.5 and the shoulders. On the
   four sets and the MethylSeekR excerpt thinned to a quarter of its reads
   (compare_dnmtools.py's thinning).

DNMTools' calls come from --dnmtools-calls (a `compare_dnmtools.py --workdir`, its msr22/
folder), or ../shared/data/reference for the excerpt's (the same, byte for byte).
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import warnings
from pathlib import Path

import numpy as np

from compare_dnmtools import SETS, away_from, covered_bases, intersect, jaccard, read_bed, thin
from streambhmm.distributed.shoulders import SHOULDER_WINDOW

SHARED = Path(__file__).resolve().parents[2] / "shared"


def load(key: str, tmp: Path, files=None, fmt: str | None = None):
    """(methylated, coverage, positions, lengths) of a set's covered 100 bp bins, replicates
    summed (``files`` in ``fmt``: another set than SETS[key])."""
    from streambhmm.io.ingest import ingest
    from streambhmm.io.store import open_store
    from streambhmm.moments.pipeline import plan_chunks

    if files is None:
        _, files, fmt = SETS[key]
    ingest(files, "S", tmp / f"{key}.zarr", fmt=fmt)
    store = open_store(tmp / f"{key}.zarr")
    meth, cov, pos, lengths = [], [], [], []
    for chrom in store.chromosomes:
        n = 0
        for plan in plan_chunks(store, ["S"], chromosomes=[chrom]):
            m, c = plan.ref.read()
            rows = np.flatnonzero(c[:, 0])
            meth.append(m[rows, 0]), cov.append(c[rows, 0]), pos.append(plan.ref.positions(rows))
            n += rows.size
        lengths.append(n)
    return np.concatenate(meth), np.concatenate(cov), np.concatenate(pos), np.array(lengths)


def free_em(meth, cov, lengths, m: int, starts: int = 3):
    from streambhmm.learn.hmm import BinomialHMM, EncodedCounts, random_parameters, run_em

    data = EncodedCounts(meth[:, None], cov[:, None], lengths)
    best = None
    for seed in range(starts):
        hmm = BinomialHMM(m, emission="betabinomial", stationary_start=True, init_params="",
                          allow_degenerate=True).start_from(*random_parameters(m, 1, seed))
        history = run_em(hmm, lambda: hmm.e_step(data), 2000, 1e-9)
        if best is None or history[-1] > best[0]:
            best = (history[-1], hmm)
    return best[1]


def lowest(hmm) -> str:
    h = int(np.argmin(hmm.methylation_[:, 0]))
    return f"{hmm.methylation_[h, 0]:.2f} ({hmm.dispersion_[h, 0]:.3f})"


def hmr_model(moments, background: int = 3):
    """The one-pass model `hmr` fits (its hypomethylated state and ``background`` others), and
    that model as an HMM."""
    from streambhmm.learn.domains import HYPO_DISPERSION, HYPO_LEVEL, CallModel
    from streambhmm.learn.hmm import BinomialHMM
    from streambhmm.learn.selection import one_pass

    model = CallModel("hmr", 1 + background, (HYPO_LEVEL,) + (1.0,) * background,
                      (HYPO_DISPERSION,) + (1.0,) * background)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = one_pass(moments, model.n_states, "refined", 0, True, emission="betabinomial", limits=model.limits(),
                       n_random_starts=2)
    return est, BinomialHMM(model.n_states, emission="betabinomial").start_from(
        est.startprob_, est.transmat_, est.methylation_, est.dispersion_)


def hmr_runs(hmm, meth, cov, pos, lengths, bridge: bool = False):
    """(per chromosome: its rows and the runs of the hypomethylated state (state 0), and the
    posteriors) of the counts in ``hmm``."""
    from streambhmm.distributed.regions import RegionRule, regions_of

    post = hmm.predict_proba(meth[:, None], cov[:, None], lengths)
    runs, offset = [], 0
    for n in lengths:
        part = slice(offset, offset + n)
        runs.append((part, regions_of(pos[part], post[part, 0], [(0, meth[part], cov[part])], 1, 100,
                                      RegionRule((0,), 0.5, 1000, 0, 1, "HMR", bridge))))
        offset += n
    return runs, post


def widened(runs, keeps, est, post, meth, cov, pos, window: int = SHOULDER_WINDOW) -> np.ndarray:
    """The kept runs of each chromosome (``keeps``: a mask per chromosome) widened over their
    shoulders as `hmr`'s walks widen them (``window`` 0: not widened), as (start, end) rows."""
    from streambhmm.distributed.shoulders import Profile, expected_levels, widen

    level = expected_levels(post, [(0, meth, cov)], est.methylation_, est.dispersion_)[:, 0]  # as hmr's walks read
    found = []
    for (part, r), keep in zip(runs, keeps):
        starts, ends = r.start[keep], r.end[keep]
        if window:
            n = part.stop - part.start
            profile = Profile(np.arange(n), pos[part], level[part], level[part], meth[part, None].astype(np.int64),
                              cov[part, None].astype(np.int64))
            starts, ends, _, _ = widen(starts, ends, profile, n, float(est.methylation_[0, 0]), 1000, 100, window)
        found.append(np.stack([starts, ends], axis=1))
    return np.concatenate(found)


def call_regions(meth, cov, pos, lengths, moments, background: int, min_bins: int, bridge: bool,
                 window: int = SHOULDER_WINDOW) -> np.ndarray:
    """`hmr`'s call with other choices: the one-pass model, then runs of the hypomethylated
    state widened over their shoulders (``window`` 0: not widened)."""
    est, hmm = hmr_model(moments, background)
    runs, post = hmr_runs(hmm, meth, cov, pos, lengths, bridge)
    return widened(runs, [r.n_bins >= min_bins for _, r in runs], est, post, meth, cov, pos, window)


def span_levels(iv: np.ndarray, meth, cov, pos) -> np.ndarray:
    cum_m, cum_c = np.r_[0, np.cumsum(meth)], np.r_[0, np.cumsum(cov)]
    i, j = np.searchsorted(pos, iv[:, 0]), np.searchsorted(pos, iv[:, 1])
    return (cum_m[j] - cum_m[i]) / np.maximum(cum_c[j] - cum_c[i], 1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dnmtools-calls", default=None)
    parser.add_argument("--parts", default="1,2,3,4", help="which parts to run (part 1's EM fits take longest)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))

    if args.dnmtools_calls:
        here = Path(args.dnmtools_calls) / "msr22"
        hmrs, pmds = read_bed(here / "dnmtools-hmr.bed"), read_bed(here / "dnmtools-pmd.bed")
    else:
        here = SHARED / "data" / "reference" / "dnmtools_IMR90_chr22"
        hmrs, pmds = read_bed(here / "IMR90.hmr.bed"), read_bed(here / "IMR90.pmd.bed")
    with tempfile.TemporaryDirectory() as tmp:
        data = {key: load(key, Path(tmp)) for key in SETS}
        if "4" in parts:
            quarter = thin(SETS["msr22"][1], "methylseekr", Path(tmp) / "quarter.tab.gz")
            data["quarter"] = load("quarter", Path(tmp), [quarter], "methylseekr")
    if "1" in parts:
        free_models(data)
    if "2" in parts:
        call_choices(data, hmrs, pmds)
    if "3" in parts:
        the_data(data, hmrs, pmds)
    if "4" in parts:
        shuffled_null(data, hmrs, pmds)


def free_models(data):
    print("1. The lowest state of free beta-binomial EM fits: level (overdispersion)\n")
    print("| data set | " + " | ".join(f"{m} states" for m in range(2, 9)) + " |")
    print("|---|" + "---|" * 7)
    fits = {}
    for key, (meth, cov, pos, lengths) in data.items():
        fits[key] = {m: free_em(meth, cov, lengths, m) for m in range(2, 9)}
        print(f"| {SETS[key][0]} | " + " | ".join(lowest(fits[key][m]) for m in range(2, 9)) + " |", flush=True)
    from streambhmm.learn.hmm import BinomialHMM, EncodedCounts, run_em

    source, (meth, cov, _, lengths) = fits["msr22"][6], data["bsseq22"]
    moved = BinomialHMM(6, emission="betabinomial", stationary_start=True, allow_degenerate=True).start_from(
        source.startprob_, source.transmat_, source.methylation_, source.dispersion_)
    encoded = EncodedCounts(meth[:, None], cov[:, None], lengths)
    run_em(moved, lambda: moved.e_step(encoded), 2000, 1e-9)
    print(f"\nEM on bsseq IMR90 chr22 from the MethylSeekR excerpt's 6-state model: its lowest state "
          f"{lowest(source)} becomes {lowest(moved)}")


def call_choices(data, hmrs, pmds):
    from streambhmm import compute_moments

    print("\n2. The call's choices (the one-pass model, as `hmr` fits it)\n")
    print("| background states | minimum bins | bridges covered bins | MethylSeekR: Jaccard where DNMTools is right, "
          "Mb, share inside DNMTools' PMDs, calls above 0.3 | dmrseq IMR90 chr21: Mb, calls above 0.4 |")
    print("|---|---|---|---|---|")
    moments = {key: compute_moments(d[0], d[1], d[3], n_bins=30) for key, d in data.items()}
    for background in (2, 3, 5):
        for min_bins in (3, 4, 5):
            for bridge in (False, True):
                msr = call_regions(*data["msr22"], moments["msr22"], background, min_bins, bridge)
                imr = call_regions(*data["imr90-21"], moments["imr90-21"], background, min_bins, bridge)
                high = int((span_levels(imr, *data["imr90-21"][:3]) > 0.4).sum())
                partial = int((span_levels(msr, *data["msr22"][:3]) > 0.3).sum())
                in_pmds = covered_bases(intersect(msr, pmds)) / max(covered_bases(msr), 1)
                print(f"| {background} | {min_bins} | {'yes' if bridge else 'no'} | "
                      f"{jaccard(away_from(msr, pmds), away_from(hmrs, pmds)):.3f}, "
                      f"{covered_bases(msr) / 1e6:.2f}, {in_pmds:.0%}, {partial} | {covered_bases(imr) / 1e6:.2f}, "
                      f"{high} |", flush=True)
    print("\nThe shoulders (3 background states, 4 bins, no bridging)\n")
    print("| window (covered bins) | MethylSeekR: Jaccard where DNMTools is right, Mb, share inside DNMTools' PMDs, "
          "calls above 0.3 | dmrseq IMR90 chr21: Mb, calls above 0.4 |")
    print("|---|---|---|")
    for window in (0, 10, 20, 40):
        msr = call_regions(*data["msr22"], moments["msr22"], 3, 4, False, window)
        imr = call_regions(*data["imr90-21"], moments["imr90-21"], 3, 4, False, window)
        print(f"| {window or 'none'} | {jaccard(away_from(msr, pmds), away_from(hmrs, pmds)):.3f}, "
              f"{covered_bases(msr) / 1e6:.2f}, {covered_bases(intersect(msr, pmds)) / max(covered_bases(msr), 1):.0%}, "
              f"{int((span_levels(msr, *data['msr22'][:3]) > 0.3).sum())} | {covered_bases(imr) / 1e6:.2f}, "
              f"{int((span_levels(imr, *data['imr90-21'][:3]) > 0.4).sum())} |", flush=True)


def the_data(data, hmrs, pmds):
    from streambhmm import compute_moments

    print("\n3. The data")
    meth, cov, pos, _ = data["msr22"]
    lo, hi = int(hmrs[0, 0]), int(hmrs[-1, 1])
    inside = np.zeros(hi - lo, bool)
    for a, b in pmds:
        inside[max(a, lo) - lo:max(min(b, hi) - lo, 0)] = True
    in_pmd = sum(inside[a - lo:b - lo].sum() for a, b in hmrs)
    total = int((hmrs[:, 1] - hmrs[:, 0]).sum())
    out = away_from(hmrs, pmds)
    within = hmrs[~np.isin(hmrs[:, 0], out[:, 0])]
    print(f"DNMTools' HMRs on the MethylSeekR excerpt: {in_pmd / total:.1%} of their {total:,} bases inside its own "
          f"PMD calls; mean level {pooled(within, meth, cov, pos):.2f} of those touching a PMD, "
          f"{pooled(out, meth, cov, pos):.2f} of the others")
    msr = data["msr22"]
    ours = call_regions(*msr, compute_moments(msr[0], msr[1], msr[3], n_bins=30), 3, 4, False)  # hmr's own choices
    covered = np.zeros(hi - lo, bool)
    for a, b in ours:
        covered[max(a, lo) - lo:max(min(b, hi) - lo, 0)] = True
    levels = span_levels(out, meth, cov, pos)
    for low, high in ((0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.4), (0.4, 1.01)):
        chosen = out[(levels >= low) & (levels < high)]
        bases = int((chosen[:, 1] - chosen[:, 0]).sum())
        found = sum(int(covered[a - lo:b - lo].sum()) for a, b in chosen)
        print(f"  DNMTools' HMRs outside its PMDs averaging {low}-{min(high, 1.0)}: {len(chosen)}, {bases:,} bp, "
              f"{found / max(bases, 1):.0%} of their bases in ours")
    msr_rows = np.loadtxt(SETS["msr22"][1][0], usecols=(1, 2, 3), dtype=np.int64)
    bsseq = np.concatenate([np.loadtxt(f, skiprows=1, usecols=(1,), dtype=np.int64) for f in SETS["bsseq22"][1]])
    missing = ~np.isin(msr_rows[:, 0], bsseq + 1)
    levels = msr_rows[missing, 2] / msr_rows[missing, 1]
    print(f"CpGs of the MethylSeekR excerpt missing from bsseq's chr22 (its positions + 1): {missing.sum():,}; "
          f"their levels below 0.2: {(levels < 0.2).mean():.1%}")
    for key in ("bsseq22", "h1-21", "imr90-21"):
        for path in SETS[key][1]:
            with gzip.open(path, "rt") as fh:
                rows = np.loadtxt(fh, skiprows=1, usecols=(3, 4), dtype=np.int64)
            print(f"{path.name}: {int(((rows[:, 0] == 0) & (rows[:, 1] > 0)).sum()):,} of {int((rows[:, 1] > 0).sum()):,} "
                  f"covered rows without a methylated read")


def shuffled_null(data, hmrs, pmds, fdr: float = 0.01):
    from streambhmm import compute_moments

    print(f"\n4. DNMTools' cut (scores against shuffled bins, step-up at {fdr}) against hmr's minimum of 4 bins\n")
    print("| data set | hypomethylated state | runs (in shuffled bins) | 4 bins: HMRs, Mb, where DNMTools is right, "
          "calls above 0.3 | shuffled null: the same | the runs it keeps, by bins |")
    print("|---|---|---|---|---|---|")
    lo, hi = int(hmrs[0, 0]), int(hmrs[-1, 1])
    rng = np.random.default_rng(0)
    titles = {key: title for key, (title, _, _) in SETS.items()} | {"quarter": "MethylSeekR, a quarter of the reads"}

    def scores(runs, m, c):
        """DNMTools' score of each run: its bins' unmethylated fractions summed."""
        unmethylated = np.r_[0, np.cumsum(1 - m / np.maximum(c, 1))]
        out = []
        for part, r in runs:
            first = np.searchsorted(pos[part], r.start) + part.start
            last = np.searchsorted(pos[part], r.end - 100) + part.start
            out.append(unmethylated[last + 1] - unmethylated[first])
        return np.concatenate(out)

    for key, (meth, cov, pos, lengths) in data.items():
        est, hmm = hmr_model(compute_moments(meth, cov, lengths, n_bins=30))
        runs, post = hmr_runs(hmm, meth, cov, pos, lengths)
        shuffled = np.concatenate([o + rng.permutation(n) for o, n in zip(np.r_[0, np.cumsum(lengths)[:-1]], lengths)])
        null = np.sort(scores(hmr_runs(hmm, meth[shuffled], cov[shuffled], pos, lengths)[0], meth[shuffled],
                              cov[shuffled]))
        observed = scores(runs, meth, cov)
        p = (null.size - np.searchsorted(null, observed, side="right")) / max(null.size, 1)
        ranked, n = np.sort(p), p.size
        i = 1
        while i < n and ranked[i - 1] < fdr * i / n:  # DNMTools' get_stepup_cutoff
            i += 1
        significant = p < ranked[i - 1] if n else np.zeros(0, bool)
        bins = np.concatenate([r.n_bins for _, r in runs])
        below = np.concatenate([r.levels()[:, 0] for _, r in runs]) < 0.5
        cells = []
        for keep in (below & (bins >= 4), below & significant):
            calls = widened(runs, np.split(keep, np.cumsum([len(r) for _, r in runs])[:-1]), est, post, meth, cov,
                            pos)
            calls = calls[span_levels(calls, meth, cov, pos) < 0.5]
            right = (jaccard(away_from(calls[(calls[:, 0] >= lo) & (calls[:, 1] <= hi)], pmds), away_from(hmrs, pmds))
                     if key in ("msr22", "bsseq22", "quarter") else float("nan"))
            cells.append(f"{len(calls)}, {covered_bases(calls) / 1e6:.2f}, {right:.3f}, "
                         f"{int((span_levels(calls, meth, cov, pos) > 0.3).sum())}")
        kept_bins = np.bincount(bins[significant], minlength=5)
        print(f"| {titles[key]} | {est.methylation_[0, 0]:.2f} | {len(observed)} ({null.size}) | {cells[0]} | "
              f"{cells[1]} | {', '.join(f'{b}: {kept_bins[b]}' for b in range(1, 5))}, more: "
              f"{kept_bins[5:].sum()} |", flush=True)


def pooled(iv, meth, cov, pos) -> float:
    cum_m, cum_c = np.r_[0, np.cumsum(meth)], np.r_[0, np.cumsum(cov)]
    i, j = np.searchsorted(pos, iv[:, 0] - 99), np.searchsorted(pos, iv[:, 1])
    return float((cum_m[j] - cum_m[i]).sum() / (cum_c[j] - cum_c[i]).sum())


if __name__ == "__main__":
    main()
