"""The JSON model file: exactly the documented keys, written atomically, and read back as a
validated ModelFile."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from .. import __version__
from ..io.documents import Document, version_problem, written_by
from ..io.names import sample_name_problem
from ..io.storage import Location
from ..io.store import CountsStore
from ..learn.checks import validate_parameters
from ..learn.emissions import EMISSIONS
from ..learn.evaluate import differential_states
from ..learn.hmm import BinomialHMM
from ..learn.states import item_rgb, state_colours, state_labels
from ..moments.spec import Grouped, Grouping

MODEL_FORMAT = "streambhmm-model"
MODEL_HEAD = b'{\n  "format": "streambhmm-model"'  # how a model file begins (write_json of its document)
MODEL_VERSION = 1
MODEL_KEYS = ("format", "version", "method", "n_states", "samples", "methylation", "transmat",
              "startprob", "feature", "n_triples", "chromosomes", "created_by")


def model_head(command: str | None = None):
    """Whether a file's bytes are a model that ``command`` wrote (io.outputs.check_replaceable_file):
    `hmr`'s and `pmd`'s (--save-model) record their command under "call", `fit`'s (None)
    record none. Each replaces only its own (a helper's audit: `hmr --save-model fitted.json`
    replaced a 3-state model of `fit`); the whole document is read, "call" being its last key."""
    def written_by_it(data: bytes) -> bool:
        found = written_by(data) if data.startswith(MODEL_HEAD) else None
        return found is not None and found[1] == command
    return written_by_it


def model_to_dict(est, samples, chromosomes, method: str = "ftd", bin_size: int | None = None,
                  sample_settings: dict | None = None) -> dict:
    """The JSON document of a fitted estimator (hmmlearn orientation: transmat rows sum to 1).
    ``samples``: a Grouping, or samples taken jointly; a pooled model has one methylation
    column, shared by all its samples (recorded as "pooled": true); ``labels``
    name the states from their levels (streambhmm.learn.states). What the model depends on
    besides its parameters is recorded when known, and a store that differs is refused
    (:func:`check_model_fits_store`): ``bin_size`` (bp) and ``sample_settings`` ({sample:
    :func:`ingest_settings`})."""
    grouping = Grouping.of(samples)
    document = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "method": method,
        "n_states": int(est.n_components),
        "samples": list(grouping.samples),
        "methylation": est.methylation_.tolist(),
        "transmat": est.transmat_.tolist(),
        "startprob": est.startprob_.tolist(),
        "feature": est.moments_.feature if hasattr(est, "moments_") else {"kind": "beta", "n_bins": int(est.n_bins)},
        "n_triples": int(getattr(est, "n_triples_", 0)),  # 0: no moments were used (EM alone)
        "chromosomes": list(chromosomes),
        "created_by": f"streambhmm {__version__}",
        "labels": state_labels(est.methylation_, grouping.columns),
    }
    if bin_size is not None:
        document["bin_size"] = int(bin_size)
    if sample_settings:
        document["sample_settings"] = sample_settings
    if getattr(est, "emission", "binomial") == "betabinomial":
        document.update(emission="betabinomial", dispersion=np.asarray(est.dispersion_).tolist())
    return {**document, "pooled": True} if grouping.pooled else document


def model_labels(document) -> list[str]:
    """The states' labels: the model file's, or (older files) made from its levels."""
    if "labels" in document:
        return list(document["labels"])
    return state_labels(document["methylation"], model_grouping(document).columns)


def model_grouping(document) -> Grouping:
    """The grouping a model document records: its samples, pooled or jointly."""
    return Grouping(document["samples"], bool(document.get("pooled")))


@dataclass(frozen=True)
class ModelFile(Grouped, Document):
    """A model file's document (what :func:`read_model` validated) with its parameters typed;
    its keys also read as a mapping's (io.documents.Document), the rarer ones that way."""

    path: str
    document: dict
    grouping: Grouping
    n_states: int
    n_bins: int
    methylation: np.ndarray
    transmat: np.ndarray
    startprob: np.ndarray
    emission: str
    dispersion: np.ndarray | None
    labels: list[str]
    bin_size: int | None
    sample_settings: dict
    method: str
    feature: dict
    n_triples: int  # 0: no moments were used (EM alone)
    created_by: str
    loglik: float | None  # EM's, on the counts (None: a moment fit)
    loglik_history: list | None
    moment_loss: float | None  # the moment fit's criterion
    methylation_ci: np.ndarray | None  # block-bootstrap intervals (states x samples x 2)

    @classmethod
    def of(cls, document: dict, path="") -> "ModelFile":
        """The typed view of a model document (no validation: :func:`read_model` validates)."""
        emission = document.get("emission", "binomial")
        return cls(str(path), document, model_grouping(document),
                   int(document["n_states"]), int(document["feature"]["n_bins"]),
                   *(np.asarray(document[key], dtype=np.float64) for key in ("methylation", "transmat", "startprob")),
                   emission, np.asarray(document["dispersion"], dtype=np.float64) if emission == "betabinomial"
                   else None, model_labels(document), document.get("bin_size"), document.get("sample_settings", {}),
                   document.get("method", ""), dict(document["feature"]), int(document.get("n_triples", 0)),
                   document.get("created_by", ""), document.get("loglik"), document.get("loglik_history"),
                   document.get("moment_loss"), np.asarray(document["methylation_ci"], dtype=np.float64)
                   if "methylation_ci" in document else None)

    def to_json(self) -> dict:
        return self.document

    def hmm(self) -> BinomialHMM:
        """A BinomialHMM with the model's parameters, for scoring and decoding."""
        hmm = BinomialHMM(self.n_states, n_bins=self.n_bins, emission=self.emission)
        hmm.startprob_, hmm.transmat_, hmm.methylation_ = self.startprob, self.transmat, self.methylation
        if self.emission == "betabinomial":
            hmm.dispersion_ = self.dispersion
        return hmm


