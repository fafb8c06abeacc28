"""Row kernels (softmax, log_softmax, logsumexp, layer norm) against float64 NumPy/SciPy references,
and the vectorized row exp they use (``csrc/vexp.h``): its accuracy over the whole float32 line, the
agreement of its variants bit for bit, and its closeness to the scalar ``em_expf`` of map kernels."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
import scipy.special as sps

import ember
from ember import nn
from ember._src.native.csrc import load
from ember._src.native.emit import c_ops
from ember._src.native.runtime import compiler
from tests.native.conftest import requires_cc
from tests.native.emit.test_c_math import _max_error, _sweep

LENGTHS = [1, 2, 15, 16, 17, 1000, 1024, 4097]
# the variants of vexp.h: as compiled for this CPU, then with the wider instruction sets hidden
VARIANTS = {"native": "", "no_avx512": "#undef __AVX512F__\n",
            "scalar": "#undef __AVX512F__\n#undef __AVX2__\n"}


def _exp_row_lib(variant: str):
    body = (VARIANTS[variant] + load("vexp.h")
            + "float run_row(const float *x, float *o, int64_t m) { return em_exp_row_f32(o, x, 0.0f, m); }\n"
            "float run_row_c(const float *x, float *o, int64_t m, float c) {\n"
            "    return em_exp_row_f32(o, x, c, m);\n}\n"
            "void run_scalar(const float *restrict x, float *restrict o, int64_t m) {\n"
            "    for (int64_t i = 0; i < m; ++i) o[i] = em_expf(x[i]);\n}\n"
            "static float ident(float m) { return m; }\n"
            "float run_logf(float s) { return em_logf(s); }\n"
            "void run_softmax(const float *x, float *o, int64_t rows, int64_t m) {\n"
            "    em_softmax_rows_f32(o, x, rows, m, ident);\n}\n"
            "void run_log_softmax(const float *x, float *o, int64_t rows, int64_t m) {\n"
            "    em_log_softmax_rows_f32(o, x, rows, m, ident, run_logf);\n}\n")
    lib = compiler.load_library(c_ops.prelude_for(body) + body, name_hint="vexp_test")
    for name in ("run_row", "run_scalar"):
        getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.run_row_c.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float]
    lib.run_softmax.argtypes = lib.run_log_softmax.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                               ctypes.c_int64, ctypes.c_int64]
    lib.run_logf.argtypes, lib.run_logf.restype = [ctypes.c_float], ctypes.c_float
    lib.run_row.restype = lib.run_row_c.restype = ctypes.c_float
    return lib


@pytest.fixture(scope="module", params=list(VARIANTS))
def exp_lib(request):
    return _exp_row_lib(request.param)


def _call(f, x: np.ndarray) -> tuple[np.ndarray, float]:
    o = np.empty_like(x)
    s = f(x.ctypes.data, o.ctypes.data, x.size)
    return o, s


@requires_cc
def test_row_exp_accuracy_whole_float32_range(exp_lib):
    """<= 2 ulp against float64 exp over every 509th float32 bit pattern (both signs, subnormal
    inputs, +-inf, NaNs) and dense runs at the overflow/underflow thresholds; subnormal results
    within 1.2e-44; exp(-inf) = 0, exp(+inf) = inf, exp(NaN) = NaN."""
    x = _sweep()
    _max_error(lambda xp, op, m: exp_lib.run_row(xp, op, m), np.exp, "em_expf", x)
    special = np.array([-np.inf, np.inf, np.nan, 88.72283, 88.72284, -103.97, -104.0, -87.33655, 0.0, -0.0],
                       np.float32)
    got, _ = _call(exp_lib.run_row, special)
    assert got[0] == 0 and got[1] == np.inf and np.isnan(got[2])
    assert np.isfinite(got[3]) and got[4] == np.inf  # the float32 overflow threshold
    assert 0 < got[5] < np.finfo(np.float32).tiny and got[6] == 0  # subnormal, then 0
    assert got[8] == 1 and got[9] == 1


@pytest.fixture(scope="module")
def scalar_lib():
    return _exp_row_lib("scalar")


@requires_cc
def test_row_exp_variants_agree_bitwise(exp_lib, scalar_lib):
    """Every variant (AVX-512F, AVX2+FMA, scalar) gives the same bits for every input at every
    row length and tail position: a value does not depend on the CPU's vector width. (All 2^32
    inputs were compared during development; here every 509th bit pattern.)"""
    x = _sweep()
    for n in (x.size, 1, 7, 15, 16, 17, 31, 33):
        xs = np.ascontiguousarray(x[:n])
        row, _ = _call(exp_lib.run_row, xs)
        ref, _ = _call(scalar_lib.run_row, xs)
        num = ~np.isnan(row)
        np.testing.assert_array_equal(row.view(np.uint32)[num], ref.view(np.uint32)[num])
        assert np.array_equal(np.isnan(row), np.isnan(ref))
    # exp(x - c): the float32 difference, then exp (as a kernel computing x - c itself)
    for c in (np.float32(1.5), np.float32(-80.25), np.float32(np.inf)):
        with np.errstate(invalid="ignore"):
            shifted, _ = _call(scalar_lib.run_row, x - c)
        row = np.empty_like(x)
        exp_lib.run_row_c(x.ctypes.data, row.ctypes.data, x.size, c)
        num = ~np.isnan(row)
        np.testing.assert_array_equal(row.view(np.uint32)[num], shifted.view(np.uint32)[num])
        assert np.array_equal(np.isnan(row), np.isnan(shifted))


@requires_cc
def test_row_exp_close_to_map_exp(exp_lib):
    """The row exp and the map kernels' scalar em_expf are different polynomials, each <= 2 ulp:
    they differ by at most 1 ulp where the result is normal (checked over the sweep)."""
    x = _sweep()
    row, _ = _call(exp_lib.run_row, x)
    scalar, _ = _call(exp_lib.run_scalar, x)
    assert np.array_equal(np.isnan(row), np.isnan(scalar))
    normal = np.isfinite(scalar) & (scalar >= np.finfo(np.float32).tiny)
    gap = np.abs(row[normal].view(np.int32).astype(np.int64) - scalar[normal].view(np.int32).astype(np.int64))
    assert gap.max() <= 1
    rest = ~normal & ~np.isnan(row)  # 0, subnormal or infinite results
    np.testing.assert_array_equal(np.isinf(row[rest]), np.isinf(scalar[rest]))
    fin = rest & np.isfinite(row)
    assert np.abs(row[fin] - scalar[fin]).max(initial=0) <= 3e-45


@requires_cc
@pytest.mark.parametrize("n", LENGTHS)
def test_row_exp_returns_row_sum(exp_lib, n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    got, s = _call(exp_lib.run_row, x)
    np.testing.assert_allclose(s, np.exp(x.astype(np.float64)).sum(), rtol=1e-5)
    assert _call(exp_lib.run_row, x)[1] == s  # the same order every call
    x[n // 2] = np.nan
    assert np.isnan(_call(exp_lib.run_row, x)[1])
    x[:] = -np.inf
    assert _call(exp_lib.run_row, x)[1] == 0


def _softmax_reference(lib, x: np.ndarray, log: bool = False) -> np.ndarray:
    """Row by row through ``lib``'s em_exp_row_f32: e = exp(x - max) with its returned sum s,
    then e * float32(1 / s), or (x - max) - em_logf(s) when ``log`` (the bits
    em_softmax_rows_f32 / em_log_softmax_rows_f32 and the row kernels must give)."""
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        row = np.ascontiguousarray(x[r])
        m = np.float32(np.nan) if np.isnan(row).any() else row.max(initial=-np.inf)
        s = lib.run_row_c(row.ctypes.data, out[r].ctypes.data, row.size, m)
        with np.errstate(all="ignore"):
            if log:
                out[r] = (row - m) - np.float32(lib.run_logf(s))
            else:
                out[r] *= np.float32(1) / np.float32(s)
    return out


def calls(source: str, helper: str) -> bool:
    """Whether a kernel of ``source`` calls ``helper`` (vexp.h, included whole, defines it anyway)."""
    return re.search(rf"^\s+{helper}\(p\w+ \+ b_ \* ", source, re.M) is not None


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    num = ~np.isnan(got)
    np.testing.assert_array_equal(got.view(np.uint32)[num], want.view(np.uint32)[num])


@requires_cc
@pytest.mark.parametrize("n", LENGTHS)
def test_softmax_rows_helper(exp_lib, n):
    """em_softmax_rows_f32 and em_log_softmax_rows_f32 (each variant; the AVX-512 one overlaps
    neighbouring rows' passes) give the bits of exp-then-normalize row by row, for any number
    of rows (1, 2, and 9 special rows repeated past one block)."""
    x = np.concatenate([_rows(n, np.float32)] * 8)
    for log, run in ((False, exp_lib.run_softmax), (True, exp_lib.run_log_softmax)):
        for rows in (1, 2, x.shape[0]):
            xs = np.ascontiguousarray(x[:rows])
            got = np.full_like(xs, 7.0)
            run(xs.ctypes.data, got.ctypes.data, rows, n)
            _same_bits(got, _softmax_reference(exp_lib, xs, log))
    inplace = x.copy()  # dst == src (the softmax only)
    exp_lib.run_softmax(inplace.ctypes.data, inplace.ctypes.data, x.shape[0], n)
    _same_bits(inplace, _softmax_reference(exp_lib, x))


def _lax_log_softmax(v):
    s = v - ember.lax.broadcast_in_dim(ember.lax.reduce_max(v, (1,)), v.shape, (0,))
    return s - ember.lax.broadcast_in_dim(ember.lax.log(ember.lax.reduce_sum(ember.lax.exp(s), (1,))),
                                          v.shape, (0,))


@requires_cc
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("form", ["lax", "nn", "lax log", "nn log"])
def test_softmax_kernel_is_one_call(threads, form):
    """A float32 row softmax or log-softmax (the lax formulas, or nn's with the -inf shift)
    compiles to one helper call over blocks of rows (chunks of the pool at 2 threads) and gives
    the reference bits; rows spanning several blocks and chunks, special rows included."""
    x = np.concatenate([_rows(300, np.float32)] * 15)  # 135 rows
    fn = {"lax": _plain_softmax, "nn": lambda v: nn.softmax(v, axis=-1), "lax log": _lax_log_softmax,
          "nn log": lambda v: nn.log_softmax(v, axis=-1)}[form]
    f = ember.jit(fn, backend="native", num_threads=threads, parallel_threshold=1)
    got = np.asarray(f(x))
    log = form.endswith("log")
    source = f.lower(x).executable.source
    assert calls(source, "em_log_softmax_rows_f32" if log else "em_softmax_rows_f32")
    assert not calls(source, "em_softmax_rows_f32" if log else "em_log_softmax_rows_f32")
    want = _softmax_reference(_exp_row_lib("native"), x, log)
    if form == "nn log":  # nn's shift is 0 for a row of -inf (log_softmax -inf - -inf = NaN either way)
        assert np.isnan(got[2::9]).all() and np.isnan(want[2::9]).all()
    _same_bits(got, want)


@requires_cc
def test_softmax_helper_only_where_it_applies():
    """Softmaxes the helper does not cover keep the generic row kernel (and NumPy's results):
    float64, the first axis (strided rows), a slice of a wider array, symbolic row lengths and a
    softmax followed by another operation."""
    x = _rows(40, np.float32)
    cases = [(lambda v: nn.softmax(v, axis=-1), x.astype(np.float64), {}),
             (lambda v: nn.softmax(v, axis=0), np.ascontiguousarray(x.T), {}),
             (lambda v: nn.softmax(v[:, 1:], axis=-1), x, {}),
             (lambda v: nn.softmax(v, axis=-1) * 3.0, x, {}),
             (lambda v: nn.softmax(v, axis=-1), x, {"dynamic_axes": {"v": ("b", "n")}})]
    for fn, arg, kw in cases:
        f = ember.jit(fn, backend="native", **kw)
        got = np.asarray(f(arg))
        exe = f.lower(arg).executable  # (a symbolic executable shows no single source)
        assert not calls(getattr(exe, "source", ""), "em_softmax_rows_f32")
        with np.errstate(all="ignore"):
            want = np.asarray(ember.jit(fn, backend="numpy")(arg))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-30, equal_nan=True)


def _plain_softmax(v):
    m = ember.lax.reduce_max(v, (1,))
    e = ember.numpy.exp(v - ember.lax.broadcast_in_dim(m, v.shape, (0,)))
    return e / ember.lax.broadcast_in_dim(ember.lax.reduce_sum(e, (1,)), v.shape, (0,))


# --- row kernels end to end ---------------------------------------------------------------------

def _rows(n: int, dtype: np.dtype) -> np.ndarray:
    """Rows of length n: ordinary values; masked rows (-inf entries, one all -inf); a row with
    +inf, one with NaN; huge and tiny (subnormal) magnitudes."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((9, n)) * 3).astype(dtype)
    x[1, ::3] = -np.inf  # masked attention row (keeps x[1, 1] when n > 1)
    if n > 1:
        x[1, 1] = 0.5
    x[2] = -np.inf  # fully masked: NaN for softmax as NumPy/JAX
    x[3, n // 2] = np.inf
    x[4, n - 1] = np.nan
    x[5] *= 1e15 if dtype == np.float32 else 1e150  # huge, yet the layer norm's squares stay finite
    x[6] = rng.standard_normal(n) * 1e-40
    x[7, 0] = 80.0
    x[7, n // 3] = -80.0
    return x


def _ref_shift(x: np.ndarray) -> np.ndarray:
    """The row maximum, 0 for a row without entries (all -inf), as JAX's softmax."""
    m = x.max(-1, keepdims=True)
    return np.where(m == -np.inf, 0, m)


def _references(x: np.ndarray) -> tuple[np.ndarray, ...]:
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        s = x - _ref_shift(x)
        e = np.exp(s)
        tot = e.sum(-1, keepdims=True)
        soft = e / tot
        logsoft = s - np.log(tot)
        lse = sps.logsumexp(x, axis=-1)
        mean = x.mean(-1, keepdims=True)
        ln = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    return soft, logsoft, lse, ln


def _family(x, axis):
    mean = ember.numpy.mean(x, axis=axis, keepdims=True)
    xc = x - mean
    ln = xc * ember.lax.rsqrt(ember.numpy.mean(xc * xc, axis=axis, keepdims=True) + 1e-5)
    return nn.softmax(x, axis=axis), nn.log_softmax(x, axis=axis), nn.logsumexp(x, axis=axis), ln


@requires_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("last", [True, False], ids=["last_axis", "first_axis"])
def test_softmax_family_vs_float64(n, dtype, last):
    x = _rows(n, dtype)
    f = ember.jit(lambda v: _family(v, -1 if last else 0), backend="native")
    arg = x if last else np.ascontiguousarray(x.T)
    got = f(arg)
    rtol, tiny = (2e-5, 1e-37) if dtype == np.float32 else (1e-12, 1e-300)
    for name, g, w in zip(("softmax", "log_softmax", "logsumexp", "layer norm"), got, _references(x)):
        g = np.asarray(g)
        assert g.dtype == dtype, name
        g = g if last or g.ndim == 1 else g.T
        w = w.astype(dtype)
        finite = np.isfinite(w)
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"{name}: NaN pattern, n={n}"
        np.testing.assert_array_equal(g[np.isinf(w)], w[np.isinf(w)], err_msg=name)
        # log_softmax and logsumexp are differences of O(|x|) terms: their error scales with the
        # row's magnitude; a layer norm's outputs are O(1)
        scale = np.abs(x.astype(np.float64)).max(-1, initial=0, where=np.isfinite(x), keepdims=g.ndim > 1)
        atol = {"softmax": tiny, "layer norm": 4 * rtol}.get(name, rtol * np.broadcast_to(scale, g.shape) * 4)
        err = np.abs(g[finite].astype(np.float64) - w[finite])
        assert np.all(err <= rtol * np.abs(w[finite]) + (atol if np.isscalar(atol) else atol[finite])), \
            f"{name}: max error {err.max()} (n={n})"
    if dtype == np.float32 and n > 1 and last:
        assert "em_exp_row_f32(" in f.lower(arg).executable.source  # the vectorized row exp ran


@requires_cc
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 17, 1024])
def test_softmax_family_gradients(n, dtype):
    """grad of a weighted sum of softmax, log_softmax and logsumexp vs the float64 closed form."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((4, n)) * 3).astype(dtype)
    w1, w2, w3 = (rng.standard_normal(s).astype(dtype) for s in ((4, n), (4, n), (4,)))

    def loss(v):
        return ((nn.softmax(v) * w1).sum() + (nn.log_softmax(v) * w2).sum()
                + (nn.logsumexp(v, axis=-1) * w3).sum())

    got = np.asarray(ember.jit(ember.grad(loss), backend="native")(x))
    x64, a, b, c = (t.astype(np.float64) for t in (x, w1, w2, w3))
    s = sps.softmax(x64, axis=-1)
    want = (s * (a - (s * a).sum(-1, keepdims=True)) + b - s * b.sum(-1, keepdims=True) + s * c[:, None])
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


@requires_cc
def test_plain_softmax_formula_and_thread_count():
    """The benchmark's lax formula (max, exp, sum, divide: one kernel) equals the float64 NumPy
    result, and the pooled rows give the same bits on 1 and 2 threads."""
    x = _rows(1024, np.float32)
    x = np.concatenate([x] * 8)
    one = ember.jit(_plain_softmax, backend="native", num_threads=1)
    two = ember.jit(_plain_softmax, backend="native", num_threads=2, parallel_threshold=1)
    x64 = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(x64 - x64.max(1, keepdims=True))
        want = (e / e.sum(1, keepdims=True)).astype(np.float32)
    g1, g2 = np.asarray(one(x)), np.asarray(two(x))
    np.testing.assert_allclose(g1, want, rtol=2e-5, atol=1e-37, equal_nan=True)
    np.testing.assert_array_equal(g1.view(np.uint32), g2.view(np.uint32))
    assert calls(two.lower(x).executable.source, "em_softmax_rows_f32")


@requires_cc
def test_row_exp_under_dynamic_axes():
    """One symbolic build serves every row length (the row exp's length is a C expression), empty
    rows included."""
    f = ember.jit(lambda v: (nn.softmax(v), nn.logsumexp(v, axis=-1)), dynamic_axes={"v": ("batch", "n")},
                  backend="native")
    for shape in [(3, 17), (5, 1), (2, 1030), (4, 0)]:
        x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
        soft, lse = (np.asarray(t) for t in f(x))
        x64 = x.astype(np.float64)
        want_lse = sps.logsumexp(x64, -1) if shape[1] else np.full(shape[0], -np.inf)
        np.testing.assert_allclose(lse, want_lse, rtol=2e-5)
        if shape[1]:
            np.testing.assert_allclose(soft, sps.softmax(x64, -1), rtol=2e-5, atol=1e-37)
    assert "em_exp_row_f32(" in f.lower(x).executable.source
