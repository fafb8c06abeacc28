"""Cost of a process collective inside a jitted program (``spmd`` psum: a step of the native call
that calls MPI_Allreduce from C) against mpi4py's own Allreduce on a NumPy buffer (the full table,
with the host-callback path, is ``bench_distributed.py``).

Run: ``mpirun -n 2 python benchmarks/bench_spmd.py`` (prints medians on process 0)."""

from __future__ import annotations

import time

import numpy as np

import ember
from ember import distributed as dist
from ember._src.distributed.spmd import psum, spmd


def _median(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        dist.barrier()
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main() -> None:
    from mpi4py import MPI

    dist.initialize()
    comm = MPI.COMM_WORLD
    f = ember.jit(spmd(lambda v: psum(v, "data"), "data"))
    rows = []
    for nbytes in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        x = np.ones(nbytes // 4, np.float32)
        recv = np.empty_like(x)
        f(x)
        reps = 30 if nbytes <= 1 << 20 else 8
        for _ in range(2):  # interleaved, the last pair kept
            t_ember = _median(lambda x=x: np.asarray(f(x)), reps)
            t_mpi = _median(lambda x=x, recv=recv: comm.Allreduce(x, recv, op=MPI.SUM), reps)
        rows.append((nbytes, t_ember, t_mpi))
    if dist.process_index() == 0:
        print(f"{dist.process_count()} processes; median seconds per all-reduce")
        print(f"{'bytes':>10} {'jit(spmd psum)':>15} {'mpi4py Allreduce':>17} {'ratio':>6}")
        for nbytes, a, b in rows:
            print(f"{nbytes:>10} {a:>15.2e} {b:>17.2e} {a / b:>6.1f}")


if __name__ == "__main__":
    main()
