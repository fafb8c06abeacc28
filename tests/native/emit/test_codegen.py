"""Generated code agrees with the reference executor. Each program batches many ops so the number
of compiles (the slow part) stays small."""

from __future__ import annotations

import numpy as np
import pytest

import ember.numpy as jnp
from ember import lax
from tests.native.conftest import requires_cc
from tests.native.util import check, row_softmax, without_calls

pytestmark = requires_cc
RNG = np.random.default_rng(0)
SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, 3e38, -1.5], np.float32)


def _floats(shape, dtype=np.float32):
    x = RNG.standard_normal(shape).astype(dtype)
    x.flat[:len(SPECIALS)] = SPECIALS.astype(dtype)
    return x


UNARY = ["neg", "sign", "floor", "ceil", "round", "is_finite", "exp", "exp2", "log", "log1p", "expm1", "tanh",
         "logistic", "sin", "cos", "tan", "atan", "sinh", "cosh", "asinh", "sqrt", "rsqrt", "cbrt", "abs",
         "erf", "erfc"]


def unary_all(x):
    outs = [getattr(lax, n)(x) for n in UNARY]
    t = jnp.tanh(x)
    outs += [lax.asin(t), lax.acos(t), lax.atanh(t * 0.5), lax.acosh(jnp.abs(x) + 1.0), lax.round(x * 3, 1),
             lax.lgamma(jnp.abs(x) + 0.5)]  # C and SciPy differ on lgamma(-inf) only
    return tuple(outs)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_float(dtype):
    x = _floats((6, 9), dtype)
    rtol, atol = (2e-6, 1e-6) if dtype == np.float32 else (1e-13, 1e-13)
    exe = check(unary_all, x, rtol=rtol, atol=atol)
    assert exe.schedule.count("fallback") == 0


def binary_all(x, y):
    return (x + y, x - y, x * y, x / y, lax.rem(x, y), lax.pow(jnp.abs(x), y), lax.max(x, y), lax.min(x, y),
            lax.atan2(x, y), lax.nextafter(x, y), x == y, x != y, x < y, x <= y, x > y, x >= y,
            lax.select(x > y, x, y), lax.integer_pow(x, 3), lax.integer_pow(x, -2), lax.integer_pow(x, 0),
            lax.convert_element_type(x * 100, np.int32), lax.convert_element_type(x, np.bool_),
            lax.convert_element_type(x, np.uint8), lax.convert_element_type(y * 1e12, np.int64))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_binary_float(dtype):
    x, y = _floats((5, 8), dtype), RNG.standard_normal((5, 8)).astype(dtype)
    y[0, :3] = [0.0, np.nan, -np.inf]
    check(binary_all, x, y, rtol=1e-5 if dtype == np.float32 else 1e-12)


def int_all(a, b):
    return (a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), lax.max(a, b), lax.min(a, b), -a, lax.abs(a),
            lax.sign(a), a & b, a | b, a ^ b, ~a, lax.shift_left(a, b), lax.shift_right_arithmetic(a, b),
            lax.shift_right_logical(a, b), lax.population_count(lax.abs(a)), a == b, a < b,
            lax.convert_element_type(a, np.float32), lax.integer_pow(a, 2),
            lax.convert_element_type(a, np.int8),
            lax.convert_element_type(a, np.uint16), lax.convert_element_type(a, np.int64),
            lax.select(a > b, a, b), lax.reduce_sum(a, (1,)), lax.reduce_max(a, (0,)),
            lax.argmin(a, 1, np.int32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integers(dtype):
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -1000), min(info.max, 1000), (5, 7)).astype(dtype)
    b = RNG.integers(-9, 9, (5, 7)).astype(dtype)
    a[0, :3], b[0, :3] = [info.min, info.max, 7], [-1, 0, 0]  # MIN / -1, x / 0 and x % 0 are defined
    check(int_all, a, b)


