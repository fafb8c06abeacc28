"""while_loop and fori_loop: semantics, forward-mode derivatives, vmap, and reverse-mode errors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.test_util import check_grads
from tests.control_flow.helpers import prims

RNG = np.random.default_rng(3)


def np_while(cond, body, val):
    while cond(val):
        val = body(val)
    return val


def collatz_steps(n):
    return lax.while_loop(lambda c: c[0] != 1,
                          lambda c: (jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[1] + 1), (n, 0))[1]


def test_while_loop_against_python():
    for n in (1, 6, 27):
        step = lambda c: (c[0] // 2 if c[0] % 2 == 0 else 3 * c[0] + 1, c[1] + 1)
        ref = np_while(lambda c: c[0] != 1, step, (n, 0))[1]
        assert int(collatz_steps(np.int32(n))) == ref
        assert int(ember.jit(collatz_steps)(np.int32(n))) == ref
    out = lax.while_loop(lambda c: c["x"].sum() < 100.0, lambda c: {"x": c["x"] * 1.5, "n": c["n"] + 1},
                         {"x": np.ones(3, np.float32), "n": 0})
    ref = np_while(lambda c: c["x"].sum() < 100.0, lambda c: {"x": c["x"] * 1.5, "n": c["n"] + 1},
                   {"x": np.ones(3, np.float32), "n": 0})
    np.testing.assert_allclose(out["x"], ref["x"], rtol=1e-6)
    assert int(out["n"]) == ref["n"]
    assert int(lax.while_loop(lambda c: c < 0, lambda c: c + 1, 5)) == 5  # zero iterations


def test_while_loop_errors():
    with pytest.raises(TypeError, match="boolean scalar"):
        lax.while_loop(lambda c: c, lambda c: c + 1, 1.0)
    with pytest.raises(TypeError, match=r"init_val\[1\] has type f32\[2\].*f32\[3\]"):
        lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, jnp.zeros(3, jnp.float32)),
                       (0, np.zeros(2, np.float32)))
    with pytest.raises(TypeError, match="same pytree structure"):
        lax.while_loop(lambda c: c < 3, lambda c: (c, c), 0)


@pytest.mark.parametrize("lo,hi", [(0, 5), (2, 7), (3, 3), (5, 2)])
def test_fori_loop_static_and_dynamic_bounds(lo, hi):
    body = lambda i, c: c * 1.5 + i
    ref = 1.0
    for i in range(lo, hi):
        ref = ref * 1.5 + i
    np.testing.assert_allclose(lax.fori_loop(lo, hi, body, 1.0), ref, rtol=1e-6)
    dyn = ember.jit(lambda lo, hi: lax.fori_loop(lo, hi, body, 1.0))
    np.testing.assert_allclose(dyn(lo, hi), ref, rtol=1e-6)
    assert prims(ember.make_program(lambda: lax.fori_loop(lo, hi, body, 1.0))(), "scan")
    assert prims(ember.make_program(lambda lo, hi: lax.fori_loop(lo, hi, body, 1.0))(lo, hi), "while")


def test_fori_loop_index_dtype_and_errors():
    assert lax.fori_loop(np.int64(0), 3, lambda i, c: c + i, np.int64(0)).dtype == np.int64
    with pytest.raises(TypeError, match="integer scalar"):
        lax.fori_loop(0.0, 3, lambda i, c: c, 0.0)


def test_while_forward_mode():
    f = lambda x: lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, jnp.sin(c[1]) * x), (0, x))[1]
    check_grads(f, (0.7,), order=2, modes=("fwd",))
    x = 0.7
    ref = x
    for _ in range(4):
        ref = np.sin(ref) * x
    np.testing.assert_allclose(f(x), ref, rtol=1e-6)
    jf = ember.jacfwd(f)(np.float64(0.7))  # linearize: partial evaluation of the loop
    np.testing.assert_allclose(jf, ember.jvp(f, (np.float64(0.7),), (1.0,))[1], rtol=1e-12)
    g = ember.jit(lambda x, n: ember.jvp(lambda y: lax.fori_loop(0, n, lambda i, c: c * y, 1.0),
                                         (x,), (1.0,)))
    np.testing.assert_allclose(g(2.0, 3)[1], 3 * 2.0 ** 2, rtol=1e-6)


def test_while_reverse_mode_raises_clearly():
    f = lambda x: lax.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, x)
    with pytest.raises(NotImplementedError, match="Reverse-mode differentiation does not work for "
                                                  "lax.while_loop"):
        ember.grad(f)(1.0)
    g = ember.jit(ember.grad(lambda x, n: lax.fori_loop(0, n, lambda i, c: c * x, 1.0)))
    with pytest.raises(NotImplementedError, match="fori_loop with static"):
        g(2.0, 3)


def test_vmap_while_batched_predicate():
    f = lambda x: lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0))
    xs = np.array([1.0, 3.0, 20.0, 0.5])
    out = ember.vmap(f)(xs)
    ref = [np_while(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0, c[1] + 1), (x, 0)) for x in xs]
    np.testing.assert_allclose(out[0], [r[0] for r in ref])
    np.testing.assert_array_equal(out[1], [r[1] for r in ref])
    np.testing.assert_allclose(ember.jit(ember.vmap(f))(xs)[0], out[0])
    # forward mode through the batched-predicate loop
    g = lambda x: lax.while_loop(lambda c: c[0] < 10.0, lambda c: (c[0] * 2.0, c[1] * x), (x, x))[1]
    jv = ember.vmap(lambda x: ember.jvp(g, (x,), (1.0,))[1])(xs)
    np.testing.assert_allclose(jv, [ember.jvp(g, (x,), (1.0,))[1] for x in xs], rtol=1e-12)


def test_vmap_while_unbatched_predicate():
    f = lambda n, x: lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 2.0), (0, x))[1]
    xs = RNG.standard_normal(4)
    out = ember.vmap(f, in_axes=(None, 0))(3, xs)
    np.testing.assert_allclose(out, xs * 8.0, rtol=1e-12)
    p = ember.make_program(ember.vmap(f, in_axes=(None, 0)))(3, xs)
    (e,) = prims(p, "while")
    assert e.params["cond"].out_avals[0].shape == ()
    assert e.outvars[0].aval.shape == ()  # the counter stays unbatched


def test_vmap_fori_dynamic_bounds():
    f = lambda n, x: lax.fori_loop(0, n, lambda i, c: c + i * x, 0.0)
    ns, xs = np.array([0, 2, 5], np.int32), np.array([1.0, 2.0, 3.0])
    out = ember.vmap(f)(ns, xs)
    np.testing.assert_allclose(out, [sum(i * x for i in range(n)) for n, x in zip(ns, xs)])
