"""ember.vsla structural ops under vsla.jit (stack, window, pyramid, slice, gather): one compile
for every shape, results equal to the eager ops and to NumPy references that pad explicitly."""
import numpy as np
import pytest

from ember import vsla


def _pad(x, shape):
    return np.pad(x, [(0, s - d) for s, d in zip(shape, x.shape)])


def test_stack_under_vsla_jit_one_compile():
    rng = np.random.default_rng(21)
    f = vsla.jit(lambda a, b, c: vsla.stack([a, b, c]))
    for shapes in ([(2, 3), (4, 1), (1, 5)], [(1, 1), (2, 2), (3, 7)], [(0, 2), (5, 5), (1, 1)]):
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        got = f(*[vsla.array(x) for x in xs])
        full = tuple(max(s[i] for s in shapes) for i in range(2))
        want = np.stack([_pad(x, full) for x in xs])
        assert got.shape == (3,) + full
        np.testing.assert_array_equal(np.asarray(got.logical()), want)
    assert f.cache_info()["compiles"] == 1


def test_pyramid_under_vsla_jit():
    f = vsla.jit(lambda *vs: list(vsla.pyramid(vs, 2, 2)))
    (out,) = f(*[vsla.array(np.arange(1.0, k + 1)) for k in (1, 2, 3, 4)])
    want = np.array([[[1, 0, 0, 0], [1, 2, 0, 0]], [[1, 2, 3, 0], [1, 2, 3, 4]]], np.float64)
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(np.asarray(out.logical()), want)


def test_slice_and_gather_under_vsla_jit():
    rng = np.random.default_rng(22)
    f = vsla.jit(lambda a: (vsla.slice(a, (1, 0), (3, 6)), vsla.gather(a, [2, 0, 5], axis=1),
                            vsla.gather(a, [0, 4], axis=0)))
    for shape in [(3, 4), (1, 7), (5, 2)]:
        x = rng.standard_normal(shape).astype(np.float32)
        wide = _pad(x, (max(shape[0], 5), max(shape[1], 6)))
        s, g1, g0 = f(vsla.array(x))
        assert s.shape == (2, 6) and g1.shape == (shape[0], 3) and g0.shape == (2, shape[1])
        np.testing.assert_array_equal(np.asarray(s.logical()), wide[1:3, 0:6])
        np.testing.assert_array_equal(np.asarray(g1.logical()), wide[: shape[0], [2, 0, 5]])
        np.testing.assert_array_equal(np.asarray(g0.logical()), wide[[0, 4], : shape[1]])
    assert f.cache_info()["compiles"] == 1


def test_grad_through_slice_and_stack_under_vsla_jit():
    x = np.arange(1.0, 6.0, dtype=np.float32)

    def loss(a):
        s = vsla.slice(a, (1,), (4,))
        return vsla.sum(vsla.sum(vsla.stack([s * s, a])))

    want = 2 * x * (np.arange(5) >= 1) * (np.arange(5) < 4) + 1  # d/dx sum(x[1:4]^2) + sum(x)
    for g in (vsla.grad(loss), vsla.jit(vsla.grad(loss))):
        np.testing.assert_allclose(np.asarray(g(vsla.array(x)).logical()), want)


def test_reshape_under_vsla_jit():
    f = vsla.jit(lambda a: vsla.reshape(a, (2, 6)))
    for shape in [(3, 4), (12, 1), (2, 6), (1, 12), (4, 3)]:
        x = np.arange(1.0, 13.0, dtype=np.float32).reshape(shape)
        got = f(vsla.array(x))
        assert got.shape == (2, 6)
        np.testing.assert_array_equal(np.asarray(got.logical()), x.reshape(2, 6))
    assert f.cache_info()["compiles"] == 1
    flat = vsla.jit(lambda a: vsla.reshape(a, (6,)))(vsla.array(np.arange(1.0, 7.0).reshape(2, 3)))
    np.testing.assert_array_equal(flat.to_numpy(), np.arange(1.0, 7.0))
    with pytest.raises(ValueError, match="differs from its operand's logical size"):
        f(vsla.array(np.ones((3, 3), np.float32)))


def test_reshape_gradient_under_vsla_jit_one_compile():
    """d/dx sum(reshape(x, (3, 4)) * w) = w reshaped to x's logical shape (the inverse gather), for
    operands of different shapes and capacities in one compile; an eager reference too."""
    w = np.arange(10.0, 22.0, dtype=np.float32).reshape(3, 4)
    loss = lambda v: vsla.sum(vsla.sum(vsla.reshape(v, (3, 4)) * vsla.array(w)))  # noqa: E731
    dl = vsla.jit(vsla.grad(loss))
    for shape in [(2, 6), (4, 3), (12, 1), (1, 12), (3, 4)]:
        x = np.arange(1.0, 13.0, dtype=np.float32).reshape(shape)
        got = dl(vsla.array(x))
        assert got.shape == shape
        np.testing.assert_array_equal(np.asarray(got.logical()), w.reshape(shape))
        np.testing.assert_array_equal(np.asarray(vsla.grad(loss)(vsla.array(x)).logical()), w.reshape(shape))
    assert dl.cache_info()["compiles"] == 1