def read_model(path) -> ModelFile:
    """The model file at ``path``, validated: every problem raises ValueError naming the
    file (malformed JSON, wrong format or version, missing keys, parameters of the wrong
    shape, not finite, outside [0, 1] or not normalized)."""
    document = _read_json(path)
    if not isinstance(document, dict) or document.get("format") != MODEL_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not a streambhmm model (format {found!r})")
    version = document.get("version")
    problem = version_problem(version, MODEL_VERSION)
    if problem == "not an integer":
        raise ValueError(f"{path}: the model's version must be an integer, got {version!r}")
    if problem == "newer":
        raise ValueError(f"{path}: model version {version} is newer than this streambhmm supports")
    missing = [k for k in MODEL_KEYS if k not in document]
    if missing:
        raise ValueError(f"{path}: model lacks {', '.join(missing)}")
    for key, (valid, expected) in FIELD_TYPES.items():
        if key in document and not valid(document[key]):
            raise ValueError(f"{path}: {key} must be {expected}, got {document[key]!r:.200}")
    _check_samples(path, document["samples"])
    feature = document["feature"]
    if not isinstance(feature, dict) or not _is_count(feature.get("n_bins")) or feature["n_bins"] < 1:
        raise ValueError(f"{path}: feature must name n_bins, a positive integer; got {feature!r:.200}")
    n_states = document["n_states"]
    if not isinstance(n_states, int) or isinstance(n_states, bool) or n_states < 1:
        raise ValueError(f"{path}: n_states must be a positive integer, got {n_states!r}")
    if document.get("pooled", False) not in (True, False):
        raise ValueError(f"{path}: pooled must be true or false, got {document['pooled']!r:.200}")
    _check_parameters(path, document, n_states)
    labels = document.get("labels", [f"{h}" for h in range(n_states)])
    if not isinstance(labels, list) or len(labels) != n_states or not all(isinstance(v, str) and v for v in labels) \
            or len(set(labels)) != n_states or any(c.isspace() for v in labels for c in v):
        raise ValueError(f"{path}: labels must be {n_states} distinct names without spaces, got {labels!r:.200}")
    return ModelFile.of(document, path)


