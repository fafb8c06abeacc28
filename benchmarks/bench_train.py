"""One training step's gradient: loss and gradients of a 3-layer MLP 512-512-512-10 (ReLU,
softmax cross-entropy, mean over the batch) with respect to all six weight and bias arrays, at
batch 32 and 128: ember ``jit(value_and_grad)`` vs JAX ``jit(value_and_grad)`` and PyTorch eager
autograd. NumPy has no autodiff: a hand-written NumPy backward (float64) is the reference every
implementation is checked against before timing.

    python benchmarks/bench_train.py [--batches 32,128] [--threads N]

Writes ``benchmarks/results/train.{json,md}`` (with ``--threads``; ``train_default_threads.*`` without).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import threads  # noqa: E402

threads.quiet_openblas()  # before NumPy loads OpenBLAS

import numpy as np  # noqa: E402
from common import have, interleaved, load_average, medians, parse_with_threads, report  # noqa: E402

import ember  # noqa: E402
import ember.numpy as jnp  # noqa: E402

SIZES = (512, 512, 512, 10)


def params(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i, o in zip(SIZES[:-1], SIZES[1:]):
        out += [(rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32), np.zeros(o, np.float32)]
    return out


def data(batch: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, SIZES[0])).astype(np.float32)
    y = np.eye(SIZES[-1], dtype=np.float32)[rng.integers(0, SIZES[-1], batch)]
    return x, y


def loss_ember(ps, x, y):
    h = x
    for k in range(0, 4, 2):
        h = jnp.maximum(h @ ps[k] + ps[k + 1], 0)
    z = h @ ps[4] + ps[5]
    z = z - jnp.max(z, axis=-1, keepdims=True)
    logp = z - jnp.log(jnp.sum(jnp.exp(z), axis=-1, keepdims=True))
    return -jnp.mean(jnp.sum(y * logp, axis=-1))


def grads_numpy(ps: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Loss and gradients by hand (float64): the reference."""
    ps = [p.astype(np.float64) for p in ps]
    hs, pre = [x.astype(np.float64)], []
    for k in range(0, 4, 2):
        a = hs[-1] @ ps[k] + ps[k + 1]
        pre.append(a)
        hs.append(np.maximum(a, 0))
    z = hs[-1] @ ps[4] + ps[5]
    z = z - z.max(axis=-1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=-1, keepdims=True)
    n = x.shape[0]
    loss = -np.mean(np.sum(y * np.log(p), axis=-1))
    dz = (p - y) / n
    g = [None] * 6
    g[4], g[5] = hs[2].T @ dz, dz.sum(axis=0)
    dh = dz @ ps[4].T
    for layer in (1, 0):
        da = dh * (pre[layer] > 0)
        g[2 * layer], g[2 * layer + 1] = hs[layer].T @ da, da.sum(axis=0)
        dh = da @ ps[2 * layer].T
    return loss, g


def check(name: str, loss: float, grads: list[np.ndarray], want: tuple[float, list[np.ndarray]]) -> None:
    np.testing.assert_allclose(float(loss), want[0], rtol=1e-4, err_msg=name)
    for g, w in zip(grads, want[1]):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=2e-3, atol=2e-5, err_msg=name)


def runners(ps: list[np.ndarray], x: np.ndarray, y: np.ndarray, opts: dict) -> dict:
    want = grads_numpy(ps, x, y)
    out = {}
    step = ember.jit(ember.value_and_grad(loss_ember), backend="native", **opts)
    eps, ex, ey = [jnp.asarray(p) for p in ps], jnp.asarray(x), jnp.asarray(y)
    loss, grads = step(eps, ex, ey)
    check("ember", loss, grads, want)
    out["ember native"] = lambda: step(eps, ex, ey)
    if have("jax"):
        import jax
        import jax.numpy as jjnp

        def loss_jax(ps, x, y):
            h = x
            for k in range(0, 4, 2):
                h = jjnp.maximum(h @ ps[k] + ps[k + 1], 0)
            z = h @ ps[4] + ps[5]
            return -jjnp.mean(jjnp.sum(y * jax.nn.log_softmax(z, axis=-1), axis=-1))

        jstep = jax.jit(jax.value_and_grad(loss_jax))
        jps, jx, jy = [jax.device_put(p) for p in ps], jax.device_put(x), jax.device_put(y)
        loss, grads = jstep(jps, jx, jy)
        check("jax", loss, grads, want)
        out["jax jit"] = lambda: jax.block_until_ready(jstep(jps, jx, jy))
    if have("torch"):
        import torch

        if threads.bench_threads():
            torch.set_num_threads(threads.bench_threads())
        tps = [torch.from_numpy(p.copy()).requires_grad_() for p in ps]
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)

        def tstep():
            h = tx
            for k in range(0, 4, 2):
                h = torch.relu(h @ tps[k] + tps[k + 1])
            z = h @ tps[4] + tps[5]
            loss = -(ty * torch.log_softmax(z, dim=-1)).sum(dim=-1).mean()
            return loss, torch.autograd.grad(loss, tps)

        loss, grads = tstep()
        check("torch", loss.item(), [g.numpy() for g in grads], want)
        out["torch eager"] = tstep
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", default="32,128")
    args, opts = parse_with_threads(ap)
    rows = []
    ps = params()
    for b in (int(v) for v in args.batches.split(",")):
        x, y = data(b)
        stats = interleaved(runners(ps, x, y, opts))
        rows.append({"workload": f"mlp 512 value_and_grad batch {b}", "times": medians(stats),
                     "stats": stats, "load_average": load_average()})
        times = {k: f"{v * 1e6:.1f} us" for k, v in rows[-1]["times"].items()}
        print(rows[-1]["workload"], times, flush=True)
    print(report("Training step: loss and gradients of a 3-layer MLP (median per call)", rows,
                 "train" if args.threads else "train_default_threads"))


if __name__ == "__main__":
    main()
