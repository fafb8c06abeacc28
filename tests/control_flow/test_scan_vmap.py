"""vmap of scan equals stacking scans: batched xs, carries, constants, on any axis."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from tests.control_flow.helpers import prims, tree_allclose

RNG = np.random.default_rng(2)
B, L, H = 3, 6, 4


def rnn(W, xs, h0, reverse=False):
    def body(h, x):
        h = jnp.tanh(W @ h + x)
        return h, {"h": h, "s": h.sum()}

    return lax.scan(body, h0, xs, reverse=reverse)


ARGS = (RNG.standard_normal((B, H, H)) * 0.5, RNG.standard_normal((B, L, H)), RNG.standard_normal((B, H)))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("in_axes", [(None, 0, 0), (None, 0, None), (0, None, None), (None, None, 0),
                                     (0, 0, 0), (None, 1, None)])
def test_vmap_scan_equals_stacked_scans(in_axes, reverse):
    args = [a if ax is not None else a[0] for a, ax in zip(ARGS, in_axes)]
    if in_axes[1] == 1:
        args[1] = np.swapaxes(ARGS[1], 0, 1)
    out = ember.vmap(lambda *a: rnn(*a, reverse=reverse), in_axes=in_axes)(*args)

    def pick(i):
        return [(a[:, i] if ax == 1 else a[i]) if ax is not None else a for a, ax in zip(args, in_axes)]

    ref = ember.tree.map(lambda *xs: np.stack(xs), *[rnn(*pick(i), reverse=reverse) for i in range(B)])
    tree_allclose(out, ref, rtol=1e-10, atol=1e-12)
    jout = ember.jit(ember.vmap(lambda *a: rnn(*a, reverse=reverse), in_axes=in_axes))(*args)
    tree_allclose(jout, ref, rtol=1e-10, atol=1e-12)


def test_vmap_is_one_scan_over_batched_carries():
    p = ember.make_program(ember.vmap(rnn, in_axes=(None, 0, None)))(ARGS[0][0], ARGS[1], ARGS[2][0])
    (e,) = prims(p, "scan")
    assert [tuple(v.aval.shape) for v in e.outvars] == [(B, H), (L, B, H), (L, B)]


def test_unbatched_carry_stays_unbatched():
    """A counter carry that never touches batched values is not batched (fixpoint)."""
    f = lambda xs: lax.scan(lambda c, x: ((c[0] + 1, c[1] + x), c[0]), (0, 0.0), xs)
    xs = RNG.standard_normal((B, L))
    p = ember.make_program(ember.vmap(f))(xs)
    (e,) = prims(p, "scan")
    assert e.outvars[0].aval.shape == () and e.outvars[1].aval.shape == (B,)
    (n, s), ys = ember.vmap(f)(xs)
    np.testing.assert_array_equal(n, [L] * B)
    np.testing.assert_allclose(s, xs.sum(1), rtol=1e-12)
    np.testing.assert_array_equal(ys, np.tile(np.arange(L), (B, 1)))


def test_nested_vmap_and_fixpoint_through_carry():
    """Only the second carry is batched initially; the first becomes batched through the body."""
    def f(a, b):
        (x, y), _ = lax.scan(lambda c, _: ((c[1] * 2.0, c[0] + c[1]), None), (a, b), None, length=3)
        return x + y

    a, b = np.float64(1.0), RNG.standard_normal((2, 3))
    out = ember.vmap(ember.vmap(f, in_axes=(None, 0)), in_axes=(None, 0))(a, b)
    ref = np.vectorize(lambda bb: float(f(a, np.float64(bb))))(b)
    np.testing.assert_allclose(out, ref, rtol=1e-12)
