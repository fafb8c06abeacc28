"""Eager dispatch fast paths: the cached abstract evaluation reached from ``bind``, basic indexing
on concrete arrays, aligned result buffers and the floating-point error state.

Every fast result is compared with the general path (the ``ember_eager_fast_path`` flag off: each
call runs abstract evaluation and the lax-level indexing) and with NumPy: same values bit for bit,
dtype, weak type and shape, or the same error type and message."""

import threading
import warnings

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import core, flags
from ember._src.array import ALIGNMENT, Array, aligned_copy, aligned_empty

FLAG = "ember_eager_fast_path"


def _run(fn, fast, *args):
    with flags.override(FLAG, fast):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - the error type and message are compared
            return e


def _same(fast, slow, want=None):
    if isinstance(slow, Exception):
        assert type(fast) is type(slow) and str(fast) == str(slow), (fast, slow)
        return
    assert not isinstance(fast, Exception), fast
    assert type(fast) is type(slow) is Array
    assert fast.dtype == slow.dtype and fast.shape == slow.shape and fast.weak_type == slow.weak_type
    a, b = np.asarray(slow), np.asarray(fast)
    assert a.tobytes() == b.tobytes(), (a, b)
    v = fast.value
    assert not v.flags.writeable and v.flags.c_contiguous
    assert v.size == 0 or v.ctypes.data % ALIGNMENT == 0
    if want is not None:
        np.testing.assert_array_equal(b, want)


def _arrays():
    rng = np.random.default_rng(1)
    out = []
    for d in (np.float32, np.int32, np.bool_, np.complex64, np.float16):
        for shape in [(), (0,), (5,), (3, 4), (2, 0, 3), (40, 50)]:
            v = np.asarray(rng.standard_normal(shape) * 4)
            v = (v > 0) if d is np.bool_ else (v + 1j * v).astype(d) if d is np.complex64 else v.astype(d)
            out.append((v, jnp.asarray(v)))
    return out


ARRAYS = _arrays()


# -- bind: cached abstract evaluation ------------------------------------------------------------

LAX_OPS = [
    ("neg", lambda x: lax.neg(x), lambda v: -v if v.dtype != np.bool_ else None),
    ("add", lambda x: lax.add(x, x), lambda v: v + v if v.dtype != np.bool_ else None),
    ("sin", lambda x: lax.sin(x),
     lambda v: np.sin(v) if v.dtype.kind in "fc" and v.dtype != np.float16 else None),
    ("reshape", lambda x: lax.reshape(x, (x.size,)), lambda v: v.reshape(-1)),
    ("transpose", lambda x: lax.transpose(x, tuple(reversed(range(x.ndim)))), lambda v: v.T),
    ("reduce_sum", lambda x: lax.reduce_sum(x, tuple(range(x.ndim))),
     lambda v: v.sum() if v.dtype.kind in "fc" and v.dtype != np.float16 and v.size < 100 else None),
    ("convert", lambda x: lax.convert_element_type(x, np.float32), None),
    ("weak", lambda x: lax.add(Array(x.value, True), Array(x.value, True)), None),
]


@pytest.mark.parametrize("name,op,ref", LAX_OPS, ids=[o[0] for o in LAX_OPS])
def test_bind_cache_equals_general_path_and_numpy(name, op, ref):
    for v, x in ARRAYS:
        want = ref(v) if ref is not None else None
        for _ in range(2):  # the second call is served from the cache
            _same(_run(op, True, x), _run(op, False, x), want)


def test_bind_cache_dot_and_errors():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((300, 200)).astype(np.float32)
    b = rng.standard_normal((200, 250)).astype(np.float32)
    x, y = jnp.asarray(a), jnp.asarray(b)
    for _ in range(2):
        _same(_run(lambda: x @ y, True), _run(lambda: x @ y, False))
    np.testing.assert_allclose(np.asarray(x @ y), a @ b, rtol=1e-5, atol=1e-4)
    # a large product is written into an aligned buffer the Array takes over (no copy)
    r = (x @ y).value
    assert r.ctypes.data % ALIGNMENT == 0 and not r.flags.writeable
    # errors of abstract evaluation are raised every time (never cached)
    for _ in range(2):
        _same(_run(lambda: lax.add(x, y), True), _run(lambda: lax.add(x, y), False))
    assert isinstance(_run(lambda: lax.add(x, y), True), ember.errors.ShapeError)


