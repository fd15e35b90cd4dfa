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
    shadows the real one. Keep the cache in the user's cache directory instead, or, where
    that cannot be written (a container's user without a home), in a private directory of
    the system's temporary one (a NUMBA_CACHE_DIR set by the user wins)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = os.path.join(cache, "streambhmm", "numba")
    if not _writable_directory(cache):  # numba would fail at import: "cannot cache function ...: no locator"
        cache = _private_temporary_cache()
    os.environ["NUMBA_CACHE_DIR"] = cache
    if "numba" in sys.modules:  # imported before us: its configuration has read the environment already
        sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]


def _writable_directory(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _private_temporary_cache() -> str:
    """A directory of the temporary one that only this user can write (numba loads what it
    finds there: another user's files would be run as ours), made anew for this process
    when the usual name is taken by something else."""
    import stat
    import tempfile

    uid = os.getuid()
    path = os.path.join(tempfile.gettempdir(), f"streambhmm-numba-{uid}")
    try:
        os.mkdir(path, 0o700)
    except OSError:
        pass  # there already (checked below), or the temporary directory is not writable
    try:
        entry = os.lstat(path)
        if stat.S_ISDIR(entry.st_mode) and entry.st_uid == uid and not entry.st_mode & 0o022 \
                and os.access(path, os.W_OK | os.X_OK):
            return path
    except OSError:
        pass
    import atexit
    import shutil

    path = tempfile.mkdtemp(prefix="streambhmm-numba-")
    atexit.register(shutil.rmtree, path, True)
    return path


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

