"""The C of the native MPI steps compiles on its own, with no MPI header: ``csrc/mpi_coll.c`` for
pointer handles (Open MPI) and integer handles (MPICH), and the program-side ``csrc/mpi_steps.h``
(no MPI runtime needed; the steps themselves are tested under mpirun in test_spmd_native.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ember._src.native.csrc import load
from ember._src.native.emit import mpi_calls

CC = shutil.which("gcc") or shutil.which("cc")


def _compile(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    f = tmp_path / "unit.c"
    f.write_text(text)
    return subprocess.run([CC, "-c", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", str(f), "-o",
                           str(tmp_path / "unit.o")], capture_output=True, text=True, timeout=600)


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
@pytest.mark.parametrize("int_handles", [False, True])
def test_library_compiles_without_mpi_h(tmp_path, int_handles):
    source, name = mpi_calls._symbol_source(int_handles)
    assert "#include <mpi.h>" not in source and name.startswith("ember_mpi_")
    out = _compile(tmp_path, source)
    assert out.returncode == 0, out.stderr
    nm = shutil.which("nm")
    if nm:
        syms = subprocess.run([nm, "-g", str(tmp_path / "unit.o")], capture_output=True, text=True).stdout
        assert {f"{name}_init", f"{name}_set_comm", f"{name}_step"} <= set(syms.split())


@pytest.mark.skipif(CC is None, reason="needs a C compiler")
def test_program_side_header_compiles(tmp_path):
    unit = ('#include <stdint.h>\n#define EM_MPI_STEP "ember_mpi_test_step"\n' + load("mpi_steps.h")
            + "int f(float *a, float *b) { return em_mpi_step(0, 0, a, b, 4, 1, 4, 0, 0); }\n")
    out = _compile(tmp_path, unit)
    assert out.returncode == 0, out.stderr