def test_bind_cache_is_bounded_and_cleared(monkeypatch):
    monkeypatch.setattr(core, "_EAGER_MAX", 8)
    core.clear_eager_cache()
    for n in range(1, 30):
        x = jnp.asarray(np.arange(n, dtype=np.float32))
        np.testing.assert_array_equal(lax.mul(x, x), np.arange(n, dtype=np.float32) ** 2)
        assert len(core._EAGER) <= 8
    assert core._EAGER
    ember.clear_caches()
    assert not core._EAGER
    lax.mul(x, x)
    assert core._EAGER
    with flags.override("jax_enable_x64", not flags.get("jax_enable_x64")):
        assert not core._EAGER  # a change of the 64-bit mode drops it


def test_only_plain_params_are_cached():
    x = jnp.asarray(np.arange(6, dtype=np.float32))
    reshape = core.PRIMITIVES["reshape"]
    assert core._eager_key(reshape, [x], {"new_sizes": (2, 3), "dimensions": None}) is not None
    # a list, or an object such as a sub-program or a callback (which may hold large captured
    # arrays): no key, so the cache never keeps it alive; abstract evaluation runs each time
    assert core._eager_key(reshape, [x], {"new_sizes": [2, 3]}) is None
    assert core._eager_key(reshape, [x], {"f": lambda: x}) is None
    assert core._eager_key(reshape, [x], {"d": ((1, np.dtype("float32")), "a", 2.5, None)}) is not None
    np.testing.assert_array_equal(lax.reshape(x, (2, 3)), np.arange(6).reshape(2, 3))
    core.clear_eager_cache()
    ember.lax.scan(lambda c, v: (c + v, c), jnp.zeros(()), x)  # a body program: not cached
    assert all(core._plain(p) for k in core._EAGER for _, _, p in k[2])


def test_traced_values_never_take_the_fast_paths(monkeypatch):
    calls = []
    real = core.eager_bind
    monkeypatch.setattr(core, "eager_bind", lambda prim, args, params: calls.append(
        (prim.name, any(isinstance(a, core.Tracer) for a in args))) or real(prim, args, params))
    c = jnp.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))

    def f(x):
        return jnp.sin(x) + lax.mul(c, c)[1, 2] + c[1] + x[0]

    xv = np.arange(4, dtype=np.float32)
    want = np.sin(xv) + 36 + np.arange(4, 8) + 0
    calls.clear()
    prog = str(ember.make_program(f)(jnp.asarray(xv)))
    assert calls == []  # under jit tracing nothing ran eagerly, closed-over constants included
    assert "mul" in prog and "slice" in prog
    np.testing.assert_allclose(ember.jit(f)(jnp.asarray(xv)), want)
    calls.clear()
    g = ember.grad(lambda x: jnp.sum(f(x)))(jnp.asarray(xv))
    np.testing.assert_allclose(g, np.cos(xv) + 4 * np.eye(4)[0], rtol=1e-6)
    np.testing.assert_allclose(ember.vmap(f)(jnp.asarray(np.stack([xv, xv]))), np.stack([want, want]))
    np.testing.assert_allclose(ember.jvp(f, (jnp.asarray(xv),), (jnp.ones(4),))[1], np.cos(xv) + 1)
    # under grad/vmap/jvp, operations on concrete values (primals, cotangents) run eagerly, as
    # they did before; a traced value never reaches the eager path
    assert calls and not any(traced for _, traced in calls)
    calls.clear()
    np.testing.assert_allclose(f(jnp.asarray(xv)), want)
    assert calls  # eagerly, the fast path serves the call


# -- basic indexing ---------------------------------------------------------------------------

