"""ember.fft against numpy.fft: every transform with ``n``/``s``, axes and all three norms, several
dtypes and batched inputs; agreement under ``jit`` (the native backend runs its own C FFT, so
within a few ulp of NumPy's); ``vmap``; derivatives of the linear maps."""

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import fft as ef
from ember.errors import ShapeError
from ember.test_util import check_grads

rng = np.random.default_rng(3)
NORMS = [None, "backward", "ortho", "forward"]


def _real(shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def _cplx(shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _check(got, want, single=False):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    tol = 2e-5 if single else 1e-10
    scale = max(1.0, float(np.max(np.abs(want)))) if np.size(want) else 1.0
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def _jit(f, *args):
    eager = f(*args)
    want = np.asarray(eager)
    got = np.asarray(ember.jit(f)(*args))
    assert got.dtype == want.dtype
    _check(got, want, single=want.dtype in (np.float32, np.complex64))
    return eager


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 1, 5, 8, 13])
@pytest.mark.parametrize("axis", [-1, 0])
def test_1d(norm, n, axis):
    z, x = _cplx((6, 8)), _real((6, 8))
    _check(_jit(lambda a: ef.fft(a, n, axis, norm), z), np.fft.fft(z, n, axis, norm))
    _check(_jit(lambda a: ef.ifft(a, n, axis, norm), z), np.fft.ifft(z, n, axis, norm))
    _check(_jit(lambda a: ef.rfft(a, n, axis, norm), x), np.fft.rfft(x, n, axis, norm))
    if n != 1:
        _check(_jit(lambda a: ef.irfft(a, n, axis, norm), z), np.fft.irfft(z, n, axis, norm))
        _check(_jit(lambda a: ef.hfft(a, n, axis, norm), z), np.fft.hfft(z, n, axis, norm))
    _check(_jit(lambda a: ef.ihfft(a, n, axis, norm), x), np.fft.ihfft(x, n, axis, norm))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize(
    "s,axes",
    [
        (None, None),
        ((4, 6), None),
        (None, (0,)),
        ((5,), (1,)),
        ((3, 4, 6), (2, 0, 1)),
        (None, (-1, -3)),
        ((7, 4), (0, 2)),
    ],
)
def test_nd(norm, s, axes):
    z, x = _cplx((3, 4, 6)), _real((3, 4, 6))
    ref_axes = tuple(range(-len(s), 0)) if axes is None and s is not None else axes  # JAX's default
    _check(_jit(lambda a: ef.fftn(a, s, axes, norm), z), np.fft.fftn(z, s, ref_axes, norm))
    _check(_jit(lambda a: ef.ifftn(a, s, axes, norm), z), np.fft.ifftn(z, s, ref_axes, norm))
    _check(_jit(lambda a: ef.rfftn(a, s, axes, norm), x), np.fft.rfftn(x, s, ref_axes, norm))
    _check(_jit(lambda a: ef.irfftn(a, s, axes, norm), z), np.fft.irfftn(z, s, ref_axes, norm))


@pytest.mark.parametrize("norm", NORMS)
def test_2d(norm):
    z, x = _cplx((2, 5, 6)), _real((2, 5, 6))
    _check(ef.fft2(z, norm=norm), np.fft.fft2(z, norm=norm))
    _check(ef.ifft2(z, (4, 4), norm=norm), np.fft.ifft2(z, (4, 4), norm=norm))
    _check(ef.rfft2(x, axes=(0, 2), norm=norm), np.fft.rfft2(x, axes=(0, 2), norm=norm))
    _check(ef.irfft2(z, (5, 7), norm=norm), np.fft.irfft2(z, (5, 7), norm=norm))


def test_dtypes():
    x32 = _real((4, 8), np.float32)
    assert ef.fft(x32).dtype == np.complex64 and ef.rfft(x32).dtype == np.complex64
    assert ef.irfft(ef.rfft(x32)).dtype == np.float32
    assert ef.fft(_real((8,))).dtype == np.complex128
    assert ef.fft(np.arange(8)).dtype == np.complex64  # integers transform in single precision
    assert ef.rfft(np.arange(8)).dtype == np.complex64
    _check(ef.fft(x32), np.fft.fft(x32), single=True)
    _check(ef.irfft(ef.rfft(x32)), x32, single=True)
    _check(ef.ifft(ef.fft(x32)), x32.astype(np.complex64), single=True)
    with pytest.raises(TypeError):
        ef.rfft(_cplx((4,)))


def test_freqs_and_shifts():
    for n in (1, 6, 7):
        for d in (1.0, 0.25):
            _check(ef.fftfreq(n, d), np.fft.fftfreq(n, d), single=True)
            _check(ef.rfftfreq(n, d), np.fft.rfftfreq(n, d), single=True)
    assert ef.fftfreq(4).dtype == np.float32 and ef.fftfreq(4, dtype=jnp.float64).dtype == np.float64
    x = _real((5, 6))
    for axes in (None, 0, 1, (0, 1), (-1,)):
        _check(ef.fftshift(x, axes), np.fft.fftshift(x, axes))
        _check(ef.ifftshift(x, axes), np.fft.ifftshift(x, axes))
    _check(ef.ifftshift(ef.fftshift(x)), x)


def test_batched_and_vmap():
    z = _cplx((4, 3, 8))
    _check(ember.vmap(lambda a: ef.fft(a, 10))(z), np.fft.fft(z, 10))
    x = np.real(z).copy()
    _check(ember.vmap(lambda a: ef.rfft2(a), in_axes=2)(x), np.fft.rfft2(np.moveaxis(x, 2, 0)))
    _check(ember.vmap(lambda a: ef.irfft(a))(z), np.fft.irfft(z))


