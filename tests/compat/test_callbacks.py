"""ember.pure_callback: eager, jit (native and numpy backends), vmap methods, loops, errors."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp

SCALAR = ember.ShapeDtypeStruct((), np.float32)


def host_sin(x):
    return (np.sin(x) * 2).astype(np.float32)


def test_eager_and_jit_and_pytrees():
    x = np.arange(4.0, dtype=np.float32)
    sd = ember.ShapeDtypeStruct((4,), np.float32)
    np.testing.assert_allclose(ember.pure_callback(host_sin, sd, x), 2 * np.sin(x), rtol=1e-6)
    for backend in ("native", "numpy"):
        f = ember.jit(lambda v: ember.pure_callback(host_sin, sd, v) + 1, backend=backend)
        np.testing.assert_allclose(f(x), 2 * np.sin(x) + 1, rtol=1e-6)

    def both(d, scale=1.0):
        return {"sum": np.float32(np.sum(d["a"]) * scale), "neg": -d["b"]}

    out = ember.jit(lambda a, b: ember.pure_callback(
        both, {"sum": SCALAR, "neg": ember.ShapeDtypeStruct((2,), np.int32)}, {"a": a, "b": b}, scale=3.0))(
        x, np.array([1, 2], np.int32))
    assert float(out["sum"]) == 18.0 and out["neg"].tolist() == [-1, -2] and out["neg"].dtype == np.int32


@pytest.mark.parametrize("method", ["sequential", "expand_dims", "broadcast_all"])
def test_vmap_methods(method):
    calls = []

    def host(x, y):
        calls.append(np.shape(x))
        return (x * y).astype(np.float32)

    xs = np.arange(3.0, dtype=np.float32)
    f = ember.vmap(lambda x: ember.pure_callback(host, SCALAR, x, np.float32(2.0), vmap_method=method))
    np.testing.assert_allclose(ember.jit(f)(xs), 2 * xs)
    assert calls == ([()] * 3 if method == "sequential" else [(3,)])


def test_inside_scan_and_errors():
    xs = np.arange(5.0, dtype=np.float32)
    total = ember.jit(lambda v: ember.lax.scan(
        lambda c, xi: (c + ember.pure_callback(host_sin, SCALAR, xi), None), jnp.float32(0.0), v)[0])(xs)
    np.testing.assert_allclose(total, np.sum(2 * np.sin(xs)), rtol=1e-5)
    with pytest.raises(NotImplementedError, match="vmap_method"):
        ember.vmap(lambda x: ember.pure_callback(host_sin, SCALAR, x))(xs)
    with pytest.raises(Exception, match="shape"):
        ember.pure_callback(host_sin, ember.ShapeDtypeStruct((2,), np.float32), xs)
    with pytest.raises(Exception, match="derivative"):
        ember.grad(lambda x: ember.pure_callback(host_sin, SCALAR, x))(1.0)


def test_matches_jax_pure_callback():
    jax = pytest.importorskip("jax", reason="JAX comparison")
    xs = np.linspace(0, 1, 4, dtype=np.float32)
    prog = """
def run(x):
    return MOD.jit(MOD.vmap(lambda v: MOD.pure_callback(host_sin, MOD.ShapeDtypeStruct((), np.float32), v,
                                                        vmap_method="sequential")))(x)
"""
    outs = []
    for mod in (ember, jax):
        env = {"MOD": mod, "np": np, "host_sin": host_sin}
        exec(prog, env)  # noqa: S102 - the test's own program text
        outs.append(np.asarray(env["run"](xs)))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
