"""The GRADS arena class (VSLA §5, §6.1): under ``vsla.jit`` of a ``vsla.grad`` function the native
planner places every intermediate computed from the cotangent seed (the backward pass) in a GRADS
region of the arena after the others; sizes against hand-counted bytes, values against float64
references."""
import numpy as np
import pytest

from ember import vsla
from ember._src import flags
from ember._src.native.plan import planner
from ember._src.native.runtime import toolchain

requires_cc = pytest.mark.skipif(toolchain.find_compiler() is None, reason="no C compiler available")


def _loss(a, b, c):
    return vsla.sum(vsla.sum(vsla.matmul(a, b) * vsla.matmul(a, c)))


@requires_cc
def test_grads_class_sizes_region_and_values():
    """``d/da sum((a b) * (a c)) = (a c) b^T + (a b) c^T`` for ``a (4, 8)``, ``b, c (8, 4)``
    float32 (x64 off): the backward pass holds the two products' cotangents (4 x 4 float32: 64
    bytes each) and the two partial gradients summed into the result (4 x 8: 128 bytes each),
    all GRADS (384 bytes); the transposes of ``b`` and ``c`` (inputs of the products, computed
    from the arguments only) and the forward products stay ACTIVATION; the gradient itself is
    the output (4 x 8 float32, 128 bytes)."""
    rng = np.random.default_rng(21)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((4, 8), (8, 4), (8, 4)))
    with flags.override("jax_enable_x64", False):
        args = [vsla.array(x) for x in (a, b, c)]
        f = vsla.jit(vsla.grad(_loss), backend="native", capacity="static")
        got = f(*args)
        eager = vsla.grad(_loss)(*args)
        plan = f.memory_plan(*args)
        mp = f.lower(*args).executable.plan
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    want = (a64 @ c64) @ b64.T + (a64 @ b64) @ c64.T
    np.testing.assert_allclose(np.asarray(got.logical()), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(got.logical()), np.asarray(eager.logical()))
    grads = [bf for bf in mp.buffers if bf.cls == planner.GRADS]
    assert sorted(bf.nbytes for bf in grads) == [64, 64, 128, 128]
    assert plan["GRADS"] == 384 and plan["GRAD_OUTPUTS"] == plan["EXTERNAL_OUT"] == 128
    # the GRADS region lies after every ACTIVATION/WORKSPACE buffer, inside the arena
    others = [bf for bf in mp.buffers if bf.cls in (planner.ACTIVATION, planner.WORKSPACE)]
    low = max(bf.offset + bf.nbytes for bf in others)
    assert all(bf.offset >= low and bf.offset % 64 == 0 for bf in grads)
    assert max(bf.offset + bf.nbytes for bf in grads) <= plan["arena_bytes"]
    mp.check()


@requires_cc
def test_grads_class_under_symbolic_capacities():
    """The default (symbolic) ``vsla.jit``: one compile, the GRADS region placed per binding, the
    gradient of ``sum(conv(a, b) * a)`` unchanged (hand-derived: ``conv(a, b)_i + sum_j a_(i+j) b_j``),
    and a plain (not grad) function has no GRADS entry."""
    loss = lambda a, b: vsla.sum(vsla.conv(a, b) * a)  # noqa: E731
    f = vsla.jit(vsla.grad(loss), backend="native")
    rng = np.random.default_rng(22)
    for m, n in [(3, 2), (6, 2), (20, 5)]:
        a, b = rng.standard_normal(m), rng.standard_normal(n)
        g = f(vsla.array(a), vsla.array(b))
        want = np.convolve(a, b)[:m] + [sum(a[i + j] * b[j] for j in range(n) if i + j < m) for i in range(m)]
        np.testing.assert_allclose(np.asarray(g.logical()), want, rtol=1e-10, atol=1e-10)
        plan = f.memory_plan(vsla.array(a), vsla.array(b))
        # the gradient's data at a's capacity (float64 under the suite's x64; its lengths are a's)
        assert plan["GRADS"] > 0 and plan["GRAD_OUTPUTS"] == 8 * vsla.next_pow2(m)
    assert f.cache_info()["compiles"] == 1
    assert "GRADS" not in vsla.jit(loss, backend="native").memory_plan(vsla.array(a), vsla.array(b))
