"""3-layer MLP (512 wide) forward: ember native vs ember numpy backend vs NumPy, plus JAX jit,
PyTorch eager and ONNX Runtime when they are installed (all optional).

    python benchmarks/bench_mlp.py [--batches 1,32,128] [--width 512] [--threads N]

Reports the median per workload and ember native's ratio to the best peer (lower is better);
writes ``benchmarks/results/mlp.{json,md}``. Also reports first-call time (trace + compile) with an
empty compile cache and with a warm disk cache in a new process.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import have, report, timeit  # noqa: E402

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


def peers(ps: list[np.ndarray]) -> dict:
    out = {}
    if have("jax"):
        import jax
        import jax.numpy as jjnp

        @jax.jit
        def jf(x, w1, b1, w2, b2, w3, b3):
            h = jjnp.maximum(x @ w1 + b1, 0.0)
            h = jjnp.maximum(h @ w2 + b2, 0.0)
            return h @ w3 + b3

        jps = [jax.device_put(p) for p in ps]
        out["jax jit"] = lambda x: jf(jax.device_put(x), *jps).block_until_ready()
    if have("torch"):
        import torch

        tps = [torch.from_numpy(p) for p in ps]

        def tf(x):
            with torch.no_grad():
                h = torch.relu(torch.from_numpy(x) @ tps[0] + tps[1])
                h = torch.relu(h @ tps[2] + tps[3])
                return (h @ tps[4] + tps[5]).numpy()

        out["torch eager"] = tf
        if have("onnxruntime") and have("onnx"):
            out.update(_onnx(tps))
    return out


def _onnx(tps: list) -> dict:
    import onnxruntime as ort
    import torch

    class M(torch.nn.Module):
        def forward(self, x):
            h = torch.relu(x @ tps[0] + tps[1])
            h = torch.relu(h @ tps[2] + tps[3])
            return h @ tps[4] + tps[5]

    path = os.path.join(tempfile.mkdtemp(), "mlp.onnx")
    torch.onnx.export(M(), (torch.zeros(1, tps[0].shape[0]),), path, input_names=["x"],
                      dynamic_axes={"x": {0: "batch"}})
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return {"onnxruntime": lambda x: sess.run(None, {"x": x})[0]}


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


def first_call(width: int) -> tuple[float, float]:
    """(seconds for the first call with an empty cache, with a warm disk cache), new processes."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, EMBER_CACHE_DIR=cache)
        code = FIRST_CALL.format(bench=str(Path(__file__).resolve().parent), width=width)
        runs = []
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               check=True)
            runs.append(float(p.stdout.strip().splitlines()[-1]))
    return runs[0], runs[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    ps = params(args.width)
    opts = {"num_threads": args.threads} if args.threads else {}
    native = ember.jit(mlp, backend="native", **opts)
    ref = ember.jit(mlp, backend="numpy")
    others = peers(ps)
    rows = []
    for b in (int(s) for s in args.batches.split(",")):
        x = np.random.default_rng(1).standard_normal((b, args.width)).astype(np.float32)
        rows.append({"workload": f"mlp {args.width} batch {b}", "times": measure(native, ref, others, x, ps)})
    cold, warm = first_call(args.width)
    rows.append({"workload": "first call incl. compile (empty cache, new process)",
                 "times": {"ember native": cold}})
    rows.append({"workload": "first call (warm disk cache, new process)", "times": {"ember native": warm}})
    print(report("3-layer MLP forward (median per call)", rows, "mlp"))
    print(f"(run at {time.strftime('%Y-%m-%d %H:%M')}; peers installed: {sorted(others) or 'none'})")


def measure(native, ref, others: dict, x: np.ndarray, ps: list[np.ndarray]) -> dict:
    np.testing.assert_allclose(np.asarray(native(x, *ps)), mlp_numpy(x, *ps), rtol=2e-4, atol=2e-4)
    exe = native.lower(x, *ps).executable
    times = {
        "ember native": timeit(lambda: native(x, *ps)),
        "ember native (executable)": timeit(lambda: exe([x, *ps])),
        "ember numpy backend": timeit(lambda: ref(x, *ps)),
        "numpy": timeit(lambda: mlp_numpy(x, *ps)),
    }
    for name, fn in others.items():
        times[name] = timeit(lambda fn=fn: fn(x))
    return times


if __name__ == "__main__":
    main()
