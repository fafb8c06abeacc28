"""Thread limits for the benchmark suite; free of NumPy so it can run before NumPy is imported."""

from __future__ import annotations

import os


def bench_threads() -> int | None:
    """The thread count every implementation is limited to (``EMBER_BENCH_THREADS``), or None for
    each library's default."""
    v = os.environ.get("EMBER_BENCH_THREADS")
    return int(v) if v else None


def limit_threads(n: int) -> None:
    """Limit every implementation to ``n`` threads: ember's OpenMP, the OpenBLAS copies of NumPy and
    SciPy (ember's BLAS), XLA, torch and ONNX Runtime. Effective only when called before NumPy,
    JAX and torch are imported (``run_all.py --threads`` does so first thing)."""
    os.environ["EMBER_BENCH_THREADS"] = str(n)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (flags + f" --xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'}"
                               f" intra_op_parallelism_threads={n}").strip()
