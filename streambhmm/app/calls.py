"""The `hmr` and `pmd` jobs: from a counts store to hypomethylated regions or partially
methylated domains in one command, as DNMTools' `hmr` and `pmd` work from a methylome.

Each job fits the model its regions need (learn.domains: a hypomethylated state held to its
definition beside free background states; two states on 5 kb bins for PMDs) from one pass
over the counts (the moments; or a moment store's, with --moments), optionally polishes it
with a few EM iterations, and finds the regions in a posterior pass (distributed.regions),
written as BED9 and a TSV. `pmd` sums the store's bins into its own (io.coarsen) in a
temporary store beside the output, removed afterwards. A job that finds no region stops
with a message that says why instead of writing an empty file.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..distributed.em import fit_store_em
from ..distributed.fitdata import load_moments
from ..learn.selection import one_pass
from ..distributed.regions import HMR_DESERT, PMD_MIN_LENGTH, find_regions, preset_rule, regions_table, write_regions
from ..distributed.tracks import chromosome_lengths
from ..io.coarsen import coarsen
from ..io.ingest import methylated_only, unmethylated_rows
from ..io.outputs import check_replaceable_file, same_name, scratch_directory, written_together
from ..io.progress import em_progress, stage
from ..io.rows import first_few
from ..io.storage import Location, write_json
from ..io.store import COUNTS_FORMAT, NoRoomError, locked, open_store, recorded_format, store_inputs
from ..learn.checks import degeneracy_problems
from ..learn.domains import (DEFINITIONS, HMR_MODEL, MOSTLY_APART, PMD_BIN_SIZE, PMD_LEVEL, PMD_MODEL,
                             TARGET_STATES, UNMETHYLATED_CHECK_READS, CallModel, left_to_hmr, pinned_states,
                             shared_coverage, target_states, unmethylated_share, with_reads_in_every_sample)
from ..learn.hmm import BinomialHMM
from ..learn.model import TooFewDataError
from ..moments.features import DEFAULT_N_BINS
from ..moments.momentstore import MANIFEST, is_moment_store, read_manifest, stale_chunks, update_command
from ..moments.pipeline import select_samples
from ..moments.spec import FeatureSpec
from .modelio import data_settings_of, model_head, model_to_dict
from .segments import output_checked


# the fit's seeded random starts besides FTD's estimate and the quantiles: measured on the real
# sets, 2 give the regions of 8 (Jaccard >= 0.97) in a third of the time
CALL_RANDOM_STARTS = 2
POLISH_TOL = 1e-8  # --polish-em stops earlier when an iteration gains less than this (relative)
CALL_MODELS = {"hmr": HMR_MODEL, "pmd": PMD_MODEL}


@dataclass
class CallSettings:
    """The options of one `hmr` or `pmd` call."""

    kind: str  # "hmr" or "pmd"
    store: str
    output: str
    samples: list | None = None
    moments: str | None = None  # a moment store of the same counts (at the call's bin size)
    polish_em: int = 0
    bin_size: int | None = None  # pmd: PMD_BIN_SIZE
    seed: int = 0
    n_bins: int = DEFAULT_N_BINS
    quiet: bool = False
    save_model: str | None = None  # also write the model the regions were found with (JSON, as `fit` writes)
    chrom_sizes: str | None = None  # UCSC chrom.sizes: regions end at most where their chromosome does

    @property
    def model(self) -> CallModel:
        return CALL_MODELS[self.kind]

    @property
    def coarse_bin_size(self) -> int | None:
        """The bins the call sums the store's into (None: the store's own)."""
        return None if self.kind == "hmr" else (self.bin_size or PMD_BIN_SIZE)

    @property
    def regions(self) -> str:
        return "hypomethylated regions" if self.kind == "hmr" else "partially methylated domains"


@dataclass
class CallOutcome:
    """What a call fitted and wrote."""

    samples: list
    bin_size: int
    hmm: object  # learn.hmm.BinomialHMM
    rule: object  # distributed.regions.RegionRule
    n: int
    unmethylated: np.ndarray  # per sample, the share of bins without methylated reads
    found: dict  # {chromosome: distributed.regions.Regions}
    seconds: dict = field(default_factory=dict)
    em_stopped: str = ""  # --polish-em's EM stopped at its cap before converging: how
    one_pass_fit: object = None  # learn.model.SpectralBinomialHMM: the fit before any EM
    chromosomes: list = field(default_factory=list)  # those the model was fitted on
    left_out: list = field(default_factory=list)  # pmd: those too short to hold a PMD where the samples have reads

    @property
    def lengths(self) -> np.ndarray:
        """Every region's length in bp."""
        return np.concatenate([np.zeros(0, np.int64)] + [r.end - r.start for r in self.found.values()])


