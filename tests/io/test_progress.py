"""Progress: one updating line on a terminal, a line every few seconds elsewhere, nothing
with -q; a long command shows it under a pseudo-terminal."""

import io
import os
import pty
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from streambhmm.io import progress
from streambhmm.io.progress import EVERY_ENV, printing, stage

STREAMBHMM = [str(Path(sys.executable).with_name("streambhmm"))]


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("iterations", [20, 22])
def test_without_a_terminal_a_line_every_few_seconds_and_a_last_one(monkeypatch, iterations):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    clock = [1000.0]
    monkeypatch.setattr(progress, "_now", lambda: clock[0])
    monkeypatch.setenv(EVERY_ENV, "5")
    with stage("fit", 3, unit="models") as outer:
        outer(0, note="M = 2")
        with stage("EM", 100, unit="iterations") as inner:
            for i in range(1, iterations + 1):
                clock[0] += 1.0  # a second per iteration: a line every 5
                inner(i, note=f"loglik {-i}")
    lines = err.getvalue().splitlines()
    assert "\r" not in err.getvalue()
    # the step's last count once: a line of its own unless the last periodic line showed it
    assert [int(re.search(r"EM: (\d+)/100", line).group(1)) for line in lines] == [5, 10, 15, 20, 22][
        :4 if iterations == 20 else 5]
    assert lines[0].startswith("fit 1/3 (M = 2) > EM: 5/100 (5%) [00:05 elapsed, 01:35 left")
    assert lines[0].endswith("loglik -5")
    assert lines[-1].endswith(f"loglik -{iterations}")


