"""ember.nn against NumPy/SciPy references: activations (several dtypes, 0-d, empty), softmax,
log_softmax and logsumexp (axes, masks, b, signs, extreme values), one_hot, standardize and
dot_product_attention (grouped heads, causal, masks, bias, sequence lengths), each also under jit."""

import math

import numpy as np
import pytest
import scipy.special as sps

import ember
import ember.nn as nn
from ember._src import shapes as sh
from ember._src.core import ShapedArray
from ember._src.program import trace_to_program
from ember.errors import ShapeError
from tests.numpy.helpers import assert_jit_close

rng = np.random.default_rng(3)


def _x(shape, dtype=np.float32, scale=3.0):
    return np.asarray((rng.standard_normal(shape) * scale).astype(dtype))  # 0-d: an array, not a scalar


def _tol(dtype):
    return {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}[np.dtype(dtype).type]


# NumPy references computed in float64, written independently of the implementation
SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805
REFS = {
    "relu": lambda x: np.maximum(x, 0),
    "relu6": lambda x: np.clip(x, 0, 6),
    "leaky_relu": lambda x: np.where(x >= 0, x, 0.01 * x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "selu": lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0))),
    "celu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "sigmoid": sps.expit,
    "silu": lambda x: x * sps.expit(x),
    "swish": lambda x: x * sps.expit(x),
    "log_sigmoid": lambda x: -np.logaddexp(0, -x),
    "softplus": lambda x: np.logaddexp(x, 0),
    "soft_sign": lambda x: x / (np.abs(x) + 1),
    "hard_tanh": lambda x: np.clip(x, -1, 1),
    "hard_sigmoid": lambda x: np.clip(x + 3, 0, 6) / 6,
    "hard_silu": lambda x: x * np.clip(x + 3, 0, 6) / 6,
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
}


@pytest.mark.parametrize("name", sorted(REFS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 4)])
def test_activations_match_reference(name, dtype, shape):
    x = _x(shape, dtype)
    if shape == (7,):
        x[:3] = [0.0, 6.0, -1.0]  # kinks
    f = getattr(nn, name)
    got = f(x)
    want = REFS[name](x.astype(np.float64))
    assert got.shape == x.shape and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=_tol(dtype), atol=_tol(dtype))
    if shape == (3, 4):
        assert_jit_close(ember.jit(f)(x), got)


def test_activation_dtypes_and_extremes():
    xi = np.arange(-8, 9, dtype=np.int32)
    assert nn.relu(xi).dtype == np.int32 and nn.relu6(xi).dtype == np.int32
    np.testing.assert_array_equal(nn.relu(xi), np.maximum(xi, 0))
    np.testing.assert_array_equal(nn.relu6(xi), np.clip(xi, 0, 6))
    assert nn.sigmoid(xi).dtype == np.float32 and nn.gelu(xi).dtype == np.float32
    assert nn.relu(2.0).weak_type
    big = np.array([-1e4, -100.0, 0.0, 100.0, 1e4], np.float32)
    for name in ("softplus", "log_sigmoid", "sigmoid", "elu", "silu", "gelu"):
        assert np.all(np.isfinite(getattr(nn, name)(big))), name
    b64 = big.astype(np.float64)  # (atol: softplus(-100) ~ 4e-44 is a float32 subnormal)
    np.testing.assert_allclose(nn.softplus(big), np.logaddexp(b64, 0), rtol=1e-6, atol=1e-40)
    np.testing.assert_allclose(nn.log_sigmoid(big), -np.logaddexp(0, -b64), rtol=1e-6, atol=1e-40)
    nan = np.array([np.nan, -np.inf, np.inf], np.float32)
    np.testing.assert_array_equal(nn.relu(nan), [np.nan, 0, np.inf])
    np.testing.assert_array_equal(nn.hard_tanh(nan), [np.nan, -1, 1])


def test_parameterized_activations():
    x = _x((5, 3), np.float64)
    np.testing.assert_allclose(nn.leaky_relu(x, 0.2), np.where(x >= 0, x, 0.2 * x), rtol=1e-12)
    np.testing.assert_allclose(nn.elu(x, 0.5), np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0))),
                               rtol=1e-12)
    np.testing.assert_allclose(nn.celu(x, 2.0), np.maximum(x, 0) + 2.0 * np.expm1(np.minimum(x, 0) / 2.0),
                               rtol=1e-12)
    np.testing.assert_allclose(nn.gelu(x, approximate=False), x * sps.ndtr(x), rtol=1e-12, atol=1e-15)
    g = ember.jit(lambda v: nn.gelu(v, approximate=False))(x.astype(np.float32))
    np.testing.assert_allclose(g, x * sps.ndtr(x), rtol=1e-5, atol=1e-6)
    # the tanh form approximates the exact one to ~1e-3
    assert np.max(np.abs(np.asarray(nn.gelu(x)) - x * sps.ndtr(x))) < 2e-3
    y = _x((4, 6), np.float64)
    np.testing.assert_allclose(nn.glu(y), y[:, :3] * sps.expit(y[:, 3:]), rtol=1e-12)
    np.testing.assert_allclose(nn.glu(y, axis=0), y[:2] * sps.expit(y[2:]), rtol=1e-12)
    with pytest.raises(ShapeError, match="even"):
        nn.glu(_x((3, 5)))