def run_call(settings: CallSettings, opened, echo=lambda message: None) -> CallOutcome:
    """Fit, polish (settings.polish_em EM iterations) and call, on the store ``opened``
    (distributed.cluster.store_session: opened for reading, with a Dask client); each step's
    progress is shown unless settings.quiet (io.progress)."""
    output = call_output_checked(settings.kind, settings.output, settings.store, settings.moments, settings.save_model)
    if settings.moments and not is_moment_store(settings.moments):  # said as what it is not: a moment store
        given = Path(settings.moments)
        same = given.resolve() == Path(settings.store).resolve()
        what = (": it is the counts store; leave out --moments, or give" if same else
                ": it is a counts store; give" if recorded_format(given) == COUNTS_FORMAT else "; give")
        taken = not given.exists() or (given.is_dir() and not any(given.iterdir()))  # `moments compute` takes it
        output = settings.moments if taken else "MOMENTS.zarr"
        raise ValueError(f"{settings.moments}: no moment store here (no {MANIFEST}){what} the path of one: "
                         f"`streambhmm moments compute {settings.store} --output {output}` makes one")
    counts = opened.store
    samples = select_samples(counts, settings.samples)
    bin_size = settings.coarse_bin_size or counts.bin_size
    if settings.kind == "hmr" and bin_size > HMR_DESERT:
        raise ValueError(f"{settings.store} has bins of {bin_size:,} bp, and hmr needs bins of at most "
                         f"{HMR_DESERT:,} bp: an HMR spans a few hundred bp to a few kb, so a wider bin averages it "
                         f"with the methylated CpGs around it. Ingest the calls into another store at --bin-size "
                         f"100 (the default)")
    longest = max((counts.n_bins(chrom) for chrom in counts.chromosomes), default=0) * counts.bin_size
    if settings.kind == "pmd" and longest < PMD_MIN_LENGTH:  # no bin size helps: first
        raise ValueError(_refusal(settings, samples, f"no chromosome has data over {PMD_MIN_LENGTH:,} bp, the shortest "
                                                     f"PMD (the longest stretch, from 0 to its last bin with reads: "
                                                     f"{longest:,} bp)")
                         + " Its chromosomes (the contigs or scaffolds of a draft assembly?) are too short to hold a "
                           "PMD.")
    if bin_size > longest:
        raise ValueError(f"{settings.kind}'s bins of {bin_size:,} bp (--bin-size) are longer than the longest stretch "
                         f"of the store's chromosomes "
                         f"that has data (from 0 to its last bin with reads: {longest:,} bp): "
                         f"domains are runs of many bins")
    if bin_size % counts.bin_size:
        nearest = max(round(bin_size / counts.bin_size), 1) * counts.bin_size
        raise ValueError(f"{settings.kind}'s bins of {bin_size:,} bp (--bin-size, {PMD_BIN_SIZE:,} unless given) are "
                         f"not a multiple of the store's bin size ({counts.bin_size:,} bp): its bins cannot be summed "
                         f"into them; pass a multiple, say --bin-size {nearest}")
    # refused before the work, when of another assembly (those too short for a PMD need no line)
    lengths = chromosome_lengths(counts, settings.chrom_sizes, bigwig=False,
                                 unlisted=too_short(counts) if settings.kind == "pmd" else ())
    short = too_short(counts, lengths) if settings.kind == "pmd" else []
    store = counts.restricted(set(counts.chromosomes) - set(short)) if short else counts
    on_short = counts.restricted(short).totals(samples) if short else {}  # {chromosome: each sample's sums}
    if short:
        _refuse_samples_only_on_short(settings, samples, store, on_short)
    seconds = {}
    if bin_size == counts.bin_size:
        outcome = _fit_and_call(settings, store, samples, opened, echo, seconds)
    else:
        # the coarse store lives beside the output (the same filesystem) and goes with the call
        with scratch_directory(output) as scratch:
            start = time.perf_counter()
            echo(f"summing {counts.bin_size} bp bins into {bin_size} bp bins")
            with stage(f"{settings.kind}: summing bins", quiet=settings.quiet, unit="chunks") as progress:
                try:
                    coarse = coarsen(store, bin_size // counts.bin_size, Path(scratch) / "coarse.zarr", samples,
                                     progress)
                except NoRoomError as exc:  # it named the scratch store as if it were one of the user's
                    raise ValueError(f"{output}: no room in {output.parent.resolve()} for the {bin_size:,} bp bins that "
                                     f"{settings.kind} sums into a scratch store beside its output (removed "
                                     f"afterwards): {exc.reason}; nothing was written. Free space there, or write "
                                     f"the regions elsewhere") from None
            seconds["coarsen"] = time.perf_counter() - start
            outcome = _fit_and_call(settings, coarse, samples, opened, echo, seconds, coarsened=True)
    # those where the samples have no reads (excluded on a rerun, another sample's) go unsaid
    outcome.left_out = list(on_short)
    for chrom, found in outcome.found.items():
        # a domain's last summed bin ends where the store's last bin does, not past it, and with
        # --chrom-sizes no region passes its chromosome's end
        data_end = counts.n_bins(chrom) * counts.bin_size
        outcome.found[chrom] = found.cut_at(min(data_end, lengths[chrom]), outcome.rule.min_length)
    with written_together():  # the regions, their table and the model: all or none
        outcome.n = write_regions(outcome.found, outcome.rule, outcome.hmm.methylation_, samples, output,
                                  f"{settings.kind} of {Path(os.path.abspath(settings.store)).name}")  # not "" for "."
        if settings.save_model:
            write_json(settings.save_model, call_model(settings, outcome, counts, bin_size))
    return outcome


