"""Complex values on the native backend (c_complex.py): each complex op with a C rendering runs in
a fused kernel and agrees with NumPy (special values included); ops without one run as fallback
steps inside the same native program and still give NumPy's results."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from tests.native.conftest import requires_cc

pytestmark = requires_cc
CDTYPES = [np.complex64, np.complex128]


def data(dtype, n=64, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n) * 3 + 1j * rng.standard_normal(n) * 3
    special = [0, 1, -1, 1j, -1j, complex(-1, -0.0), complex(-2, 0.0), complex(0.5, -0.0), 3 + 4j,
               -7.5 + 0.25j]
    return np.concatenate([z, special]).astype(dtype)


def native(f, *args, kernels=True):
    jf = ember.jit(f, backend="native")
    out = jf(*args)
    sched = jf.lower(*args).executable.schedule
    if kernels:
        assert sched.count("fallback") == 0 and sched.count("kernel") >= 1, str(sched)
    return out, sched


def close(got, want, dtype, rtol=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    single = np.dtype(dtype) in (np.complex64, np.float32)
    tol = rtol or (4e-6 if single else 1e-14)
    wide = np.complex128 if got.dtype.kind == "c" else np.float64
    np.testing.assert_allclose(got.astype(wide), want.astype(wide), rtol=tol, atol=tol, equal_nan=True)


UNARY = {
    "exp": (jnp.exp, np.exp), "log": (jnp.log, np.log), "sqrt": (jnp.sqrt, np.sqrt),
    "sin": (jnp.sin, np.sin), "cos": (jnp.cos, np.cos), "tan": (jnp.tan, np.tan),
    "sinh": (jnp.sinh, np.sinh), "cosh": (jnp.cosh, np.cosh), "tanh": (jnp.tanh, np.tanh),
    "arcsin": (jnp.arcsin, np.arcsin), "arccos": (jnp.arccos, np.arccos), "arctan": (jnp.arctan, np.arctan),
    "arcsinh": (jnp.arcsinh, np.arcsinh), "arccosh": (jnp.arccosh, np.arccosh),
    "arctanh": (jnp.arctanh, np.arctanh), "conj": (jnp.conj, np.conj), "real": (jnp.real, np.real),
    "imag": (jnp.imag, np.imag), "abs": (jnp.abs, np.abs), "neg": (jnp.negative, np.negative),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", CDTYPES)
def test_unary(name, dtype):
    ef, nf = UNARY[name]
    z = data(dtype)
    if name == "arctan" or name == "arctanh":
        z = z[np.abs(np.abs(z.imag if name == "arctan" else z.real) - 1) > 1e-3]  # off the poles
    got, _ = native(ef, z)
    with np.errstate(all="ignore"):
        want = nf(z)
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_arithmetic_matches_numpy_bitwise(dtype):
    """mul and div use NumPy's formulas (no FMA contraction under -std=c11): bit-identical results."""
    a, b = data(dtype, seed=1), data(dtype, seed=2)[::-1].copy()
    for ef, nf in ((lambda x, y: x * y, np.multiply), (lambda x, y: x / y, np.divide),
                   (lambda x, y: x + y, np.add), (lambda x, y: x - y, np.subtract)):
        got, _ = native(ef, a, b)
        with np.errstate(all="ignore"):
            want = nf(a, b)
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_division_extremes(dtype):
    """Smith's algorithm: huge and tiny divisors without overflow; a zero divisor gives inf/NaN parts."""
    big = 1e30 if dtype == np.complex64 else 1e300
    a = np.array([1 + 1j, 2 - 3j, 1 + 0j, 0j, 1 + 1j, 4 + 2j], dtype)
    b = np.array([big + big * 1j, 1 / big + 1j / big, 0j, 0j, 3 + 0j, 0 + 2j], dtype)
    got, _ = native(lambda x, y: x / y, a, b)
    with np.errstate(all="ignore"):
        want = a / b
    np.testing.assert_array_equal(np.asarray(got), want)
    assert np.isfinite(np.asarray(got)[:2]).all()


