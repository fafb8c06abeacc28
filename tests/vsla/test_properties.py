"""Property tests (hypothesis) and a random-program fuzz of ember.vsla against padded NumPy."""
import os

import numpy as np
import pytest

from ember import vsla

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


def test_fuzz_random_programs_against_padded_numpy():
    """Random programs of + - * conv and scalar multiply; count via VSLA_FUZZ_N, seed via VSLA_FUZZ_SEED."""
    count = int(os.environ.get("VSLA_FUZZ_N", "300"))
    rng = np.random.default_rng(int(os.environ.get("VSLA_FUZZ_SEED", "0")))
    for _ in range(count):
        vals = [rng.integers(-3, 4, int(rng.integers(0, 7))).astype(np.float64) for _ in range(3)]
        ref = [v.copy() for v in vals]
        got = [vsla.array(v.astype(np.float32)) for v in vals]
        for _ in range(int(rng.integers(1, 5))):
            i, j = (int(k) for k in rng.integers(0, len(ref), 2))
            op = ["+", "-", "*", "conv", "scale"][int(rng.integers(0, 5))]
            if op == "conv":
                r = np.convolve(ref[i], ref[j]) if ref[i].size and ref[j].size else np.zeros(0)
                g = vsla.conv(got[i], got[j])
            elif op == "scale":
                s = float(rng.integers(-2, 3))
                r, g = s * ref[i], s * got[i]
            else:
                r = _np_binary(op, ref[i], ref[j])
                g = {"+": got[i] + got[j], "-": got[i] - got[j], "*": got[i] * got[j]}[op]
            assert g.shape == r.shape
            ref.append(r)
            got.append(g)
        np.testing.assert_allclose(got[-1].to_numpy(), _np_strip(ref[-1]), rtol=1e-4, atol=1e-3)