def too_short(counts, lengths: dict | None = None) -> list[str]:
    """The chromosomes whose data span less than the shortest PMD, from 0 to the end of the
    store's last bin with reads or to the chromosome's end in ``lengths`` if sooner (where a
    call cuts its regions, Regions.cut_at, whatever its bins): they can hold none, so `pmd`
    leaves them out of its fit and its calls. On an assembly they are most of its contigs
    (chrM, spike-ins, unplaced scaffolds), whose summed bins cost a file each (3,010 contigs:
    17 of pmd's 29 s) and whose few bins, some read thousands of times deeper, would only pull
    on the fit."""
    ends = {chrom: counts.n_bins(chrom) * counts.bin_size for chrom in counts.chromosomes}
    return [chrom for chrom, end in ends.items() if min(end, (lengths or {}).get(chrom, end)) < PMD_MIN_LENGTH]


def _left_to_hmr(kind: str, hmm, bin_size: int) -> str:
    """The levels of the states a pmd call on bins of ``bin_size`` left to HMRs
    (domains.left_to_hmr), as text; "" when there are none."""
    if kind != "pmd":
        return ""
    left = left_to_hmr(hmm.methylation_, hmm.dispersion, bin_size)
    return "; ".join("/".join(f"{v:.3f}" for v in row) for row in np.atleast_2d(hmm.methylation_)[left])


def _refuse_samples_only_on_short(settings: CallSettings, samples, kept, on_short: dict) -> None:
    """Samples whose reads all lie on the chromosomes too short for a PMD (``on_short``: their
    CountsStore.totals there; ``kept``: the store of the others), or who have none, are refused
    before the fit: it would fit them levels no data support, and a joint call would then be
    refused as if its samples covered no chromosome together."""
    totals = kept.totals(samples).values()
    absent = [j for j in range(len(samples)) if not any(sums[j][1] > 0 for sums in totals)]
    if not absent:
        return
    reasons = []
    for j in absent:
        chromosomes = [c for c, sums in on_short.items() if sums[j][1] > 0]
        reasons.append(f"{samples[j]} has reads only on chromosomes whose data end before {PMD_MIN_LENGTH:,} bp, the "
                       f"shortest PMD: {first_few(chromosomes)}" if chromosomes else f"{samples[j]} has no reads")
    others = [s for j, s in enumerate(samples) if j not in absent]
    advice = f" Call {','.join(others)} with --samples." if others else ""
    raise ValueError(_refusal(settings, samples, "; ".join(reasons)) + advice)


def left_out_note(outcome: CallOutcome) -> str | None:
    """What to say of the chromosomes `pmd` left out (too_short; None: none)."""
    if not outcome.left_out:
        return None
    n = len(outcome.left_out)
    chromosomes = "1 chromosome" if n == 1 else f"{n:,} chromosomes"
    return (f"{chromosomes} with data over less than {PMD_MIN_LENGTH:,} bp, the shortest PMD, "
            f"{'is' if n == 1 else 'are'} left out of the fit and the calls: {first_few(outcome.left_out)}")


def call_model(settings: CallSettings, outcome: CallOutcome, counts, bin_size: int) -> dict:
    """The model the call found its regions with, as `fit` writes one (for the --model of
    `report`, `decode`, `regions` and `score`): EM's after --polish-em, else the one-pass fit;
    fitted on bins of ``bin_size`` bp of the samples of ``counts``. "call" names the command and its target states."""
    settings_of = {**data_settings_of(counts, outcome.samples), "bin_size": bin_size}
    document = model_to_dict(outcome.hmm, outcome.samples, outcome.chromosomes,
                             method="refined-em" if settings.polish_em else "refined", **settings_of)
    fit = outcome.one_pass_fit
    document.update(feature=fit.moments_.feature, n_triples=int(fit.n_triples_),
                    call={"command": settings.kind, "target_states": sorted(int(h) for h in outcome.rule.targets)})
    return document