@pytest.mark.parametrize("dtype", CDTYPES)
def test_comparisons_select_and_literals(dtype):
    a, b = data(dtype, seed=3), data(dtype, seed=3)
    b[::3] += 1j

    def f(x, y):
        w = jnp.where(x == y, x * (2 - 0.5j), jnp.conj(y))
        return w, x != y

    (got, ne), _ = native(f, a, b)
    np.testing.assert_array_equal(np.asarray(ne), a != b)
    close(got, np.where(a == b, a * np.asarray(2 - 0.5j, dtype), np.conj(b)), dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("y", [0, 1, 2, 3, 7, -1, -4])
def test_integer_pow(dtype, y):
    z = data(dtype)[:40] / 3
    got, _ = native(lambda x: lax.integer_pow(x, y), z, kernels=y != 1)  # x ** 1 simplifies to x
    with np.errstate(all="ignore"):
        want = z.astype(np.complex128) ** y
    close(got, want.astype(dtype), dtype, rtol=4e-5 if dtype == np.complex64 else 1e-13)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("y", [2, 3])
def test_integer_pow_of_infinite_parts_matches_numpy(dtype, y):
    """x ** 2 and x ** 3 are x * x and x * (x * x), as NumPy's complex power: no product with
    1 + 0i, whose 0 times an infinite part made NaN (square(inf - 0.96j) was inf + nan*j)."""
    big = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max
    z = np.array([complex(np.inf, -0.96), complex(-big, -0.02), complex(0.5, np.inf), complex(-np.inf, 0),
                  complex(2, -3)], dtype)
    got, _ = native(lambda x: lax.integer_pow(x, y), z)
    with np.errstate(all="ignore"):
        want = z ** y
    got = np.asarray(got)
    np.testing.assert_array_equal(np.isnan(got.real), np.isnan(want.real))
    np.testing.assert_array_equal(np.isnan(got.imag), np.isnan(want.imag))
    close(got, want, dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("y", [2, 3, 5, -2])
def test_reference_integer_pow_squares_as_the_kernels_do(dtype, y):
    """The reference interpreter's complex ``x ** y`` is repeated squaring, as the kernels and XLA:
    NumPy's complex ``power`` gave NaN for ``(3.4e38 + 1e30j) ** 2``, where ``x * x`` is -inf + inf j."""
    big = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max
    z = np.array([complex(big, 1e30), complex(1, 2), complex(-0.5, 0.25), complex(-big / 3, -2)], dtype)
    with np.errstate(all="ignore"):
        want = {2: z * z, 3: z * (z * z), 5: z * ((z * z) * (z * z)), -2: 1 / (z * z)}[y]
        ref = np.asarray(ember.jit(lambda x: lax.integer_pow(x, y), backend="numpy")(z))
    np.testing.assert_array_equal(ref, want)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_products_that_overflow_round_as_fused_multiply_adds(dtype):
    """Each part of a complex product is one fused multiply-add (real ``fma(ar, br, -(ai bi))``,
    imag ``fma(ar, bi, ai br)``, the order of NumPy's SIMD complex loops): where one product
    overflows the other's exact value decides, instead of inf - inf. Hand-derived: (M + inf i)^2 =
    -inf + inf i, (M + M i)(M - M i) = inf + inf i (M the largest finite value); both were NaN in
    one part natively while eager (NumPy) gave these."""
    m = np.finfo(np.float32 if dtype == np.complex64 else np.float64).max
    a = np.array([complex(m, np.inf), complex(m, m), complex(2, 3)], dtype)
    b = np.array([complex(m, np.inf), complex(m, -m), complex(2, 3)], dtype)
    want = np.array([complex(-np.inf, np.inf), complex(np.inf, np.inf), complex(-5, 12)], dtype)
    for f, args, loop in ((lambda x, y: x * y, (a, b), False), (lambda x: jnp.square(x), (a[:1],), False),
                          (lambda x: lax.scan(lambda c, s: (c, s * s), 0, x)[1], (a[:1],), True)):
        got, _ = native(f, *args, kernels=not loop)  # the scan's body is a loop step's function
        np.testing.assert_array_equal(np.asarray(got), want[:len(args[0])])


@pytest.mark.parametrize("dtype", CDTYPES)
def test_conversions_and_construction(dtype):
    z = data(dtype)
    rd = np.float32 if dtype == np.complex64 else np.float64
    other = np.complex128 if dtype == np.complex64 else np.complex64

    def f(x):
        return (lax.convert_element_type(x, rd), lax.convert_element_type(x, np.int32),
                lax.convert_element_type(x, np.bool_), lax.convert_element_type(x, other),
                lax.complex(jnp.imag(x), jnp.real(x)), lax.convert_element_type(jnp.abs(x), dtype))

    got, _ = native(f, z)
    want = (z.real.astype(rd), np.trunc(z.real).astype(np.int32), z.real != 0, z.astype(other),
            (z.imag + 1j * z.real).astype(dtype), np.abs(z).astype(dtype))
    for g, w in zip(got, want):
        close(g, w, dtype)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_sum_reduction_fused(dtype):
    z = data(dtype, n=1000 * 3)[:3000].reshape(30, 100)
    got, sched = native(lambda x: jnp.sum(x * jnp.conj(x), axis=1) + jnp.sum(x), z)
    zw = z.astype(np.complex128)
    want = (np.sum(zw * np.conj(zw), axis=1) + np.sum(zw)).astype(dtype)
    close(got, want, dtype, rtol=2e-5 if dtype == np.complex64 else 1e-12)


def _sign(z):
    return np.where(z == 0, 0, z / np.where(z == 0, 1, np.abs(z)))


# each against NumPy's complex loop, or the formula NumPy's documentation gives
UNARY_NUMPY_LOOPS = {
    "sign": (jnp.sign, _sign),
    "expm1": (jnp.expm1, np.expm1),
    "log1p": (jnp.log1p, np.log1p),
    "exp2": (jnp.exp2, np.exp2),
    "rsqrt": (lax.rsqrt, lambda z: 1 / np.sqrt(z)),
    "logistic": (ember.nn.sigmoid, lambda z: 1 / (1 + np.exp(-z))),
}


@pytest.mark.parametrize("name", sorted(UNARY_NUMPY_LOOPS))
@pytest.mark.parametrize("dtype", CDTYPES)
def test_unary_with_numpy_semantics(name, dtype):
    ef, nf = UNARY_NUMPY_LOOPS[name]
    z = data(dtype)
    if name in ("rsqrt", "logistic"):  # off the poles (z = 0; exp(-z) = -1)
        z = z[np.abs(z) > 1e-3] if name == "rsqrt" else z[np.abs(1 + np.exp(-z.astype(complex))) > 1e-3]
    got, _ = native(ef, z)
    with np.errstate(all="ignore"):
        want = nf(z.astype(np.complex128)).astype(dtype)
    close(got, want, dtype, rtol=2e-5 if dtype == np.complex64 else 1e-13)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_pow_special_cases_and_integer_exponents(dtype):
    """NumPy's complex power: z ** 0 = 1, 0 ** w is 0 for real w > 0 and NaN otherwise, integral
    real exponents below 100 by repeated multiplication, else exp(w log z)."""
    z = data(dtype)[:40]
    ws = [0, 1, 2, 3, -1, -3, 5, 7, 0.5, -1.5, 2 + 1j, 1j]
    got, _ = native(lambda a, b: a ** b, np.repeat(z, len(ws)), np.tile(np.asarray(ws, dtype), len(z)))
    with np.errstate(all="ignore"):
        want = np.repeat(z, len(ws)) ** np.tile(np.asarray(ws, dtype), len(z))
    close(got, want, dtype, rtol=1e-4 if dtype == np.complex64 else 1e-12)
    zero = np.zeros(4, dtype)
    w = np.asarray([2, 0, -1, 1j], dtype)
    got, _ = native(lambda a, b: a ** b, zero, w)
    np.testing.assert_array_equal(np.asarray(got)[:2], np.asarray([0, 1], dtype))
    assert np.isnan(np.asarray(got)[2:].real).all() and np.isnan(np.asarray(got)[2:].imag).all()


@pytest.mark.parametrize("dtype", CDTYPES)
def test_maximum_minimum_lexicographic_with_nan(dtype):
    a = np.asarray([1 + 2j, 1 + 2j, 3 - 1j, -1 + 0j, complex(np.nan, 0), 2 + 2j, 0j, 5 + 1j], dtype)
    b = np.asarray([1 + 3j, 1 + 1j, 2 + 9j, -1 - 0j, 1 + 1j, complex(0, np.nan), -0j, 5 + 1j], dtype)
    got, _ = native(lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y)), a, b)
    for g, w in zip(got, (np.maximum(a, b), np.minimum(a, b))):
        np.testing.assert_array_equal(np.asarray(g), w)
    z, w2 = data(dtype), data(dtype, seed=1)
    got, _ = native(lambda x, y: (jnp.maximum(x, y), jnp.minimum(x, y)), z, w2)
    np.testing.assert_array_equal(np.asarray(got[0]), np.maximum(z, w2))
    np.testing.assert_array_equal(np.asarray(got[1]), np.minimum(z, w2))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_ops_without_rendering_run_as_fallback_steps(dtype):
    """prod and cumsum have no complex C rendering: fallback steps, NumPy's results."""
    z = data(dtype)[:20] / 2
    got, sched = native(lambda x: (jnp.prod(x), jnp.sign(x) * 2, jnp.cumsum(x)), z, kernels=False)
    assert sched.count("fallback") >= 1
    zw = z.astype(np.complex128)
    ref = [np.asarray(v).astype(dtype) for v in (np.prod(zw), np.sign(zw) * 2, np.cumsum(zw))]
    for g, w in zip(got, ref):
        close(g, w, dtype, rtol=1e-5 if dtype == np.complex64 else 1e-13)


