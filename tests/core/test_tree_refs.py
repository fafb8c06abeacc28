"""jit results and pytree helpers leave no reference cycles: a result dropped by the caller is freed
at once (not at the next garbage collection), so its buffer is recycled by the next call."""

from __future__ import annotations

import gc
import weakref

import numpy as np

import ember
from ember import lax
from ember._src import tree as tu


def _freed_without_gc(make):
    gc.disable()
    try:
        obj = make()
        ref = weakref.ref(obj[1] if isinstance(obj, tuple) else obj)
        del obj
        return ref() is None
    finally:
        gc.enable()


def test_tree_round_trip_frees_leaves_without_gc():
    class Leaf:
        pass

    def make():
        leaves, td = tu.flatten({"a": (Leaf(), Leaf()), "b": [Leaf()]})
        rebuilt = tu.unflatten(td, leaves)
        return (None, rebuilt["a"][1])

    assert _freed_without_gc(make)


def test_jit_outputs_freed_without_gc_and_recycled():
    x = np.random.default_rng(0).random(1000).astype(np.float32)
    f = ember.jit(lambda xs: lax.scan(lambda c, v: (c + v, c + v), np.float32(0), xs))
    want = np.cumsum(x.astype(np.float64))
    for _ in range(2):  # first call traces (general path), second takes the fast path
        assert _freed_without_gc(lambda: f(x))
    c, ys = f(x)
    np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-5)
    np.testing.assert_allclose(float(c), want[-1], rtol=1e-5)
