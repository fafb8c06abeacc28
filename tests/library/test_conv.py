"""lax.conv_general_dilated / conv / conv_with_general_padding / conv_transpose against a direct NumPy
loop written here (and scipy.signal.correlate for plain cases): 1-D/2-D/3-D, strides, every padding
form, input and kernel dilation, layouts, feature and batch groups, dtypes, errors; gradients by
finite differences; jit (reference and native backends) and vmap."""

import itertools

import numpy as np
import pytest
import scipy.signal

import ember
from ember import lax
from ember._src.native.runtime import toolchain
from ember.errors import DTypeError, ShapeError
from ember.test_util import check_grads

rng = np.random.default_rng(11)


def _pads(spatial, kernel, strides, padding, rhs_dil):
    if not isinstance(padding, str):
        return list(padding)
    out = []
    for n, k, s in zip(spatial, kernel, strides):
        keff = (k - 1) * rhs_dil[len(out)] + 1
        if padding == "VALID":
            out.append((0, 0))
            continue
        total = max(0, (-(-n // s) - 1) * s + keff - n)
        lo = total // 2 if padding == "SAME" else total - total // 2
        out.append((lo, total - lo))
    return out


def ref_conv(x, w, strides, padding, lhs_dil=None, rhs_dil=None, groups=1, batch_groups=1):
    """Direct loop over output positions and kernel taps; x is (N, C, S...), w is (O, I, K...)."""
    d = x.ndim - 2
    lhs_dil = lhs_dil or (1,) * d
    rhs_dil = rhs_dil or (1,) * d
    N, C, *S = x.shape
    O, I, *K = w.shape
    pads = _pads(S, K, strides, padding, rhs_dil)
    # dilate
    xd = np.zeros((N, C, *[(s - 1) * l + 1 if s else 0 for s, l in zip(S, lhs_dil)]), dtype=np.float64)
    xd[(slice(None), slice(None), *(slice(None, None, l) for l in lhs_dil))] = x
    # pad / crop one axis at a time
    for ax, (lo, hi) in enumerate(pads):
        a = 2 + ax
        width = [(0, 0)] * xd.ndim
        width[a] = (max(lo, 0), max(hi, 0))
        xd = np.pad(xd, width)
        n = xd.shape[a]
        xd = np.take(xd, np.arange(max(-lo, 0), n - max(-hi, 0)), axis=a)
    P = xd.shape[2:]
    outs = [max(0, (p - ((k - 1) * r + 1)) // s + 1) if p >= (k - 1) * r + 1 else 0
            for p, k, r, s in zip(P, K, rhs_dil, strides)]
    Nb = N // batch_groups
    out = np.zeros((Nb, O, *outs))
    og = O // groups if groups > 1 else O // batch_groups
    for pos in itertools.product(*(range(o) for o in outs)):
        for tap in itertools.product(*(range(k) for k in K)):
            idx = tuple(p * s + t * r for p, s, t, r in zip(pos, strides, tap, rhs_dil))
            patch = xd[(slice(None), slice(None), *idx)]  # (N, C)
            wt = w[(slice(None), slice(None), *tap)]  # (O, I)
            for o in range(O):
                if groups > 1:
                    g = o // og
                    out[(slice(None), o, *pos)] += patch[:, g * I:(g + 1) * I] @ wt[o]
                else:
                    g = o // og if batch_groups > 1 else 0
                    out[(slice(None), o, *pos)] += patch[g * Nb:(g + 1) * Nb] @ wt[o]
    return out


CASES = [
    # lhs shape, rhs shape, strides, padding, lhs_dil, rhs_dil, feature groups, batch groups
    ((2, 3, 9), (4, 3, 3), (1,), "VALID", None, None, 1, 1),
    ((2, 3, 9), (4, 3, 3), (2,), "SAME", None, None, 1, 1),
    ((1, 2, 8), (3, 2, 4), (3,), "SAME_LOWER", None, (2,), 1, 1),
    ((2, 2, 7), (2, 2, 2), (1,), [(2, -1)], (3,), None, 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 2), (2, 1), "SAME", None, None, 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 2), (1, 2), "VALID", None, (2, 1), 1, 1),
    ((1, 2, 5, 5), (3, 2, 2, 3), (2, 2), [(1, 2), (0, 1)], (2, 1), (1, 2), 1, 1),
    ((2, 4, 6, 5), (6, 2, 3, 3), (1, 1), "SAME", None, None, 2, 1),
    ((2, 4, 6, 5), (4, 1, 3, 3), (1, 2), "VALID", None, None, 4, 1),  # depthwise
    ((4, 3, 6, 5), (6, 3, 2, 2), (1, 1), "VALID", None, None, 1, 2),
    ((1, 2, 4, 5, 3), (3, 2, 2, 3, 2), (1, 2, 1), "SAME", None, None, 1, 1),
    ((2, 2, 3, 3, 3), (2, 1, 2, 2, 2), (2, 1, 1), [(1, 0), (0, 1), (1, 1)], None, (1, 1, 2), 2, 1),
    ((1, 1, 3), (1, 1, 5), (1,), "VALID", None, None, 1, 1),  # empty output
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_general_dilated_matches_loop(case, dtype):
    xs, ws, strides, padding, ld, rd, g, b = case
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    got = lax.conv_general_dilated(x, w, strides, padding, ld, rd, feature_group_count=g, batch_group_count=b)
    want = ref_conv(x.astype(np.float64), w.astype(np.float64), strides, padding, ld, rd, g, b)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def test_integer_conv_is_exact():
    x = rng.integers(-5, 5, size=(2, 3, 6, 5)).astype(np.int32)
    w = rng.integers(-3, 3, size=(2, 3, 2, 2)).astype(np.int32)
    got = lax.conv(x, w, (1, 2), "SAME")
    assert got.dtype == np.int32
    np.testing.assert_array_equal(np.asarray(got), ref_conv(x, w, (1, 2), "SAME").astype(np.int32))


@pytest.mark.parametrize("mode", ["valid", "full", "same"])
def test_plain_conv_matches_scipy_correlate(mode):
    x = rng.standard_normal((1, 1, 11, 9))
    w = rng.standard_normal((1, 1, 4, 3))
    pads = {"valid": "VALID", "full": [(3, 3), (2, 2)], "same": [(2, 1), (1, 1)]}[mode]
    got = np.asarray(lax.conv(x, w, (1, 1), pads))[0, 0]
    want = scipy.signal.correlate(x[0, 0], w[0, 0], mode=mode)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # the 1-D NumPy convolution too
    v, k = rng.standard_normal(10), rng.standard_normal(4)
    np.testing.assert_allclose(np.asarray(lax.conv(v[None, None], k[None, None], (1,), "VALID"))[0, 0],
                               np.correlate(v, k, "valid"), rtol=1e-12)


@pytest.mark.parametrize("layouts", [("NHWC", "HWIO", "NHWC"), ("NCHW", "OIHW", "NHWC"),
                                     ("HWNC", "OHWI", "CNWH"), ("NWHC", "WHIO", "NCHW")])
def test_layout_strings_and_tuples(layouts):
    lhs_s, rhs_s, out_s = layouts
    x = rng.standard_normal((2, 3, 7, 6))  # canonical NCHW
    w = rng.standard_normal((4, 3, 3, 2))  # canonical OIHW
    want = ref_conv(x, w, (2, 1), "SAME")
    xl = np.transpose(x, ["NCHW".index(c) for c in lhs_s])
    wl = np.transpose(w, ["OIHW".index(c) for c in rhs_s])
    strides = tuple({"H": 2, "W": 1}[c] for c in rhs_s if c in "HW")  # spatial order is the kernel's
    got = lax.conv_general_dilated(xl, wl, strides, "SAME", dimension_numbers=layouts)
    np.testing.assert_allclose(np.asarray(got), np.transpose(want, ["NCHW".index(c) for c in out_s]),
                               rtol=1e-12, atol=1e-12)
    dn = lax.conv_dimension_numbers(xl.shape, wl.shape, layouts)
    assert isinstance(dn, lax.ConvDimensionNumbers)
    again = lax.conv_general_dilated(xl, wl, strides, "SAME", dimension_numbers=tuple(dn))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(got))


def test_conv_dimension_numbers_values():
    dn = lax.conv_dimension_numbers((1, 5, 5, 3), (2, 2, 3, 4), ("NHWC", "HWIO", "NHWC"))
    assert dn == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))
    assert lax.conv_dimension_numbers((1, 2, 3), (1, 2, 3), None) == ((0, 1, 2),) * 3


