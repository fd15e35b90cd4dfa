"""The CLI against a real cluster of separate processes (`dask scheduler`, two `dask worker`s
on 127.0.0.1, as docker-compose.yml runs them), and what happens when parts of it die."""

import contextlib
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import dask
import numpy as np
import pytest

from streambhmm.moments.momentstore import load_total
from streambhmm.moments.pipeline import moments_graph, plan_chunks
from streambhmm.testing import ProcessCluster
from streambhmm.learn.simulate import model

from ..conftest import STICKY, WELL_SEPARATED
from ..app.test_cli import DATA, run
from ..moments.test_pipeline import synthetic_store

pytestmark = pytest.mark.slow  # the command line, subprocesses or a Dask cluster

STREAMBHMM = [str(Path(sys.executable).with_name("streambhmm"))]  # the installed entry point
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "STREAMBHMM_PROGRESS_EVERY": "0"}  # a progress line per step
ENV.pop("STREAMBHMM_SCHEDULER", None)
EM_ITERATION = re.compile(r"EM from random start 1 of \d: (\d+) of at most ")  # the progress line after an iteration
BINS = ("--bins", "8")  # a small Beta map keeps partials small


def model_fields(path):
    document = json.loads(Path(path).read_text())
    document.pop("created_by")
    return document


@pytest.fixture(scope="module")
def many_chunks(tmp_path_factory):
    """Enough chunks that a run lasts long enough to be interrupted."""
    path = tmp_path_factory.mktemp("cluster") / "counts.zarr"
    return synthetic_store(path, model(WELL_SEPARATED, STICKY), [40_000, 20_000], 1000, seed=5)  # 60 chunks


