"""The JSON model file: exactly the documented keys, written atomically."""

from __future__ import annotations

import json

import numpy as np

from . import __version__
from .checks import validate_parameters
from .storage import Location

MODEL_FORMAT = "streambhmm-model"
MODEL_VERSION = 1
MODEL_KEYS = ("format", "version", "method", "n_states", "samples", "methylation", "transmat",
              "startprob", "feature", "n_triples", "chromosomes", "created_by")


def model_to_dict(est, samples, chromosomes, method: str = "ftd", pooled: bool = False) -> dict:
    """The JSON document of a fitted estimator (hmmlearn orientation: transmat rows sum to 1).
    A pooled model has one methylation column, shared by all its ``samples``."""
    document = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "method": method,
        "n_states": int(est.n_components),
        "samples": list(samples),
        "methylation": est.methylation_.tolist(),
        "transmat": est.transmat_.tolist(),
        "startprob": est.startprob_.tolist(),
        "feature": est.moments_.feature if hasattr(est, "moments_") else {"kind": "beta", "n_bins": int(est.n_bins)},
        "n_triples": int(getattr(est, "n_triples_", 0)),  # 0: no moments were used (EM alone)
        "chromosomes": list(chromosomes),
        "created_by": f"streambhmm {__version__}",
    }
    return {**document, "pooled": True} if pooled else document


def model_columns(samples, pooled: bool) -> list[str]:
    """Names of a model's methylation columns: its samples, or one for a pooled model."""
    return ["pooled"] if pooled else list(samples)


def write_json(path, document: dict) -> None:
    """Write JSON whole (locally: to a temporary file beside ``path``, renamed into place)."""
    Location.of(path).write_text(json.dumps(document, indent=2) + "\n")


def read_model(path) -> dict:
    """The model document at ``path``, validated: every problem raises ValueError naming the
    file (malformed JSON, wrong format or version, missing keys, parameters of the wrong
    shape, not finite, outside [0, 1] or not normalized)."""
    try:
        with open(path) as fh:
            document = json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a valid model file: malformed JSON ({exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a valid model file: not UTF-8 text") from None
    if not isinstance(document, dict) or document.get("format") != MODEL_FORMAT:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ValueError(f"{path}: not a streambhmm model (format {found!r})")
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{path}: the model's version must be an integer, got {version!r}")
    if version > MODEL_VERSION:
        raise ValueError(f"{path}: model version {version} is newer than this streambhmm supports")
    missing = [k for k in MODEL_KEYS if k not in document]
    if missing:
        raise ValueError(f"{path}: model lacks {', '.join(missing)}")
    samples = document["samples"]
    if not isinstance(samples, list) or not samples or not all(isinstance(s, str) and s for s in samples) \
            or len(set(samples)) != len(samples):
        raise ValueError(f"{path}: samples must be a non-empty list of distinct names, got {samples!r:.200}")
    feature = document["feature"]
    if not isinstance(feature, dict) or not isinstance(feature.get("n_bins"), int) or feature["n_bins"] < 1:
        raise ValueError(f"{path}: feature must name n_bins, a positive integer; got {feature!r:.200}")
    n_states = document["n_states"]
    if not isinstance(n_states, int) or isinstance(n_states, bool) or n_states < 1:
        raise ValueError(f"{path}: n_states must be a positive integer, got {n_states!r}")
    if document.get("pooled", False) not in (True, False):
        raise ValueError(f"{path}: pooled must be true or false, got {document['pooled']!r:.200}")
    columns = model_columns(samples, document.get("pooled"))
    p, _, _ = validate_parameters(document["methylation"], document["transmat"], document["startprob"],
                                  n_samples=len(columns), source=str(path))
    if p.shape[0] != n_states:
        raise ValueError(f"{path}: n_states is {n_states} but methylation lists {p.shape[0]} states")
    return document


def hmm_from_model(document: dict):
    """A BinomialHMM with the parameters of a model document from :func:`read_model` (which
    validated them), for scoring and decoding."""
    from .hmm import BinomialHMM

    hmm = BinomialHMM(int(document["n_states"]), n_bins=int(document["feature"]["n_bins"]))
    hmm.startprob_, hmm.transmat_, hmm.methylation_ = (np.asarray(document[key], dtype=np.float64)
                                                       for key in ("startprob", "transmat", "methylation"))
    return hmm


def model_for_store(store, model):
    """(counts store, model document, BinomialHMM), checking that the store has the
    model's samples."""
    from .store import open_store

    counts, document = open_store(store), read_model(model)
    missing = [s for s in document["samples"] if s not in counts.samples]
    if missing:
        raise ValueError(f"{model} was fitted to sample(s) {', '.join(missing)}, which {store} "
                         f"lacks (it has {', '.join(counts.samples)})")
    return counts, document, hmm_from_model(document)
