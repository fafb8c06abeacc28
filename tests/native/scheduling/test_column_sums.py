"""Float sums over leading axes (column reductions) in row blocks combined pairwise, natively
(:mod:`ember._src.native.scheduling.blockreduce`) and eagerly (``prims.reductions._sum_impl``):
float32 ``sum``/``mean``/``var``/``std``/``norm`` over 10^4+ rows within 1e-6 of a float64 NumPy
reference in both modes (one running accumulator per column was off by more), the same bits on
every thread count, NaN and infinity propagation, other reductions of the same kernel untouched."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src.native.scheduling import blockreduce
from tests.native.conftest import requires_cc

pytestmark = requires_cc
RNG = np.random.default_rng(36)


def _data(shape, dtype=np.float32, seed=36):
    # an offset mean makes every column sum large against its terms: the case naive sums lose.
    # Seeded by the shape, so a test's data does not depend on which tests ran before it in the
    # same process (pytest-xdist deals tests out differently from run to run).
    return (np.random.default_rng([seed, *shape]).standard_normal(shape) + 3).astype(dtype)


def _rel(got, want):
    return float(np.max(np.abs(np.asarray(got, np.float64) - want) / np.abs(want)))


FUNCS = {
    "sum": (lambda a, ax: jnp.sum(a, axis=ax), lambda a, ax: a.sum(axis=ax)),
    "mean": (lambda a, ax: jnp.mean(a, axis=ax), lambda a, ax: a.mean(axis=ax)),
    "var": (lambda a, ax: jnp.var(a, axis=ax), lambda a, ax: a.var(axis=ax)),
    "std": (lambda a, ax: jnp.std(a, axis=ax), lambda a, ax: a.std(axis=ax)),
    "norm": (lambda a, ax: jnp.linalg.norm(a, axis=ax), lambda a, ax: np.linalg.norm(a, axis=ax)),
}


@pytest.mark.parametrize("name", sorted(FUNCS))
@pytest.mark.parametrize("shape,axis", [((10_000,), None), ((40_000, 8), 0), ((10_000, 8), None),
                                        ((8, 20_000, 3), 1)])
def test_float32_reductions_eager_and_jit_match_float64(name, shape, axis):
    f, ref = FUNCS[name]
    x = _data(shape)
    want = ref(x.astype(np.float64), axis)
    eager = f(x, axis)
    jitted = ember.jit(lambda a: f(a, axis), backend="native")(x)
    assert _rel(eager, want) < 1e-6
    assert _rel(jitted, want) < 1e-6
    np.testing.assert_allclose(np.asarray(eager), np.asarray(jitted), rtol=1e-6)


def test_column_sum_runs_in_row_blocks():
    x = _data((3 * blockreduce.COLUMN_BLOCK + 5, 4))
    src = ember.jit(lambda a: jnp.sum(a, axis=0), backend="native").lower(x).executable.source
    assert f"b_ * {blockreduce.COLUMN_BLOCK}" in src  # blocked rows
    np.testing.assert_allclose(np.asarray(ember.jit(lambda a: jnp.sum(a, axis=0))(x)),
                               x.astype(np.float64).sum(0), rtol=1e-6)


@pytest.mark.parametrize("rows", [2 * blockreduce.COLUMN_BLOCK - 1, 2 * blockreduce.COLUMN_BLOCK,
                                  7 * blockreduce.COLUMN_BLOCK + 1, 64 * blockreduce.COLUMN_BLOCK])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_every_row_counted_once(rows, dtype):
    # exactly representable terms: any lost or doubled block shows as an exact mismatch
    x = RNG.integers(-8, 9, size=(rows, 5)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.integers(-8, 9, size=(rows, 5))
    want = x.astype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64).sum(0)
    f = ember.jit(lambda a: (jnp.sum(a, axis=0), jnp.sum(a[:, :, None] * a[:, None, :2], axis=0)))
    s, outer = f(x)
    np.testing.assert_array_equal(np.asarray(s), want.astype(dtype))
    np.testing.assert_array_equal(np.asarray(outer), (x[:, :, None] * x[:, None, :2]).sum(0))
    np.testing.assert_array_equal(np.asarray(jnp.sum(x, axis=0)), want.astype(dtype))


def test_middle_axis_and_several_leading_axes():
    x = _data((6, 5000, 7))
    y = _data((70, 80, 6))
    for f, a, want in [(lambda a: jnp.sum(a, axis=1), x, x.astype(np.float64).sum(1)),
                       (lambda a: jnp.sum(a, axis=(0, 1)), y, y.astype(np.float64).sum((0, 1))),
                       (lambda a: jnp.sum(a, axis=(0, 2)), x, x.astype(np.float64).sum((0, 2)))]:
        assert _rel(ember.jit(f, backend="native")(a), want) < 1e-6
        assert _rel(f(a), want) < 1e-6


def test_same_bits_on_every_thread_count():
    x = _data((64, 2000, 16))
    outs = [np.asarray(ember.jit(lambda a: jnp.sum(a, axis=1), backend="native", num_threads=t,
                                 parallel_threshold=1000)(x)) for t in (1, 2, 3)]
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    assert _rel(outs[0], x.astype(np.float64).sum(1)) < 1e-6


def test_max_min_and_integer_sums_beside_blocked_sums():
    x = _data((3000, 6))
    x[1234, 2] = 50.0
    xi = RNG.integers(-1000, 1000, size=(3000, 6)).astype(np.int32)
    f = ember.jit(lambda a, b: (jnp.sum(a, 0), jnp.max(a, 0), jnp.min(a, 0), jnp.sum(b, 0)))
    s, mx, mn, si = f(x, xi)
    assert _rel(s, x.astype(np.float64).sum(0)) < 1e-6
    np.testing.assert_array_equal(np.asarray(mx), x.max(0))
    np.testing.assert_array_equal(np.asarray(mn), x.min(0))
    np.testing.assert_array_equal(np.asarray(si), xi.sum(0))


def test_nan_and_inf_propagate():
    x = _data((1000, 4))
    x[5, 0], x[900, 1], x[10, 2], x[700, 2] = np.nan, np.inf, np.inf, -np.inf
    with np.errstate(invalid="ignore"):
        want = x.astype(np.float64).sum(0)
    for got in (ember.jit(lambda a: jnp.sum(a, axis=0))(x), jnp.sum(x, axis=0)):
        got = np.asarray(got)
        assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2])
        assert _rel(got[3], want[3]) < 1e-6


def test_dynamic_rows_and_gradient():
    x = _data((3000, 4))
    def colsum(a):
        return jnp.sum(a, axis=0)

    f = ember.jit(colsum, dynamic_axes={"a": ("n", None)})
    np.testing.assert_allclose(np.asarray(f(x)), x.astype(np.float64).sum(0), rtol=1e-5)
    g = ember.jit(ember.grad(lambda a: jnp.sum(jnp.sum(a, axis=0) ** 2)))(x)
    np.testing.assert_allclose(np.asarray(g), np.broadcast_to(2 * x.astype(np.float64).sum(0), x.shape),
                               rtol=1e-5)


def test_column_sum_inside_a_compiled_scan_body():
    from ember import lax

    xs = _data((3, 1000, 4))

    def f(v):
        def body(c, x):
            return c + jnp.sum(x, axis=0), jnp.sum(x, axis=0)

        return lax.scan(body, jnp.zeros(4, jnp.float32), v)

    jf = ember.jit(f, backend="native")
    assert f"b_ * {blockreduce.COLUMN_BLOCK}" in jf.lower(xs).executable.source
    total, sums = jf(xs)
    want = xs.astype(np.float64).sum(1)
    assert _rel(sums, want) < 1e-6 and _rel(total, want.sum(0)) < 1e-6


def test_long_row_reductions_run_in_blocks():
    # a fused variance over a strided middle axis of 20,000: one running accumulator per output
    # gave 7.1e-7 relative for this data, blocks 1.9e-7
    from ember._src.native.scheduling import blockreduce

    x = _data((8, 20_000, 3), seed=190)
    f = ember.jit(lambda a: jnp.var(a, axis=1), backend="native")
    assert f"rb_ += {blockreduce.ROW_BLOCK}" in f.lower(x).executable.source
    assert _rel(f(x), x.astype(np.float64).var(axis=1)) < 4e-7
    # contiguous rows, a tail block, and a row of exactly two blocks
    # (the last: more than ROW_GROUP blocks, whose sums are added per group first)
    for n in (2 * blockreduce.ROW_BLOCK, 5 * blockreduce.ROW_BLOCK + 17,
              blockreduce.ROW_GROUP * blockreduce.ROW_BLOCK + 3 * blockreduce.ROW_BLOCK + 5):
        y = _data((2, n), seed=n)
        got = ember.jit(lambda a: (jnp.sum(a * a, axis=1), jnp.max(a, axis=1)), backend="native")(y)
        assert _rel(got[0], (y.astype(np.float64) ** 2).sum(1)) < 3e-7
        np.testing.assert_array_equal(np.asarray(got[1]), y.max(1))
