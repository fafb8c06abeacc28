"""Arrays made and freed in C once the call dispatcher loads (dispatch.c ``install_array``): the
memory statistics stay exact across C-made results, eager Arrays and deletes; leak trackers still
record the caller's frames; a process that exits with live Arrays exits cleanly."""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import array as array_mod
from ember._src.native.runtime import dispatch
from ember.errors import DeletedArrayError
from tests.helpers import SRC_DIR, run_in_threads

pytestmark = pytest.mark.skipif(dispatch.module(wait=True) is None,
                                reason=f"C dispatcher unavailable: {dispatch.unavailable_reason()}")


def _counts() -> tuple[int, int]:
    s = ember.memory_stats()
    return s["live_arrays"], s["live_bytes"]


def _warm_matmul(n: int = 8):
    f = ember.jit(lambda a, b: a @ b, backend="native")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    aa, bb = jnp.asarray(a), jnp.asarray(b)
    for _ in range(3):
        f(aa, bb)
    assert f._dispatch is not None and f._dispatch.calls > 0
    return f, aa, bb, a @ b


def test_statistics_live_in_c_once_loaded():
    assert type(array_mod._stats).__name__ == "Stats"
    assert type(array_mod._stats) is dispatch.module().Stats


def test_c_made_results_are_counted_exactly():
    f, aa, bb, ref = _warm_matmul(8)
    gc.collect()
    n0, b0 = _counts()
    total0 = ember.memory_stats()["total_allocated_bytes"]
    calls0 = f._dispatch.calls
    outs = [f(aa, bb) for _ in range(10)]
    assert f._dispatch.calls == calls0 + 10  # all ten were built in C
    for o in outs:
        np.testing.assert_allclose(np.asarray(o), ref, rtol=1e-5, atol=1e-5)
    del o
    assert _counts() == (n0 + 10, b0 + 10 * 8 * 8 * 4)
    assert ember.memory_stats()["total_allocated_bytes"] == total0 + 10 * 256
    assert ember.memory_stats()["peak_bytes"] >= b0 + 10 * 256
    outs[0].delete()  # the Python delete() and the C __del__ share the counters
    assert outs[0].is_deleted()
    with pytest.raises(DeletedArrayError):
        np.asarray(outs[0])
    assert _counts() == (n0 + 9, b0 + 9 * 256)
    with outs[1]:
        pass
    assert _counts() == (n0 + 8, b0 + 8 * 256)
    del outs
    gc.collect()
    assert _counts() == (n0, b0)


def test_peak_follows_c_made_results():
    f, aa, bb, _ = _warm_matmul(16)
    gc.collect()
    n0, b0 = _counts()
    keep = [f(aa, bb) for _ in range(4)]
    peak = ember.memory_stats()["peak_bytes"]
    assert peak >= b0 + 4 * 16 * 16 * 4
    del keep
    gc.collect()
    assert _counts() == (n0, b0)
    assert ember.memory_stats()["peak_bytes"] == peak  # a peak is never lowered


def test_eager_arrays_use_the_c_init_and_match_the_python_one():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    n0, b0 = _counts()
    a = array_mod.Array(x, weak_type=True)
    b = array_mod.Array(x)
    assert a.weak_type is True and b.weak_type is False
    assert a.shape == (3, 4) and a.aval.shape == (3, 4) and a.aval.weak_type
    assert _counts() == (n0 + 2, b0 + 2 * x.nbytes)
    with pytest.raises(TypeError):
        array_mod.Array()
    with pytest.raises(TypeError):
        array_mod.Array(x, False, 3)
    del a, b
    assert _counts() == (n0, b0)
    y = jnp.asarray([1.0, 2.0]) + 1
    np.testing.assert_array_equal(np.asarray(y), [2.0, 3.0])
    r = pickle.loads(pickle.dumps(y))
    np.testing.assert_array_equal(np.asarray(r), [2.0, 3.0])
    assert _counts() == (n0 + 2, b0 + 2 * y.nbytes)


def test_check_leaks_records_c_made_results_with_frames():
    f, aa, bb, _ = _warm_matmul(8)
    calls0 = f._dispatch.calls
    with ember.check_leaks() as leaks:
        kept = f(aa, bb)
        f(aa, bb)  # freed at once: not a leak
    assert f._dispatch.calls == calls0 + 2  # tracked, still served in C
    assert len(leaks) == 1
    shape, dtype, where = leaks[0]
    assert shape == (8, 8) and dtype == np.float32
    assert "test_array_accounting.py" in where and "kept = f(aa, bb)" in where
    with pytest.raises(RuntimeError, match="still alive"):
        with ember.check_leaks(raise_on_leak=True):
            kept2 = f(aa, bb)  # noqa: F841
    del kept


def test_threads_keep_counts_exact():
    f, aa, bb, _ = _warm_matmul(4)
    gc.collect()
    n0, b0 = _counts()

    def work(_):
        for _ in range(200):
            r = f(aa, bb)
            e = jnp.asarray(np.ones(3, np.float32))
            del r, e

    run_in_threads(work, range(4))
    gc.collect()
    assert _counts() == (n0, b0)


_EXIT_CHILD = """
import numpy as np, ember, ember.numpy as jnp
from ember._src.native.runtime import dispatch
assert dispatch.module(wait=True) is not None
f = ember.jit(lambda a, b: a @ b + 1.0, backend="native")
a = jnp.asarray(np.ones((8, 8), np.float32))
for _ in range(3):
    f(a, a)
live0 = ember.memory_stats()["live_arrays"]
keep = [f(a, a) for _ in range(5)]
cycle = [f(a, a)]
cycle.append(cycle)  # freed by the collector at exit, if at all
glob = f(a, a)
print(float(np.asarray(keep[-1]).sum()), ember.memory_stats()["live_arrays"] - live0)
"""


def test_process_exits_cleanly_with_live_c_made_arrays():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC_DIR), env.get("PYTHONPATH")]))
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _EXIT_CHILD], env=env, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, proc.stderr
        total, live = proc.stdout.split()
        assert float(total) == 8 * 8 * 9.0
        assert int(live) == 7  # five kept, the cycle's one, glob
        assert "Exception ignored" not in proc.stderr


def test_subclass_keeps_the_python_methods_and_the_same_counters():
    class Sub(array_mod.Array):  # made after install_array: its __init__/__del__ are the Python ones
        __slots__ = ()

    x = np.ones((2, 5), np.float64)
    n0, b0 = _counts()
    s = Sub(x, True)
    a = array_mod.Array(x)
    assert s.weak_type is True and np.asarray(s).sum() == 10.0
    assert _counts() == (n0 + 2, b0 + 2 * 80)
    s.delete()
    assert _counts() == (n0 + 1, b0 + 80)
    del s, a
    assert _counts() == (n0, b0)
