"""Collectives over a named process axis (``spmd``) across 2 and 3 MPI processes under jit, grad and
vmap, against NumPy and finite differences. Each run is ``tests/distributed/spmd_worker.py`` under
``mpirun`` with a timeout (a hang fails the test instead of blocking CI)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.distributed.mpi_launch import ROOT, mpirun_or_skip, run

MPIRUN = mpirun_or_skip()
WORKER = Path(__file__).with_name("spmd_worker.py")


def _run(n: int, scenario: str, script: list[str] | None = None) -> Any:
    out = run(MPIRUN, n, script or [str(WORKER), scenario])
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
