"""Static checks of docker-compose.yml and the Dockerfile (no Docker needed).

The checks are functions returning a list of problems, so the tests can show both that
the real files pass and that a broken copy is caught.
"""

from __future__ import annotations

import copy
import ipaddress
import re
import shlex
import tomllib
from fnmatch import fnmatch
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import click
import pytest
import yaml

from streambhmm.app.cli import main

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
SERVICES = ("scheduler", "worker", "runner")
DASK_DEFAULT_PORT = 8786


# --- Compose file helpers ----------------------------------------------------------------

_VARIABLE = re.compile(r"\$(?:(\$)|\{(\w+)(?:(:?[-?+])([^}]*))?\}|(\w+))")


def interpolate(value):
    """Compose's variable substitution with an empty environment: ${VAR:-default} and
    ${VAR-default} give the default, ${VAR}, $VAR and ${VAR:+x} give "", $$ gives $."""
    if isinstance(value, dict):
        return {key: interpolate(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item) for item in value]
    if not isinstance(value, str):
        return value

    def substitute(match):
        escaped, _name, operator, argument, _bare = match.groups()
        if escaped:
            return "$"
        if operator in (":-", "-"):
            return argument
        if operator in (":?", "?"):
            raise ValueError(f"required variable in {value!r}")
        return ""
    return _VARIABLE.sub(substitute, value)


def load_compose(path: Path = COMPOSE_FILE) -> dict:
    return yaml.safe_load(path.read_text())


def argv(command) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(a) for a in command or []]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {key: "" if val is None else str(val) for key, val in env.items()}


def published_ports(service: dict) -> list[tuple[str, str | None, int | None]]:
    """(spec, host IP or None for all interfaces, container port) per published port."""
    result = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            target = port.get("target")
            result.append((repr(port), port.get("host_ip"), int(target) if target else None))
            continue
        spec = str(port).split("/", 1)[0]
        if spec.startswith("["):                      # [::1]:8786:8786
            host_ip, _, rest = spec[1:].partition("]")
            container = rest.rsplit(":", 1)[-1]
        else:
            parts = spec.rsplit(":", 2)
            host_ip = parts[0] if len(parts) == 3 else None
            container = parts[-1]
        result.append((str(port), host_ip, int(container) if container.isdigit() else None))
    return result


def is_loopback(host_ip: str | None) -> bool:
    try:
        return host_ip is not None and ipaddress.ip_address(host_ip).is_loopback
    except ValueError:
        return False


def named_volume_mounts(service: dict) -> list[tuple[str, str]]:
    """(volume name, container path) for each named-volume mount (bind mounts skipped)."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("type", "volume") == "volume" and volume.get("source"):
                mounts.append((volume["source"], volume["target"]))
            continue
        parts = str(volume).split(":")
        if len(parts) >= 2 and not parts[0].startswith(("/", ".", "~")):
            mounts.append((parts[0], parts[1]))
    return mounts


# --- Command lines -----------------------------------------------------------------------

def resolve_command(args: list[str]) -> tuple[click.Command | None, list[str], list[str]]:
    """The click command a command line runs, the words naming it, and its own arguments;
    None and problems' worth of words if no such command exists."""
    if not args:
        return None, [], []
    exe, rest = args[0], list(args[1:])
    if exe == "dask":
        if not any(ep.name == "dask" for ep in entry_points(group="console_scripts")):
            return None, ["dask"], rest
        subcommands = {ep.name: ep for ep in entry_points(group="dask_cli")}
        if not rest or rest[0] not in subcommands:
            return None, ["dask", *rest[:1]], rest[1:]
        return subcommands[rest[0]].load(), ["dask", rest[0]], rest[1:]
    if exe == "streambhmm":
        command, path = main, ["streambhmm"]
        while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
            if rest[0] not in command.commands:
                return None, [*path, rest[0]], rest[1:]
            command = command.commands[rest[0]]
            path.append(rest.pop(0))
        return command, path, rest
    return None, [exe], rest


def command_problems(args: list[str], where: str) -> list[str]:
    """The command exists (a `dask` subcommand or a `streambhmm` command), and accepts every
    option given and is given every required option."""
    command, path, rest = resolve_command(args)
    if command is None:
        return [f"{where}: no such command {' '.join(path) or '(empty)'!r}"]
    ctx = click.Context(command, info_name=" ".join(path))
    options = [p for p in command.get_params(ctx) if isinstance(p, click.Option)]
    known = {name for p in options for name in (*p.opts, *p.secondary_opts)}
    given = []
    for arg in rest:
        if arg == "--":
            break
        if arg.startswith("-") and arg != "-":
            given.append(arg.split("=", 1)[0])
    problems = [f"{where}: {' '.join(path)} has no option {name}" for name in given if name not in known]
    if "--help" not in given:
        problems += [f"{where}: {' '.join(path)} needs {p.opts[0]}" for p in options
                     if p.required and not set(p.opts + p.secondary_opts) & set(given)]
    return problems


