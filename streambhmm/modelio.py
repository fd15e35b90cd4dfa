"""The JSON model file: exactly the documented keys, written atomically."""

from __future__ import annotations

import json

import numpy as np

from . import __version__
from .storage import Location

MODEL_FORMAT = "streambhmm-model"
MODEL_VERSION = 1
MODEL_KEYS = ("format", "version", "method", "n_states", "samples", "methylation", "transmat",
              "startprob", "feature", "n_triples", "chromosomes", "created_by")


def model_to_dict(est, samples, chromosomes, method: str = "ftd") -> dict:
    """The JSON document of a fitted estimator (hmmlearn orientation: transmat rows sum to 1)."""
    return {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "method": method,
        "n_states": int(est.n_components),
        "samples": list(samples),
        "methylation": est.methylation_.tolist(),
        "transmat": est.transmat_.tolist(),
        "startprob": est.startprob_.tolist(),
        "feature": {"kind": "beta", "n_bins": int(est.n_bins)},
        "n_triples": int(getattr(est, "n_triples_", 0)),  # 0: no moments were used (EM alone)
        "chromosomes": list(chromosomes),
        "created_by": f"streambhmm {__version__}",
    }


def write_json(path, document: dict) -> None:
    """Write JSON whole (locally: to a temporary file beside ``path``, renamed into place)."""
    Location.of(path).write_text(json.dumps(document, indent=2) + "\n")


def read_model(path) -> dict:
    with open(path) as fh:
        document = json.load(fh)
    if document.get("format") != MODEL_FORMAT:
        raise ValueError(f"{path}: not a streambhmm model (format {document.get('format')!r})")
    if int(document.get("version", 0)) > MODEL_VERSION:
        raise ValueError(f"{path}: model version {document['version']} is newer than this streambhmm supports")
    missing = [k for k in MODEL_KEYS if k not in document]
    if missing:
        raise ValueError(f"{path}: model lacks {', '.join(missing)}")
    return document


def hmm_from_model(document: dict):
    """A BinomialHMM with the model's parameters (for scoring and decoding)."""
    from .hmm import BinomialHMM

    hmm = BinomialHMM(int(document["n_states"]), n_bins=int(document["feature"]["n_bins"]))
    hmm.startprob_ = np.asarray(document["startprob"], dtype=np.float64)
    hmm.transmat_ = np.asarray(document["transmat"], dtype=np.float64)
    hmm.methylation_ = np.asarray(document["methylation"], dtype=np.float64)
    hmm._check(len(document["samples"]))
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
