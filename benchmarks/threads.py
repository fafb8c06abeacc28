"""Thread limits for the benchmark suite; free of NumPy so it can run before NumPy is imported."""

from __future__ import annotations

import os


# OpenBLAS (NumPy's and SciPy's copies) keeps its idle threads busy-waiting for 2^28 cycles (~0.1 s)
# after each call. On 2 shared vCPUs a spinning NumPy BLAS thread takes the second core from
# whatever is timed next: ember's two-thread transformer block measured 9.5 ms right after NumPy's
# run against 4.9 ms without. 2^18 cycles (~0.1 ms) keeps OpenBLAS's threads hot across back-to-back
# calls (NumPy's own block time was unchanged, 49-50 ms) and lets them sleep between implementations.
# Read when OpenBLAS loads: the scripts call this before importing NumPy; the environment wins.
def quiet_openblas() -> None:
    """Shorten OpenBLAS's idle spin (see above) unless ``OPENBLAS_THREAD_TIMEOUT`` is set."""
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "18")


def bench_threads() -> int | None:
    """The thread count every implementation is limited to (``EMBER_BENCH_THREADS``), or None for
    each library's default."""
    v = os.environ.get("EMBER_BENCH_THREADS")
    return int(v) if v else None


def limit_threads(n: int) -> None:
    """Limit every implementation to ``n`` threads: ember's OpenMP, the OpenBLAS copies of NumPy and
    SciPy (ember's BLAS), XLA, torch and ONNX Runtime, and pin the process to ``n`` CPUs. Effective
    only when called before NumPy, JAX and torch are imported (``run_all.py --threads`` does so
    first thing)."""
    os.environ["EMBER_BENCH_THREADS"] = str(n)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = (flags + f" --xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'}"
                               f" intra_op_parallelism_threads={n}").strip()
    # XLA starts a second compute thread even with these flags (on the 2-vCPU host an MLP step took
    # 0.90 ms of wall time and 1.54 ms of CPU time with them, faster than one core's FMA peak
    # allows): so the process is also pinned to n CPUs, which every library's threads inherit.
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if 0 < n < len(cpus):
        os.sched_setaffinity(0, set(cpus[:n]))
