"""Helpers for native backend tests: run a function on the native and reference backends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.backend import NativeExecutable


def row_softmax(x: Any) -> Any:
    """Softmax over axis 1 of a 2-D ``x`` written with lax reductions and broadcasts (a fusion
    workload: row max, exp, row sum)."""
    m = lax.reduce_max(x, (1,))
    e = jnp.exp(x - lax.broadcast_in_dim(m, x.shape, (0,)))
    return e / lax.broadcast_in_dim(lax.reduce_sum(e, (1,)), x.shape, (0,))


def as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def assert_same(got: Any, want: Any, rtol: float, atol: float) -> None:
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} vs {w.dtype}"
        assert g.shape == w.shape, f"output {i}: shape {g.shape} vs {w.shape}"
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"output {i}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")


def check(f: Callable, *args: Any, rtol: float | None = None, atol: float | None = None,
          **options: Any) -> NativeExecutable:
    """Run ``f`` jitted on the native and numpy backends, compare, return the native executable."""
    native = ember.jit(f, backend="native", **options)
    got = native(*args)
    want = ember.jit(f, backend="numpy")(*args)
    f64 = any(np.asarray(a).dtype == np.float64 for a in args)
    rtol = rtol if rtol is not None else (1e-12 if f64 else 2e-5)
    atol = atol if atol is not None else (1e-12 if f64 else 1e-6)
    assert_same(got, want, rtol, atol)
    exe = native.lower(*args).executable
    assert isinstance(exe, NativeExecutable)
    return exe


def without_calls(monkeypatch: Any, *names: str) -> None:
    """Make the named primitives run as fallback steps again (drop their native call lowering),
    for tests of the fallback mechanism itself."""
    from ember._src import core
    from ember._src.native import opinfo

    for n in names:
        assert opinfo.call_lowering(core.PRIMITIVES[n]) is not None, n
        monkeypatch.delitem(opinfo.REGISTRY, core.PRIMITIVES[n])


def run_with_call_step(f: Callable, prim: str, *args: Any) -> tuple[np.ndarray, NativeExecutable]:
    """``f(*args)`` jitted natively, asserting the program has no fallback step and runs primitive
    ``prim`` as a native call step; (the result, the executable)."""
    jf = ember.jit(f, backend="native")
    out = np.asarray(jf(*args))
    exe = jf.lower(*args).executable
    sched = exe.schedule
    assert sched.count("fallback") == 0, str(sched)
    assert any(st.kind == "call" and st.eqns[0].prim.name == prim for st in sched.steps), str(sched)
    return out, exe
