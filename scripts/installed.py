"""What the timing scripts share about the package they time."""

import compileall
import importlib.util


def byte_compile_package() -> None:
    """The package byte-compiled, as the README's `pip install .` leaves it: an editable
    install under PYTHONDONTWRITEBYTECODE (set on the machine these figures come from) would
    compile every module again in every timed process (0.2-0.5 s a process, measured)."""
    compileall.compile_dir(importlib.util.find_spec("streambhmm").submodule_search_locations[0], quiet=1)
