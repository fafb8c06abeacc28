"""One pre-norm transformer block (layer norm, multi-head self-attention with softmax, MLP with
gelu, residuals) at (batch x seq x d_model) 1x16x64, 4x64x128 and 4x128x256: ember native vs
NumPy, JAX jit, PyTorch eager and ONNX Runtime (a ``torch.onnx`` export), same weights for all.

    python benchmarks/bench_transformer.py [--sizes 1x16x64,4x64x128,4x128x256] [--threads N]

Every implementation is checked against the NumPy one before timing; timings are interleaved
rounds (``common.interleaved``). Writes ``benchmarks/results/transformer.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS

import numpy as np  # noqa: E402
from common import (  # noqa: E402
    Workload,
    constant_weights_runner,
    ember_arrays,
    interleaved,
    load_average,
    medians,
    parse_with_threads,
    peer_runners,
    report,
)

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402

HEAD_DIM = 32
EPS = 1e-5
GELU_C = math.sqrt(2.0 / math.pi)


def params(d: int, seed: int = 0) -> list[np.ndarray]:
    """ln1 (g, b), wq, wk, wv, wo, bo, ln2 (g, b), w1, b1, w2, b2 — float32, scaled by fan-in."""
    rng = np.random.default_rng(seed)

    def w(i: int, o: int) -> np.ndarray:
        return (rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32)

    def v(n: int, scale: float = 0.1, mean: float = 0.0) -> np.ndarray:
        return (mean + scale * rng.standard_normal(n)).astype(np.float32)

    return [v(d, 0.1, 1.0), v(d), w(d, d), w(d, d), w(d, d), w(d, d), v(d), v(d, 0.1, 1.0), v(d),
            w(d, 4 * d), v(4 * d), w(4 * d, d), v(d)]


def block(x, g1, c1, wq, wk, wv, wo, bo, g2, c2, w1, b1, w2, b2):
    """ember (``ember.numpy``) version."""
    b, t, d = x.shape
    h = d // HEAD_DIM

    def norm(z, g, c):
        mu = jnp.mean(z, axis=-1, keepdims=True)
        zc = z - mu
        var = jnp.mean(zc * zc, axis=-1, keepdims=True)
        return zc / jnp.sqrt(var + EPS) * g + c

    def heads(z):
        return jnp.transpose(jnp.reshape(z, (b, t, h, HEAD_DIM)), (0, 2, 1, 3))

    y = norm(x, g1, c1)
    q, k, v = heads(y @ wq), heads(y @ wk), heads(y @ wv)
    s = (q @ jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(HEAD_DIM))
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    p = e / jnp.sum(e, axis=-1, keepdims=True)
    a = jnp.reshape(jnp.transpose(p @ v, (0, 2, 1, 3)), (b, t, d))
    x = x + (a @ wo + bo)
    y = norm(x, g2, c2)
    u = y @ w1 + b1
    u = 0.5 * u * (1.0 + jnp.tanh(GELU_C * (u + 0.044715 * (u * u * u))))
    return x + (u @ w2 + b2)


def block_numpy(x, g1, c1, wq, wk, wv, wo, bo, g2, c2, w1, b1, w2, b2):
    """NumPy reference (float64 inside would hide float32 error; kept float32 like the others)."""
    b, t, d = x.shape
    h = d // HEAD_DIM

    def norm(z, g, c):
        mu = z.mean(-1, keepdims=True)
        zc = z - mu
        return zc / np.sqrt((zc * zc).mean(-1, keepdims=True) + np.float32(EPS)) * g + c

    def heads(z):
        return z.reshape(b, t, h, HEAD_DIM).transpose(0, 2, 1, 3)

    y = norm(x, g1, c1)
    q, k, v = heads(y @ wq), heads(y @ wk), heads(y @ wv)
    s = (q @ k.swapaxes(-1, -2)) * np.float32(1.0 / math.sqrt(HEAD_DIM))
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    a = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + (a @ wo + bo)
    y = norm(x, g2, c2)
    u = y @ w1 + b1
    inner = np.float32(GELU_C) * (u + np.float32(0.044715) * u ** 3)
    u = np.float32(0.5) * u * (np.float32(1.0) + np.tanh(inner))
    return x + (u @ w2 + b2)


def block_jax(x, g1, c1, wq, wk, wv, wo, bo, g2, c2, w1, b1, w2, b2):
    import jax

    b, t, d = x.shape
    h = d // HEAD_DIM

    def norm(z, g, c):
        mu = z.mean(-1, keepdims=True)
        zc = z - mu
        return zc * jax.lax.rsqrt((zc * zc).mean(-1, keepdims=True) + EPS) * g + c

    def heads(z):
        return z.reshape(b, t, h, HEAD_DIM).transpose(0, 2, 1, 3)

    y = norm(x, g1, c1)
    q, k, v = heads(y @ wq), heads(y @ wk), heads(y @ wv)
    p = jax.nn.softmax((q @ k.swapaxes(-1, -2)) * (1.0 / math.sqrt(HEAD_DIM)), axis=-1)
    a = (p @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + (a @ wo + bo)
    u = jax.nn.gelu(norm(x, g2, c2) @ w1 + b1, approximate=True)
    return x + (u @ w2 + b2)


def block_torch(x, g1, c1, wq, wk, wv, wo, bo, g2, c2, w1, b1, w2, b2):
    import torch
    import torch.nn.functional as F

    b, t, d = x.shape
    h = d // HEAD_DIM

    def heads(z):
        return z.reshape(b, t, h, HEAD_DIM).transpose(1, 2)

    y = F.layer_norm(x, (d,), g1, c1, EPS)
    q, k, v = heads(y @ wq), heads(y @ wk), heads(y @ wv)
    p = torch.softmax((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(HEAD_DIM)), dim=-1)
    a = (p @ v).transpose(1, 2).reshape(b, t, d)
    x = x + (a @ wo + bo)
    u = F.gelu(F.layer_norm(x, (d,), g2, c2, EPS) @ w1 + b1, approximate="tanh")
    return x + (u @ w2 + b2)


def workload(b: int, t: int, d: int) -> Workload:
    """The block at ``b x t x d`` with fixed random weights and input."""
    x = np.random.default_rng(1).standard_normal((b, t, d)).astype(np.float32)
    return Workload(f"transformer block {b}x{t}x{d}", [x], params(d), numpy=block_numpy, jax=block_jax,
                    torch=block_torch, rtol=1e-3, atol=1e-3)


def measure(w: Workload, opts: dict, **timing) -> tuple[dict, dict]:
    """Check ember native (and each peer) against NumPy, then time all interleaved."""
    want = block_numpy(*w.data, *w.params)
    args = ember_arrays([*w.data, *w.params])
    native = ember.jit(block, backend="native", **opts)
    got = np.asarray(native(*args))
    np.testing.assert_allclose(got, want, rtol=w.rtol, atol=w.atol)
    impls = {"ember native": lambda: native(*args), **constant_weights_runner(block, w, want, **opts),
             **peer_runners(w, reference=want)}
    stats = interleaved(impls, **timing)
    return medians(stats), stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1x16x64,4x64x128,4x128x256")
    args, opts = parse_with_threads(ap)
    rows = []
    for size in args.sizes.split(","):
        b, t, d = (int(s) for s in size.split("x"))
        times, stats = measure(workload(b, t, d), opts)
        rows.append({"workload": f"transformer block {size}", "times": times, "stats": stats,
                     "load_average": load_average()})
        print(rows[-1]["workload"], {k: f"{v * 1e6:.1f} us" for k, v in times.items()}, flush=True)
    print(report("Pre-norm transformer block (median per call)", rows, "transformer"))


if __name__ == "__main__":
    main()