INDICES = [0, -1, 1, 2, -3, 3, 5, -6, 40, (0, 0), (1, 2), (-1, -1), (2, -4), (0, 0, 0), (1, 2, 3),
           slice(None), slice(1, None), slice(None, -1), slice(None, None, -1), slice(4, 0, -2),
           slice(-100, 100), slice(3, 1), slice(None, None, 0), (slice(None), 1), (Ellipsis, 0),
           (None, 1), (0, None, ...), (..., None), (Ellipsis, Ellipsis), (), None, Ellipsis,
           (slice(1, 3), slice(None, None, 2)), (None, ..., -1, None)]


def _clamped(idx, shape):
    """``idx`` with each integer entry clamped into its axis as JAX does (wrap once, then clip)."""
    entries = idx if isinstance(idx, tuple) else (idx,)
    used = sum(1 for e in entries if e is not None and e is not Ellipsis)
    out, ax = [], 0
    for e in entries:
        if e is Ellipsis:
            ax += max(len(shape) - used, 0)
            used = len(shape)  # a second Ellipsis is an error NumPy reports itself
            out.append(e)
        elif e is None:
            out.append(e)
        elif type(e) is int and ax < len(shape) and shape[ax]:
            n = shape[ax]
            out.append(min(max(e + n if e < 0 else e, 0), n - 1))
            ax += 1
        else:
            out.append(e)
            ax += 1
    return tuple(out) if isinstance(idx, tuple) else out[0]


def test_basic_indexing_equals_general_path_and_numpy():
    for v, x in ARRAYS:
        for idx in INDICES:
            fast = _run(x.__getitem__, True, idx)
            slow = _run(x.__getitem__, False, idx)
            _same(fast, slow)
            ref = _clamped(idx, v.shape)  # out-of-bounds integers clamp, as in JAX
            if isinstance(slow, Exception):
                assert isinstance(slow, (IndexError, ValueError))
                with pytest.raises(type(slow)):
                    v[ref]
            else:
                np.testing.assert_array_equal(np.asarray(fast), v[ref])


def test_basic_indexing_keeps_weak_type_and_identity():
    w = Array(aligned_copy(np.arange(6, dtype=np.float32).reshape(2, 3)), True)
    assert w[1, 2].weak_type and w[0].weak_type and float(w[1, 2]) == 5.0
    assert w[...] is w and w[:] is w
    # other entries (bools, arrays, lists, NumPy ints) take the general path and still work
    np.testing.assert_array_equal(w[np.int64(1)], [3, 4, 5])
    np.testing.assert_array_equal(w[[1, 0]], [[3, 4, 5], [0, 1, 2]])
    np.testing.assert_array_equal(w[True], np.arange(6).reshape(1, 2, 3))
    np.testing.assert_array_equal(w[jnp.asarray(1)], [3, 4, 5])
    assert float(w[0, 3]) == 2.0  # out of bounds: clamped, as in JAX
    with pytest.raises(IndexError, match="too many indices"):
        w[0, 0, 0]


# -- buffers and floating-point state ---------------------------------------------------------

