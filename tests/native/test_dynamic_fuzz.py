"""Random programs with a named dynamic axis on the native backend, checked against the reference
backend at several bindings (including size 1): the symbolic index expressions, loop bounds,
predicates and memory plans must be right for every size, not just the traced one."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import specialize
from ember.errors import ShapeError
from tests.native import randprog
from tests.native.conftest import requires_cc
from tests.native.util import assert_same

pytestmark = requires_cc


def _inputs_for(examples: list[np.ndarray], n0: int, n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for x in examples:
        shape = ((n,) + x.shape[1:]) if x.shape[0] == n0 else x.shape
        if x.dtype.kind == "f":
            out.append((rng.standard_normal(shape) * 2).astype(x.dtype))
        else:
            out.append(rng.integers(-20, 20, shape).astype(x.dtype))
    return out


def _check(f, specs, examples: list[np.ndarray], n0: int, seed: int, **options) -> None:
    nat = ember.jit(f, dynamic_axes=specs, backend="native", **options)
    ref = ember.jit(f, dynamic_axes=specs, backend="numpy")
    before = specialize.cache_stats()
    for n in (n0, n0 + 3, 1):
        xs = _inputs_for(examples, n0, n, seed + n)
        try:
            want = ref(*xs)
        except ShapeError as e:  # a binding that violates a shape constraint: the same error
            with pytest.raises(ShapeError, match="violates a shape constraint"):
                nat(*xs)
            assert "violates a shape constraint" in str(e)
            continue
        assert_same(nat(*xs), want, rtol=2e-4, atol=2e-4)
    after = specialize.cache_stats()
    assert after["static_fallbacks"] == before["static_fallbacks"], \
        specialize.symbolic_executable(nat.lower(*examples).program).fallback_reason


@pytest.mark.parametrize("seed", [0, 4, 7, 12, 18, 25, 31, 44])  # programs with a common leading dim
@pytest.mark.parametrize("parallel", [False, True], ids=["default", "every_loop_parallel"])
def test_random_program_with_named_leading_axis(seed: int, parallel: bool) -> None:
    """... and with every loop parallel on three threads (pooled chunk functions whose row counts
    are read from dims, with their run-time serial/parallel branch)."""
    f, inputs, desc = randprog.make(seed)
    n0 = inputs[0].shape[0]
    assert n0 >= 2 and all(x.shape[0] in (1, n0) for x in inputs), f"{desc}: no common leading dim to name"
    specs = [("n",) + (None,) * (x.ndim - 1) if x.shape[0] == n0 else None for x in inputs]
    options = {"num_threads": 3, "parallel_threshold": 1} if parallel else {}
    _check(f, specs, inputs, n0, seed, **options)


def _symbolic_ops(seed: int):
    """A random chain of reshapes, transposes, slices, pads, concatenations, reversals and
    reductions over the symbolic axis of a ``(n, 3, 4)`` input."""
    rng = np.random.default_rng(seed)
    ops = [str(o) for o in rng.choice(["merge", "split", "transpose", "slice", "pad", "concat", "rev",
                                       "softmax", "unary", "sum"], 6)]

    def f(x):
        n = x.shape[0]
        y = x
        for op in ops:
            if op == "merge" and y.ndim == 3:
                y = jnp.reshape(y, (y.shape[0] * y.shape[1], y.shape[2]))
            elif op == "split" and y.ndim == 2 and y.shape[0] == n * 3:
                y = jnp.reshape(y, (n, 3, y.shape[1]))
            elif op == "transpose":
                y = jnp.swapaxes(y, 0, -1)
            elif op == "slice":
                y = y[1:] * 0.5
            elif op == "pad":
                y = lax.pad(y, np.float32(1.5), [(1, 2, 0)] + [(0, 0, 0)] * (y.ndim - 1))
            elif op == "concat":
                y = jnp.concatenate([y, jnp.tanh(y)], axis=0)
            elif op == "rev":
                y = jnp.flip(y, 0)
            elif op == "softmax":
                z = y - jnp.max(y, axis=0, keepdims=True)
                y = jnp.exp(z) / jnp.sum(jnp.exp(z), axis=0, keepdims=True)
            elif op == "unary":
                y = jnp.sin(y) + y
        return y, jnp.sum(y, axis=0)

    return f, ops


@pytest.mark.parametrize("seed", range(8))
def test_random_symbolic_movement_chain(seed: int) -> None:
    f, ops = _symbolic_ops(seed)
    x = np.random.default_rng(seed).standard_normal((5, 3, 4)).astype(np.float32)
    _check(f, [("n", None, None)], [x], 5, seed)
