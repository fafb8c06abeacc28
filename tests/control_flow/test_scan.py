"""lax.scan and lax.map forward semantics against Python-loop NumPy references."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from tests.control_flow.helpers import prims, tree_allclose, validate_all

RNG = np.random.default_rng(0)


def np_scan(f, init, xs, length=None, reverse=False):
    """The reference: a Python loop over NumPy values (``xs`` a pytree, or None with ``length``)."""
    leaves, tree = ember.tree.flatten(xs)
    n = length if not leaves else leaves[0].shape[0]
    carry, ys = init, []
    order = range(n - 1, -1, -1) if reverse else range(n)
    for i in order:
        x = ember.tree.unflatten(tree, [leaf[i] for leaf in leaves])
        carry, y = f(carry, x)
        ys.append((i, y))
    ys = [y for _, y in sorted(ys, key=lambda t: t[0])]
    if not ys or ember.tree.leaves(ys[0]) == []:
        return carry, None if not ys else ys[0]
    stacked = ember.tree.map(lambda *a: np.stack(a), *ys)
    return carry, stacked


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shape", [(), (3,), (2, 4)])
def test_cumsum_and_products(shape, reverse):
    xs = RNG.standard_normal((7, *shape)).astype(np.float32)
    init = np.zeros(shape, np.float32)
    body = lambda c, x: (c + x, c * x)
    c, ys = lax.scan(body, init, xs, reverse=reverse)
    rc, rys = np_scan(body, init, xs, reverse=reverse)
    np.testing.assert_allclose(c, rc, rtol=1e-6)
    np.testing.assert_allclose(ys, rys, rtol=1e-6)
    assert c.dtype == np.float32 and ys.shape == (7, *shape)
    cj, ysj = ember.jit(lambda i, x: lax.scan(body, i, x, reverse=reverse))(init, xs)
    np.testing.assert_allclose(cj, rc, rtol=1e-6)
    np.testing.assert_allclose(ysj, rys, rtol=1e-6)


def test_pytree_carry_and_outputs():
    xs = {"a": RNG.standard_normal((5, 2)), "b": (RNG.standard_normal(5), np.arange(5, dtype=np.int32))}

    def body(carry, x):
        s, (p, n) = carry
        s = s + x["a"] * x["b"][0]
        return (s, (p * 1.5, n + x["b"][1])), {"s": s.sum(), "pair": (p, n)}

    init = (np.zeros(2), (np.float64(1.0), np.int32(0)))
    out = lax.scan(body, init, xs)
    ref = np_scan(body, init, xs)
    tree_allclose(out, ref, rtol=1e-12)
    assert ember.tree.structure(out) == ember.tree.structure(ref)
    assert out[0][1][1].dtype == np.int32


def test_xs_none_with_length_and_none_outputs():
    c, ys = lax.scan(lambda c, _: (c * 2.0, None), 1.0, None, length=5)
    assert ys is None and float(c) == 32.0
    c, ys = lax.scan(lambda c, _: (c + 1, c), 0, length=4)
    np.testing.assert_array_equal(ys, [0, 1, 2, 3])
    assert ys.dtype == np.int32
    c, ys = lax.scan(lambda c, x: (c + x, None), np.float32(0), np.arange(4, dtype=np.float32), reverse=True)
    assert ys is None and float(c) == 6.0


@pytest.mark.parametrize("reverse", [False, True])
def test_zero_length(reverse):
    xs = np.zeros((0, 3), np.float32)
    c, ys = lax.scan(lambda c, x: (c + x, (c * 2, x.sum())), np.ones(3, np.float32), xs, reverse=reverse)
    np.testing.assert_array_equal(c, np.ones(3))
    assert ys[0].shape == (0, 3) and ys[1].shape == (0,) and ys[0].dtype == np.float32
    c, _ = lax.scan(lambda c, _: (c + 1.0, None), np.float32(2), None, length=0)
    assert float(c) == 2.0
    c, ys = ember.jit(lambda i, x: lax.scan(lambda c, x: (c + x, c), i, x))(np.ones(3, np.float32), xs)
    assert ys.shape == (0, 3)


def test_closure_constants_and_literals():
    W = RNG.standard_normal((4, 4)).astype(np.float32) * 0.4
    xs = RNG.standard_normal((6, 4)).astype(np.float32)
    body = lambda h, x: ((np.tanh if isinstance(h, np.ndarray) else jnp.tanh)(W @ h + x), h.sum() * 2)
    c, ys = lax.scan(body, np.zeros(4, np.float32), xs)
    rc, rys = np_scan(body, np.zeros(4, np.float32), xs)
    np.testing.assert_allclose(c, rc, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys, rys, rtol=1e-5, atol=1e-6)
    prog = ember.make_program(lambda h, xs: lax.scan(body, h, xs))(np.zeros(4, np.float32), xs)
    (eqn,) = prims(prog, "scan")
    assert eqn.params["num_consts"] == 1 and not eqn.params["body"].constvars  # W hoisted into an operand
    validate_all(prog)


def test_weak_init_is_promoted_like_jax():
    c, ys = lax.scan(lambda c, x: (c + x, c), 0, np.arange(3, dtype=np.float32))
    assert c.dtype == np.float32 and not c.weak_type and ys.dtype == np.float32
    c, _ = lax.scan(lambda c, x: (c + x, None), 0.0, np.arange(3, dtype=np.float32))
    assert c.dtype == np.float32 and not c.weak_type
    c, _ = lax.scan(lambda c, x: (c * 2, None), 1.0, None, length=3)  # stays weak
    assert c.weak_type and float(c) == 8.0


def test_carry_type_errors_name_the_leaf():
    with pytest.raises(TypeError, match=r"init\[1\]\['h'\] has type f32\[3\].*f32\[4\].*shapes do not match"):
        lax.scan(lambda c, x: ((c[0], {"h": jnp.zeros(4, jnp.float32)}), None),
                 (np.float32(0), {"h": np.zeros(3, np.float32)}), None, length=2)
    with pytest.raises(TypeError, match=r"init has type i32\[\].*f32\[\].*dtypes do not match"):
        lax.scan(lambda c, x: (c + x, None), np.int32(0), np.ones(3, np.float32))
    with pytest.raises(TypeError, match="same pytree structure"):
        lax.scan(lambda c, x: ((c, c), None), 0.0, None, length=2)
    with pytest.raises(TypeError, match="must return a pair"):
        lax.scan(lambda c, x: c, 0.0, None, length=2)
    with pytest.raises(TypeError, match="not an array"):
        lax.scan(lambda c, x: (c, "y"), 0.0, None, length=2)


def test_length_errors():
    with pytest.raises(ValueError, match="different leading axis sizes"):
        lax.scan(lambda c, x: (c, None), 0.0, (np.zeros(3), np.zeros(4)))
    with pytest.raises(ValueError, match="disagrees"):
        lax.scan(lambda c, x: (c, None), 0.0, np.zeros(3), length=4)
    with pytest.raises(ValueError, match="no values to scan over"):
        lax.scan(lambda c, x: (c, None), 0.0, None)
    with pytest.raises(ValueError, match="no leading axis"):
        lax.scan(lambda c, x: (c, None), 0.0, np.float32(1))
    with pytest.raises(TypeError, match="callable"):
        lax.scan(3, 0.0, None, length=2)
    with pytest.raises(ValueError, match="checkpoint"):
        lax.scan(lambda c, x: (c, None), 0.0, None, length=2, checkpoint=-1)


def test_named_dynamic_length_one_trace():
    f = ember.jit(lambda x: lax.scan(lambda c, x: (c + x, c * x), jnp.zeros((), x.dtype), x),
                  dynamic_axes={"x": ("seq",)})
    for n in (3, 8, 1):
        xs = RNG.standard_normal(n).astype(np.float32)
        c, ys = f(xs)
        rc, rys = np_scan(lambda c, x: (c + x, c * x), np.float32(0), xs)
        np.testing.assert_allclose(c, rc, rtol=1e-5)
        np.testing.assert_allclose(ys, rys, rtol=1e-5)
    assert f.cache_info()["traces"] == 1
    loss = lambda x: lax.scan(lambda c, x: (jnp.sin(c) + x, c * x), jnp.zeros((), x.dtype), x)[1].sum()
    g = ember.jit(ember.grad(loss), dynamic_axes={"x": ("seq",)})
    for n in (2, 6):
        xs = RNG.standard_normal(n).astype(np.float32)
        np.testing.assert_allclose(g(xs), ember.grad(loss)(xs), rtol=1e-5, atol=1e-6)
    assert g.cache_info()["traces"] == 1


def test_nested_scans_and_unroll_param():
    xs = RNG.standard_normal((4, 3, 2))

    def inner(c, x):
        return c + x, c

    def outer(c, x):
        c2, ys = lax.scan(inner, c, x, unroll=2)
        return c2 * 0.5, ys.sum(0)

    out = lax.scan(outer, np.zeros(2), xs)
    ref = np_scan(lambda c, x: (lambda r: (r[0] * 0.5, r[1].sum(0)))(np_scan(inner, c, x)), np.zeros(2), xs)
    tree_allclose(out, ref, rtol=1e-12)
    prog = ember.make_program(lambda xs: lax.scan(outer, jnp.zeros(2, xs.dtype), xs))(xs)
    assert validate_all(prog) == 3
    assert prims(prog, "scan")[1].params["unroll"] == 2


@pytest.mark.parametrize("batch_size", [None, 2, 3, 10])
def test_map(batch_size):
    xs = {"a": RNG.standard_normal((7, 3)), "b": np.arange(7.0)}
    f = lambda d: (jnp.sin(d["a"]).sum() * d["b"], d["a"] * 2)
    out = lax.map(f, xs, batch_size=batch_size)
    ref = (np.sin(xs["a"]).sum(1) * xs["b"], xs["a"] * 2)
    tree_allclose(out, ref, rtol=1e-12)
