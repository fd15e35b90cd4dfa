"""The jobs of `decode`, `regions` and `tracks`: a model applied to a counts store, and the
files it writes named. The commands (app/cli/segments.py) parse the options, open a Dask
client, call one of these and print what they return; progress goes through
``progress(done, total)``."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import numpy as np

from ..distributed.decode import SEGMENTS_HEAD, decode_store
from ..distributed.em import score_store
from ..distributed.regions import RegionRule, check_regions_name, find_regions, preset_rule, \
    regions_heads, regions_table, rule_with, write_regions
from ..distributed.tracks import (BIGWIG_HEAD, DENSE_ENTRY_BYTES, SPARSE_ENTRY_BYTES, bigwig_entries,
                                  check_bigwig_room, chromosome_lengths, safe_name,
                                  write_methylation, write_posteriors)
from ..io.outputs import (Inputs, beside_name, check_distinct, check_replaceable_file, interruptions_held,
                          remove_leftovers, scratch_directory)
from ..io.ingest import methylated_only
from ..io.store import store_inputs
from ..learn.states import without_repeat
from ..moments.pipeline import select_samples
from ..moments.spec import Grouped, Grouping
from .modelio import STATE_TABLE_HEAD, check_model_on_store, model_grouping, read_model, write_state_table


@dataclass
class ModelOnStore(Grouped):
    """A counts store and a model of its samples: the model's document, its BinomialHMM and
    its states' labels."""

    store: str
    model: str
    counts: object  # io.store.CountsStore
    document: dict
    hmm: object  # learn.hmm.BinomialHMM
    labels: list[str]

    @classmethod
    def read(cls, store, model) -> "ModelOnStore":
        """The model at ``model``, read and checked, for the store at ``store`` (not opened
        yet: :meth:`on` checks it)."""
        document = read_model(model)
        return cls(str(store), model, None, document, document.hmm(), document.labels)

    @classmethod
    def open(cls, counts, model) -> "ModelOnStore":
        """The model at ``model`` on ``counts``, the store as opened under the command's lock
        (distributed.cluster.store_session)."""
        return cls.read(counts.path, model).on(counts)

    def on(self, counts) -> "ModelOnStore":
        """The job on ``counts``, the store as opened under the command's lock, checked to
        have the model's samples read as the model's were (modelio.check_model_on_store)."""
        check_model_on_store(self.document, counts)
        return replace(self, counts=counts)

    @property
    def grouping(self) -> Grouping:
        """The model's samples, pooled or jointly (its ``samples``, ``pooled`` and ``columns`` read through)."""
        return model_grouping(self.document)

    def states(self, names: str | None, option: str = "--targets") -> list[int]:
        """The states of a comma-separated list of labels or indices (None: every state)."""
        if names is None:
            return list(range(len(self.labels)))
        states = [self.state(name.strip(), option) for name in names.split(",") if name.strip()]
        if not states:
            raise ValueError(f"{option} {names!r} names no state; give labels or indices, comma-separated: "
                             f"{', '.join(self.labels)} (or 0..{len(self.labels) - 1})")
        return states

    def state(self, name: str, option: str) -> int:
        """A state given by its label or its index."""
        if name in self.labels:
            return self.labels.index(name)
        if name.isdigit() and int(name) < len(self.labels):
            return int(name)
        raise ValueError(f"{option}: no state {name!r}; the model's are {', '.join(self.labels)} "
                         f"(or 0..{len(self.labels) - 1})")


@dataclass
class DecodeOutputs:
    """The files `decode` writes: a BED per segmentation (path, samples) and the states' table."""

    beds: list[tuple[Path, list[str]]]
    table: Path

    @property
    def paths(self) -> list[Path]:
        return [path for path, _ in self.beds] + [self.table]

    def check(self, output, store, model) -> None:
        """Refuse, before any work, a file that cannot be written (io.outputs), one that is or
        lies inside the store or the model the command reads, or is a file the store was
        ingested from, and a file named after ``output`` that this command did not write."""
        inputs = store_inputs(store, model)
        check_distinct([(path, f"the segments of {', '.join(samples)}") for path, samples in self.beds]
                       + [(self.table, "the states' table")])
        for path in self.paths:
            inputs.check(path)
            if Path(path) == Path(output):
                check_replaceable_file(path, SEGMENTS_HEAD)
            else:  # named after it (and checked as an output too)
                check_replaceable_file(path, SEGMENTS_HEAD if path != self.table else STATE_TABLE_HEAD, output)


