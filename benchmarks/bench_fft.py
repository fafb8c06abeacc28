"""FFTs: ember's native C FFT (``ember._src.native.emit.fft``) against NumPy's pocketfft, JAX ``jit``
(ducc) and PyTorch (when installed), interleaved in one process.

    python benchmarks/bench_fft.py [--quick] [--threads N] [--cpu-time]

Workloads: batched 1-d complex FFTs at a power of two, 2-3-5 lengths and a prime (Bluestein),
real FFTs and inverse real FFTs, a 2-d FFT, and single long lines (complex64 and complex128).
Each result is checked against NumPy in double precision before timing.
``--threads N`` limits every implementation to ``N`` threads (before any of them loads);
``--cpu-time`` times by the process's CPU time per call instead of the wall clock (meaningful at one
thread on a shared, loaded machine). Writes ``benchmarks/results/fft.{json,md}`` with ``--threads``,
``fft_default_threads.{json,md}`` without.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS
if "--threads" in sys.argv:
    threads.limit_threads(int(sys.argv[sys.argv.index("--threads") + 1]))

import numpy as np  # noqa: E402
from bench_gemm import cpu_interleaved  # noqa: E402
from common import bench_threads, have, interleaved, medians, report  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402


def workloads(b: int) -> list[tuple[str, str, np.ndarray]]:
    rng = np.random.default_rng(0)

    def c(shape: tuple) -> np.ndarray:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)

    return [(f"fft complex64 {b}x1024", "fft", c((b, 1024))),
            (f"fft complex64 {b}x1000", "fft", c((b, 1000))),
            (f"fft complex64 {b}x960", "fft", c((b, 960))),
            (f"fft complex64 {b}x1200", "fft", c((b, 1200))),
            (f"fft complex64 {b}x2000", "fft", c((b, 2000))),
            (f"fft complex64 {b}x3000", "fft", c((b, 3000))),
            (f"fft complex64 {b}x1031 (prime)", "fft", c((b, 1031))),
            (f"rfft float32 {b}x1024", "rfft", rng.standard_normal((b, 1024)).astype(np.float32)),
            (f"rfft float32 {b}x4096", "rfft", rng.standard_normal((b, 4096)).astype(np.float32)),
            (f"rfft float32 {b}x2000", "rfft", rng.standard_normal((b, 2000)).astype(np.float32)),
            (f"irfft complex64 {b}x513 (n 1024)", "irfft", c((b, 513))),
            (f"irfft complex64 {b}x1001 (n 2000)", "irfft", c((b, 1001))),
            ("fft2 complex64 256x256", "fft2", c((256, 256))),
            ("fft complex64 1x16384", "fft", c((1, 16384))),
            ("fft complex64 1x65536", "fft", c((1, 65536))),
            ("fft complex128 1x16384", "fft", c((1, 16384)).astype(np.complex128))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="threads of every implementation")
    ap.add_argument("--cpu-time", action="store_true", help="time by the process's CPU time per call")
    ap.add_argument("--impls", default="", help="comma-separated: only these implementations (e.g. "
                    "'ember native,torch eager': another library's idle pool threads take cores from the "
                    "threaded runs); the results file then carries their names")
    args = ap.parse_args()
    jax = torch = None
    ember.config.update("jax_enable_x64", True)  # the complex128 row stays complex128
    if have("jax"):
        import jax
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_enable_x64", True)
    if have("torch"):
        import torch
    rows = []
    for name, fn, x in workloads(8 if args.quick else 64):
        want = getattr(np.fft, fn)(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))
        ef = ember.jit(getattr(jnp.fft, fn), backend="native", num_threads=args.threads)
        ex = jnp.asarray(x)
        got = np.asarray(ef(ex))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
        runners = {"ember native": lambda ef=ef, ex=ex: ef(ex),
                   "numpy": lambda fn=fn, x=x: getattr(np.fft, fn)(x)}
        if jax is not None:
            jf = jax.jit(getattr(jax.numpy.fft, fn))
            jx = jax.device_put(x)
            runners["jax jit"] = lambda jf=jf, jx=jx: jf(jx).block_until_ready()
        if torch is not None:
            tf = getattr(torch.fft, fn)
            tx = torch.from_numpy(x)
            runners["torch eager"] = lambda tf=tf, tx=tx: tf(tx)
        if args.impls:
            runners = {k: v for k, v in runners.items() if k in args.impls.split(",")}
        stats = cpu_interleaved(runners) if args.cpu_time else \
            interleaved(runners, max_seconds=4.0 if args.quick else 10.0)
        times = medians(stats)
        rows.append({"workload": name, "times": times})
        print(name, {k: f"{v * 1e6:.0f} us" for k, v in times.items()}, flush=True)
    mode = "CPU time per call" if args.cpu_time else "wall clock"
    print(report(f"FFTs ({mode}; ember's C FFT: batched power-of-two and 2-3-5 rows one line at a time, "
                 "SIMD across the butterflies; other jobs Stockham radix 8/4/2/3/5/odd primes with one line "
                 "per vector lane in the operand's precision, Bluestein for prime factors above 64, "
                 "four-step for few long lines, cached plans, half-length rfft)",
                 rows, results_name(args.impls)))


def results_name(impls: str) -> str:
    """The results file's name: ``fft`` (limited threads) or ``fft_default_threads``, with the
    selected implementations appended so a selection never overwrites the full table."""
    name = "fft" if bench_threads() else "fft_default_threads"
    if impls:
        name += "_" + "".join(c if c.isalnum() else "-" for c in impls)
    return name


if __name__ == "__main__":
    main()
