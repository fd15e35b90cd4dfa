"""Every compiled kernel releases the GIL. A store of up to $STREAMBHMM_IN_PROCESS_MAX cells
runs its tasks in threads of one process (io.tasks.InProcessClient), so a kernel holding the
GIL runs one chunk at a time whatever the cores: the moment pass over two samples of a tiled
genome took 52 s in process with the moment kernels holding it, 33 s with them releasing it."""

import importlib
import pkgutil

from numba.core.registry import CPUDispatcher

import streambhmm


def kernels():
    for module in pkgutil.walk_packages(streambhmm.__path__, "streambhmm."):
        if module.name.endswith("__main__"):  # runs the command line
            continue
        loaded = importlib.import_module(module.name)
        for name, value in vars(loaded).items():
            if isinstance(value, CPUDispatcher) and value.__module__ == module.name:
                yield f"{module.name}.{name}", value


def test_every_kernel_releases_the_gil():
    found = dict(kernels())
    assert "streambhmm.moments.moment_kernels.accumulate_triples" in found
    assert "streambhmm.learn.hmm_kernels._forward_backward" in found
    holding = sorted(name for name, kernel in found.items() if not kernel.targetoptions.get("nogil"))
    assert holding == []
