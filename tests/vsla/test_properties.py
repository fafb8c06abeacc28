"""Property tests (hypothesis) and a random-program fuzz of ember.vsla against padded NumPy."""
import os

import numpy as np
import pytest

from ember import vsla
from ember._src import flags

hyp = pytest.importorskip("hypothesis", reason="property tests need hypothesis")
st = hyp.strategies

vec = st.lists(st.integers(-4, 4), min_size=0, max_size=9).map(lambda v: np.array(v, np.float32))
SETTINGS = hyp.settings(max_examples=40, deadline=None)


@SETTINGS
@hyp.given(vec)
def test_shrink_idempotent(x):
    t = vsla.array(x)
    assert t.shrink().shrink() == t.shrink()


@SETTINGS
@hyp.given(vec, st.integers(0, 9))
def test_zero_of_smaller_shape_is_identity(x, k):
    t = vsla.array(x)
    z = vsla.array(np.zeros(min(k, x.size), np.float32))
    assert (t + z) == t and (t + z).shape == t.shape


@SETTINGS
@hyp.given(vec, vec, vec)
def test_add_and_conv_laws(x, y, z):
    a, b, c = vsla.array(x), vsla.array(y), vsla.array(z)
    assert (a + b) == (b + a)
    assert ((a + b) + c) == (a + (b + c))
    assert vsla.conv(a, b) == vsla.conv(b, a)   # small integers: exact in float32
    assert vsla.conv(vsla.conv(a, b), c) == vsla.conv(a, vsla.conv(b, c))
    assert vsla.conv(a, b + c) == vsla.conv(a, b) + vsla.conv(a, c)


def test_kron_not_commutative():
    a, b = vsla.array([1.0, 2.0]), vsla.array([3.0, 4.0])
    assert not vsla.kron(a, b) == vsla.kron(b, a)


def _np_strip(x):
    nz = np.nonzero(x)[0]
    return x[: nz[-1] + 1] if nz.size else x[:0]


def _np_binary(op, x, y):
    n = max(x.size, y.size)
    px, py = np.pad(x, (0, n - x.size)), np.pad(y, (0, n - y.size))
    return {"+": px + py, "-": px - py, "*": px * py}[op]


# the dtypes the fuzz draws, each with its relative tolerance against the float64/complex128
# reference (int32: exact); float64 runs under jax_enable_x64 (on in this suite; set explicitly)
FUZZ_DTYPES = {np.dtype(np.float32): 2e-5, np.dtype(np.float64): 1e-12, np.dtype(np.int32): 0.0,
               np.dtype(np.complex64): 2e-5}


def _fuzz_values(rng, dtype, n):
    if dtype.kind == "i":
        return rng.integers(-3, 4, n).astype(np.float64)
    v = rng.standard_normal(n)
    if dtype.kind == "c":
        v = v + 1j * rng.standard_normal(n)
    v[rng.random(n) < 0.2] = 0.0  # exact zeros, trailing ones included
    return v


def test_fuzz_random_programs_against_padded_numpy():
    """Random programs (DAGs: each step reads any earlier value) of + - * conv and scalar multiply on
    random shapes and a random dtype (float32, float64 under x64, int32, complex64) against a
    float64/complex128 NumPy reference that pads explicitly: every step's shape, the result's dtype,
    its logical values within the dtype's tolerance (int32 exactly) and, for int32, the minimal
    representative. Count via VSLA_FUZZ_N, seed via VSLA_FUZZ_SEED."""
    count = int(os.environ.get("VSLA_FUZZ_N", "300"))
    rng = np.random.default_rng(int(os.environ.get("VSLA_FUZZ_SEED", "0")))
    dtypes = list(FUZZ_DTYPES)
    with flags.override("jax_enable_x64", True):
        for _ in range(count):
            dtype = dtypes[int(rng.integers(0, len(dtypes)))]
            vals = [_fuzz_values(rng, dtype, int(rng.integers(0, 7))) for _ in range(3)]
            ref = [v.copy() for v in vals]
            got = [vsla.array(v.astype(dtype)) for v in vals]
            for _ in range(int(rng.integers(1, 5))):
                i, j = (int(k) for k in rng.integers(0, len(ref), 2))
                op = ["+", "-", "*", "conv", "scale"][int(rng.integers(0, 5))]
                if op == "conv":
                    r = np.convolve(ref[i], ref[j]) if ref[i].size and ref[j].size else np.zeros(0)
                    g = vsla.conv(got[i], got[j])
                elif op == "scale":
                    s = int(rng.integers(-2, 3))
                    r, g = s * ref[i], s * got[i]
                else:
                    r = _np_binary(op, ref[i], ref[j])
                    g = {"+": got[i] + got[j], "-": got[i] - got[j], "*": got[i] * got[j]}[op]
                assert g.shape == r.shape
                ref.append(r)
                got.append(g)
            out, want = got[-1], ref[-1]
            assert out.dtype == dtype, (out.dtype, dtype)
            tol = FUZZ_DTYPES[dtype]
            scale = 1.0 + max((float(np.abs(r).max()) for r in ref if r.size), default=0.0)
            np.testing.assert_allclose(np.asarray(out.logical()), want, rtol=tol, atol=tol * scale ** 2)
            if dtype.kind == "i":
                np.testing.assert_array_equal(out.to_numpy(), _np_strip(want))
