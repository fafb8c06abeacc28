"""The C call dispatcher (native/runtime/dispatch.py): warm jitted calls served in C must behave exactly
like the Python path -- same results, same errors, recycled outputs never overwrite live results."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native import backend as native_backend
from ember._src.native.runtime import dispatch
from ember.errors import DeletedArrayError
from tests.helpers import run_in_threads

pytestmark = pytest.mark.skipif(dispatch.module(wait=True) is None,
                                reason=f"C dispatcher unavailable: {dispatch.unavailable_reason()}")


def _warm(f, *args, n: int = 3):
    for _ in range(n):
        f(*args)
    assert f._dispatch is not None, "the warm signature was not handed to the C dispatcher"
    return f._dispatch.calls


def test_warm_calls_run_in_c_and_match_numpy():
    f = ember.jit(lambda x, y: jnp.tanh(x) * y + 1.0, backend="native")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    y = rng.standard_normal((5, 7)).astype(np.float32)
    xa, ya = jnp.asarray(x), jnp.asarray(y)
    before = _warm(f, xa, ya)
    out = f(xa, ya)
    assert f._dispatch.calls == before + 1
    assert isinstance(out, ember.Array) and out.dtype == np.float32 and out.shape == (5, 7)
    np.testing.assert_allclose(np.asarray(out), np.tanh(x) * y + 1.0, rtol=1e-6, atol=1e-6)
    assert f.cache_info()["calls"] == 4 and f.cache_info()["traces"] == 1


def test_numpy_arguments_and_new_shapes_fall_through():
    f = ember.jit(lambda x: x * 2.0 - 1.0, backend="native")
    x = np.arange(6, dtype=np.float32)
    _warm(f, x)
    np.testing.assert_array_equal(np.asarray(f(x)), x * 2 - 1)
    # another shape, another dtype: the C path misses, the Python path traces them
    x2 = np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(np.asarray(f(x2)), x2 * 2 - 1)
    x3 = np.arange(6, dtype=np.float64)
    r3 = f(x3)
    assert r3.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(r3), x3 * 2 - 1)
    assert f.cache_info()["traces"] == 3


def test_non_contiguous_and_weak_type_arguments():
    f = ember.jit(lambda x: x + 1, backend="native")
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    _warm(f, np.ascontiguousarray(base[:, :2]))
    view = base[:, 1:3]  # same shape and dtype, not C-contiguous: served by the Python path
    np.testing.assert_array_equal(np.asarray(f(view)), view + 1)
    # a weakly typed Python scalar argument gives a weakly typed result, a strong one does not
    g = ember.jit(lambda x: x * 3, backend="native")
    w = jnp.asarray(2.0)  # weak
    s = jnp.asarray(np.float32(2.0))
    _warm(g, w)
    _warm(g, s)
    assert g(w).weak_type and not g(s).weak_type
    assert float(g(w)) == 6.0 and float(g(s)) == 6.0


def test_live_results_are_never_overwritten():
    f = ember.jit(lambda x, k: x * k, backend="native")
    x = jnp.asarray(np.ones(8, np.float32))
    _warm(f, x, jnp.asarray(np.float32(1)))
    results = [f(x, jnp.asarray(np.float32(k))) for k in range(10)]
    for k, r in enumerate(results):
        np.testing.assert_array_equal(np.asarray(r), np.full(8, k, np.float32))
    del results
    for k in range(20):  # dropped results are recycled: values stay right
        np.testing.assert_array_equal(np.asarray(f(x, jnp.asarray(np.float32(k)))), np.full(8, k, np.float32))


def test_pytree_outputs():
    f = ember.jit(lambda x: (x + 1, x * 2), backend="native")
    g = ember.jit(lambda x: {"a": x.sum(), "b": [x - 1]}, backend="native")
    x = jnp.asarray(np.arange(4, dtype=np.float32))
    _warm(f, x)
    _warm(g, x)
    a, b = f(x)
    np.testing.assert_array_equal(np.asarray(a), np.arange(4) + 1)
    np.testing.assert_array_equal(np.asarray(b), np.arange(4) * 2)
    out = g(x)
    assert set(out) == {"a", "b"} and isinstance(out["b"], list)
    assert float(out["a"]) == 6.0
    np.testing.assert_array_equal(np.asarray(out["b"][0]), np.arange(4) - 1)


def test_deleted_array_raises_like_the_python_path():
    f = ember.jit(lambda x: x + 1, backend="native")
    x = jnp.asarray(np.ones(3, np.float32))
    _warm(f, x)
    y = jnp.asarray(np.ones(3, np.float32))
    y.delete()
    with pytest.raises(DeletedArrayError):
        f(y)


def test_fallback_step_error_propagates(monkeypatch):
    # random_gamma runs as a fallback step (a NumPy callback) inside the native program
    f = ember.jit(lambda k, a: ember.random.gamma(k, a, (16,)), backend="native")
    key = ember.random.key(3)
    a = jnp.asarray(np.float32(2.5))
    want = np.asarray(ember.jit(lambda k, a: ember.random.gamma(k, a, (16,)), backend="numpy")(key, a))
    _warm(f, key, a)
    assert any(s.kind == "fallback" for s in f.lower(key, a).executable.schedule.steps)
    np.testing.assert_allclose(np.asarray(f(key, a)), want, rtol=1e-5)

    def boom(*a, **k):
        raise ValueError("fallback step exploded")

    monkeypatch.setattr(native_backend, "run_fallback_step", boom)
    with pytest.raises(ValueError, match="exploded"):
        f(key, a)
    monkeypatch.undo()
    np.testing.assert_allclose(np.asarray(f(key, a)), want, rtol=1e-5)


def test_inside_another_trace_inlines():
    inner = ember.jit(lambda x: x * 2, backend="native")
    c = jnp.asarray(np.arange(3, dtype=np.float32))
    _warm(inner, c)
    calls = inner._dispatch.calls
    outer = ember.jit(lambda y: inner(c) + y, backend="native")
    np.testing.assert_array_equal(np.asarray(outer(jnp.asarray(np.float32(1)))), np.arange(3) * 2 + 1)
    assert inner._dispatch.calls == calls  # traced into outer, not run


def test_threads_share_one_executable():
    f = ember.jit(lambda x: jnp.sin(x) * 2.0 + x.sum(), backend="native")
    x = np.linspace(0, 1, 70_000, dtype=np.float32)  # large enough to release the GIL
    _warm(f, x)
    want = np.sin(x) * 2 + x.sum(dtype=np.float32)
    errors = []

    def worker(seed: int) -> None:
        xs = x + np.float32(seed)
        w = np.sin(xs) * 2 + xs.sum(dtype=np.float32)
        for _ in range(30):
            got = np.asarray(f(xs))
            if not np.allclose(got, w, rtol=1e-4, atol=1e-2):
                errors.append(seed)

    run_in_threads(worker, range(4))
    assert not errors
    np.testing.assert_allclose(np.asarray(f(x)), want, rtol=1e-4, atol=1e-2)


def test_switch_off(monkeypatch):
    monkeypatch.setenv("EMBER_DISPATCH", "0")
    f = ember.jit(lambda x: x + 1, backend="native")
    x = jnp.asarray(np.ones(3, np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(np.asarray(f(x)), np.full(3, 2.0))
    assert f._dispatch is None and dispatch.unavailable_reason() == "EMBER_DISPATCH is off"


def test_prepare_loads_the_runtime_libraries():
    from ember._src.native import prepare
    from ember._src.native.emit import gemm_kernel

    st = prepare(wait=True)
    assert st["dispatch"] is True
    assert st["gemm_kernel"] is (gemm_kernel.kernel_symbol() is not None)


def test_call_slot_serves_warm_calls_and_falls_back():
    # once the extension is loaded, JitFunction.__call__ is its CallSlot: warm positional calls run
    # the instance's Dispatcher in C; keywords, misses and instances without one take the Python __call__
    import inspect

    from ember._src.jit import JitFunction

    def f(x, y):
        return x @ y + 1.0

    g = ember.jit(f, backend="native")
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((5, 5)).astype(np.float32) for _ in range(2))
    before = _warm(g, x, y)
    slot = JitFunction.__dict__["__call__"]
    assert isinstance(slot, dispatch.module().CallSlot) and inspect.isfunction(slot.fallback)
    want = x.astype(np.float64) @ y + 1.0
    np.testing.assert_allclose(np.asarray(g(x, y)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(g.__call__(x, y)), want, rtol=1e-5, atol=1e-5)  # bound method
    assert g._dispatch.calls == before + 2
    np.testing.assert_allclose(np.asarray(g(x, y=y)), want, rtol=1e-5, atol=1e-5)  # keywords: Python path
    assert g._dispatch.calls == before + 2
    x3 = rng.standard_normal((3, 5)).astype(np.float32)  # a new shape: a miss, traced by the Python path
    np.testing.assert_allclose(np.asarray(g(x3, y)), x3.astype(np.float64) @ y + 1.0, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError):  # the Python path's error for a wrong argument count
        g(x)
    assert list(inspect.signature(g).parameters) == ["x", "y"]
    cold = ember.jit(lambda x: x - 1.0, backend="native")  # no Dispatcher yet: the Python path
    np.testing.assert_array_equal(np.asarray(cold(x)), x - 1.0)
    assert cold._dispatch is None


def test_small_programs_keep_the_gil():
    # a product of at most 64^3 multiply-adds over at most 64 KiB keeps the GIL through a C-dispatched
    # call (releasing it costs ~0.1 us of a few); larger products and other step kinds release it
    def gil(n: int, m: int | None = None, fn=lambda x, y: x @ y):
        a = np.ones((m or n, n), np.float32)
        b = np.ones((n, n), np.float32)
        return ember.jit(fn, backend="native").lower(a, b).executable._releases_gil()

    assert native_backend.GIL_HOLD_MADDS == 64 ** 3
    assert not gil(2) and not gil(32) and not gil(64)
    assert gil(65, m=64) and gil(128)
    assert gil(8, fn=lambda x, y: jnp.sort(x @ y, axis=1))  # a sort call step
