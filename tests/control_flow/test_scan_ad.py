"""Differentiating scan (and static fori_loop): finite differences, unrolled references,
checkpointed vs stored residuals, and compositions with jit and vmap."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.test_util import check_grads
from tests.control_flow.helpers import prims, tree_allclose, validate_all

RNG = np.random.default_rng(1)
W = RNG.standard_normal((4, 4)) * 0.5
XS = RNG.standard_normal((9, 4))
H0 = RNG.standard_normal(4)


def rnn_loss(W, xs, h0, reverse=False, checkpoint=True):
    """An RNN ``h = tanh(W h + x)`` with per-step outputs that feed the loss too."""
    def body(h, x):
        h = jnp.tanh(W @ h + x)
        return h, (h.sum(), h * x)

    h, (s, hx) = lax.scan(body, h0, xs, reverse=reverse, checkpoint=checkpoint)
    return h.sum() + (s ** 2).sum() + hx.sum()


def rnn_unrolled(W, xs, h0, reverse=False, **_):
    h, total = h0, 0.0
    for i in (range(len(xs) - 1, -1, -1) if reverse else range(len(xs))):
        h = jnp.tanh(W @ h + xs[i])
        total = total + h.sum() ** 2 + (h * xs[i]).sum()
    return h.sum() + total


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_grads_vs_finite_differences(reverse):
    check_grads(lambda W, xs, h0: rnn_loss(W, xs, h0, reverse), (W, XS, H0), order=2, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("reverse", [False, True])
def test_rnn_grad_matches_unrolled(reverse):
    g = ember.grad(rnn_loss, argnums=(0, 1, 2))(W, XS, H0, reverse)
    gu = ember.grad(rnn_unrolled, argnums=(0, 1, 2))(W, XS, H0, reverse)
    tree_allclose(g, gu, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(rnn_loss(W, XS, H0, reverse), rnn_unrolled(W, XS, H0, reverse), rtol=1e-12)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("checkpoint", [True, 1, 2, 4, 9, 100])
def test_checkpointed_and_stored_gradients_agree(checkpoint, reverse):
    stored = ember.grad(rnn_loss, argnums=(0, 1, 2))(W, XS, H0, reverse, False)
    ck = ember.grad(rnn_loss, argnums=(0, 1, 2))(W, XS, H0, reverse, checkpoint)
    tree_allclose(ck, stored, rtol=1e-12, atol=1e-12)


def test_checkpoint_stores_segment_carries_not_every_step():
    L, H = 100, 8
    xs = RNG.standard_normal((L, H)).astype(np.float32)
    w = (RNG.standard_normal((H, H)) * 0.3).astype(np.float32)

    def loss(w, ck):
        h, _ = lax.scan(lambda h, x: (jnp.tanh(w @ h + x), None), jnp.zeros(H, jnp.float32), xs,
                        checkpoint=ck)
        return h.sum()

    def stacked_shapes(ck):
        """Shapes of the per-step outputs of the forward (non-reversed) top-level scans."""
        p = ember.make_program(ember.grad(loss), static_argnums=1)(w, ck)
        validate_all(p)
        fwd = [e for e in p.eqns if e.prim.name == "scan" and not e.params["reverse"]]
        return [tuple(v.aval.shape) for e in fwd for v in e.outvars[e.params["num_carry"]:]]

    assert (L, H) in stacked_shapes(False)  # per-step residuals
    shapes = stacked_shapes(True)  # sqrt(100) = 10 segments of 10 steps
    assert shapes == [(10, H)], shapes
    assert stacked_shapes(25) == [(4, H)]
    np.testing.assert_allclose(ember.grad(loss)(w, True), ember.grad(loss)(w, False), rtol=1e-5, atol=1e-6)


def _forward_scan_stacks(f, *args):
    p = ember.make_program(ember.grad(f))(*args)
    validate_all(p)
    (fwd,) = [e for e in p.eqns if e.prim.name == "scan" and not e.params["reverse"]]
    return [tuple(v.aval.shape) for v in fwd.outvars[fwd.params["num_carry"]:]]


def test_loop_invariant_residuals_are_not_stacked():
    """A residual computed inside the body from loop-invariant values only (``W @ W`` of a
    captured concrete ``W``) is computed once outside the loop, not stacked per step."""
    def loss(xs):
        def body(h, x):
            w2 = jnp.matmul(jnp.asarray(W), jnp.asarray(W))  # recorded inside the body
            return jnp.tanh(w2 @ h + x), None

        h, _ = lax.scan(body, jnp.zeros(4, xs.dtype), xs, checkpoint=False)
        return h.sum()

    body_prog = prims(ember.make_program(loss)(XS), "scan")[0].params["body"]
    assert any(e.prim.name == "dot_general" and e.outvars[0].aval.shape == (4, 4) for e in body_prog.eqns)
    assert (9, 4, 4) not in _forward_scan_stacks(loss, XS)
    check_grads(loss, (XS,), order=1)


def test_xs_residuals_are_forwarded_not_copied():
    """d(c * x) = dc * x + c * dx needs x (an xs slice: read from xs) and c (stacked)."""
    def loss(xs):
        c, _ = lax.scan(lambda c, x: (c * x, None), jnp.ones(4, xs.dtype), xs, checkpoint=False)
        return c.sum()

    assert _forward_scan_stacks(loss, XS) == [(9, 4)]
    check_grads(loss, (XS,), order=2)


def test_cumsum_grad_and_jvp():
    xs = RNG.standard_normal(6)
    f = lambda xs: lax.scan(lambda c, x: (c + x, c + x), 0.0, xs)[1]
    check_grads(f, (xs,), order=1)
    jac = ember.jacrev(f)(xs)
    np.testing.assert_allclose(jac, np.tril(np.ones((6, 6))), atol=1e-12)
    np.testing.assert_allclose(ember.jacfwd(f)(xs), jac, atol=1e-12)


def test_ode_integrator_grad():
    """RK4 on a damped oscillator: gradient w.r.t. the damping and the initial state."""

    def rk4(k, y0, dt=0.1, n=20):
        def fn(y):
            return jnp.stack([y[1], -y[0] - k * y[1]])

        def step(y, _):
            k1 = fn(y)
            k2 = fn(y + dt / 2 * k1)
            k3 = fn(y + dt / 2 * k2)
            k4 = fn(y + dt * k3)
            y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return y, y[0]

        y, traj = lax.scan(step, y0, None, length=n)
        return y[0] ** 2 + (traj ** 2).sum()

    y0, k = np.array([1.0, 0.0]), np.float64(0.3)
    check_grads(rk4, (k, y0), order=1)
    check_grads(lambda k: rk4(k, y0), (k,), order=2, modes=("rev",))

    def rk4_unrolled(k, y0, dt=0.1, n=20):
        def fn(y):
            return jnp.stack([y[1], -y[0] - k * y[1]])
        y, total = y0, 0.0
        for _ in range(n):
            k1 = fn(y)
            k2 = fn(y + dt / 2 * k1)
            k3 = fn(y + dt / 2 * k2)
            k4 = fn(y + dt * k3)
            y = y + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            total = total + y[0] ** 2
        return y[0] ** 2 + total

    tree_allclose(ember.grad(rk4, (0, 1))(k, y0), ember.grad(rk4_unrolled, (0, 1))(k, y0), rtol=1e-10)


def test_fori_loop_grad_static_bounds():
    f = lambda x: lax.fori_loop(0, 6, lambda i, c: jnp.sin(c) * x + i, 0.5)

    def unrolled(x):
        c = 0.5
        for i in range(6):
            c = jnp.sin(c) * x + i
        return c

    check_grads(f, (0.8,), order=2)
    np.testing.assert_allclose(ember.grad(f)(0.8), ember.grad(unrolled)(0.8), rtol=1e-12)
    g = lambda x: lax.fori_loop(2, 5, lambda i, c: c * jnp.asarray(x)[i], 1.0)  # the index is a residual
    check_grads(g, (RNG.standard_normal(6),), order=1)


def test_jit_grad_and_vmap_compositions():
    g_ref = ember.grad(rnn_loss)(W, XS, H0)
    np.testing.assert_allclose(ember.jit(ember.grad(rnn_loss))(W, XS, H0), g_ref, rtol=1e-10)
    p = ember.make_program(ember.grad(rnn_loss))(W, XS, H0)
    validate_all(p)
    Ws = np.stack([W, W * 0.5, -W])
    gv = ember.vmap(ember.grad(rnn_loss), in_axes=(0, None, None))(Ws, XS, H0)
    np.testing.assert_allclose(gv, np.stack([ember.grad(rnn_loss)(w, XS, H0) for w in Ws]), rtol=1e-10)
    gjv = ember.jit(ember.vmap(ember.grad(rnn_loss), in_axes=(0, None, None)))(Ws, XS, H0)
    np.testing.assert_allclose(gjv, gv, rtol=1e-10)
    xb = np.stack([XS, XS[::-1], XS * 0.3])
    batched = lambda W: ember.vmap(rnn_loss, in_axes=(None, 0, None))(W, xb, H0).sum()
    np.testing.assert_allclose(ember.grad(batched)(W), sum(ember.grad(rnn_loss)(W, x, H0) for x in xb),
                               rtol=1e-10)


def test_hessian_and_linearize():
    f = lambda x: lax.scan(lambda c, x: (jnp.sin(c) * x, c * x), 0.3, x)[1].sum()
    x = RNG.standard_normal(5)
    hs = ember.hessian(f)(x)
    np.testing.assert_allclose(hs, hs.T, atol=1e-10)
    np.testing.assert_allclose(ember.jacfwd(ember.grad(f))(x), hs, atol=1e-10)
    y, f_jvp = ember.linearize(f, x)
    t = RNG.standard_normal(5)
    np.testing.assert_allclose(f_jvp(t), ember.jvp(f, (x,), (t,))[1], rtol=1e-10)


def test_integer_carry_and_grad_of_unused_input():
    def f(x, y):
        (i, c), ys = lax.scan(lambda c, z: ((c[0] + 1, c[1] * x + z), c[0]), (0, 1.0), np.arange(4.0))
        return c + 0.0 * y + ys.sum()

    gx, gy = ember.grad(f, (0, 1))(1.5, 2.0)  # c = x^4 + x^2 + 2x + 3; ys are integers
    np.testing.assert_allclose(gx, 4 * 1.5 ** 3 + 2 * 1.5 + 2, rtol=1e-12)
    np.testing.assert_allclose(f(1.5, 2.0), 1.5 ** 4 + 1.5 ** 2 + 3 + 3 + 6, rtol=1e-12)
    assert float(gy) == 0.0


def test_linear_transpose_of_scan():
    f = lambda xs: lax.scan(lambda c, x: (c * 0.5 + x, c * 2.0), np.zeros(3), xs)
    xs = RNG.standard_normal((5, 3))
    ct = (RNG.standard_normal(3), RNG.standard_normal((5, 3)))
    (t,) = ember.linear_transpose(f, xs)(ct)
    _, vjp = ember.vjp(f, xs)
    np.testing.assert_allclose(t, vjp(ct)[0], rtol=1e-12)