def test_a_short_step_without_a_terminal_writes_nothing(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with stage("decode", 10) as shown:
        for i in range(10):
            shown(i + 1)
    assert err.getvalue() == ""


def test_quiet_writes_nothing_on_a_terminal(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with stage("decode", 10, quiet=True) as shown:
        shown(3)
        shown.advance()
        assert shown.done == 4
    assert err.getvalue() == ""


def test_with_standard_error_closed_a_step_shows_nothing_and_fails_nothing(monkeypatch):
    monkeypatch.setattr(sys, "stderr", None)  # what Python sets for 2>&-
    monkeypatch.setenv(EVERY_ENV, "0")  # a line at every update, were there somewhere to write it
    with stage("EM", 10, unit="iterations", capped=True) as shown:
        shown(3, note="loglik -5")
        shown.advance()
        assert shown.done == 4


def test_on_a_terminal_one_line_updated_in_place_and_cleared(monkeypatch):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", err)  # messages and the line share the terminal
    with stage("ingest A", unit="B", unit_scale=True) as shown:
        shown(0, 4 << 20)
        shown(1 << 20)
        with printing():
            print("a message")
        shown(4 << 20)
    text = err.getvalue()
    assert "\n" not in text.replace("a message\n", "")  # one line, redrawn with carriage returns
    assert text.count("\ringest A:") >= 2 and "1.00M/4.00M" in text
    assert text.index("a message") > text.index("ingest A:") and text.endswith("\r")


def test_on_a_terminal_a_total_given_before_any_count_is_shown(monkeypatch):
    """A pass that learns its number of chunks when it starts says it before its first chunk
    (pmd's regions sat at '0chunks' through numba's compilation)."""
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    with stage("pmd: regions", unit="chunks") as shown:
        shown(0, 23)
        assert "0/23" in err.getvalue(), err.getvalue()


def test_on_a_terminal_a_step_is_shown_from_its_start_and_its_clock_runs(monkeypatch):
    """A step of one long task (one chunk) gets no update until it ends: its line is drawn
    when it starts, and redrawn every TICK seconds meanwhile; an outer step's line comes back
    when the inner one ends, with its clock and note (the outer step began 65 s ago)."""
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(progress, "TICK", 0.01)
    monkeypatch.setattr(progress, "_now", lambda: time.time() - 65)  # tqdm's clock, 65 s back
    with stage("fit", 3, unit="models") as outer:
        outer(0, note="M = 2")
        with stage("regions", 1, unit="chunks"):
            assert "\rfit 1/3 (M = 2) > regions:" in err.getvalue()  # before any update
            drawn = err.getvalue().count("\rfit 1/3 (M = 2) > regions:")
            for _ in range(500):
                if err.getvalue().count("\rfit 1/3 (M = 2) > regions:") >= drawn + 3:
                    break
                threading.Event().wait(0.01)
            assert err.getvalue().count("\rfit 1/3 (M = 2) > regions:") >= drawn + 3
        assert err.getvalue().rindex("\rfit:") > err.getvalue().rindex("\rfit 1/3 (M = 2) > regions:")
        assert re.search(r"\[01:0\d<.*M = 2\]$", err.getvalue().split("\r")[-1]), err.getvalue().split("\r")[-1]


def test_without_a_terminal_a_step_without_news_still_writes_a_line_every_few_seconds(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(progress, "TICK", 0.01)
    monkeypatch.setenv(EVERY_ENV, "0.05")
    with stage("moments", 1, unit="chunks"):
        for _ in range(500):
            if len(err.getvalue().splitlines()) >= 2:
                break
            threading.Event().wait(0.01)
    lines = err.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("moments: 0/1 (0%) [") for line in lines), lines


def test_a_capped_step_shows_no_time_left(monkeypatch):
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv(EVERY_ENV, "0")
    with stage("EM", 1000, unit="iterations", capped=True) as shown:
        shown(3, note="loglik -5")
    assert err.getvalue().splitlines()[0].startswith("EM: 3 of at most 1000 [")
    assert " left" not in err.getvalue() and "%" not in err.getvalue()


def test_the_interval_must_be_a_number(monkeypatch):
    monkeypatch.setenv(EVERY_ENV, "often")
    with pytest.raises(ValueError, match=r"\$STREAMBHMM_PROGRESS_EVERY must be a number of seconds, got 'often'"):
        progress.every()


# --- a long command, as a user runs it ---


@pytest.fixture(scope="module")
def em_store(tmp_path_factory):
    from streambhmm.learn.simulate import model
    from ..conftest import STICKY, WELL_SEPARATED

    from ..moments.test_pipeline import synthetic_store

    return synthetic_store(tmp_path_factory.mktemp("progress") / "counts.zarr", model(WELL_SEPARATED, STICKY),
                           [20_000, 10_000], chunk_size=5000)


def em_command(store, output):
    return [*STREAMBHMM, "fit", str(store.path), "-m", "4", "--method", "em", "--em-starts", "1", "--em-iter", "60",
            "--em-tol", "0", "--bins", "8", "-o", str(output)]


def env():
    return {k: v for k, v in os.environ.items() if k not in ("STREAMBHMM_SCHEDULER", EVERY_ENV, "COLUMNS")}


@pytest.mark.slow
def test_a_long_command_under_a_pseudo_terminal_updates_its_progress_line(tmp_path, em_store):
    main, child = pty.openpty()  # every iteration redrawn ($STREAMBHMM_PROGRESS_EVERY 0), however fast EM runs
    proc = subprocess.Popen(em_command(em_store, tmp_path / "m.json"), stdin=child, stdout=child, stderr=child,
                            env={**env(), EVERY_ENV: "0"}, close_fds=True)
    os.close(child)
    output = b""
    while True:
        ready, _, _ = select.select([main], [], [], 600)
        try:
            data = os.read(main, 1 << 16) if ready else b""
        except OSError:  # the child closed the terminal
            data = b""
        if not data:
            break
        output += data
    os.close(main)
    assert proc.wait(timeout=60) == 0, output
    text = output.decode("utf-8", "replace")
    counts = [int(n) for n in re.findall(r"\rEM from random start 1 of 1: (\d+) of at most 60 \[", text)]
    assert len(counts) >= 2 and counts == sorted(counts) and counts[-1] > counts[0], text
    assert "loglik" in text and ("EM converged" in text or "EM stopped at --em-iter 60" in text)


@pytest.mark.slow
def test_a_long_command_into_a_pipe_writes_progress_lines(tmp_path, em_store):
    proc = subprocess.run(em_command(em_store, tmp_path / "m.json"), capture_output=True, text=True,
                          env={**env(), EVERY_ENV: "0"})
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("EM from random start 1 of 1: ")]
    assert len(lines) >= 2 and "\r" not in proc.stderr, proc.stderr
    # EM stops when it converges: the cap is no total to count the time left against
    assert re.match(r"EM from random start 1 of 1: \d+ of at most 60 \[\S+ elapsed, [^],]*\], loglik ", lines[-1])
    assert "EM from" not in proc.stdout  # the results go to standard output, the progress beside them
    quiet = subprocess.run(em_command(em_store, tmp_path / "q.json") + ["-q"], capture_output=True, text=True,
                           env={**env(), EVERY_ENV: "0"})
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_a_step_says_when_numba_is_compiling(monkeypatch):
    """A first run's long wait is numba compiling kernels: the step's line says so while it
    does (after its own note), and not once the kernel is compiled or loaded from the cache."""
    import numba

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv(EVERY_ENV, "0")

    @numba.njit(cache=False)
    def doubled(x):  # a new function: compiled at its first call, whatever numba's cache holds
        return 2 * x

    with stage("regions", 1) as shown:
        shown(0, note="chr1")
        doubled(3)
        shown(1)
    lines = err.getvalue().splitlines()
    assert any(line.endswith(f"chr1, {progress.COMPILING}") for line in lines), lines
    assert lines[-1].endswith("chr1") and progress._compiling[0] == 0


def test_the_compile_note_never_fails_a_kernel(monkeypatch):
    """The note is written from inside numba's compilation: a standard error that fails there
    (closed, a broken pipe) must not fail the kernel's call, and a compilation already under
    way when the listener came (its end without a start) counts nothing."""
    import numba
    from numba.core import event

    class Failing(io.StringIO):
        def write(self, text):
            if progress._compiling[0]:
                raise ValueError("I/O operation on closed file")
            return super().write(text)

    monkeypatch.setattr(sys, "stderr", Failing())
    monkeypatch.setenv(EVERY_ENV, "0")

    @numba.njit(cache=False)
    def tripled(x):
        return 3 * x

    with stage("fit", 1) as shown:
        assert tripled(2) == 6
        ended = []
        worker = threading.Thread(target=lambda: ended.append(event.end_event("numba:compile", data={})))
        worker.start()
        worker.join()
        shown(1)
    assert ended == [None] and progress._compiling[0] == 0
