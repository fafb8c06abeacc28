"""Specification requirements without a feature of their own (docs/vsla.md, rows 35, 36 and 47): the
gradient of the scalar in ``s * X``, checkpointing through VArray functions, and bit-identical
repeated runs; references are hand-derived gradients and the un-checkpointed gradient."""
import numpy as np

import ember
from ember import vsla


def test_gradient_of_the_scalar_in_scalar_times_x():
    """§9.4 Mul Scalar: ``gs = <g_out, X>``; with ``L = sum(W * (s X))`` that is ``sum(W X)``."""
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    w = np.array([0.5, 1.0, -1.0], np.float32)  # shorter: zero-extended in the Hadamard product

    def loss(s, v):
        return vsla.sum(vsla.array(w) * (s * v)).data[0]  # the one entry of the rank-1 [s]

    want = float((np.pad(w, (0, 1)) * x).sum())
    gs = ember.grad(loss)(np.float32(2.0), vsla.array(x))
    np.testing.assert_allclose(float(gs), want, rtol=1e-6)
    gj = ember.jit(ember.grad(loss))(np.float32(2.0), vsla.array(x))
    np.testing.assert_allclose(float(gj), want, rtol=1e-6)


def test_checkpoint_through_varray_functions():
    """§9.2: a checkpointed block (recomputed in the backward pass) gives the same gradient."""
    rng = np.random.default_rng(6)
    a = vsla.array(rng.standard_normal(7).astype(np.float32))
    b = vsla.array(rng.standard_normal(5).astype(np.float32))

    def block(u, v):
        return vsla.softmax(vsla.conv(u, v) * u)

    def loss(u, v, f):
        return vsla.sum(f(u, v) * vsla.array(np.arange(11.0, dtype=np.float32)))

    plain = vsla.grad(lambda u, v: loss(u, v, block), (0, 1))(a, b)
    ckpt = vsla.grad(lambda u, v: loss(u, v, ember.checkpoint(block)), (0, 1))(a, b)
    for p, c in zip(plain, ckpt):
        assert p.shape == c.shape
        np.testing.assert_allclose(np.asarray(c.logical()), np.asarray(p.logical()), rtol=1e-6, atol=1e-7)


def test_repeated_runs_are_bit_identical():
    """§16 determinism: the same inputs give the same bits, call after call (FFT conv on the thread
    pool, the compensated direct conv, a wide sum and matmul), eagerly and under vsla.jit."""
    rng = np.random.default_rng(7)
    x = vsla.array(rng.standard_normal((16, 70)).astype(np.float32))
    y = vsla.array(rng.standard_normal((16, 50)).astype(np.float32))
    m = vsla.array(rng.standard_normal((70, 20)).astype(np.float32))

    def f(p, q, r):
        return vsla.conv(p, q), vsla.conv(p, q, method="direct"), vsla.sum(p), vsla.matmul(p, r)

    jf = vsla.jit(f)
    for fn in (f, jf):
        first = [np.asarray(o.data).copy() for o in fn(x, y, m)]
        for _ in range(3):
            for o, ref in zip(fn(x, y, m), first):
                np.testing.assert_array_equal(np.asarray(o.data), ref)


def test_no_rank0_varray_at_the_api_boundary():
    """§3.2: no rank-0 tensor is visible at the API boundary; §4.3: a reduction drops one axis. A
    full sum or mean of a vector is the rank-1 ``[s]`` (eagerly and under ``vsla.jit``), a sum
    over one axis of a matrix stays rank 1, and a scalar given to ``vsla.array`` is ``[s]``;
    values against NumPy, and ``vsla.grad`` takes the one-entry result as its loss."""
    x = np.array([1.5, -2.0, 4.0], np.float32)
    m = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    for f, want in ((vsla.sum, [x.sum()]), (vsla.mean, [x.mean()])):
        for out in (f(vsla.array(x)), vsla.jit(f)(vsla.array(x))):
            assert out.ndim == 1 and out.shape == (1,)
            np.testing.assert_allclose(np.asarray(out.logical()), want, rtol=1e-6)
    rows = vsla.sum(vsla.array(m), axis=0)
    assert rows.shape == (2,)
    np.testing.assert_allclose(np.asarray(rows.logical()), m.sum(0))
    s = vsla.array(np.float32(2.5))
    assert s.shape == (1,) and s == vsla.array([2.5])
    g = vsla.grad(lambda v: vsla.sum(v * v))(vsla.array(x))
    np.testing.assert_allclose(np.asarray(g.logical()), 2 * x)


def test_storage_is_minimal_after_shrink_only():
    """§1 with its stated exception (§6.4): results keep their rule's shape (no kernel shrinks),
    ``shrink()`` gives the minimal representative (no trailing zero hyperplane, eagerly and under
    ``vsla.jit``), and both are one class."""
    d = vsla.array([5.0, 3.0, 2.0, 0.0]) - vsla.array([2.0, 1.0, 2.0])
    assert d.shape == (4,)
    m = d.shrink()
    assert m.shape == (2,) and np.asarray(m.logical()).tolist() == [3.0, 2.0] and m == d
    shrunk = vsla.jit(lambda a, b: (a - b).shrink())
    jm = shrunk(vsla.array([5.0, 3.0, 2.0, 0.0]), vsla.array([2.0, 1.0, 2.0]))
    assert jm.shape == (2,) and jm == m
    t = vsla.array(np.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    assert t.shape == (3, 3) and t.shrink().shape == (2, 1)


def test_kron_length_is_the_product_of_minimal_lengths():
    """§4.1's ``m * n`` of §3.1's ``shape`` (the minimal logical dimensions): padding an operand
    with zeros does not change the result's length or values (NumPy's kron of the minimal
    representatives), eagerly and under vsla.jit."""
    a, b = np.array([3.0, 4.0]), np.array([1.0, -2.0, 5.0])
    want = np.kron(a, b)
    for pa, pb in [(0, 0), (2, 0), (0, 3), (1, 1)]:
        va, vb = vsla.array(np.pad(a, (0, pa))), vsla.array(np.pad(b, (0, pb)))
        for k in (vsla.kron(va, vb), vsla.jit(vsla.kron)(va, vb)):
            assert k.shape == (6,)
            np.testing.assert_array_equal(np.asarray(k.logical()), want)
