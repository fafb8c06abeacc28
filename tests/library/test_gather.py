"""lax.gather / lax.scatter / scatter_add / scatter_mul / scatter_min / scatter_max with general dimension
numbers against direct NumPy loops written here (XLA semantics), every mode, batching dims, errors,
gradients by finite differences, jit and vmap."""

import itertools

import numpy as np
import pytest

import ember
from ember import lax
from ember.errors import DTypeError, ShapeError
from ember.lax import GatherDimensionNumbers as GDN
from ember.lax import ScatterDimensionNumbers as SDN
from ember.test_util import check_grads

rng = np.random.default_rng(3)


def _fill(dtype):
    d = np.dtype(dtype)
    if d.kind in "fc":
        return np.nan
    if d == np.bool_:
        return True
    return np.iinfo(d).max if d.kind == "u" else np.iinfo(d).min


def _window_start(ndim, idx, b, index_map, operand_batching, index_batching):
    """The start of the window at index batch position ``b``: the index vector on the axes of
    ``index_map``, the batch position on the operand batching axes, 0 elsewhere."""
    start = [0] * ndim
    for j, d in enumerate(index_map):
        start[d] = int(idx[b + (j,)])
    for od, ib in zip(operand_batching, index_batching):
        start[od] = b[ib]
    return start


def ref_gather(x, idx, dn, sizes, mode="clip", fill=None):
    batch_shape = idx.shape[:-1]
    dropped = (*dn.collapsed_slice_dims, *dn.operand_batching_dims)
    kept = [d for d in range(x.ndim) if d not in dropped]
    out_rank = len(batch_shape) + len(kept)
    offs = sorted(dn.offset_dims)
    batch_pos = [p for p in range(out_rank) if p not in offs]
    out_shape = [0] * out_rank
    for p, b in zip(batch_pos, batch_shape):
        out_shape[p] = b
    for p, d in zip(offs, kept):
        out_shape[p] = sizes[d]
    out = np.empty(out_shape, x.dtype)
    for b in itertools.product(*(range(n) for n in batch_shape)):
        start = _window_start(x.ndim, idx, b, dn.start_index_map, dn.operand_batching_dims,
                              dn.start_indices_batching_dims)
        oob = any(not 0 <= start[d] <= x.shape[d] - sizes[d] for d in dn.start_index_map)
        start = [min(max(s, 0), n - k) for s, n, k in zip(start, x.shape, sizes)]
        sl = x[tuple(slice(s, s + k) for s, k in zip(start, sizes))].reshape([sizes[d] for d in kept])
        if mode == "fill" and oob:
            sl = np.full(sl.shape, _fill(x.dtype) if fill is None else fill, x.dtype)
        where = [slice(None)] * out_rank
        for p, bi in zip(batch_pos, b):
            where[p] = bi
        out[tuple(where)] = sl
    return out


def ref_scatter(x, idx, upd, dn, op, mode="drop"):
    out = np.array(x)
    batch_shape = idx.shape[:-1]
    wdims = sorted(dn.update_window_dims)
    spos = [p for p in range(upd.ndim) if p not in wdims]
    inserted = (*dn.inserted_window_dims, *dn.operand_batching_dims)
    kept = [d for d in range(x.ndim) if d not in inserted]
    wsize = [1] * x.ndim
    for p, d in zip(wdims, kept):
        wsize[d] = upd.shape[p]
    for b in itertools.product(*(range(n) for n in batch_shape)):
        start = _window_start(x.ndim, idx, b, dn.scatter_dims_to_operand_dims, dn.operand_batching_dims,
                              dn.scatter_indices_batching_dims)
        if any(not 0 <= start[d] <= x.shape[d] - wsize[d] for d in dn.scatter_dims_to_operand_dims):
            if mode == "drop":
                continue
            start = [min(max(s, 0), n - k) for s, n, k in zip(start, x.shape, wsize)]
        sel = [slice(None)] * upd.ndim
        for p, bi in zip(spos, b):
            sel[p] = bi
        window = upd[tuple(sel)].reshape(wsize)
        region = tuple(slice(s, s + k) for s, k in zip(start, wsize))
        out[region] = window if op is None else op(out[region], window)
    return out


GATHERS = [  # operand shape, index shape (last = vector), dimension numbers, slice sizes
    ((5, 6, 7), (4, 3, 2), GDN((2,), (0, 1), (0, 1)), (1, 1, 7)),
    ((5, 6, 7), (4, 3, 2), GDN((0, 3), (1,), (2, 1)), (3, 1, 2)),
    ((5, 6, 7), (4, 1), GDN((1, 2), (2,), (2,)), (2, 4, 1)),
    ((8,), (3, 1), GDN((), (0,), (0,)), (1,)),  # x[idx]
    ((4, 6, 7), (4, 3, 1), GDN((2,), (1,), (1,), (0,), (0,)), (1, 1, 7)),  # batching dims
    ((5, 6), (0, 2), GDN((1, 2), (), (0, 1)), (2, 3)),  # no indices
]