def parsed_params(args: list[str]) -> dict:
    """Parameter values of a valid command line (as click parses them; nothing runs)."""
    command, path, rest = resolve_command(args)
    return command.make_context(" ".join(path), rest, resilient_parsing=True).params


# --- The checks --------------------------------------------------------------------------

def compose_problems(compose: dict, root: Path = REPO) -> list[str]:
    try:
        compose = interpolate(compose)
    except ValueError as exc:
        return [str(exc)]
    services = compose.get("services") or {}
    missing = [name for name in SERVICES if name not in services]
    if missing:
        return [f"missing services: {missing}"]
    problems = []

    # One image, built from the repository's Dockerfile, for every service.
    images = set()
    for name in SERVICES:
        service = services[name]
        build = service.get("build")
        if build is None:
            problems.append(f"{name}: no build (an image-only service is pulled, not built)")
            continue
        if isinstance(build, str):
            build = {"context": build}
        context = (root / build.get("context", ".")).resolve()
        if context != root.resolve():
            problems.append(f"{name}: build context {context} is not the repository root")
        if not (context / build.get("dockerfile", "Dockerfile")).is_file():
            problems.append(f"{name}: no Dockerfile in {context}")
        images.add(service.get("image"))
    if len(images) != 1 or None in images:
        problems.append(f"services should share one named image, got {images}")

    # Nothing reachable from outside the machine.
    for name, service in services.items():
        if service.get("network_mode") == "host":
            problems.append(f"{name}: network_mode host publishes every port")
        for spec, host_ip, _ in published_ports(service):
            if not is_loopback(host_ip):
                problems.append(f"{name}: port {spec} is not bound to 127.0.0.1")

    # Every command runs something that exists, with options it accepts.
    commands = {}
    for name in SERVICES:
        args = argv(services[name].get("command"))
        found = command_problems(args, name)
        problems += found
        if not found:
            commands[name] = args
    if len(commands) < len(SERVICES):
        return problems

    # Worker and runner reach the scheduler on the port it listens on.
    port = str(parsed_params(commands["scheduler"])["port"] or DASK_DEFAULT_PORT)
    if not port.isdigit():
        return [*problems, f"scheduler: --port {port!r} is not one port number"]
    port = int(port)
    scheduler = services["scheduler"]
    if port not in [container for _, _, container in published_ports(scheduler)]:
        problems.append(f"scheduler: port {port} is not published")
    if str(port) not in str((scheduler.get("healthcheck") or {}).get("test", "")):
        problems.append(f"scheduler: healthcheck does not probe port {port}")
    addresses = {"worker": parsed_params(commands["worker"])["scheduler"] or "",
                 "runner": environment(services["runner"]).get("STREAMBHMM_SCHEDULER", "")}
    for name, address in addresses.items():
        url = urlsplit(address)
        if url.hostname != "scheduler" or url.port != port:
            problems.append(f"{name}: scheduler address {address!r} is not scheduler:{port}")
        if "scheduler" not in (services[name].get("depends_on") or {}):
            problems.append(f"{name}: does not depend on the scheduler")

    # Workers scale: nothing that must be unique per container.
    worker = services["worker"]
    if "container_name" in worker:
        problems.append("worker: container_name prevents --scale")
    if worker.get("ports"):
        problems.append("worker: published ports prevent --scale")

    # The runner is one-shot (`docker compose run`), not started by `up`.
    if not services["runner"].get("profiles"):
        problems.append("runner: no profile, so `docker compose up` would start it")

    # Workers read and write the stores the runner names: same volume, same path.
    declared = compose.get("volumes") or {}
    mounts = {name: set(named_volume_mounts(services[name])) for name in ("worker", "runner")}
    shared = mounts["worker"] & mounts["runner"]
    if not shared:
        problems.append(f"worker and runner share no named volume at one path: {mounts}")
    for volume, _ in mounts["worker"] | mounts["runner"]:
        if volume not in declared:
            problems.append(f"volume {volume!r} is not declared under top-level volumes")
    return problems


