"""ember.scipy.special against scipy.special: values over wide ranges in float32 and float64,
edge cases (0, +-inf, NaN, poles), reductions with axes/keepdims/weights, equality under ``jit``,
``vmap``, and derivatives by finite differences."""

import numpy as np
import pytest
import scipy.special as ss

import ember
import ember.numpy as jnp
from ember.scipy import special as es
from ember.test_util import check_grads
from tests.numpy.helpers import assert_jit_close

rng = np.random.default_rng(11)
X = np.concatenate(
    [rng.standard_normal(40) * 6, [0.0, -0.0, 1.0, -1.0, 8.0, -8.0, 8.000001, 30.0, -50.0, 1e-6]]
)
P = np.concatenate([rng.uniform(0.001, 0.999, 30), [0.0, 1.0, 0.5]])
POS = np.concatenate([rng.uniform(0.05, 30, 30), [1.0, 2.0, 0.5, 100.0]])


def _check(got, want, dtype=np.float64, rtol=None):
    got = np.asarray(got)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    assert got.dtype == dtype, got.dtype
    tol = rtol if rtol is not None else (2e-5 if dtype == np.float32 else 1e-12)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, equal_nan=True)


UNARY = [
    ("erf", X, 1e-12),
    ("erfc", X, 1e-12),
    ("erfinv", P * 2 - 1, 1e-11),
    ("gammaln", X, 1e-11),
    ("digamma", np.concatenate([POS, -POS + 0.5]), 1e-10),
    ("gamma", np.clip(X, -30, 30), 1e-10),
    ("expit", X, 1e-12),
    ("logit", P, 1e-12),
    ("ndtr", X, 1e-12),
    ("ndtri", P, 1e-9),
    ("i0e", X, 1e-13),
    ("i1e", X, 1e-13),
    ("i0", np.clip(X, -40, 40), 1e-12),
    ("i1", np.clip(X, -40, 40), 1e-12),
    ("entr", np.concatenate([P, [-1.0, 0.0]]), 1e-12),
    ("log_expit", X * 10, 1e-12),
]


@pytest.mark.parametrize("name,x,tol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float64(name, x, tol):
    f = getattr(es, name)
    ref = getattr(ss, name)(x)
    _check(f(x), ref, rtol=tol)
    assert_jit_close(ember.jit(f)(x), f(x))


@pytest.mark.parametrize("name,x,tol", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float32(name, x, tol):
    f = getattr(es, name)
    x32 = x.astype(np.float32)
    ref = getattr(ss, name)(x32.astype(np.float64))
    with np.errstate(all="ignore"):
        ref = ref.astype(np.float32)
    got = np.asarray(f(x32))
    assert got.dtype == np.float32
    finite = np.isfinite(ref)
    np.testing.assert_allclose(got[finite], ref[finite], rtol=5e-5, atol=5e-6)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))


def test_int_inputs_promote_and_lowp():
    assert es.erf(1).dtype == np.float32
    ints = np.arange(1, 5, dtype=np.int32)
    _check(es.gammaln(ints), ss.gammaln(ints).astype(np.float32), np.float32)
    assert es.gammaln(np.arange(1, 5, dtype=np.int64)).dtype == np.float64  # as JAX with x64
    h = es.i0e(np.array([0.5, 9.0], np.float16))
    assert h.dtype == np.float16
    np.testing.assert_allclose(np.asarray(h, np.float64), ss.i0e([0.5, 9.0]), rtol=2e-3)