@pytest.fixture(scope="module")
def few_chunks(tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "counts.zarr"
    return synthetic_store(path, model(WELL_SEPARATED, STICKY), [40_000, 20_000], 4000, seed=5)


@pytest.fixture(scope="module")
def reference_moments(many_chunks, dask_clients):
    return dask_clients[1].compute(moments_graph(many_chunks, n_bins=8).total).result()


def start(*args):
    return subprocess.Popen([*STREAMBHMM, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ENV)


def wait_for_partials(moments, at_least: int, proc) -> int:
    """Block until ``at_least`` partials are on disk; the number seen."""
    while True:
        done = len(list((moments / "partials").glob("*/0*")))
        if done >= at_least:
            return done
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.01)


def assert_same_moments(moments, reference):
    total, manifest = load_total(moments)
    assert manifest["complete"]
    for name in ("p12", "p13", "p123", "b_methylated", "b_coverage"):
        np.testing.assert_allclose(getattr(total, name), getattr(reference, name), rtol=1e-12, atol=0)
    assert total.n_triples == reference.n_triples


def test_cli_on_process_cluster_equals_embedded_cluster(tmp_path, few_chunks):
    store = few_chunks.path
    embedded = run("fit", store, "-m", "4", "--method", "ftd-em", "--em-iter", "3", "--seed", "1", *BINS,
                   "-o", tmp_path / "embedded.json", env={"STREAMBHMM_SCHEDULER": ""})
    assert embedded.exit_code == 0, embedded.output
    with ProcessCluster(n_workers=2) as cluster:
        for command in (["fit", store, "-m", "4", "--method", "ftd-em", "--em-iter", "3", "--seed", "1", *BINS,
                         "-o", tmp_path / "cluster.json"],
                        ["decode", store, "--model", tmp_path / "cluster.json", "-o", tmp_path / "cluster.bed"],
                        ["moments", "compute", store, "-o", tmp_path / "m.zarr", *BINS]):
            proc = subprocess.run([*STREAMBHMM, *map(str, command), "--scheduler", cluster.address, "-q"],
                                  capture_output=True, text=True, env=ENV)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    assert model_fields(tmp_path / "cluster.json") == model_fields(tmp_path / "embedded.json")
    embedded = run("decode", store, "--model", tmp_path / "embedded.json", "-o", tmp_path / "embedded.bed", "-q")
    assert embedded.exit_code == 0, embedded.output
    # the same segments (the track lines name the models)
    segments = [(tmp_path / f"{name}.bed").read_text().splitlines() for name in ("cluster", "embedded")]
    assert segments[0][0] == segments[1][0].replace("embedded", "cluster") and segments[0][1:] == segments[1][1:]
    assert run("moments", "compute", store, "-o", tmp_path / "embedded_m.zarr", *BINS, "-q").exit_code == 0
    assert_same_moments(tmp_path / "m.zarr", load_total(tmp_path / "embedded_m.zarr")[0])


def test_worker_killed_during_moments(tmp_path, many_chunks, reference_moments):
    moments = tmp_path / "m.zarr"
    n_chunks = len(plan_chunks(many_chunks, many_chunks.samples))
    with ProcessCluster(n_workers=2) as cluster:
        proc = start("moments", "compute", many_chunks.path, "-o", moments, *BINS, "--scheduler", cluster.address, "-q")
        seen = wait_for_partials(moments, n_chunks // 5, proc)
        cluster.kill_worker(0)
        output = proc.communicate(timeout=300)[0]
    assert seen < n_chunks, "the run ended before the worker was killed"
    assert proc.returncode == 0, output
    # a task rerun after the kill may find the partial its first attempt already wrote
    computed, reused = map(int, re.search(r"computed (\d+) partial\(s\), reused (\d+)", output).groups())
    assert computed + reused == n_chunks, output
    assert_same_moments(moments, reference_moments)


def test_worker_killed_during_em(tmp_path, few_chunks, dask_clients):
    args = ["fit", few_chunks.path, "-m", "4", "--method", "em", "--em-starts", "1", "--em-iter", "4", "--em-tol", "0",
            "--seed", "2", *BINS]
    reference = run(*args, "-o", tmp_path / "reference.json", "--scheduler", dask_clients[1].scheduler.address)
    assert reference.exit_code == 0, reference.output
    with ProcessCluster(n_workers=2) as cluster:
        proc = start(*args, "-o", tmp_path / "killed.json", "--scheduler", cluster.address)
        lines = []
        for line in proc.stdout:  # kill a worker once EM is under way
            lines.append(line)
            if (match := EM_ITERATION.search(line)) and int(match.group(1)) >= 1:
                cluster.kill_worker(0)
                break
        output = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output
    assert {"1", "4"} <= {m.group(1) for m in EM_ITERATION.finditer(output)}, output
    assert model_fields(tmp_path / "killed.json") == model_fields(tmp_path / "reference.json")


def test_scheduler_lost_fails_clearly_and_rerun_resumes(tmp_path, many_chunks, reference_moments, dask_clients):
    moments = tmp_path / "m.zarr"
    with ProcessCluster(n_workers=2) as cluster:
        proc = start("moments", "compute", many_chunks.path, "-o", moments, *BINS, "--scheduler", cluster.address, "-q")
        seen = wait_for_partials(moments, 20, proc)
        cluster.kill_scheduler()
        output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    assert f"Error: lost the Dask scheduler at {cluster.address}" in output
    assert f"kept in {moments}; rerun this command to resume" in output
    assert not json.loads((moments / "manifest.json").read_text())["complete"]

    rerun = run("moments", "compute", many_chunks.path, "-o", moments, *BINS, "--scheduler",
                dask_clients[1].scheduler.address, "-q")
    assert rerun.exit_code == 0, rerun.output
    reused = int(re.search(r"reused (\d+)", rerun.output).group(1))
    assert reused >= seen
    assert_same_moments(moments, reference_moments)


def test_scheduler_lost_during_em_stops_at_once(tmp_path, few_chunks):
    """The E-step's futures waited out the client's reconnection before they were cancelled (30 s
    by default: a helper's trial); the wait sees the connection go. Here the reconnection would
    last 10 minutes, beyond the test's bound on the process."""
    args = ["fit", few_chunks.path, "-m", "4", "--method", "em", "--em-starts", "1", "--em-iter", "50", "--em-tol",
            "0", "--seed", "2", *BINS, "-o", tmp_path / "m.json"]
    env = {**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "600s"}
    with ProcessCluster(n_workers=2) as cluster:
        proc = subprocess.Popen([*STREAMBHMM, *map(str, args), "--scheduler", cluster.address],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        lines = []
        for line in proc.stdout:  # kill the scheduler once EM is under way
            lines.append(line)
            if EM_ITERATION.search(line):
                cluster.kill_scheduler()
                break
        output = "".join(lines) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, output
    assert f"Error: lost the Dask scheduler at {cluster.address}" in output and "Traceback" not in output, output
    assert not (tmp_path / "m.json").exists()


def test_unreachable_scheduler_is_a_clear_error(tmp_path, many_chunks):
    import distributed  # noqa: F401 - its defaults first: leaving dask.config.set drops sections it added
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        r = run("fit", many_chunks.path, "-m", "4", "-o", tmp_path / "m.json", "--scheduler", "tcp://127.0.0.1:9",
                "-q")
    assert r.exit_code == 1
    assert "Error: cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output, r.output
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("in_process", [False, True])
def test_embedded_cluster_listens_on_loopback_only(in_process):
    """Audit 8: every server of the embedded cluster of worker processes listens on 127.0.0.1
    only, and their HTTP servers answer health checks alone (the dashboard showed local users
    task names, logs and call stacks), so the workers do not sample call stacks for its
    profile page; in process nothing listens at all."""
    import psutil

    from streambhmm.distributed.cluster import dask_client

    def listening() -> set:
        this = psutil.Process()
        return {c.laddr for p in (this, *this.children(recursive=True)) for c in p.net_connections("inet")
                if c.status == psutil.CONN_LISTEN}

    before = listening()
    with dask.config.set({"distributed.worker.profile.enabled": True}), \
            dask_client(n_workers=1, in_process=in_process) as client:
        opened = listening() - before
        if not in_process:  # their HTTP servers (plain HTTP, open to local users): health checks only
            assert not any(client.run(lambda dask_worker: "profile" in dask_worker.periodic_callbacks).values())
            info = client.scheduler_info()
            for port in [info["services"]["dashboard"]] + [w["services"]["dashboard"] for w in info["workers"].values()]:
                assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read() == b"ok"
                for page in ("/json/identity.json", "/info/main/workers.html", "/status", "/metrics"):
                    with pytest.raises(urllib.error.HTTPError, match="404"):
                        urllib.request.urlopen(f"http://127.0.0.1:{port}{page}", timeout=10)
    if in_process:
        assert opened == set(), opened
    else:
        assert len(opened) >= 2 and {address.ip for address in opened} == {"127.0.0.1"}, opened


def test_the_workers_directory_is_private_to_the_run(tmp_path, monkeypatch):
    """Security audit: Dask's default worker directory, $TMPDIR/dask-scratch-space, is a name
    any local user can create first, and the nannies put it on sys.path, so a module planted
    there ran as this user. The embedded cluster's is made for the run (mode 0700) and goes
    with it; nothing planted is on any sys.path."""
    import tempfile

    from streambhmm.distributed.cluster import dask_client

    planted = tmp_path / "dask-scratch-space"
    planted.mkdir()
    planted.chmod(0o777)
    (planted / "planted_module.py").write_text("RAN = True\n")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with dask_client(n_workers=1) as client:
        paths = list(client.run(lambda: list(sys.path)).values()) + [list(sys.path)]
        (directory,) = client.run(lambda dask_worker: dask_worker.local_directory).values()
        (run,) = tmp_path.glob("streambhmm-dask-*")
        assert Path(directory).is_relative_to(run) and run.stat().st_mode & 0o777 == 0o700
    assert all(str(planted) not in path for path in paths), paths
    assert not run.exists() and sorted(p.name for p in planted.iterdir()) == ["planted_module.py"]


def test_workers_keep_glibcs_memory_trimming(tmp_path):
    """The nanny's MALLOC_TRIM_THRESHOLD_ made the chunk tasks 2.7x slower (cluster.WORKER_CONFIG):
    the embedded cluster's workers and the image's (its Dask config file) run without it."""
    from streambhmm.distributed.cluster import dask_client

    with dask_client(n_workers=1) as client:
        assert set(client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_")).values()) == {None}
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    text = re.search(r"printf '(.+?)' \\\n\s*> /etc/dask/streambhmm.yaml", dockerfile).group(1)
    (tmp_path / "streambhmm.yaml").write_text(text.replace("\\n", "\n"))
    config = dask.config.collect(paths=[str(tmp_path)], env={})
    with dask.config.set(config):
        from distributed.nanny import _get_env_variables

        assert "MALLOC_TRIM_THRESHOLD_" not in _get_env_variables("distributed.nanny.pre-spawn-environ")


# -- issue 25 -------------------------------------------------------------------------------
# Run as another user (nobody, when the tests run as root): connect to each server of an
# embedded cluster and ask it to run os.getuid. Everything the attempts need is imported
# first: after dropping privileges the interpreter's own files may be out of reach.
ATTACKER = r"""
import asyncio, json, os, pickle, pwd, ssl, sys
import distributed.comm.tcp  # noqa: F401
from distributed.core import rpc
from distributed.security import Security

request = json.loads(sys.stdin.read())
own_certificate = Security.temporary().get_connection_args("client")
"127.0.0.1".encode("idna")
if os.getuid() == 0:
    nobody = pwd.getpwnam("nobody")
    os.setgroups([])
    os.setgid(nobody.pw_gid)
    os.setuid(nobody.pw_uid)


def no_certificate():
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return {"ssl_context": context, "require_encryption": True}


async def attempt(address, role, connection_args):
    server = rpc(address, connection_args=connection_args, timeout=10)
    run = server.run_function if role == "scheduler" else server.run
    try:
        answer = await run(function=pickle.dumps(os.getuid))
        return f"ran: {answer['result'] if isinstance(answer, dict) else answer}"
    except OSError as exc:  # refused connections, closed comms and TLS handshake failures
        return f"refused: {type(exc).__name__}"
    except Exception as exc:
        return f"error: {type(exc).__name__}: {exc}"
    finally:
        await server.close_rpc()


async def main():
    results = {}
    for role, address in request["servers"]:
        plain = "tcp://" + address.split("://", 1)[1]
        results[f"{role} plain tcp"] = await attempt(plain, role, {})
        results[f"{role} tls without a certificate"] = await attempt(address, role, no_certificate())
        results[f"{role} tls with its own certificate"] = await attempt(address, role, own_certificate)
    if request["credentials"]:
        with_run_certificate = Security(**request["credentials"]).get_connection_args("client")
        results["control"] = await attempt(request["servers"][0][1], "scheduler", with_run_certificate)
    print(json.dumps({"uid": os.getuid(), "results": results}))


asyncio.run(main())
"""


def test_other_local_users_cannot_run_code_through_the_embedded_cluster():
    """Issue 25, item 17: every server of the embedded multi-process cluster (scheduler,
    nanny, worker: each runs any function it is sent) refuses a connection without this
    run's certificate: plain TCP, TLS without a certificate, TLS with another certificate.
    The attacker runs as nobody when the tests run as root; a control with the run's
    credentials shows that it could connect if it had them."""
    from streambhmm.distributed.cluster import dask_client

    with dask_client(n_workers=1) as client:
        workers = client.scheduler_info()["workers"]
        servers = [("scheduler", client.scheduler.address)]
        servers += [(role, address) for worker, info in workers.items()
                    for role, address in (("worker", worker), ("nanny", info["nanny"]))]
        security = client.security
        credentials = {name: getattr(security, name) for name in
                       ("tls_ca_file", "tls_client_cert", "tls_client_key")} if security.require_encryption else {}
        request = json.dumps({"servers": servers, "credentials": credentials})
        proc = subprocess.run([sys.executable, "-c", ATTACKER], input=request, capture_output=True, text=True,
                              env=ENV, cwd="/")
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
    if os.getuid() == 0:
        assert report["uid"] not in (0, os.getuid())
    results = report["results"]
    control = results.pop("control", None)
    assert len(results) == 3 * len(servers) and all(outcome.startswith("refused") for outcome in results.values()), \
        results
    assert control == f"ran: {os.getuid()}", report


@pytest.mark.parametrize("quiet", [False, True])
def test_the_wait_for_an_unreachable_scheduler_is_shown_unless_quiet(tmp_path, few_chunks, quiet):
    """A server that never answers Dask's handshake is waited for up to Dask's connect timeout
    (30 s by default) before the error, and nothing said so: a progress step shows the wait (a
    line a second here), none with -q. Nothing listening at all is said at once (an audit: it
    waited out the timeout too, as Dask's connect retries a refused connection)."""
    class Silent(socketserver.BaseRequestHandler):
        def handle(self):
            while self.request.recv(65536):
                pass

    env = {**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s", "STREAMBHMM_PROGRESS_EVERY": "1"}
    with serving(Silent) as address:
        proc = subprocess.run([*STREAMBHMM, "moments", few_chunks.path.url, "-o", tmp_path / "m.zarr", *BINS,
                               "--scheduler", address, *(["-q"] if quiet else [])], capture_output=True, text=True,
                              timeout=300, env=env)
    assert proc.returncode == 1 and f"Error: cannot reach the Dask scheduler at {address}" in proc.stderr
    waiting = [line for line in proc.stderr.splitlines()
               if line.startswith(f"connecting to the Dask scheduler at {address} (at most 3 s) [00:0")]
    assert (not waiting) if quiet else waiting, proc.stderr
    refused = "tcp://127.0.0.1:9"
    proc = subprocess.run([*STREAMBHMM, "moments", few_chunks.path.url, "-o", tmp_path / "m.zarr", *BINS,
                           "--scheduler", refused, *(["-q"] if quiet else [])], capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 1 and f"Error: cannot reach the Dask scheduler at {refused}: nothing listens there " \
                                    f"(connection refused)" in proc.stderr, proc.stderr
    assert not [line for line in proc.stderr.splitlines() if "[00:0" in line], proc.stderr  # no wait to show


@contextlib.contextmanager
def serving(handler):
    """A TCP server on the loopback interface answering each connection with ``handler`` (a
    socketserver.BaseRequestHandler) in a thread of its own; yields its tcp:// address."""
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"tcp://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()


def test_scheduler_address_of_an_http_server_fails_fast_without_the_lock(tmp_path, few_chunks):
    """Issue 25, item 11: --scheduler at an HTTP server (which never answers Dask's handshake)
    waited forever holding the store's reader lock. Now the connection is bounded
    (distributed.comm.timeouts.connect) and made before the lock: when the server sees the
    connection, a writer could still lock the store."""
    import fcntl

    store = few_chunks.path
    lock_file = Path(store.url).parent / f".{Path(store.url).name}.lock"
    seen = []

    class Silent(socketserver.BaseRequestHandler):
        def handle(self):  # as an HTTP server: read, wait for a request line that never comes
            with open(lock_file, "a") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    seen.append("store free")
                    fcntl.flock(fh, fcntl.LOCK_UN)
                except BlockingIOError:
                    seen.append("store locked")
            while self.request.recv(65536):
                pass

    with serving(Silent) as address:
        proc = subprocess.run([*STREAMBHMM, "moments", store.url, "-o", tmp_path / "m.zarr", *BINS, "--scheduler",
                               address, "-q"], capture_output=True, text=True, timeout=300,
                              env={**ENV, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "3s"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"Error: cannot reach the Dask scheduler at {address} (no Dask handshake within 3 s)" in proc.stderr
    assert seen and set(seen) == {"store free"}


@pytest.mark.parametrize("greeting", [b"SSH-2.0-OpenSSH_9.6\r\n", bytes(8), bytes.fromhex("0100000000000000ff")])
def test_another_service_at_the_schedulers_address_is_named_as_such(greeting):
    """An SSH server's greeting, read by distributed as a frame's length, asked numpy for
    2.82 EiB: the command ended with MemoryError's traceback (a helper's audit); a zero frame
    count, with struct.error's."""
    from streambhmm.distributed.cluster import SchedulerLost, _check_scheduler

    class Greeting(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(greeting)
            while self.request.recv(65536):
                pass

    with serving(Greeting) as address, \
            pytest.raises(SchedulerLost, match="is not a Dask scheduler .what it sent is not Dask's protocol"):
        _check_scheduler(address, 5.0)


def test_a_stopped_worker_during_em_ends_with_a_message(tmp_path, few_chunks):
    """Issue 25, item 11: workers stopped (SIGSTOP) during EM keep their tasks and answer
    nothing; the wait is bounded ($STREAMBHMM_WAIT_TIMEOUT, small here) and the message
    names what it waited for."""
    args = ["fit", few_chunks.path, "-m", "4", "--method", "em", "--em-iter", "1000", "--em-tol", "0", "--seed",
            "2", *BINS, "-o", tmp_path / "m.json"]
    with ProcessCluster(n_workers=2) as cluster:
        proc = subprocess.Popen([*STREAMBHMM, *map(str, args), "--scheduler", cluster.address],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**ENV, "STREAMBHMM_WAIT_TIMEOUT": "10"})
        for line in proc.stderr:
            if (match := EM_ITERATION.search(line)) and int(match.group(1)) >= 1:
                cluster.pause_workers()
                break
        output, errors = proc.communicate(timeout=300)
    assert proc.returncode == 1, output + errors
    assert "Traceback" not in errors
    assert re.search(r"Error: waited \d+ s for the E-step of EM iteration \d+ on \S+counts.zarr while no task "
                     r"finished on the Dask cluster \(scheduler tcp://127.0.0.1:\d+\): a worker may be stopped",
                     errors), errors
    assert "set $STREAMBHMM_WAIT_TIMEOUT to wait longer than 10 s" in errors
    assert not (tmp_path / "m.json").exists()


def test_workers_dying_on_a_task_give_a_message(tmp_path, many_chunks):
    """Issue 25, item 15: a task whose workers die (KilledWorker: most often memory; here
    after one death, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES=0) ends the command with
    a message, not a traceback; the partials written so far are kept."""
    moments = tmp_path / "m.zarr"
    with ProcessCluster(n_workers=2, environment={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"}) as cluster:
        proc = start("moments", "compute", many_chunks.path, "-o", moments, *BINS, "--scheduler", cluster.address, "-q")
        wait_for_partials(moments, 5, proc)
        cluster.kill_worker(0)
        output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 1, output
    assert "Traceback" not in output
    assert re.search(r"Error: the Dask workers running task '.+' died 1 time\(s\), the last tcp://127.0.0.1:\d+: "
                     r"most likely out of memory", output), output
    assert f"kept in {moments}; rerun this command to resume" in output


def test_relative_paths_reach_workers_in_other_directories(tmp_path, few_chunks):
    """Issue 25, item 13: the workers of a separate cluster run in another directory; a
    relative store path is made absolute before it is sent to them."""
    shutil.copytree(few_chunks.path.url, tmp_path / "counts.zarr")
    shutil.copy(DATA / "dmrseq_H1_r1.chr21.tsv.gz", tmp_path)
    (tmp_path / "manifest.tsv").write_text("sample\tgroup\tformat\tfiles\nH1\tg\ttsv\tdmrseq_H1_r1.chr21.tsv.gz\n")
    with ProcessCluster(n_workers=2) as cluster:
        for command in (["moments", "counts.zarr", "-o", "m.zarr", *BINS],
                        ["fit", "counts.zarr", "-m", "4", "--method", "ftd-em", "--em-iter", "2", *BINS, "-o",
                         "model.json"],
                        ["decode", "counts.zarr", "--model", "model.json", "--posteriors", "-o", "states.bed"],
                        ["batch", "manifest.tsv", "--workdir", "work", *BINS]):
            proc = subprocess.run([*STREAMBHMM, *command, "--scheduler", cluster.address, "-q"], capture_output=True,
                                  text=True, env=ENV, cwd=tmp_path)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    assert load_total(tmp_path / "m.zarr")[1]["complete"]
    assert (tmp_path / "states.bed").exists()
    assert load_total(tmp_path / "work" / "g" / "moments.zarr")[1]["complete"]


def test_the_embedded_clusters_directory_goes_after_dasks_own_finalizers(tmp_path):
    """A command stopped while its cluster closed left the scheduler's workspace to a finalizer
    at exit, which made lock files again in the removed directory (SIGTERM, 2 of 8 runs left
    /tmp/streambhmm-dask-*). The directory's own finalizer is made before the cluster, so it
    runs after every finalizer the cluster makes; here one stands in for the scheduler's."""
    scratch = tmp_path / "streambhmm-dask-x"
    code = f"""
import os, weakref
from streambhmm.distributed.cluster import _removed_at_exit
os.mkdir({str(scratch)!r})
_removed_at_exit({str(scratch)!r})
class Scheduler: pass
scheduler = Scheduler()
weakref.finalize(scheduler, os.makedirs, {str(scratch / "dask-scratch-space")!r})  # made later: runs first
os.rmdir({str(scratch)!r})  # the TemporaryDirectory's removal, before the exit
"""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    assert not scratch.exists()


def test_a_memory_store_is_refused_where_worker_processes_would_write_it():
    """fsspec's memory is each process's own: on a scheduler's workers `moments -o memory://...`
    reported partials it did not keep, and `batch` ingested samples its groups then lacked."""
    from streambhmm.distributed.cluster import dask_client

    for scheduler, in_process in (("tcp://127.0.0.1:1", False), (None, False)):
        with pytest.raises(ValueError, match="memory://m.zarr: a memory:// store lives in this process's memory"):
            with dask_client(scheduler, in_process=in_process, shared=["/tmp/counts.zarr", "memory://m.zarr"]):
                pass
    with dask_client(None, in_process=True, shared=["memory://m.zarr"]) as client:  # the tasks share this process
        assert client.compute([dask.delayed(sum)([1, 2])])[0].result() == 3