def documented_commands(text: str) -> list[list[str]]:
    """The command lines after `docker compose run ... runner` in the file's comments."""
    found = []
    for line in text.splitlines():
        line = line.lstrip("# ") if line.startswith("#") else ""
        if not line.startswith("docker compose run "):
            continue
        words = shlex.split(line, comments=True)
        if "runner" in words:
            found.append(words[words.index("runner") + 1:])
    return found


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or not line.strip():
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        keyword, _, rest = current.strip().partition(" ")
        logical.append((keyword.upper(), rest.strip()))
        current = ""
    return logical


def copy_sources(arguments: str) -> tuple[list[str], str]:
    args = yaml.safe_load(arguments) if arguments.startswith("[") else shlex.split(arguments)
    args = [a for a in args if not a.startswith("--")]
    return args[:-1], args[-1]


def dockerignored(source: str, patterns: list[str]) -> bool:
    source = source.rstrip("/").removeprefix("./")
    return any(fnmatch(source, p.rstrip("/")) or fnmatch(source, p.rstrip("/") + "/*")
               for p in patterns if not p.startswith("!"))


def dockerfile_problems(text: str, root: Path = REPO) -> list[str]:
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    ignore_file = root / ".dockerignore"
    ignored = [line.strip() for line in ignore_file.read_text().splitlines()
               if line.strip() and not line.startswith("#")] if ignore_file.is_file() else []
    instructions = dockerfile_instructions(text)
    problems = []

    # The base image's Python satisfies requires-python.
    base = next((args for keyword, args in instructions if keyword == "FROM"), "")
    version = re.search(r"python:(\d+)\.(\d+)", base)
    minimum = re.search(r">=\s*(\d+)\.(\d+)", pyproject["project"]["requires-python"])
    if not version or tuple(map(int, version.groups())) < tuple(map(int, minimum.groups())):
        problems.append(f"base image {base!r} is not a python image satisfying requires-python")

    # What is copied exists and is not excluded; where pyproject.toml lands.
    workdir, copied, project_dir = PurePosixPath("/"), set(), None
    for keyword, args in instructions:
        if keyword == "WORKDIR":
            workdir = workdir / args
        elif keyword in ("COPY", "ADD"):
            sources, dest = copy_sources(args)
            for source in sources:
                name = source.rstrip("/").removeprefix("./")
                copied.add(name)
                if not (root / name).exists():
                    problems.append(f"COPY {source}: not in the repository")
                elif dockerignored(name, ignored):
                    problems.append(f"COPY {source}: excluded by .dockerignore")
                if name == "pyproject.toml":
                    project_dir = workdir / dest
        elif keyword == "RUN" and "pip install" in args:
            words = shlex.split(args)
            if "-e" in words or "--editable" in words:
                problems.append("pip install is editable")
            targets = {workdir / w for w in words if w.startswith((".", "/"))}
            if project_dir is None or project_dir not in targets:
                problems.append(f"RUN {args!r} does not install the copied project ({project_dir})")
        elif keyword == "ENTRYPOINT":
            problems.append("ENTRYPOINT would wrap compose's `command:` overrides")
    needed = {"pyproject.toml", pyproject["project"]["readme"],
              *pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    needed = {n.rstrip("*") for n in needed}
    problems += [f"{n} is not copied into the image" for n in sorted(needed - copied)]
    if not any(keyword == "RUN" and "pip install" in args for keyword, args in instructions):
        problems.append("nothing is pip installed")
    users = [args for keyword, args in instructions if keyword == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("the image runs as root")
    return problems


# --- Tests -------------------------------------------------------------------------------

def test_compose_file_is_valid():
    assert compose_problems(load_compose()) == []


def test_documented_runner_commands_are_valid():
    commands = documented_commands(COMPOSE_FILE.read_text())
    assert commands, "the header should show how to run a job"
    assert [p for args in commands for p in command_problems(args, "comment")] == []


def test_dockerfile_is_valid():
    assert dockerfile_problems(DOCKERFILE.read_text()) == []


def test_entry_point_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["streambhmm"] == "streambhmm.app.console:run"  # main, with SIGTERM unwinding as Ctrl-C


def test_interpolation_uses_defaults():
    assert interpolate("127.0.0.1:${PORT:-8786}:8786") == "127.0.0.1:8786:8786"
    assert interpolate("${HOST-0.0.0.0}:$PORT:$$x") == "0.0.0.0::$x"


def _set(path, value):
    def mutate(compose):
        *parents, last = path
        node = compose
        for key in parents:
            node = node[key]
        node[last] = value
    return mutate


BROKEN_COMPOSE = {
    "scheduler port open to the network": (
        _set(["services", "scheduler", "ports"], ["8786:8786"]), "not bound to 127.0.0.1"),
    "dashboard on all interfaces": (
        _set(["services", "scheduler", "ports"], ["127.0.0.1:8786:8786", "0.0.0.0:8787:8787"]),
        "not bound to 127.0.0.1"),
    "long-syntax port without host_ip": (
        _set(["services", "runner", "ports"], [{"target": 8888, "published": 8888}]),
        "not bound to 127.0.0.1"),
    "worker with a fixed name": (_set(["services", "worker", "container_name"], "w"), "container_name"),
    "worker with a host port": (_set(["services", "worker", "ports"], ["127.0.0.1:9000:9000"]), "--scale"),
    "worker on the wrong port": (
        _set(["services", "worker", "command"], "dask worker tcp://scheduler:8787 --nthreads 1"),
        "is not scheduler:8786"),
    "runner on the wrong host": (
        _set(["services", "runner", "environment"], {"STREAMBHMM_SCHEDULER": "tcp://localhost:8786"}),
        "is not scheduler:8786"),
    "scheduler moved, clients not": (
        _set(["services", "scheduler", "command"], "dask scheduler --port 9786"), "is not scheduler:9786"),
    "misspelt dask subcommand": (
        _set(["services", "scheduler", "command"], "dask schedular --port 8786"), "no such command"),
    "unknown dask option": (
        _set(["services", "worker", "command"], "dask worker tcp://scheduler:8786 --threads 1"),
        "no option --threads"),
    "unknown streambhmm command": (
        _set(["services", "runner", "command"], "streambhmm demos"), "no such command"),
    "unknown streambhmm option": (
        _set(["services", "runner", "command"], "streambhmm demo --work-dir /data/demo"),
        "no option --work-dir"),
    "missing required option": (
        _set(["services", "runner", "command"], "streambhmm fit /data/counts.zarr -o m.json"),
        "needs --states"),
    "not an entry point": (_set(["services", "runner", "command"], "streambhm --help"), "no such command"),
    "runner on its own volume": (
        _set(["services", "runner", "volumes"], ["other:/data"]), "share no named volume"),
    "same volume, other path": (
        _set(["services", "runner", "volumes"], ["data:/work"]), "share no named volume"),
    "undeclared volume": (_set(["volumes"], {}), "not declared"),
    "image-only worker": (
        lambda c: c["services"]["worker"].pop("build"), "no build"),
    "build from elsewhere": (_set(["services", "runner", "build"], "./tests"), "not the repository root"),
    "runner started by up": (lambda c: c["services"]["runner"].pop("profiles"), "no profile"),
}


@pytest.mark.parametrize("case", BROKEN_COMPOSE)
def test_broken_compose_is_caught(case):
    mutate, expected = BROKEN_COMPOSE[case]
    compose = copy.deepcopy(load_compose())
    mutate(compose)
    problems = compose_problems(compose)
    assert any(expected in p for p in problems), problems


BROKEN_DOCKERFILE = {
    "readme not copied": (lambda t: t.replace("COPY pyproject.toml README.md ./", "COPY pyproject.toml ./"),
                          "README.md is not copied"),
    "copies a missing file": (lambda t: t.replace("COPY scripts/", "COPY script/"), "not in the repository"),
    "editable install": (lambda t: t.replace("pip install --no-cache-dir", "pip install -e"), "editable"),
    "installs something else": (lambda t: t.replace("/opt/streambhmm \"bokeh", "\"bokeh"),
                                "does not install the copied project"),
    "entrypoint": (lambda t: t + '\nENTRYPOINT ["streambhmm"]\n', "ENTRYPOINT"),
    "too old a python": (lambda t: t.replace("python:3.11-slim", "python:3.10-slim"), "requires-python"),
    "root": (lambda t: re.sub(r"(?m)^USER .*$", "USER root", t), "root"),
}


@pytest.mark.parametrize("case", BROKEN_DOCKERFILE)
def test_broken_dockerfile_is_caught(case):
    mutate, expected = BROKEN_DOCKERFILE[case]
    text = mutate(DOCKERFILE.read_text())
    assert text != DOCKERFILE.read_text()
    problems = dockerfile_problems(text)
    assert any(expected in p for p in problems), problems


def test_dockerignore_hiding_a_copied_file_is_caught(tmp_path):
    for name in ("pyproject.toml", "README.md"):
        (tmp_path / name).write_text((REPO / name).read_text())
    for name in ("streambhmm", "scripts"):
        (tmp_path / name).mkdir()
    (tmp_path / ".dockerignore").write_text("*.md\n")
    problems = dockerfile_problems(DOCKERFILE.read_text(), root=tmp_path)
    assert problems == ["COPY README.md: excluded by .dockerignore"]