def test_errors():
    with pytest.raises(ValueError, match="norm"):
        ef.fft(_cplx((4,)), norm="bogus")
    with pytest.raises(ValueError):
        ef.fft(_cplx((4,)), 0)
    with pytest.raises(ShapeError):
        ef.fft(np.complex64(1.0))
    with pytest.raises(ValueError, match="different lengths"):
        ef.fftn(_cplx((4, 4)), s=(2, 2), axes=(0,))


GRAD_CASES = {
    "fft": (lambda a: ef.fft(a, 6), (_cplx((2, 8)),)),
    "ifft_ortho": (lambda a: ef.ifft(a, norm="ortho"), (_cplx((8,)),)),
    "fft_of_real": (lambda a: ef.fft(a), (_real((7,)),)),
    "rfft": (lambda a: ef.rfft(a), (_real((2, 8)),)),
    "rfft_odd": (lambda a: ef.rfft(a, 7), (_real((7,)),)),
    "irfft": (lambda a: ef.irfft(a), (_cplx((5,)),)),
    "irfft_odd": (lambda a: ef.irfft(a, 7, norm="forward"), (_cplx((4,)),)),
    "rfftn": (lambda a: ef.rfftn(a), (_real((4, 6)),)),
    "irfftn": (lambda a: ef.irfftn(a, (4, 6)), (_cplx((4, 4)),)),
    "hfft": (lambda a: ef.hfft(a), (_cplx((5,)),)),
    "power_spectrum": (lambda a: jnp.sum(jnp.abs(ef.rfft(a)) ** 2), (_real((9,)),)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=2, atol=1e-6, rtol=1e-6)


# --- symbolic sizes: jit(..., dynamic_axes=...), one compile for every length --------------------

SYMBOLIC = [
    ("fft", lambda x: ef.fft(x), lambda x: np.fft.fft(x)),
    ("ifft n=n+3 ortho", lambda x: ef.ifft(x, n=x.shape[-1] + 3, norm="ortho"),
     lambda x: np.fft.ifft(x, n=x.shape[-1] + 3, norm="ortho")),
    ("fft n=n-1 forward", lambda x: ef.fft(x, n=x.shape[-1] - 1, norm="forward"),
     lambda x: np.fft.fft(x, n=x.shape[-1] - 1, norm="forward")),
    ("rfft n=2n", lambda x: ef.rfft(x, n=2 * x.shape[-1]), lambda x: np.fft.rfft(x, n=2 * x.shape[-1])),
    ("irfft", lambda x: ef.irfft(x), lambda x: np.fft.irfft(x)),
    ("irfft n=2n-1 ortho", lambda x: ef.irfft(x, n=2 * x.shape[-1] - 1, norm="ortho"),
     lambda x: np.fft.irfft(x, n=2 * x.shape[-1] - 1, norm="ortho")),
    ("hfft", lambda x: ef.hfft(x), lambda x: np.fft.hfft(x)),
    ("fftn s axes", lambda x: ef.fftn(x, s=(x.shape[0], x.shape[1] + 1), axes=(0, 1), norm="ortho"),
     lambda x: np.fft.fftn(x, s=(x.shape[0], x.shape[1] + 1), axes=(0, 1), norm="ortho")),
    ("rfft2", lambda x: ef.rfft2(x), lambda x: np.fft.rfft2(x)),
    ("irfftn forward", lambda x: ef.irfftn(x, norm="forward"), lambda x: np.fft.irfftn(x, norm="forward")),
    ("fftshift", lambda x: ef.fftshift(x), lambda x: np.fft.fftshift(x)),
    ("ifftshift axis 0", lambda x: ef.ifftshift(x, axes=0), lambda x: np.fft.ifftshift(x, axes=0)),
    ("fftfreq", lambda x: ef.fftfreq(x.shape[-1], 0.5), lambda x: np.fft.fftfreq(x.shape[-1], 0.5)),
    ("rfftfreq", lambda x: ef.rfftfreq(x.shape[0]), lambda x: np.fft.rfftfreq(x.shape[0])),
]


@pytest.mark.parametrize("name,f,ref", SYMBOLIC, ids=[s[0] for s in SYMBOLIC])
@pytest.mark.parametrize("backend", ["native", "numpy"])
def test_symbolic_sizes_one_compile(name, f, ref, backend):
    """Every size (and ``n``/``s`` computed from it, and the norm's scale) is symbolic: one trace
    and one compile serve lengths with small and large prime factors, against NumPy."""
    jf = ember.jit(f, backend=backend, dynamic_axes=[("r", "c")])
    for r, c in [(2, 3), (4, 8), (3, 67), (1, 12), (5, 1)]:
        x = _cplx((r, c)) if name.startswith(("irfft", "hfft")) else _real((r, c))
        try:
            want = ref(x)
        except ValueError:  # a length that is zero at run time: NumPy raises, ember gives zeros
            assert not np.any(np.asarray(jf(x)))
            continue
        got = np.asarray(jf(x))
        _check(got, want, single=got.dtype in (np.float32, np.complex64))  # fftfreq: default float
    info = jf.cache_info()
    assert info["traces"] == 1 and info["compiles"] == 1, info


def test_symbolic_length_that_may_crop_or_pad():
    """``n`` whose order against the axis's size depends on the binding: a clear error at trace time."""
    with pytest.raises(ShapeError, match="crops or pads"):
        ember.jit(lambda x, y: ef.fft(x, n=y.shape[0]), dynamic_axes=[("a",), ("b",)])(_real(4), _real(5))
