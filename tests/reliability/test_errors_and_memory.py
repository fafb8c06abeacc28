"""Clear errors for bad jit arguments, per-thread leak checks, and memory the caches hold that
``memory_stats`` reports and ``clear_cache``/``clear_caches`` release."""

from __future__ import annotations

import gc
import re
import threading

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember.errors import DTypeError


@pytest.mark.parametrize("value", [np.array([1, "a"], object), np.ones(3, ">f4"),
                                   np.array(["2020-01-01"], "datetime64[D]"), np.ones(2, np.longdouble)])
def test_unsupported_jit_argument_dtype_is_named(value):
    with pytest.raises(DTypeError, match=re.escape(f"dtype {value.dtype} is not supported")):
        ember.jit(lambda x: x)(value)


def test_static_argnums_out_of_range_raises():
    with pytest.raises(ValueError, match=r"static_argnums=\(3,\).*only 1 positional argument"):
        ember.jit(lambda x: x, static_argnums=(3,))
    with pytest.raises(ValueError, match="out of range"):
        ember.jit(lambda x, y: x, static_argnums=-3)
    f = ember.jit(lambda x, n: x * n, static_argnums=-1)  # in range
    np.testing.assert_allclose(f(np.ones(2, np.float32), 3), [3.0, 3.0])
    ember.jit(lambda *a: a[0], static_argnums=(3,))  # *args: any index may exist at call time


def test_malformed_dynamic_axes_spec_is_named():
    f = ember.jit(lambda x: x, dynamic_axes={"x": "batch,, ?"})
    with pytest.raises(ValueError, match=r"'batch,, \?' has an empty entry"):
        f(np.ones((2, 3, 4)))
    g = ember.jit(lambda x: x * 2, dynamic_axes={"x": "batch, _, ?"})
    np.testing.assert_allclose(g(np.ones((2, 3, 4), np.float32)), 2 * np.ones((2, 3, 4)))


def test_check_leaks_counts_only_this_thread():
    keep_other: list = []
    started, go = threading.Event(), threading.Event()

    def other():
        started.set()
        go.wait(600)
        keep_other.append(jnp.asarray(np.ones(5, np.float32)))

    t = threading.Thread(target=other)
    t.start()
    started.wait(600)
    with ember.check_leaks() as leaks:
        mine = jnp.asarray(np.zeros(3, np.float32))
        go.set()
        t.join(600)
    assert len(keep_other) == 1
    assert [(shape, str(dtype)) for shape, dtype, _ in leaks] == [((3,), "float32")]
    del mine


def test_memory_stats_reports_and_clear_cache_releases():
    f = ember.jit(lambda x: jnp.tanh(x) * 2 + x.sum(), backend="native")
    gc.collect()
    before = ember.memory_stats()
    for n in range(1, 201):  # 200 distinct shapes: 200 executables with arenas and output buffers
        x = np.ones(n, np.float32)
        np.testing.assert_allclose(f(x), np.tanh(x) * 2 + n, rtol=1e-6)
    held = ember.memory_stats()
    assert held["native_executables"] >= before["native_executables"] + 200
    def native_bytes(m):
        return m["arena_bytes"] + m["output_slot_bytes"]

    grown = native_bytes(held) - native_bytes(before)
    assert grown >= sum(4 * n for n in range(1, 201))  # at least one output buffer per shape
    assert held["loaded_libraries"] >= 1 and held["loaded_library_bytes"] > 0
    f.clear_cache()
    gc.collect()
    after = ember.memory_stats()
    assert after["native_executables"] <= before["native_executables"]
    assert native_bytes(after) <= native_bytes(before)
    x = np.arange(7, dtype=np.float32)  # still works after clearing
    np.testing.assert_allclose(f(x), np.tanh(x) * 2 + x.sum(), rtol=1e-6)
    calls = f.cache_info()["calls"]
    assert calls == 201


def test_clear_caches_releases_every_function():
    fs = [ember.jit(lambda x, k=k: x * k, backend="native") for k in range(3)]
    for f in fs:
        f(np.ones(4, np.float32))
    ember.clear_caches()
    assert all(f.cache_info()["size"] == 0 for f in fs)
    np.testing.assert_allclose(fs[2](np.ones(4, np.float32)), 2 * np.ones(4))


def test_clear_caches_releases_the_shared_output_pool():
    """Outputs above the per-executable slot size come from a shared pool that keeps idle blocks for
    reuse; clear_caches() gives them back (memory_stats reports the pool's bytes)."""
    f = ember.jit(lambda x: x * 2.0, backend="native")
    x = np.ones(1 << 17, np.float32)  # 512 KiB output: the shared pool, not the executable's slots
    np.testing.assert_array_equal(f(x), 2 * x)  # the output dies here; its block stays pooled
    assert ember.memory_stats()["output_pool_bytes"] >= x.nbytes
    ember.clear_caches()
    assert ember.memory_stats()["output_pool_bytes"] == 0
    np.testing.assert_array_equal(f(x), 2 * x)
