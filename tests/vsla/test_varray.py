"""ember.vsla: semantics of issue 19 checked against NumPy references that pad explicitly."""
import doctest
import pathlib

import numpy as np
import pytest

import ember
from ember import vsla

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "vsla.md"


def _pad(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def _minimal(x: np.ndarray) -> np.ndarray:
    for ax in range(x.ndim):
        m = np.moveaxis(x, ax, 0)
        nz = np.nonzero(np.any(m != 0, axis=tuple(range(1, m.ndim))))[0]
        x = np.moveaxis(m[: (nz[-1] + 1 if nz.size else 0)], 0, ax)
    return x


def test_doctests_of_docs_page():
    res = doctest.testfile(str(DOC), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.attempted > 20 and res.failed == 0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_promotion_matches_padded_numpy(seed, op):
    rng = np.random.default_rng(seed)
    rank = 1 + seed % 3
    sa = tuple(int(d) for d in rng.integers(0, 6, rank))
    sb = tuple(int(d) for d in rng.integers(0, 6, rank))
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    shape = tuple(max(x, y) for x, y in zip(sa, sb))
    ref = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](_pad(a, shape), _pad(b, shape))
    f = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y}[op]
    out = f(vsla.array(a), vsla.array(b))
    assert out.shape == shape
    np.testing.assert_allclose(out.to_numpy(), _minimal(ref), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("m,n", [(1, 1), (1, 2), (4, 4), (7, 3), (0, 3), (16, 9)])
def test_conv_matches_numpy(m, n):
    rng = np.random.default_rng(m * 31 + n)
    a = rng.standard_normal(m).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = vsla.conv(vsla.array(a), vsla.array(b))
    assert out.shape == ((m + n - 1,) if m and n else (0,))
    ref = np.convolve(a, b) if m and n else np.zeros(0)
    np.testing.assert_allclose(out.to_numpy(), _minimal(ref), rtol=1e-5, atol=1e-5)


def test_conv_batched_zero_extends_batch_axis():
    a = np.array([[1.0, 2.0], [1.0, 1.0]], np.float32)
    b = np.array([[3.0, 4.0], [2.0, 0.0], [1.0, 1.0]], np.float32)
    out = vsla.conv(vsla.array(a), vsla.array(b))
    pa, pb = _pad(a, (3, 2)), b
    ref = np.stack([np.convolve(x, y) for x, y in zip(pa, pb)])
    assert out.shape == (3, 3)
    np.testing.assert_allclose(out.to_numpy(), _minimal(ref), rtol=1e-6)


def test_kron_noncommutative_and_numpy():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    ab, ba = vsla.kron(vsla.array(a), vsla.array(b)), vsla.kron(vsla.array(b), vsla.array(a))
    np.testing.assert_allclose(ab.to_numpy(), np.kron(a, b), rtol=1e-6)
    assert not ab == ba


def test_properties_small():
    rng = np.random.default_rng(7)
    for _ in range(10):
        x, y, z = (vsla.array(rng.standard_normal(int(rng.integers(1, 9))).astype(np.float32))
                   for _ in range(3))
        assert x.shrink().shrink() == x.shrink()
        zero = vsla.array(np.zeros(max(0, x.shape[0] - 2), np.float32))
        assert (x + zero).shape == x.shape and (x + zero) == x
        np.testing.assert_allclose((x + y).to_numpy(), (y + x).to_numpy())
        lhs = vsla.conv(x, y + z).to_numpy()
        rhs = (vsla.conv(x, y) + vsla.conv(x, z)).to_numpy()
        np.testing.assert_allclose(lhs, rhs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(vsla.conv(vsla.conv(x, y), z).to_numpy(),
                                   vsla.conv(x, vsla.conv(y, z)).to_numpy(), rtol=1e-4, atol=1e-4)


def test_stack_unstack_roundtrip():
    items = [np.arange(1, k + 1, dtype=np.float32) for k in (2, 5, 1, 3)]
    s = vsla.stack([vsla.array(v) for v in items])
    assert s.shape == (4, 5)
    np.testing.assert_array_equal(s.to_numpy(), np.stack([_pad(v, (5,)) for v in items]))
    for got, want in zip(vsla.unstack(s), items):
        np.testing.assert_array_equal(got.to_numpy(), want)


def test_jit_and_grad_see_data_leaf():
    a = vsla.array(np.array([1.0, 2.0, 3.0], np.float32))
    b = vsla.array(np.array([4.0, 5.0], np.float32))
    out = ember.jit(lambda x, y: x * y + x)(a, b)
    np.testing.assert_allclose(out.to_numpy(), [5.0, 12.0, 3.0])
    g = ember.grad(lambda x: (x * b).logical().sum())(a)
    np.testing.assert_allclose(np.asarray(g.logical()), [4.0, 5.0, 0.0])


def test_bad_input():
    with pytest.raises(ValueError, match="mixed ranks"):
        vsla.array([1.0, 2.0]) + vsla.array([[1.0]])
    with pytest.raises(TypeError, match="non-numeric"):
        vsla.array(np.array(["a", "b"]))
    with pytest.raises(ValueError, match="negative"):
        vsla.VArray(np.zeros(1, np.float32), (-1,))
    with pytest.raises(OverflowError):
        vsla.next_pow2(2**63)


def test_empty_operands():
    e = vsla.array(np.zeros(0, np.float32))
    x = vsla.array(np.array([1.0, 2.0], np.float32))
    assert (e + x) == x and vsla.conv(e, x).shape == (0,)
    assert vsla.conv(e, x).to_numpy().size == 0


def test_jit_traces_once_per_logical_shape_and_reuses_cache():
    """Current representation: the logical shape is static metadata, so each new logical shape traces
    once and a repeated shape is a cache hit (one compile per rank is issue 19's open goal)."""
    f = ember.jit(lambda x, y: vsla.conv(x, y) + x)
    rng = np.random.default_rng(5)
    shapes = [(int(rng.integers(1, 6)), int(rng.integers(1, 6))) for _ in range(4)]
    for _ in range(2):
        for m, n in shapes:
            a, b = rng.standard_normal(m).astype(np.float32), rng.standard_normal(n).astype(np.float32)
            ref = np.convolve(a, b)
            ref[:m] += a
            np.testing.assert_allclose(f(vsla.array(a), vsla.array(b)).to_numpy(), ref, rtol=1e-5, atol=1e-5)
    assert f.cache_info()["traces"] == len(set(shapes))


def test_array_dtype_follows_x64_policy():
    import warnings

    from ember._src import flags
    with flags.override("jax_enable_x64", True):
        v = vsla.array(np.arange(3.0))
        assert v.dtype == np.float64
        np.testing.assert_array_equal(v.to_numpy(), np.arange(3.0))
        assert vsla.sum(v).dtype == np.float64
        assert vsla.array(np.arange(3)).dtype == np.int64
        assert vsla.ragged([np.arange(1.0, 3.0)]).dtype == np.float64
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert vsla.array([1.0], dtype=np.float64).dtype == np.float64
    with flags.override("jax_enable_x64", False):
        assert vsla.array(np.arange(3.0)).dtype == np.float32
        with pytest.warns(UserWarning, match="float64 requested in vsla.array"):
            assert vsla.array([1.0, 2.0], dtype=np.float64).dtype == np.float32
        with pytest.warns(UserWarning, match="float64 requested in vsla.ragged"):
            assert vsla.ragged([[1.0]], dtype=np.float64).dtype == np.float32


def test_vmap_over_unbatched_varray_raises_clearly():
    with pytest.raises(ValueError, match="cannot hold data of rank 1"):
        ember.vmap(lambda v: v + vsla.array([1.0, 2.0]))(vsla.array(np.ones((3, 2))))
    # the supported form: the batch as an extra leading data axis of a per-example VArray
    xs = np.arange(8.0, dtype=np.float32).reshape(2, 4)
    xs[:, 3] = 0.0  # each example's slack
    batched = vsla.VArray(ember.numpy.asarray(xs), (3,))
    out = ember.vmap(lambda v: v + vsla.array(np.array([1.0, 2.0], np.float32)))(batched)
    np.testing.assert_array_equal(np.asarray(out.data), xs + np.array([1.0, 2.0, 0.0, 0.0]))


def _strip_reference(x):
    """The minimal representative, one hyperplane at a time (the definition)."""
    for ax in range(x.ndim):
        while x.shape[ax] and not np.any(np.take(x, x.shape[ax] - 1, axis=ax) != 0):
            x = np.take(x, np.arange(x.shape[ax] - 1), axis=ax)
    return np.zeros((0,) * x.ndim, x.dtype) if 0 in x.shape else x


@pytest.mark.parametrize("seed", range(8))
def test_vectorized_shrink_and_kron_match_definitions(seed):
    rng = np.random.default_rng(seed)
    rank = 1 + seed % 3
    shape = tuple(int(d) for d in rng.integers(0, 6, rank))
    x = rng.integers(-2, 3, shape).astype(np.float32) * (rng.random(shape) < 0.3)
    if seed == 5 and x.size:
        x.flat[0] = np.nan  # NaN is not zero
    want = _strip_reference(x)
    v = vsla.array(x)
    assert v.shrink().shape == want.shape and v.to_numpy().shape == want.shape
    np.testing.assert_array_equal(v.to_numpy(), want)
    assert (v == vsla.array(want)) == (not np.isnan(x).any())  # NaN != NaN
    y = rng.integers(-3, 4, tuple(int(d) for d in rng.integers(0, 4, rank))).astype(np.int32)
    k = vsla.kron(v, vsla.array(y))
    np.testing.assert_array_equal(k.to_numpy(), _strip_reference(np.kron(want, _strip_reference(y))))
    assert k.dtype == np.float32  # JAX promotion: float32 with int32 stays float32
