"""What device-resident arrays and preencoded loops save on the WebGPU backend.

    python benchmarks/bench_gpu_residency.py [--n 1048576] [--calls 8] [--steps 64] [--reps 7]

Two pairs, interleaved and repeated, reporting the median (and range) of wall time and of the
process's CPU time per run (on lavapipe the device is the CPU, so both count):

- a chain of ``calls`` jitted elementwise calls on ``n`` float32 values, with host arrays (each
  call copies its input to the device and its output back) and with device arrays (no copies);
- ``fori_loop`` of ``steps`` steps on ``m`` float32 values: the scan preencoded in one submission;
  the same steps driven from Python, one jitted call (one submission) per step on device arrays;
  and the same loop as a ``while_loop`` (host-driven on the device: per step the condition is
  computed and its boolean read back, then the body runs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax


def _measure(fn: Callable[[], object]) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1e3:8.2f} ms [{min(xs) * 1e3:.2f}, {max(xs) * 1e3:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--m", type=int, default=1 << 16)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    x = np.random.default_rng(0).uniform(-1, 1, a.n).astype(np.float32)
    f = ember.jit(lambda v: jnp.tanh(v * 1.5 + 0.25) * 0.9, backend="webgpu")

    def host_chain() -> None:
        y = x
        for _ in range(a.calls):
            y = f(y)
        np.asarray(y)

    dx = ember.device_put(x, "webgpu:0")

    def device_chain() -> None:
        y = dx
        for _ in range(a.calls):
            y = f(y)
        np.asarray(y)

    small = np.linspace(-1, 1, a.m).astype(np.float32)

    def step(v: object) -> object:
        return jnp.cos(v) * 0.5 + v * 0.25

    def loop(c: object) -> object:
        return lax.fori_loop(0, a.steps, lambda i, v: step(v), c)

    one = ember.jit(step, backend="webgpu")
    dsmall = ember.device_put(small, "webgpu:0")

    def per_step() -> None:
        v = dsmall
        for _ in range(a.steps):
            v = one(v)
        np.asarray(v)

    # the host-driven form of the same loop
    def host_loop(c: object) -> object:
        def body(s: tuple) -> tuple:
            return s[0] + 1, step(s[1])
        return lax.while_loop(lambda s: s[0] < a.steps, body, (0, c))[1]

    pre = ember.jit(loop, backend="webgpu")
    hostd = ember.jit(host_loop, backend="webgpu")
    np.testing.assert_allclose(np.asarray(pre(small)), np.asarray(hostd(small)), rtol=1e-5, atol=1e-6)
    pairs = {f"chain of {a.calls} calls, host arrays": host_chain,
             f"chain of {a.calls} calls, device arrays": device_chain,
             f"fori_loop {a.steps} steps, preencoded": lambda: np.asarray(pre(dsmall)),
             f"{a.steps} jit calls, one per step": per_step,
             f"while_loop {a.steps} steps, host-driven": lambda: np.asarray(hostd(dsmall))}
    for fn in pairs.values():
        fn()  # compile
    res: dict[str, tuple[list, list]] = {k: ([], []) for k in pairs}
    for _ in range(a.reps):
        for k, fn in pairs.items():
            w, c = _measure(fn)
            res[k][0].append(w)
            res[k][1].append(c)
    print(f"n={a.n}, m={a.m} float32; median [min, max] of {a.reps} interleaved runs")
    for k, (w, c) in res.items():
        print(f"{k:40s} wall {_fmt(w)}   cpu {_fmt(c)}")


if __name__ == "__main__":
    main()