def test_complex_scan_carry():
    """A complex carry through a native loop: z <- z * w + 1."""
    w = np.complex64(0.9 + 0.3j)

    def f(z0):
        def body(z, _):
            z = z * w + 1
            return z, z
        return lax.scan(body, z0, None, length=12)

    z0 = data(np.complex64)[:8]
    (last, ys) = ember.jit(f, backend="native")(z0)
    z, hist = z0.copy(), []
    for _ in range(12):
        z = z * w + np.complex64(1)
        hist.append(z)
    close(last, z, np.complex64)
    close(ys, np.stack(hist), np.complex64)


@pytest.mark.parametrize("dtype", CDTYPES)
@pytest.mark.parametrize("sa,sb", [((4, 8), (8, 5)), ((1, 8), (8, 5)), ((4, 8), (8, 1)),
                                   ((3, 4, 8), (3, 8, 6)), ((8,), (8,)), ((64, 40), (40, 33))])
def test_matmul_on_complex_blas(dtype, sa, sb):
    """Complex products are native gemm steps (?gemm/?gemv through the fns table), with a
    transposed operand and a fused complex bias, against NumPy in complex128."""
    rng = np.random.default_rng(9)
    a = (rng.standard_normal(sa) + 1j * rng.standard_normal(sa)).astype(dtype)
    b = (rng.standard_normal(sb) + 1j * rng.standard_normal(sb)).astype(dtype)

    def f(x, y):
        z = x @ y
        t = jnp.swapaxes(x, -1, -2) @ jnp.conj(x) if x.ndim > 1 else x @ jnp.conj(x)
        return z + (0.5 - 2j), t

    (z, t), sched = native(f, a, b, kernels=False)
    assert sched.count("gemm") >= 2 and sched.count("fallback") == 0, str(sched)
    aw, bw = a.astype(np.complex128), b.astype(np.complex128)
    tw = np.swapaxes(aw, -1, -2) @ np.conj(aw) if a.ndim > 1 else aw @ np.conj(aw)
    tol = 2e-5 if dtype == np.complex64 else 1e-12
    for got, want in ((z, aw @ bw + (0.5 - 2j)), (t, tw)):
        got = np.asarray(got)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))