def decode_outputs(job: ModelOnStore, output, posteriors: bool = False) -> DecodeOutputs:
    """Name what `decode` writes (:meth:`DecodeOutputs.check` refuses what cannot be written). A joint
    model writes OUTPUT; a pooled model segments each sample on its own, into OUTPUT with
    .SAMPLE before its extension. The states' table is beside OUTPUT (NAME.states.tsv for NAME.bed)."""
    if job.pooled and posteriors:
        raise ValueError(f"{job.model} is a pooled model; --posteriors is written for joint models only")
    output = Path(output)
    beds = [(output.with_name(f"{output.stem}.{group[0]}{output.suffix}") if job.pooled else output, group)
            for group in job.grouping.groups]
    return DecodeOutputs(beds, beside_name(output, ".states.tsv"))


def run_decode(job: ModelOnStore, outputs: DecodeOutputs, client, max_gap: int = 1000, posteriors: bool = False,
               progress=None) -> Iterator[tuple[Path, object]]:
    """Segment the store: write each BED of ``outputs`` and yield (path,
    distributed.decode.DecodeReport) as it is done, then write the states' table."""
    for path in outputs.paths:
        remove_leftovers(path)  # of a killed decode
    for path, samples in outputs.beds:
        track = f"{Path(job.model).stem} states" + (f" ({samples[0]})" if job.pooled else "")
        yield path, decode_store(job.counts, job.hmm, client, path, samples, max_gap, posteriors, progress=progress,
                                 labels=job.labels, track=track)
    write_state_table(outputs.table, job.document)


def run_score(counts, hmm, client, samples: list[str], chromosomes=None, pooled: bool = False) -> dict:
    """{chromosome: log-likelihood} of the store under the model (distributed.em.score_store)."""
    return score_store(counts, hmm, client, Grouping(samples, pooled), chromosomes)


def output_checked(path, command: str, store, *inputs) -> Path:
    """The regions' output file, refused before any work when it or the table beside it
    cannot be written (io.outputs), is or lies inside the counts ``store``, one of the other
    ``inputs`` the command reads or a file the store's samples were ingested from, or holds
    what ``command`` ("hmr", "pmd", "regions") did not write (regions_heads)."""
    store_inputs(store, *inputs).check(path)
    track, table = regions_heads(command)
    checked = check_replaceable_file(check_regions_name(path), track)  # the BED first: the one named
    check_replaceable_file(regions_table(path), table, path)
    return checked


@dataclass
class FoundRegions:
    """What `regions` wrote: the rule it applied and the regions' count and lengths (bp)."""

    rule: object  # distributed.regions.RegionRule
    n: int
    lengths: np.ndarray


def region_rule(job: ModelOnStore, preset: str | None, targets: str | None, **changes):
    """The rule of a preset for the model's levels, or of the states named (labels or
    indices), with the settings in ``changes`` that are not None."""
    if job.pooled:
        raise ValueError(f"{job.model} is a pooled model; regions are found with joint models (fit without "
                         f"--pooled, or with --samples for one sample)")
    if preset:
        why = methylated_only(job.counts, job.samples, lambda others: f"fit a model of {','.join(others)} "
                              f"(fit --samples {','.join(others)})") if preset == "hmr" else None
        if why:
            raise ValueError(f"no HMRs in {job.store} ({','.join(job.samples)}) under {job.model}: {why}.")
        rule = as_called(preset_rule(preset, job.hmm.methylation_, job.hmm.dispersion, job.counts.bin_size),
                         preset, job.document.get("call"))
    else:
        rule = RegionRule(tuple(sorted(set(job.states(targets)))), name="region")
    return rule_with(rule, **changes)


def as_called(rule, preset: str, call) -> RegionRule:
    """``rule`` for a model that `hmr` or `pmd` saved (--save-model: its ``call``), where
    ``preset`` is that command's: its targets those the call kept (a target held at its cap
    gives way to a free one), so the same regions are found again."""
    states = call.get("target_states") if isinstance(call, dict) and call.get("command") == preset else None
    if not isinstance(states, list) or not all(isinstance(h, int) for h in states):
        return rule
    kept = tuple(h for h in rule.targets if h in states)
    return replace(rule, targets=kept) if kept else rule