def test_unsigned():
    a = RNG.integers(0, 2**32 - 1, (4, 6), dtype=np.uint64).astype(np.uint32)
    b = RNG.integers(0, 9, (4, 6)).astype(np.uint32)
    check(lambda a, b: (a + b, a - b, a * b, lax.div(a, b), lax.rem(a, b), lax.max(a, b), a >> b, a << b,
                        lax.convert_element_type(a, np.float32), lax.reduce_sum(a, (0,))), a, b)


def test_bool():
    a, b = RNG.standard_normal((5, 6)) > 0, RNG.standard_normal((5, 6)) > 0.3
    check(lambda a, b: (a & b, a | b, a ^ b, ~a, a == b, lax.select(a, b, a),
                        lax.convert_element_type(a, np.float32),
                        lax.reduce_or(a, (1,)), lax.reduce_and(a, (0,)), lax.reduce_sum(a, (1,)),
                        lax.reduce_max(a, (0, 1)), lax.reduce_prod(a, (0,)),
                        lax.argmax(a, 1, np.int32)), a, b)


def test_broadcasting_numpy_style():
    x, v, s = _floats((4, 5, 6)), RNG.standard_normal(6).astype(np.float32), np.float32(2.5)
    col = RNG.standard_normal((4, 1, 1)).astype(np.float32)
    check(lambda x, v, s, c: (x + v, x * s - c, jnp.where(x > v, x, c), jnp.maximum(v, c)), x, v, s, col)


def reductions(x):
    outs = []
    for axes in [(0,), (1,), (2,), (0, 1), (1, 2), (0, 2), (0, 1, 2)]:
        outs += [lax.reduce_sum(x, axes), lax.reduce_max(x, axes), lax.reduce_min(x, axes),
                 lax.reduce_prod(x, axes)]
    outs += [lax.argmax(x, a, np.int32) for a in range(3)] + [lax.argmin(x, a, np.int64) for a in range(3)]
    return tuple(outs)


def test_reductions_all_axes_with_nan():
    x = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x[1, 2, 3] = np.nan
    x[0, 0, :] = np.nan
    x[2, 3, 1] = -np.inf
    check(reductions, x, rtol=1e-5, atol=1e-5)


def test_reductions_large_and_parallel():
    x = RNG.standard_normal((512, 768)).astype(np.float32)
    check(lambda x: (lax.reduce_sum(x, (1,)), lax.reduce_max(x, (0,)), lax.reduce_sum(x, (0, 1)),
                     lax.argmax(x, 1, np.int32), jnp.exp(x) * 2.0), x, rtol=1e-4, atol=1e-3,
          parallel_threshold=1)


def test_movement():
    x = _floats((3, 4, 5))

    def f(x):
        return (lax.transpose(x, (2, 0, 1)), lax.reshape(x, (12, 5)), lax.rev(x, (0, 2)),
                lax.slice(x, (1, 0, 1), (3, 4, 5), (1, 2, 2)),
                lax.pad(x, np.float32(-1), ((1, 2, 0), (0, -1, 1), (2, 0, 2))),
                lax.concatenate([x, x * 2, x[:, :1]], 1),
                lax.broadcast_in_dim(x[:, :1, :], (2, 3, 4, 5), (1, 2, 3)),
                lax.broadcasted_iota(np.int32, (3, 4), 1) + 1, jnp.exp(lax.transpose(x, (1, 2, 0))) + 1,
                lax.reshape(lax.transpose(x, (0, 2, 1)), (15, 4)) * 2, lax.reshape(x, (60,))[7:50:3],
                lax.iota(np.float32, 7) * 0.5, x[1], x[:, 2, ::-1])

    check(f, x)


def test_gather():
    emb = RNG.standard_normal((10, 4)).astype(np.float32)
    idx = np.array([[1, 3, 9], [0, 0, 12]], np.int32)
    check(lambda e, i: (lax.take(e, i, 0) * 2, lax.take(e, i, 0, mode="fill"), lax.take(e, i[0], 1),
                        lax.take(e, i + 1, 0)), emb, idx)


