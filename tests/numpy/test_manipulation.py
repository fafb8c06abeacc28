"""ember.numpy array manipulation against NumPy, eagerly and under ``ember.jit``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember.errors import ShapeError, TracerError
from tests.numpy.helpers import assert_same, make

DTYPES = [np.float32, np.float64, np.int32, np.bool_]
SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3), (2, 3, 4)]




def check(fn, *arrays, check_dtype=True, jit=True):
    """``fn(jnp, *ember_arrays)`` equals ``fn(np, *arrays)``, eagerly and under jit."""
    want = fn(np, *arrays)
    if isinstance(want, tuple):
        want = list(want)
    ems = [jnp.asarray(a) for a in arrays]
    got = fn(jnp, *ems)
    assert_same(got, want, check_dtype)
    if jit:
        assert_same(ember.jit(lambda *a: fn(jnp, *a))(*ems), got)
    return got


# ---------------------------------------------------------------------------------------------
# reshape / ravel / transpose family
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(24,), (4, 6), (-1, 4), (2, -1, 2), (1, 24, 1), -1, 24])
def test_reshape(dtype, shape):
    check(lambda m, a: m.reshape(a, shape), make((2, 3, 4), dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape_methods(dtype):
    x = make((2, 3, 4), dtype)
    check(lambda m, a: a.reshape(6, 4), x)
    check(lambda m, a: a.reshape((3, 8)), x)
    check(lambda m, a: m.reshape(a, shape=(8, 3)), x)
    check(lambda m, a: a.reshape(()), make((1, 1), dtype))
    check(lambda m, a: a.reshape(-1, 3), make((0, 3), dtype))
    check(lambda m, a: a.ravel(), x)
    check(lambda m, a: m.ravel(a), make((), dtype))
    check(lambda m, a: a.flatten(), x)


def test_reshape_errors():
    x = jnp.asarray(make((2, 3)))
    with pytest.raises(ShapeError, match="reshape"):
        jnp.reshape(x, (4, 2))
    with pytest.raises(ShapeError, match="only one dimension can be -1"):
        jnp.reshape(x, (-1, -1))
    with pytest.raises(NotImplementedError, match="order='F'"):
        jnp.reshape(x, (3, 2), order="F")
    with pytest.raises(ValueError, match="order"):
        jnp.reshape(x, (3, 2), order="Q")
    with pytest.raises(TracerError):
        ember.jit(lambda a, n: jnp.reshape(a, (n, 2)))(x, 3)


@pytest.mark.parametrize("shape", [(), (4,), (2, 3), (2, 3, 4), (2, 0, 3)])
def test_transpose_family(shape):
    x = make(shape)
    nd = len(shape)
    check(lambda m, a: m.transpose(a), x)
    check(lambda m, a: a.T, x)
    if nd >= 2:
        perm = (1, 0, *range(2, nd))
        check(lambda m, a: m.transpose(a, perm), x)
        check(lambda m, a: a.transpose(-1, *range(nd - 1)), x)
        check(lambda m, a: m.swapaxes(a, 0, -1), x)
        check(lambda m, a: a.swapaxes(1, 0), x)
        check(lambda m, a: m.matrix_transpose(a), x)
        check(lambda m, a: a.mT, x)
        check(lambda m, a: m.moveaxis(a, 0, -1), x)
        check(lambda m, a: m.moveaxis(a, [0, 1], [-1, 0]), x)
        check(lambda m, a: m.permute_dims(a, tuple(reversed(range(nd)))), x)


def test_transpose_errors():
    x = jnp.asarray(make((2, 3, 4)))
    with pytest.raises(ShapeError, match="don't match an array of dimension 3"):
        jnp.transpose(x, (0, 1))
    with pytest.raises(ShapeError, match="repeated"):
        jnp.transpose(x, (0, 1, 1))
    with pytest.raises(ShapeError, match="axis 3 is out of bounds"):
        jnp.transpose(x, (0, 1, 3))
    with pytest.raises(ShapeError, match="axis1 5 is out of bounds"):
        jnp.swapaxes(x, 5, 0)
    with pytest.raises(ShapeError, match="same number of elements"):
        jnp.moveaxis(x, (0, 1), (2,))
    with pytest.raises(ShapeError, match="at least 2 dimensions"):
        jnp.matrix_transpose(jnp.asarray(make((3,))))


@pytest.mark.parametrize("axis", [0, -1, 2, (0, 2), (-1, 0), (1, 3, 5)])
def test_expand_dims(axis):
    check(lambda m, a: m.expand_dims(a, axis), make((2, 1, 3, 1)))


@pytest.mark.parametrize("axis", [None, 1, -1, (1, 3)])
def test_squeeze(axis):
    check(lambda m, a: m.squeeze(a, axis), make((2, 1, 3, 1)))


def test_expand_dims_squeeze_misc():
    x = make((2, 1, 3, 1))
    check(lambda m, a: a.squeeze(), x)
    check(lambda m, a: m.squeeze(a), make(()))
    check(lambda m, a: m.expand_dims(a, 0), make(()))
    with pytest.raises(ShapeError, match="cannot squeeze axis 2 of size 3"):
        jnp.squeeze(jnp.asarray(x), 2)
    with pytest.raises(ShapeError, match="axis 7 is out of bounds"):
        jnp.squeeze(jnp.asarray(x), 7)
    with pytest.raises(ShapeError, match="repeated"):
        jnp.expand_dims(jnp.asarray(x), (0, 0))
    with pytest.raises(ShapeError, match="out of bounds"):
        jnp.expand_dims(jnp.asarray(x), 6)


def test_broadcasting_functions():
    x = make((3, 1))
    check(lambda m, a: m.broadcast_to(a, (2, 3, 4)), x)
    check(lambda m, a: m.broadcast_to(a, (3, 1)), x)
    check(lambda m, a: m.broadcast_to(a, 4), make(()))
    y, z = make((4,), np.int32), make((2, 1, 1), np.bool_)
    check(lambda m, *a: list(m.broadcast_arrays(*a)), x, y, z)
    assert jnp.broadcast_shapes((3, 1), (4,), (1, 1, 1)) == np.broadcast_shapes((3, 1), (4,), (1, 1, 1))
    assert jnp.broadcast_shapes(5, (1,)) == (5,)
    with pytest.raises(ShapeError, match=r"an array of shape \(3, 1\) to the requested shape \(2, 4\)"):
        jnp.broadcast_to(jnp.asarray(x), (2, 4))
    with pytest.raises(ShapeError, match="broadcast"):
        jnp.broadcast_to(jnp.asarray(x), (1,))
    with pytest.raises(ShapeError, match="broadcast_shapes"):
        jnp.broadcast_shapes((3,), (4,))


# ---------------------------------------------------------------------------------------------
# joining and splitting
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenate_stack(dtype):
    a, b, c = make((2, 3), dtype, 0), make((4, 3), dtype, 1), make((2, 3), dtype, 2)
    v, w = make((3,), dtype), make((3,), dtype, 1)
    check(lambda m, *t: m.concatenate(t), a, b)
    check(lambda m, *t: m.concatenate(t, axis=-1), a, c)
    check(lambda m, *t: m.concatenate(t, axis=None), a, b, c)
    check(lambda m, *t: m.concat(t), a, b)
    check(lambda m, *t: m.concatenate(t), a, make((0, 3), dtype))
    check(lambda m, *t: m.stack(t), make((), dtype), make((), dtype, 1))
    check(lambda m, *t: m.vstack(t), a, b)
    check(lambda m, *t: m.vstack(t), v, w)
    check(lambda m, *t: m.hstack(t), a, c)
    check(lambda m, *t: m.hstack(t), v, make((2,), dtype, 1))
    check(lambda m, *t: m.dstack(t), a, c)
    check(lambda m, *t: m.dstack(t), v, w)
    check(lambda m, *t: m.column_stack(t), v, make((3, 2), dtype))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack_axes(axis):
    check(lambda m, *t: m.stack(t, axis), make((2, 3)), make((2, 3), seed=1), make((2, 3), seed=2))


def test_concatenate_promotion_and_errors():
    a = np.arange(3, dtype=np.int32)
    b = np.arange(2, dtype=np.float32)
    got = jnp.concatenate([jnp.asarray(a), jnp.asarray(b)])
    assert got.dtype == np.float32  # JAX lattice: int32 + float32 -> float32
    np.testing.assert_array_equal(np.asarray(got), np.concatenate([a, b]).astype(np.float32))
    got = jnp.concatenate([jnp.asarray(a), jnp.asarray(a)], dtype=np.float64)
    assert got.dtype == np.float64
    got = jnp.stack([jnp.asarray(np.float16(1)), jnp.asarray(np.float32(2))])
    assert got.dtype == np.float32
    assert_same(jnp.concatenate([jnp.asarray([1, 2]), jnp.asarray([3])]), np.array([1, 2, 3], np.int32))
    with pytest.raises(ShapeError, match="zero-dimensional"):
        jnp.concatenate([jnp.asarray(1.0), jnp.asarray(2.0)])
    with pytest.raises(ShapeError, match="array at index 1 has 1"):
        jnp.concatenate([jnp.asarray(make((2, 2))), jnp.asarray(make((2,)))])
    with pytest.raises(ShapeError, match="axis 1"):
        jnp.concatenate([jnp.asarray(make((2, 2))), jnp.asarray(make((2, 3)))])
    with pytest.raises(ShapeError, match="at least one array"):
        jnp.concatenate([])
    with pytest.raises(ShapeError, match=r"array at index 1 has \(3,\)"):
        jnp.stack([jnp.asarray(make((2,))), jnp.asarray(make((3,)))])
    with pytest.raises(ShapeError, match="axis 3 is out of bounds"):
        jnp.stack([jnp.asarray(make((2,))), jnp.asarray(make((2,)))], axis=3)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("ios", [2, 3, [1, 4], [2, -1], [0, 10], [3, 1], np.array([2])],
                         ids=["2", "3", "1,4", "2,-1", "0,10", "3,1", "arr"])
def test_split(dtype, ios):
    check(lambda m, a: m.split(a, ios), make((6, 4, 2), dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_split_family(dtype):
    x = make((6, 4, 2), dtype)
    check(lambda m, a: m.split(a, 2, axis=1), x)
    check(lambda m, a: m.split(a, 1, axis=-1), x)
    check(lambda m, a: m.array_split(a, 4), x)
    check(lambda m, a: m.array_split(a, 7), x)
    check(lambda m, a: m.hsplit(a, 2), x)
    check(lambda m, a: m.hsplit(a, 3), make((6,), dtype))
    check(lambda m, a: m.vsplit(a, [1]), x)
    check(lambda m, a: m.dsplit(a, 2), x)
    check(lambda m, a: m.unstack(a), x)
    check(lambda m, a: m.unstack(a, axis=-1), x)
    check(lambda m, a: m.split(a, 2), make((0, 3), dtype))


def test_split_errors():
    x = jnp.asarray(make((7, 2)))
    with pytest.raises(ShapeError, match="does not result in an equal division: axis 0 of size 7 into 3"):
        jnp.split(x, 3)
    with pytest.raises(ShapeError, match="larger than 0"):
        jnp.split(x, 0)
    with pytest.raises(ShapeError, match="axis 2 is out of bounds"):
        jnp.split(x, 1, axis=2)
    with pytest.raises(ShapeError, match="vsplit"):
        jnp.vsplit(jnp.asarray(make((4,))), 2)
    with pytest.raises(ShapeError, match="hsplit"):
        jnp.hsplit(jnp.asarray(1.0), 2)


# ---------------------------------------------------------------------------------------------
# tile / repeat / flip / roll / rot90
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("reps", [2, (2, 1), (1, 3, 2), 0, ()])
def test_tile(shape, reps):
    check(lambda m, a: m.tile(a, reps), make(shape, np.int32))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_repeat(shape, dtype):
    x = make(shape, dtype)
    for axis in [None, *range(-len(shape), len(shape))]:
        n = x.size if axis is None else shape[axis]
        check(lambda m, a, ax=axis: m.repeat(a, 3, ax), x)
        check(lambda m, a, ax=axis: m.repeat(a, 0, ax), x)
        reps = np.arange(n) % 3
        check(lambda m, a, ax=axis, r=reps: m.repeat(a, r, ax), x)
    check(lambda m, a: a.repeat(2), x)


def test_repeat_total_length_and_traced():
    x = np.arange(4, dtype=np.float32) + 1
    r = np.array([2, 0, 1, 3])
    full = np.repeat(x, r)
    padded = np.concatenate([full, [4, 4]]).astype(np.float32)
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=6), full)
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=4), full[:4])
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=8), padded)
    f = ember.jit(lambda a, rr: jnp.repeat(a, rr, total_repeat_length=8))
    assert_same(f(jnp.asarray(x), r), padded)
    g = ember.jit(lambda a, rr: jnp.repeat(a, rr, total_repeat_length=5))
    assert_same(g(jnp.asarray(x), r), full[:5])
    assert_same(jnp.repeat(jnp.asarray(x), 2, total_repeat_length=8), np.repeat(x, 2))
    with pytest.raises(TracerError, match="total_repeat_length"):
        ember.jit(lambda a, rr: jnp.repeat(a, rr))(jnp.asarray(x), r)
    with pytest.raises(ShapeError, match="negative"):
        jnp.repeat(jnp.asarray(x), -1)
    with pytest.raises(ShapeError, match="axis 0 of size 4"):
        jnp.repeat(jnp.asarray(x), np.array([1, 2]))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll(shape, dtype):
    x = make(shape, dtype)
    nd = len(shape)
    check(lambda m, a: m.flip(a), x)
    check(lambda m, a: m.roll(a, 2), x)
    check(lambda m, a: m.roll(a, -7), x)
    for ax in range(-nd, nd):
        check(lambda m, a, ax=ax: m.flip(a, ax), x)
        check(lambda m, a, ax=ax: m.roll(a, 3, ax), x)
    if nd >= 1:
        check(lambda m, a: m.flipud(a), x)
    if nd >= 2:
        check(lambda m, a: m.fliplr(a), x)
        check(lambda m, a: m.flip(a, (0, -1)), x)
        check(lambda m, a: m.roll(a, (1, -2), (0, 1)), x)
        check(lambda m, a: m.roll(a, 1, (0, 1)), x)
        check(lambda m, a: m.roll(a, (1, 2), (0, 0)), x)
        for k in range(-1, 5):
            check(lambda m, a, k=k: m.rot90(a, k), x)
            check(lambda m, a, k=k: m.rot90(a, k, (-1, 0)), x)


def test_roll_traced_shift_and_errors():
    x = make((3, 5))
    f = ember.jit(lambda a, s: jnp.roll(a, s, 1))
    for s in [-6, -1, 0, 2, 5, 12]:
        assert_same(f(jnp.asarray(x), s), np.roll(x, s, 1))
    g = ember.jit(lambda a, s: jnp.roll(a, s))
    assert_same(g(jnp.asarray(x), 4), np.roll(x, 4))
    h = ember.jit(lambda a, s: jnp.roll(a, s, (0, 1)))
    assert_same(h(jnp.asarray(x), np.array([1, -2])), np.roll(x, (1, -2), (0, 1)))
    with pytest.raises(ShapeError, match="do not broadcast"):
        jnp.roll(jnp.asarray(x), (1, 2, 3), (0, 1))
    with pytest.raises(ShapeError, match="fliplr"):
        jnp.fliplr(jnp.asarray(make((3,))))
    with pytest.raises(ShapeError, match="flipud"):
        jnp.flipud(jnp.asarray(1.0))
    with pytest.raises(ShapeError, match="rot90: axes must be different"):
        jnp.rot90(jnp.asarray(x), 1, (1, 1))
    with pytest.raises(ShapeError, match="axis 2 is out of bounds"):
        jnp.flip(jnp.asarray(x), 2)


# ---------------------------------------------------------------------------------------------
# pad
# ---------------------------------------------------------------------------------------------

PAD_WIDTHS = [0, 2, (1, 3), ((1, 0),), ((0, 2), (3, 1)), [[4, 0], [1, 7]], ((9, 8), (0, 0))]


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("pw", PAD_WIDTHS, ids=[str(p) for p in PAD_WIDTHS])
def test_pad_modes(mode, dtype, pw):
    check(lambda m, a: m.pad(a, pw, mode=mode), make((3, 4), dtype))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("shape", [(), (1,), (2,), (5,), (1, 1)])
def test_pad_small_axes(mode, shape):
    check(lambda m, a: m.pad(a, 6, mode=mode), make(shape, np.int32))


def test_pad_constant_values():
    x = make((3, 4))
    check(lambda m, a: m.pad(a, 2, constant_values=7), x)
    check(lambda m, a: m.pad(a, (1, 2), constant_values=((1, 2), (3, 4))), x)
    check(lambda m, a: m.pad(a, 1, constant_values=(5, 6)), x)
    check(lambda m, a: m.pad(a, 1, constant_values=2.7), np.arange(4, dtype=np.int32))
    f = ember.jit(lambda a, v: jnp.pad(a, ((1, 0), (0, 2)), constant_values=v))
    assert_same(f(jnp.asarray(x), np.float32(-3)), np.pad(x, ((1, 0), (0, 2)), constant_values=-3))
    check(lambda m, a: m.pad(a, 2), make((0, 2)))


def test_pad_lowers_to_movement_ops():
    names = [e.prim.name for e in ember.make_program(lambda a: jnp.pad(a, (3, 2), mode="reflect"))(
        jnp.asarray(make((5, 4)))).eqns]
    assert "take" not in names and set(names) <= {"slice", "rev", "concatenate", "broadcast_in_dim"}, names


def test_pad_errors():
    x = jnp.asarray(make((3, 4)))
    with pytest.raises(ShapeError, match="non-negative"):
        jnp.pad(x, -1)
    with pytest.raises(ShapeError, match=r"pad_width of shape \(3, 2\) cannot be broadcast to \(2, 2\)"):
        jnp.pad(x, [(1, 1)] * 3)
    with pytest.raises(TypeError, match="integral"):
        jnp.pad(x, 1.5)
    with pytest.raises(ShapeError, match="empty axis 0"):
        jnp.pad(jnp.asarray(make((0, 3))), 1, mode="edge")
    with pytest.raises(NotImplementedError, match="mean"):
        jnp.pad(x, 1, mode="mean")
    with pytest.raises(ValueError, match="unknown mode"):
        jnp.pad(x, 1, mode="nope")
    with pytest.raises(ValueError, match="unsupported keyword"):
        jnp.pad(x, 1, mode="edge", constant_values=1)


# ---------------------------------------------------------------------------------------------
# triangles, diagonals, trace
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 3), (2, 4), (5, 2), (2, 3, 4), (0, 3)])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [-2, 0, 1, 3])
def test_tril_triu_diagonal_trace(shape, dtype, k):
    x = make(shape, dtype)
    check(lambda m, a: m.tril(a, k), x)
    check(lambda m, a: m.triu(a, k), x)
    check(lambda m, a: m.diagonal(a, k), x)
    check(lambda m, a: m.diagonal(a, k, -1, 0), x)
    check(lambda m, a: m.trace(a, k), x, check_dtype=False)
    check(lambda m, a: a.diagonal(k), x)
    check(lambda m, a: a.trace(k), x, check_dtype=False)


def test_trace_dtypes():
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.int8))).dtype == np.int32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), bool))).dtype == np.int32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.float32))).dtype == np.float32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.float32)), dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4,), (0,), (3, 5), (4, 2)])
@pytest.mark.parametrize("k", [-3, -1, 0, 2])
def test_diag(dtype, shape, k):
    check(lambda m, a: m.diag(a, k), make(shape, dtype))


@pytest.mark.parametrize("dtype", [None, np.int32, np.bool_])
def test_tri(dtype):
    for n, m, k in [(3, None, 0), (3, 5, 1), (4, 2, -1), (0, 3, 0)]:
        assert_same(jnp.tri(n, m, k, dtype=dtype), np.tri(n, m, k, dtype=dtype or np.float32))


def test_triangle_errors():
    with pytest.raises(ShapeError, match="tril: input must be at least 2-d"):
        jnp.tril(jnp.asarray(make((3,))))
    with pytest.raises(ShapeError, match="diagonal: axis1 and axis2 cannot be the same"):
        jnp.diagonal(jnp.asarray(make((3, 3))), 0, 1, -1)
    with pytest.raises(ShapeError, match="diag: input must be 1-d or 2-d"):
        jnp.diag(jnp.asarray(make((2, 2, 2))))
    with pytest.raises(ShapeError, match="diagonal axis2 2 is out of bounds"):
        jnp.diagonal(jnp.asarray(make((3, 3))), 0, 0, 2)


# ---------------------------------------------------------------------------------------------
# atleast_*, astype, copy, ndim/shape/size
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (3,), (2, 3), (2, 3, 4), (1, 2, 3, 4)])
@pytest.mark.parametrize("name", ["atleast_1d", "atleast_2d", "atleast_3d"])
def test_atleast(shape, name):
    x = make(shape)
    check(lambda m, a: getattr(m, name)(a), x)
    check(lambda m, a, b: list(getattr(m, name)(a, b)), x, make((2,)))


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES + [np.int8, np.uint8, np.complex64])
def test_astype(src, dst):
    x = make((2, 3), src) * (1 if src == np.bool_ else 3)
    if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
        x = np.trunc(x).astype(src)  # values that convert exactly
    if np.dtype(dst).kind == "u" and np.dtype(src).kind != "b":
        x = np.abs(x)  # negative values to unsigned are implementation-defined
    check(lambda m, a: a.astype(dst), x)
    check(lambda m, a: m.astype(a, dst), x)
    y = jnp.astype(2.5, np.float64)
    assert y.dtype == np.float64 and not y.weak_type


def test_copy_and_queries():
    x = make((2, 3))
    check(lambda m, a: m.copy(a), x)
    check(lambda m, a: a.copy(), x)
    ex = jnp.asarray(x)
    assert jnp.ndim(ex) == 2 and jnp.shape(ex) == (2, 3) and jnp.size(ex) == 6 and jnp.size(ex, -1) == 3
    assert jnp.ndim([[1, 2]]) == 2 and jnp.shape(3.0) == () and jnp.size([1, 2, 3]) == 3
    seen = {}

    def f(a):
        seen.update(ndim=jnp.ndim(a), shape=jnp.shape(a), size=jnp.size(a, 0))
        return a

    ember.jit(f)(ex)
    assert seen == {"ndim": 2, "shape": (2, 3), "size": 2}


# ---------------------------------------------------------------------------------------------
# property tests
# ---------------------------------------------------------------------------------------------

small_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def _axes(nd, data, size=None):
    return data.draw(st.lists(st.integers(-nd, nd - 1), unique_by=lambda v: v % nd,
                              min_size=size or 0, max_size=nd if size is None else size))


@settings(max_examples=60, deadline=None)
@given(small_shapes, st.data())
def test_reshape_transpose_property(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    perm = data.draw(st.permutations(range(len(shape))))
    assert_same(jnp.transpose(jnp.asarray(x), perm), np.transpose(x, perm))
    new = data.draw(st.permutations(shape))
    if new and data.draw(st.booleans()) and min(new) > 0:
        new = list(new)
        new[data.draw(st.integers(0, len(new) - 1))] = -1
    assert_same(jnp.reshape(jnp.asarray(x), tuple(new)), np.reshape(x, tuple(new)))
    if not shape:
        return
    src = _axes(len(shape), data)
    dst = _axes(len(shape), data, len(src))
    assert_same(jnp.moveaxis(jnp.asarray(x), src, dst), np.moveaxis(x, src, dst))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple), st.data())
def test_pad_roll_property(shape, data):
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    pw = [tuple(data.draw(st.lists(st.integers(0, 9), min_size=2, max_size=2))) for _ in shape]
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect", "symmetric", "wrap"]))
    assert_same(jnp.pad(jnp.asarray(x), pw, mode=mode), np.pad(x, pw, mode=mode))
    shift = data.draw(st.integers(-20, 20))
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    assert_same(jnp.roll(jnp.asarray(x), shift, axis), np.roll(x, shift, axis))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=4), st.data())
def test_concatenate_split_property(parts, data):
    arrays = [np.arange(n * m, dtype=np.float32).reshape(n, m) + 100 * i for i, (n, m) in enumerate(parts)]
    axis = data.draw(st.sampled_from([0, 1, -1]))
    if axis == 0:
        arrays = [a[:, :1] for a in arrays]
    else:
        arrays = [a[:1] if a.shape[0] else np.zeros((1, a.shape[1]), np.float32) for a in arrays]
    got = jnp.concatenate([jnp.asarray(a) for a in arrays], axis=axis)
    want = np.concatenate(arrays, axis=axis)
    assert_same(got, want)
    cuts = sorted(data.draw(st.lists(st.integers(0, want.shape[axis]), max_size=3)))
    assert_same(jnp.split(got, cuts, axis=axis), np.split(want, cuts, axis=axis))


# ---------------------------------------------------------------------------------------------
# transformations
# ---------------------------------------------------------------------------------------------


def test_grad_and_vmap_through_manipulation():
    x = make((3, 4))
    g = ember.grad(lambda a: jnp.sum(jnp.pad(a, 2, mode="reflect")))(jnp.asarray(x))
    want = np.outer([2, 3, 2], [1, 3, 3, 1]).astype(np.float32)  # how often each element is copied
    assert_same(g, want)
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = ember.grad(lambda a: jnp.sum(jnp.transpose(jnp.roll(a, 1, 1)) * w))(jnp.asarray(x))
    assert_same(g, np.roll(w.T, -1, 1))
    got = ember.vmap(lambda a: jnp.diag(a))(jnp.asarray(x))
    assert_same(got, np.stack([np.diag(r) for r in x]))
    got = ember.vmap(lambda s: jnp.roll(jnp.asarray(x[0]), s))(np.array([0, 1, 2], np.int32))
    assert_same(got, np.stack([np.roll(x[0], s) for s in range(3)]))
    got = ember.vmap(lambda a: jnp.concatenate([a, a[::-1]]), in_axes=1)(jnp.asarray(x))
    assert_same(got, np.stack([np.concatenate([c, c[::-1]]) for c in x.T]))