def _fit_and_call(settings: CallSettings, store, samples, opened, echo, seconds, coarsened: bool = False
                  ) -> CallOutcome:
    client = opened.client
    if settings.kind == "hmr" and not settings.moments:  # before the pass it would waste (a genome's)
        _refuse_methylated_only(settings, store, samples)
    start = time.perf_counter()
    echo("the moments: one pass over the counts" if not settings.moments else f"the moments of {settings.moments}")
    # a coarse store is the call's scratch: the progress names what it sums
    what = f"the moments of {settings.store} in {store.bin_size} bp bins" if coarsened else None
    # a moment store is checked against the counts as it was loaded: an update waits meanwhile
    with locked(settings.moments, shared=True) if settings.moments else contextlib.nullcontext():
        data = load_moments(settings.moments or store, samples, FeatureSpec(n_bins=settings.n_bins), client,
                            settings.quiet, 8, what=what, chromosomes=store.chromosomes)
        _check_moments(settings, store, data, opened.store, coarsened)
    seconds["moments"] = time.perf_counter() - start
    if settings.kind == "hmr" and settings.moments:  # after them: a --moments store of other counts is said first
        _refuse_methylated_only(settings, store, samples)
    model = settings.model
    start = time.perf_counter()
    echo(f"fitting {model.n_states} states to the moments")
    with stage(f"{settings.kind}: fit starts", quiet=settings.quiet, unit="starts") as progress:
        try:
            one_pass_fit, hmm = fit_call_model(data.moments, model, settings.seed, progress)
        except TooFewDataError as exc:
            raise ValueError(_too_few(settings, samples, store, exc)) from None
    seconds["fit"] = time.perf_counter() - start
    em_stopped = ""
    if settings.polish_em:
        start = time.perf_counter()
        echo(f"EM: at most {settings.polish_em} iterations")
        with stage(f"{settings.kind}: EM", settings.polish_em, quiet=settings.quiet, unit="iterations",
                   capped=True) as progress:
            polished = fit_store_em(store, hmm, opened.em_client, samples, settings.polish_em,
                                    rel_tol=POLISH_TOL, check=False, report=em_progress(progress))
        seconds["polish"] = time.perf_counter() - start
        em_stopped = polished.stopped_short(f"--polish-em {settings.polish_em}", POLISH_TOL)
        if not em_stopped:
            echo(f"EM converged after {len(polished.history) - 1} iteration(s)")
    unmethylated = _unmethylated_bins(store, samples, data.moments)
    problems = degeneracy_problems(hmm.methylation_, hmm.transmat_, hmm.startprob_, dispersion=hmm.dispersion)
    if problems:
        raise ValueError(_why_none(settings, store, samples, hmm, data.moments, "the fitted model is degenerate: "
                                   + "; ".join(problems)))
    start = time.perf_counter()
    try:
        rule = call_rule(settings.kind, hmm, one_pass_fit, store.bin_size)
    except ValueError:
        all_of_them = bool(target_states(settings.kind, hmm.methylation_, hmm.dispersion, store.bin_size).all())
        background = ("no methylated background to set domains against (a genome without CG methylation, or a "
                      "library of CpG islands such as RRBS)" if settings.kind == "pmd" else
                      "no methylated background to set regions against (a genome without CG methylation?)")
        left_to_hmr = _left_to_hmr(settings.kind, hmm, store.bin_size)
        if left_to_hmr:
            reason = (f"no fitted state is {DEFINITIONS[settings.kind]} but for the state(s) at "
                      f"{left_to_hmr}, which are hypomethylated ({DEFINITIONS['hmr']}); on bins narrower than "
                      f"{PMD_BIN_SIZE:,} bp a hypomethylated state is left to `hmr`, as its islands would chain into "
                      f"domains. Call pmd with --bin-size {PMD_BIN_SIZE} (the default) or more")
        elif not all_of_them:
            reason = f"no fitted state is {DEFINITIONS[settings.kind]}"
        elif settings.kind == "pmd":  # (levels of 0.03 are "partially methylated" by the rule, not to a reader)
            reason = f"no fitted state is methylated (a level of {PMD_LEVEL} or more in some sample): {background}"
        else:
            reason = f"every fitted state is {DEFINITIONS[settings.kind]}: {background}"
        note = NO_PMDS if settings.kind == "pmd" and not all_of_them and not left_to_hmr else ""
        raise ValueError(_why_none(settings, store, samples, hmm, data.moments, reason, note)) from None
    background = np.ones(len(hmm.methylation_), bool)
    background[list(rule.targets)] = False
    if settings.kind == "hmr" and not (np.asarray(hmm.methylation_).min(axis=1)[background] >= METHYLATED).any():
        # hypomethylated against what? (a genome without CG methylation was one long "HMR")
        raise ValueError(_why_none(settings, store, samples, hmm, data.moments, f"no fitted state besides the "
                                   f"{TARGET_STATES['hmr']} ones is methylated (a level of {METHYLATED} or more in "
                                   f"every sample): no methylated background to set regions against (a genome "
                                   f"without CG methylation?)"))
    echo("the regions: a posterior pass over the counts")
    with stage(f"{settings.kind}: regions", quiet=settings.quiet, unit="chunks") as progress:
        found = find_regions(store, hmm, client, rule, samples, progress=progress)
    seconds["regions"] = time.perf_counter() - start
    outcome = CallOutcome(samples, store.bin_size, hmm, rule, 0, unmethylated, found, seconds, em_stopped,
                          one_pass_fit, list(data.chromosomes))
    if outcome.lengths.size == 0:
        raise ValueError(_why_none(settings, store, samples, hmm, data.moments,
                                   f"no run of {TARGET_STATES[settings.kind]} bins passed the rule "
                                   f"({rule.conditions(len(samples))})",
                                   NO_PMDS if settings.kind == "pmd" else ""))
    return outcome


