"""The CLI against a real cluster of separate processes (`dask scheduler`, two `dask worker`s
on 127.0.0.1, as docker-compose.yml runs them), and what happens when parts of it die."""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import dask
import numpy as np
import pytest

from streambhmm.moments.momentstore import load_total
from streambhmm.moments.pipeline import moments_graph, plan_chunks
from streambhmm.distributed.processes import ProcessCluster
from streambhmm.learn.simulate import model

from ..conftest import STICKY, WELL_SEPARATED
from ..app.test_cli import run
from ..moments.test_pipeline import synthetic_store

STREAMBHMM = [str(Path(sys.executable).with_name("streambhmm"))]  # the installed entry point
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
ENV.pop("STREAMBHMM_SCHEDULER", None)
BINS = ("--bins", "8")  # a small Beta map keeps partials small


def model_fields(path):
    document = json.loads(Path(path).read_text())
    document.pop("created_by")
    return document


@pytest.fixture(scope="module")
def many_chunks(tmp_path_factory):
    """Enough chunks that a run lasts long enough to be interrupted."""
    path = tmp_path_factory.mktemp("cluster") / "counts.zarr"
    return synthetic_store(path, model(WELL_SEPARATED, STICKY), [40_000, 20_000], 500, seed=5)


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
    args = ["fit", few_chunks.path, "-m", "4", "--method", "em", "--em-iter", "4", "--em-tol", "0", "--seed", "2",
            *BINS]
    reference = run(*args, "-o", tmp_path / "reference.json", "--scheduler", dask_clients[1].scheduler.address)
    assert reference.exit_code == 0, reference.output
    with ProcessCluster(n_workers=2) as cluster:
        proc = start(*args, "-o", tmp_path / "killed.json", "--scheduler", cluster.address)
        lines = []
        for line in proc.stdout:  # kill a worker once EM is under way
            lines.append(line)
            if "EM iteration 1:" in line:
                cluster.kill_worker(0)
                break
        output = "".join(lines) + proc.communicate(timeout=300)[0]
    assert "EM iteration 1:" in output and proc.returncode == 0, output
    assert "EM iteration 4:" in output
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


def test_unreachable_scheduler_is_a_clear_error(tmp_path, many_chunks):
    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        r = run("fit", many_chunks.path, "-m", "4", "-o", tmp_path / "m.json", "--scheduler", "tcp://127.0.0.1:9",
                "-q")
    assert r.exit_code == 1
    assert "Error: cannot reach the Dask scheduler at tcp://127.0.0.1:9" in r.output, r.output
    assert not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("in_process", [False, True])
def test_embedded_cluster_listens_on_loopback_only(in_process):
    """Audit 8: the dashboard and every server of the embedded cluster, of worker processes
    or in process (whose scheduler and worker serve HTTP on every interface at port 8787 by
    default), listen on 127.0.0.1 only."""
    import psutil

    from streambhmm.distributed.cluster import dask_client

    def listening() -> set:
        this = psutil.Process()
        return {c.laddr for p in (this, *this.children(recursive=True)) for c in p.net_connections("inet")
                if c.status == psutil.CONN_LISTEN}

    before = listening()
    with dask_client(n_workers=1, in_process=in_process):
        opened = listening() - before
    assert len(opened) >= 2 and {address.ip for address in opened} == {"127.0.0.1"}, opened


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
