"""Convolution and pooling built from slices + one dot_general (im2col), see ``ember._src.lax.conv``:
ember native vs the ember numpy backend vs JAX jit (when installed), NHWC/HWIO float32.

    python benchmarks/bench_conv.py [--quick] [--rounds 3]

Workloads: 3x3 / 7x7 / strided / depthwise convolutions, the kernel gradient of a 3x3 conv, and a
3x3 stride-2 max pool (``reduce_window``). Writes ``benchmarks/results/conv.{json,md}``. The im2col
buffer grows with the kernel area, so the 7x7 row shows the cost of large kernels.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import have, report, timeit  # noqa: E402

import ember  # noqa: E402
from ember import lax  # noqa: E402

DN = ("NHWC", "HWIO", "NHWC")


def workloads(n: int, hw: int, c: int, o: int) -> list[tuple[str, dict, tuple]]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, hw, hw, c)).astype(np.float32)
    k3 = rng.standard_normal((3, 3, c, o)).astype(np.float32)
    k7 = rng.standard_normal((7, 7, c, o)).astype(np.float32)
    kd = rng.standard_normal((3, 3, 1, c)).astype(np.float32)
    return [
        (f"conv 3x3 {n}x{hw}x{hw}x{c}->{o}", dict(strides=(1, 1), groups=1), (x, k3)),
        (f"conv 7x7 {n}x{hw}x{hw}x{c}->{o}", dict(strides=(1, 1), groups=1), (x, k7)),
        (f"conv 3x3 stride 2 {n}x{hw}x{hw}x{c}->{o}", dict(strides=(2, 2), groups=1), (x, k3)),
        (f"depthwise 3x3 {n}x{hw}x{hw}x{c}", dict(strides=(1, 1), groups=c), (x, kd)),
        (f"kernel grad 3x3 {n}x{hw}x{hw}x{c}->{o}", dict(strides=(1, 1), groups=1, grad=True), (x, k3)),
        (f"max pool 3x3/2 {n}x{hw}x{hw}x{c}", dict(pool=True), (x,)),
    ]


def make(lib: object, cfg: dict):
    if cfg.get("pool"):
        return lambda x: lib.reduce_window(x, -np.inf, lib.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")

    def conv(x, k):
        return lib.conv_general_dilated(x, k, cfg["strides"], "SAME", dimension_numbers=DN,
                                        feature_group_count=cfg["groups"])

    if cfg.get("grad"):
        return lambda x, k: conv(x, k)  # differentiated below, per framework
    return conv


def jax_runner(jax: Any, cfg: dict, inputs: list) -> Callable[[], Any]:
    """A call of the workload jitted by JAX on ``inputs`` (compiled now) that waits for its result."""
    jj = jax.jit(workload_fn(jax.lax, jax.grad, cfg))
    jin = [jax.numpy.asarray(v) for v in inputs]
    jj(*jin).block_until_ready()
    return lambda: jj(*jin).block_until_ready()


def round_medians(runners: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Seconds per call of each runner: the median over ``rounds`` rounds that time each runner in
    turn (interleaved, as the machine is shared)."""
    samples: dict = {k: [] for k in runners}
    for _ in range(rounds):
        for k, run in runners.items():
            samples[k].append(timeit(run))
    return {k: statistics.median(v) for k, v in samples.items()}


def setup(default_rounds: int) -> tuple[argparse.Namespace, Any, list]:
    """The command line (``--quick``, ``--rounds``), JAX on the CPU (None when not installed) and
    the workloads of the chosen size."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=default_rounds)
    args = ap.parse_args()
    jax = None
    if have("jax"):
        import jax
        jax.config.update("jax_platforms", "cpu")
    return args, jax, workloads(*((2, 16, 8, 16) if args.quick else (8, 32, 16, 32)))


def workload_fn(lax_module: Any, grad: Callable, cfg: dict) -> Callable:
    """The workload's function over ``lax_module`` (ember's or JAX's lax); for a ``grad`` workload,
    the gradient of its sum with respect to the kernel."""
    f = make(lax_module, cfg)
    if cfg.get("grad"):
        f = grad(lambda x, k, f=f: f(x, k).sum(), argnums=1)
    return f


def main() -> None:
    args, jax, cases = setup(default_rounds=3)
    rows = []
    for name, cfg, inputs in cases:
        runners: dict = {}
        f = workload_fn(lax, ember.grad, cfg)
        for backend in ("native", "numpy"):
            g = ember.jit(f, backend=backend)
            g(*inputs)
            runners[f"ember {backend}"] = lambda g=g, inputs=inputs: g(*inputs)
        if jax is not None:
            runners["jax jit"] = run_jax = jax_runner(jax, cfg, inputs)
            want = np.asarray(run_jax())
            got = np.asarray(ember.jit(f, backend="native")(*inputs))
            np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
        # interleave the implementations over several rounds (the machine is shared): median of medians
        times = round_medians(runners, args.rounds)
        rows.append({"workload": name, "times": times})
        print(name, {k: f"{v * 1e3:.3f} ms" for k, v in times.items()}, flush=True)
    print(report("Convolutions and pooling (im2col over slices + dot_general)", rows, "conv"))


if __name__ == "__main__":
    main()
