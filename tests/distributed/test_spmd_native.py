"""Collectives across processes as native steps (MPI called from C inside the jitted program's one
native call): every collective of ``spmd`` against NumPy on 2 and 3 processes for float and
integer dtypes (integers bit-exact), the schedule holding the MPI steps and no callback; gradients
against the transposes and finite differences; the mpi4py fallback where MPI's C functions cannot
be found. Each run is ``tests/distributed/spmd_native_worker.py`` under ``mpirun`` with a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.mpi_launch import mpirun_or_skip, run

MPIRUN = mpirun_or_skip()
WORKER = Path(__file__).with_name("spmd_native_worker.py")


def _run(n: int, scenario: str) -> None:
    out = run(MPIRUN, n, [str(WORKER), scenario])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("OK ") == n, out.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_native_collectives_against_numpy(n):
    _run(n, "collectives")


@pytest.mark.parametrize("n", [2, 3])
def test_native_collectives_gradients(n):
    _run(n, "gradients")


@pytest.mark.parametrize("n", [2, 3])
def test_native_collectives_forward_mode(n):
    _run(n, "forward")


def test_without_mpi_c_functions_the_collectives_run_through_mpi4py():
    _run(2, "fallback")
