"""3-layer MLP (512 wide) forward: ember native vs ember numpy backend vs NumPy, plus JAX jit,
PyTorch eager and ONNX Runtime (a ``torch.onnx`` export) when they are installed (all optional).
All are checked against NumPy, then timed in interleaved rounds (``common.interleaved``).

    python benchmarks/bench_mlp.py [--batches 1,32,128] [--width 512] [--threads N]

Reports the median per workload and ember native's ratio to the best peer (lower is better);
writes ``benchmarks/results/mlp.{json,md}``. Also reports first-call time (trace + compile) with an
empty compile cache and with a warm disk cache in a new process, and JAX's first call (trace +
XLA compile) in a new process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    Workload,
    constant_weights_runner,
    ember_arrays,
    have,
    interleaved,
    medians,
    parse_with_threads,
    peer_runners,
    report,
)

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402
from ember import lax  # noqa: E402


def params(width: int, out: int = 10, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    ws = []
    for fan_in, fan_out in [(width, width), (width, width), (width, out)]:
        ws.append((rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32))
        ws.append((rng.standard_normal(fan_out) * 0.1).astype(np.float32))
    return ws


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = jnp.maximum(lax.dot(x, w1) + b1, 0.0)
    h = jnp.maximum(lax.dot(h, w2) + b2, 0.0)
    return lax.dot(h, w3) + b3


def mlp_numpy(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, 0.0)
    h = np.maximum(h @ w2 + b2, 0.0)
    return h @ w3 + b3


def mlp_jax(x, w1, b1, w2, b2, w3, b3):
    import jax.numpy as jjnp

    h = jjnp.maximum(x @ w1 + b1, 0.0)
    h = jjnp.maximum(h @ w2 + b2, 0.0)
    return h @ w3 + b3


def mlp_torch(x, w1, b1, w2, b2, w3, b3):
    import torch

    h = torch.relu(x @ w1 + b1)
    h = torch.relu(h @ w2 + b2)
    return h @ w3 + b3


def workload(batch: int, width: int = 512) -> Workload:
    """The MLP at ``batch`` with the fixed weights of :func:`params` (ONNX gets them as constants)."""
    x = np.random.default_rng(1).standard_normal((batch, width)).astype(np.float32)
    return Workload(f"mlp {width} batch {batch}", [x], params(width), numpy=mlp_numpy, jax=mlp_jax,
                    torch=mlp_torch, rtol=2e-4, atol=2e-4)


FIRST_CALL = """
import sys, time, numpy as np
sys.path.insert(0, {bench!r})
t0 = time.perf_counter()
import ember
from bench_mlp import mlp, params
ps = params({width})
x = np.ones((1, {width}), np.float32)
t1 = time.perf_counter()
f = ember.jit(mlp, backend="native")
np.asarray(f(x, *ps))
print(time.perf_counter() - t1)
"""


JAX_FIRST_CALL = """
import sys, time, numpy as np
sys.path.insert(0, {bench!r})
import jax
from bench_mlp import mlp_jax, params
ps = params({width})
x = np.ones((1, {width}), np.float32)
t1 = time.perf_counter()
f = jax.jit(mlp_jax)
np.asarray(f(x, *ps))
print(time.perf_counter() - t1)
"""


def _subprocess_seconds(code: str, env: dict) -> float:
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(p.stdout.strip().splitlines()[-1])


def first_call(width: int, repeats: int = 1) -> tuple[float, float]:
    """Median seconds of ember's first call (trace + compile + run, after imports) in a new process
    (with an empty compile cache, with a warm disk cache), over ``repeats`` fresh caches. The
    compiler probe (flags, OpenMP, native target: per machine and compiler, kept in the user cache
    dir, not in ``$EMBER_CACHE_DIR``) is not repeated; on a machine where ember never ran, the
    first process also pays it once (one trial build and three compiler queries, run concurrently)."""
    bench = str(Path(__file__).resolve().parent)
    code = FIRST_CALL.format(bench=bench, width=width)
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, EMBER_CACHE_DIR=cache)
            cold.append(_subprocess_seconds(code, env))
            warm.append(_subprocess_seconds(code, env))
    return statistics.median(cold), statistics.median(warm)


def jax_first_call(width: int, repeats: int = 1) -> float | None:
    """Median seconds of JAX's first jitted call of the MLP in a new process (None without JAX)."""
    if not have("jax"):
        return None
    env = dict(os.environ, JAX_ENABLE_COMPILATION_CACHE="false")
    code = JAX_FIRST_CALL.format(bench=str(Path(__file__).resolve().parent), width=width)
    return statistics.median(_subprocess_seconds(code, env) for _ in range(repeats))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3, help="new processes per first-call measurement")
    args, opts = parse_with_threads(ap)
    native = ember.jit(mlp, backend="native", **opts)
    ref = ember.jit(mlp, backend="numpy")
    rows = []
    for b in (int(s) for s in args.batches.split(",")):
        w = workload(b, args.width)
        rows.append({"workload": w.name, "times": measure(native, ref, w)})
    cold, warm = first_call(args.width, args.repeats)
    jax_cold = jax_first_call(args.width, args.repeats)
    rows.append({"workload": "first call incl. compile (empty cache, new process)",
                 "times": {"ember native": cold, **({"jax jit": jax_cold} if jax_cold else {})}})
    rows.append({"workload": "first call (warm disk cache, new process)", "times": {"ember native": warm}})
    print(report("3-layer MLP forward (median per call)", rows, "mlp"))
    print(f"(run at {time.strftime('%Y-%m-%d %H:%M')})")


def measure(native, ref, w: Workload, **timing) -> dict:
    """ember native (jitted call and bare executable), the ember numpy backend and each peer, after
    checking all of them against NumPy."""
    want = mlp_numpy(*w.data, *w.params)
    args = ember_arrays([*w.data, *w.params])
    np.testing.assert_allclose(np.asarray(native(*args)), want, rtol=w.rtol, atol=w.atol)
    exe = native.lower(*args).executable
    impls = {"ember native": lambda: native(*args),
             "ember native (executable)": lambda: exe(args),
             "ember numpy backend": lambda: ref(*args),
             **constant_weights_runner(mlp, w, want, **getattr(native, "options", {})),
             **peer_runners(w, reference=want)}
    return medians(interleaved(impls, **timing))


if __name__ == "__main__":
    main()
