"""streambhmm: spectral and EM learning of Binomial HMMs for DNA methylation.

The subpackages follow the data flow: io (text to counts store), moments (the one pass),
learn (in-memory estimators), distributed (work on a store on Dask), app (commands).

The public names are imported on first use, so the command line starts quickly
(``streambhmm --version`` imports neither scipy nor numba nor zarr)."""

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "MatchedError": "learn.evaluate", "match_states": "learn.evaluate", "matched_error": "learn.evaluate",
    "beta_map": "moments.features", "SpectralBinomialHMM": "learn.model", "BinomialHMM": "learn.hmm",
    "Moments": "moments.sums", "compute_moments": "moments.sums", "Model": "learn.simulate",
    "paper_model": "learn.simulate", "population_moments": "learn.simulate", "simulate": "learn.simulate",
    "SpectrumError": "learn.spectral",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
        globals()[name] = value  # once
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])