def _read_json(path):
    """The JSON at ``path``; ValueError when it cannot be read as JSON."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a valid model file: malformed JSON ({exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a valid model file: not UTF-8 text") from None
    except RecursionError:
        raise ValueError(f"{path}: not a valid model file: JSON nested too deeply") from None


def _check_samples(path, samples) -> None:
    if not isinstance(samples, list) or not samples or not all(isinstance(s, str) and s for s in samples) \
            or len(set(samples)) != len(samples):
        raise ValueError(f"{path}: samples must be a non-empty list of distinct names, got {samples!r:.200}")
    problem = next(filter(None, map(sample_name_problem, samples)), None)  # the rule ingest applies
    if problem:
        raise ValueError(f"{path}: samples hold an invalid {problem}: {samples!r:.200}")


def _check_parameters(path, document: dict, n_states: int) -> None:
    """The levels, transitions, start, emission (and dispersion) and intervals, checked."""
    columns = model_grouping(document).columns
    p, _, _ = validate_parameters(document["methylation"], document["transmat"], document["startprob"],
                                  n_samples=len(columns), source=str(path))
    if p.shape[0] != n_states:
        raise ValueError(f"{path}: n_states is {n_states} but methylation lists {p.shape[0]} states")
    emission = document.get("emission", "binomial")
    if emission not in EMISSIONS:
        raise ValueError(f"{path}: emission must be one of {', '.join(EMISSIONS)}, got {emission!r:.100}")
    if emission == "betabinomial":
        try:
            rho = np.asarray(document.get("dispersion"), dtype=np.float64)
        except (TypeError, ValueError):
            rho = np.full(1, np.nan)
        if rho.shape != p.shape or not np.isfinite(rho).all() or (rho < 0).any() or (rho >= 1).any():
            raise ValueError(f"{path}: a beta-binomial model needs dispersion: {p.shape[0]} x {p.shape[1]} values "
                             f"in [0, 1), got {str(document.get('dispersion'))[:200]}")
    for key, shape in (("methylation_ci", (*p.shape, 2)), ("transmat_ci", (n_states, n_states, 2))):
        if key in document and _shape(document[key]) != shape:
            raise ValueError(f"{path}: {key} must be {' x '.join(map(str, shape))} numbers, got "
                             f"{_shape(document[key]) or 'ragged lists'}")


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_numbers(value) -> bool:
    """A number, or a list (of lists...) of numbers (walked without recursion: any depth)."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif not _is_number(item):
            return False
    return True


def _shape(value) -> tuple | None:
    """The shape of nested lists, None when ragged."""
    try:
        return np.shape(value)
    except ValueError:
        return None