def test_conv_with_general_padding_and_padtype():
    x = rng.standard_normal((1, 2, 6, 7))
    w = rng.standard_normal((3, 2, 3, 2))
    got = lax.conv_with_general_padding(x, w, (1, 2), [(1, 1), (2, 0)], (2, 1), (1, 2))
    want = ref_conv(x, w, (1, 2), [(1, 1), (2, 0)], (2, 1), (1, 2))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
    assert lax.padtype_to_pads((7, 10), (3, 2), (2, 3), "SAME") == [(1, 1), (0, 1)]
    assert lax.padtype_to_pads((7, 10), (3, 2), (2, 3), "SAME_LOWER") == [(1, 1), (1, 0)]
    assert lax.padtype_to_pads((7, 10), (3, 2), (2, 3), "VALID") == [(0, 0), (0, 0)]


def ref_conv_transpose(x, w, strides, pads_total):
    """Transposed conv as a scatter: out[i*s + u] += x[i] * w[u] (NC.../OI... kernel), then the
    full result is cropped/padded to ``pads_total`` (lo, hi) relative to JAX's frame."""
    N, C, *S = x.shape
    O, I, *K = w.shape
    full = np.zeros((N, O, *[(n - 1) * s + k for n, s, k in zip(S, strides, K)]))
    for pos in itertools.product(*(range(n) for n in S)):
        for tap in itertools.product(*(range(k) for k in K)):
            at = tuple(p * s + t for p, s, t in zip(pos, strides, tap))
            full[(slice(None), slice(None), *at)] += x[(slice(None), slice(None), *pos)] @ w[
                (slice(None), slice(None), *tap)].T
    # conv_transpose pads the dilated input by (lo, hi); the full correlation corresponds to k-1 each
    for ax, ((lo, hi), k) in enumerate(zip(pads_total, K)):
        a = 2 + ax
        dlo, dhi = lo - (k - 1), hi - (k - 1)
        width = [(0, 0)] * full.ndim
        width[a] = (max(dlo, 0), max(dhi, 0))
        full = np.pad(full, width)
        full = np.take(full, np.arange(max(-dlo, 0), full.shape[a] - max(-dhi, 0)), axis=a)
    return full


