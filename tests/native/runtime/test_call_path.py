"""The per-call path of ``jit`` on the native backend: the positional-array fast path and the
recycled output slots keep the array semantics (immutable outputs, untouched inputs, deleted
arrays raise, leak tracking) while skipping flattening, input copies and allocations."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.runtime import pool
from ember.errors import DeletedArrayError, DTypeError, ShapeError
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(7)


def test_fast_path_hits_and_matches_reference():
    f = ember.jit(lambda x, y: jnp.tanh(x) * y + 1, backend="native")
    ref = ember.jit(lambda x, y: jnp.tanh(x) * y + 1, backend="numpy")
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    y = RNG.standard_normal((3, 5)).astype(np.float32)
    first = f(x, y)
    assert f.cache_info()["traces"] == 1 and f.cache_info()["hits"] == 0
    for _ in range(3):
        got = f(x, y)
        np.testing.assert_allclose(got, ref(x, y), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(first, np.tanh(x) * y + 1, rtol=2e-6, atol=1e-6)
    assert f.cache_info()["hits"] == 3 and f.cache_info()["traces"] == 1
    # an ember Array argument and a weakly typed one take their own (fast) entries, same trace
    assert np.array_equal(f(jnp.asarray(x), y), got)
    assert f.cache_info()["traces"] == 1


def test_outputs_are_immutable_and_inputs_untouched():
    f = ember.jit(lambda x: x * 2.0, backend="native")
    x = RNG.standard_normal(8).astype(np.float32)
    keep = x.copy()
    for _ in range(2):
        y = f(x)
    assert isinstance(y, ember.Array)
    assert not np.asarray(y).flags.writeable
    with pytest.raises(ValueError):
        np.asarray(y)[0] = 1.0
    np.testing.assert_array_equal(x, keep)
    assert x.flags.writeable  # the caller's array is neither copied into nor frozen


@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_output_that_is_an_input_does_not_alias_a_writable_caller_array(backend):
    f = ember.jit(lambda x: (x, x.reshape(2, 3)), backend=backend)
    x = np.arange(6, dtype=np.float32)
    for _ in range(2):
        a, b = f(x)
    x[:] = -1.0  # the caller mutates its own array afterwards
    np.testing.assert_array_equal(a, np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(b, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert x.flags.writeable


def test_recycled_output_never_overwrites_a_live_result_or_view():
    f = ember.jit(lambda x: x + 1.0, backend="native")
    xs = [np.full(16, float(i), np.float32) for i in range(6)]
    f(xs[0])
    held = f(xs[1])                       # an Array the caller keeps
    view = np.asarray(f(xs[2]))[3:]       # only a NumPy view of a dropped Array
    raw = np.asarray(f(xs[3]))            # the NumPy value of a dropped Array
    for x in xs:                          # many calls that recycle every free slot
        f(x)
    np.testing.assert_array_equal(held, np.full(16, 2.0, np.float32))
    np.testing.assert_array_equal(view, np.full(13, 3.0, np.float32))
    np.testing.assert_array_equal(raw, np.full(16, 4.0, np.float32))


def test_steady_state_loop_recycles_without_allocating():
    f = ember.jit(lambda x: x * 0.5 + 1.0, backend="native")
    x = np.zeros(64, np.float32)
    y = f(x)
    y = f(y)
    exe = f.lower(x).executable
    slot = exe._slots.slots[0]
    for _ in range(20):
        y = f(y)  # the previous output is dropped when `y` is rebound
    assert len(slot) <= pool.SLOT_DEPTH
    want = np.zeros(64, np.float32)
    for _ in range(22):
        want = want * np.float32(0.5) + np.float32(1.0)
    np.testing.assert_allclose(y, want, rtol=1e-6)


def test_deleted_array_argument_raises_on_the_fast_path():
    f = ember.jit(lambda x: x - 1, backend="native")
    a = jnp.asarray(np.ones(4, np.float32))
    f(a)
    f(a)
    a.delete()
    with pytest.raises(DeletedArrayError):
        f(a)


def test_check_leaks_sees_fast_path_outputs():
    f = ember.jit(lambda x: x * 3, backend="native")
    x = np.ones(5, np.float32)
    f(x)
    keep = []
    with ember.check_leaks() as leaks:
        f(x)  # dropped at once: not a leak
        keep.append(f(x))
    assert len(leaks) == 1
    shape, dtype, where = leaks[0]
    assert shape == (5,) and dtype == np.float32 and "test_call_path" in where
    np.testing.assert_array_equal(keep[0], np.full(5, 3.0, np.float32))


def test_non_contiguous_and_new_inputs_each_call():
    f = ember.jit(lambda x, y: x * y, backend="native")
    base = RNG.standard_normal((6, 8)).astype(np.float32)
    y = RNG.standard_normal((6, 4)).astype(np.float32)
    f(np.ascontiguousarray(base[:, ::2]), y)
    for k in range(3):
        x = base[:, ::2] + k  # a fresh array every call
        np.testing.assert_allclose(f(x, y), x * y, rtol=1e-6)
    strided = base[:, ::2]
    np.testing.assert_allclose(f(strided, y), strided * y, rtol=1e-6)


def test_executable_checks_what_the_fast_path_trusts():
    f = ember.jit(lambda x: x + 1, backend="native")
    exe = f.lower(np.ones(3, np.float32)).executable
    with pytest.raises(ShapeError):
        exe([np.ones(4, np.float32)])
    with pytest.raises(DTypeError):
        exe([np.ones(3, np.float64)])
    # the jitted function retraces instead
    np.testing.assert_array_equal(f(np.ones(4, np.float64)), np.full(4, 2.0))


def test_data_address_matches_numpy():
    for a in (np.zeros(5), np.arange(12, dtype=np.int16).reshape(3, 4)[1:], np.float32(1) * np.ones(0)):
        assert pool.data_address(a) == a.ctypes.data or a.size == 0


def test_pytree_arguments_take_the_fast_path_with_their_structure():
    """Lists, tuples and dicts of arrays (a parameter list) skip the general path after the first
    call, keyed by their structure as well as the leaves' shapes: a different structure with the
    same leaves traces again and gets its own (correct) result."""
    ws = [RNG.standard_normal((4, 3)).astype(np.float32) for _ in range(2)]
    bs = [RNG.standard_normal(3).astype(np.float32) for _ in range(2)]
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in zip(ws, bs)]
    xa = jnp.asarray(x)

    def f(ps, x):
        return [x @ w + b for w, b in ps]

    jf = ember.jit(f, backend="native")
    for _ in range(5):
        out = jf(params, xa)
    for o, w, b in zip(out, ws, bs):
        np.testing.assert_allclose(np.asarray(o), x @ w + b, rtol=1e-5, atol=1e-5)
    info = jf.cache_info()
    assert info["traces"] == 1 and info["calls"] == 5 and info["hits"] == 4
    assert jf._slow_calls == 1  # every later call took the fast path (Python or C)
    # the same leaves as a flat list of four arrays: another structure, another trace
    flat = [params[0][0], params[0][1], params[1][0], params[1][1]]

    def g(ps, x):
        return f([(ps[0], ps[1]), (ps[2], ps[3])], x)

    jg = ember.jit(g, backend="native")
    np.testing.assert_allclose(np.asarray(jg(flat, xa)[1]), x @ ws[1] + bs[1], rtol=1e-5, atol=1e-5)
    swapped = [params[1], params[0]]
    np.testing.assert_allclose(np.asarray(jf(swapped, xa)[0]), x @ ws[1] + bs[1], rtol=1e-5, atol=1e-5)
    d = {"w": params[0][0], "b": params[0][1]}
    jd = ember.jit(lambda d, x: x @ d["w"] + d["b"], backend="native")
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(jd(d, xa)), x @ ws[0] + bs[0], rtol=1e-5, atol=1e-5)
    assert jd.cache_info()["traces"] == 1 and jd._slow_calls == 1