def _is_names(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _is_sample_settings(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(settings, dict) and isinstance(settings.get("context", ""), str)
        and settings.get("merge_strands", False) in (True, False) for settings in value.values())


# the type of each field that is not checked more closely in read_model
FIELD_TYPES = {
    "method": (lambda v: isinstance(v, str), "a string"),
    "n_triples": (_is_count, "a non-negative integer"),
    "chromosomes": (_is_names, "a list of chromosome names"),
    "created_by": (lambda v: isinstance(v, str), "a string"),
    **{key: (lambda v: isinstance(v, list) and _is_numbers(v), "a list of numbers (in lists)")
       for key in ("methylation", "transmat", "startprob", "dispersion", "methylation_ci", "transmat_ci",
                   "loglik_history")},
    "loglik": (_is_number, "a number"),
    "moment_loss": (_is_number, "a number"),
    "bin_size": (lambda v: _is_count(v) and v > 0, "a positive integer (bp)"),
    "sample_settings": (_is_sample_settings, "{sample: {\"context\": text, \"merge_strands\": true or false}}"),
}


def model_for_store(counts: CountsStore, model) -> ModelFile:
    """The model file at ``model``, read and checked against the opened counts store
    ``counts`` (:func:`check_model_on_store`)."""
    document = read_model(model)
    check_model_on_store(document, counts)
    return document


def check_model_on_store(document: ModelFile, counts: CountsStore) -> None:
    """Refuse a counts store that lacks the model's samples, or whose bins or samples'
    reading differ from the model's (:func:`check_model_fits_store`)."""
    model, store = document.path, counts.path
    missing = [s for s in document.samples if s not in counts.samples]
    if missing:
        raise ValueError(f"{model} was fitted to sample(s) {', '.join(missing)}, which {store} "
                         f"lacks (it has {', '.join(counts.samples)})")
    check_model_fits_store(model, document, store, counts)


def data_settings_of(counts, samples) -> dict:
    """The keyword arguments of :func:`model_to_dict` that record what a model of ``samples``
    fitted to the counts store ``counts`` depends on besides its parameters."""
    return {"bin_size": counts.bin_size, "sample_settings": {s: ingest_settings(counts, s) for s in samples}}


def ingest_settings(counts, sample: str) -> dict:
    """How ``sample`` was read into the counts store ``counts``, as far as a model depends on
    it: its cytosine context and whether strands were merged (what the store records)."""
    provenance = counts.meta.samples[sample]
    settings = {"context": provenance.get("context")}
    if isinstance(provenance.get("options"), dict) and "merge_strands" in provenance["options"]:
        settings["merge_strands"] = bool(provenance["options"]["merge_strands"])
    return {k: v for k, v in settings.items() if v is not None}


def check_model_fits_store(model, document: dict, store, counts) -> None:
    """Refuse a store whose bins, or whose samples' context or strand merging, differ from
    those the model was fitted to (a model written before these were recorded is not checked)."""
    bin_size = document.get("bin_size")
    if bin_size is not None and bin_size != counts.bin_size:
        raise ValueError(f"{model} was fitted to {bin_size:,} bp bins, but {store} has {counts.bin_size:,} bp bins; "
                         f"fit a model to this store, or use a store ingested with --bin-size {bin_size}")
    for sample, fitted in document.get("sample_settings", {}).items():
        if sample not in counts.meta.samples:
            continue
        here = ingest_settings(counts, sample)
        differ = [f"{key} {fitted[key]} (in {store}: {here[key]})" for key in fitted
                  if key in here and here[key] != fitted[key]]
        if differ:
            raise ValueError(f"{model} was fitted to sample {sample} read with {', '.join(differ)}; fit a model "
                             f"to this store")


STATE_TABLE_HEAD = b"state\tlabel\titemRgb\t"  # how write_state_table's tables begin


def write_state_table(path, document: dict) -> None:
    """A TSV of the model's states: index, label, BED itemRgb colour, weight (stationary
    share of the bins), self-transition, the level in each sample and, for a beta-binomial
    model, the overdispersion in each sample."""
    columns = model_grouping(document).columns
    colours = state_colours(document["methylation"])
    header = ["state", "label", "itemRgb", "weight", "stay", *(f"level_{c}" for c in columns)]
    if "dispersion" in document:
        header += [f"dispersion_{c}" for c in columns]
    lines = ["\t".join(header)]
    for h, label in enumerate(model_labels(document)):
        values = [str(h), label, item_rgb(colours[h]), f"{document['startprob'][h]:.6f}",
                  f"{document['transmat'][h][h]:.6f}", *(f"{v:.6f}" for v in document["methylation"][h])]
        if "dispersion" in document:
            values += [f"{v:.6f}" for v in document["dispersion"][h]]
        lines.append("\t".join(values))
    Location.of(path).write_text("\n".join(lines) + "\n")


def format_states(methylation, transmat, startprob, samples, labels=None) -> str:
    """One row per state: its level in each sample, its weight (the model's startprob: the
    stationary distribution, each state's share of the bins), its self-transition and its
    label (streambhmm.learn.states)."""
    width = max(10, *(len(s) for s in samples))
    label = "  label" if labels else ""
    rows = [f"{'state':>5}  " + "  ".join(f"{s:>{width}}" for s in samples) + f"  {'weight':>7}  {'stay':>6}{label}"]
    for h, levels in enumerate(methylation):
        rows.append(f"{h:>5}  " + "  ".join(f"{v:>{width}.3f}" for v in levels)
                    + f"  {startprob[h]:>7.3f}  {transmat[h][h]:>6.3f}" + (f"  {labels[h]}" if labels else ""))
    return "\n".join(rows)


def format_differential(methylation, samples, threshold: float) -> str:
    """The line naming the differential states (learn.evaluate); empty for one sample."""
    if len(samples) < 2:
        return ""
    found = differential_states(methylation, threshold)
    listed = ("state " if len(found) == 1 else "states ") + ", ".join(map(str, found)) if found else "none"
    return f"differential (levels differ across samples by more than {threshold:g}): {listed}"
