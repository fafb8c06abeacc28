"""``constant_loop_operands`` (native/rewrite/loop_passes.py): a loop-invariant operand of a scan or
while body that is a constant of the program becomes a constant of the body, so the body's products
read it packed once for the whole program (an RNN's recurrent matrix)."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.base import prim_refs as pr
from ember._src.native.emit import gemm_kernel
from ember._src.native.rewrite import loop_passes
from tests.native.conftest import requires_cc

RNG = np.random.default_rng(21)
W = (RNG.standard_normal((96, 256)) / 10).astype(np.float32)
U = (RNG.standard_normal((256, 256)) / 14).astype(np.float32)


def _rnn(x: jnp.ndarray) -> jnp.ndarray:
    """A tanh RNN over the leading axis of ``x`` (batch x 96 per step), ``W`` and ``U`` constants."""
    def step(h, xt):
        h = jnp.tanh(xt @ W + h @ U)
        return h, h

    h0 = jnp.zeros((x.shape[1], 256), jnp.float32)
    return lax.scan(step, h0, x)[1]


def _rnn_args(x, w, u):
    def step(h, xt):
        h = jnp.tanh(xt @ w + h @ u)
        return h, h

    return lax.scan(step, jnp.zeros((x.shape[1], 256), jnp.float32), x)[1]


def _reference(x: np.ndarray) -> np.ndarray:
    h = np.zeros((x.shape[1], 256))
    out = []
    for xt in x.astype(np.float64):
        h = np.tanh(xt @ W + h @ U)
        out.append(h)
    return np.stack(out)


def test_pass_moves_constant_operands_into_the_body():
    x = RNG.standard_normal((5, 4, 96)).astype(np.float32)
    prog = ember.jit(_rnn, backend="native").lower(x).program
    scan = next(e for e in prog.eqns if e.prim is pr.SCAN)
    nc = scan.params["num_consts"]
    assert nc >= 1 and not scan.params["body"].constvars
    out = loop_passes.constant_loop_operands(prog)
    scan2 = next(e for e in out.eqns if e.prim is pr.SCAN)
    body = scan2.params["body"]
    assert scan2.params["num_consts"] == 0 and len(body.constvars) == nc == len(body.consts)
    assert len(scan2.inputs) == len(scan.inputs) - nc
    held = [np.asarray(getattr(c, "value", c)) for c in body.consts]
    assert any(np.array_equal(h, U) for h in held) and any(np.array_equal(h, W) for h in held)
    # a program without constants, or a loop without constant operands, is returned as it is
    plain = ember.jit(_rnn_args, backend="native").lower(x, W, U).program
    assert loop_passes.constant_loop_operands(plain) is plain


@requires_cc
@pytest.mark.parametrize("batch", [1, 4])
def test_rnn_with_constant_weights_reads_them_prepacked(batch):
    """Values within float32 of a float64 loop; the body's products call the prepacked entry; with
    more than one row, bit for bit the program taking the weights as arguments (the prepacked
    entry's sums are the packing entry's)."""
    gemm_kernel.load(wait=True)
    x = RNG.standard_normal((7, batch, 96)).astype(np.float32)
    baked = ember.jit(_rnn, backend="native")
    got = np.asarray(baked(x))
    np.testing.assert_allclose(got, _reference(x), rtol=1e-4, atol=1e-5)
    as_args = ember.jit(_rnn_args, backend="native")
    if batch > 1:
        np.testing.assert_array_equal(got, np.asarray(as_args(x, W, U)))
    exe = baked.lower(x).executable
    if exe.fallback_reason is None and gemm_kernel.kernel_symbol() is not None and not gemm_kernel.BLAS_ONLY:
        assert "em_skp_fn()" in exe.source
        assert "em_skp_fn()" not in as_args.lower(x, W, U).executable.source
    plain = ember.jit(_rnn, backend="native", prepack=False)
    np.testing.assert_allclose(np.asarray(plain(x)), _reference(x), rtol=1e-4, atol=1e-5)
    assert "em_skp_fn()" not in plain.lower(x).executable.source


@requires_cc
def test_fori_loop_with_constant_matrix():
    """A while loop (fori_loop) whose body multiplies by a constant matrix: same values as NumPy."""
    x = RNG.standard_normal((3, 256)).astype(np.float32)

    def f(x):
        return lax.fori_loop(0, 6, lambda i, h: jnp.tanh(h @ U) + 0.1 * i, x)

    h = x.astype(np.float64)
    for i in range(6):
        h = np.tanh(h @ U) + 0.1 * i
    got = ember.jit(f, backend="native")(x)
    np.testing.assert_allclose(np.asarray(got), h, rtol=1e-4, atol=1e-5)