def test_special_values():
    edge = np.array([0.0, -0.0, -1.0, -2.0, -1.5, 0.5, -0.5, -2.5, 3.0, np.inf, -np.inf, np.nan])
    with np.errstate(all="ignore"):
        _check(es.gammasgn(edge), ss.gammasgn(edge))
        _check(es.gamma(edge[:9]), ss.gamma(edge[:9]), rtol=1e-12)
    _check(es.erfinv(np.array([-1.0, 1.0, 0.0])), np.array([-np.inf, np.inf, 0.0]))
    _check(es.logit(np.array([0.0, 1.0])), np.array([-np.inf, np.inf]))
    _check(es.expit(np.array([-np.inf, np.inf])), np.array([0.0, 1.0]))
    _check(es.i0e(np.array([np.inf, -np.inf, 0.0])), ss.i0e([np.inf, -np.inf, 0.0]))
    _check(es.i1e(np.array([np.inf, -np.inf, 0.0])), ss.i1e([np.inf, -np.inf, 0.0]))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gammaln_of_subnormals(dtype):
    """Below the smallest normal number lgamma(x) is -log|x| (math.lgamma's values); SciPy's
    gammaln, which the eager and NumPy paths used, gave inf for float64 subnormals (and -inf at
    -inf, where C and JAX give +inf)."""
    import math
    sub = np.finfo(dtype).smallest_subnormal
    x = np.array([sub, -sub, 1e3 * sub, np.finfo(dtype).tiny, 0.0, 0.5, -np.inf, np.inf], dtype)
    # math.lgamma (C's lgamma): +inf at both infinities (SciPy's gammaln gives -inf at -inf)
    want = np.array([math.lgamma(float(v)) if v != 0 else np.inf for v in x], dtype)
    for f in (es.gammaln, ember.jit(es.gammaln), ember.jit(es.gammaln, backend="numpy")):
        _check(f(x), want, dtype, rtol=1e-6 if dtype == np.float32 else 1e-13)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_erfinv_keeps_the_sign_of_zero(dtype):
    """erfinv is odd: erfinv(-0.0) is -0.0 on every path (SciPy gives +0.0), so the gradient of
    sqrt(erfinv(x)) at -0.0 is -inf everywhere (it was +inf eagerly and on the NumPy backend)."""
    x = np.array([-0.0, 0.0, 0.5], dtype)
    dsqrt = ember.grad(lambda v: jnp.sqrt(es.erfinv(v)))
    for wrap in (lambda h: h, ember.jit, lambda h: ember.jit(h, backend="numpy")):
        np.testing.assert_array_equal(np.signbit(np.asarray(wrap(es.erfinv)(x))), [True, False, False])
        assert float(wrap(dsqrt)(x[0])) == -np.inf


@pytest.mark.parametrize("name", ["xlogy", "xlog1py", "betaln", "beta", "rel_entr"])
def test_binary(name):
    f, g = getattr(es, name), getattr(ss, name)
    a = np.concatenate([POS[:20], [0.0, 0.0, 2.0]])
    b = np.concatenate([P[:20] + 0.1, [0.0, 3.0, 0.0]])
    if name in ("betaln", "beta"):
        a, b = POS[:20], POS[10:30]
    _check(f(a, b), g(a, b), rtol=1e-10)
    _check(f(a[:, None], b[None, :5]), g(a[:, None], b[None, :5]), rtol=1e-10)  # broadcasting
    assert_jit_close(ember.jit(f)(a, b), f(a, b))


def test_gamma_family_misc():
    _check(es.multigammaln(POS + 3, 4), ss.multigammaln(POS + 3, 4), rtol=1e-11)
    for n in (0, 1, 3):
        _check(es.polygamma(n, POS), ss.polygamma(n, POS), rtol=1e-10)
    assert es.psi is es.digamma
    with pytest.raises(ValueError):
        es.multigammaln(2.0, 0)


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp(axis, keepdims):
    a = rng.standard_normal((3, 4, 5)) * 10
    _check(es.logsumexp(a, axis, keepdims=keepdims), ss.logsumexp(a, axis, keepdims=keepdims))
    b = rng.uniform(-1, 2, (3, 4, 5))
    got, sign = es.logsumexp(a, axis, b=b, keepdims=keepdims, return_sign=True)
    want, wsign = ss.logsumexp(a, axis, b=b, keepdims=keepdims, return_sign=True)
    _check(got, want, rtol=1e-10)
    _check(sign, wsign)
    np.testing.assert_array_equal(
        np.asarray(ember.jit(lambda v: es.logsumexp(v, axis, keepdims=keepdims))(a)),
        np.asarray(es.logsumexp(a, axis, keepdims=keepdims)),
    )