def call_rule(kind: str, hmm, one_pass_fit, bin_size: int):
    """The rule `hmr` or `pmd` (``kind``) finds its regions by under ``hmm`` (the one-pass fit
    ``one_pass_fit``, or EM's from it): the preset's for its states, whose targets held at a
    level cap in the one-pass fit give way to free ones; ValueError when no state is a target."""
    return _free_targets_first(preset_rule(kind, hmm.methylation_, hmm.dispersion, bin_size),
                               pinned_states(CALL_MODELS[kind], one_pass_fit.methylation_))


def _free_targets_first(rule, pinned: np.ndarray):
    """``rule`` without its target states held at a level cap in the one-pass fit, where a free
    state is a target too: the data hold hypomethylated regions of their own, and the held
    state stands in for bins of intermediate levels (on RRBS of K562, a held state at its cap
    of 0.2 beside a free one at 0.02 added 23 "HMRs" averaging 0.3-0.5 on one replicate,
    whose fit held the same bins in a free state at 0.26, not a target, on the other)."""
    kept = tuple(h for h in rule.targets if not pinned[h])
    return replace(rule, targets=kept) if kept else rule


def fit_call_model(moments, model: CallModel, seed: int, progress=None) -> tuple:
    """The one-pass beta-binomial fit of ``model`` (its states' bounds) to ``moments``, and the
    HMM the regions are called with, made from it; a degenerate fit is returned too (the
    caller refuses it with what the data lack)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = one_pass(moments, model.n_states, "refined", seed, allow_degenerate=True, emission="betabinomial",
                       limits=model.limits(), n_random_starts=CALL_RANDOM_STARTS, n_finished=model.n_finished,
                       tol=model.tol, progress=progress)
    hmm = BinomialHMM(model.n_states, emission="betabinomial", stationary_start=True, allow_degenerate=True,
                      limits=model.limits())
    return est, hmm.start_from(est.startprob_, est.transmat_, est.methylation_, est.dispersion_)


def call_output_checked(kind: str, output, store, moments=None, save_model=None) -> Path:
    """The output of the call ``kind`` (segments.output_checked), refused where it would replace what the
    call reads: the counts store, the moment store, and the counts store the moments were
    computed from (`pmd --moments` reads it to check them: a helper's audit wrote a BED over
    its zarr.json); and --save-model's file, refused likewise or where the regions go."""
    inputs = [store]
    if moments:
        inputs.append(moments)
        try:
            source = read_manifest(moments).counts_store
        except Exception:  # noqa: BLE001 - not a readable moment store: the call refuses it, saying why
            source = None
        if source:
            inputs.append(source)
    checked = output_checked(output, kind, *inputs)
    if save_model:
        store_inputs(*inputs).check(save_model)
        for path, what in ((output, "the regions (--output) are"), (regions_table(output), "the regions' table is")):
            if same_name(save_model, path):
                raise ValueError(f"{save_model}: {what} written there; give --save-model another name, say "
                                 f"{Path(output).with_suffix('.model.json')}")
        check_replaceable_file(save_model, model_head(kind))  # this command's model, not a file of yours or fit's
    return checked


