"""Native call steps (calls.py): dynamic slices, cumulative scans, threefry, scatter, sort. Each
runs as a ``call`` step (no Python fallback) and matches the reference backend exactly."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax, random
from ember._src.native import opinfo
from ember._src.native.emit import calls
from ember._src.native.rewrite import passes
from ember._src.prims import random_bits as rb
from ember._src.prims.indexing import scatter_p
from tests.native.conftest import requires_cc
from tests.native.util import check

pytestmark = requires_cc
RNG = np.random.default_rng(7)


def native_only(exe, *prims: str) -> None:
    """No fallback steps, and each named primitive runs as a call step."""
    assert exe.schedule.count("fallback") == 0, str(exe.schedule)
    ran = {st.eqns[0].prim.name for st in exe.schedule.steps if st.kind == "call"}
    assert set(prims) <= ran, (prims, str(exe.schedule))


def exact(f, *args):
    return check(f, *args, rtol=0, atol=0)


# -- dynamic_slice / dynamic_update_slice --------------------------------------------------------


@pytest.mark.parametrize("starts", [(0, 0, 0), (1, 2, 3), (-5, 1, 100), (7, -1, 2)])
def test_dynamic_slice_clamps_like_numpy(starts):
    x = RNG.standard_normal((4, 5, 6)).astype(np.float32)
    i, j, k = (np.int32(s) for s in starts)
    exe = exact(lambda x, i, j, k: lax.dynamic_slice(x, (i, j, k), (2, 3, 4)) * 2.0, x, i, j, k)
    native_only(exe, "dynamic_slice")
    got = np.asarray(ember.jit(lambda x, i, j, k: lax.dynamic_slice(x, (i, j, k), (2, 3, 4)),
                               backend="native")(x, i, j, k))
    a, b, c = (int(np.clip(s, 0, d - n)) for s, d, n in zip(starts, x.shape, (2, 3, 4)))
    np.testing.assert_array_equal(got, x[a:a + 2, b:b + 3, c:c + 4])


@pytest.mark.parametrize("dtype", [np.int64, np.uint8, np.float64])
def test_dynamic_update_slice_dtypes_and_clamping(dtype):
    x = (RNG.standard_normal((6, 5)) * 10).astype(dtype)
    u = (RNG.standard_normal((3, 2)) * 10).astype(dtype)
    for s in [(0, 0), (2, 1), (5, 4), (-3, 9)]:
        i, j = np.int64(s[0]), np.int32(s[1])
        exe = exact(lambda x, u, i, j: lax.dynamic_update_slice(x, u, (i, j)), x, u, i, j)
        native_only(exe, "dynamic_update_slice")


def test_dynamic_slice_unsigned_starts_beyond_int64():
    x = np.arange(10, dtype=np.int32)
    for s in (np.uint64(2**63 + 5), np.uint64(3), np.uint8(250)):
        exe = exact(lambda x, i: lax.dynamic_slice(x, (i,), (4,)), x, s)
        native_only(exe, "dynamic_slice")


def test_dynamic_slices_with_literal_starts_zero_size_and_vmap():
    x = RNG.standard_normal((8, 3)).astype(np.float32)
    exact(lambda x: lax.dynamic_slice(x, (3, 1), (0, 2)), x)
    exe = exact(lambda x: lax.dynamic_update_slice(x, jnp.ones((2, 3), np.float32), (7, 0)), x)
    native_only(exe, "dynamic_update_slice")
    # vmapped over the operand with a shared start: still one dynamic_slice call
    exe = exact(ember.vmap(lambda r, i: lax.dynamic_slice(r, (i,), (2,)), (0, None)), x, np.int32(2))
    native_only(exe, "dynamic_slice")


# -- cumulative scans -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cumsum", "cumprod", "cummax", "cummin"])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_scans_bit_identical(name, reverse):
    x = RNG.standard_normal((3, 50, 4)).astype(np.float32)
    x[0, 7, 1] = np.nan
    x[2, 30, 0] = np.inf
    fn = getattr(lax, name)
    exe = exact(lambda x: [fn(x, axis=a, reverse=reverse) for a in range(3)], x)
    native_only(exe, name)


@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64, np.float64])
def test_cumulative_scans_integer_wraparound_and_f64(dtype):
    x = (RNG.integers(0, 200, (7, 40))).astype(dtype)
    exe = exact(lambda x: (jnp.cumsum(x, 1), lax.cumprod(x, 0), lax.cummax(x, 1, reverse=True),
                           lax.cummin(x, 0)), x)
    native_only(exe, "cumsum", "cumprod", "cummax", "cummin")


def test_cumsum_sequential_order_matches_numpy_on_1d_and_empty():
    x = RNG.standard_normal(100_003).astype(np.float32)
    got = ember.jit(jnp.cumsum, backend="native")(x)
    np.testing.assert_array_equal(np.asarray(got), np.cumsum(x))  # NumPy accumulates sequentially
    exact(lambda x: jnp.cumsum(x, 0), np.zeros((0, 3), np.float32))


# -- threefry2x32 -------------------------------------------------------------------------------


NO_SPLIT = tuple(p for p in passes.DEFAULT_PASSES if p != "split_threefry")


def fused_threefry(exe) -> bool:
    return any(e.prim.name.startswith("native_threefry") for st in exe.schedule.steps if st.kind == "kernel"
               for e in st.eqns)


@pytest.mark.parametrize("split", [True, False])
def test_threefry_matches_numpy_hash(split):
    k1, k2, x1, x2 = (RNG.integers(0, 2**32, 1000, dtype=np.uint64).astype(np.uint32) for _ in range(4))
    opts = {} if split else {"passes": NO_SPLIT}
    f = lambda *a: rb.threefry2x32_p.bind(*a)  # noqa: E731
    exe = check(f, k1, k2, x1, x2, rtol=0, atol=0, **opts)
    if split:
        assert fused_threefry(exe) and exe.schedule.count("fallback") == 0
    else:
        native_only(exe, "threefry2x32")
    a, b = ember.jit(f, backend="native", **opts)(k1, k2, x1, x2)
    wa, wb = rb.threefry2x32_np(k1, k2, x1, x2)
    np.testing.assert_array_equal(np.asarray(a), wa)
    np.testing.assert_array_equal(np.asarray(b), wb)
    # one half unused: dce drops the other
    exe = ember.jit(lambda *a: f(*a)[1] ^ np.uint32(7), backend="native").lower(k1, k2, x1, x2).executable
    assert [e.prim.name for e in exe.optimized.eqns].count("native_threefry_lo") == 0


@pytest.mark.parametrize(("shape", "split"), [((1,), True), ((3, 33), True), ((1000,), False)])
def test_random_under_native_jit_bit_identical_to_eager(shape, split):
    key = random.PRNGKey(42)

    def f(k):
        k1, k2 = random.split(k)
        return random.normal(k1, shape), random.uniform(k2, shape), random.bits(k, shape)

    opts = {} if split else {"passes": NO_SPLIT}
    jf = ember.jit(f, backend="native", **opts)
    got = jf(key)
    want = f(key)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    exe = jf.lower(key).executable
    assert exe.schedule.count("fallback") == 0
    assert fused_threefry(exe) if split else exe.schedule.count("call") >= 1


# -- scatter ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["set", "add", "mul", "min", "max"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_modes_duplicates_and_out_of_range(mode, axis):
    x = RNG.standard_normal((5, 6)).astype(np.float32)
    x[1, 1] = np.nan
    idx = np.array([[0, 3], [3, -1], [9, 2]], np.int32)  # duplicates, negative and too large dropped
    ushape = (3, 2, 6) if axis == 0 else (5, 3, 2)
    u = RNG.standard_normal(ushape).astype(np.float32)
    u.flat[4] = np.nan
    exe = exact(lambda x, i, u: scatter_p.bind(x, i, u, axis=axis, mode=mode), x, idx, u)
    native_only(exe, "scatter")


def test_scatter_integer_bool_and_at_syntax():
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    idx = np.array([0, 2, 2, 5], np.int32)
    exact(lambda x, i: x.at[i].add(x[:4] * 0 + 7), x, idx)
    exact(lambda x, i: x.at[i].max(jnp.full((4, 3), 5, np.int32)), x, idx)
    b = np.array([True, False, False, True])
    exe = exact(lambda b, i: scatter_p.bind(b, i, np.array([True, False, True, False]), axis=0, mode="add"),
                b, idx)
    native_only(exe, "scatter")


# -- sort ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
def test_sort_values_nan_last_and_axes(dtype):
    x = RNG.standard_normal((6, 37)) * 5
    if np.dtype(dtype).kind == "f":
        x[0, :5] = np.nan
        x[1, 3] = -0.0
        x[1, 4] = 0.0
        x[2, 0] = -np.inf
    x = x.astype(dtype) if dtype != np.bool_ else x > 0
    exe = exact(lambda x: (jnp.sort(x, axis=1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1)), x)
    native_only(exe, "sort")


def test_sort_multi_operand_num_keys_and_stability():
    k1 = RNG.integers(0, 3, (4, 64)).astype(np.int32)
    k2 = RNG.standard_normal((4, 64)).round(0).astype(np.float32)
    k2[0, ::7] = np.nan
    v = RNG.standard_normal((4, 64))
    for nk in (1, 2):
        exe = exact(lambda a, b, c, nk=nk: lax.sort((a, b, c), dimension=1, num_keys=nk), k1, k2, v)
        native_only(exe, "sort")
    got = ember.jit(lambda a, c: lax.sort((a, c), dimension=1, num_keys=1), backend="native")(k1, v)
    perm = np.argsort(k1, axis=1, kind="stable")
    np.testing.assert_array_equal(np.asarray(got[1]), np.take_along_axis(v, perm, 1))


def test_sort_keeps_signed_zeros_and_nan_payload_order():
    x = np.array([0.0, -0.0, 1.0, -0.0, 0.0, np.nan, -np.nan, -1.0] * 3, np.float64)
    got = np.asarray(ember.jit(jnp.sort, backend="native")(x))
    want = np.sort(x, kind="stable")
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))  # bit for bit


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int64, np.uint16, np.uint64, np.bool_])
def test_sort_long_rows_radix_path(dtype):
    n = 3 * calls.RADIX_MIN + 5
    x = RNG.standard_normal((3, n)) * 1e3
    if np.dtype(dtype).kind == "f":
        x[0, ::9] = np.nan
        x[1, ::7] = -0.0
        x[1, 3::7] = 0.0
        x[2, :4] = [np.inf, -np.inf, -np.nan, 1e-300]
    if np.dtype(dtype).kind == "u":
        x = np.abs(x)
    x = x.astype(dtype) if dtype != np.bool_ else x > 0
    exe = exact(lambda x, v: lax.sort((x, v), dimension=1, num_keys=1), x, np.arange(3 * n).reshape(3, n))
    native_only(exe, "sort")
    got = np.asarray(ember.jit(lambda x: jnp.sort(x, axis=1), backend="native")(x))
    want = np.sort(x, axis=1, kind="stable")
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit


def test_sort_large_and_scalar_rows():
    x = RNG.standard_normal(100_000).astype(np.float32)
    x[::1000] = np.nan
    got = ember.jit(jnp.sort, backend="native")(x)
    np.testing.assert_array_equal(np.asarray(got), np.sort(x))
    exact(lambda x: jnp.sort(x, axis=0), RNG.standard_normal((1, 5)).astype(np.float32))


def test_every_call_lowering_is_described():
    for p in opinfo.group(opinfo.OpCategory.CALL):
        assert p.lowering.startswith("native call: ") and p.lowering.endswith(")"), p.name


def test_dynamic_update_slice_and_scatter_update_dying_operands_in_place():
    x = RNG.standard_normal((6, 6)).astype(np.float32)
    u = RNG.standard_normal((2, 2)).astype(np.float32)

    def f(x, u, i):
        y = x * 2.0  # dies in the update: the update writes into its buffer
        z = lax.dynamic_update_slice(y, u, (i, i))
        w = z.at[jnp.array([1, 3, 3, 7])].add(1.5)  # scatter on z, which dies there too
        return w - 1.0, x  # x (an input) is never written

    for i in (0, 2, 5, -1):
        exe = exact(f, x, u, np.int32(i))
    steps = {st.name: st for st in exe.schedule.steps}
    done = [steps_name for steps_name, st in steps.items()
            if st.kind == "call" and any(s == exe.schedule.steps.index(st) for s, _, _ in exe.plan.inplace)]
    assert len(done) == 2, (exe.plan.inplace, str(exe.schedule))
    exe.plan.check()
