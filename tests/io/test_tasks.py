"""InProcessClient: Dask graphs run in this process, with the futures the commands read."""

import threading
import time

import dask
import pytest

from streambhmm.io.tasks import InProcessClient, Waiter


def square(x):
    return x * x


def fail(x):
    raise ZeroDivisionError(f"task {x} failed")


def test_in_process_futures_hold_the_graphs_results_by_key():
    parts = [dask.delayed(square, pure=True)(i) for i in range(20)]
    total = dask.delayed(sum)(parts)
    with InProcessClient(2) as client:
        futures = client.compute(parts)
        assert [f.key for f in futures] == [p.key for p in parts]
        waiter = Waiter(client, futures, "the squares")
        done = {f.key: waiter.result(f) for f in waiter.as_completed()}
        assert [done[p.key] for p in parts] == [i * i for i in range(20)]
        single = client.compute(total)
        assert Waiter(client, [single], "the sum").result(single) == sum(i * i for i in range(20))
        assert single.status == "finished"
        single.release()
        assert single.result() is None  # the value is dropped once the caller has it
    assert client.status == "closed"


class Running:
    """How many tasks run at once, at most."""

    def __init__(self):
        self.lock, self.now, self.most = threading.Lock(), 0, 0

    def task(self, x):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.02)  # long enough for the other computation's tasks to overlap
        with self.lock:
            self.now -= 1
        return x


def test_computations_side_by_side_share_the_clients_threads():
    running = Running()
    with InProcessClient(2) as client:
        batches = [client.compute([dask.delayed(running.task, pure=False)(i) for i in range(8)]) for _ in range(3)]
        for futures in batches:
            assert [Waiter(client, futures, "the tasks").result(f) for f in futures] == list(range(8))
    assert running.most <= 2  # 6 with a pool of two threads per computation


def test_a_failing_task_raises_its_error_where_its_result_is_read():
    with InProcessClient(2) as client:
        future = client.compute(dask.delayed(fail, pure=True)(3))
        with pytest.raises(ZeroDivisionError, match="task 3 failed"):
            Waiter(client, [future], "the failing task").result(future)
        assert future.status == "error"


def test_leaving_on_an_error_stops_the_computation_starting_tasks():
    """Ctrl-C in a command: the context is left with KeyboardInterrupt, and the pass stops
    after the tasks running, where it used to run to its end first."""
    import threading

    gate = threading.Event()

    def held(x):
        gate.wait(60)  # the first tasks wait until the command is stopping
        return x

    parts = [dask.delayed(held, pure=True)(i) for i in range(40)]
    client = InProcessClient(1)
    with pytest.raises(KeyboardInterrupt):
        with client:
            futures = client.compute(parts)
            threading.Timer(0.2, gate.set).start()
            raise KeyboardInterrupt
    assert client.count_computed([p.key for p in parts]) < 5  # the one running, not the 40
    assert all(f.status == "error" for f in futures[5:])


def test_in_process_client_counts_a_graphs_computed_parts():
    """What a distributed scheduler tells _PartsDone (a graph's parts done), counted here."""
    parts = [dask.delayed(square, pure=True)(i) for i in range(7)]
    other = dask.delayed(square, pure=True)(100)
    with InProcessClient(2) as client:
        assert client.count_computed([p.key for p in parts]) == 0
        future = client.compute(dask.delayed(sum)(parts))
        assert future.result(timeout=60) == sum(i * i for i in range(7))
        assert client.count_computed([p.key for p in parts] + [other.key]) == 7


def test_the_progress_of_one_value_ends_with_every_part_done(monkeypatch, capsys):
    """Without a terminal, a computation that wrote a line writes its last count: all parts."""
    import time

    from streambhmm.distributed.cluster import compute

    def slow(x):
        time.sleep(0.3)
        return x

    monkeypatch.setenv("STREAMBHMM_PROGRESS_EVERY", "0.1")
    parts = [dask.delayed(slow, pure=True)(i) for i in range(3)]
    with InProcessClient(1) as client:
        assert compute(client, dask.delayed(sum)(parts), what="the sum", parts=parts) == 3
    lines = capsys.readouterr().err.splitlines()
    assert lines and lines[-1].startswith("the sum: 3/3 (100%)"), lines


def test_a_scheduler_without_workers_or_silent_is_named_as_such_when_the_wait_ends(capsys):
    """A scheduler with no worker ran nothing for the whole wait, and the message said a worker
    might be stopped or hung (a helper's audit): it now says there is none, and how to start one.
    It is said at the first look too, once: a quiet command waited 300 s without a word."""
    from distributed import Client, LocalCluster

    from streambhmm.io.tasks import ClusterStalled

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, Client(cluster) as client:
        future = client.submit(sum, [1, 2])
        with pytest.raises(ClusterStalled, match=f"the Dask scheduler at {cluster.scheduler_address} has no worker. "
                                                 f"Start some .`dask worker {cluster.scheduler_address}`."):
            list(Waiter(client, [future], "a sum", bound=3.0).as_completed())  # a look every 2 s
        told = [line for line in capsys.readouterr().err.splitlines() if "has no worker" in line]
        assert told == [f"note: the Dask scheduler at {cluster.scheduler_address} has no worker; waiting up to 3 s "
                        f"for one, for a sum (start one: `dask worker {cluster.scheduler_address}`)"]
        # a stopped scheduler (SIGSTOP) answers no look, and the message blamed the workers (a
        # helper's trial): it names the scheduler
        waiter = Waiter(client, [future], "a sum", bound=3.0)
        waiter._running_tasks = lambda: None  # what a look gets from a scheduler that does not answer in time
        with pytest.raises(ClusterStalled, match=f"the Dask scheduler at {cluster.scheduler_address} does not answer "
                                                 r"\(stopped or hung\?\)"):
            list(waiter.as_completed())

