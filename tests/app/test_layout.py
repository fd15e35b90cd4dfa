"""The package's layout as a contract: the in-memory estimators import nothing from Dask,
Zarr, xarray or click, and the public names stay where the README shows them."""

import subprocess
import sys

import pytest

BLOCKED = ("dask", "distributed", "zarr", "xarray", "click", "fsspec")
IN_MEMORY = ("streambhmm.learn.spectral", "streambhmm.learn.recovery", "streambhmm.learn.refine",
             "streambhmm.learn.model", "streambhmm.learn.hmm", "streambhmm.learn.emissions", "streambhmm.learn.checks",
             "streambhmm.learn.simulate", "streambhmm.learn.evaluate", "streambhmm.learn.states",
             "streambhmm.learn.bootstrap", "streambhmm.learn.base", "streambhmm.learn.criterion",
             "streambhmm.learn.expected", "streambhmm.learn.histograms", "streambhmm.learn.selection",
             "streambhmm.learn.domains", "streambhmm.learn.overdispersion", "streambhmm.moments.spec",
             "streambhmm.moments.histograms", "streambhmm.moments.features", "streambhmm.moments.sums",
             "streambhmm.moments.blocks", "streambhmm.moments.validation")
PROGRAM = f"""
import importlib.abc, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"blocked: {{name}}")

sys.meta_path.insert(0, Block())
import importlib
for module in {IN_MEMORY!r}:
    importlib.import_module(module)
from streambhmm import BinomialHMM, Moments, SpectralBinomialHMM, compute_moments, simulate
import numpy as np
sim = simulate(__import__("streambhmm").paper_model(), [3000], coverage=10, random_state=0)
SpectralBinomialHMM(n_components=2, random_state=0).fit_moments(compute_moments(sim.methylated, sim.coverage))
BinomialHMM(2, n_iter=2).fit(sim.methylated, sim.coverage)
print("ok")
"""


@pytest.mark.slow
def test_in_memory_estimators_import_no_dask_zarr_or_click():
    result = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.slow
def test_the_blocker_blocks():  # the test above could not fail if the blocker did nothing
    program = PROGRAM.replace("for module in", "import dask\nfor module in")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert result.returncode != 0 and "blocked: dask" in result.stderr


@pytest.mark.parametrize("name", ["SpectralBinomialHMM", "BinomialHMM", "Moments", "compute_moments", "simulate",
                                  "paper_model", "population_moments", "matched_error", "beta_map"])
def test_public_names_at_the_top_level(name):
    import streambhmm

    assert name in streambhmm.__all__ and getattr(streambhmm, name).__name__ == name


@pytest.mark.slow
def test_numba_caches_outside_the_package(tmp_path):
    """Kernels compiled with cache=True go to the user's cache directory, never into the
    installed package, where pip would leave them behind as an importable empty package."""
    import os

    import streambhmm

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | {"XDG_CACHE_HOME": str(tmp_path)}
    program = ("import numpy as np, numba; from streambhmm.learn._emission_kernels import _rising_logs; "
               "_rising_logs(0.5, 3, np.zeros(4)); print(numba.config.CACHE_DIR)")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(tmp_path / "streambhmm" / "numba")
    cached = list((tmp_path / "streambhmm" / "numba").rglob("*.nbi"))
    assert any("_emission_kernels" in p.name for p in cached), cached
    package = os.path.dirname(streambhmm.__file__)
    assert all(not p.is_relative_to(package) for p in cached)


@pytest.mark.slow
@pytest.mark.parametrize("taken", [False, True])
def test_numba_caches_in_a_private_temporary_directory_without_a_writable_home(tmp_path, taken):
    """A user whose cache directory cannot be made (a container's user without a home) got
    numba's "cannot cache function ...: no locator available" traceback at import. The
    kernels go to a directory of TMPDIR that only the user can write; one of that name that
    others can write (numba would load their files) is left alone for a new one."""
    import os

    blocked = tmp_path / "home-is-a-file"
    blocked.write_text("")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    usual = temporary / f"streambhmm-numba-{os.getuid()}"
    if taken:
        usual.mkdir()
        usual.chmod(0o777)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"} | {
        "XDG_CACHE_HOME": str(blocked), "TMPDIR": str(temporary)}
    program = ("import numpy as np, numba; from streambhmm.learn._emission_kernels import _rising_logs; "
               "_rising_logs(0.5, 3, np.zeros(4)); import os; d = numba.config.CACHE_DIR; "
               "print(d, oct(os.stat(d).st_mode & 0o777), sum(len(f) for _, _, f in os.walk(d)))")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    where, mode, files = result.stdout.split()
    assert mode == "0o700" and int(files) > 0
    if taken:
        assert where != str(usual) and os.path.dirname(where) == str(temporary) and not os.path.exists(where)
        assert not any(usual.iterdir())
    else:
        assert where == str(usual) and any(usual.rglob("*.nbi"))
