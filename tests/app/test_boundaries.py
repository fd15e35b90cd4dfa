"""Import boundaries, read from the source: each stage imports only from the stages before
it (io, moments, learn, distributed, app), the in-memory estimators import no Dask, Zarr or
click, and no product module imports another package's private name."""

import ast
from pathlib import Path

import pytest

import streambhmm

PACKAGE = Path(streambhmm.__file__).parent
STAGES = ["io", "moments", "learn", "distributed", "app"]
NOT_IN_LEARN = ("dask", "distributed", "zarr", "xarray", "click", "fsspec")


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] in STAGES:
            yield ".".join(("streambhmm",) + parts), path


def imports(name: str, path: Path):
    """(imported module, imported names, line) of every import in the file, relative ones resolved."""
    package = name.split(".")[:-1] if path.name != "__init__.py" else name.split(".")
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            yield module, [a.name for a in node.names], node.lineno


def stage_of(module: str):
    parts = module.split(".")
    return parts[1] if parts[0] == "streambhmm" and len(parts) > 1 and parts[1] in STAGES else None


ALL = list(modules())


@pytest.mark.parametrize("name,path", ALL, ids=[n for n, _ in ALL])
def test_imports_only_from_earlier_stages(name, path):
    own = STAGES.index(stage_of(name))
    upward = [(m, line) for m, _, line in imports(name, path)
              if stage_of(m) is not None and STAGES.index(stage_of(m)) > own]
    assert not upward, f"{path}: imports from a later stage: {upward}"


@pytest.mark.parametrize("name,path", [(n, p) for n, p in ALL if stage_of(n) == "learn"])
def test_learn_imports_no_dask_zarr_or_click(name, path):
    found = [(m, line) for m, _, line in imports(name, path) if m.split(".")[0] in NOT_IN_LEARN]
    assert not found, f"{path}: {found}"


@pytest.mark.parametrize("name,path", ALL, ids=[n for n, _ in ALL])
def test_no_private_name_of_another_package(name, path):
    own = stage_of(name)
    crossing = []
    for module, names, line in imports(name, path):
        if stage_of(module) in (None, own):
            continue
        private_module = any(part.startswith("_") for part in module.split(".")[2:])
        private_names = [n for n in names if n.startswith("_")]
        if private_module or private_names:
            crossing.append((module, private_names, line))
    assert not crossing, f"{path}: imports private names of another package: {crossing}"


def private_uses(name: str, path: Path) -> list:
    """(module, private names, line) of the imports of ``path`` that take a private name (or
    a private module) of a stage package, and of its uses of a private attribute of a name
    imported from one (``kernels._sort``)."""
    found, bound = [], set()
    for module, names, line in imports(name, path):
        if stage_of(module) is None:
            continue
        bound.update(names or [module.split(".")[-1]])
        private_module = any(part.startswith("_") for part in module.split(".")[2:])
        private_names = [n for n in names if n.startswith("_")]
        if private_module or private_names:
            found.append((module, private_names, line))
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound \
                and node.attr.startswith("_") and not node.attr.startswith("__"):
            found.append((node.value.id, [node.attr], node.lineno))
    return found


SCRIPTS = PACKAGE.parent / "scripts"
# what tests and benchmarks share (streambhmm.testing) and the benchmarks themselves use only
# the stages' public names, as a user's code would
SUPPORT = [(".".join(("streambhmm",) + path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__"),
            path) for path in sorted((PACKAGE / "testing").rglob("*.py"))] + \
          [(f"scripts.{path.stem}", path) for path in sorted(SCRIPTS.glob("*.py"))]


@pytest.mark.parametrize("name,path", SUPPORT, ids=[n for n, _ in SUPPORT])
def test_testing_and_scripts_use_no_private_name(name, path):
    crossing = private_uses(name, path)
    assert not crossing, f"{path}: uses private names of the package: {crossing}"


def test_the_support_check_sees_violations(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from streambhmm.moments import moment_kernels\nfrom streambhmm.learn._refine_kernels import x\n"
                     "from ..io.store import _grow\nmoment_kernels._sort_by(1)\n")
    found = private_uses("streambhmm.testing.probe", probe)
    assert ("streambhmm.learn._refine_kernels", [], 2) in found
    assert ("streambhmm.io.store", ["_grow"], 3) in found
    assert ("moment_kernels", ["_sort_by"], 4) in found
    assert len(SUPPORT) > 10 and any(n == "streambhmm.testing" for n, _ in SUPPORT)


def test_the_checks_see_violations(tmp_path):  # the tests above could not fail if the parser saw nothing
    probe = tmp_path / "probe.py"
    probe.write_text("from ...app.cli import main\nfrom ...learn._hmm_kernels import viterbi\nimport dask\n")
    found = list(imports("streambhmm.io.x.probe", probe))
    assert ("streambhmm.app.cli", ["main"], 1) in found
    assert ("streambhmm.learn._hmm_kernels", ["viterbi"], 2) in found
    assert ("dask", [], 3) in found
