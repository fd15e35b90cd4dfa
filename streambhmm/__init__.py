"""streambhmm: spectral and EM learning of Binomial HMMs for DNA methylation.

The public names are imported on first use, so the command line starts quickly
(``streambhmm --version`` imports neither scipy nor numba nor zarr)."""

import importlib
import sys
import types

__version__ = "0.1.0"

_PUBLIC = {
    "MatchedError": "evaluate", "match_states": "evaluate", "matched_error": "evaluate",
    "beta_map": "features", "SpectralBinomialHMM": "model", "Moments": "moments",
    "compute_moments": "moments", "Model": "simulate", "paper_model": "simulate",
    "population_moments": "simulate", "simulate": "simulate", "SpectrumError": "spectral",
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


class _Package(types.ModuleType):
    """Keeps the public function ``simulate`` from being replaced by the submodule of the
    same name when that is imported (eager imports used to override it the same way)."""

    def __setattr__(self, name, value):
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
