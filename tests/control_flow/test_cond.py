"""cond and switch: semantics, both derivative modes, vmap with batched and unbatched index."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.test_util import check_grads
from tests.control_flow.helpers import prims, validate_all

RNG = np.random.default_rng(4)


def f(p, x, y):
    return lax.cond(p, lambda x, y: (jnp.sin(x) * y, x.sum()),
                    lambda x, y: (x * 2.0 + y, jnp.cos(x).sum()), x, y)


def f_np(p, x, y):
    return (np.sin(x) * y, x.sum()) if p else (x * 2.0 + y, np.cos(x).sum())


X, Y = RNG.standard_normal(3), RNG.standard_normal(3)


@pytest.mark.parametrize("p", [True, False, 1, 0, 2.5, 0.0])
def test_cond_semantics(p):
    for out, ref in zip(f(p, X, Y), f_np(bool(p), X, Y)):
        np.testing.assert_allclose(out, ref, rtol=1e-12)
    for out, ref in zip(ember.jit(f)(p, X, Y), f_np(bool(p), X, Y)):
        np.testing.assert_allclose(out, ref, rtol=1e-12)


@pytest.mark.parametrize("p", [True, False])
def test_cond_grads(p):
    check_grads(lambda x, y: f(p, x, y), (X, Y), order=2)
    loss = lambda x, y: (f(p, x, y)[0] ** 2).sum() + f(p, x, y)[1]
    unrolled = lambda x, y: (((jnp.sin(x) * y) ** 2).sum() + x.sum()) if p else \
        (((x * 2.0 + y) ** 2).sum() + jnp.cos(x).sum())
    g, gu = ember.grad(loss, (0, 1))(X, Y), ember.grad(unrolled, (0, 1))(X, Y)
    for a, b in zip(g, gu):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    gj = ember.jit(ember.grad(loss, (0, 1)))(X, Y)
    for a, b in zip(gj, gu):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    validate_all(ember.make_program(ember.grad(loss, (0, 1)))(X, Y))


def test_cond_with_closures_and_integer_outputs():
    w = np.float64(1.7)

    def g(w, x):
        out, n = lax.cond(x.sum() > 0, lambda x: (x * w, 1), lambda x: (jnp.exp(x) + w ** 2, 2), x)
        return out.sum() * n

    for x in (X, -np.abs(X)):
        check_grads(g, (w, x), order=2)


def test_cond_residuals_of_both_branches():
    """The branches need different residuals; the unselected branch's slots are zeros."""
    def g(p, x):
        return lax.cond(p, lambda x: jnp.sin(x) * jnp.exp(x), lambda x: jnp.log1p(x * x) ** 2, x).sum()
    x = RNG.uniform(0.5, 1.5, 4)
    for p in (True, False):
        check_grads(lambda x, p=p: g(p, x), (x,), order=2)


def test_vmap_cond_batched_predicate_becomes_select():
    ps = np.array([True, False, True, False])
    xs, ys = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    out = ember.vmap(f)(ps, xs, ys)
    for i in range(4):
        ref = f_np(ps[i], xs[i], ys[i])
        np.testing.assert_allclose(out[0][i], ref[0], rtol=1e-12)
        np.testing.assert_allclose(out[1][i], ref[1], rtol=1e-12)
    p = ember.make_program(ember.vmap(f))(ps, xs, ys)
    assert not prims(p, "cond") and prims(p, "select_n")
    g = ember.vmap(ember.grad(lambda p, x, y: f(p, x, y)[0].sum(), 1))(ps, xs, ys)
    ref = [np.cos(xs[i]) * ys[i] if ps[i] else np.full(3, 2.0) for i in range(4)]
    np.testing.assert_allclose(g, np.stack(ref), rtol=1e-12)


def test_vmap_cond_unbatched_predicate_stays_cond():
    xs, ys = RNG.standard_normal((4, 3)), RNG.standard_normal((4, 3))
    for p in (True, False):
        out = ember.vmap(lambda x, y, p=p: f(p, x, y))(xs, ys)
        refs = [f_np(p, xs[i], ys[i]) for i in range(4)]
        np.testing.assert_allclose(out[0], np.stack([r[0] for r in refs]), rtol=1e-12)
        np.testing.assert_allclose(out[1], [r[1] for r in refs], rtol=1e-12)
    prog = ember.make_program(ember.vmap(f, in_axes=(None, 0, None)))(True, xs, Y)
    assert len(prims(prog, "cond")) == 1


def test_switch():
    branches = [lambda x: x ** 2, lambda x: jnp.sin(x), lambda x: -x]
    refs = [lambda x: x ** 2, np.sin, lambda x: -x]
    x = np.float64(0.3)
    for i in (-3, 0, 1, 2, 7):
        k = min(max(i, 0), 2)
        np.testing.assert_allclose(lax.switch(i, branches, x), refs[k](x), rtol=1e-12)
        check_grads(lambda x, i=i: lax.switch(i, branches, x), (x,), order=2)
    idx = np.array([0, 1, 2, 5, -1], np.int32)
    out = ember.vmap(lambda i, x: lax.switch(i, branches, x))(idx, np.full(5, 0.3))
    np.testing.assert_allclose(out, [refs[min(max(i, 0), 2)](0.3) for i in idx], rtol=1e-12)
    gs = ember.jit(ember.vmap(ember.grad(lambda i, x: lax.switch(i, branches, x), 1)))(idx, np.full(5, 0.3))
    np.testing.assert_allclose(gs, [[0.6, np.cos(0.3), -1.0][min(max(i, 0), 2)] for i in idx], rtol=1e-12)
    assert float(lax.switch(0, [lambda x: x + 1], 1.0)) == 2.0


def test_cond_errors():
    with pytest.raises(TypeError, match="Pred must be a scalar"):
        lax.cond(np.array([True, False]), lambda: 1.0, lambda: 2.0)
    with pytest.raises(TypeError, match="same type structure"):
        lax.cond(True, lambda: (1.0, 2.0), lambda: 1.0)
    with pytest.raises(TypeError, match="identical types"):
        lax.cond(True, lambda: jnp.zeros(2), lambda: jnp.zeros(3))
    with pytest.raises(TypeError, match="integer scalar"):
        lax.switch(1.0, [lambda: 1.0, lambda: 2.0])
    with pytest.raises(ValueError, match="empty"):
        lax.switch(0, [])


def test_cond_weak_outputs_are_joined():
    out = lax.cond(True, lambda x: 1.0, lambda x: x, np.float32(2.0))
    assert out.dtype == np.float32 and not out.weak_type and float(out) == 1.0
