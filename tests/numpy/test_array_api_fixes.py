"""Array API conformance fixes, each checked against NumPy, PyTorch/JAX (when installed) or a
value the standard specifies: asarray ``copy``/``device``, ``device=`` on creation functions,
DLPack exchange, ``finfo`` fields, dtype equality with ``None``, extreme ``eye`` diagonals,
``trace``/``vecdot``/``matrix_rank``/``linspace`` corner cases, axis errors, complex ``expm1``
special cases, ``signbit`` of negative NaN and ``complex`` with non-finite parts."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember.errors import AxisError, ShapeError


def test_asarray_copy_and_device():
    x = jnp.asarray(np.arange(4.0, dtype=np.float32))
    assert jnp.asarray(x) is x and jnp.asarray(x, copy=False) is x
    y = jnp.asarray(x, copy=True)
    assert y is not x and y.value.ctypes.data != x.value.ctypes.data
    np.testing.assert_array_equal(y, np.arange(4.0))
    assert jnp.asarray(x, device="cpu") is x
    with pytest.raises(ValueError, match="asarray: unknown device"):
        jnp.asarray(x, device="gpu")
    for fn, args in [(jnp.zeros, (3,)), (jnp.ones, (3,)), (jnp.empty, (3,)), (jnp.full, (3, 2.0)),
                     (jnp.arange, (3,)), (jnp.linspace, (0, 1, 3)), (jnp.eye, (3,)),
                     (jnp.zeros_like, (x,)), (jnp.ones_like, (x,)), (jnp.empty_like, (x,)),
                     (jnp.full_like, (x, 1.0))]:
        np.testing.assert_array_equal(fn(*args, device="cpu"), fn(*args))
        with pytest.raises(ValueError, match="unknown device"):
            fn(*args, device="tpu")


def test_signatures_follow_the_standard():
    assert list(inspect.signature(jnp.clip).parameters)[:3] == ["arr", "min", "max"]
    assert list(inspect.signature(jnp.reshape).parameters)[:2] == ["a", "shape"]
    assert "copy" in inspect.signature(jnp.reshape).parameters
    assert list(inspect.signature(jnp.isdtype).parameters) == ["dtype", "kind"]
    x = jnp.asarray(np.linspace(-2, 2, 5, dtype=np.float32))
    np.testing.assert_array_equal(jnp.clip(x, min=-1, max=1), np.clip(np.linspace(-2, 2, 5), -1, 1))
    np.testing.assert_array_equal(jnp.reshape(x, shape=(5, 1), copy=True), np.linspace(-2, 2, 5)[:, None])
    np.testing.assert_array_equal(x.reshape(1, 5), np.linspace(-2, 2, 5)[None])


def test_dlpack_exchange_with_numpy_torch_and_jax():
    x = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(np.from_dlpack(x), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(jnp.from_dlpack(np.arange(3)), [0, 1, 2])
    torch = pytest.importorskip("torch", reason="DLPack exchange with PyTorch needs torch")
    t = torch.arange(16, dtype=torch.float32)
    e = jnp.from_dlpack(t)
    np.testing.assert_array_equal(e, np.arange(16))
    if t.data_ptr() % 64 == 0:  # shared, not copied
        assert e.value.ctypes.data == t.data_ptr()
    np.testing.assert_array_equal(torch.from_dlpack(x).numpy(), np.arange(6).reshape(2, 3))
    c = jnp.from_dlpack(t, copy=True)
    assert c.value.ctypes.data != t.data_ptr()


def test_dlpack_to_jax():
    jax = pytest.importorskip("jax", reason="DLPack exchange with JAX needs jax")
    x = jnp.asarray(np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(jax.numpy.from_dlpack(x)), np.arange(5))
    np.testing.assert_array_equal(jnp.from_dlpack(jax.numpy.arange(4.0)), np.arange(4.0))


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.complex64])
def test_finfo_python_floats(dtype):
    f = jnp.finfo(dtype)
    ref = np.finfo(np.dtype(dtype)) if dtype != jnp.bfloat16 else __import__("ml_dtypes").finfo(dtype)
    for name in ("eps", "max", "min", "smallest_normal"):
        assert type(getattr(f, name)) is float
        assert getattr(f, name) == float(getattr(ref, name))
    assert type(f.bits) is int and f.bits == ref.bits
    assert f.nmant == ref.nmant  # NumPy's other fields pass through


def test_dtypes_never_equal_none():
    for d in (jnp.float64, jnp.float32, jnp.int32):
        assert d != None  # noqa: E711 - the comparison itself is under test
        assert not (d == None)  # noqa: E711
    assert jnp.can_cast(jnp.float32, jnp.float64) and not jnp.can_cast(jnp.complex64, jnp.float64)


def test_eye_extreme_diagonals():
    for k in (2**40, -2**40, 3, -4, 2**31):
        np.testing.assert_array_equal(jnp.eye(3, 4, k=k), np.eye(3, 4, k=k))


def test_trace_accumulates_like_sum():
    a = np.full((3, 3), 200, np.uint8)
    assert jnp.linalg.trace(jnp.asarray(a)).dtype == jnp.uint32  # the default unsigned integer
    assert int(jnp.linalg.trace(jnp.asarray(a))) == 600
    assert jnp.linalg.trace(jnp.asarray(np.ones((2, 2), np.int8))).dtype == jnp.int32


def test_vecdot_checks_the_reduced_axis():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    np.testing.assert_allclose(jnp.linalg.vecdot(jnp.asarray(a), jnp.asarray(b)), a @ b)
    with pytest.raises(ShapeError, match="reduced axis"):
        jnp.linalg.vecdot(jnp.asarray(a), jnp.asarray(np.arange(2.0)))


def test_expand_dims_axis_error_is_an_index_error():
    with pytest.raises(IndexError, match="out of bounds"):
        jnp.expand_dims(jnp.zeros((2,)), 2)
    with pytest.raises(AxisError):
        jnp.sum(jnp.zeros((2,)), axis=3)
    with pytest.raises(ShapeError):  # still a ShapeError / ValueError for existing handlers
        jnp.expand_dims(jnp.zeros((2,)), -3)


def test_linspace_float64_bounds_not_rounded_through_float32():
    tiny = 6.881967223009093e-211
    np.testing.assert_array_equal(jnp.linspace(tiny, 0.0, 1, dtype=jnp.float64), np.linspace(tiny, 0.0, 1))
    got = jnp.linspace(0.1, 0.7, 7, dtype=jnp.float64)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.linspace(0.1, 0.7, 7), rtol=0, atol=1e-16)


def test_matrix_rank_batched_rtol_and_empty():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 4))
    a[1, :, 0] = a[1, :, 1]
    rtol = np.array([1e-6, 1e-6, 0.9])
    np.testing.assert_array_equal(jnp.linalg.matrix_rank(jnp.asarray(a), rtol=jnp.asarray(rtol)),
                                  np.linalg.matrix_rank(a, rtol=rtol))
    np.testing.assert_array_equal(jnp.linalg.matrix_rank(jnp.zeros((2, 0, 3)), rtol=jnp.zeros((2,))), [0, 0])
    assert int(jnp.linalg.matrix_rank(jnp.zeros((0, 0), jnp.complex64))) == 0


INF, NAN = np.inf, np.nan
# (input, expected) from the Array API's special cases for complex expm1 (C99 cexpm1 semantics);
# None in an expected part means "any sign" / "NaN" as the standard leaves it
EXPM1 = [
    (complex(0.0, 0.0), (0.0, 0.0)),
    (complex(-0.0, 0.0), (0.0, 0.0)),
    (complex(INF, 0.0), (INF, 0.0)),
    (complex(-INF, INF), (-1.0, 0.0)),
    (complex(INF, INF), (INF, NAN)),
    (complex(-INF, NAN), (-1.0, 0.0)),
    (complex(INF, NAN), (INF, NAN)),
    (complex(NAN, 0.0), (NAN, 0.0)),
]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_expm1_special_cases(dtype):
    x = np.array([c for c, _ in EXPM1], dtype)
    for out in (jnp.expm1(jnp.asarray(x)), ember.jit(jnp.expm1)(x)):
        out = np.asarray(out)
        for (c, (re, im)), o in zip(EXPM1, out):
            for got, want in ((o.real, re), (o.imag, im)):
                if np.isnan(want):
                    assert np.isnan(got), (c, o)
                elif np.isinf(want):
                    assert abs(got) == INF, (c, o)  # the sign of an infinite part is unspecified
                else:
                    assert abs(got) == abs(want), (c, o)
                    if want == 0 and c.real != -INF:  # +0 where the standard says 0 (not -inf's)
                        assert not np.signbit(got), (c, o)
    # finite inputs: against NumPy's complex expm1 (accurate near zero)
    z = np.array([1e-8 + 1e-8j, 1 + 2j, -3 + 0.5j, 0.3 - 0.2j], dtype)
    tol = 2e-6 if dtype == np.complex64 else 1e-14
    np.testing.assert_allclose(jnp.expm1(jnp.asarray(z)), np.expm1(z.astype(np.complex128)), rtol=tol)


def test_signbit_of_negative_nan_and_zero():
    x = np.array([-NAN, NAN, -0.0, 0.0, -1.0, 2.0, -INF], np.float32)
    x[0] = np.copysign(np.nan, -1.0)
    want = np.signbit(x)
    for d in (np.float32, np.float64, np.float16):
        xd = x.astype(d)
        xd[0] = np.copysign(np.nan, -1.0)
        np.testing.assert_array_equal(jnp.signbit(jnp.asarray(xd)), want)
        np.testing.assert_array_equal(ember.jit(jnp.signbit)(xd), want)


def test_complex_of_non_finite_parts():
    re, im = np.array([INF, 1.0, NAN], np.float32), np.array([NAN, INF, 0.0], np.float32)
    out = np.asarray(lax.complex(jnp.asarray(re), jnp.asarray(im)))
    np.testing.assert_array_equal(out.real, re)
    np.testing.assert_array_equal(out.imag, im)


def test_round_complex_rounds_both_parts():
    z = np.array([1.25 + 2.5j, -0.5 - 1.5j, 3.14159 + 2.71828j], np.complex64)
    for d in (0, 2):
        np.testing.assert_array_equal(jnp.round(jnp.asarray(z), d), np.round(z, d))
    np.testing.assert_array_equal(ember.jit(jnp.round)(z), np.round(z))
