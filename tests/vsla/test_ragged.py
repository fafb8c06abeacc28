"""vsla.Ragged: row-wise + - * under zero extension, row sums, one native call and one compile for every
set of row lengths, gradients, bad input; against NumPy references that pad every row explicitly."""
import numpy as np
import pytest

import ember
from ember import vsla
from ember._src.prims.ragged import ragged_binary_p, ragged_rowbroadcast_p
from ember._src.vsla import ragged as rg
from tests.native.util import run_with_call_step

NP_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def _padded_rows(xs, ys, op):
    """The reference: each pair of rows padded by hand to the longer one, then ``op``."""
    out = []
    for x, y in zip(xs, ys):
        n = max(x.size, y.size)
        out.append(NP_OPS[op](np.pad(x, (0, n - x.size)), np.pad(y, (0, n - y.size))))
    return out


def _rows(r):
    v = np.asarray(r.values)
    return [v[a:b] for a, b in zip(r.offsets[:-1], r.offsets[1:])]


def _random_rows(rng, lengths, dtype=np.float32):
    if np.dtype(dtype).kind == "i":
        return [rng.integers(-50, 50, int(n)).astype(dtype) for n in lengths]
    return [rng.standard_normal(int(n)).astype(dtype) for n in lengths]


def _check(xs, ys, op, dtype):
    a, b = vsla.ragged(xs, dtype=dtype), vsla.ragged(ys, dtype=dtype)
    got = {"add": a + b, "sub": a - b, "mul": a * b}[op]
    want = _padded_rows(xs, ys, op)
    assert got.lengths.tolist() == [w.size for w in want]
    assert got.offsets.tolist() == np.concatenate([[0], np.cumsum([w.size for w in want])]).tolist()
    assert np.dtype(got.dtype) == np.dtype(dtype)
    for g, w in zip(_rows(got), want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)