@pytest.mark.parametrize("case", GATHERS, ids=[f"g{i}" for i in range(len(GATHERS))])
@pytest.mark.parametrize("mode", [None, "clip", "fill", "promise_in_bounds"])
def test_gather_matches_loop(case, mode):
    xs, ishape, dn, sizes = case
    x = rng.standard_normal(xs)
    bound = max(xs) + 2
    idx = rng.integers(-2, bound, size=ishape).astype(np.int32)
    if dn.operand_batching_dims:
        idx = idx % xs[1]
    got = np.asarray(lax.gather(x, idx, dn, sizes, mode=mode))
    want = ref_gather(x, idx, dn, sizes, "fill" if mode == "fill" else "clip")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.bool_, np.float32])
def test_gather_dtypes_and_fill_value(dtype):
    x = (rng.integers(0, 100, size=(6, 5)) % (2 if dtype == np.bool_ else 100)).astype(dtype)
    idx = np.array([[0], [5], [6], [-1]], np.int32)
    dn = GDN((1,), (0,), (0,))
    got = lax.gather(x, idx, dn, (1, 5), mode="fill")
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.asarray(got), ref_gather(x, idx, dn, (1, 5), "fill"))
    got = lax.gather(x, idx, dn, (1, 5), mode="fill", fill_value=1)
    np.testing.assert_array_equal(np.asarray(got), ref_gather(x, idx, dn, (1, 5), "fill", 1))


def test_gather_is_numpy_indexing():
    x = rng.standard_normal((5, 4, 3))
    i = rng.integers(0, 5, size=(2, 6))
    j = rng.integers(0, 4, size=(2, 6))
    idx = np.stack([i, j], -1).astype(np.int32)
    got = lax.gather(x, idx, GDN((2,), (0, 1), (0, 1)), (1, 1, 3))
    np.testing.assert_array_equal(np.asarray(got), x[i, j])


SCATTERS = [  # operand shape, index shape, updates shape, dimension numbers
    ((5, 6, 7), (4, 3, 2), (4, 3, 7), SDN((2,), (0, 1), (0, 1))),
    ((5, 6, 7), (4, 3, 2), (2, 4, 3, 3), SDN((0, 3), (1,), (2, 1))),
    ((8,), (5, 1), (5,), SDN((), (0,), (0,))),
    ((4, 6, 7), (4, 3, 1), (4, 3, 7), SDN((2,), (1,), (1,), (0,), (0,))),
]


# "set" only where windows cannot overlap (else the winner among overlapping updates is unspecified)
SCATTER_PARAMS = [(i, which) for i in range(len(SCATTERS)) for which in ("set", "add", "mul", "min", "max")
                  if not (which == "set" and i == 1)]


