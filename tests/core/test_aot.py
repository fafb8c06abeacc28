"""The ahead-of-time stages under JAX's names: ``jit(f).trace``, ``.lower``, ``.compile`` with
``as_text``, ``cost_analysis`` and ``memory_analysis``.

Costs are checked against hand-derived counts (and against JAX's own estimate when JAX is
installed: the same flops and transcendentals for these unfused programs); results of the
compiled stage against NumPy.
"""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax


def _mlp(x, w, y):
    return jnp.tanh(x @ w).sum() + y.max()


X = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
W = np.random.default_rng(1).standard_normal((16, 4)).astype(np.float32)
Y = np.arange(6, dtype=np.float32)


def test_trace_unpacks_and_lowers():
    f = ember.jit(_mlp)
    t = f.trace(X, W, Y)
    prog, out_tree = t  # the form existing callers use
    assert t.jaxpr is prog and t.out_tree is out_tree
    assert [e.prim.name for e in prog.eqns][:2] == ["dot_general", "tanh"]
    lowered = t.lower()
    assert lowered is f.lower(X, W, Y)
    assert "dot_general" in lowered.as_text() and "tanh" in lowered.as_text()
    assert [a.shape for a in lowered.in_avals] == [(8, 16), (16, 4), (6,)]
    assert lowered.out_info.shape == () and lowered.out_info.dtype == np.float32


def test_cost_analysis_hand_derived():
    c = ember.jit(_mlp).lower(X, W, Y).cost_analysis()
    # 2*8*4*16 product flops, 8*4-1 adds in the sum, 6-1 compares in the max, 1 add
    assert c["flops"] == 2 * 8 * 4 * 16 + 31 + 5 + 1
    assert c["transcendentals"] == 32
    assert c["bytes accessed"] > (X.nbytes + W.nbytes)


def test_cost_analysis_scan_multiplies_body():
    def f(xs):
        return lax.scan(lambda c, x: (c * x + 1.0, jnp.exp(c)), 0.0, xs)

    c = ember.jit(f).lower(np.ones(10, np.float32)).cost_analysis()
    # the body is one mul, one add (2 flops) and one exp (1 transcendental), run 10 times
    assert c["transcendentals"] == 10
    assert c["flops"] == 20


def test_cost_matches_jax_when_installed():
    jax = pytest.importorskip("jax", reason="optional comparison with JAX's cost estimate")
    jjnp = pytest.importorskip("jax.numpy", reason="the comparison with JAX needs jax")
    want = jax.jit(lambda x, w: jjnp.tanh(x @ w).sum()).lower(X, W).cost_analysis()
    got = ember.jit(lambda x, w: jnp.tanh(x @ w).sum()).lower(X, W).cost_analysis()
    assert got["flops"] == want["flops"]
    assert got["transcendentals"] == want["transcendentals"]


def test_compile_text_memory_and_call():
    f = ember.jit(_mlp, backend="native")
    compiled = f.lower(X, W, Y).compile()
    src = compiled.as_text()
    assert isinstance(src, str) and "#include" in src
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == X.nbytes + W.nbytes + Y.nbytes
    assert m.output_size_in_bytes == 4
    assert m.temp_size_in_bytes is not None and m.temp_size_in_bytes >= 0
    assert m.generated_code_size_in_bytes == len(src.encode())
    want = np.tanh(X.astype(np.float64) @ W).sum() + Y.max()
    np.testing.assert_allclose(compiled(X, W, Y), want, rtol=1e-5)
    np.testing.assert_allclose(f(X, W, Y), want, rtol=1e-5)


def test_numpy_backend_has_no_c():
    compiled = ember.jit(_mlp, backend="numpy").lower(X, W, Y).compile()
    assert compiled.as_text() is None
    assert compiled.memory_analysis().temp_size_in_bytes is None
    np.testing.assert_allclose(compiled(X, W, Y), np.tanh(X.astype(np.float64) @ W).sum() + Y.max(),
                               rtol=1e-5)


def test_dynamic_axes_compile_binds_sizes():
    g = ember.jit(lambda x: (x * 2.0).sum(0), dynamic_axes={"x": ("n", None)}, backend="native")
    lowered = g.lower(X)
    assert "n" in lowered.as_text()
    compiled = lowered.compile(n=5)
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == 5 * 16 * 4 and m.output_size_in_bytes == 16 * 4
    assert compiled.cost_analysis()["flops"] == 5 * 16 + 4 * 16  # the products, then the sum
    x5 = X[:5]
    np.testing.assert_allclose(compiled(x5), (x5 * 2).sum(0), rtol=1e-6)
    with pytest.raises(ValueError, match="no size for axes"):
        lowered.compile(m=3)
