import os
import signal
from pathlib import Path

# Dask's background monitoring, for every cluster the suite starts (here, and inherited by the
# commands and `dask` processes it runs): each idle worker sampled its own call stack every
# 10 ms and read /proc every 100-500 ms, a tenth of the suite's CPU time in a profile of it.
# The tests assert results, messages and files, none of which these samplers feed.
os.environ.update({"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False",
                   "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL": "5s",
                   "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__DISK": "False",
                   "DASK_DISTRIBUTED__WORKER__MEMORY__MONITOR_INTERVAL": "1s"})

import dask  # noqa: E402 - after the environment it reads
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from streambhmm.learn.simulate import model  # noqa: E402

dask.config.refresh()  # in case a plugin imported dask before the environment was set

# The suite stops commands and writers with Ctrl-C. A run started in the background by a
# non-interactive shell inherits SIGINT ignored (and the commands it starts would too), and then
# those tests failed with "DID NOT RAISE KeyboardInterrupt".
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The real data sets (shared/data/real): $STREAMBHMM_REAL_DATA, else ../shared/data/real beside
# the repository (where CI has it). Tests marked realdata fail when it is missing, unless
# $STREAMBHMM_ALLOW_MISSING_REAL_DATA=1 lets them skip (a developer's machine without the data).
REAL_DATA_ENV, ALLOW_MISSING_ENV = "STREAMBHMM_REAL_DATA", "STREAMBHMM_ALLOW_MISSING_REAL_DATA"
REAL_DATA = Path(os.environ.get(REAL_DATA_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data" / "real")
CLUSTER_FIXTURES = {"dask_clients", "scheduler"}


def pytest_collection_modifyitems(config, items):
    """A test that uses a real Dask cluster is slow (marked here, so no such test can miss it)."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item):
    if item.get_closest_marker("realdata") is None or REAL_DATA.is_dir():
        return
    message = (f"the real data sets are missing: {REAL_DATA} (set ${REAL_DATA_ENV} to their folder, or "
               f"${ALLOW_MISSING_ENV}=1 to skip the tests that read them)")
    if os.environ.get(ALLOW_MISSING_ENV) == "1":
        pytest.skip(message)
    pytest.fail(message, pytrace=False)

# Four well-separated states, two samples, a sticky chain.
WELL_SEPARATED = np.array([[0.05, 0.10], [0.35, 0.80], [0.65, 0.20], [0.95, 0.90]])
STICKY = np.full((4, 4), 0.1 / 3) + np.eye(4) * (0.9 - 0.1 / 3)
STATE_DEPENDENT_COVERAGE = np.array([[60, 60], [12, 12], [16, 16], [20, 20]])


@pytest.fixture
def four_state_model():
    return model(WELL_SEPARATED, STICKY)


@pytest.fixture(scope="session")
def dask_clients():
    """Real distributed schedulers: LocalClusters of 1 and 2 single-threaded worker processes."""
    from distributed import Client, LocalCluster

    clusters = [LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")
                for n in (1, 2)]
    clients = [Client(c) for c in clusters]
    yield clients
    for client, cluster in zip(clients, clusters):
        client.close()
        cluster.close()


@pytest.fixture
def scheduler(dask_clients):
    """The address of the two-worker test cluster (for commands run through the CLI)."""
    return dask_clients[1].scheduler.address