def matmuls(a, b):
    return (lax.dot(a, b), lax.dot(a, b) * 0.5 + 1.0, lax.dot_general(b, a, (((0,), (1,)), ((), ()))),
            lax.dot_general(a, a, (((0,), (0,)), ((), ()))),
            lax.dot(lax.transpose(b, (1, 0)), lax.transpose(a, (1, 0))) * -2.0,
            jnp.maximum(lax.dot(a, b) + lax.broadcast_in_dim(b[0], (6, 4), (1,)), 0.0),
            lax.dot(a[0, :5], b), lax.dot(a, b[:, 1]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matmul_transposes_alpha_bias(dtype):
    a, b = RNG.standard_normal((6, 5)).astype(dtype), RNG.standard_normal((5, 4)).astype(dtype)
    exe = check(matmuls, a, b, rtol=1e-5 if dtype == np.float32 else 1e-12,
                atol=1e-5 if dtype == np.float32 else 1e-12)
    assert exe.schedule.count("gemm") >= 6


def test_matmul_batched_int_bool_and_empty():
    q = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    k = RNG.standard_normal((2, 3, 6, 5)).astype(np.float32)
    check(lambda q, k: (lax.dot_general(q, k, (((3,), (3,)), ((0, 1), (0, 1)))) * 0.25,
                        lax.dot_general(q, k, (((3, 1), (3, 1)), ((0,), (0,))))), q, k, rtol=1e-5, atol=1e-5)
    a, b = RNG.integers(-9, 9, (6, 5)).astype(np.int32), RNG.integers(-9, 9, (5, 4)).astype(np.int32)
    check(lambda a, b: (lax.dot(a, b), lax.dot(a.T, a), lax.dot(a > 0, b > 0)), a, b)
    e1, e2 = np.ones((3, 0), np.float32), np.ones((0, 2), np.float32)
    check(lambda a, b: (lax.dot(a, b), lax.dot(b.T, a.T)), e1, e2)


def test_softmax_layernorm_mlp():
    x = RNG.standard_normal((16, 32)).astype(np.float32)
    w1 = RNG.standard_normal((32, 64)).astype(np.float32)
    w2 = RNG.standard_normal((64, 32)).astype(np.float32)
    g, b = RNG.standard_normal(32).astype(np.float32), RNG.standard_normal(32).astype(np.float32)

    def block(x, w1, w2, g, b):
        n = x.shape[-1]
        mean = lax.reduce_sum(x, (1,)) / n
        xc = x - lax.broadcast_in_dim(mean, x.shape, (0,))
        var = lax.reduce_sum(xc * xc, (1,)) / n
        h = xc * lax.broadcast_in_dim(lax.rsqrt(var + 1e-5), x.shape, (0,)) * g + b
        h = jnp.maximum(lax.dot(h, w1) + 0.1, 0.0)
        y = lax.dot(h, w2)
        m = lax.reduce_max(y, (1,))
        e = jnp.exp(y - lax.broadcast_in_dim(m, y.shape, (0,)))
        return x + e / lax.broadcast_in_dim(lax.reduce_sum(e, (1,)), y.shape, (0,))

    exe = check(block, x, w1, w2, g, b, rtol=1e-4, atol=1e-5)
    assert exe.schedule.count("kernel") <= 4


def test_fallback_steps_run_numpy_impl_inside_the_native_call(monkeypatch):
    without_calls(monkeypatch, "sort", "cumsum", "cummax")
    x = _floats((5, 7))
    x[np.isnan(x)] = 0
    exe = check(lambda x: (lax.sort(x, 1), lax.cumsum(x, 0), lax.exp(lax.sort(x, 0)) + 1,
                           lax.cummax(x, 1)), x)
    assert exe.schedule.count("fallback") >= 3 and exe.schedule.count("kernel") >= 1


def test_outputs_aliasing_inputs_literals_and_each_other():
    x = _floats((3, 4))
    check(lambda x: (x, x.reshape(12), x * 0 + 2, jnp.exp(x), jnp.exp(x).reshape(4, 3)), x)


def test_scalar_and_empty_shapes():
    check(lambda x: (jnp.exp(x) + 1, x * 2), np.float32(2.0))
    check(lambda x: (lax.reduce_sum(x, (0, 1)), lax.reduce_sum(x, (0,)), x + 1), np.ones((0, 3), np.float32))


def test_in_place_reuse_is_correct():
    x = RNG.standard_normal((64, 64)).astype(np.float32)

    def f(x):
        a = jnp.exp(x)          # dies in the next kernel, which may write over it
        b = lax.sort(a, 1)      # fallback forces a to be materialized
        c = b * 2.0 + 1.0       # elementwise on a dying buffer: in place
        return lax.sort(c, 0) - 1.0

    exe = check(f, x, rtol=1e-5, atol=1e-5)
    assert exe.plan.inplace


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_vector_products_use_gemv_correctly(dtype):
    a = RNG.standard_normal((1, 7)).astype(dtype)
    b = RNG.standard_normal((7, 5)).astype(dtype)
    c = RNG.standard_normal((3, 1, 7)).astype(dtype)
    d = RNG.standard_normal((3, 7, 4)).astype(dtype)

    def f(a, b, c, d):
        t = lambda x: lax.transpose(x, (1, 0))  # noqa: E731
        return (lax.dot(a, b), lax.dot(a, t(t(b))) * 2.0 + 1.0, lax.dot(t(b), t(a)),  # m == 1 / n == 1
                lax.dot_general(b, a, (((0,), (1,)), ((), ()))),  # n == 1 with transposed lhs
                lax.dot_general(a, b.T.copy(), (((1,), (1,)), ((), ()))),  # m == 1, trans_b
                lax.dot_general(c, d, (((2,), (1,)), ((0,), (0,)))),  # batched, m == 1
                lax.dot_general(d, c, (((1,), (2,)), ((0,), (0,)))))  # batched, n == 1, trans_a

    exe = check(f, a, b, c, d, rtol=1e-5 if dtype == np.float32 else 1e-12)
    assert "gemv" in exe.source


def test_regressions_from_the_full_suite_on_native():
    # zero-size operands read through a reshape (division by a zero stride while building indices)
    a, b = np.ones((0,), np.float32), np.ones((3,), np.float32)
    check(lambda a, b: (lax.reshape(a, (0, 1)) * lax.reshape(b, (1, 3)), lax.reduce_sum(a, (0,)) + b), a, b)
    # a gather at a constant index (the index node is a literal, not a temporary)
    x = RNG.standard_normal((8,)).astype(np.float32)
    check(lambda x: (lax.take(x, np.array([7], np.int32), 0) + x[3], lax.take(x, np.int32(2), 0) * x), x)


def test_parallel_rows_with_row_cache_cap_their_team():
    x = RNG.standard_normal((64, 48)).astype(np.float32)

    exe = check(row_softmax, x, parallel_threshold=1)
    from ember._src.native.runtime import toolchain
    if toolchain.find_compiler().has_openmp:
        assert "omp_get_thread_num" in exe.source and "num_threads(" in exe.source


def test_scratch_kernel_team_follows_omp_max_threads():
    """A parallel kernel with per-thread row caches (softmax) caps its team at the planned
    workspace count *and* at omp_get_max_threads() (OMP_NUM_THREADS), and stays exact."""
    import ember
    from ember._src.native.runtime import toolchain

    if not toolchain.find_compiler().has_openmp:
        pytest.skip("no OpenMP: kernels are sequential")
    x = RNG.standard_normal((512, 300)).astype(np.float32)
    f = ember.jit(lambda a: ember.nn.softmax(a, axis=-1), backend="native", parallel_threshold=1000)
    src = f.lower(x).executable.source
    assert "omp_get_max_threads()" in src
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(f(x)), e / e.sum(axis=-1, keepdims=True), rtol=2e-6, atol=1e-7)
