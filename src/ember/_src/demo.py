"""``python -m ember demo``: train a small MLP classifier on generated data and report timings.

The data are three interleaved spirals (generated, nothing is downloaded). The training step is
``jit(value_and_grad(loss))`` followed by an SGD update; the demo prints the loss curve, the
accuracy, the compile time and the per-step time, and checks the gradient against central finite
differences once.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import ember
import ember.numpy as jnp
from ember import nn
from ember._src import flags


def make_spirals(n_per_class: int = 200, classes: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + rng.normal(scale=0.2, size=n_per_class)
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], axis=1))
        ys.append(np.full(n_per_class, c))
    return np.concatenate(xs).astype(np.float32), np.concatenate(ys).astype(np.int32)


def init_params(sizes: list[int], seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"w": (rng.normal(size=(m, n)) * np.sqrt(2.0 / m)).astype(np.float32),
             "b": np.zeros(n, np.float32)} for m, n in zip(sizes[:-1], sizes[1:])]


def run(steps: int = 300, lr: float = 0.5, backend: str | None = None) -> dict[str, Any]:
    x, y = make_spirals()
    params = init_params([2, 64, 64, 3])

    def forward(params: list, x: Any) -> Any:
        h = x
        for layer in params[:-1]:
            h = nn.relu(h @ layer["w"] + layer["b"])
        return h @ params[-1]["w"] + params[-1]["b"]

    def loss_fn(params: list, x: Any, y: Any) -> Any:
        logp = nn.log_softmax(forward(params, x))
        return -jnp.mean(jnp.sum(logp * nn.one_hot(y, 3), axis=-1))

    @ember.jit(backend=backend)
    def step(params: list, x: Any, y: Any) -> tuple[Any, list]:
        loss, grads = ember.value_and_grad(loss_fn)(params, x, y)
        new = ember.tree.map(lambda p, g: p - lr * g, params, grads)
        return loss, new

    t0 = time.perf_counter()
    loss0, params = step(params, x, y)
    compile_s = time.perf_counter() - t0
    losses = [float(loss0)]
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        loss, params = step(params, x, y)
        losses.append(float(loss))
    step_ms = (time.perf_counter() - t0) / max(steps - 1, 1) * 1e3
    pred = np.asarray(jnp.argmax(ember.jit(forward)(params, x), axis=-1))
    accuracy = float((pred == y).mean())
    return {"losses": losses, "accuracy": accuracy, "compile_s": compile_s, "step_ms": step_ms,
            "examples": len(x), "backend": backend or ember._src.jit.default_backend()}


def gradient_check() -> float:
    """Largest relative error between ember's gradient and central differences (float64: the
    check turns 64-bit dtypes on while it runs)."""
    with flags.override("jax_enable_x64", True):
        return _gradient_error()


def _gradient_error() -> float:

    rng = np.random.default_rng(3)
    w = rng.normal(size=(4, 3))
    x = rng.normal(size=(5, 4))
    y = np.array([0, 2, 1, 1, 0])

    def loss(w: Any) -> Any:
        return -jnp.mean(jnp.sum(nn.log_softmax(jnp.tanh(x @ w)) * nn.one_hot(y, 3, dtype=w.dtype), -1))

    g = np.asarray(ember.grad(loss)(w))
    eps, num = 1e-6, np.zeros_like(w)
    for i in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[i] = eps
        num[i] = (float(loss(w + d)) - float(loss(w - d))) / (2 * eps)
    return float(np.max(np.abs(g - num)) / np.max(np.abs(num)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ember demo", description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--backend", default=None, help="numpy (reference) or native")
    args = parser.parse_args(argv)
    print("ember demo: 3-class spiral classification, MLP 2-64-64-3, full-batch SGD")
    res = run(args.steps, backend=args.backend)
    ls = res["losses"]
    print(f"  backend {res['backend']}, {res['examples']} generated examples, {len(ls)} steps")
    for i in sorted({0, len(ls) // 4, len(ls) // 2, 3 * len(ls) // 4, len(ls) - 1}):
        print(f"  step {i:4d}  loss {ls[i]:.4f}")
    print(f"  train accuracy {res['accuracy'] * 100:.1f}%")
    print(f"  first call (trace + compile + run) {res['compile_s'] * 1e3:.1f} ms, "
          f"then {res['step_ms']:.2f} ms per step")
    err = gradient_check()
    print(f"  gradient vs central finite differences: max relative error {err:.2e}")
    ok = ls[-1] < 0.5 * ls[0] and err < 1e-5
    print("  OK" if ok else "  FAILED: loss did not halve or the gradient check failed")
    return 0 if ok else 1