@pytest.mark.parametrize("padding", ["SAME", "VALID", [(1, 2)]])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_conv_transpose_1d(padding, stride):
    x = rng.standard_normal((2, 5, 3))  # NHC
    w = rng.standard_normal((3, 4, 3))  # HIO with transpose_kernel: H, O, I of the forward conv
    got = np.asarray(lax.conv_transpose(x, w, (stride,), padding, transpose_kernel=True))
    k = 3
    if isinstance(padding, str):
        if padding == "SAME":
            total = k + stride - 2
            lo = k - 1 if stride > k - 1 else -(-total // 2)
        else:
            total = k + stride - 2 + max(k - stride, 0)
            lo = k - 1
        pads = [(lo, total - lo)]
    else:
        pads = padding
    # with transpose_kernel, out[i * s + u, o] += sum_c x[i, c] * w[u, o, c]
    x_nc = np.transpose(x, (0, 2, 1))
    want = ref_conv_transpose(x_nc, np.transpose(w, (1, 2, 0)), (stride,), pads)  # kernel as (O, C, K)
    np.testing.assert_allclose(got, np.transpose(want, (0, 2, 1)), rtol=1e-12, atol=1e-12)
    if padding == "SAME":
        assert got.shape[1] == 5 * stride
    if padding == "VALID":
        assert got.shape[1] == 5 * stride + max(k - stride, 0)


def test_conv_transpose_2d_is_input_gradient_of_conv():
    x = rng.standard_normal((2, 7, 6, 3))  # NHWC
    w = rng.standard_normal((3, 2, 3, 4))  # HWIO
    dn = ("NHWC", "HWIO", "NHWC")

    def f(v):
        return lax.conv_general_dilated(v, w, (2, 2), "VALID", dimension_numbers=dn)

    y, pullback = ember.vjp(f, x)
    ct = rng.standard_normal(np.shape(y))
    (gx,) = pullback(ct)
    # the gradient is a transposed conv of the cotangent; VALID conv_transpose frames it from the
    # start, so compare on the overlap
    got = np.asarray(lax.conv_transpose(ct, w, (2, 2), "VALID", dimension_numbers=dn, transpose_kernel=True))
    n0, n1 = min(got.shape[1], 7), min(got.shape[2], 6)
    np.testing.assert_allclose(got[:, :n0, :n1], np.asarray(gx)[:, :n0, :n1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[6], CASES[7], CASES[9], CASES[11]],
                         ids=["strided", "lhs_dil", "dil2d", "groups", "batch_groups", "3d"])
def test_conv_grads(case):
    xs, ws, strides, padding, ld, rd, g, b = case
    x = rng.standard_normal(xs)
    w = rng.standard_normal(ws)

    def f(a, k):
        return lax.conv_general_dilated(a, k, strides, padding, ld, rd, feature_group_count=g,
                                        batch_group_count=b)

    check_grads(f, (x, w), order=2, modes=("fwd", "rev"))


def test_conv_jit_and_vmap():
    x = rng.standard_normal((3, 2, 3, 8, 7)).astype(np.float32)  # extra leading axis to map
    w = rng.standard_normal((3, 4, 3, 3, 2)).astype(np.float32)

    def f(a, k):
        return lax.conv_general_dilated(a, k, (2, 1), "SAME", rhs_dilation=(1, 2))

    eager = np.stack([np.asarray(f(x[i], w[i])) for i in range(3)])
    np.testing.assert_allclose(np.asarray(ember.vmap(f)(x, w)), eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ember.vmap(f, in_axes=(0, None))(x, w[0])),
                               np.stack([np.asarray(f(x[i], w[0])) for i in range(3)]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ember.jit(f)(x[0], w[0])), eager[0], rtol=1e-6, atol=1e-6)
    # vmap of the gradient
    g = ember.vmap(ember.grad(lambda a, k: f(a, k).sum(), argnums=1))(x, w)
    assert np.shape(g) == w.shape
    g0 = ember.grad(lambda a, k: f(a, k).sum(), argnums=1)(x[0], w[0])
    np.testing.assert_allclose(np.asarray(g)[0], np.asarray(g0), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")
def test_conv_native_backend():
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 1, 6)).astype(np.float32)

    def f(a, k):
        return lax.conv_general_dilated(a, k, (1, 2), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                        feature_group_count=3)

    want = np.asarray(f(x, w))
    got = np.asarray(ember.jit(f, backend="native")(x, w))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_preferred_element_type():
    x = rng.integers(-3, 3, size=(1, 2, 5)).astype(np.int8)
    w = rng.integers(-3, 3, size=(2, 2, 3)).astype(np.int8)
    got = lax.conv(x, w, (1,), "VALID", preferred_element_type=np.int32)
    assert got.dtype == np.int32
    want = ref_conv(x.astype(np.int64), w.astype(np.int64), (1,), "VALID")
    np.testing.assert_array_equal(np.asarray(got), want)