def _check_moments(settings: CallSettings, store, data, whole, coarsened: bool = False) -> None:
    """A moment store given with --moments must hold these samples' moments at the call's bins,
    of these counts (``whole``: the counts store, ``store`` the part of it the call reads): each
    partial's digest that of the store's chunk. On bins the call summed (``store`` the summed
    one) the moments are another store's, chunked otherwise: they must be up to date with that
    counts store, and it must hold the same reads as ``store`` in the same bins, on the
    chromosomes the call reads (CountsStore.counts_digests: equal totals are not enough, a
    helper's audit gave moments of the same reads 2 kb along)."""
    if not settings.moments:
        return
    manifest = read_manifest(settings.moments)
    source = manifest.get("source", {})
    if source.get("bin_size") != store.bin_size:
        way_out = (f"leave out --moments ({settings.kind} sums the bins itself), or give those of the calls ingested "
                   f"at --bin-size {store.bin_size} (`streambhmm moments STORE_{store.bin_size} --output MOMENTS.zarr`)"
                   if coarsened else f"give those of {settings.store} (`streambhmm moments {settings.store} --output "
                   f"MOMENTS.zarr`), or leave out --moments")
        raise ValueError(f"{settings.moments} holds moments of {source.get('bin_size')} bp bins; `{settings.kind}` "
                         f"needs {store.bin_size} bp bins: {way_out}")
    own = FeatureSpec(n_bins=settings.n_bins).resolve(data.moments.n_samples)  # what the call's pass computes
    mom = data.moments
    if data.pooled or (mom.projection_dim, mom.projection_seed) != (own.projection_dim, own.seed):
        kind = "pooled" if data.pooled else "projected" if mom.projected else "Beta-map"
        wanted = (f"moments of the {own.dim}-dimensional projected feature (seed {own.seed})" if own.projection_dim
                  else "the joint Beta-map moments")
        raise ValueError(f"{settings.moments} holds {kind} moments of {mom.n_samples} sample(s); "
                         f"`{settings.kind}` fits {wanted} there, as `streambhmm moments` computes them by default "
                         f"(without --pooled or --feature)")
    counts = whole
    if coarsened:
        if not source.get("counts_store") or not Location.of(source["counts_store"]).exists():
            raise ValueError(f"{settings.moments} was computed from {source.get('counts_store') or 'merged stores'}, "
                             f"which is not there to check it against {settings.store}: leave out --moments")
        counts = open_store(source["counts_store"])
        read = set(store.chromosomes)
        theirs = counts.restricted(read & set(counts.chromosomes)).counts_digests(manifest["samples"])
        ours = store.counts_digests(manifest["samples"])
        if theirs != ours:
            differ = sorted(chrom for chrom in theirs.keys() | ours.keys() if theirs.get(chrom) != ours.get(chrom))
            raise ValueError(f"{settings.moments} was computed from {source['counts_store']}, whose reads differ from "
                             f"{settings.store}'s summed into {store.bin_size:,} bp bins (on {first_few(differ)}): "
                             f"leave out --moments")
    differ = stale_chunks(manifest, counts)
    if differ:
        # `moments compute` updates a moment store from the counts store it was computed from, no other
        advice = (f"update them with {update_command(manifest, counts, settings.moments)}"
                  if source.get("counts_store") == counts.path.resolve() else
                  f"compute {settings.store}'s with `streambhmm moments compute {settings.store} -o NEW_MOMENTS` "
                  f"and give that")
        raise ValueError(f"{settings.moments} does not hold the moments of {counts.path}'s chunks ({differ} of its "
                         f"chunks differ; they were computed from {source.get('counts_store')}): other counts, or "
                         f"these counts chunked otherwise (--chunk-size); {advice}, or leave out --moments")


def _refusal(settings: CallSettings, samples, reason: str) -> str:
    """The first words of a call's refusal: no regions in the store's samples, and why."""
    return f"no {settings.regions} in {settings.store} ({','.join(samples)}): {reason}."


def _too_few(settings: CallSettings, samples, store, exc: TooFewDataError) -> str:
    """The message of a call whose data are too few to fit its model (``store``: the counts it
    was fitted on, at its bins)."""
    bin_size = store.bin_size
    longest = max((store.n_bins(chrom) for chrom in store.chromosomes), default=0)
    if longest < 3:  # a triple lies within one chromosome (a helper's 3,832 contigs of 200 bp)
        why = (f"No chromosome holds 3 bins (the longest holds data over {longest * bin_size:,} bp), and a triple "
               f"lies within one: the {len(store.chromosomes):,} chromosomes (contigs or scaffolds of a draft "
               f"assembly?) are too short.")
    else:
        scale = ("a PMD spans at least 50 kb" if settings.kind == "pmd" else
                 "the model needs a background as well as the regions")
        why = f"They cover too little of the genome ({scale}): a targeted or sparse assay, or an excerpt."
    return (f"{_refusal(settings, samples, 'too few data')} The fit of {settings.model.n_states} states needs at "
            f"least {exc.needed:,} triples of consecutive covered {bin_size:,} bp bins, and these data hold "
            f"{exc.n_triples:,}. {why}" + (f" {JOINT}" if len(samples) > 1 else ""))