# -- softmax / log_softmax / logsumexp ----------------------------------------------------------


@pytest.mark.parametrize("axis", [-1, 0, 1, (0, 2), None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_log_softmax(axis, dtype):
    x = _x((2, 3, 4), dtype)
    sp_axis = axis
    np.testing.assert_allclose(nn.softmax(x, axis=axis), sps.softmax(x.astype(np.float64), axis=sp_axis),
                               rtol=10 * _tol(dtype), atol=_tol(dtype))
    np.testing.assert_allclose(nn.log_softmax(x, axis=axis),
                               sps.log_softmax(x.astype(np.float64), axis=sp_axis),
                               rtol=10 * _tol(dtype), atol=10 * _tol(dtype))
    if axis == -1:
        assert_jit_close(ember.jit(nn.softmax)(x), nn.softmax(x))
        assert_jit_close(ember.jit(nn.log_softmax)(x), nn.log_softmax(x))


def test_softmax_is_stable_and_handles_infinities():
    x = np.array([[1000.0, 1000.0, -1000.0], [-np.inf, 0.0, -np.inf], [3.0, -np.inf, 3.0]], np.float32)
    want = sps.softmax(x.astype(np.float64), axis=-1)
    np.testing.assert_allclose(nn.softmax(x), want, atol=1e-7)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(nn.log_softmax(x), sps.log_softmax(x.astype(np.float64), axis=-1),
                                   atol=1e-5)
    assert nn.softmax(np.zeros((2, 0), np.float32)).shape == (2, 0)
    np.testing.assert_allclose(nn.softmax(np.float32(3.0), axis=None), 1.0)


def test_softmax_where():
    x = _x((3, 5), np.float64)
    m = rng.random((3, 5)) > 0.3
    m[:, 0] = True
    e = np.where(m, np.exp(x - x.max(axis=1, keepdims=True)), 0)
    want = e / e.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(nn.softmax(x, where=m), want, rtol=1e-12)
    np.testing.assert_allclose(ember.jit(lambda a, b: nn.softmax(a, where=b))(x, m), want, rtol=1e-12)
    with np.errstate(divide="ignore"):
        want_log = np.where(m, np.log(np.where(m, want, 1)), -np.inf)
    np.testing.assert_allclose(nn.log_softmax(x, where=m), want_log, rtol=1e-12)


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_logsumexp(axis, keepdims):
    x = _x((2, 3, 4), np.float64)
    np.testing.assert_allclose(nn.logsumexp(x, axis=axis, keepdims=keepdims),
                               sps.logsumexp(x, axis=axis, keepdims=keepdims), rtol=1e-12)
    b = rng.uniform(-1, 2, (2, 3, 4))
    got, sign = nn.logsumexp(x, axis=axis, b=b, keepdims=keepdims, return_sign=True)
    want, wsign = sps.logsumexp(x, axis=axis, b=b, keepdims=keepdims, return_sign=True)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_array_equal(sign, wsign)
    got = nn.logsumexp(x, axis=axis, b=np.abs(b), keepdims=keepdims)
    np.testing.assert_allclose(got, sps.logsumexp(x, axis=axis, b=np.abs(b), keepdims=keepdims), rtol=1e-10)


def test_logsumexp_special_values_and_jit():
    np.testing.assert_allclose(nn.logsumexp(np.array([1000.0, 1000.0], np.float32)), 1000 + math.log(2),
                               rtol=1e-6)
    assert float(nn.logsumexp(np.array([-np.inf, -np.inf]))) == -np.inf
    assert float(nn.logsumexp(np.array([np.inf, 1.0]))) == np.inf
    assert np.isnan(float(nn.logsumexp(np.array([0.0, 0.0]), b=np.array([1.0, -2.0]))))  # negative sum
    np.testing.assert_allclose(nn.logsumexp(np.array([0.0, 5.0]), b=np.array([0.0, 1.0])), 5.0)
    x = _x((3, 4), np.float32)
    assert_jit_close(ember.jit(lambda v: nn.logsumexp(v, axis=1))(x), nn.logsumexp(x, axis=1))
    assert nn.logsumexp(np.arange(3, dtype=np.int32)).dtype == np.float32
    m = rng.random((3, 4)) > 0.3
    want = np.log(np.sum(np.where(m, np.exp(x.astype(np.float64)), 0), axis=1))
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(nn.logsumexp(x, axis=1, where=m), want, rtol=1e-5)


# -- one_hot / standardize ----------------------------------------------------------------------


def test_one_hot():
    x = np.array([[0, 2], [3, -1]], np.int32)
    want = (x[..., None] == np.arange(3)).astype(np.float32)
    got = nn.one_hot(x, 3)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(nn.one_hot(x, 3, axis=0), np.moveaxis(want, -1, 0))
    np.testing.assert_array_equal(nn.one_hot(x, 3, axis=1), np.moveaxis(want, -1, 1))
    np.testing.assert_array_equal(nn.one_hot(x, 3, dtype=np.int8), want.astype(np.int8))
    np.testing.assert_array_equal(nn.one_hot(np.int32(1), 4), [0, 1, 0, 0])
    assert nn.one_hot(np.zeros((0,), np.int32), 5).shape == (0, 5)
    np.testing.assert_array_equal(ember.jit(nn.one_hot, static_argnums=1)(x, 3), want)
    with pytest.raises(ShapeError):
        nn.one_hot(x, 3, axis=3)


def test_standardize():
    x = _x((4, 6), np.float64)
    for axis in (-1, 0, (0, 1)):
        mu = x.mean(axis=axis, keepdims=True)
        var = x.var(axis=axis, keepdims=True)
        np.testing.assert_allclose(nn.standardize(x, axis=axis), (x - mu) / np.sqrt(var + 1e-5), rtol=1e-10)
    mu = np.full((4, 1), 0.5)
    var_given_mean = np.mean(x ** 2, -1, keepdims=True) - 0.25  # E[x^2] - mean^2, as JAX
    np.testing.assert_allclose(nn.standardize(x, mean=mu), (x - mu) / np.sqrt(var_given_mean + 1e-5),
                               rtol=1e-10)
    var = np.full((4, 1), 2.0)
    np.testing.assert_allclose(nn.standardize(x, mean=mu, variance=var, epsilon=0.0), (x - mu) / np.sqrt(2.0),
                               rtol=1e-12)
    x32 = x.astype(np.float32)
    assert_jit_close(ember.jit(nn.standardize)(x32), nn.standardize(x32))
    assert nn.standardize(x32).dtype == np.float32


# -- dot_product_attention ----------------------------------------------------------------------


def _attention_ref(q, k, v, bias=None, mask=None, scale=None, is_causal=False, q_len=None, kv_len=None,
                   window=None):
    """Loop-free NumPy reference in float64 ([B, T, N, H] layout, grouped heads by repetition)."""
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    B, T, N, H = q.shape
    S, K = k.shape[1], k.shape[2]
    k = np.repeat(k, N // K, axis=2)
    v = np.repeat(v, N // K, axis=2)
    scale = 1 / np.sqrt(H) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if bias is not None:
        logits = logits + bias
    keep = np.ones((B, N, T, S), bool)
    if mask is not None:
        keep &= np.broadcast_to(mask, keep.shape)
    i, j = np.arange(T)[:, None], np.arange(S)[None, :]
    if is_causal:
        keep &= j <= i
    if window is not None:
        keep &= (j >= i - window[0]) & (j <= i + window[1])
    if q_len is not None:
        keep &= (np.arange(T)[None, None, :, None] < q_len[:, None, None, None])
    if kv_len is not None:
        keep &= (np.arange(S)[None, None, None, :] < kv_len[:, None, None, None])
    logits = np.where(keep, logits, -0.7 * np.finfo(np.float32).max)
    p = sps.softmax(logits, axis=-1)
    return np.einsum("bnts,bsnh->btnh", p, v)


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (3, 1)])
@pytest.mark.parametrize("is_causal", [False, True])
def test_attention_matches_reference(heads, is_causal):
    N, K = heads
    q, k, v = _x((2, 5, N, 8), scale=1.0), _x((2, 7, K, 8), scale=1.0), _x((2, 7, K, 8), scale=1.0)
    got = nn.dot_product_attention(q, k, v, is_causal=is_causal)
    assert got.shape == (2, 5, N, 8) and got.dtype == np.float32
    np.testing.assert_allclose(got, _attention_ref(q, k, v, is_causal=is_causal), rtol=2e-5, atol=2e-6)
    jitted = ember.jit(nn.dot_product_attention, static_argnames="is_causal")(q, k, v, is_causal=is_causal)
    assert_jit_close(jitted, got)


def test_attention_mask_bias_scale_and_lengths():
    q, k, v = _x((2, 4, 2, 3), scale=1.0), _x((2, 6, 2, 3), scale=1.0), _x((2, 6, 2, 5), scale=1.0)
    mask = rng.random((2, 1, 4, 6)) > 0.3
    mask[..., 0] = True
    bias = _x((2, 4, 6), scale=0.5)  # broadcasts over the batch
    got = nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=0.7)
    np.testing.assert_allclose(got, _attention_ref(q, k, v, bias=bias, mask=mask, scale=0.7),
                               rtol=2e-5, atol=2e-6)
    got = nn.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    np.testing.assert_allclose(got, _attention_ref(q, k, v, mask=mask, is_causal=True), rtol=2e-5, atol=2e-6)
    q_len, kv_len = np.array([4, 2], np.int32), np.array([3, 6], np.int32)
    got = nn.dot_product_attention(q, k, v, query_seq_lengths=q_len, key_value_seq_lengths=kv_len)
    np.testing.assert_allclose(got, _attention_ref(q, k, v, q_len=q_len, kv_len=kv_len), rtol=2e-5, atol=2e-6)
    got = nn.dot_product_attention(q, k, v, local_window_size=(1, 0))
    np.testing.assert_allclose(got, _attention_ref(q, k, v, window=(1, 0)), rtol=2e-5, atol=2e-6)
    jitted = ember.jit(lambda a, b, c, m: nn.dot_product_attention(a, b, c, mask=m))(q, k, v, mask)
    np.testing.assert_allclose(jitted, _attention_ref(q, k, v, mask=mask), rtol=2e-5, atol=2e-6)


def test_attention_is_one_fused_step_and_matches_jax_on_fully_masked_rows():
    """Where JAX's semantics allow it, the function is one ``attention`` primitive (the native
    backend's online-softmax kernel); a row whose mask is all False averages the values, as JAX's
    finite large-negative fill gives."""
    jax = pytest.importorskip("jax")
    q, k, v = _x((2, 9, 4, 8), scale=1.0), _x((2, 11, 2, 8), scale=1.0), _x((2, 11, 2, 8), scale=1.0)
    bias = _x((1, 4, 9, 11), scale=0.5)
    mask = rng.random((2, 1, 9, 11)) > 0.4
    mask[1, 0, 3] = False

    def f(q, k, v, b, m):
        return nn.dot_product_attention(q, k, v, bias=b, mask=m, is_causal=True)

    prog = ember.make_program(f)(q, k, v, bias, mask)
    assert [e.prim.name for e in prog.eqns].count("attention") == 1
    want = np.asarray(jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, is_causal=True))
    for got in (f(q, k, v, bias, mask), ember.jit(f, backend="native")(q, k, v, bias, mask)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(want[1, 3], v[1].repeat(2, axis=1).mean(0), rtol=1e-5, atol=1e-6)


def test_attention_unbatched_dtypes_and_errors():
    q, k, v = _x((5, 2, 4), scale=1.0), _x((3, 2, 4), scale=1.0), _x((3, 2, 4), scale=1.0)
    got = nn.dot_product_attention(q, k, v, is_causal=True)
    assert got.shape == (5, 2, 4)
    np.testing.assert_allclose(got, _attention_ref(q[None], k[None], v[None], is_causal=True)[0],
                               rtol=2e-5, atol=2e-6)
    q16, k16, v16 = (a.astype(np.float16) for a in (q, k, v))
    got16 = nn.dot_product_attention(q16, k16, v16)
    assert got16.dtype == np.float16
    np.testing.assert_allclose(np.asarray(got16, np.float32), _attention_ref(q[None], k[None], v[None])[0],
                               rtol=2e-2, atol=2e-2)
    with pytest.raises(ShapeError, match="head dim"):
        nn.dot_product_attention(q, _x((3, 2, 5)), v)
    with pytest.raises(ShapeError, match="multiple"):
        nn.dot_product_attention(_x((1, 5, 3, 4)), _x((1, 3, 2, 4)), _x((1, 3, 2, 4)))
    with pytest.raises(ShapeError, match="rank"):
        nn.dot_product_attention(_x((5, 4)), _x((3, 4)), _x((3, 4)))


def test_attention_symbolic_sequence():
    batch, seq = sh.axis("batch"), sh.axis("seq")
    spec = ShapedArray((batch, seq, 4, 8), np.float32)
    prog, _ = trace_to_program(lambda q, k, v: [nn.dot_product_attention(q, k, v, is_causal=True)],
                               [spec, spec, spec])
    assert prog.outvars[0].aval.shape == (batch, seq, 4, 8)
