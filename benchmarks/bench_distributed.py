"""All-reduce cost across processes over MPI: ember.distributed.all_reduce against mpi4py's own
``Allreduce`` on NumPy buffers, message sizes 1 KB .. 64 MB, and the alpha/beta fit of the ring
model ``t = alpha + beta * bytes`` used in docs/distributed.md. Run it under MPI:

    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \\
        mpirun -n 2 --oversubscribe python benchmarks/bench_distributed.py

Process 0 prints the table and writes ``benchmarks/results/distributed.json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine  # noqa: E402

import ember.distributed as dist  # noqa: E402


def _time(fn, reps: int) -> float:
    dist.barrier()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main() -> None:
    from mpi4py import MPI

    dist.initialize()
    comm = MPI.COMM_WORLD
    rows = []
    for kb in (1, 16, 256, 1024, 4096, 16384, 65536):
        n = kb * 1024 // 4
        x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        reps = 30 if kb <= 1024 else 8
        t_mpi = _time(lambda x=x, out=out: comm.Allreduce(x, out, op=MPI.SUM), reps)
        t_em = _time(lambda x=x: dist.all_reduce({"x": x}, bucket_bytes=64 << 20), reps)
        np.testing.assert_allclose(np.asarray(dist.all_reduce({"x": x})["x"]), out, rtol=1e-6)
        rows.append({"bytes": kb * 1024, "mpi4py_s": t_mpi, "ember_s": t_em})
    if comm.rank == 0:
        b = np.array([r["bytes"] for r in rows], float)
        t = np.array([r["mpi4py_s"] for r in rows])
        beta, alpha = np.polyfit(b, t, 1)
        print(f"{comm.size} processes, {machine()}")
        print("| message | mpi4py Allreduce | ember all_reduce | ratio |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['bytes'] // 1024} KB | {r['mpi4py_s'] * 1e6:.1f} us | {r['ember_s'] * 1e6:.1f} us | "
                  f"{r['ember_s'] / r['mpi4py_s']:.2f}x |")
        print(f"fit (mpi4py): alpha = {alpha * 1e6:.1f} us, beta = {beta * 1e9:.3f} ns/byte "
              f"({1 / beta / 1e9:.2f} GB/s)")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "distributed.json").write_text(json.dumps(
            {"machine": machine(), "processes": comm.size, "rows": rows, "alpha_s": alpha,
             "beta_s_per_byte": beta}, indent=1))


if __name__ == "__main__":
    main()