METHYLATED = 0.5  # an HMR's background: most reads methylated, in every sample
NO_PMDS = ("Either the genome has no PMDs (embryonic stem cells, most healthy tissues) and so none to call, or its "
           "domains average 0.7 or more (Lister et al.'s definition of a PMD is a mean below 0.7), or the assay reads "
           "too small a part of the genome to show one (RRBS, a targeted panel): a PMD is at least 50 kb of bins "
           "with reads.")
APART = "Call the samples one at a time, or choose samples that cover the same CpGs."
JOINT = ("A joint call's model and regions are those of all its samples together; a sample alone may hold "
         "regions of its own: call it with --samples NAME.")
SHARED_NOTED = 0.9  # above, samples that cover the same CpGs: the few bins one lacks explain no refusal


def _why_none(settings: CallSettings, store, samples, hmm, moments, reason: str, note: str = "") -> str:
    """The message of a call that found no region: what the model found, what the data lack
    (``moments``: unmethylated reads, bins with reads in every sample; ``store``: chromosomes
    with reads in every sample) and ``note``; the data's lack replaces a note on the biology."""
    # three decimals: a level next to a rule's bound (0.7) must not print as the bound
    levels = ", ".join("/".join(f"{v:.3f}" for v in row) for row in hmm.methylation_)
    lines = [f"{_refusal(settings, samples, reason)} The fitted states' levels: {levels}."]
    missing = missing_unmethylated(settings.kind, samples, _unmethylated_bins(store, samples, moments))
    if missing:
        lines.append(missing)
    shared = shared_coverage(moments)
    if shared is not None and shared < SHARED_NOTED:
        # the single-bin histogram counts the bins of triples of consecutive bins with reads
        some = with_reads_in_every_sample(shared)
        lines.append(f"{some[0].upper()}{some[1:]} reads in every sample ({', '.join(samples)}) among the runs of "
                     f"three or more bins with reads, and a region needs reads in each of them.")
        if shared < MOSTLY_APART:  # most bins lack a sample: the data, not the biology, explain the call
            note = APART
    elif len(samples) > 1 and shared is None:  # (the histogram is kept per sample for 3 or more)
        apart = chromosomes_apart(store, samples)
        if apart:
            lines.append(f"No chromosome has reads in every sample ({', '.join(samples)}), and a region needs reads "
                         f"in each of them: {apart}.")
            note = APART
    if len(samples) > 1 and note != APART:
        note = f"{note} {JOINT}".strip()
    return " ".join(lines + [note] if note else lines)


def _samples_with_reads(store, samples) -> dict:
    """Per chromosome where any of ``samples`` has reads, those that have."""
    return {chrom: [s for s, (_, reads) in zip(samples, sums) if reads > 0]
            for chrom, sums in store.totals(samples).items()}


def chromosomes_apart(store, samples) -> str | None:
    """Where each of ``samples`` has reads, when no chromosome has reads in every one (None: one has)."""
    covered = _samples_with_reads(store, samples)
    if any(len(on) == len(samples) for on in covered.values()):
        return None
    return "; ".join(f"{s} on {first_few([c for c, on in covered.items() if s in on]) or 'none'}" for s in samples)


def partial_chromosomes(store, samples) -> list[str]:
    """The chromosomes with reads in some of ``samples`` but not in all, each as "chrom (no
    reads in A, B)"."""
    return [f"{chrom} (no reads in {first_few([s for s in samples if s not in on])})"
            for chrom, on in _samples_with_reads(store, samples).items() if len(on) < len(samples)]


def hmr_notes(store, outcome: "CallOutcome") -> list[str]:
    """What to say of a call's HMRs beside the regions (most_of_the_genome, whole_chromosomes)."""
    by_chromosome = store.bins_with_reads_by_chromosome(outcome.samples)
    data_ends = {chrom: store.n_bins(chrom) * store.bin_size for chrom in outcome.found}
    notes = [most_of_the_genome(by_chromosome, outcome), whole_chromosomes(by_chromosome, data_ends, outcome)]
    return [note for note in notes if note]


def most_of_the_genome(by_chromosome: dict, outcome: "CallOutcome") -> str | None:
    """What to say when a call's HMRs hold more than half of every sample's bins with reads
    (None: fewer; ``by_chromosome`` each chromosome's, per sample): a genome mostly
    unmethylated (a plant's gene-rich arms, a mutant without CG methylation in part), whose
    HMRs are its unmethylated background more than focal regions (a helper's trial: 192 HMRs
    over 0.80 of DMRcaller's 1 Mb of Arabidopsis Chr3)."""
    with_reads = sum(by_chromosome.values(), np.zeros(len(outcome.samples), np.int64))
    # the HMRs' own bins with reads, not their lengths: on sparse data (RRBS) a region spans many bins without
    called = int(sum(regions.n_bins.sum() for regions in outcome.found.values()))
    if not outcome.n or (2 * called <= with_reads).any():
        return None
    return (f"the HMRs hold {called / with_reads.max():.0%} of the bins with reads: most of this methylome is "
            f"hypomethylated, so they are its unmethylated background (a plant's gene-rich arms?) more than "
            f"focal regions; unless the assay reads mostly CpG islands (RRBS, a targeted panel), whose bins with "
            f"reads are mostly hypomethylated, and then they are focal all the same")


