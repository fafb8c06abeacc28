"""Symbolic shape inference as jit sees it: canonical forms, unification of named axes, bindings,
reshape with products, concatenation with sums, and resolving a Program under a binding."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.program import Literal, resolve_program, trace_to_program, validate
from ember.errors import ShapeError

B, S, T = sh.axis("batch"), sh.axis("seq"), sh.axis("time")


def _trace(fn: object, *shapes: tuple) -> object:
    def flat(*xs: object) -> list:
        out = fn(*xs)
        return list(out) if isinstance(out, tuple) else [out]

    prog, _ = trace_to_program(flat, [ShapedArray(s, np.float32) for s in shapes])
    validate(prog)
    return prog


def test_canonical_forms() -> None:
    assert B * S == S * B and hash(B * S) == hash(S * B)
    assert (B + S) * 2 == 2 * S + 2 * B
    assert (B * S) // S == B and (2 * B) // 2 == B
    assert B - B == 0 and isinstance(B - B, int)
    assert (B + 1) - 1 == B
    assert {B * S: 1}[S * B] == 1  # usable as a cache key
    assert B != T and B * S != B * T


def test_evaluate_and_bind() -> None:
    assert sh.evaluate(B * S + 2 * B - 1, {"batch": 3, "seq": 5}) == 20
    assert sh.bind_axes([("x", (B, 4), (3, 4)), ("m", (B, S), (3, 7))]) == {"batch": 3, "seq": 7}
    with pytest.raises(ShapeError, match="axis 'batch' has conflicting sizes: x has 32, mask has 64"):
        sh.bind_axes([("x", (B, 512), (32, 512)), ("mask", (B, S), (64, 8))])
    with pytest.raises(ShapeError, match="x: dimension 1 must be 512, got 256"):
        sh.bind_axes([("x", (B, 512), (32, 256))])
    with pytest.raises(ShapeError, match="axis 'seq' has no size bound"):
        sh.evaluate(B * S, {"batch": 2})


def test_broadcasting_unifies_named_axes() -> None:
    assert sh.broadcast_shapes((B, 512), (1, 512)) == (B, 512)
    assert sh.broadcast_shapes((B, 1), (S,)) == (B, S)
    with pytest.raises(ShapeError, match="axis 'batch' vs axis 'time'"):
        sh.broadcast_shapes((B, 512), (T, 512))
    prog = _trace(lambda x, y: x + y, (B, 4), (1, 4))
    assert prog.out_avals[0].shape == (B, 4)
    with pytest.raises(ShapeError, match="axis 'batch' vs axis 'time'"):
        _trace(lambda x, y: x + y, (B, 4), (T, 4))


def test_reshape_with_products() -> None:
    def f(x: object) -> object:
        b, s, d = x.shape
        flat = jnp.reshape(x, (b * s, d))
        back = jnp.reshape(flat, (s, b, d))  # a different factorization of the same size
        return flat, back, jnp.reshape(x, (-1,))

    prog = _trace(f, (B, S, 4))
    assert [a.shape for a in prog.out_avals] == [(B * S, 4), (S, B, 4), (4 * B * S,)]
    with pytest.raises(ShapeError, match="reshape: cannot reshape"):
        _trace(lambda x: jnp.reshape(x, (x.shape[0], 5)), (B, 4))


def test_concat_with_sums_and_symbolic_slices() -> None:
    def f(a: object, b: object) -> object:
        c = jnp.concatenate([a, b, a], axis=0)
        return c, c[1:], lax.slice_in_dim(c, a.shape[0], a.shape[0] + b.shape[0], 1, 0)

    prog = _trace(f, (S, 3), (T, 3))
    assert [a.shape for a in prog.out_avals] == [(2 * S + T, 3), (2 * S + T - 1, 3), (T, 3)]
    with pytest.raises(ShapeError, match="concatenate: operand 1 has size axis 'time' on axis 1"):
        _trace(lambda a, b: jnp.concatenate([a, b], axis=0), (S, S), (S, T))


def test_dot_general_with_named_dims() -> None:
    prog = _trace(lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,)))), (B, S, 8), (B, 8, T))
    assert prog.out_avals[0].shape == (B, S, T)
    with pytest.raises(ShapeError, match="contracting dimension"):
        _trace(lambda x, y: x @ y, (B, S), (T, 4))


def test_resolve_program() -> None:
    def f(x: object) -> object:
        b, s = x.shape
        y = jnp.reshape(x, (b * s,)) + jnp.arange(b * s, dtype=np.float32)
        return y / ember.dimension_as_value(s), jnp.concatenate([x, x], 0)[1:]

    prog = _trace(f, (B, S))
    env = {"batch": 3, "seq": 4}
    r = resolve_program(prog, env)
    validate(r)
    assert [v.aval.shape for v in r.invars] == [(3, 4)]
    assert [a.shape for a in r.out_avals] == [(12,), (5, 4)]
    for e in r.eqns:
        assert all(sh.is_static_shape(v.aval.shape) for v in e.outvars)
        assert not any(isinstance(p, sh.DimExpr) for p in e.params.values())
    lits = [a for e in r.eqns for a in e.inputs if isinstance(a, Literal)]
    assert any(int(a.val) == 4 for a in lits)  # dim_as_value(seq) became a literal
    assert resolve_program(_trace(lambda x: x * 2.0, (3,)), env).eqns[0].params is not None
    with pytest.raises(ShapeError, match="negative shape"):
        resolve_program(_trace(lambda x: x[2:], (S,)), {"seq": 1})


def test_resolved_program_runs_like_the_static_trace() -> None:
    from ember._src.program import run_numpy

    def f(x: object) -> object:
        b, s = x.shape
        return jnp.cumsum(jnp.pad(x, ((0, 0), (1, 2))), axis=1), jnp.reshape(x, (s, b)).T

    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    sym = resolve_program(_trace(f, (B, S)), {"batch": 3, "seq": 5})
    static = _trace(f, (3, 5))
    for a, b in zip(run_numpy(sym, [], [x]), run_numpy(static, [], [x])):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["numpy", "native"])
def test_grad_of_pad_by_a_symbolic_amount_of_unknown_sign(backend) -> None:
    # pad x (size n) to size m: m - n pads for n < m and crops for n > m; the transpose of pad
    # needs max(-(m - n), 0), which is a max atom, not an error, for symbolic sizes
    def f(x, w):
        y = lax.pad(x, np.float32(0), [(0, w.shape[0] - x.shape[0], 0)])
        return jnp.sum(y * w)

    g = ember.jit(ember.grad(f), dynamic_axes=["n", "m"], backend=backend)
    rng = np.random.default_rng(0)
    for n, m in [(3, 5), (6, 2), (4, 4), (7, 1)]:
        x, w = rng.standard_normal(n).astype(np.float32), rng.standard_normal(m).astype(np.float32)
        want = np.zeros(n, np.float32)
        k = min(n, m)
        want[:k] = w[:k]
        np.testing.assert_allclose(np.asarray(g(x, w)), want, rtol=1e-6)
    assert g.cache_info()["compiles"] == 1


@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_tile_by_a_named_axis_size(backend) -> None:
    """``jnp.tile`` with a rep that is a named axis's size (BLOOM's ALiBi bias tiled over the batch),
    one compile for three batches, against NumPy; a negative static rep still raises."""
    def f(x, v):
        return jnp.tile(v, (x.shape[0], 1, 1)) + x
    jf = ember.jit(f, dynamic_axes={"x": ("b", None, None)}, backend=backend)
    rng = np.random.default_rng(0)
    v = rng.standard_normal((1, 3, 4)).astype(np.float32)
    for n in (2, 1, 5):
        x = rng.standard_normal((n, 3, 4)).astype(np.float32)
        np.testing.assert_array_equal(np.asarray(jf(x, v)), np.tile(v, (n, 1, 1)) + x)
    assert jf.cache_info()["compiles"] == 1
    with pytest.raises(ShapeError, match="non-negative"):
        jnp.tile(v, (-1, 1))


def test_reduce_window_without_padding_over_a_named_axis():
    """``lax.reduce_window`` with VALID padding over a named axis raised ``cannot decide n >= 3``;
    the window count is ``(n - span) // stride + 1`` and a binding the window does not fit raises.
    Sliding maxima and dilated sums against NumPy at several sizes, one trace."""
    def f(x):
        m = lax.reduce_window(x, -np.inf, lax.max, (3,), (2,), "VALID")
        s = lax.reduce_window(x, 0.0, lax.add, (2,), (1,), "VALID", window_dilation=(3,))
        return m, s
    g = ember.jit(f, dynamic_axes={"x": ("n",)})
    for n in (3, 4, 9, 20):
        x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
        m, s = g(x)
        np.testing.assert_array_equal(np.asarray(m), [x[i:i + 3].max() for i in range(0, n - 2, 2)])
        np.testing.assert_allclose(np.asarray(s), x[:n - 3] + x[3:], rtol=1e-6)
    assert g.cache_info()["traces"] == 1
    with pytest.raises(ShapeError, match="binding"):
        g(np.zeros(2, np.float32))


@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_step_slices_of_a_named_axis(backend):
    """``x[s::k]`` over a named axis (Swin's 2 x 2 patch merge) has ``ceil((n - s) / k)`` elements,
    0 where ``n == s`` (a start past the axis breaks a shape constraint, as ``x[s:]`` does); its
    gradient pads the cotangent back to exactly ``n`` (the slice's transpose
    uses the pad's own size rule, so it holds where the slice is empty), and vmap adds an axis.
    Against NumPy at sizes with both parities, one trace each."""
    def f(x):
        return x[:, 1::2] * 2.0, x[:, 0::3], x[:, 1::4]

    def loss(x):
        a, b, c = f(x)
        return jnp.sum(a * a) + jnp.sum(jnp.sin(b)) + jnp.sum(c)

    jf = ember.jit(f, dynamic_axes={"x": (None, "n")}, backend=backend)
    jg = ember.jit(ember.grad(loss), dynamic_axes={"x": (None, "n")}, backend=backend)
    jv = ember.jit(ember.vmap(f), dynamic_axes={"x": (None, None, "n")}, backend=backend)
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 6, 7, 11):
        x = rng.standard_normal((2, n)).astype(np.float32)
        for got, want in zip(jf(x), (x[:, 1::2] * 2, x[:, 0::3], x[:, 1::4])):
            assert np.asarray(got).shape == want.shape
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
        grad = np.zeros_like(x)
        grad[:, 1::2] = 8 * x[:, 1::2]
        grad[:, 0::3] += np.cos(x[:, 0::3])
        grad[:, 1::4] += 1
        np.testing.assert_allclose(np.asarray(jg(x)), grad, rtol=1e-5, atol=1e-6)
        xs = np.stack([x, -x])
        np.testing.assert_allclose(np.asarray(jv(xs)[0]), xs[:, :, 1::2] * 2, rtol=1e-6)
    for fn in (jf, jg, jv):
        assert fn.cache_info()["traces"] == 1
    with pytest.raises(ShapeError, match="bounds \\[2:1\\] out of range for size 1"):
        ember.jit(lambda x: x[2::4], dynamic_axes=["n"], backend=backend)(np.zeros(1, np.float32))
    with pytest.raises(ShapeError, match="x\\[s::k\\] for k > 1"):
        ember.jit(lambda x: x[:-1:2], dynamic_axes=["n"])(np.zeros(4, np.float32))


def test_arange_with_symbolic_bounds_and_steps():
    """``arange`` with a named axis's size as start or stop and any nonzero integer step (XLNet's
    relative positions ``arange(klen, -qlen, -1)``): ``ceil((stop - start) / step)`` elements, the
    start read at run time; against NumPy at several sizes, one trace. A binding where the count
    is negative breaks a shape constraint (NumPy would give an empty array); float bounds raise."""
    def f(x, y):
        n, m = x.shape[0], y.shape[0]
        return (jnp.arange(n, -m, -1), jnp.arange(2, n, 3), jnp.arange(-n, m, 2.0, dtype=jnp.int32),
                jnp.arange(m, n + m).astype(jnp.float32) * 0.5)

    g = ember.jit(f, dynamic_axes=[("n",), ("m",)])
    for n, m in ((5, 3), (1, 1), (7, 2), (2, 9)):
        got = g(np.zeros(n, np.float32), np.zeros(m, np.float32))
        want = (np.arange(n, -m, -1), np.arange(2, n, 3), np.arange(-n, m, 2),
                np.arange(m, n + m).astype(np.float32) * 0.5)
        for a, b in zip(got, want):
            assert np.asarray(a).shape == b.shape
            np.testing.assert_array_equal(np.asarray(a), b)
    assert g.cache_info()["traces"] == 1
    h = ember.jit(lambda x, y: jnp.arange(y.shape[0], x.shape[0]), dynamic_axes=[("n",), ("m",)])
    np.testing.assert_array_equal(np.asarray(h(np.zeros(6), np.zeros(2))), np.arange(2, 6))
    with pytest.raises(ShapeError, match="would be -7"):
        h(np.zeros(2), np.zeros(9))
    with pytest.raises(ShapeError, match="integer bounds and a nonzero integer step"):
        ember.jit(lambda x: jnp.arange(0.5, x.shape[0]), dynamic_axes=["n"])(np.zeros(3, np.float32))