def test_issue_examples_per_row():
    a = vsla.ragged([[1.0, 2.0, 3.0], [5.0], [2.0, 3.0], [5.0, 3.0, 2.0]])
    b = vsla.ragged([[4.0, 5.0], [1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [2.0, 1.0, 2.0]])
    assert [r.tolist() for r in _rows(a + b)][:2] == [[5.0, 7.0, 3.0], [6.0, 2.0, 3.0]]
    assert _rows(a * b)[2].tolist() == [8.0, 15.0, 0.0]
    diff = (a - b).row(3)
    assert diff.shape == (3,) and diff.to_numpy().tolist() == [3.0, 2.0] and diff.shrink().shape == (2,)
    assert (a + b).to_padded().to_numpy().tolist() == [[5, 7, 3], [6, 2, 3], [6, 8, 6], [7, 4, 4]]


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_random_length_sets_vs_padded_numpy(op, dtype):
    rng = np.random.default_rng(hash((op, np.dtype(dtype).name)) % 2**32)
    cases = [([0, 3, 0], [2, 0, 0]), ([1], [4096]), ([4096], [1]), ([7], [7]), ([0], [5]), ([5], [0]),
             (rng.integers(0, 40, 17), rng.integers(0, 40, 17)),
             (rng.integers(1, 4097, 6), rng.integers(1, 4097, 6)),
             (rng.integers(0, 4097, 120), rng.integers(0, 4097, 120))]  # above the pool's threshold
    for la, lb in cases:
        _check(_random_rows(rng, la, dtype), _random_rows(rng, lb, dtype), op, dtype)


def test_all_empty_and_zero_rows():
    a, b = vsla.ragged([[], []]), vsla.ragged([[], []])
    out = a * b
    assert out.lengths.tolist() == [0, 0] and out.values.shape == (0,) and out.nbytes == 0
    z = vsla.ragged([])
    assert len(z + z) == 0 and (z + z).sum().shape == (0,)
    np.testing.assert_array_equal(np.asarray(a.sum()), [0.0, 0.0])


def test_one_native_call_and_one_compile_for_every_length_set():
    rng = np.random.default_rng(5)
    rg._binary_fn.cache_clear()
    n_sets = 0
    for _ in range(24):
        rows = int(rng.integers(1, 12))
        la, lb = rng.integers(0, 300, rows), rng.integers(0, 300, rows)
        la[0] = max(la[0], 1)
        _check(_random_rows(rng, la), _random_rows(rng, lb), "mul", np.float32)
        n_sets += 1
    info = rg._binary_fn("mul", 1).cache_info()
    assert n_sets == 24 and info["compiles"] == 1 and info["specializations"] >= 20
    # the program is one native call step (no Python fallback), and so are the row sums
    xs, ys = _random_rows(rng, [3, 0, 9]), _random_rows(rng, [5, 2, 1])
    a, b = vsla.ragged(xs), vsla.ragged(ys)
    lo = np.maximum(a.lengths, b.lengths)
    table = np.stack([a.lengths, b.lengths, lo], 1).astype(np.int32)
    out, _ = run_with_call_step(lambda x, y, t: rg.ragged_binary(x, y, t, op="sub", roles=(0, 1, 2),
                                                                 total=int(lo.sum())),
                                "ragged_binary", a.values, b.values, table)
    for g, w in zip(np.split(out, rg._offsets(lo)[1:-1]), _padded_rows(xs, ys, "sub")):
        np.testing.assert_array_equal(g, w)
    sums, _ = run_with_call_step(lambda x, t: rg.ragged_rowsum(x, t, roles=(0,)), "ragged_rowsum",
                                 a.values, table)
    np.testing.assert_allclose(sums, [x.sum() for x in xs], rtol=1e-6)
    back, _ = run_with_call_step(lambda v, t: ragged_rowbroadcast_p.bind(v, t, roles=(0,), total=12),
                                 "ragged_rowbroadcast", np.float32([1.0, 2.0, 3.0]), table)
    np.testing.assert_array_equal(back, [1.0] * 3 + [3.0] * 9)


def test_a_table_that_does_not_fit_its_buffers_is_cut_not_a_crash():
    x, y = np.arange(1.0, 6.0, dtype=np.float32), np.arange(10.0, 13.0, dtype=np.float32)
    table = np.array([[2, 9, 2], [10**6, -4, 10**6], [7, 7, 7]], np.int32)  # lengths past every buffer
    want = ragged_binary_p.impl(x, y, table, op="add", roles=(0, 1, 2), total=6)
    # rows cut at the buffers' ends: x rows [1 2] [3 4 5] [], y rows [10 11 12] [] [], result 2 + 4
    np.testing.assert_array_equal(want, [11.0, 13.0, 3.0, 4.0, 5.0, 0.0])
    got, _ = run_with_call_step(lambda a, b, t: rg.ragged_binary(a, b, t, op="add", roles=(0, 1, 2), total=6),
                                "ragged_binary", x, y, table)
    np.testing.assert_array_equal(got, want)
    sums, _ = run_with_call_step(lambda a, t: rg.ragged_rowsum(a, t, roles=(0,)), "ragged_rowsum", x, table)
    np.testing.assert_array_equal(sums, [3.0, 12.0, 0.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_row_sum_and_mean(dtype):
    rng = np.random.default_rng(1)
    xs = _random_rows(rng, [0, 1, 4096, 17, 9], dtype)
    r = vsla.ragged(xs, dtype=dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    want = [x.astype(np.float64).sum() for x in xs]
    np.testing.assert_allclose(np.asarray(r.sum()), want, rtol=tol, atol=tol)
    if np.dtype(dtype).kind == "f":
        want = [x.astype(np.float64).mean() if x.size else 0.0 for x in xs]
        np.testing.assert_allclose(np.asarray(r.mean()), want, rtol=tol, atol=tol)


def test_scalar_multiply_neg_and_maps():
    xs = [np.float32([1, -2, 3]), np.float32([]), np.float32([-4])]
    r = vsla.ragged(xs)
    np.testing.assert_array_equal(np.asarray((2.5 * r).values), 2.5 * np.concatenate(xs))
    np.testing.assert_array_equal(np.asarray((r * 2).values), 2 * np.concatenate(xs))
    np.testing.assert_array_equal(np.asarray((-r).values), -np.concatenate(xs))
    relu = r.map(lambda v: ember.numpy.maximum(v, 0))
    assert relu.lengths.tolist() == [3, 0, 1]
    np.testing.assert_array_equal(np.asarray(relu.values), [1, 0, 3, 0])


def test_constructors_and_views():
    xs = [np.float32([1, 2]), np.float32([]), np.float32([3, 4, 5])]
    r = vsla.ragged([xs[0], vsla.array(xs[1]), vsla.array(xs[2])])
    assert len(r) == 3 and r.lengths.dtype == np.int64 and r.offsets.tolist() == [0, 2, 2, 5]
    assert r.nbytes == 5 * 4
    s = vsla.Ragged.from_lengths(np.arange(1.0, 6.0, dtype=np.float32)[[0, 1, 2, 3, 4]], [2, 0, 3])
    assert [v.to_numpy().tolist() for v in s.to_list()] == [[1, 2], [], [3, 4, 5]]
    assert [v.shape for v in s.unstack()] == [(2,), (0,), (3,)] and s.row(-1).shape == (3,)
    p = s.to_padded()
    ref = vsla.stack([vsla.array(x) for x in xs])
    assert p.shape == ref.shape == (3, 3) and p == ref
    assert p.to_numpy().tolist() == [[1, 2, 0], [0, 0, 0], [3, 4, 5]]
    assert vsla.ragged([[1, 2]]).dtype == vsla.array([1, 2]).dtype  # integer rows stay integer


def _loss_reference(xs, ys, w_rows, op):
    """d/dx, d/dy of sum(w * (x op y)) over the padded rows, computed by hand in NumPy."""
    gx, gy = [], []
    for x, y, w in zip(xs, ys, w_rows):
        n = w.size
        xe, ye = np.pad(x, (0, n - x.size)), np.pad(y, (0, n - y.size))
        dx = {"add": w, "sub": w, "mul": w * ye}[op]
        dy = {"add": w, "sub": -w, "mul": w * xe}[op]
        gx.append(dx[: x.size])
        gy.append(dy[: y.size])
    return np.concatenate(gx), np.concatenate(gy)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_grad_vs_padded_reference_and_finite_differences(op):
    rng = np.random.default_rng(3)
    la, lb = [3, 0, 5, 1, 4096, 2], [1, 2, 5, 0, 7, 0]
    xs, ys = _random_rows(rng, la, np.float64), _random_rows(rng, lb, np.float64)
    a, b = vsla.ragged(xs, dtype=np.float64), vsla.ragged(ys, dtype=np.float64)
    lo = np.maximum(la, lb)
    w_rows = _random_rows(rng, lo, np.float64)
    w = np.concatenate(w_rows)

    def loss(p, q):
        out = {"add": p + q, "sub": p - q, "mul": p * q}[op]
        return ember.numpy.sum(out.values * w) + ember.numpy.sum(out.sum() ** 2)

    ga, gb = ember.grad(loss, argnums=(0, 1))(a, b)
    assert isinstance(ga, vsla.Ragged) and ga.lengths.tolist() == la
    # the row-sum term: d/d out of sum(rowsum(out)^2) is 2 * rowsum(out) on every element of the row
    out_rows = _padded_rows(xs, ys, op)
    w2 = [wr + 2 * o.sum() for wr, o in zip(w_rows, out_rows)]
    wx, wy = _loss_reference(xs, ys, w2, op)
    np.testing.assert_allclose(np.asarray(ga.values), wx, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(gb.values), wy, rtol=1e-10, atol=1e-10)
    # finite differences along a random direction
    d = rng.standard_normal(a.values.shape[0])
    f = lambda t: float(loss(vsla.Ragged(a.values + t * d, a.lengths), b))  # noqa: E731
    eps = 1e-6
    fd = (f(eps) - f(-eps)) / (2 * eps)
    np.testing.assert_allclose(fd, float(np.dot(np.asarray(ga.values), d)), rtol=1e-5)


def test_vjp_and_jvp():
    rng = np.random.default_rng(4)
    xs, ys = _random_rows(rng, [2, 5, 0], np.float64), _random_rows(rng, [4, 1, 3], np.float64)
    a, b = vsla.ragged(xs, dtype=np.float64), vsla.ragged(ys, dtype=np.float64)
    out, pull = ember.vjp(lambda p, q: (p * q).values, a, b)
    ct = rng.standard_normal(out.shape[0])
    ga, gb = pull(ct)
    cts = np.split(ct, np.cumsum([4, 5, 3])[:-1])
    wx, wy = _loss_reference(xs, ys, cts, "mul")
    np.testing.assert_allclose(np.asarray(ga.values), wx, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(gb.values), wy, rtol=1e-12)
    ta = vsla.Ragged(ember.numpy.asarray(rng.standard_normal(7)), a.lengths)
    _, tout = ember.jvp(lambda p: (p * b).values, (a,), (ta,))
    want = np.concatenate(_padded_rows(_rows(ta), ys, "mul"))
    np.testing.assert_allclose(np.asarray(tout), want, rtol=1e-12)


def test_bad_input_errors():
    a, b = vsla.ragged([[1.0], [2.0]]), vsla.ragged([[1.0]])
    with pytest.raises(ValueError, match=r"\+: the operands have 2 and 1 rows"):
        a + b
    with pytest.raises(TypeError, match="other must be a Ragged"):
        a + vsla.array([1.0])
    with pytest.raises(TypeError, match="other must be a Ragged"):
        a + 1.0
    with pytest.raises(ValueError, match=r"row 1 has rank 2 .* \(row 0 has rank 1\)"):
        vsla.ragged([[1.0], [[1.0, 2.0]]])
    with pytest.raises(ValueError, match="row 0 has rank 0"):
        vsla.ragged([1.0])
    with pytest.raises(TypeError, match="row 0: Ragged values need a numeric dtype"):
        vsla.ragged([np.array(["a", "b"])])
    with pytest.raises(TypeError, match="numeric dtype, got bool"):
        vsla.ragged([np.array([True])])
    with pytest.raises(ValueError, match="lengths must be >= 0, got -1 for row 1"):
        vsla.Ragged.from_lengths(np.zeros(3, np.float32), [4, -1])
    with pytest.raises(ValueError, match="the rows hold 4 elements but values has 3"):
        vsla.Ragged.from_lengths(np.zeros(3, np.float32), [1, 3])
    with pytest.raises(ValueError, match="values must be 1-D"):
        vsla.Ragged.from_lengths(np.zeros((3, 1), np.float32), [3])
    with pytest.raises(TypeError, match="lengths must be integers"):
        vsla.Ragged.from_lengths(np.zeros(3, np.float32), [1.5, 1.5])
    with pytest.raises(IndexError, match="index 2 out of range for 2 rows"):
        a.row(2)


def test_vsla_jit_of_ragged_values_is_one_program_for_every_length_set():
    f = vsla.jit(lambda a, b, c: (a + b, a * b - c, (a * b).mean(), 2.0 * c))
    rng = np.random.default_rng(8)
    for _ in range(22):
        rows = int(rng.integers(1, 9))
        la, lb, lc = (rng.integers(0, 70, rows) for _ in range(3))
        xs, ys, zs = _random_rows(rng, la), _random_rows(rng, lb), _random_rows(rng, lc)
        s, d, mean, twice = f(vsla.ragged(xs), vsla.ragged(ys), vsla.ragged(zs))
        assert isinstance(s, vsla.Ragged) and not s.symbolic
        for got, want in ((s, _padded_rows(xs, ys, "add")),
                          (d, _padded_rows(_padded_rows(xs, ys, "mul"), zs, "sub"))):
            assert got.lengths.tolist() == [w.size for w in want]
            for i, w in enumerate(want):  # the stored rows (values may hold slack past the last row)
                np.testing.assert_allclose(np.asarray(got.values)[got.offsets[i]:got.offsets[i + 1]], w,
                                           rtol=1e-6)
        want_mean = [w.mean() if w.size else 0.0 for w in _padded_rows(xs, ys, "mul")]
        np.testing.assert_allclose(np.asarray(mean), want_mean, rtol=1e-5, atol=1e-6)
        assert twice.lengths.tolist() == list(lc)
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] >= 20
    # a result is an ordinary Ragged again: it combines eagerly, and its views work
    r = s + s
    np.testing.assert_allclose(r.to_padded().to_numpy(), 2 * s.to_padded().to_numpy())
    with pytest.raises(ValueError, match="operands have"):  # different row counts: two row axes
        vsla.jit(lambda a, b: a + b)(vsla.ragged([[1.0]]), vsla.ragged([[1.0], [2.0]]))
    with pytest.raises(ember.errors.TracerError, match="runtime value"):
        vsla.jit(lambda a: a.to_padded())(vsla.ragged([[1.0]]))


def test_grad_through_vsla_jit():
    rng = np.random.default_rng(9)
    xs, ys = _random_rows(rng, [4, 0, 2], np.float64), _random_rows(rng, [1, 3, 5], np.float64)
    a, b = vsla.ragged(xs, dtype=np.float64), vsla.ragged(ys, dtype=np.float64)
    f = vsla.jit(lambda p, q: (p * q).sum())
    g = ember.grad(lambda p, q: ember.numpy.sum(f(p, q) ** 2), argnums=(0, 1))(a, b)
    w = [2 * o.sum() * np.ones(o.size) for o in _padded_rows(xs, ys, "mul")]
    wx, wy = _loss_reference(xs, ys, w, "mul")
    np.testing.assert_allclose(np.asarray(g[0].values)[:6], wx, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(g[1].values)[:9], wy, rtol=1e-10)


def test_plain_ember_jit_traces_per_length_set():
    a, b = vsla.ragged([[5.0], [2.0, 3.0]]), vsla.ragged([[1.0, 2.0, 3.0], [4.0]])
    f = ember.jit(lambda x, y: ((x * y + x).sum(), x - y))
    sums, diff = f(a, b)
    np.testing.assert_array_equal(np.asarray(sums), [10.0, 13.0])
    assert diff.lengths.tolist() == [3, 2]
    np.testing.assert_array_equal(np.asarray(diff.values), [4.0, -2.0, -3.0, -2.0, 3.0])


def _pad_to(v, shape):
    return np.pad(v, [(0, s - d) for s, d in zip(shape, v.shape)])


def _padded_nd(xs, ys, op):
    """Rank-r reference: each pair of rows padded by hand to the larger size on every axis."""
    out = []
    for x, y in zip(xs, ys):
        shape = tuple(max(a, b) for a, b in zip(x.shape, y.shape))
        out.append(NP_OPS[op](_pad_to(x, shape), _pad_to(y, shape)))
    return out


def _rows_nd(r):
    return [np.asarray(v.data)[tuple(slice(0, d) for d in v.shape)] for v in r.to_list()]


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
@pytest.mark.parametrize("rank", [2, 3])
def test_rows_of_rank_above_one_vs_padded_numpy(op, rank):
    rng = np.random.default_rng(rank * 10 + len(op))
    shapes_a = rng.integers(0, 6, (9, rank))
    shapes_b = rng.integers(0, 6, (9, rank))
    shapes_a[0], shapes_b[0] = [1] + [5] * (rank - 1), [5] + [1] * (rank - 1)  # (1, 5) + (5, 1): 25 elements
    xs = [rng.standard_normal(tuple(s)).astype(np.float32) for s in shapes_a]
    ys = [rng.standard_normal(tuple(s)).astype(np.float32) for s in shapes_b]
    a, b = vsla.ragged(xs), vsla.ragged(ys)
    assert a.rank == rank and a.shapes.tolist() == shapes_a.tolist()
    assert a.lengths.tolist() == [int(np.prod(s)) for s in shapes_a]
    got = {"add": a + b, "sub": a - b, "mul": a * b}[op]
    want = _padded_nd(xs, ys, op)
    assert got.shapes.tolist() == [list(w.shape) for w in want]
    for g, w in zip(_rows_nd(got), want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(got.sum()), [w.sum() for w in want], rtol=1e-5, atol=1e-5)
    # the padded view is vsla.stack of the rows
    assert got.to_padded() == vsla.stack([vsla.array(w) for w in want])


def test_rank_two_layout_constructors_grads_and_errors():
    x = np.arange(1.0, 7.0, dtype=np.float64)
    r = vsla.Ragged.from_shapes(x, [[2, 2], [1, 2]])
    assert r.rank == 2 and r.lengths.tolist() == [4, 2] and r.offsets.tolist() == [0, 4, 6]
    assert r.row(0).to_numpy().tolist() == [[1.0, 2.0], [3.0, 4.0]] and r.row(1).shape == (1, 2)
    q = vsla.Ragged.from_shapes(np.ones(4), [[1, 1], [3, 1]])
    s = r + q  # (2, 2) + (1, 1) and (1, 2) + (3, 1) -> (3, 2)
    assert s.shapes.tolist() == [[2, 2], [3, 2]]
    assert s.row(1).to_numpy().tolist() == [[6.0, 6.0], [1.0, 0.0], [1.0, 0.0]]
    # gradients: the slice back to each operand's rows, against the padded reference
    rng = np.random.default_rng(12)
    w = rng.standard_normal(int(s.offsets[-1]))
    ga, gb = ember.grad(lambda u, v: ember.numpy.sum((u * v).values * w), argnums=(0, 1))(r, q)
    ws = [w[:4].reshape(2, 2), w[4:].reshape(3, 2)]
    xa, xb = _rows_nd(r), _rows_nd(q)
    for i in range(2):
        pa, pb = _pad_to(xa[i], ws[i].shape), _pad_to(xb[i], ws[i].shape)
        (ma, na), (mb, nb) = xa[i].shape, xb[i].shape
        np.testing.assert_allclose(_rows_nd(ga)[i], (ws[i] * pb)[:ma, :na], rtol=1e-12)
        np.testing.assert_allclose(_rows_nd(gb)[i], (ws[i] * pa)[:mb, :nb], rtol=1e-12)
    # one compile for every set of row shapes
    rg._binary_fn.cache_clear()
    for _ in range(21):
        shp = rng.integers(0, 5, (int(rng.integers(1, 5)), 2))
        u = vsla.Ragged.from_shapes(rng.standard_normal(int(np.prod(shp, axis=1).sum())), shp)
        (u * u).sum()
    assert rg._binary_fn("mul", 2).cache_info()["compiles"] == 1
    # a rank-3 row table runs as the native call step
    table = np.array([[2, 1, 3, 1, 2, 2, 2, 2, 3]], np.int32)  # x (2, 1, 3), y (1, 2, 2), out (2, 2, 3)
    xv, yv = np.arange(1.0, 7.0, dtype=np.float32), np.arange(1.0, 5.0, dtype=np.float32)
    got, _ = run_with_call_step(lambda p, t, u: rg.ragged_binary(p, t, u, op="add", roles=(0, 3, 6), total=12,
                                                                 rank=3), "ragged_binary", xv, yv, table)
    want = np.zeros((2, 2, 3), np.float32)
    want[:2, :1, :3] += xv.reshape(2, 1, 3)
    want[:1, :2, :2] += yv.reshape(1, 2, 2)
    np.testing.assert_array_equal(got, want.ravel())
    with pytest.raises(ValueError, match="ranks 2 and 1"):
        r + vsla.ragged([[1.0], [2.0]])
    with pytest.raises(ValueError, match="rank 2 need the shapes on the host"):
        vsla.jit(lambda u, v: u + v)(r, q)
    with pytest.raises(ValueError, match="the rows hold 6 elements but values has 5"):
        vsla.Ragged.from_shapes(np.ones(5), [[2, 2], [1, 2]])
    with pytest.raises(ValueError, match=r"shapes must be >= 0, got \[1, -2\] for row 1"):
        vsla.Ragged.from_shapes(np.ones(5), [[2, 2], [1, -2]])


def _trim(x):
    nz = np.flatnonzero(x)
    return x[: nz[-1] + 1] if nz.size else x[:0]


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_rowwise_conv_and_kron_match_numpy(dtype):
    rng = np.random.default_rng(41)
    la, lb = [0, 1, 5, 3, 20, 2], [4, 3, 0, 1, 7, 2]
    xs, ys = _random_rows(rng, la, dtype), _random_rows(rng, lb, dtype)
    xs[3][-1] = 0  # a trailing zero: kron uses the minimal representative
    ys[5][:] = 0   # an all-zero row
    a, b = vsla.ragged(xs, dtype=dtype), vsla.ragged(ys, dtype=dtype)
    c, k = a.conv(b), a.kron(b)
    assert c.dtype == dtype and k.dtype == dtype
    assert c.lengths.tolist() == [0 if m == 0 or n == 0 else m + n - 1 for m, n in zip(la, lb)]
    for i, (x, y) in enumerate(zip(xs, ys)):
        want_c = np.convolve(x, y) if x.size and y.size else np.zeros(0)
        np.testing.assert_allclose(np.asarray(c.row(i).logical()), want_c, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(k.row(i).logical()), np.kron(_trim(x), _trim(y)))
    fft = a.conv(b, method="fft")
    np.testing.assert_allclose(np.asarray(fft.values), np.asarray(c.values), rtol=1e-4, atol=1e-4)


def test_rowwise_conv_and_kron_gradients():
    a = vsla.ragged([[1.0, 2.0, 0.0], [3.0], []], dtype=np.float64)
    b = vsla.ragged([[1.0, -1.0], [2.0, 5.0, 0.5], [4.0]], dtype=np.float64)
    # d/da sum(conv(a_i, b_i)) = sum(b_i) at every entry of row i; kron of minimal representatives:
    # sum(b_i) on the first ma_i entries of row i, 0 past them
    gc = ember.grad(lambda x: ember.numpy.sum(x.conv(b).sum()))(a)
    np.testing.assert_allclose(np.asarray(gc.values), [0.0, 0.0, 0.0, 7.5])
    gk = ember.grad(lambda x: ember.numpy.sum(x.kron(b).sum()))(a)
    np.testing.assert_allclose(np.asarray(gk.values), [0.0, 0.0, 0.0, 7.5])
    gb = ember.grad(lambda y: ember.numpy.sum(a.conv(y).sum()))(b)
    np.testing.assert_allclose(np.asarray(gb.values), [3.0, 3.0, 3.0, 3.0, 3.0, 0.0])


def test_rowwise_conv_and_kron_errors():
    a = vsla.ragged([[1.0], [2.0]])
    with pytest.raises(ValueError, match="2 and 1 rows"):
        a.conv(vsla.ragged([[1.0]]))
    with pytest.raises(TypeError, match="must be a Ragged"):
        a.kron(vsla.array([1.0]))
    with pytest.raises(ValueError, match="rank 1"):
        vsla.ragged([np.ones((2, 2))]).conv(vsla.ragged([np.ones((1, 1))]))


def test_rowwise_conv_and_kron_under_vsla_jit_one_compile(dtype=np.float32):
    """Ragged.conv / Ragged.kron inside vsla.jit: np.convolve / np.kron per row for every set of
    lengths (empty, all-zero and trailing-zero rows, rows past the FFT threshold), one compile."""
    rng = np.random.default_rng(43)
    f = vsla.jit(lambda p, q: (p.conv(q), p.kron(q), p.conv(q, method="direct"), (p + q).conv(p)))
    layouts = [([3, 1, 5], [2, 4, 1]), ([0, 2, 7, 40], [3, 0, 2, 30]), ([9], [9]), ([1, 1], [1, 2])]
    for la, lb in layouts:
        xs, ys = _random_rows(rng, la, dtype), _random_rows(rng, lb, dtype)
        if xs[-1].size:
            xs[-1][-1] = 0  # a trailing zero: kron uses the minimal representative
        a, b = vsla.ragged(xs, dtype=dtype), vsla.ragged(ys, dtype=dtype)
        c, k, d, s = f(a, b)
        assert c.dtype == k.dtype == dtype
        assert c.lengths.tolist() == [0 if m == 0 or n == 0 else m + n - 1 for m, n in zip(la, lb)]
        for i, (x, y) in enumerate(zip(xs, ys)):
            want = np.convolve(x, y) if x.size and y.size else np.zeros(0)
            tol = 1e-4 * max(1.0, float(np.abs(want).max(initial=0)))
            np.testing.assert_allclose(np.asarray(c.row(i).logical()), want, rtol=1e-5, atol=tol)
            exact = np.convolve(x.astype(np.float64), y.astype(np.float64)) if x.size and y.size else want
            np.testing.assert_allclose(np.asarray(d.row(i).logical()), exact.astype(dtype), rtol=2.4e-7)
            np.testing.assert_array_equal(np.asarray(k.row(i).logical()), np.kron(_trim(x), _trim(y)))
            z = np.zeros(max(x.size, y.size), dtype)
            z[: x.size] += x
            z[: y.size] += y
            ws = np.convolve(z, x) if z.size and x.size else np.zeros(0)
            np.testing.assert_allclose(np.asarray(s.row(i).logical()), ws, rtol=1e-5, atol=tol)
    assert f.cache_info()["compiles"] == 1
    # ember.grad through the jitted program: d/da sum(conv(a_i, b_i)) = sum(b_i) on row i
    a = vsla.ragged([[1.0, 2.0, 0.0], [3.0], []])
    b = vsla.ragged([[1.0, -1.0], [2.0, 5.0, 0.5], [4.0]])
    h = vsla.jit(lambda p, q: p.conv(q).sum())
    g = ember.grad(lambda p: ember.numpy.sum(h(p, b)))(a)
    np.testing.assert_allclose(np.asarray(g.values), [0.0, 0.0, 0.0, 7.5])