WHOLE_CHROMOSOME_BINS = 20  # a chromosome with fewer bins with reads is not said to be one HMR
WHOLE_SHARE = 0.9


def whole_chromosomes(by_chromosome: dict, data_ends: dict, outcome: "CallOutcome") -> str | None:
    """What to say of chromosomes that are one HMR (None: none is): one region holding at least
    WHOLE_SHARE of the bins with reads there of every sample (at least WHOLE_CHROMOSOME_BINS),
    and as long as WHOLE_SHARE of the chromosome's data (``data_ends``: from 0 to the end of
    its last bin with reads): in a joint call a region's bins count where any sample has reads,
    so a region over the part one sample covers, or over an island that is all another covers,
    is no such note (helpers 86 and 88). An unmethylated genome (chrM, a lambda spike-in) is
    one long HMR, as DNMTools calls it too: a true call, but seldom one a user wants beside the
    nuclear genome's."""
    whole = []
    for chrom, regions in outcome.found.items():
        with_reads = int(by_chromosome[chrom].max())
        if len(regions.n_bins) == 1 and with_reads >= WHOLE_CHROMOSOME_BINS \
                and regions.n_bins[0] >= WHOLE_SHARE * with_reads \
                and regions.end[0] - regions.start[0] >= WHOLE_SHARE * data_ends[chrom]:
            whole.append(f"{chrom} ({int(regions.end[0] - regions.start[0]):,} bp)")
    if not whole:
        return None
    each = "is one HMR over all its" if len(whole) == 1 else "are each one HMR over all their"
    return (f"{first_few(whole)} {each} bins with reads ({WHOLE_SHARE:.0%} or more): an unmethylated genome, as "
            f"mitochondria and a lambda spike-in are (DNMTools calls them so too). To leave such a chromosome out, "
            f"drop its lines from the BED, or ingest again with --exclude-chromosomes")


def chromosomes_left_out(store, samples) -> str | None:
    """What to say of a joint call's chromosomes with reads in some of ``samples`` but not in
    all: a region needs reads in each, so none is called there (None: there is no such one)."""
    partial = partial_chromosomes(store, samples) if len(samples) > 1 else []
    if not partial:
        return None
    chromosomes = "1 chromosome" if len(partial) == 1 else f"{len(partial):,} chromosomes"
    return (f"no region is called on {chromosomes} with reads in some of the samples but not in all, as a region "
            f"needs reads in each: {first_few(partial)}")


def _refuse_methylated_only(settings: CallSettings, store, samples) -> None:
    """HMRs are refused, before the fit, for files listing methylated cytosines only
    (io.ingest.methylated_only)."""
    why = methylated_only(store, samples, lambda others: _calls_of(store, others))
    if why:
        raise ValueError(_refusal(settings, samples, why))


def _calls_of(store, samples) -> str:
    """The call of ``samples`` to suggest: jointly, or each alone where no chromosome has reads
    in all of them (the joint call would be refused)."""
    if len(samples) > 1 and chromosomes_apart(store, samples):
        return f"call {', '.join(samples)} each alone with --samples (no chromosome has reads in all of them)"
    return f"call {','.join(samples)} with --samples"


def _unmethylated_bins(store, samples, moments) -> np.ndarray:
    """Per sample, the share of bins without methylated reads (unmethylated_share), NaN
    where its ingest counted its rows: they say it better (_refuse_methylated_only)."""
    share = unmethylated_share(moments)
    rows_known = np.array([s in store.meta.samples and unmethylated_rows(store, s) is not None for s in samples])
    return np.where(rows_known, np.nan, share)


def missing_unmethylated(kind: str, samples, unmethylated) -> str | None:
    """What to say when some sample has no bin without methylated reads (HMRs only)."""
    missing = [s for s, share in zip(samples, unmethylated) if share == 0]
    if kind != "hmr" or not missing:
        return None
    return (f"none of the bins with {UNMETHYLATED_CHECK_READS} or more reads in {', '.join(missing)} has every read "
            f"unmethylated: the input seems to list methylated cytosines only (as Lister et al. 2009's mc files do), "
            f"so the unmethylated CpGs at the core of every HMR are missing, and regions called from it are not HMRs.")
