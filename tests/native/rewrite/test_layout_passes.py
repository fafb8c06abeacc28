"""The ``channels_last`` pass (native/rewrite/layout_passes.py): NCHW convolutions become NHWC ones
and the batch-norm arithmetic, ReLU, max pool (pad + strided slices), residual add and global mean
after them carry NHWC on; only the program's input and the outputs that need NCHW are transposed.
Values against the original program run by the NumPy reference executor, and end to end natively."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.rewrite.layout_passes import NHWC
from ember._src.native.rewrite.passes import run_passes
from ember._src.program import run_numpy
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(35)
NCHW_DN = ("NCHW", "OIHW", "NCHW")


def block(x, w1, w2, scale, shift):
    """conv -> batch norm -> ReLU -> 3x3/2 max pool -> conv + residual -> ReLU; the global mean and
    the block's NCHW output."""
    y = lax.conv_general_dilated(x, w1, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NCHW_DN)
    y = jnp.maximum(y * scale[None, :, None, None] + shift[None, :, None, None], 0.0)
    p = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 3, 3), (1, 1, 2, 2), ((0, 0), (0, 0), (1, 1), (1, 1)))
    z = lax.conv_general_dilated(p, w2, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NCHW_DN)
    out = jnp.maximum(z + p, 0.0)
    return out.mean((2, 3)), out


def operands():
    x = RNG.standard_normal((2, 8, 12, 10)).astype(np.float32)
    w1 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    w2 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    scale = RNG.uniform(0.5, 1.5, 8).astype(np.float32)
    shift = RNG.standard_normal(8).astype(np.float32)
    return x, w1, w2, scale, shift


def consts(p):
    return [np.asarray(c) for c in p.consts]


def moved_values(p):
    """The transposes of activations (the copies the pass leaves; not those of per-channel vectors)."""
    return [e for e in p.eqns if e.prim.name == "transpose" and math.prod(e.inputs[0].aval.shape) > 64]


def test_chain_runs_channels_last():
    args = operands()
    p = ember.make_program(block)(*args)
    q = run_passes(p, ["simplify", "cse", "channels_last", "dce"])
    convs = [e for e in q.eqns if e.prim.name == "conv"]
    assert len(convs) == 2
    assert all(e.params["dimension_numbers"][0] == NHWC == e.params["dimension_numbers"][2] for e in convs)
    # one transpose in (the input), one out (the NCHW block output); the mean reads NHWC directly
    moved = moved_values(q)
    assert [e.params["permutation"] for e in moved] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    assert moved[1].outvars[0] is q.outvars[1]
    for pad in (e for e in q.eqns if e.prim.name == "pad"):
        assert [c[:2] for c in pad.params["padding_config"]] == [(0, 0), (1, 1), (1, 1), (0, 0)]
    # per-channel operands are broadcast to the NHWC shape directly (no transpose of a broadcast)
    prod = {v.id: e for e in q.eqns for v in e.outvars}
    assert not [e for e in q.eqns if e.prim.name == "transpose" and e.inputs[0].id in prod
                and prod[e.inputs[0].id].prim.name == "broadcast_in_dim"]
    for got, want in zip(run_numpy(q, consts(q), list(args)), run_numpy(p, consts(p), list(args))):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_other_consumers_read_nchw():
    """A consumer the pass does not carry NHWC through (a reshape) gets the value transposed back."""
    x, w1, _, _, _ = operands()

    def f(x, w):
        y = jnp.tanh(lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NCHW_DN))
        y = lax.conv_general_dilated(y, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NCHW_DN)
        return jnp.reshape(jnp.tanh(y), (y.shape[0], -1)), jnp.sum(y, axis=(1, 3))

    p = ember.make_program(f)(x, w1)
    q = run_passes(p, ["channels_last", "dce"])
    assert [e.params["permutation"] for e in moved_values(q)] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    for got, want in zip(run_numpy(q, consts(q), [x, w1]), run_numpy(p, consts(p), [x, w1])):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_lone_convolution_untouched():
    """A convolution no chain leads from to another keeps NCHW (its kernel's own paths)."""
    x, w1, _, _, _ = operands()
    p = ember.make_program(lambda x, w: jnp.tanh(lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=NCHW_DN)))(x, w1)
    q = run_passes(p, ["channels_last"])
    assert not [e for e in q.eqns if e.prim.name == "transpose"]


def test_untouched_without_nchw_convolutions():
    x = RNG.standard_normal((1, 6, 6, 4)).astype(np.float32)
    w = RNG.standard_normal((3, 3, 4, 4)).astype(np.float32)
    p = ember.make_program(lambda x, w: lax.conv_general_dilated(
        x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")))(x, w)
    assert run_passes(p, ["channels_last"]) is p


@requires_cc
@pytest.mark.parametrize("passes", ["default", "without"])
def test_native_matches_reference(passes):
    """End to end on the native backend, with the default passes and without this one."""
    from ember._src.native.rewrite import passes as pm
    args = operands()
    names = None if passes == "default" else tuple(n for n in pm.DEFAULT_PASSES if n != "channels_last")
    opts = {} if names is None else {"passes": names}
    f = ember.jit(block, backend="native", **opts)
    want = ember.jit(block, backend="numpy")(*args)
    for g, r in zip(f(*args), want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-4, atol=1e-5)