def test_logsumexp_edge_cases():
    _check(es.logsumexp(np.array([-np.inf, -np.inf])), -np.inf)
    _check(es.logsumexp(np.array([np.inf, 1.0])), np.inf)
    _check(es.logsumexp(np.array([1000.0, 1000.0])), 1000 + np.log(2))
    _check(es.logsumexp(np.array([1.0, 2.0]), b=np.array([1.0, -1.0])), np.nan)
    _check(es.logsumexp(np.zeros((0, 3)), axis=0), ss.logsumexp(np.zeros((0, 3)), axis=0))
    assert es.logsumexp(np.float32(1.0)).dtype == np.float32


@pytest.mark.parametrize("axis", [-1, 0, (0, 1), None])
def test_softmax(axis):
    a = rng.standard_normal((4, 6)) * 30
    _check(es.softmax(a, axis), ss.softmax(a, axis), rtol=1e-11)
    _check(es.log_softmax(a, axis), ss.log_softmax(a, axis), rtol=1e-11)
    a32 = a.astype(np.float32)
    _check(es.softmax(a32, axis), ss.softmax(a, axis).astype(np.float32), np.float32, rtol=1e-5)
    with np.errstate(divide="ignore"):
        _check(es.log_softmax(np.array([-np.inf, 0.0, 1.0])), ss.log_softmax([-np.inf, 0.0, 1.0]))


def test_vmap():
    a = rng.standard_normal((3, 5))
    _check(ember.vmap(es.logsumexp)(a), ss.logsumexp(a, axis=1))
    _check(ember.vmap(es.i1e)(a), ss.i1e(a))
    _check(ember.vmap(lambda v: es.softmax(v))(a), ss.softmax(a, axis=1))


GRAD_CASES = {
    "erf": (es.erf, (X[:10],)),
    "erfinv": (es.erfinv, (P[:10] * 1.8 - 0.9,)),
    "gammaln": (es.gammaln, (POS[:10],)),
    "digamma": (es.digamma, (POS[:10],)),
    "expit": (es.expit, (X[:10],)),
    "logit": (es.logit, (P[:10] * 0.8 + 0.1,)),
    "xlogy": (es.xlogy, (POS[:5], POS[5:10])),
    "xlog1py": (es.xlog1py, (POS[:5], P[:5])),
    "betaln": (es.betaln, (POS[:5], POS[5:10])),
    "i0e": (es.i0e, (X[:10],)),
    "i1e": (es.i1e, (X[:10],)),
    "logsumexp": (lambda a: es.logsumexp(a, 1), (X[:12].reshape(3, 4),)),
    "logsumexp_b": (lambda a, b: es.logsumexp(a, b=b), (X[:5], POS[:5])),
    "softmax": (lambda a: es.softmax(a, 0), (X[:12].reshape(3, 4),)),
    "log_softmax": (lambda a: es.log_softmax(a), (X[:12].reshape(3, 4),)),
    "gamma": (es.gamma, (POS[:8] * 0.2 + 0.1,)),
    "ndtri": (es.ndtri, (P[:8],)),
}


@pytest.mark.parametrize("name", sorted(GRAD_CASES))
def test_gradients(name):
    f, args = GRAD_CASES[name]
    check_grads(f, args, order=1, atol=1e-5, rtol=1e-5)


def test_second_order_logsumexp():
    check_grads(lambda a: es.logsumexp(a), (X[:6],), order=2, atol=1e-5, rtol=1e-5)
    h = np.asarray(ember.hessian(lambda a: es.logsumexp(a))(X[:4]))
    p = ss.softmax(X[:4])
    np.testing.assert_allclose(h, np.diag(p) - np.outer(p, p), atol=1e-10)
    assert jnp.float32 is not None
