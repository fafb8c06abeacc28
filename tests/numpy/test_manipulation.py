"""ember.numpy array manipulation against NumPy, eagerly and under ``ember.jit``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember.errors import ShapeError, TracerError

DTYPES = [np.float32, np.float64, np.int32, np.bool_]
SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3), (2, 3, 4)]


def make(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) > 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def assert_same(got, want, check_dtype=True):
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, check_dtype)
        return
    got_np = np.asarray(got)
    want = np.asarray(want)
    assert got_np.shape == want.shape, (got_np.shape, want.shape)
    if check_dtype:
        assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
    np.testing.assert_array_equal(got_np, want)


def check(np_fn, em_fn, *arrays, check_dtype=True, jit=True):
    """``em_fn`` on ember arrays equals ``np_fn`` on NumPy arrays, eagerly and under jit."""
    want = np_fn(*arrays)
    ems = [jnp.asarray(a) for a in arrays]
    got = em_fn(*ems)
    assert_same(got, want, check_dtype)
    if jit:
        assert_same(ember.jit(em_fn)(*ems), got)
    return got


# ---------------------------------------------------------------------------------------------
# reshape / ravel / transpose family
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape(dtype):
    x = make((2, 3, 4), dtype)
    for shape in [(24,), (4, 6), (-1, 4), (2, -1, 2), (1, 24, 1), -1, 24]:
        check(lambda a: np.reshape(a, shape), lambda a: jnp.reshape(a, shape), x)
    check(lambda a: a.reshape(6, 4), lambda a: a.reshape(6, 4), x)
    check(lambda a: a.reshape((3, 8)), lambda a: a.reshape((3, 8)), x)
    check(lambda a: np.reshape(a, shape=(8, 3)), lambda a: jnp.reshape(a, shape=(8, 3)), x)
    check(lambda a: a.reshape(()), lambda a: a.reshape(()), make((1, 1), dtype))
    check(lambda a: a.reshape(-1, 3), lambda a: a.reshape(-1, 3), make((0, 3), dtype))
    check(lambda a: a.ravel(), lambda a: a.ravel(), x)
    check(np.ravel, jnp.ravel, make((), dtype))
    check(lambda a: a.flatten(), lambda a: a.flatten(), x)


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
    check(np.transpose, jnp.transpose, x)
    check(lambda a: a.T, lambda a: a.T, x)
    if nd >= 2:
        check(lambda a: np.transpose(a, (1, 0, *range(2, nd))), lambda a: jnp.transpose(a, (1, 0, *range(2, nd))), x)
        check(lambda a: a.transpose(-1, *range(nd - 1)), lambda a: a.transpose(-1, *range(nd - 1)), x)
        check(lambda a: np.swapaxes(a, 0, -1), lambda a: jnp.swapaxes(a, 0, -1), x)
        check(lambda a: a.swapaxes(1, 0), lambda a: a.swapaxes(1, 0), x)
        check(lambda a: np.matrix_transpose(a), jnp.matrix_transpose, x)
        check(lambda a: a.mT, lambda a: a.mT, x)
        check(lambda a: np.moveaxis(a, 0, -1), lambda a: jnp.moveaxis(a, 0, -1), x)
        check(lambda a: np.moveaxis(a, [0, 1], [-1, 0]), lambda a: jnp.moveaxis(a, [0, 1], [-1, 0]), x)
        perm = tuple(reversed(range(nd)))
        check(lambda a: np.permute_dims(a, perm), lambda a: jnp.permute_dims(a, perm), x)


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


def test_expand_dims_squeeze():
    x = make((2, 1, 3, 1))
    for axis in [0, -1, 2, (0, 2), (-1, 0), (1, 3, 5)]:
        check(lambda a: np.expand_dims(a, axis), lambda a: jnp.expand_dims(a, axis), x)
    for axis in [None, 1, -1, (1, 3)]:
        check(lambda a: np.squeeze(a, axis), lambda a: jnp.squeeze(a, axis), x)
    check(lambda a: a.squeeze(), lambda a: a.squeeze(), x)
    check(np.squeeze, jnp.squeeze, make(()))
    check(lambda a: np.expand_dims(a, 0), lambda a: jnp.expand_dims(a, 0), make(()))
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
    check(lambda a: np.broadcast_to(a, (2, 3, 4)), lambda a: jnp.broadcast_to(a, (2, 3, 4)), x)
    check(lambda a: np.broadcast_to(a, (3, 1)), lambda a: jnp.broadcast_to(a, (3, 1)), x)
    check(lambda a: np.broadcast_to(a, 4), lambda a: jnp.broadcast_to(a, 4), make(()))
    y, z = make((4,), np.int32), make((2, 1, 1), np.bool_)
    check(lambda *a: list(np.broadcast_arrays(*a)), lambda *a: jnp.broadcast_arrays(*a), x, y, z)
    assert jnp.broadcast_shapes((3, 1), (4,), 2 if False else (1, 1, 1)) == np.broadcast_shapes((3, 1), (4,),
                                                                                                    (1, 1, 1))
    assert jnp.broadcast_shapes(5, (1,)) == (5,)
    with pytest.raises(ShapeError, match=r"cannot broadcast an array of shape \(3, 1\) to the requested shape \(2, 4\)"):
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
    check(lambda *t: np.concatenate(t), lambda *t: jnp.concatenate(t), a, b)
    check(lambda *t: np.concatenate(t, axis=1), lambda *t: jnp.concatenate(t, axis=-1), a, c)
    check(lambda *t: np.concatenate(t, axis=None), lambda *t: jnp.concatenate(t, axis=None), a, b, c)
    check(lambda *t: np.concat(t), lambda *t: jnp.concat(t), a, b)
    check(lambda *t: np.concatenate(t), lambda *t: jnp.concatenate(t), a, make((0, 3), dtype))
    for axis in [0, 1, 2, -1]:
        check(lambda *t: np.stack(t, axis), lambda *t: jnp.stack(t, axis), a, c)
    check(lambda *t: np.stack(t), lambda *t: jnp.stack(t), make((), dtype), make((), dtype, 1))
    check(lambda *t: np.vstack(t), lambda *t: jnp.vstack(t), a, b)
    check(lambda *t: np.vstack(t), lambda *t: jnp.vstack(t), make((3,), dtype), make((3,), dtype, 1))
    check(lambda *t: np.hstack(t), lambda *t: jnp.hstack(t), a, c)
    check(lambda *t: np.hstack(t), lambda *t: jnp.hstack(t), make((3,), dtype), make((2,), dtype, 1))
    check(lambda *t: np.dstack(t), lambda *t: jnp.dstack(t), a, c)
    check(lambda *t: np.dstack(t), lambda *t: jnp.dstack(t), make((3,), dtype), make((3,), dtype, 1))
    check(lambda *t: np.column_stack(t), lambda *t: jnp.column_stack(t), make((3,), dtype), make((3, 2), dtype))


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
    assert_same(jnp.concatenate([[1, 2], [3]]), np.array([1, 2, 3], np.int32))
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
def test_split_family(dtype):
    x = make((6, 4, 2), dtype)
    for ios in [2, 3, [1, 4], [2, -1], [0, 10], [3, 1], np.array([2])]:
        check(lambda a: np.split(a, ios), lambda a: jnp.split(a, ios), x)
    check(lambda a: np.split(a, 2, axis=1), lambda a: jnp.split(a, 2, axis=1), x)
    check(lambda a: np.split(a, 1, axis=-1), lambda a: jnp.split(a, 1, axis=-1), x)
    for s in [4, 5, 7]:
        check(lambda a: np.array_split(a, s), lambda a: jnp.array_split(a, s), x)
    check(lambda a: np.hsplit(a, 2), lambda a: jnp.hsplit(a, 2), x)
    check(lambda a: np.hsplit(a, 3), lambda a: jnp.hsplit(a, 3), make((6,), dtype))
    check(lambda a: np.vsplit(a, [1]), lambda a: jnp.vsplit(a, [1]), x)
    check(lambda a: np.dsplit(a, 2), lambda a: jnp.dsplit(a, 2), x)
    check(lambda a: list(np.unstack(a)), lambda a: jnp.unstack(a), x)
    check(lambda a: list(np.unstack(a, axis=-1)), lambda a: jnp.unstack(a, axis=-1), x)
    check(lambda a: np.split(a, 2), lambda a: jnp.split(a, 2), make((0, 3), dtype))


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
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_tile_repeat(shape, dtype):
    x = make(shape, dtype)
    for reps in [2, (2, 1), (1, 3, 2), 0, ()]:
        check(lambda a: np.tile(a, reps), lambda a: jnp.tile(a, reps), x)
    for axis in [None] + list(range(-len(shape), len(shape))):
        check(lambda a: np.repeat(a, 3, axis), lambda a: jnp.repeat(a, 3, axis), x)
        check(lambda a: np.repeat(a, 0, axis), lambda a: jnp.repeat(a, 0, axis), x)
        n = x.size if axis is None else shape[axis]
        reps = np.arange(n) % 3
        check(lambda a: np.repeat(a, reps, axis), lambda a: jnp.repeat(a, reps, axis), x)
    check(lambda a: a.repeat(2), lambda a: a.repeat(2), x)


def test_repeat_total_length_and_traced():
    x = np.arange(4, dtype=np.float32) + 1
    r = np.array([2, 0, 1, 3])
    full = np.repeat(x, r)
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=6), full)
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=4), full[:4])
    assert_same(jnp.repeat(jnp.asarray(x), r, total_repeat_length=8), np.concatenate([full, [4, 4]]).astype(np.float32))
    f = ember.jit(lambda a, rr: jnp.repeat(a, rr, total_repeat_length=8))
    assert_same(f(jnp.asarray(x), r), np.concatenate([full, [4, 4]]).astype(np.float32))
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
    check(np.flip, jnp.flip, x)
    check(lambda a: np.roll(a, 2), lambda a: jnp.roll(a, 2), x)
    check(lambda a: np.roll(a, -7), lambda a: jnp.roll(a, -7), x)
    for ax in range(-nd, nd):
        check(lambda a: np.flip(a, ax), lambda a: jnp.flip(a, ax), x)
        check(lambda a: np.roll(a, 3, ax), lambda a: jnp.roll(a, 3, ax), x)
    if nd >= 1:
        check(np.flipud, jnp.flipud, x)
    if nd >= 2:
        check(np.fliplr, jnp.fliplr, x)
        check(lambda a: np.flip(a, (0, -1)), lambda a: jnp.flip(a, (0, -1)), x)
        check(lambda a: np.roll(a, (1, -2), (0, 1)), lambda a: jnp.roll(a, (1, -2), (0, 1)), x)
        check(lambda a: np.roll(a, 1, (0, 1)), lambda a: jnp.roll(a, 1, (0, 1)), x)
        check(lambda a: np.roll(a, (1, 2), (0, 0)), lambda a: jnp.roll(a, (1, 2), (0, 0)), x)
        for k in range(-1, 5):
            check(lambda a: np.rot90(a, k), lambda a: jnp.rot90(a, k), x)
            check(lambda a: np.rot90(a, k, (-1, 0)), lambda a: jnp.rot90(a, k, (-1, 0)), x)


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
def test_pad_modes(mode, dtype):
    x = make((3, 4), dtype)
    for pw in PAD_WIDTHS:
        check(lambda a: np.pad(a, pw, mode=mode), lambda a: jnp.pad(a, pw, mode=mode), x)
    for shape in [(1,), (2,), (5,), (1, 1)]:
        y = make(shape, dtype)
        check(lambda a: np.pad(a, 6, mode=mode), lambda a: jnp.pad(a, 6, mode=mode), y)
    check(lambda a: np.pad(a, 1, mode=mode), lambda a: jnp.pad(a, 1, mode=mode), make((), dtype))


def test_pad_constant_values():
    x = make((3, 4))
    check(lambda a: np.pad(a, 2, constant_values=7), lambda a: jnp.pad(a, 2, constant_values=7), x)
    cv = ((1, 2), (3, 4))
    check(lambda a: np.pad(a, (1, 2), constant_values=cv), lambda a: jnp.pad(a, (1, 2), constant_values=cv), x)
    check(lambda a: np.pad(a, 1, constant_values=(5, 6)), lambda a: jnp.pad(a, 1, constant_values=(5, 6)), x)
    xi = np.arange(4, dtype=np.int32)
    check(lambda a: np.pad(a, 1, constant_values=2.7), lambda a: jnp.pad(a, 1, constant_values=2.7), xi)
    f = ember.jit(lambda a, v: jnp.pad(a, ((1, 0), (0, 2)), constant_values=v))
    assert_same(f(jnp.asarray(x), np.float32(-3)), np.pad(x, ((1, 0), (0, 2)), constant_values=-3))
    check(lambda a: np.pad(a, 2), lambda a: jnp.pad(a, 2), make((0, 2)))


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
def test_tril_triu_diagonal_trace(shape, dtype):
    x = make(shape, dtype)
    for k in [-2, -1, 0, 1, 3]:
        check(lambda a: np.tril(a, k), lambda a: jnp.tril(a, k), x)
        check(lambda a: np.triu(a, k), lambda a: jnp.triu(a, k), x)
        check(lambda a: np.diagonal(a, k), lambda a: jnp.diagonal(a, k), x)
        check(lambda a: np.diagonal(a, k, -1, 0), lambda a: jnp.diagonal(a, k, -1, 0), x)
        check(lambda a: np.trace(a, k), lambda a: jnp.trace(a, k), x, check_dtype=False)
    check(lambda a: a.diagonal(1), lambda a: a.diagonal(1), x)
    check(lambda a: a.trace(), lambda a: a.trace(), x, check_dtype=False)


def test_trace_dtypes():
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.int8))).dtype == np.int32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), bool))).dtype == np.int32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.float32))).dtype == np.float32
    assert jnp.trace(jnp.asarray(np.ones((3, 3), np.float32)), dtype=np.float64).dtype == np.float64


@pytest.mark.parametrize("dtype", DTYPES)
def test_diag_tri(dtype):
    for shape in [(4,), (0,), (3, 5), (4, 2)]:
        for k in [-3, -1, 0, 2]:
            check(lambda a: np.diag(a, k), lambda a: jnp.diag(a, k), make(shape, dtype))
    for n, m, k in [(3, None, 0), (3, 5, 1), (4, 2, -1), (0, 3, 0)]:
        assert_same(jnp.tri(n, m, k), np.tri(n, m, k, dtype=np.float32))
        assert_same(jnp.tri(n, m, k, dtype=dtype), np.tri(n, m, k, dtype=dtype))


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
def test_atleast(shape):
    x = make(shape)
    for np_f, em_f in [(np.atleast_1d, jnp.atleast_1d), (np.atleast_2d, jnp.atleast_2d),
                       (np.atleast_3d, jnp.atleast_3d)]:
        check(np_f, em_f, x)
        check(lambda a, b: list(np_f(a, b)), lambda a, b: em_f(a, b), x, make((2,)))


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES + [np.int8, np.uint8, np.complex64])
def test_astype(src, dst):
    x = make((2, 3), src) * (1 if src == np.bool_ else 3)
    if np.dtype(dst).kind in "iu" and np.dtype(src).kind == "f":
        x = np.trunc(x).astype(src)  # values that convert exactly
    if np.dtype(dst).kind == "u" and np.dtype(src).kind != "b":
        x = np.abs(x)  # negative values to unsigned are implementation-defined
    check(lambda a: a.astype(dst), lambda a: a.astype(dst), x)
    check(lambda a: a.astype(dst), lambda a: jnp.astype(a, dst), x)
    y = jnp.astype(2.5, np.float64)
    assert y.dtype == np.float64 and not y.weak_type


def test_copy_and_queries():
    x = make((2, 3))
    check(np.copy, jnp.copy, x)
    check(lambda a: a.copy(), lambda a: a.copy(), x)
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
    src = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda v: v % max(len(shape), 1),
                             max_size=len(shape)))
    dst = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), unique_by=lambda v: v % max(len(shape), 1),
                             min_size=len(src), max_size=len(src)))
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
