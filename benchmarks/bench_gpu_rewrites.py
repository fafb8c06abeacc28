"""What the shared rewrites (CSE, simplification, constant folding, dead code) change on the GPU
backends: per program, the device kernels (and WGSL characters) with and without them, and the
warm call time on WebGPU (lavapipe here), the two variants interleaved. Medians [min-max] of wall
and process CPU time over ``--repeat`` rounds of ``--calls`` calls.

    taskset -c 0 python benchmarks/bench_gpu_rewrites.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ember
import ember.numpy as jnp
from ember._src.gpu import kernels


def _gpt2_block(p: dict, x: np.ndarray) -> ember.Array:
    """One pre-norm GPT-2 block (causal attention, 4 heads, GELU MLP), written out."""
    t, d = x.shape
    h = 4

    def ln(v, g, b):
        m = jnp.mean(v, axis=-1, keepdims=True)
        s = jnp.mean((v - m) ** 2, axis=-1, keepdims=True)
        return (v - m) / jnp.sqrt(s + 1e-5) * g + b

    a = ln(x, p["g1"], p["b1"]) @ p["wqkv"]
    q, k, v = (a[:, i * d:(i + 1) * d].reshape(t, h, d // h).transpose(1, 0, 2) for i in range(3))
    s = q @ k.transpose(0, 2, 1) / np.float32(np.sqrt(d // h))
    mask = jnp.tril(jnp.ones((t, t), bool))
    s = jnp.where(mask, s, -1e9)
    att = ember.nn.softmax(s, axis=-1) @ v
    x = x + att.transpose(1, 0, 2).reshape(t, d) @ p["wo"]
    m = ember.nn.gelu(ln(x, p["g2"], p["b2"]) @ p["w1"]) @ p["w2"]
    return x + m


def _redundant(x: np.ndarray, y: np.ndarray) -> tuple:
    """Subexpressions written twice, transposes of transposes, multiplications by one."""
    a = jnp.sum(jnp.exp(x) * y, axis=1)
    b = jnp.sum(jnp.exp(x) * y, axis=1)
    t = x.T.T * 1.0 + 0.0
    return a + b, jnp.tanh(t) + jnp.tanh(x), jnp.max(t @ y.T, axis=0) - jnp.max(x @ y.T, axis=0)


def programs() -> list[tuple[str, object, tuple]]:
    r = np.random.default_rng(0)

    def f32(*s: int, scale: float = 1.0) -> np.ndarray:
        return (r.standard_normal(s) * scale).astype(np.float32)

    def loss(w1, b1, w2, b2, x, y):
        h = jnp.tanh(x @ w1 + b1)
        return jnp.mean((h @ w2 + b2 - y) ** 2)

    d = 64
    gp = {"g1": 1 + f32(d, scale=0.1), "b1": f32(d, scale=0.1), "wqkv": f32(d, 3 * d, scale=0.1),
          "wo": f32(d, d, scale=0.1), "g2": 1 + f32(d, scale=0.1), "b2": f32(d, scale=0.1),
          "w1": f32(d, 4 * d, scale=0.1), "w2": f32(4 * d, d, scale=0.1)}
    return [
        ("mlp_grad", ember.grad(loss, argnums=(0, 1, 2, 3)),
         (f32(64, 128, scale=0.1), f32(128), f32(128, 10, scale=0.1), f32(10), f32(256, 64), f32(256, 10))),
        ("softmax", lambda x: ember.nn.softmax(x, axis=-1), (f32(256, 256),)),
        ("gpt2_block", lambda x: _gpt2_block(gp, x), (f32(32, d),)),
        ("redundant", _redundant, (f32(64, 128), f32(64, 128))),
    ]


def _count(f: object, args: tuple) -> tuple[int, int]:
    text = ember.jit(f, backend="webgpu").lower(*args).compile().as_text()
    return text.count("// kernel "), len(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    a = ap.parse_args()
    print("| program | kernels before | after | WGSL chars before | after | wall ms before | after "
          "| CPU ms before | after |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, f, args in programs():
        fns, counts = {}, {}
        for on in (False, True):
            kernels.SHARED_REWRITES = on
            g = (lambda *xs, f=f: f(*xs))  # a function of its own: jit's caches are per function
            counts[on] = _count(g, args)
            fns[on] = ember.jit(g, backend="webgpu")
            ember.block_until_ready(fns[on](*args))  # compile now, under this setting
        kernels.SHARED_REWRITES = True
        want = [np.asarray(v) for v in ember.tree_util.tree_leaves(fns[False](*args))]
        got = [np.asarray(v) for v in ember.tree_util.tree_leaves(fns[True](*args))]
        for w, g in zip(want, got):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        wall: dict[bool, list] = {False: [], True: []}
        cpu: dict[bool, list] = {False: [], True: []}
        for _ in range(a.repeat):
            for on in (False, True):  # interleaved
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(a.calls):
                    ember.block_until_ready(fns[on](*args))
                wall[on].append((time.perf_counter() - t0) / a.calls * 1e3)
                cpu[on].append((time.process_time() - c0) / a.calls * 1e3)

        def m(v: list) -> str:
            return f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"

        print(f"| {name} | {counts[False][0]} | {counts[True][0]} | {counts[False][1]} | {counts[True][1]} "
              f"| {m(wall[False])} | {m(wall[True])} | {m(cpu[False])} | {m(cpu[True])} |")


if __name__ == "__main__":
    main()
