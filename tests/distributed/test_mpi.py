"""ember.distributed over MPI: collectives against NumPy on 2 and 3 processes (integers exact),
data-parallel training equal to one process on the full batch, a failing process ending the run.
Each scenario runs ``tests/distributed/mpi_worker.py`` under ``mpirun`` with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.mpi_launch import mpirun_or_skip, run

MPIRUN = mpirun_or_skip()
WORKER = Path(__file__).with_name("mpi_worker.py")


def _run(n: int, scenario: str, timeout: int = 600):
    return run(MPIRUN, n, [str(WORKER), scenario], timeout)


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_against_numpy(n):
    out = _run(n, "collectives")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(out.stdout.split("\n")).count("") <= 1 and out.stdout.count("OK ") == n


def test_data_parallel_training_matches_one_process():
    out = _run(2, "train")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("OK ") == 2


def test_a_failing_process_ends_the_run():
    out = _run(2, "fail", timeout=600)  # a hang would hit the timeout and fail the test
    assert out.returncode != 0
    assert "process 1 failed on purpose" in out.stderr
    assert "aborting all 2 processes" in out.stderr