def run_regions(job: ModelOnStore, rule, output, client, progress=None) -> FoundRegions:
    """Find the regions of ``rule`` (see :func:`region_rule`) and write them as BED9 and a TSV
    beside it (distributed.regions.write_regions)."""
    found = find_regions(job.counts, job.hmm, client, rule, job.samples, progress=progress)
    n = write_regions(found, rule, job.hmm.methylation_, job.samples, output, f"model {Path(job.model).name}")
    lengths = np.concatenate([r.end - r.start for r in found.values()]) if n else np.zeros(0, np.int64)
    return FoundRegions(rule, n, lengths)


@dataclass
class Track:
    """One bigWig file written: its path, what it holds and in how many bins."""

    path: Path
    description: str
    n_bins: int


def run_tracks(counts, prefix, samples: list[str] | None, min_coverage: int = 1, chrom_sizes=None,
               job: ModelOnStore | None = None, client=None, states: list[int] = (), progress=None) -> Iterator[Track]:
    """Write bigWig files one at a time, and yield each once all are in place: the methylation
    fraction of each of ``samples`` (None: the model's, else all; bins with at least
    ``min_coverage`` reads), PREFIX.SAMPLE.methylation.bw;
    with a model ``job``, the posterior of each of ``states``, PREFIX.stateH-LABEL.posterior.bw
    (a pooled model: one per sample and state, PREFIX.SAMPLE.stateH-LABEL.posterior.bw).
    Every file name, and the chrom.sizes against the data, is checked before the first is written."""
    samples = select_samples(counts, samples if samples is not None else job.samples if job else None)
    lengths = chromosome_lengths(counts, chrom_sizes)
    methylation = [(sample, Path(f"{prefix}.{safe_name(sample)}.methylation.bw")) for sample in samples]
    runs = []
    if job is not None:
        names = [f"state{h}-{safe_name(without_repeat(job.labels[h]))}" for h in states]
        stem = (lambda group: f"{prefix}.{safe_name(group[0])}") if job.pooled else (lambda group: prefix)
        runs = [(group, [Path(f"{stem(group)}.{n}.posterior.bw") for n in names]) for group in job.grouping.groups]
    check_distinct([(path, f"the methylation of {sample}") for sample, path in methylation]
                   + [(path, f"a posterior of {', '.join(group)}") for group, paths in runs for path in paths])
    inputs = Inputs(counts.path.url, job.model if job else None, chrom_sizes, ingested=counts.ingested_files)
    for path in [path for _, path in methylation] + [path for _, paths in runs for path in paths]:
        inputs.check(path)
        check_replaceable_file(path, BIGWIG_HEAD, f"{prefix}.*")  # named after the prefix: never a file of another's
        remove_leftovers(path)  # of a killed run
    first = methylation[0][1] if methylation else runs[0][1][0]
    check_bigwig_room(first.parent, f"{prefix}.*", n_files=len(methylation) + sum(len(paths) for _, paths in runs))
    # written into one scratch directory beside them and renamed into place together at the end:
    # a run stopped half way leaves none (the scratch goes with it), whatever the number of files
    finished = []  # (writer, what it holds)
    with scratch_directory(first) as scratch:  # (beside them, which removes a killed run's first: its room counts)
        for sample, path in methylation:
            check_bigwig_room(first.parent, path, n_entries=bigwig_entries(counts, [sample]),
                              entry_bytes=DENSE_ENTRY_BYTES)
            finished.append((write_methylation(counts, sample, path, lengths, min_coverage, progress, scratch),
                             f"methylation of {sample}"))
        # side by side: at the rate the methylation's files took, on the same bins (a posterior's
        # values compress less: 9.5 bytes an entry against 7.6 on IMR90 chr22)
        rate = 1.25 * max((writer.size / writer.entries for writer, _ in finished if writer.entries),
                          default=SPARSE_ENTRY_BYTES)
        for group, paths in runs:
            check_bigwig_room(first.parent, f"{prefix}.*", n_entries=len(paths) * bigwig_entries(counts, group),
                              entry_bytes=rate)
            writers = write_posteriors(job.counts, job.hmm, client, group, states, paths, lengths, progress, scratch)
            finished += [(writer, f"posterior of state {h} {job.labels[h]}") for h, writer in zip(states, writers)]
        with interruptions_held():
            for writer, _ in finished:
                writer.put_in_place()
    for writer, what in finished:
        yield Track(writer.path, what, writer.entries)
