"""ember.numpy indexing: ``x[idx]``, ``x.at[idx]``, ``take``, ``take_along_axis`` against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
import ember.numpy as jnp
from ember.errors import DTypeError, ShapeError, TracerError
from tests.numpy.helpers import assert_same, make

DTYPES = [np.float32, np.float64, np.int32, np.bool_]




def prim_names(fn, *args):
    return [e.prim.name for e in ember.make_program(fn)(*args).eqns]


# ---------------------------------------------------------------------------------------------
# getitem: basic indexing
# ---------------------------------------------------------------------------------------------

BASIC = [
    np.s_[0], np.s_[-1], np.s_[1, 2], np.s_[-2, :, -1], np.s_[:], np.s_[1:3], np.s_[::2], np.s_[::-1],
    np.s_[3:0:-2], np.s_[-1:-5:-1], np.s_[..., 1], np.s_[None], np.s_[None, 1, None], np.s_[..., None],
    np.s_[1, ..., 2], np.s_[:, None, ::-2], np.s_[10:], np.s_[:, 7:2], np.s_[::5, ::-3, 1:], np.s_[()],
    np.s_[...], np.s_[np.int64(1)], np.s_[:, np.int32(-2)],
]


@pytest.mark.parametrize("idx", BASIC, ids=[repr(i) for i in BASIC])
@pytest.mark.parametrize("dtype", DTYPES)
def test_basic_matches_numpy(idx, dtype):
    x = make((4, 5, 3), dtype)
    assert_same(jnp.asarray(x)[idx], x[idx])


@pytest.mark.parametrize("idx", BASIC[:12], ids=[repr(i) for i in BASIC[:12]])
def test_basic_under_jit_lowers_to_movement_ops(idx):
    x = make((4, 5, 3))
    f = lambda a: a[idx]
    assert_same(ember.jit(f)(jnp.asarray(x)), x[idx])
    names = prim_names(f, jnp.asarray(x))
    assert "take" not in names and "scatter" not in names, names
    assert set(names) <= {"slice", "rev", "reshape", "squeeze"}, names


def test_basic_zero_d_and_empty():
    s = np.float32(3.5)
    xs = jnp.asarray(s)
    assert_same(xs[()], s[()])
    assert_same(xs[...], np.asarray(s)[...])
    assert_same(xs[None], np.asarray(s)[None])
    e = np.zeros((0, 3), np.float32)
    xe = jnp.asarray(e)
    for idx in [np.s_[:], np.s_[:, 1], np.s_[::-1], np.s_[..., None], np.s_[1:5]]:
        assert_same(xe[idx], e[idx])


def test_concrete_array_scalar_index():
    x = make((4, 5))
    assert_same(jnp.asarray(x)[jnp.asarray(2)], x[2])
    assert_same(jnp.asarray(x)[np.array(-1)], x[-1])
    assert_same(jnp.asarray(x)[jnp.asarray(1):jnp.asarray(3)], x[1:3])


def test_traced_scalar_index():
    x = make((4, 5))
    f = ember.jit(lambda a, i: a[i])
    for i in range(-4, 4):
        assert_same(f(jnp.asarray(x), i), x[i])
    assert_same(f(jnp.asarray(x), 10), x[3])  # traced out-of-bounds indices clamp (JAX semantics)
    g = ember.jit(lambda a, i: a[1:, i, None])
    assert_same(g(jnp.asarray(x), -2), x[1:, -2, None])
    names = prim_names(lambda a, i: a[i], jnp.asarray(x), 1)
    assert "dynamic_slice" in names and "take" not in names


def test_traced_slice_bounds_raise():
    x = jnp.asarray(make((4, 5)))
    with pytest.raises(TracerError, match="dynamic_slice"):
        ember.jit(lambda a, i: a[i:])(x, 1)


# ---------------------------------------------------------------------------------------------
# getitem: advanced indexing
# ---------------------------------------------------------------------------------------------

ADVANCED = [
    np.s_[[0, 2]], np.s_[[-1, 0, -1]], np.s_[np.array([[0, 1], [2, 3]])], np.s_[[0, 1], [1, 2]],
    np.s_[[0, 1], :, [1, 2]], np.s_[:, [0, 4], [1, 0]], np.s_[[[0], [1]], [0, 1, 2]],
    np.s_[1, :, [0, 2]], np.s_[[0, 3], :, 1], np.s_[:, 1, [0, 1]], np.s_[[1], None, [2]],
    np.s_[..., [0, 2]], np.s_[None, [0, 1], 2:0:-1, [2]], np.s_[[]], np.s_[:, []],
    np.s_[[0, 1], ::-1], np.s_[np.array([1, 1]), np.array([[0], [4]])], np.s_[(0, 1), :],
    np.s_[True], np.s_[False], np.s_[True, [0, 1]], np.s_[np.uint8(1), [2]], np.s_[[[0]], 1, [[1, 0]]],
]


@pytest.mark.parametrize("idx", ADVANCED, ids=[repr(i) for i in ADVANCED])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_advanced_matches_numpy(idx, dtype):
    x = make((4, 5, 3), dtype)
    assert_same(jnp.asarray(x)[idx], x[idx])


@pytest.mark.parametrize("idx", ADVANCED[:14], ids=[repr(i) for i in ADVANCED[:14]])
def test_advanced_under_jit(idx):
    x = make((4, 5, 3))
    f = lambda a: a[idx]
    assert_same(ember.jit(f)(jnp.asarray(x)), x[idx])
    names = prim_names(f, jnp.asarray(x))
    assert names.count("take") == 1, names


def test_advanced_traced_index_arrays():
    x = make((4, 5, 3))
    f = ember.jit(lambda a, i, j: a[i, :, j])
    i = np.array([0, -1, 2], np.int32)
    j = np.array([[1], [-3]], np.int32)
    assert_same(f(jnp.asarray(x), i, j), x[i, :, j])
    # traced out-of-bounds components clamp per axis
    got = f(jnp.asarray(x), np.array([7, -9], np.int32), np.array([1, 5], np.int32))
    assert_same(got, x[[3, 0], :, [1, 2]])
    g = ember.jit(lambda a, i: a[i, [1, 2]])  # traced and concrete index arrays mixed
    assert_same(g(jnp.asarray(x), np.array([3, 0], np.int32)), x[[3, 0], [1, 2]])
    h = ember.jit(lambda a, i: a[[i, 0]])  # a list holding a traced scalar
    assert_same(h(jnp.asarray(x), 2), x[[2, 0]])
    k = ember.jit(lambda a, i: a[i, :, [0, 1]])  # a traced scalar among advanced indices
    assert_same(k(jnp.asarray(x), -1), x[-1, :, [0, 1]])


def test_advanced_int64_and_unsigned_indices():
    x = make((6, 2))
    for idx in [np.array([5, 0], np.int64), np.array([1, 4], np.uint32), np.array([3], np.uint8)]:
        assert_same(jnp.asarray(x)[idx], x[idx])
        assert_same(ember.jit(lambda a, i: a[i])(jnp.asarray(x), idx), x[idx])


@pytest.mark.parametrize("dtype", DTYPES)
def test_boolean_masks(dtype):
    x = make((4, 5, 3), dtype)
    m2 = make((4, 5), np.bool_, seed=1)
    m1 = np.array([True, False, True, True, False])
    cases = [np.s_[m2], np.s_[m2, 1], np.s_[:, m1], np.s_[1, m1, ::-1], np.s_[x != x.flat[0]],
             np.s_[np.zeros((4, 5, 3), bool)], np.s_[..., np.array([False, True, True])],
             np.s_[[True, False, False, True]]]
    for idx in cases:
        assert_same(jnp.asarray(x)[idx], x[idx])
    assert_same(jnp.asarray(x)[jnp.asarray(m2)], x[m2])
    f = ember.jit(lambda a: a[m2])  # a concrete (closed-over) mask works under jit
    assert_same(f(jnp.asarray(x)), x[m2])


def test_traced_mask_raises_tracer_error():
    x = jnp.asarray(make((4, 5)))
    m = make((4, 5), np.bool_)
    with pytest.raises(TracerError, match="jnp.where"):
        ember.jit(lambda a, mask: a[mask])(x, m)
    with pytest.raises(TracerError, match="size="):
        ember.jit(lambda a: a[a > 0])(x)


def test_out_of_bounds_indices_clamp_as_jax():
    v = make((3, 4))
    x = jnp.asarray(v)
    np.testing.assert_array_equal(x[3], v[2])
    np.testing.assert_array_equal(x[:, -5], v[:, 0])  # -5 + 4 = -1, clamped to 0
    np.testing.assert_array_equal(x[:, [0, 4]], v[:, [0, 3]])
    np.testing.assert_array_equal(x[[-4, 1]], v[[0, 1]])
    np.testing.assert_array_equal(x[-1, 40], v[-1, 3])
    np.testing.assert_array_equal(ember.jit(lambda a: a[:, [9]])(x), v[:, [3]])
    np.testing.assert_array_equal(ember.jit(lambda a: a[7])(x), v[2])
    np.testing.assert_array_equal(ember.jit(lambda a, i: a[i])(x, 11), v[2])
    assert int(jnp.arange(10)[11]) == 9 and int(jnp.arange(10)[-11]) == 0
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 0"):
        jnp.zeros(0)[0]


@pytest.mark.parametrize("idx", [11, -11, -12, (np.array([0, 11, -12]),), (slice(2, 20),)])
def test_out_of_bounds_against_jax(idx):
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    want = jax.numpy.arange(10)[idx]
    np.testing.assert_array_equal(jnp.arange(10)[idx], want)
    np.testing.assert_array_equal(ember.jit(lambda a: a[idx])(jnp.arange(10)), want)


@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds", "drop"])
def test_at_get_modes_against_jax(mode):
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    idx = np.array([1, 11, -3, -11])
    for dtype in (np.int32, np.float32):
        v = np.arange(10, dtype=dtype)
        want = jax.numpy.asarray(v).at[idx].get(mode=mode)
        np.testing.assert_array_equal(jnp.asarray(v).at[idx].get(mode=mode), want)
        np.testing.assert_array_equal(ember.jit(lambda a: a.at[idx].get(mode=mode))(v), want)
    want = jax.numpy.arange(10.0).at[idx].get(mode="fill", fill_value=-1.0)
    np.testing.assert_array_equal(jnp.arange(10.0).at[idx].get(mode="fill", fill_value=-1.0), want)


def test_index_errors():
    x = jnp.asarray(make((3, 4)))
    with pytest.raises(IndexError, match="too many indices for array: array is 2-dimensional, but 3"):
        x[0, 1, 2]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(IndexError, match="only integers"):
        x[1.0]
    with pytest.raises(IndexError, match="only integers"):
        x[np.array([0.5])]
    with pytest.raises(IndexError, match="only integers"):
        x["a"]
    with pytest.raises(IndexError, match="shape mismatch"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="boolean index did not match indexed array along axis 0"):
        x[np.array([True, False])]
    with pytest.raises(IndexError, match="only integers"):
        ember.jit(lambda a, i: a[i])(x, 1.0)
    with pytest.raises(TypeError, match="immutable"):
        x[0] = 1


# ---------------------------------------------------------------------------------------------
# getitem: property test against NumPy
# ---------------------------------------------------------------------------------------------


@st.composite
def shape_and_index(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=4)))
    ndim = len(shape)
    n_adv_shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    entries = []
    axis = 0
    used_ellipsis = False
    while axis < ndim or (draw(st.booleans()) and len(entries) < 6):
        kinds = ["none"]
        if axis < ndim:
            kinds += ["slice", "slice", "int", "adv", "mask"]
        if not used_ellipsis:
            kinds.append("ellipsis")
        kind = draw(st.sampled_from(kinds))
        if kind == "none":
            entries.append(None)
        elif kind == "ellipsis":
            used_ellipsis = True
            entries.append(Ellipsis)
            axis = ndim - draw(st.integers(0, ndim - axis))
        elif kind == "slice":
            d = shape[axis]
            bound = st.one_of(st.none(), st.integers(-d - 2, d + 2))
            step = draw(st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3])))
            entries.append(slice(draw(bound), draw(bound), step))
            axis += 1
        elif kind == "int":
            d = shape[axis]
            if d == 0:
                entries.append(slice(None))
            else:
                entries.append(draw(st.integers(-d, d - 1)))
            axis += 1
        elif kind == "adv":
            d = shape[axis]
            if d == 0:
                entries.append(slice(None))
            else:
                sub = n_adv_shape[draw(st.integers(0, len(n_adv_shape))):]
                sub = tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in sub)
                vals = draw(st.lists(st.integers(-d, d - 1), min_size=int(np.prod(sub)),
                                     max_size=int(np.prod(sub))))
                entries.append(np.array(vals, np.int64).reshape(sub))
            axis += 1
        else:
            d = shape[axis]
            entries.append(np.array(draw(st.lists(st.booleans(), min_size=d, max_size=d)), bool))
            axis += 1
        if len(entries) > 8:
            break
    return shape, tuple(entries)


@settings(max_examples=250, deadline=None)
@given(shape_and_index())
def test_getitem_property(si):
    shape, idx = si
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    n_masks = sum(isinstance(e, np.ndarray) and e.dtype == bool for e in idx)
    try:
        want = x[idx]
    except IndexError:
        with pytest.raises(IndexError):
            jnp.asarray(x)[idx]
        return
    assert_same(jnp.asarray(x)[idx], want)
    if n_masks == 0:
        assert_same(ember.jit(lambda a: a[idx])(jnp.asarray(x)), want)
        # the same with the index arrays traced
        pos = [i for i, e in enumerate(idx) if isinstance(e, np.ndarray)]

        def f(a, *arrs):
            full = list(idx)
            for i, v in zip(pos, arrs):
                full[i] = v
            return a[tuple(full)]

        assert_same(ember.jit(f)(jnp.asarray(x), *(idx[i] for i in pos)), want)


# ---------------------------------------------------------------------------------------------
# x.at[idx]
# ---------------------------------------------------------------------------------------------


def np_at(x, idx, op, v):
    out = np.array(x)
    if op == "set":
        out[idx] = v
    else:
        {"add": np.add, "multiply": np.multiply, "min": np.minimum, "max": np.maximum}[op].at(out, idx, v)
    return out


AT_INDICES = [np.s_[1], np.s_[-1], np.s_[1:3], np.s_[::-2], np.s_[[0, 2]], np.s_[[-1, 0]],
              np.s_[1, [0, 2]], np.s_[:, -1], np.s_[[0, 1], [2, 3]], np.s_[..., None, 0], np.s_[()]]


@pytest.mark.parametrize("op", ["set", "add", "multiply", "min", "max"])
@pytest.mark.parametrize("idx", AT_INDICES, ids=[repr(i) for i in AT_INDICES])
def test_at_matches_numpy(op, idx):
    x = make((3, 4))
    v = make(x[idx].shape, seed=5)
    got = getattr(jnp.asarray(x).at[idx], op)(v)
    assert_same(got, np_at(x, idx, op, v))
    jitted = ember.jit(lambda a, b: getattr(a.at[idx], op)(b))(jnp.asarray(x), v)
    assert_same(jitted, got)


@pytest.mark.parametrize("op", ["add", "multiply", "min", "max"])
def test_at_duplicate_indices_accumulate(op):
    x = make((5,), np.float64)
    idx = np.array([0, 2, 0, 0, -1, 4])
    v = make((6,), np.float64, seed=3)
    assert_same(getattr(jnp.asarray(x).at[idx], op)(v), np_at(x, idx, op, v))
    f = ember.jit(lambda a, i, b: getattr(a.at[i], op)(b))
    np.testing.assert_allclose(np.asarray(f(jnp.asarray(x), idx, v)), np_at(x, idx, op, v))


def test_at_int_and_bool_dtypes():
    x = np.arange(6, dtype=np.int32)
    assert_same(jnp.asarray(x).at[[1, 1, 3]].add(2), np_at(x, [1, 1, 3], "add", 2))
    assert_same(jnp.asarray(x).at[2].set(7.9), np_at(x, 2, "set", 7))  # cast like JAX (truncation)
    b = np.zeros(4, bool)
    assert_same(jnp.asarray(b).at[1:3].set(True), np_at(b, np.s_[1:3], "set", True))
    assert_same(jnp.asarray(b).at[[0, 0]].max(np.array([False, True])), np.array([True, False, False, False]))


def test_at_divide_power_subtract():
    x = make((4,), np.float32) + 3
    idx = np.array([0, 2, 2])
    v = np.array([2.0, 4.0, 0.5], np.float32)
    want = np.array(x)
    np.divide.at(want, idx, v)
    np.testing.assert_allclose(np.asarray(jnp.asarray(x).at[idx].divide(v)), want, rtol=1e-6)
    want = np.array(x)
    np.subtract.at(want, idx, v)
    np.testing.assert_allclose(np.asarray(jnp.asarray(x).at[idx].subtract(v)), want, rtol=1e-6)
    xp = np.abs(x) + 1
    want = np.array(xp)
    want[[1, 3]] **= 2
    np.testing.assert_allclose(np.asarray(jnp.asarray(xp).at[[1, 3]].power(2)), want, rtol=1e-6)
    assert_same(jnp.asarray(x).at[1].mul(3.0), np_at(x, 1, "multiply", np.float32(3.0)))
    f = ember.jit(lambda a, i, b: (a.at[i].divide(b), a.at[i].power(2), a.at[i].subtract(b)))
    ex = jnp.asarray(xp)
    eager = [ex.at[idx].divide(v), ex.at[idx].power(2), ex.at[idx].subtract(v)]
    for got, want in zip(f(ex, idx, v), eager):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_at_masks_and_broadcast_updates():
    x = make((3, 4))
    m = x > 0
    assert_same(jnp.asarray(x).at[m].set(0.0), np.where(m, 0, x).astype(np.float32))
    assert_same(jnp.asarray(x).at[m].add(1.0), np.where(m, x + 1, x).astype(np.float32))
    row = np.array([1, 2, 3, 4], np.float32)
    assert_same(jnp.asarray(x).at[1:].set(row), np_at(x, np.s_[1:], "set", row))
    assert_same(jnp.asarray(x).at[0].set(row[None]), np_at(x, 0, "set", row))  # leading unit dims drop
    with pytest.raises(ShapeError, match=r"at\[\].set: cannot broadcast updates of shape \(3,\)"):
        jnp.asarray(x).at[0].set(np.ones(3, np.float32))


def test_at_out_of_bounds_modes():
    x = np.arange(5, dtype=np.float32)
    ex = jnp.asarray(x)
    assert_same(ex.at[10].set(99.0), x)  # dropped
    assert_same(ex.at[[1, 10, -7]].add(1.0), np_at(x, [1], "add", 1.0))
    assert_same(ex.at[10].add(10.0, mode="clip"), np_at(x, 4, "add", 10.0))
    assert_same(ex.at[-1].set(9.0, wrap_negative_indices=False), x)
    assert float(ex.at[20].get()) == 4.0
    assert np.isnan(float(ex.at[20].get(mode="fill")))
    assert_same(ex.at[np.array([1, 20, -1])].get(mode="fill", fill_value=-1.0),
                np.array([1, -1, 4], np.float32))
    with pytest.raises(ValueError, match="mode"):
        ex.at[0].set(1.0, mode="bogus")


def test_at_traced_indices_and_values():
    x = make((4, 3))
    f = ember.jit(lambda a, i, v: a.at[i, 1].set(v))
    assert_same(f(jnp.asarray(x), -1, 5.0), np_at(x, (-1, 1), "set", 5.0))
    assert_same(f(jnp.asarray(x), 7, 5.0), x)  # traced out-of-bounds updates are dropped
    g = ember.jit(lambda a, i: a.at[i].add(1.0))
    idx = np.array([0, 0, 3], np.int32)
    assert_same(g(jnp.asarray(x), idx), np_at(x, idx, "add", np.float32(1.0)))
    h = ember.jit(lambda a, i: a.at[i].get(mode="fill", fill_value=0.0))
    assert_same(h(jnp.asarray(x), np.array([1, 9], np.int32)), np.stack([x[1], np.zeros(3, np.float32)]))


def test_at_get_matches_getitem():
    x = make((3, 4, 2))
    for idx in [np.s_[1], np.s_[:, [0, 3]], np.s_[[0, 1], :, [1, 0]], np.s_[x[..., 0] > 0]]:
        assert_same(jnp.asarray(x).at[idx].get(), x[idx])


@settings(max_examples=80, deadline=None)
@given(shape_and_index(), st.sampled_from(["set", "add", "min", "max"]))
def test_at_property(si, op):
    shape, idx = si
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    try:
        target = x[idx]
    except IndexError:
        return
    v = (np.arange(target.size, dtype=np.int32) * 7 % 11).reshape(target.shape)
    if op == "set":  # NumPy keeps the last of duplicate writes; ember keeps one of them: use unique
        flat = np.arange(x.size).reshape(shape)[idx]
        if len(np.unique(flat)) != flat.size:
            return
    assert_same(getattr(jnp.asarray(x).at[idx], op)(v), np_at(x, idx, op, v))


# ---------------------------------------------------------------------------------------------
# take / take_along_axis
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_matches_numpy(dtype, axis):
    x = make((3, 4, 2), dtype)
    n = x.size if axis is None else x.shape[axis]
    for ind in [np.array([0, n - 1, -1, 1]), np.array([[0], [-2]]), np.array(1), np.array([], np.int32)]:
        assert_same(jnp.take(jnp.asarray(x), ind, axis=axis), np.take(x, ind, axis=axis))
        assert_same(ember.jit(lambda a, i: jnp.take(a, i, axis=axis))(jnp.asarray(x), ind),
                    np.take(x, ind, axis=axis))
    bad = np.array([0, n + 2, -n - 3])
    for mode in ["clip", "wrap"]:
        want = np.take(x, bad, axis=axis, mode=mode)
        assert_same(jnp.take(jnp.asarray(x), bad, axis=axis, mode=mode), want)
    assert_same(jnp.asarray(x).take(jnp.asarray([1, 0]), axis), np.take(x, [1, 0], axis))


def test_take_out_of_bounds_fill_and_raise():
    x = np.arange(5, dtype=np.float32)
    got = np.asarray(jnp.take(jnp.asarray(x), np.array([1, 7, -9])))
    assert got[0] == 1 and np.isnan(got[1:]).all()
    assert_same(jnp.take(jnp.asarray(x), np.array([1, 7]), fill_value=-2.0), np.array([1, -2], np.float32))
    xi = np.arange(5, dtype=np.int32)
    assert_same(jnp.take(jnp.asarray(xi), np.array([9])), np.array([np.iinfo(np.int32).min], np.int32))
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 5"):
        jnp.take(jnp.asarray(x), np.array([5]), mode="raise")
    with pytest.raises(DTypeError, match="integers"):
        jnp.take(jnp.asarray(x), np.array([0.5]))
    with pytest.raises(ShapeError, match="axis 2 is out of bounds"):
        jnp.take(jnp.asarray(x), np.array([0]), axis=2)
    with pytest.raises(IndexError, match="empty axis"):
        jnp.take(jnp.asarray(np.zeros((0, 2))), np.array([0]), axis=0)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis_matches_numpy(dtype, axis):
    x = make((3, 4, 5), dtype)
    rng = np.random.default_rng(2)
    n = x.shape[axis]
    shape = list(x.shape)
    shape[axis] = 6
    ind = rng.integers(-n, n, size=shape)
    assert_same(jnp.take_along_axis(jnp.asarray(x), ind, axis), np.take_along_axis(x, ind, axis))
    assert_same(ember.jit(lambda a, i: jnp.take_along_axis(a, i, axis))(jnp.asarray(x), ind),
                np.take_along_axis(x, ind, axis))
    # broadcasting: unit dims in the indices (and in the array) outside the axis
    shape = [1] * 3
    shape[axis] = 2
    ind = rng.integers(0, n, size=shape)
    assert_same(jnp.take_along_axis(jnp.asarray(x), ind, axis), np.take_along_axis(x, ind, axis))


def test_take_along_axis_misc():
    x = make((6,))
    ind = np.array([5, -1, 0])
    assert_same(jnp.take_along_axis(jnp.asarray(x), ind, axis=None), np.take_along_axis(x, ind, axis=None))
    y = make((1, 3))
    ind2 = np.array([[0, 2], [1, 1], [2, 0]])
    want = np.take_along_axis(np.broadcast_to(y, (3, 3)), ind2, 1)
    assert_same(jnp.take_along_axis(jnp.asarray(y), ind2, 1), want)
    got = np.asarray(jnp.take_along_axis(jnp.asarray(x), np.array([1, 6]), 0))
    assert got[0] == x[1] and np.isnan(got[1])
    assert_same(jnp.take_along_axis(jnp.asarray(x), np.array([1, 6]), 0, mode="clip"), x[[1, 5]])
    with pytest.raises(ShapeError, match="same number of dimensions"):
        jnp.take_along_axis(jnp.asarray(make((2, 3))), np.array([0]), 1)
    with pytest.raises(ShapeError, match="do not broadcast outside axis 1"):
        jnp.take_along_axis(jnp.asarray(make((2, 3))), np.zeros((3, 1), int), 1)


# ---------------------------------------------------------------------------------------------
# transformations through indexing
# ---------------------------------------------------------------------------------------------


def test_grad_through_indexing():
    x = make((3, 4))
    g = ember.grad(lambda a: jnp.sum(a[[0, 0, 2], 1:3] * 2.0))(jnp.asarray(x))
    want = np.zeros_like(x)
    np.add.at(want, (np.array([0, 0, 2])[:, None], np.array([1, 2])[None]), 2.0)
    assert_same(g, want)
    g = ember.grad(lambda a: jnp.sum(a.at[1].set(0.0) ** 2))(jnp.asarray(x))
    want = 2 * x
    want[1] = 0
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-6)
    ones = jnp.asarray(np.ones(4, np.float32))
    g = ember.grad(lambda v: jnp.sum(jnp.asarray(x).at[[0, 0]].add(v) ** 2))(ones)
    np.testing.assert_allclose(np.asarray(g), 4 * (x[0] + 2), rtol=1e-6)
    idx = np.array([[0], [1], [3]])
    g = ember.grad(lambda a: jnp.sum(jnp.take_along_axis(a, idx, 1)))(jnp.asarray(x))
    want = np.zeros_like(x)
    np.put_along_axis(want, idx, 1.0, 1)
    assert_same(g, want)


def test_vmap_through_indexing():
    x = make((3, 4))
    i = np.array([0, 3, -1], np.int32)
    assert_same(ember.vmap(lambda a, j: a[j])(jnp.asarray(x), i), x[np.arange(3), i])
    xs = np.stack([x, x + 100])
    got = ember.vmap(lambda a, j: a[j, [0, 1]])(jnp.asarray(xs), np.array([2, 1], np.int32))
    assert_same(got, np.stack([xs[0, 2, [0, 1]], xs[1, 1, [0, 1]]]))
    got = ember.vmap(lambda a, j: a.at[j].set(-1.0))(jnp.asarray(x), i)
    want = np.array(x)
    want[np.arange(3), i] = -1
    assert_same(got, want)


@pytest.mark.parametrize("name", ["sum", "mean", "std", "var", "max", "min", "prod", "ptp"])
def test_reductions_refuse_lists_as_jax(name):
    jax = pytest.importorskip("jax", reason="the reference is JAX")
    with pytest.raises(TypeError) as want:
        getattr(jax.numpy, name)([1.0, 2.0, 3.0])
    with pytest.raises(TypeError) as got:
        getattr(jnp, name)([1.0, 2.0, 3.0])
    assert str(got.value) == str(want.value)
    with pytest.raises(TypeError, match="requires ndarray or scalar arguments"):
        getattr(jnp, name)((1.0, 2.0))
    np.testing.assert_allclose(getattr(jnp, name)(jnp.asarray([1.0, 2.0, 3.0])),
                               getattr(np, name)(np.array([1.0, 2.0, 3.0])))