def test_conv_errors():
    x = np.zeros((1, 4, 5, 5), np.float32)
    w = np.zeros((2, 4, 3, 3), np.float32)
    with pytest.raises(DTypeError):
        lax.conv(x, w.astype(np.float64), (1, 1), "SAME")
    with pytest.raises(ShapeError, match="input features"):
        lax.conv(x, np.zeros((2, 3, 3, 3), np.float32), (1, 1), "SAME")
    with pytest.raises(ShapeError, match="equal rank"):
        lax.conv(x, np.zeros((2, 4, 3), np.float32), (1, 1), "SAME")
    with pytest.raises(ValueError, match="padding"):
        lax.conv(x, w, (1, 1), "FULL")
    with pytest.raises(ValueError, match="window_strides"):
        lax.conv(x, w, (1,), "SAME")
    with pytest.raises(ValueError, match="positive"):
        lax.conv(x, w, (0, 1), "SAME")
    with pytest.raises(ValueError, match="lhs_dilation"):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", lhs_dilation=(2, 1))
    with pytest.raises(ValueError, match="pairs"):
        lax.conv_general_dilated(x, w, (1, 1), [(1, 1)])
    with pytest.raises(ShapeError, match="divisible"):
        lax.conv_general_dilated(x, np.zeros((3, 2, 3, 3), np.float32), (1, 1), "SAME", feature_group_count=2)
    with pytest.raises(TypeError, match="exactly once"):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWW", "OIHW", "NCHW"))
    with pytest.raises(ValueError, match="at most one"):
        lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2, batch_group_count=2)


def test_conv_and_pool_with_a_named_dynamic_batch_axis():
    # its own generator: the module's is shared with the tests a pytest-xdist worker ran before
    rng = np.random.default_rng(325)
    k = rng.standard_normal((3, 3, 4, 8)).astype(np.float32)

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return lax.reduce_window(y, -np.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "SAME")

    g = ember.jit(f, dynamic_axes={"x": ("batch", None, None, None)})
    for n in (2, 5):
        x = rng.standard_normal((n, 6, 6, 4)).astype(np.float32)
        # 36-term float32 sums of magnitude ~10 in two summation orders (fused program vs op by
        # op): a near-cancelling output differed by 1.3e-6 for some draws
        np.testing.assert_allclose(np.asarray(g(x, k)), np.asarray(f(x, k)), rtol=1e-5, atol=1e-5)
    assert g.traces == 1
