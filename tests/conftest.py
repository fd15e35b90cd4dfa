import numpy as np
import pytest

from streambhmm.learn.simulate import model

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
