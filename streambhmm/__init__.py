"""streambhmm: spectral and EM learning of Binomial HMMs for DNA methylation.

The subpackages follow the data flow: io (text to counts store), moments (the one pass),
learn (in-memory estimators), distributed (work on a store on Dask), app (commands).

The public names are imported on first use, so the command line starts quickly
(``streambhmm --version`` imports neither scipy nor numba nor zarr)."""

import importlib
import os
import sys

__version__ = "0.1.0"


def _numba_cache_outside_the_package() -> None:
    """numba caches compiled kernels beside their source by default, inside site-packages,
    where pip does not remove them: after `pip uninstall`, or `pip install -e` over
    `pip install .`, the leftover folders import as an empty namespace package that
    shadows the real one. Keep the cache in the user's cache directory instead (a
    NUMBA_CACHE_DIR set by the user wins)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(cache, "streambhmm", "numba")
    if "numba" in sys.modules:  # imported before us: its configuration has read the environment already
        sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]


_numba_cache_outside_the_package()

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

