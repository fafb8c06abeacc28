"""vmap: every primitive and ember.numpy function against stacking per-example results.

The reference for ``vmap(f, in_axes, out_axes)(*args)`` is ``f`` applied to each slice of the
mapped arguments (eagerly, no batching involved), stacked at ``out_axes``. Also covers pytree
axes, errors, nesting, composition with jit, ``batch_program`` and ``eval_shape``.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import core
from ember._src import tree as tu
from ember._src.batching import BatchTracer, batch_program, vmap
from ember._src.prims import dot, elementwise, indexing, misc, movement, random_bits, reductions
from ember._src.prims.movement import pad_p
from ember._src.program import run_numpy, validate
from ember.errors import TracerError

B = 3
rng = np.random.default_rng(1234)


# ---------------------------------------------------------------------------------------------
# The reference: slice, apply, stack
# ---------------------------------------------------------------------------------------------


def _slice(a, ax, b):
    return a if ax is None else np.take(np.asarray(a), b, axis=ax)


def _stack_ref(f, args, in_axes, out_axes, size):
    per = []
    for b in range(size):
        out = f(*[_slice(a, ax, b) for a, ax in zip(args, in_axes)])
        per.append([np.asarray(o) for o in tu.leaves(out)])
    treedef = tu.structure(f(*[_slice(a, ax, 0) for a, ax in zip(args, in_axes)]))
    oaxes = out_axes if isinstance(out_axes, (list, tuple)) else [out_axes] * len(per[0])
    stacked = [np.moveaxis(np.stack([p[i] for p in per]), 0, oa) for i, oa in enumerate(oaxes)]
    return tu.unflatten(treedef, stacked)


def _tol(dtype):
    return {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12,
            np.dtype(np.complex64): 2e-5, np.dtype(np.complex128): 1e-12}.get(np.dtype(dtype), 0)


def _assert_same(got, want):
    gl, gt = tu.flatten(got)
    wl, wt = tu.flatten(want)
    assert gt == wt, (gt, wt)
    for g, w in zip(gl, wl):
        g = np.asarray(g)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        t = _tol(w.dtype)
        np.testing.assert_allclose(g, w, rtol=t, atol=t, equal_nan=True)


def check_vmap(f, stacked, in_axes=0, out_axes=0, jit=False):
    """``stacked[i]`` holds argument i batched at axis 0; move it to ``in_axes[i]`` (or take
    example 0 when it is None) and compare vmap with the per-example reference."""
    n = len(stacked)
    axes = list(in_axes) if isinstance(in_axes, (list, tuple)) else [in_axes] * n
    args = [np.asarray(s)[0] if ax is None else np.moveaxis(np.asarray(s), 0, ax)
            for s, ax in zip(stacked, axes)]
    size = next((np.asarray(s).shape[0] for s, ax in zip(stacked, axes) if ax is not None), B)
    want = _stack_ref(f, args, axes, out_axes, size)
    vf = vmap(f, in_axes=tuple(axes), out_axes=out_axes,
              axis_size=None if any(a is not None for a in axes) else size)
    _assert_same(vf(*args), want)
    if jit:
        _assert_same(ember.jit(vf)(*args), want)
    return want


def _f(shape, lo=-2.0, hi=2.0, dtype=np.float32):
    return rng.uniform(lo, hi, size=(B, *shape)).astype(dtype)


def _i(shape, lo=-5, hi=6, dtype=np.int32):
    return rng.integers(lo, hi, size=(B, *shape)).astype(dtype)


def _b(shape):
    return rng.random((B, *shape)) > 0.5


def _c(shape):
    return (_f(shape) + 1j * _f(shape)).astype(np.complex64)


# ---------------------------------------------------------------------------------------------
# Elementwise primitives
# ---------------------------------------------------------------------------------------------

UNARY = {
    "neg": (lax.neg, _f), "sign": (lax.sign, _f), "floor": (lax.floor, _f), "ceil": (lax.ceil, _f),
    "round": (lax.round, _f), "round_even": (functools.partial(lax.round, rounding_method=1), _f),
    "is_finite": (lax.is_finite, _f), "exp": (lax.exp, _f), "exp2": (lax.exp2, _f),
    "log": (lax.log, lambda s: _f(s, 0.1, 3)), "log1p": (lax.log1p, lambda s: _f(s, -0.5, 3)),
    "expm1": (lax.expm1, _f), "tanh": (lax.tanh, _f), "logistic": (lax.logistic, _f),
    "sin": (lax.sin, _f), "cos": (lax.cos, _f), "tan": (lax.tan, lambda s: _f(s, -1, 1)),
    "asin": (lax.asin, lambda s: _f(s, -0.9, 0.9)), "acos": (lax.acos, lambda s: _f(s, -0.9, 0.9)),
    "atan": (lax.atan, _f), "sinh": (lax.sinh, _f), "cosh": (lax.cosh, _f), "asinh": (lax.asinh, _f),
    "acosh": (lax.acosh, lambda s: _f(s, 1.1, 3)), "atanh": (lax.atanh, lambda s: _f(s, -0.9, 0.9)),
    "sqrt": (lax.sqrt, lambda s: _f(s, 0.1, 3)), "rsqrt": (lax.rsqrt, lambda s: _f(s, 0.1, 3)),
    "cbrt": (lax.cbrt, _f), "abs": (lax.abs, _f), "abs_complex": (lax.abs, _c),
    "bitwise_not": (lax.bitwise_not, _i), "not_bool": (lax.bitwise_not, _b),
    "real": (lax.real, _c), "imag": (lax.imag, _c), "conj": (lax.conj, _c),
    "erf": (lax.erf, _f), "erfc": (lax.erfc, _f), "erf_inv": (lax.erf_inv, lambda s: _f(s, -0.9, 0.9)),
    "lgamma": (lax.lgamma, lambda s: _f(s, 0.1, 3)), "digamma": (lax.digamma, lambda s: _f(s, 0.1, 3)),
    "polygamma": (lambda x: lax.polygamma(1, x), lambda s: _f(s, 0.1, 3)),
    "population_count": (lax.population_count, lambda s: _i(s, 0, 1000)),
    "copy": (elementwise.copy, _f), "integer_pow": (lambda x: lax.integer_pow(x, 3), _f),
    "integer_pow_neg": (lambda x: lax.integer_pow(x, -2), lambda s: _f(s, 0.5, 2)),
    "convert_f2i": (lambda x: lax.convert_element_type(x, np.int32), lambda s: _f(s, -9, 9)),
    "convert_i2f_weak": (lambda x: lax.convert_element_type(x, np.float32, weak_type=True), _i),
    "stop_gradient": (lax.stop_gradient, _f),
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name):
    fn, gen = UNARY[name]
    x = gen((2, 4))
    check_vmap(fn, [x], 0)
    check_vmap(fn, [x], 1)
    check_vmap(fn, [x], -1, out_axes=-1)


BINARY = {
    "add": (lax.add, _f, _f), "sub": (lax.sub, _f, _f), "mul": (lax.mul, _f, _f),
    "div": (lax.div, _f, lambda s: _f(s, 0.5, 2)), "div_int": (lax.div, _i, lambda s: _i(s, 1, 5)),
    "rem": (lax.rem, _f, lambda s: _f(s, 0.5, 2)), "rem_int": (lax.rem, _i, lambda s: _i(s, 1, 5)),
    "pow": (lax.pow, lambda s: _f(s, 0.1, 2), _f), "max": (lax.max, _f, _f), "min": (lax.min, _f, _f),
    "atan2": (lax.atan2, _f, _f), "nextafter": (lax.nextafter, _f, _f),
    "eq": (lax.eq, _i, _i), "ne": (lax.ne, _i, _i), "lt": (lax.lt, _f, _f), "le": (lax.le, _i, _i),
    "gt": (lax.gt, _f, _f), "ge": (lax.ge, _i, _i),
    "and": (lax.bitwise_and, _i, _i), "or": (lax.bitwise_or, _b, _b), "xor": (lax.bitwise_xor, _i, _i),
    "shift_left": (lax.shift_left, _i, lambda s: _i(s, 0, 8)),
    "shift_right_arithmetic": (lax.shift_right_arithmetic, _i, lambda s: _i(s, 0, 8)),
    "shift_right_logical": (lax.shift_right_logical, _i, lambda s: _i(s, 0, 8)),
    "complex": (lax.complex, _f, _f),
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name):
    fn, g1, g2 = BINARY[name]
    x, y = g1((2, 3)), g2((2, 3))
    for axes in [(0, 0), (1, None), (None, -1), (2, 1)]:
        check_vmap(fn, [x, y], axes)


def test_select_n():
    p, x, y, z = _b((4, 2)), _f((4, 2)), _f((4, 2)), _f((4, 2))
    w = _i((4, 2), 0, 3)
    for axes in [(0, 0, 0), (None, 1, 0), (1, None, None), (0, None, 2)]:
        check_vmap(lax.select, [p, x, y], axes)
    for axes in [(0, 0, 0, 0), (None, 0, None, 1), (1, None, None, None)]:
        check_vmap(lax.select_n, [w, x, y, z], axes)


# ---------------------------------------------------------------------------------------------
# Movement primitives
# ---------------------------------------------------------------------------------------------

MOVEMENT = {
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (3, 2, 5, 4), (1, 3)), (2, 4)),
    "broadcast_size1": (lambda x: lax.broadcast_in_dim(x, (2, 6), (0, 1)), (2, 1)),
    "reshape": (lambda x: lax.reshape(x, (4, 3, 2)), (2, 3, 4)),
    "reshape_flat": (lambda x: lax.reshape(x, (-1,)), (2, 3, 4)),
    "transpose": (lambda x: lax.transpose(x, (2, 0, 1)), (2, 3, 4)),
    "squeeze": (lambda x: lax.squeeze(x, (1, -1)), (2, 1, 3, 1)),
    "expand_dims": (lambda x: lax.expand_dims(x, (0, 3)), (2, 3)),
    "rev": (lambda x: lax.rev(x, (0, 2)), (2, 3, 4)),
    "slice": (lambda x: lax.slice(x, (0, 1, 1), (2, 3, 4)), (2, 3, 4)),
    "slice_strided": (lambda x: lax.slice(x, (0, 0, 1), (2, 3, 4), (2, 2, 2)), (2, 3, 4)),
    "slice_in_dim": (lambda x: lax.slice_in_dim(x, 1, 4, 2, axis=-1), (2, 3, 5)),
    "pad": (lambda x: lax.pad(x, np.float32(-1), ((1, 2, 1), (0, 1, 0))), (2, 3)),
    "pad_negative": (lambda x: pad_p.bind(x, np.float32(7), padding_config=((-1, 2, 1), (1, -1, 0))), (3, 3)),
    "full_like": (lambda x: lax.full_like(x, 2.5), (2, 3)),
    "iota": (lambda x: lax.add(x, lax.convert_element_type(lax.broadcasted_iota(np.int32, (2, 3), 1),
                                                          np.float32)), (2, 3)),
}


@pytest.mark.parametrize("name", sorted(MOVEMENT))
def test_movement(name):
    fn, shape = MOVEMENT[name]
    x = _f(shape)
    for ax in range(-len(shape) - 1, len(shape) + 1):
        check_vmap(fn, [x], ax)
    check_vmap(fn, [x], 1, out_axes=-1)


def test_pad_batched_value():
    x, v = _f((3, 2)), _f(())
    cfg = ((1, 2, 1), (0, 1, 2))
    fn = lambda a, b: lax.pad(a, b, cfg)
    for axes in [(0, 0), (None, 0), (2, 0), (1, None)]:
        check_vmap(fn, [x, v], axes)
    fn_neg = lambda a, b: pad_p.bind(a, b, padding_config=((-1, 2, 1), (1, -1, 0)))
    check_vmap(fn_neg, [x, v], (1, 0))


def test_concatenate():
    x, y, z = _f((2, 3)), _f((4, 3)), _f((1, 3))
    fn = lambda a, b, c: lax.concatenate([a, b, c], 0)
    for axes in [(0, 0, 0), (None, 1, 0), (2, None, None), (0, 2, -1)]:
        check_vmap(fn, [x, y, z], axes)
    fn1 = lambda a, b: lax.concatenate([a, b], 1)
    check_vmap(fn1, [_f((3, 2)), _f((3, 4))], (1, None))


def test_iota_only_output_is_broadcast():
    fn = lambda x: lax.iota(np.int32, 4)
    out = vmap(fn)(np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(out, np.tile(np.arange(4, dtype=np.int32), (3, 1)))
    out = vmap(fn, out_axes=1)(np.zeros((3, 2), np.float32))
    np.testing.assert_array_equal(out, np.tile(np.arange(4, dtype=np.int32)[:, None], (1, 3)))


DS_CASES = [(0, 0, 0), (None, 0, 0), (1, None, 0), (0, 0, None), (2, None, None), (None, None, 0)]


@pytest.mark.parametrize("axes", DS_CASES)
def test_dynamic_slice(axes):
    x = _f((6, 7))
    s0 = np.array([0, 4, -3], np.int32)   # clamped at both ends
    s1 = np.array([2, 9, 1], np.int64)
    fn = lambda a, i, j: lax.dynamic_slice(a, (i, j), (3, 4))
    check_vmap(fn, [x, s0, s1], axes, jit=True)
    fn_full = lambda a, i, j: lax.dynamic_slice(a, (i, j), (6, 2))  # full size on axis 0
    check_vmap(fn_full, [x, s0, s1], axes)


def test_dynamic_slice_static_start_batched_operand():
    x = _f((5,))
    check_vmap(lambda a: lax.dynamic_slice(a, (2,), (2,)), [x], 1)


@pytest.mark.parametrize("axes", [(0, 0, 0, 0), (None, 0, 0, 0), (0, None, 0, None), (1, 2, None, None),
                                  (None, None, 0, 0), (None, 1, None, 0), (0, 0, None, None)])
def test_dynamic_update_slice(axes):
    x, u = _f((5, 6)), _f((2, 3))
    s0 = np.array([0, 4, -3], np.int32)
    s1 = np.array([2, 9, 1], np.int32)
    fn = lambda a, b, i, j: lax.dynamic_update_slice(a, b, (i, j))
    check_vmap(fn, [x, u, s0, s1], axes, jit=True)


def test_dynamic_update_slice_empty_update():
    x, u = _f((4,)), np.zeros((B, 0), np.float32)
    s = np.array([1, 2, 3], np.int32)
    check_vmap(lambda a, b, i: lax.dynamic_update_slice(a, b, (i,)), [x, u, s], (0, 0, 0))


# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------

REDUCE = {
    "reduce_sum": (lax.reduce_sum, _f), "reduce_prod": (lax.reduce_prod, lambda s: _f(s, 0.5, 1.5)),
    "reduce_max": (lax.reduce_max, _f), "reduce_min": (lax.reduce_min, _i),
    "reduce_and": (lax.reduce_and, _b), "reduce_or": (lax.reduce_or, _b),
    "reduce_and_int": (lax.reduce_and, _i), "reduce_or_int": (lax.reduce_or, _i),
}


@pytest.mark.parametrize("name", sorted(REDUCE))
@pytest.mark.parametrize("axes", [(0,), (1, 2), (), None, (-1,)])
def test_reductions(name, axes):
    fn, gen = REDUCE[name]
    x = gen((2, 3, 4))
    f = lambda a: fn(a, axes)
    check_vmap(f, [x], 0)
    check_vmap(f, [x], 2)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_argminmax(name, axis):
    x = _f((3, 4))
    x[1, 0, 2] = np.nan
    f = lambda a: getattr(lax, name)(a, axis, np.int32)
    check_vmap(f, [x], 0)
    check_vmap(f, [x], -1)


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative(name, reverse):
    x = _f((3, 4), 0.5, 1.5)
    for axis in (0, 1):
        f = functools.partial(lambda a, ax: getattr(lax, name)(a, ax, reverse), ax=axis)
        check_vmap(f, [x], 0)
        check_vmap(f, [x], 2)


# ---------------------------------------------------------------------------------------------
# take / scatter
# ---------------------------------------------------------------------------------------------


def test_check_index():
    """vmap of the importer's bounds check: indices pass through unchanged along the mapped axis, and
    an out-of-range index in any batch element raises IndexError naming the index and the bound."""
    from ember._src.prims.indexing import check_index

    idx = np.array([[0, 3, 4], [1, 2, 0]], np.int32)
    f = ember.vmap(lambda i: check_index(i, 5, "x"), in_axes=1)
    np.testing.assert_array_equal(np.asarray(f(idx)), idx.T)
    bad = idx.copy()
    bad[1, 2] = 5
    with pytest.raises(IndexError, match="5"):
        np.asarray(ember.jit(f)(bad))


@pytest.mark.parametrize("mode", ["clip", "fill"])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("axes", [(0, None), (None, 0), (0, 0), (2, 1), (1, 2), (3, 0)])
def test_take(mode, axis, axes):
    x = _f((4, 5, 3))
    idx = _i((2, 3), -1, 7)  # some out of range on every axis
    if axes[0] == 3:
        axes = (-1, axes[1])
    check_vmap(lambda a, i: lax.take(a, i, axis, mode), [x, idx], axes)


def test_take_scalar_index_and_take_along_axis():
    x = _f((4, 5))
    i = _i((), 0, 4)
    check_vmap(lambda a, j: lax.take(a, j, 0), [x, i], (0, 0))
    check_vmap(lambda a, j: lax.take(a, j, 1), [x, i], (1, 0))
    idx = _i((4, 2), 0, 5)
    for axes in [(0, 0), (None, 1), (1, None)]:
        check_vmap(lambda a, j: lax.take_along_axis(a, j, 1), [x, idx], axes)


@pytest.mark.parametrize("mode", ["set", "add", "mul", "min", "max"])
@pytest.mark.parametrize("axes", [(0, None, None), (None, 0, None), (None, None, 0), (0, 0, 0), (1, None, 2),
                                  (None, 1, 1), (2, 0, None)])
def test_scatter(mode, axes):
    x = _f((4, 3, 2))
    upd = _f((3, 2, 2))  # x.shape[:1] + idx.shape + x.shape[2:] for axis=1 with idx (2,)
    if mode == "set":  # unique indices per example (duplicates have no defined winner)
        idx = np.stack([rng.permutation(5)[:2] - 1 for _ in range(B)]).astype(np.int32)
        idx[1, 0] = 3  # out of range: dropped
    else:
        idx = _i((2,), -1, 4)
        idx[0] = [1, 1]  # duplicates accumulate
    upd = np.moveaxis(_f((4, 2, 2)), 0, 0)
    check_vmap(lambda a, i, u: lax.scatter(a, i, u, 1, mode), [x, idx, upd], axes)


def test_scatter_axis0_and_2d_indices():
    x = _f((5, 2))
    idx = np.stack([rng.permutation(5)[:4].reshape(2, 2) for _ in range(B)]).astype(np.int32)
    upd = _f((2, 2, 2))
    for axes in [(0, 0, 0), (None, 0, 1), (1, None, 0), (0, 1, None)]:
        check_vmap(lambda a, i, u: lax.scatter(a, i, u, 0, "set"), [x, idx, upd], axes)
        check_vmap(lambda a, i, u: lax.scatter(a, i, u, 0, "add"), [x, idx, upd], axes)


# ---------------------------------------------------------------------------------------------
# dot_general
# ---------------------------------------------------------------------------------------------

DOT_CASES = {
    "matmul": ((((1,), (0,)), ((), ())), (3, 4), (4, 5)),
    "inner": ((((0,), (0,)), ((), ())), (4,), (4,)),
    "outer": ((((), ()), ((), ())), (3,), (2,)),
    "batched": ((((2,), (1,)), ((0,), (0,))), (2, 3, 4), (2, 4, 5)),
    "batch_last": ((((0,), (1,)), ((2,), (0,))), (4, 3, 2), (2, 4, 5)),
    "multi_contract": ((((0, 2), (1, 0)), ((), ())), (3, 2, 4), (4, 3, 5)),
}


@pytest.mark.parametrize("name", sorted(DOT_CASES))
@pytest.mark.parametrize("axes", [(0, 0), (0, None), (None, 0), (1, -1), (-1, None), (None, 1)])
def test_dot_general(name, axes):
    dn, sx, sy = DOT_CASES[name]
    x, y = _f(sx), _f(sy)
    f = lambda a, b: lax.dot_general(a, b, dn)
    check_vmap(f, [x, y], axes)


def test_dot_preferred_type_and_lax_dot():
    x, y = _i((3, 4)), _i((4,))
    dn = (((1,), (0,)), ((), ()))
    check_vmap(lambda a, b: lax.dot_general(a, b, dn, preferred_element_type=np.float32), [x, y], (0, None))
    check_vmap(lax.dot, [_f((3, 4)), _f((4, 2))], (1, 0))


# ---------------------------------------------------------------------------------------------
# sort
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dimension", [0, 1, -1])
def test_sort(dimension):
    x = _i((3, 4), 0, 4)  # ties: stability matters
    y = _f((3, 4))
    check_vmap(lambda a: lax.sort(a, dimension), [x], 0)
    check_vmap(lambda a: lax.sort(a, dimension), [x], 2)
    for axes in [(0, 0), (None, 1), (2, None)]:
        check_vmap(lambda a, b: lax.sort((a, b), dimension, num_keys=1), [x, y], axes)
        check_vmap(lambda a, b: lax.sort((a, b), dimension, num_keys=2), [x, y], axes)


# ---------------------------------------------------------------------------------------------
# Random-bit primitives
# ---------------------------------------------------------------------------------------------


def _keys(n=B):
    return rng.integers(0, 2**32, size=(n, 2), dtype=np.uint64).astype(np.uint32)


def test_threefry_and_bitcast():
    k1, k2, x1, x2 = (rng.integers(0, 2**32, size=(B, 4), dtype=np.uint64).astype(np.uint32)
                      for _ in range(4))
    for axes in [(0, 0, 0, 0), (None, None, 0, 1), (1, 0, None, None)]:
        check_vmap(lambda *a: random_bits.threefry2x32_p.bind(*a), [k1, k2, x1, x2], axes)
    check_vmap(lambda a: random_bits.bitcast_convert_type(a, np.float32), [k1], 1)
    check_vmap(lambda k: random_bits.threefry_random_bits(k, 32, (3,)), [_keys()], 0)
    check_vmap(lambda k: random_bits.threefry_split(k, (2,)), [_keys()], 1, out_axes=2)
    check_vmap(lambda k, d: random_bits.threefry_fold_in(k, d), [_keys(), _i((), 0, 9).astype(np.uint32)],
               (0, 0))


@pytest.mark.parametrize("axes", [(0, 0), (None, 0), (0, None), (1, 1)])
def test_random_gamma_and_poisson(axes):
    keys = np.stack([_keys(2) for _ in range(B)])  # a batch of key arrays with batch shape (2,)
    a = _f((2, 3), 0.3, 3.0)
    lam = _f((2, 3), 0.5, 15.0)
    check_vmap(lambda k, x: random_bits.random_gamma(k, x), [keys, a], axes)
    check_vmap(lambda k, x: random_bits.random_gamma(k, x, log_space=True), [keys, a], axes)
    check_vmap(lambda k, x: random_bits.random_poisson(k, x, np.int32), [keys, lam], axes)
    check_vmap(lambda x, s: random_bits.random_gamma_grad_p.bind(x, s, log_space=False), [a, a], axes)


# ---------------------------------------------------------------------------------------------
# Every core primitive is exercised by the cases above
# ---------------------------------------------------------------------------------------------


def _prims_of(*modules):
    return {v.name for m in modules for v in vars(m).values() if isinstance(v, core.Primitive)}


def test_ensure_shape():
    """vmap of a restated symbolic size (under dynamic axes): the batch axis is kept in front, and
    the restated rows sum in pairs as in the unbatched function."""
    from ember._src.prims.movement import ensure_shape

    def pairs(x):
        y = ensure_shape(x, (x.shape[0] // 2 * 2, x.shape[1]))
        return jnp.reshape(y, (y.shape[0] // 2, 2, y.shape[1])).sum(1)
    xs = np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3)
    f = ember.jit(ember.vmap(pairs, in_axes=1), dynamic_axes={"x": ("n", None, None)})
    got = f(xs.transpose(1, 0, 2))
    np.testing.assert_array_equal(np.asarray(got), xs[:, 0::2] + xs[:, 1::2])


def test_every_core_primitive_is_covered():
    seen: set[str] = set()
    orig = core.Primitive.bind

    def spy(self, *args, **params):
        if any(isinstance(a, BatchTracer) and a.batch_dim is not None for a in args):
            seen.add(self.name)
        return orig(self, *args, **params)

    core.Primitive.bind = spy
    try:
        for name in UNARY:
            test_unary(name)
        for name in BINARY:
            test_binary(name)
        for name in MOVEMENT:
            test_movement(name)
        for name in REDUCE:
            test_reductions(name, (0,))
        test_select_n()
        test_pad_batched_value()
        test_concatenate()
        test_dynamic_slice((0, 0, 0))
        test_dynamic_update_slice((0, 0, 0, 0))
        test_argminmax("argmax", 0)
        test_argminmax("argmin", 0)
        for name in ["cumsum", "cumprod", "cummax", "cummin"]:
            test_cumulative(name, False)
        test_take("clip", 0, (0, 0))
        test_check_index()
        test_scatter("add", (0, 0, 0))
        test_dot_general("batched", (0, 0))
        test_sort(0)
        test_threefry_and_bitcast()
        test_random_gamma_and_poisson((0, 0))
        test_ensure_shape()
    finally:
        core.Primitive.bind = orig
    expected = _prims_of(elementwise, movement, reductions, indexing, dot, misc, random_bits) - {"iota"}
    assert not expected - seen, f"primitives never vmapped by these tests: {sorted(expected - seen)}"


# ---------------------------------------------------------------------------------------------
# ember.numpy functions
# ---------------------------------------------------------------------------------------------

NP_UNARY = ["abs", "absolute", "arccos", "arccosh", "arcsin", "arcsinh", "arctan", "arctanh", "cbrt", "ceil",
            "conj", "cos", "cosh", "exp", "exp2", "expm1", "fix", "floor", "imag", "isfinite", "isinf",
            "isnan", "log", "log10", "log1p", "log2", "negative", "positive", "real", "reciprocal", "rint",
            "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh", "trunc", "around", "round",
            "logical_not"]
NP_DOMAIN = {"arccos": (-0.9, 0.9), "arcsin": (-0.9, 0.9), "arctanh": (-0.9, 0.9), "arccosh": (1.1, 3),
             "log": (0.1, 3), "log10": (0.1, 3), "log2": (0.1, 3), "log1p": (-0.5, 3), "sqrt": (0.1, 3),
             "reciprocal": (0.5, 2), "tan": (-1, 1)}
NP_BINARY = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod",
             "fmod", "power", "float_power", "maximum", "minimum", "arctan2", "equal", "not_equal", "less",
             "less_equal", "greater", "greater_equal", "logical_and", "logical_or", "logical_xor"]
NP_INT_BINARY = ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "floor_divide",
                 "remainder", "power"]


@pytest.mark.parametrize("name", [n for n in NP_UNARY if hasattr(jnp, n)])
def test_numpy_unary(name):
    lo, hi = NP_DOMAIN.get(name, (-2, 2))
    x = _f((2, 3), lo, hi)
    fn = getattr(jnp, name)
    check_vmap(fn, [x], 0)
    check_vmap(fn, [x], -1, out_axes=1)


@pytest.mark.parametrize("name", [n for n in NP_BINARY if hasattr(jnp, n)])
def test_numpy_binary_with_broadcasting(name):
    x, y = _f((2, 3), 0.5, 2), _f((3,), 0.5, 2)
    fn = getattr(jnp, name)
    for axes in [(0, 0), (1, None), (None, 1), (-1, 0)]:
        check_vmap(fn, [x, y], axes)
    check_vmap(lambda a: fn(a, 2.0), [x], 1)  # weak Python scalar
    check_vmap(lambda a: fn(1.5, a), [x], 0)


@pytest.mark.parametrize("name", [n for n in NP_INT_BINARY if hasattr(jnp, n)])
def test_numpy_int_binary(name):
    x, y = _i((2, 3), 1, 9), _i((2, 3), 1, 4)
    fn = getattr(jnp, name)
    for axes in [(0, 0), (1, None), (None, 2)]:
        check_vmap(fn, [x, y], axes)


def test_numpy_where_and_clip():
    c, x, y = _b((2, 3)), _f((2, 3)), _f((3,))
    for axes in [(0, 0, 0), (None, 1, 0), (1, None, None)]:
        check_vmap(jnp.where, [c, x, y], axes)
    check_vmap(lambda a, lo, hi: jnp.clip(a, lo, hi), [x, _f(()) - 1, _f(()) + 1], (1, 0, None))
    check_vmap(lambda a: jnp.clip(a, max=0.5), [x], 0)


NP_MORE = {  # functions other modules provide; tested once they exist
    "sum": (lambda a: jnp.sum(a, axis=-1), (2, 3)), "mean": (lambda a: jnp.mean(a, axis=0), (2, 3)),
    "max": (lambda a: jnp.max(a), (2, 3)), "prod": (lambda a: jnp.prod(a, axis=1), (2, 3)),
    "cumsum": (lambda a: jnp.cumsum(a, axis=0), (2, 3)), "sort": (lambda a: jnp.sort(a, axis=-1), (2, 3)),
    "argsort": (lambda a: jnp.argsort(a, axis=0), (3, 2)),
    "argmax": (lambda a: jnp.argmax(a, axis=1), (2, 3)),
    "reshape": (lambda a: jnp.reshape(a, (3, 2)), (2, 3)), "transpose": (lambda a: jnp.transpose(a), (2, 3)),
    "concatenate": (lambda a: jnp.concatenate([a, a], axis=1), (2, 3)),
    "stack": (lambda a: jnp.stack([a, a], axis=1), (2, 3)),
    "matmul": (lambda a: jnp.matmul(a, a.T), (2, 3)), "dot": (lambda a: jnp.dot(a, a.T), (2, 3)),
    "einsum": (lambda a: jnp.einsum("ij,kj->ik", a, a), (2, 3)),
    "take": (lambda a: jnp.take(a, jnp.asarray([2, 0]), axis=1), (2, 3)),
    "var": (lambda a: jnp.var(a, axis=0), (2, 3)), "std": (lambda a: jnp.std(a), (2, 3)),
    "flip": (lambda a: jnp.flip(a, 1), (2, 3)), "roll": (lambda a: jnp.roll(a, 1, axis=1), (2, 3)),
    "pad": (lambda a: jnp.pad(a, 1), (2, 3)), "tile": (lambda a: jnp.tile(a, (2, 1)), (2, 3)),
    "zeros_like": (lambda a: jnp.zeros_like(a), (2, 3)), "ones": (lambda a: jnp.ones(3) + a[0], (2, 3)),
    "outer": (lambda a: jnp.outer(a[0], a[1]), (2, 3)),
    "getitem": (lambda a: a[1, ::-2], (2, 3)),
    "getitem_adv": (lambda a: a[:, jnp.asarray([2, 0, 2])], (2, 3)),
}


@pytest.mark.parametrize("name", sorted(NP_MORE))
def test_numpy_more(name):
    fn, shape = NP_MORE[name]
    x = _f(shape)
    fn(jnp.asarray(x[0]))  # unbatched first: an error here is the function's, not vmap's
    check_vmap(fn, [x], 0)
    check_vmap(fn, [x], 1)


def test_numpy_getitem_with_batched_index():
    x = _f((5, 3))
    i = _i((), 0, 5)
    jnp.asarray(x[0])[jnp.asarray(i[0])]  # unbatched first: an error here is indexing's, not vmap's
    check_vmap(lambda a, j: a[j], [x, i], (0, 0))
    check_vmap(lambda a, j: jnp.asarray(a)[j], [x, i], (None, 0))
    check_vmap(lambda a, j: jnp.asarray(a).at[j].set(0.0), [x, i], (1, 0))


# ---------------------------------------------------------------------------------------------
# in_axes / out_axes / axis_size semantics
# ---------------------------------------------------------------------------------------------


def test_pytree_in_axes_and_out_axes():
    w, b, xs = _f((3, 2)), _f((2,)), _f((3, 4))

    def f(params, x):
        return {"y": jnp.add(lax.dot_general(x, params["w"], (((0,), (0,)), ((), ()))), params["b"]),
                "x": x}

    params = {"w": w[0], "b": b}  # b batched along axis 0; w unbatched
    vf = vmap(f, in_axes=({"w": None, "b": 0}, 1), out_axes={"y": 0, "x": -1})
    out = vf(params, np.moveaxis(xs, 0, 1))
    for k in range(B):
        want = f({"w": w[0], "b": b[k]}, xs[k])
        np.testing.assert_allclose(np.asarray(out["y"])[k], want["y"], rtol=1e-6)
        np.testing.assert_allclose(np.asarray(out["x"])[..., k], want["x"])


def test_in_axes_list_and_nested_tuple_prefix():
    x, y = _f((2,)), _f((3,))
    f = lambda pair, z: jnp.add(lax.reduce_sum(pair[0], None), lax.reduce_sum(pair[1], None)) * z
    out = vmap(f, in_axes=[(0, None), None])((x, y[0]), 2.0)
    want = np.array([(x[k].sum() + y[0].sum()) * 2.0 for k in range(B)], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_kwargs_are_mapped_on_axis_0():
    x, y = _f((2,)), _f((2,))
    out = vmap(lambda a, b: a * b, in_axes=(1,))(x.T, b=y)
    np.testing.assert_allclose(out, x * y)


def test_unbatched_outputs_broadcast_and_out_axes_none():
    x = _f((2,))
    out = vmap(lambda a: (a, 3.0, jnp.asarray(np.ones(2, np.float32))), out_axes=(0, 0, 1))(x)
    np.testing.assert_allclose(out[0], x)
    assert np.asarray(out[1]).shape == (B,) and np.all(np.asarray(out[1]) == 3.0)
    assert np.asarray(out[2]).shape == (2, B)
    c = vmap(lambda a, k: k * 2, in_axes=(0, None), out_axes=None)(x, np.float32(4))
    assert np.asarray(c).shape == () and float(c) == 8.0
    with pytest.raises(ValueError, match="out_axes is None"):
        vmap(lambda a: a, out_axes=None)(x)


def test_axis_size_when_nothing_is_mapped():
    out = vmap(lambda a: a + 1.0, in_axes=None, axis_size=4)(np.float32(1))
    np.testing.assert_array_equal(out, np.full(4, 2.0, np.float32))
    with pytest.raises(ValueError, match="at least one non-None"):
        vmap(lambda a: a, in_axes=None)(np.float32(1))
    with pytest.raises(ValueError, match="inconsistent sizes"):
        vmap(lambda a: a, axis_size=5)(np.zeros(3, np.float32))


def test_errors_name_the_arguments():
    def f(x, y):
        return x + y

    with pytest.raises(ValueError) as e:
        vmap(f)(np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32))
    msg = str(e.value)
    assert "inconsistent sizes" in msg and "argument x " in msg and "argument y " in msg
    assert "size 3" in msg and "size 4" in msg
    with pytest.raises(ValueError, match="argument y along axis 2.*rank"):
        vmap(f, in_axes=(0, 2))(np.zeros((3, 2), np.float32), np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match=r"len\(in_axes\)=3"):
        vmap(f, in_axes=(0, 0, 0))(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="prefix"):
        vmap(lambda p: p["a"], in_axes=({"b": 0},))({"a": np.zeros(3)})
    with pytest.raises(TypeError, match="not an array"):
        vmap(lambda s, x: x)("hello", np.zeros(3))
    assert vmap(lambda s, x: x, in_axes=(None, 0))("hello", np.zeros(3)).shape == (3,)
    with pytest.raises(TypeError, match="in_axes must be an int"):
        vmap(f, in_axes=(0, "a"))
    with pytest.raises(ValueError, match=r"x\[1\]"):
        vmap(lambda x: x[0] + x[1])((np.zeros(3), np.zeros(4)))


def test_tracer_conversion_inside_vmap_raises():
    with pytest.raises(TracerError):
        vmap(lambda a: float(a))(np.zeros(3, np.float32))


# ---------------------------------------------------------------------------------------------
# Nesting and composition with jit
# ---------------------------------------------------------------------------------------------


def _mlp(w, x):
    h = jnp.tanh(lax.dot_general(x, w, (((0,), (0,)), ((), ()))))
    return lax.reduce_sum(jnp.multiply(h, h), None)


def test_nested_vmap():
    w, xs = _f((3, 2)), rng.uniform(-1, 1, (2, B, 3)).astype(np.float32)
    out = vmap(vmap(_mlp, in_axes=(None, 0)), in_axes=(0, 1))(w, xs)
    want = np.array([[_mlp(w[i], xs[j, i]) for j in range(2)] for i in range(B)], np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5)
    # inner maps the leading axis of the per-example value, outer a different one
    x = _f((4, 5))
    out = vmap(vmap(lambda a: lax.reduce_max(a, None), in_axes=1), in_axes=0, out_axes=1)(x)
    np.testing.assert_allclose(out, x.max(axis=1).T)
    # a value closed over from the outer vmap inside the inner one
    y = _f((4,))
    out = vmap(lambda a: vmap(lambda b: a * b)(y[0]))(x[:, 0, 0])
    np.testing.assert_allclose(out, x[:, 0, 0][:, None] * y[0][None, :], rtol=1e-6)


def test_vmap_jit_compositions():
    w, xs = _f((3, 2)), _f((3,))
    want = np.array([_mlp(w[i], xs[i]) for i in range(B)], np.float32)
    f = lambda w, x: _mlp(w, x)
    for g in [vmap(ember.jit(f)), ember.jit(vmap(f)), ember.jit(vmap(ember.jit(f)))]:
        np.testing.assert_allclose(g(w, xs), want, rtol=1e-5)
    inner_unmapped = vmap(vmap(ember.jit(f), in_axes=(None, None), axis_size=2))(w, xs)
    np.testing.assert_allclose(inner_unmapped, np.stack([want, want], 1), rtol=1e-5)
    prog = ember.make_program(vmap(f))(w, xs)
    validate(prog)
    assert "tanh" in str(prog)


def test_jit_of_vmap_caches_and_matches():
    jf = ember.jit(vmap(lambda a: jnp.sin(a) * 2.0, in_axes=1))
    x = _f((2, 4))
    for _ in range(2):
        np.testing.assert_allclose(jf(np.moveaxis(x, 0, 1)), np.sin(x) * 2, rtol=1e-6)
    assert jf.cache_info()["traces"] == 1


def test_vmap_inside_jit_with_closure_over_traced_value():
    @ember.jit
    def g(x, y):
        return vmap(lambda a: a * y)(x)

    x, y = _f((2,)), _f((2,))[0]
    np.testing.assert_allclose(g(x, y), x * y[None], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# batch_program and eval_shape
# ---------------------------------------------------------------------------------------------


def test_batch_program():
    x, y = _f((2, 3)), _f((3,))
    f = lambda a, b: (jnp.add(jnp.sin(a), b), lax.reduce_sum(b, None))
    prog = ember.make_program(f)(x[0], y[0])
    bprog, out_dims = batch_program(prog, [1, None], B)
    validate(bprog)
    assert out_dims == [0, None]
    outs = run_numpy(bprog, [np.asarray(c) for c in bprog.consts], [np.moveaxis(x, 0, 1), y[0]])
    np.testing.assert_allclose(outs[0], np.sin(x) + y[0], rtol=1e-6)
    np.testing.assert_allclose(outs[1], y[0].sum(), rtol=1e-6)
    bprog_neg, _ = batch_program(prog, [-2, None], B, consts=prog.consts)
    outs = run_numpy(bprog_neg, [np.asarray(c) for c in bprog_neg.consts], [np.moveaxis(x, 0, 1), y[0]])
    np.testing.assert_allclose(outs[0], np.sin(x) + y[0], rtol=1e-6)
    with pytest.raises(ValueError, match="in_dims"):
        batch_program(prog, [0], B)
    bprog2, out_dims2 = batch_program(prog, [1, None], B, instantiate=True)
    assert out_dims2 == [0, 0]
    outs = run_numpy(bprog2, [np.asarray(c) for c in bprog2.consts], [np.moveaxis(x, 0, 1), y[0]])
    np.testing.assert_allclose(outs[1], np.full(B, y[0].sum()), rtol=1e-6)


def test_batch_program_under_a_trace_and_with_constants():
    c = np.arange(3, dtype=np.float32)
    prog = ember.make_program(lambda a: jnp.multiply(a, jnp.asarray(c)))(np.zeros(3, np.float32))
    x = _f((3,))

    @ember.jit
    def run(xs):
        bprog, dims = batch_program(prog, [0], B)
        from ember._src.program import eval_program
        return eval_program(bprog, bprog.consts, [xs])[0]

    np.testing.assert_allclose(run(x), x * c, rtol=1e-6)


def test_eval_shape():
    SDS = ember.ShapeDtypeStruct
    def f(a, b):
        return {"s": lax.reduce_sum(jnp.multiply(a, b), (0,)), "c": lax.convert_element_type(a, np.int32)}

    out = ember.eval_shape(f, SDS((3, 4), np.float32), np.ones((3, 4), np.float32))
    assert out == {"s": SDS((4,), np.float32), "c": SDS((3, 4), np.int32)}
    out = ember.eval_shape(lambda a: a * 2.0, 1.0)
    assert out.shape == () and out.dtype == np.float32 and out.weak_type
    out = ember.eval_shape(vmap(lambda a: lax.reduce_sum(a, None)), ember.ShapeDtypeStruct((7, 2), "float64"))
    assert out == ember.ShapeDtypeStruct((7,), np.float64)
    assert "ShapeDtypeStruct(shape=(7,), dtype=float64)" == repr(out)
    with pytest.raises(TypeError, match="not an array"):
        ember.eval_shape(lambda a: a, "nope")


def test_eval_shape_runs_nothing():
    calls = []

    def f(a):
        calls.append(type(a).__name__)
        return jnp.exp(a)

    ember.eval_shape(f, ember.ShapeDtypeStruct((10 ** 6, 1000), np.float32))  # would be 4 GB
    assert calls and calls[0] != "Array"
