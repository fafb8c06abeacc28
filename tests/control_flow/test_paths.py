"""How loops run: the debug log line, ``require_native``, and the native backend's fallback."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import control_flow as cf


@pytest.fixture
def debug_log(caplog):
    ember.set_debug(1)
    caplog.set_level(logging.DEBUG, logger="ember")
    try:
        yield caplog
    finally:
        ember.set_debug(0)


def test_reference_loop_is_logged(debug_log):
    xs = np.arange(5, dtype=np.float32)
    ember.jit(lambda x: lax.scan(lambda c, x: (c + x, c), np.float32(0), x), backend="numpy")(xs)
    lines = [r.getMessage() for r in debug_log.records if r.getMessage().startswith("scan[")]
    assert lines and "length=5" in lines[0] and "reference loop" in lines[0] and "scan_p.impl" in lines[0]
    lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0)
    assert any(r.getMessage().startswith("while[") and "reference loop" in r.getMessage()
               for r in debug_log.records)


def test_require_native_raises_on_the_reference_backend():
    xs = np.arange(5, dtype=np.float32)
    f = lambda x: lax.scan(lambda c, x: (c + x, c), np.float32(0), x, require_native=True)
    with pytest.raises(cf.NativeLoopError, match=r"scan\[length=5.*reference loop.*require_native=True"):
        f(xs)
    with pytest.raises(cf.NativeLoopError):
        ember.jit(f, backend="numpy")(xs)
    with pytest.raises(cf.NativeLoopError, match="while"):
        lax.while_loop(lambda c: c < 3, lambda c: c + 1, 0, require_native=True)
    with cf.require_native_loops():
        with pytest.raises(cf.NativeLoopError):
            lax.fori_loop(0, 3, lambda i, c: c + i, 0)
    assert int(lax.fori_loop(0, 3, lambda i, c: c + i, 0)) == 3
    p = ember.make_program(ember.grad(lambda x: f(x)[1].sum()))(xs)  # derived loops keep the flag
    assert all(e.params["require_native"] for e in p.eqns if e.prim.name == "scan")


def test_backend_report_hook():
    """The hook a native backend calls when it decides how to run a loop."""
    p = ember.make_program(lambda x: lax.scan(lambda c, x: (c + x, None), np.float32(0), x,
                                              require_native=True))(np.ones(3, np.float32))
    (e,) = [e for e in p.eqns if e.prim.name == "scan"]
    cf.report_loop_path("scan", e.params["body"], e.params, cf.NATIVE_LOOP, backend="native")
    with pytest.raises(cf.NativeLoopError, match="body contains sort"):
        cf.report_loop_path("scan", e.params["body"], e.params, cf.REFERENCE_LOOP, "body contains sort",
                            backend="native")


def test_programs_with_loops_run_on_the_native_backend():
    native = pytest.importorskip("ember._src.native")
    from ember._src.jit import BACKENDS
    if "native" not in BACKENDS:
        pytest.skip("native backend not registered")
    del native
    from ember._src.native.runtime.toolchain import find_compiler
    if find_compiler() is None:
        pytest.skip("no C compiler")
    W = (np.random.default_rng(0).standard_normal((4, 4)) * 0.3).astype(np.float32)
    X = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)

    def f(W, X):
        h, s = lax.scan(lambda h, x: (jnp.tanh(W @ h + x), h.sum()), jnp.zeros(4, jnp.float32), X)
        c = lax.cond(h.sum() > 0, lambda h: h * 2, lambda h: -h, h)
        n = lax.fori_loop(0, 3, lambda i, v: v * 1.5, c)
        return n.sum() + s.sum()

    def g(x):
        return lax.while_loop(lambda v: v[0] < 3, lambda v: (v[0] + 1, v[1] * 1.5), (0, x))[1]

    for fun, args in ((f, (W, X)), (ember.grad(f), (W, X)), (g, (X[0],))):
        np.testing.assert_allclose(ember.jit(fun, backend="native")(*args), fun(*args), rtol=1e-5, atol=1e-5)