def _in_threads(make, n: int = 4) -> list[list]:
    """Run ``make(k, out)`` on ``n`` threads at once; the ``out`` lists they filled."""
    outs = [[] for _ in range(n)]
    threads = [threading.Thread(target=make, args=(k, outs[k])) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs


def test_small_results_are_aligned_distinct_and_thread_safe():
    def make(k, out):
        for i in range(300):
            out.append((k, i, jnp.asarray(np.float32(k * 1000 + i)) + np.float32(0.5)))

    outs = _in_threads(make)
    addrs = set()
    for out in outs:
        for k, i, a in out:
            assert float(a) == k * 1000 + i + 0.5  # no other array wrote into its chunk
            assert a.value.ctypes.data % ALIGNMENT == 0 and not a.value.flags.writeable
            addrs.add(a.value.ctypes.data)
    assert len(addrs) == 1200
    for n in (1, 16, 17, 128, 129, 1000):  # every size class and a large array
        v = np.arange(n, dtype=np.float32)
        c = aligned_copy(v[1:] if n > 1 else v)
        assert c.ctypes.data % ALIGNMENT == 0 and np.array_equal(c, v[1:] if n > 1 else v)


NUMPY_OPS = [
    ("x + 1", lambda x: x + 1, lambda v: v + np.asarray(1).astype(v.dtype) if v.dtype != np.bool_ else None),
    ("x * 2.5", lambda x: x * 2.5, None),
    ("x < 0.5", lambda x: x < 0.5, None),
    ("sin", lambda x: jnp.sin(x), lambda v: np.sin(v) if v.dtype in (np.float32, np.complex64) else None),
    ("x - x", lambda x: x - x, lambda v: v - v if v.dtype != np.bool_ else None),
    ("True & x", lambda x: True & x, None),
]


@pytest.mark.parametrize("name,op,ref", NUMPY_OPS, ids=[o[0] for o in NUMPY_OPS])
def test_small_elementwise_results_computed_in_place(name, op, ref):
    """A one-ufunc plan writes its small result straight into an aligned slab chunk: the same
    bits, dtype, weak type and errors as the general path (and NumPy), over dtypes and shapes
    (empty and large results take the copying path)."""
    from ember._src.numpy import eager

    eager.clear_plans()
    for v, x in ARRAYS:
        want = ref(v) if ref is not None else None
        _same(_run(op, True, x), _run(op, False, x), want)
    into = [p for p in eager._PLANS.values() if p is not eager._UNSUPPORTED and p.into is not None]
    if name != "True & x":  # bitwise_and of float operands raises (general path)
        assert into, "no plan took the in-place path"


def test_in_place_results_are_distinct_across_threads():
    def make(k, out):
        x = jnp.asarray(np.float32(k * 1000))
        for i in range(300):
            out.append((k, i, x + float(i)))

    outs = _in_threads(make)
    addrs = {a.value.ctypes.data for out in outs for _, _, a in out}
    assert len(addrs) == 1200
    for out in outs:
        for k, i, a in out:
            assert float(a) == k * 1000 + i and not a.value.flags.writeable


def test_aligned_empty_is_taken_over_without_copy():
    big = aligned_empty((300, 300), np.float32)
    big[...] = 1.0
    assert big.ctypes.data % ALIGNMENT == 0 and big.flags.writeable
    frozen = aligned_copy(big, owned=True)
    assert frozen is big and not big.flags.writeable
    other = np.ones((300, 300), np.float32)[:, :]  # a view of someone's buffer: copied
    assert aligned_copy(other, owned=True) is not other


def test_fp_errors_ignored_inside_and_restored_after():
    x = jnp.asarray(np.array([1.0, 0.0, -1.0], np.float32))
    before = np.geterr()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = x / 0.0
        lg = jnp.log(x)
    np.testing.assert_array_equal(r, [np.inf, np.nan, -np.inf])
    assert np.isnan(lg[2]) and lg[1] == -np.inf
    assert np.geterr() == before
    with pytest.raises(ZeroDivisionError):
        core.call_ignoring_fp_errors(lambda: 1 / 0)
    assert np.geterr() == before
    with np.errstate(divide="raise"):  # the user's state is back outside the call
        assert core.call_ignoring_fp_errors(np.divide, np.float32(1), np.float32(0)) == np.inf
        with pytest.raises(FloatingPointError):
            np.divide(np.float32(1), np.float32(0))


def test_scalar_conversions_are_cached_bounded_and_exact():
    from ember._src.numpy import eager
    x = jnp.asarray(np.zeros(3, np.float32))
    eager.clear_plans()
    for k in range(1500):
        y = x + k
        assert len(eager._SCALAR_VALUES) <= 1024
    np.testing.assert_array_equal(y, np.full(3, 1499, np.float32))
    # the same value as int and bool, and a value float32 rounds, stay apart and exact
    np.testing.assert_array_equal(x + True, np.ones(3, np.float32))
    np.testing.assert_array_equal(x + 1, np.ones(3, np.float32))
    big = 2**24 + 1
    np.testing.assert_array_equal(x + big, np.zeros(3, np.float32) + np.asarray(big).astype(np.float32))
    with pytest.raises(OverflowError, match="out of bounds for uint8"):
        jnp.asarray(np.zeros(2, np.uint8)) + 256