@pytest.mark.parametrize("case_which", SCATTER_PARAMS, ids=[f"s{i}-{w}" for i, w in SCATTER_PARAMS])
@pytest.mark.parametrize("mode", [None, "clip", "drop"])
def test_scatter_matches_loop(case_which, mode):
    case, which = SCATTERS[case_which[0]], case_which[1]
    xs, ishape, ushape, dn = case
    x = rng.standard_normal(xs)
    u = rng.standard_normal(ushape)
    idx = rng.integers(-1, max(xs), size=ishape).astype(np.int32)
    if dn.operand_batching_dims:
        idx = idx % xs[1]
    if which == "set":  # unique windows so the result does not depend on the order
        idx = _unique_starts(idx, xs, dn, mode != "clip")
    fn = {"set": lax.scatter, "add": lax.scatter_add, "mul": lax.scatter_mul, "min": lax.scatter_min,
          "max": lax.scatter_max}[which]
    op = {"set": None, "add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[which]
    got = np.asarray(fn(x, idx, u, dn, mode=mode))
    want = ref_scatter(x, idx, u, dn, op, "clip" if mode == "clip" else "drop")
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


def _unique_starts(idx, xs, dn, with_oob):
    """Distinct in-bounds starts for window-size-1 mapped axes (so "set" is order independent);
    with ``with_oob`` the first index vector points out of bounds (dropped)."""
    flat = idx.reshape(-1, idx.shape[-1]).copy()
    ranges = [range(xs[d]) for d in dn.scatter_dims_to_operand_dims]
    cells = list(itertools.product(*ranges))
    if dn.operand_batching_dims:  # distinct within each batch row: a permutation per row
        rows = idx.shape[0]
        per = flat.shape[0] // rows
        for r in range(rows):
            pick = rng.permutation(len(cells))[:per]
            flat[r * per:(r + 1) * per] = np.array([cells[c] for c in pick])
    else:
        pick = rng.permutation(len(cells))[:flat.shape[0]]
        flat[:] = np.array([cells[c] for c in pick])
    if with_oob:
        flat[0] = -1
    return flat.reshape(idx.shape)


def test_scatter_keeps_one_axis_form():
    x = rng.standard_normal((4, 3))
    idx = np.array([2, 0, 2])
    upd = rng.standard_normal((3, 3))
    want = np.array(x)
    np.add.at(want, idx, upd)
    np.testing.assert_allclose(np.asarray(lax.scatter_add(x, idx, upd, 0)), want, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(lax.scatter(x, idx, upd, 0, "add")), want, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(lax.scatter(x, idx, upd, axis=0, mode="add")), want, rtol=1e-13)


def test_gather_scatter_grads():
    x = rng.standard_normal((5, 6, 7))
    idx = rng.integers(-1, 7, size=(4, 3, 2)).astype(np.int32)
    dn = GDN((0, 3), (1,), (2, 1))
    for mode in ("clip", "fill"):  # (a finite fill value: NaN would defeat finite differences)
        check_grads(lambda v, m=mode: lax.gather(v, idx, dn, (3, 1, 2), mode=m, fill_value=0.5), (x,),
                    order=2)
    sdn = SDN((0, 3), (1,), (2, 1))
    u = rng.standard_normal((2, 4, 3, 3))
    check_grads(lambda v, w: lax.scatter_add(v, idx, w, sdn), (x, u), order=2)
    uniq = np.array([[[0, 1]], [[3, 4]]], np.int32)
    check_grads(lambda v, w: lax.scatter(v, uniq, w, SDN((2,), (0, 1), (0, 1))),
                (x, rng.standard_normal((2, 1, 7))), order=1)


def test_gather_scatter_jit_vmap():
    x = rng.standard_normal((3, 5, 6))
    idx = rng.integers(0, 6, size=(3, 4, 2)).astype(np.int32)
    dn = GDN((1,), (0,), (0, 1))

    def g(v, i):
        return lax.gather(v, i, dn, (1, 2), mode="clip")

    per = np.stack([np.asarray(g(x[b], idx[b])) for b in range(3)])
    np.testing.assert_array_equal(np.asarray(ember.vmap(g)(x, idx)), per)
    np.testing.assert_array_equal(np.asarray(ember.vmap(g, in_axes=(None, 0))(x[0], idx)),
                                  np.stack([np.asarray(g(x[0], idx[b])) for b in range(3)]))
    np.testing.assert_array_equal(np.asarray(ember.jit(g)(x[0], idx[0])), per[0])
    sdn = SDN((1,), (0,), (0, 1))
    u = rng.standard_normal((3, 4, 2))

    def s(v, i, w):
        return lax.scatter_add(v, i, w, sdn)

    per = np.stack([np.asarray(s(x[b], idx[b], u[b])) for b in range(3)])
    np.testing.assert_allclose(np.asarray(ember.vmap(s)(x, idx, u)), per, rtol=1e-13)
    np.testing.assert_allclose(np.asarray(ember.jit(s)(x[0], idx[0], u[0])), per[0], rtol=1e-13)


def test_gather_scatter_errors():
    x = np.zeros((4, 5))
    idx = np.zeros((3, 1), np.int32)
    with pytest.raises(DTypeError, match="integers"):
        lax.gather(x, idx.astype(np.float32), GDN((1,), (0,), (0,)), (1, 5))
    with pytest.raises(ShapeError, match="slice size"):
        lax.gather(x, idx, GDN((1,), (0,), (0,)), (1, 6))
    with pytest.raises(ShapeError, match="slice_sizes"):
        lax.gather(x, idx, GDN((1,), (0,), (0,)), (1,))
    with pytest.raises(ShapeError, match="size 1"):
        lax.gather(x, idx, GDN((1,), (0,), (0,)), (2, 5))
    with pytest.raises(ShapeError, match="index vectors"):
        lax.gather(x, np.zeros((3, 2), np.int32), GDN((1,), (0,), (0,)), (1, 5))
    with pytest.raises(ShapeError, match="offset_dims"):
        lax.gather(x, idx, GDN((), (0,), (0,)), (1, 5))
    with pytest.raises(ValueError, match="mode"):
        lax.gather(x, idx, GDN((1,), (0,), (0,)), (1, 5), mode="wrap")
    with pytest.raises(DTypeError, match="updates dtype"):
        lax.scatter(x, idx, np.zeros((3, 5), np.float32), SDN((1,), (0,), (0,)))
    with pytest.raises(ShapeError, match="index batch shape"):
        lax.scatter(x, idx, np.zeros((2, 5)), SDN((1,), (0,), (0,)))
