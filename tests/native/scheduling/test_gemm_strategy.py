"""Each product's strategy is chosen when the schedule is built (native/scheduling/gemm_strategy.py)
and the C follows it: every route and packed-B source on a program that takes it, with results
checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import specialize
from ember._src.native.emit import gemm_kernel
from ember._src.native.emit.codegen import generate
from ember._src.native.emit.context import CodegenOptions
from ember._src.native.scheduling.gemm_strategy import BSource, GemmRoute
from tests.native.conftest import requires_cc
from tests.native.util import check

pytestmark = requires_cc
RNG = np.random.default_rng(11)
needs_kernel = pytest.mark.skipif(gemm_kernel.kernel_symbol() is None,
                                  reason="ember's GEMM kernel needs GCC with AVX2/FMA on this machine")


def _gemms(exe):
    return [st for st in exe.schedule.steps if st.kind == "gemm"]


def _body_gemms(exe):
    return [st for top in exe.schedule.steps if top.sub is not None for b in top.sub.bodies
            for st in b.schedule.steps if st.kind == "gemm"]


def test_a_small_product_in_a_loop_body_is_inline_c():
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    xs = RNG.standard_normal((5, 8)).astype(np.float32)

    def f(h, xs):
        return lax.scan(lambda h, x: (jnp.tanh(h @ w + x), h.sum()), h, xs)

    exe = check(f, np.zeros(8, np.float32), xs)
    (st,) = _body_gemms(exe)
    assert st.strategy.route is GemmRoute.INLINE
    h = np.zeros(8, np.float32)
    for x in xs:
        h = np.tanh(h @ w + x)
    np.testing.assert_allclose(ember.jit(f, backend="native")(np.zeros(8, np.float32), xs)[0], h, rtol=2e-5)


def test_integer_products_run_as_c_loops():
    a = RNG.integers(-5, 5, (6, 7)).astype(np.int32)
    b = RNG.integers(-5, 5, (7, 3)).astype(np.int32)
    exe = check(lambda a, b: a @ b, a, b)
    (st,) = _gemms(exe)
    assert st.strategy.route is GemmRoute.LOOPS and not st.strategy.kernel
    np.testing.assert_array_equal(exe([a, b])[0], a @ b)


def test_a_transposed_operand_is_a_strided_view():
    a = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    b = RNG.standard_normal((4, 5, 3)).astype(np.float32)
    exe = check(lambda a, b: jnp.matmul(jnp.swapaxes(a, 0, 1), b[0]), a, b)
    routes = {st.strategy.route for st in _gemms(exe)}
    assert routes <= {GemmRoute.BLAS_VIEWS, GemmRoute.BLAS} and routes
    want = np.matmul(np.swapaxes(a, 0, 1).astype(np.float64), b[0].astype(np.float64))
    np.testing.assert_allclose(exe([a, b])[0], want, rtol=1e-5, atol=1e-5)


@needs_kernel
def test_a_constant_b_is_packed_once_an_argument_b_at_run_time():
    x = RNG.standard_normal((32, 64)).astype(np.float32)
    w = RNG.standard_normal((64, 48)).astype(np.float32)
    const = check(lambda x: x @ w, x)
    (st,) = _gemms(const)
    assert st.strategy.kernel and st.strategy.b is BSource.CONSTANT
    assert len(const._body_consts) == 1  # the packed copy of w
    arg = check(lambda x, w: x @ w, x, w)
    (st,) = _gemms(arg)
    assert st.strategy.b is BSource.ARGUMENT and arg._packed_args
    off = check(lambda x, w: x @ w, x, w, prepack=False)
    (st,) = _gemms(off)
    assert st.strategy.b is BSource.NONE and not off._packed_args
    for exe, args in ((const, [x]), (arg, [x, w]), (off, [x, w])):
        np.testing.assert_allclose(exe(args)[0], x @ w, rtol=1e-5, atol=1e-5)


def test_a_constant_used_by_many_products_is_packed_once():
    """One packed copy per weight: an unrolled recurrence reuses its matrix at every step (a NumPy
    array captured per use is a separate constant of the same bytes); another weight is another copy."""
    h = RNG.standard_normal((1, 64)).astype(np.float32)
    w = (RNG.standard_normal((64, 64)) / 8).astype(np.float32)
    v = (RNG.standard_normal((64, 64)) / 8).astype(np.float32)

    def unrolled(h):
        for _ in range(12):
            h = jnp.tanh(h @ w)
        return h @ v

    exe = check(unrolled, h)
    assert len(_gemms(exe)) == 13 and len(exe._body_consts) == 2  # w's copy and v's
    want = h.astype(np.float64)
    for _ in range(12):
        want = np.tanh(want @ w)
    np.testing.assert_allclose(exe([h])[0], want @ v, rtol=1e-5, atol=1e-6)


@needs_kernel
def test_symbolic_programs_never_pack_an_argument():
    w = RNG.standard_normal((16, 8)).astype(np.float32)
    f = ember.jit(lambda x, w: x @ w, backend="native", dynamic_axes={"x": ("rows", None)})
    for rows in (3, 9):
        x = RNG.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(f(x, w), x @ w, rtol=1e-5, atol=1e-5)
    sym = specialize.symbolic_executable(f.lower(x, w).program)
    assert sym.fallback_reason is None
    steps = [st for st in sym.schedule.steps if st.kind == "gemm"]
    assert steps and all(st.strategy.b is BSource.NONE for st in steps)


@needs_kernel
def test_batched_products_share_batches_on_the_pool():
    a = RNG.standard_normal((8, 64, 64)).astype(np.float32)
    exe = check(lambda a: jnp.matmul(a, a), a, num_threads=2, parallel_threshold=1)
    (st,) = _gemms(exe)
    assert st.strategy.pooled_batches and "em_sk_fn_t f_ = em_sk_fn(); for (int64_t bb_" in exe.source
    one = check(lambda a: jnp.matmul(a, a), a, num_threads=1)
    assert not _gemms(one)[0].strategy.pooled_batches
    np.testing.assert_allclose(exe([a])[0], np.matmul(a, a), rtol=1e-4, atol=1e-4)


def test_a_schedule_without_strategies_is_refused_by_name():
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    exe = check(lambda x: x @ x, x)
    (st,) = _gemms(exe)
    st.strategy = None
    with pytest.raises(ValueError, match=f"gemm step {st.name} has no strategy"):
        generate(exe.schedule, exe.plan, CodegenOptions())
