"""All-reduce cost across processes over MPI, message sizes 1 KB .. 64 MB (float32): mpi4py's own
``Allreduce`` on NumPy buffers; ``jit(spmd(psum))`` with the collective as a native step (MPI called
from C inside the program's one native call, on its buffers); the same with
``collectives="callback"`` (a host callback into mpi4py); and the host-level
``ember.distributed.all_reduce``. Also the alpha/beta fit of the ring model
``t = alpha + beta * bytes`` used in docs/distributed.md. Run it under MPI:

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

import ember  # noqa: E402
import ember.distributed as dist  # noqa: E402
from ember._src.distributed.spmd import psum, spmd  # noqa: E402


def _times(fns: list, reps: int) -> list[float]:
    """Median seconds of each of ``fns``, measured interleaved (one run of each per round), so a
    load spike on this shared machine hits every column alike."""
    ts: list[list[float]] = [[] for _ in fns]
    for _ in range(reps):
        for fn, out in zip(fns, ts):
            dist.barrier()  # every process starts the collective together
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return [statistics.median(t) for t in ts]


def main() -> None:
    from mpi4py import MPI

    dist.initialize()
    comm = MPI.COMM_WORLD
    ember._src.native.prepare()  # the C dispatcher loaded: warm calls take the fast path
    native = ember.jit(spmd(lambda v: psum(v, "data"), "data"))
    callback = ember.jit(spmd(lambda v: psum(v, "data"), "data", collectives="callback"))
    rows = []
    for kb in (1, 16, 256, 1024, 4096, 16384, 65536):
        n = kb * 1024 // 4
        x = np.random.default_rng(comm.rank).standard_normal(n).astype(np.float32)
        out = np.empty_like(x)
        reps = 30 if kb <= 1024 else 10
        comm.Allreduce(x, out, op=MPI.SUM)
        for f in (native, callback):  # compile, and check against mpi4py's result
            np.testing.assert_allclose(np.asarray(f(x)), out, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(dist.all_reduce({"x": x})["x"]), out, rtol=1e-6)
        t_mpi, t_native, t_callback, t_em = _times(
            [lambda x=x, out=out: comm.Allreduce(x, out, op=MPI.SUM), lambda x=x: native(x),
             lambda x=x: callback(x), lambda x=x: dist.all_reduce({"x": x}, bucket_bytes=64 << 20)], reps)
        rows.append({"bytes": kb * 1024, "mpi4py_s": t_mpi, "native_s": t_native, "callback_s": t_callback,
                     "ember_s": t_em})
    if comm.rank == 0:
        b = np.array([r["bytes"] for r in rows], float)
        t = np.array([r["mpi4py_s"] for r in rows])
        beta, alpha = np.polyfit(b, t, 1)
        print(f"{comm.size} processes, {machine()}")
        print("median per all-reduce (bus bandwidth: bytes / time)")
        print("| message | mpi4py Allreduce | jit(psum) native step | jit(psum) callback | "
              "ember all_reduce | native / mpi4py |\n|---|---|---|---|---|---|")
        for r in rows:
            cells = [f"{r[k] * 1e6:.1f} us ({r['bytes'] / r[k] / 1e9:.2f} GB/s)"
                     for k in ("mpi4py_s", "native_s", "callback_s")]
            print(f"| {r['bytes'] // 1024} KB | {' | '.join(cells)} | {r['ember_s'] * 1e6:.1f} us | "
                  f"{r['native_s'] / r['mpi4py_s']:.2f}x |")
        print(f"fit (mpi4py): alpha = {alpha * 1e6:.1f} us, beta = {beta * 1e9:.3f} ns/byte "
              f"({1 / beta / 1e9:.2f} GB/s)")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "distributed.json").write_text(json.dumps(
            {"machine": machine(), "processes": comm.size, "rows": rows, "alpha_s": alpha,
             "beta_s_per_byte": beta}, indent=1))


if __name__ == "__main__":
    main()
