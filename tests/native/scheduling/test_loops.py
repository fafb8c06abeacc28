"""Native loops (``native/scheduling/loops.py``): ``scan``, ``while_loop``/``fori_loop`` and
``cond``/``switch`` compiled into the program's entry point, checked against the reference backend
and Python loops."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src import control_flow as cf
from ember._src.core import ShapedArray
from ember._src.native import abi
from ember._src.native.rewrite.passes import run_passes
from ember._src.native.scheduling import loops
from ember._src.program import trace_to_program
from tests.control_flow.helpers import tree_allclose
from tests.native.conftest import requires_cc
from tests.native.util import without_calls

pytestmark = requires_cc

RNG = np.random.default_rng(0)


def native(f, **kw):
    return ember.jit(f, backend="native", **kw)


def reference(f, **kw):
    return ember.jit(f, backend="numpy", **kw)


def loop_steps(exe) -> list:
    """Every native loop/cond step of an executable's schedule, nested ones included."""
    out = []

    def walk(sched):
        for st in sched.steps:
            if st.kind in ("loop", "cond"):
                out.append(st)
                for b in st.sub.bodies:
                    walk(b.schedule)

    walk(exe.schedule)
    return out


def check(f, *args, rtol=1e-5, atol=1e-6, min_loops=1, **kw):
    """``f`` on the native backend (every loop required native) equals the reference backend."""
    want = reference(f, **kw)(*args)
    with cf.require_native_loops():
        g = native(f, **kw)
        got = g(*args)
        exe = g.lower(*args).executable
    assert exe.fallback_reason is None
    assert exe.schedule.count("fallback") == 0
    assert len(loop_steps(exe)) >= min_loops
    tree_allclose(got, want, rtol=rtol, atol=atol)
    return got, exe


# ---------------------------------------------------------------------------------------------
# scan
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (3,), (2, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_cumsum_matches_numpy_and_a_python_loop(shape, dtype):
    x = (RNG.standard_normal((7, *shape)) * 10).astype(dtype)

    def f(x):
        return lax.scan(lambda c, x: (c + x, c * 2 + x), jnp.zeros(shape, dtype), x)

    (c, ys), _ = check(f, x)
    carry, want = np.zeros(shape, dtype), []
    for row in x:
        want.append(carry * 2 + row)
        carry = carry + row
    np.testing.assert_allclose(c, carry, rtol=1e-6)
    np.testing.assert_allclose(ys, np.stack(want), rtol=1e-6)
    np.testing.assert_allclose(c, np.cumsum(x, axis=0)[-1], rtol=1e-5)


def test_pytree_carries_multiple_xs_and_outputs():
    xs = {"a": RNG.standard_normal((6, 3)).astype(np.float32), "b": np.arange(6, dtype=np.int32)}

    def f(xs):
        def step(c, x):
            s, (n, m) = c
            s = s * 0.5 + x["a"]
            return (s, (n + x["b"], jnp.maximum(m, x["a"].sum()))), {"s": s, "n": n, "b2": x["b"] * 2}
        return lax.scan(step, (jnp.zeros(3, jnp.float32), (np.int32(1), np.float32(-1e9))), xs)

    (c, ys), _ = check(f, xs)
    s, n, m = np.zeros(3, np.float32), 1, -1e9
    for i in range(6):
        s = s * 0.5 + xs["a"][i]
        np.testing.assert_allclose(ys["s"][i], s, rtol=1e-6)
        assert ys["n"][i] == n
        n += xs["b"][i]
        m = max(m, xs["a"][i].sum())
    assert int(c[1][0]) == n and np.allclose(c[1][1], m, rtol=1e-6)
    np.testing.assert_array_equal(ys["b2"], xs["b"] * 2)


@pytest.mark.parametrize("reverse", [False, True])
def test_reverse_and_python_loop(reverse):
    x = RNG.standard_normal((9, 2)).astype(np.float64)

    def f(x):
        return lax.scan(lambda c, x: (c * 0.9 + x, c), np.ones(2), x, reverse=reverse)

    (c, ys), _ = check(f, x)
    carry = np.ones(2)
    want = np.empty_like(x)
    for i in (range(8, -1, -1) if reverse else range(9)):
        want[i] = carry
        carry = carry * 0.9 + x[i]
    np.testing.assert_allclose(c, carry)
    np.testing.assert_allclose(ys, want)


def test_xs_none_with_length_and_none_outputs():
    def f(a):
        c, ys = lax.scan(lambda c, _: ((c[0] * a, c[1] + 1), None), (np.float32(1), np.int32(0)), None,
                         length=5)
        assert ys is None
        return c

    (p, n), _ = check(f, np.float32(1.5))
    assert np.isclose(p, 1.5 ** 5) and n == 5


def test_length_zero_returns_the_initial_carry():
    def f(x, c0):
        return lax.scan(lambda c, x: (c + x, c * x), c0, x)

    x = np.zeros((0, 3), np.float32)
    c0 = np.arange(3, dtype=np.float32)
    (c, ys), _ = check(f, x, c0)
    np.testing.assert_array_equal(c, c0)
    assert ys.shape == (0, 3)


def test_outputs_not_computed_by_the_body():
    """Carries passed through or swapped, an x slice, a constant and a literal as outputs."""
    k = np.array([3.0, 4.0], np.float32)

    def f(x):
        def step(c, x):
            a, b, same = c
            return (b, a, same), (x, jnp.asarray(k), np.float32(7.0), a)
        return lax.scan(step, (np.float32(1), np.float32(2), jnp.arange(2.0, dtype=jnp.float32)), x)

    x = RNG.standard_normal((5, 2)).astype(np.float32)
    ((a, b, same), (xs, ks, sev, aa)), _ = check(f, x)
    assert (float(a), float(b)) == (2.0, 1.0)  # five swaps
    np.testing.assert_array_equal(same, [0, 1])
    np.testing.assert_array_equal(xs, x)
    np.testing.assert_array_equal(ks, np.tile(k, (5, 1)))
    np.testing.assert_array_equal(sev, np.full(5, 7, np.float32))
    np.testing.assert_array_equal(aa, [1, 2, 1, 2, 1])


def test_large_carries_use_arena_slots():
    n = loops.SMALL_CARRY_BYTES // 4 + 16
    x = RNG.standard_normal((4, n)).astype(np.float32)

    def f(x):
        return lax.scan(lambda c, x: ((c[1] + x, c[0] * 0.5), c[0] - c[1]), (jnp.zeros(n), jnp.ones(n)), x)

    (c, ys), exe = check(f, x)
    assert not loop_steps(exe)[0].sub.small_carries
    a, b = np.zeros(n), np.ones(n)
    for i in range(4):
        np.testing.assert_allclose(ys[i], a - b, rtol=1e-5, atol=1e-6)
        a, b = b + x[i], a * 0.5
    np.testing.assert_allclose(c[0], a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c[1], b, rtol=1e-5, atol=1e-6)


def test_nested_scans():
    x = RNG.standard_normal((4, 5)).astype(np.float32)

    def f(x):
        def outer(c, row):
            inner_c, inner_ys = lax.scan(lambda d, v: (d + v * c, d), np.float32(0), row)
            return c + 1, (inner_c, inner_ys)
        return lax.scan(outer, np.float32(1), x)

    (c, (ic, iys)), exe = check(f, x, min_loops=2)
    for i in range(4):
        d = 0.0
        for j in range(5):
            assert np.isclose(iys[i, j], d, rtol=1e-5, atol=1e-6)
            d += x[i, j] * (1 + i)
        assert np.isclose(ic[i], d, rtol=1e-5)
    assert float(c) == 5.0


@pytest.mark.parametrize("h", [4, 33])
def test_rnn_step_with_matmul(h):
    W = (RNG.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    xs = RNG.standard_normal((20, h)).astype(np.float32)

    def f(W, xs):
        return lax.scan(lambda s, x: (jnp.tanh(W @ s + x), (W @ s).sum()), jnp.zeros(h, jnp.float32), xs)

    (s, ys), exe = check(f, W, xs, rtol=1e-4, atol=1e-5)
    hh = np.zeros(h, np.float32)
    for i, x in enumerate(xs):
        assert np.isclose(ys[i], (W @ hh).sum(), rtol=1e-3, atol=1e-4)
        hh = np.tanh(W @ hh + x)
    np.testing.assert_allclose(s, hh, rtol=1e-4, atol=1e-5)
    assert any(st.kind == "gemm" for st in loop_steps(exe)[0].sub.bodies[0].schedule.steps)


def test_body_constants():
    """A body holding concrete constants (as bodies built by the AD rules do) reads them natively."""
    from ember._src.control_flow.scan import scan_p
    k = np.array([1.0, -2.0, 0.5], np.float32)
    av = ShapedArray((3,), np.float32)
    body, _ = trace_to_program(lambda c, x: [c * k + x, c.sum() * k], [av, av])
    assert body.consts

    def f(c0, xs):
        return scan_p.bind(c0, xs, body=body, num_consts=0, num_carry=1, length=4, reverse=False, unroll=1,
                           checkpoint=True, require_native=False)

    c0 = np.ones(3, np.float32)
    xs = RNG.standard_normal((4, 3)).astype(np.float32)
    (c, ys), exe = check(f, c0, xs)
    assert exe.source.count(f"fns[{abi.N_FIXED_FNS}") >= 1
    cc = c0.copy()
    for i in range(4):
        np.testing.assert_allclose(ys[i], cc.sum() * k, rtol=1e-5, atol=1e-6)  # float32 sums
        cc = cc * k + xs[i]
    np.testing.assert_allclose(c, cc, rtol=1e-5)


def test_vmap_of_scan():
    x = RNG.standard_normal((3, 6)).astype(np.float32)

    def f(x):
        return ember.vmap(lambda r: lax.scan(lambda c, v: (c + v, c * v), np.float32(0), r))(x)

    (c, ys), _ = check(f, x)
    np.testing.assert_allclose(c, x.sum(1), rtol=1e-5)
    np.testing.assert_allclose(ys[:, 1:], np.cumsum(x, 1)[:, :-1] * x[:, 1:], rtol=1e-5)


def test_unused_stacked_outputs_are_not_computed():
    x = RNG.standard_normal((6, 3)).astype(np.float32)

    def f(x):
        c, (y1, y2) = lax.scan(lambda c, x: (c + x, (jnp.exp(c), c * 3)), jnp.zeros(3, jnp.float32), x)
        return c, y2

    (c, y2), exe = check(f, x)
    (st,) = loop_steps(exe)
    body = st.sub.bodies[0].program
    assert len(body.outvars) == 2  # carry and y2; exp(c) is gone
    assert "exp" not in [e.prim.name for e in body.eqns]
    np.testing.assert_allclose(c, x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(y2, (np.cumsum(x, 0) - x) * 3, rtol=1e-5, atol=1e-6)


def test_dce_loop_outputs_pass_keeps_used_outputs():
    p = ember.make_program(lambda x: lax.scan(lambda c, x: (c + x, (c * 2, c * 3)), 0.0, x)[1][1])(
        np.ones(4, np.float32))
    q = run_passes(p, ["dce_loop_outputs"])
    (e,) = [e for e in q.eqns if e.prim.name == "scan"]
    assert len(e.outvars) == 2 and len(e.params["body"].outvars) == 2
    ref = ember.jit(lambda x: lax.scan(lambda c, x: (c + x, (c * 2, c * 3)), 0.0, x)[1][1], backend="numpy")
    from ember._src.program import run_numpy
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(run_numpy(q, q.consts, [x])[0], ref(x))


# ---------------------------------------------------------------------------------------------
# gradients
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint", [True, False, 3])
@pytest.mark.parametrize("reverse", [False, True])
def test_grad_of_scan_matches_the_reference(checkpoint, reverse):
    h = 5
    W = (RNG.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    xs = RNG.standard_normal((11, h)).astype(np.float32)

    def loss(W, xs):
        s, ys = lax.scan(lambda s, x: (jnp.tanh(W @ s + x), (s * s).sum()), jnp.ones(h, jnp.float32), xs,
                         reverse=reverse, checkpoint=checkpoint)
        return s.sum() + ys.sum()

    g, exe = check(ember.grad(loss, argnums=(0, 1)), W, xs, rtol=1e-4, atol=1e-5, min_loops=2)
    # finite differences on one weight
    eps = 1e-3
    Wp, Wm = W.astype(np.float64).copy(), W.astype(np.float64).copy()
    Wp[1, 2] += eps
    Wm[1, 2] -= eps

    def np_loss(W):
        s, tot = np.ones(h), 0.0
        for x in (xs[::-1] if reverse else xs):
            tot += (s * s).sum()
            s = np.tanh(W @ s + x)
        return s.sum() + tot

    fd = (np_loss(Wp) - np_loss(Wm)) / (2 * eps)
    assert np.isclose(g[0][1, 2], fd, rtol=1e-2, atol=1e-3)


def test_linear_scan_jvp_on_native():
    xs = RNG.standard_normal((5, 2)).astype(np.float32)

    def f(a):
        return ember.jvp(lambda a: lax.scan(lambda c, x: (c * a + x, c), jnp.zeros(2, jnp.float32), xs)[0],
                         (a,), (np.float32(1),))

    (val, tan), _ = check(f, np.float32(0.7))
    # d/da of the final carry of c <- c*a + x
    c, dc = np.zeros(2), np.zeros(2)
    for x in xs:
        c, dc = c * 0.7 + x, dc * 0.7 + c
    np.testing.assert_allclose(val, c, rtol=1e-5)
    np.testing.assert_allclose(tan, dc, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# while_loop and fori_loop
# ---------------------------------------------------------------------------------------------


def test_while_loop_with_a_data_dependent_trip_count():
    def f(n):
        def body(c):
            i, v, steps = c
            v = jnp.where(v % 2 == 0, v // 2, 3 * v + 1)
            return i + 1, v, steps + (v > 0).astype(jnp.int32)
        return lax.while_loop(lambda c: c[1] != 1, body, (np.int32(0), n, np.int32(0)))

    for n in (1, 6, 27, 97):
        (i, v, steps), _ = check(f, np.int32(n))
        k, m = 0, n
        while m != 1:
            m = m // 2 if m % 2 == 0 else 3 * m + 1
            k += 1
        assert (int(i), int(v), int(steps)) == (k, 1, k)


def test_while_loop_array_carry_and_consts():
    A = (RNG.standard_normal((4, 4)) * 0.3).astype(np.float64)

    def f(x, tol):
        def body(c):
            x, n = c
            return A @ x, n + 1
        return lax.while_loop(lambda c: jnp.abs(c[0]).max() > tol, body, (x, 0))

    x = np.ones(4)
    (y, n), _ = check(f, x, 1e-3)
    z, k = x.copy(), 0
    while np.abs(z).max() > 1e-3:
        z, k = A @ z, k + 1
    assert int(n) == k
    np.testing.assert_allclose(y, z, rtol=1e-10)


def test_fori_loop_static_and_traced_bounds():
    def f(x, hi):
        a = lax.fori_loop(0, 7, lambda i, c: c * 1.5 + i, x)
        b = lax.fori_loop(2, hi, lambda i, c: c + i * x, jnp.zeros_like(x))
        return a, b

    x = np.array([1.0, -2.0], np.float32)
    (a, b), _ = check(f, x, np.int32(9), min_loops=2)
    aa = x.copy()
    for i in range(7):
        aa = aa * 1.5 + i
    np.testing.assert_allclose(a, aa, rtol=1e-5)
    np.testing.assert_allclose(b, sum(range(2, 9)) * x, rtol=1e-5)


# ---------------------------------------------------------------------------------------------
# cond and switch
# ---------------------------------------------------------------------------------------------


def test_switch_clamps_the_index():
    branches = [lambda x, y: (x + y, y), lambda x, y: (x * 2, y - 1), lambda x, y: (-x, y * 0)]

    def f(i, x, y):
        return lax.switch(i, branches, x, y)

    x = np.arange(3, dtype=np.float32)
    y = np.int32(5)
    g = native(f)
    for i in (-3, 0, 1, 2, 3, 100):
        want = branches[min(max(i, 0), 2)](x, y)
        with cf.require_native_loops():
            got = g(np.int32(i), x, y)
        np.testing.assert_allclose(got[0], want[0])
        assert int(got[1]) == int(want[1])
    assert len(loop_steps(g.lower(np.int32(0), x, y).executable)) == 1


def test_cond_branches_and_cond_inside_scan():
    def f(x):
        def step(c, v):
            c = lax.cond(v > 0, lambda c: c + v, lambda c: c * 0.5, c)
            return c, c
        return lax.scan(step, np.float32(1), x)

    x = np.array([1.0, -1.0, 2.0, -3.0, 0.5], np.float32)
    (c, ys), exe = check(f, x, min_loops=2)
    cc, want = 1.0, []
    for v in x:
        cc = cc + v if v > 0 else cc * 0.5
        want.append(cc)
    np.testing.assert_allclose(ys, want, rtol=1e-6)
    assert [st.kind for st in loop_steps(exe)] == ["loop", "cond"]


def test_grad_through_cond_on_native():
    def f(x):
        return lax.cond(x.sum() > 0, lambda x: (x * x).sum(), lambda x: jnp.sin(x).sum(), x)

    for x in (np.array([1.0, 2.0]), np.array([-1.0, -2.0])):
        g, _ = check(ember.grad(f), x)
        np.testing.assert_allclose(g, 2 * x if x.sum() > 0 else np.cos(x))


# ---------------------------------------------------------------------------------------------
# how loops run: require_native, the log, fallbacks
# ---------------------------------------------------------------------------------------------


def test_native_path_is_reported(caplog):
    ember.set_debug(1)
    caplog.set_level(logging.DEBUG, logger="ember")
    try:
        x = np.arange(4, dtype=np.float32)
        out = native(lambda x: lax.scan(lambda c, x: (c + x * 3, None), np.float32(0), x)[0])(x)
    finally:
        ember.set_debug(0)
    assert float(out) == 18.0
    assert any(r.getMessage().startswith("scan[") and "native loop on backend 'native'" in r.getMessage()
               for r in caplog.records)


def test_body_that_cannot_go_native_raises_or_falls_back(monkeypatch):
    without_calls(monkeypatch, "sort")  # sort has a native lowering: pin it to the Python fallback
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    def f(x, req):
        return lax.scan(lambda c, r: (c + jnp.sort(r)[0], jnp.sort(r)), np.float32(0), x, require_native=req)

    with pytest.raises(cf.NativeLoopError, match=r"sort.*require_native=True"):
        native(f, static_argnums=1)(x, True)
    g = native(f, static_argnums=1)
    c, ys = g(x, False)
    np.testing.assert_allclose(ys, np.sort(x, axis=1))
    np.testing.assert_allclose(c, np.sort(x, axis=1)[:, 0].sum(), rtol=1e-6)
    exe = g.lower(x, False).executable
    assert exe.schedule.count("fallback") == 1 and not loop_steps(exe)


def test_outer_loop_falls_back_when_a_nested_body_cannot_go_native(monkeypatch):
    without_calls(monkeypatch, "sort")
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    def f(x):
        def outer(c, r):
            s, _ = lax.scan(lambda d, v: (d + jnp.sort(r)[0] * v, None), np.float32(0), r)
            return c + s, None
        return lax.scan(outer, np.float32(0), x, require_native=True)[0]

    with pytest.raises(cf.NativeLoopError, match="scan through the Python fallback"):
        native(f)(x)


# ---------------------------------------------------------------------------------------------
# matrix products in bodies, loop-invariant transposes, in-place carries
# ---------------------------------------------------------------------------------------------

MATMUL_BODIES = {
    "W @ h (hoisted transpose)": lambda A, B, c, x: jnp.tanh(A @ c[:, 0] + x[:, 0])[:, None] * c,
    "h @ W": lambda A, B, c, x: c + (x[:, 0] @ A)[:, None],
    "W.T @ h": lambda A, B, c, x: c * 0.5 + (A.T @ x[:, 0])[:, None],
    "W @ C": lambda A, B, c, x: jnp.tanh(A @ c) + x,
    "C @ B.T": lambda A, B, c, x: (c @ B.T)[:, :3] * 0.1 + x,
    "alpha": lambda A, B, c, x: 0.5 * (A @ c) + x,
    "outer": lambda A, B, c, x: c + jnp.outer(x[:, 0], x[:, 1])[:, :3],
    "batched": lambda A, B, c, x: c + jnp.matmul(jnp.stack([A, A * 2]), jnp.stack([c, x])).sum(0) * 0.1,
    "large (BLAS)": lambda A, B, c, x: c + (jnp.tile(A, (8, 8)) @ jnp.tile(c, (8, 8)))[:6, :3] * 0.01,
}


@pytest.mark.parametrize("name", sorted(MATMUL_BODIES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_products_in_bodies(name, dtype):
    body = MATMUL_BODIES[name]
    A = (RNG.standard_normal((6, 6)) * 0.4).astype(dtype)
    B = (RNG.standard_normal((5, 3)) * 0.4).astype(dtype)
    xs = RNG.standard_normal((7, 6, 3)).astype(dtype)

    def f(A, B, xs):
        return lax.scan(lambda c, x: (body(A, B, c, x), c.sum()), jnp.ones((6, 3), dtype), xs)

    tol = 1e-4 if dtype == np.float32 else 1e-10
    (c, ys), exe = check(f, A, B, xs, rtol=tol, atol=tol)
    c_np = np.ones((6, 3), dtype)
    for x in xs:
        c_np = np.asarray(body(A, B, c_np, x))
    np.testing.assert_allclose(c, c_np, rtol=tol * 10, atol=tol * 10)
    blas = "em_gemm_f" in exe.source
    assert blas == (name == "large (BLAS)")


def test_loop_invariant_transpose_is_hoisted():
    W = (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32)
    xs = RNG.standard_normal((5, 8)).astype(np.float32)

    def f(W, xs):
        return lax.scan(lambda h, x: (jnp.tanh(W @ h + x), None), jnp.zeros(8, jnp.float32), xs)[0]

    p = ember.make_program(f)(W, xs)
    q = run_passes(p, ["hoist_loop_transposes"])
    assert [e.prim.name for e in q.eqns] == ["broadcast_in_dim", "transpose", "scan"]
    (e,) = [e for e in q.eqns if e.prim.name == "scan"]
    assert e.params["num_consts"] == 2
    (dot,) = [d for d in e.params["body"].eqns if d.prim.name == "dot_general"]
    assert dot.params["dimension_numbers"] == (((0,), (0,)), ((), ()))
    h, _ = check(f, W, xs)
    hh = np.zeros(8, np.float32)
    for x in xs:
        hh = np.tanh(W @ hh + x)
    np.testing.assert_allclose(h, hh, rtol=1e-5, atol=1e-6)


def test_large_accumulator_carries_update_in_place():
    """The backward scan of an RNN accumulates dW (a large carry) in place with a rank-1 gemm."""
    h = 40
    W = (RNG.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    xs = RNG.standard_normal((9, h)).astype(np.float32)

    def loss(W, xs):
        s, _ = lax.scan(lambda s, x: (jnp.tanh(W @ s + x), None), jnp.zeros(h, jnp.float32), xs,
                        checkpoint=False)
        return (s * s).sum()

    g, exe = check(ember.grad(loss), W, xs, rtol=1e-4, atol=1e-5, min_loops=2)
    big = [st for st in loop_steps(exe) if not st.sub.small_carries]
    assert big and any(st.sub.inplace for st in big)
    eps = 1e-2
    Wp, Wm = W.astype(np.float64).copy(), W.astype(np.float64).copy()
    Wp[3, 5] += eps
    Wm[3, 5] -= eps

    def np_loss(W):
        s = np.zeros(h)
        for x in xs:
            s = np.tanh(W @ s + x)
        return (s * s).sum()

    assert np.isclose(g[3, 5], (np_loss(Wp) - np_loss(Wm)) / (2 * eps), rtol=1e-2, atol=1e-4)


@pytest.mark.parametrize("case", ["elementwise", "reversed read", "read after write", "passthrough"])
def test_large_carries_in_place_or_not(case):
    n = loops.SMALL_CARRY_BYTES // 8 + 8

    def step(c, x):
        a, b = c
        if case == "elementwise":
            return (a * 0.5 + x, b + 1.0), None
        if case == "reversed read":
            return (a[::-1] + x, b + a), None
        if case == "read after write":
            new_a = a + x
            return (new_a, b * 0 + a[0] + new_a.sum()), None
        return (b, a + x), a[:3]

    xs = RNG.standard_normal((6, n)).astype(np.float32)

    def f(xs):
        return lax.scan(step, (jnp.zeros(n, jnp.float32), jnp.ones(n, jnp.float32)), xs)

    (c, ys), exe = check(f, xs, rtol=1e-5, atol=1e-5)
    a, b = np.zeros(n, np.float32), np.ones(n, np.float32)
    for x in xs:
        (a, b), _ = step((a, b), x)
    np.testing.assert_allclose(c[0], a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c[1], b, rtol=1e-5, atol=1e-5)
    (st,) = loop_steps(exe)
    if case == "elementwise":
        assert st.sub.inplace == {0, 1}
    if case == "reversed read":
        assert 0 not in st.sub.inplace


def test_while_loop_with_large_carries():
    n = loops.SMALL_CARRY_BYTES // 8 + 8
    x0 = RNG.standard_normal(n).astype(np.float64)

    def f(x):
        return lax.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 0.5 + 1.0), (0, x))

    (i, y), _ = check(f, x0)
    z = x0.copy()
    for _ in range(5):
        z = z * 0.5 + 1.0
    assert int(i) == 5
    np.testing.assert_allclose(y, z)


def test_unused_cond_outputs_are_dropped():
    def f(p, x):
        a, b = lax.cond(p > 0, lambda x: (x * 2, jnp.exp(x)), lambda x: (x - 1, jnp.log1p(x * x)), x)
        return a

    x = np.array([0.5, 1.5], np.float32)
    for p in (np.float32(1), np.float32(-1)):
        a, exe = check(f, p, x)
        np.testing.assert_allclose(a, x * 2 if p > 0 else x - 1, rtol=1e-6)
    (st,) = loop_steps(exe)
    for b in st.sub.bodies:
        assert len(b.program.outvars) == 1
        assert not {"exp", "log1p"} & {e.prim.name for e in b.program.eqns}


def test_literal_cond_index_and_operands():
    """Operands that are literals (constants the tracer inlined) are materialized for the branch."""
    from ember._src.control_flow.cond import cond_p
    from ember._src.program import Literal

    def f(x):
        return lax.switch(2, [lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x - y], x, 3.0)

    p = ember.make_program(f)(np.float32(5))
    eqns = [e for e in p.eqns if e.prim is cond_p]
    assert eqns and any(isinstance(a, Literal) for a in eqns[0].inputs)
    out, _ = check(f, np.float32(5))
    assert float(out) == 2.0


def test_unread_scan_inputs_are_dropped():
    xs = RNG.standard_normal((5, 3)).astype(np.float32)
    W = RNG.standard_normal((3, 3)).astype(np.float32)

    def f(W, xs):
        c, (y, _) = lax.scan(lambda c, x: (c + x[0][0], (c * 2, W @ x[1])), np.float32(0), (xs, jnp.exp(xs)))
        return c, y

    p = ember.make_program(f)(W, xs)
    q = run_passes(p, ["dce_loop_outputs"])
    (e,) = [e for e in q.eqns if e.prim.name == "scan"]
    assert e.params["num_consts"] == 0 and len(e.inputs) == 2  # W and exp(xs) are gone
    assert "exp" not in [d.prim.name for d in q.eqns]
    (c, y), _ = check(f, W, xs)
    np.testing.assert_allclose(c, xs[:, 0].sum(), rtol=1e-5)
    np.testing.assert_allclose(y, (np.cumsum(xs[:, 0]) - xs[:, 0]) * 2, rtol=1e-5, atol=1e-6)


def test_generating_the_source_twice_gives_the_same_program():
    from ember._src.native.emit.codegen import generate
    from ember._src.native.emit.context import CodegenOptions
    k = np.array([2.0, 3.0], np.float32)
    av = ShapedArray((2,), np.float32)
    body, _ = trace_to_program(lambda c, x: [c * k + x], [av, av])
    from ember._src.control_flow.scan import scan_p

    def f(xs):
        return scan_p.bind(np.zeros(2, np.float32), xs, body=body, num_consts=0, num_carry=1, length=3,
                           reverse=False, unroll=1, checkpoint=True, require_native=False)

    xs = np.ones((3, 2), np.float32)
    exe = native(f).lower(xs).executable
    again = generate(exe.schedule, exe.plan, CodegenOptions())
    assert "static inline void L0b0(" in again.source and len(again.extra_consts) == 1
    np.testing.assert_array_equal(again.extra_consts[0], k)
    np.testing.assert_allclose(exe([xs])[0], k * k + k + 1, rtol=1e-6)  # c <- c * k + 1 from 0


def test_while_predicate_is_a_carry():
    def f(x):
        def body(c):
            v, go, n = c
            v = v * 0.5
            return v, v.sum() > 1.0, n + 1
        return lax.while_loop(lambda c: c[1], body, (x, True, 0))

    x = np.full(4, 3.0, np.float32)
    (v, go, n), _ = check(f, x)
    k, z = 0, x.copy()
    while True:
        z, k = z * 0.5, k + 1
        if not z.sum() > 1.0:
            break
    assert int(n) == k and not bool(go)
    np.testing.assert_allclose(v, z)


def test_transposes_move_out_of_nested_loops():
    """In a checkpointed gradient the forward matvec sits in scans nested in scans: its transpose
    is computed once, outside every loop."""
    h = 6
    W = (RNG.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    xs = RNG.standard_normal((16, h)).astype(np.float32)

    def loss(W, xs):
        s, _ = lax.scan(lambda s, x: (jnp.tanh(W @ s + x), None), jnp.zeros(h, jnp.float32), xs,
                        checkpoint=4)
        return s.sum()

    p = ember.make_program(ember.grad(loss))(W, xs)
    q = run_passes(p, ["hoist_loop_transposes"])

    def walk(prog, depth):
        for e in prog.eqns:
            if depth and e.prim.name == "transpose":
                yield e
            matvec = (((1,), (0,)), ((), ()))
            if depth and e.prim.name == "dot_general" and e.params["dimension_numbers"] == matvec \
                    and e.inputs[0].aval.ndim == 2 and e.inputs[1].aval.ndim == 1:
                yield e
            for b in [e.params.get("body")] if e.prim.name == "scan" else []:
                yield from walk(b, depth + 1)

    assert list(walk(p, 0)) and not list(walk(q, 0))
    assert sum(e.prim.name == "transpose" for e in q.eqns) >= 1
    check(ember.grad(loss), W, xs, rtol=1e-4, atol=1e-5, min_loops=3)


# ---------------------------------------------------------------------------------------------
# unroll, while ping-pong
# ---------------------------------------------------------------------------------------------


def _body_calls(exe) -> int:
    """Call sites of the outer loop's body function in the entry point (one per body copy)."""
    (st,) = [s for s in exe.schedule.steps if s.kind == "loop"]
    name = st.sub.bodies[-1].name
    main = exe.source.split("int ember_main(")[1]
    return main.count(f"{name}(")


@pytest.mark.parametrize("length", [0, 1, 2, 3, 7, 8, 13, 40])
@pytest.mark.parametrize("unroll", [1, 2, 3, 4, 5, 8, True])
@pytest.mark.parametrize("carry", ["small", "large", "nested"])
def test_unroll_matches_unroll_1_and_a_python_loop(length, unroll, carry):
    """``unroll=k`` runs ``k`` body copies per iteration (an even count for ping-pong carries)
    plus the remaining steps; ``unroll=True`` unrolls a short static scan completely. Results
    equal ``unroll=1`` and a Python loop for every length (remainders 0..k-1), small local
    carries, large arena carries and a body with a nested loop."""
    n = {"small": 3, "large": 700, "nested": 3}[carry]
    x = RNG.standard_normal((length, n))

    def step(c, x):
        a, b = c
        if carry == "nested":
            x = lax.scan(lambda d, e: (d * 0.5 + e, None), x, x)[0]
        return (b * 0.5 + jnp.sin(x), a + x * a.sum() * 1e-3), a * b

    def f(x, unroll):
        return lax.scan(step, (jnp.ones(n, x.dtype), jnp.full(n, 0.5, x.dtype)), x, unroll=unroll)

    (c, ys), exe = check(lambda x: f(x, unroll), x, rtol=1e-10, atol=1e-14)
    (c1, ys1), _ = check(lambda x: f(x, 1), x, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(c[0], c1[0], rtol=1e-13)
    np.testing.assert_allclose(c[1], c1[1], rtol=1e-13)
    np.testing.assert_allclose(ys, ys1, rtol=1e-13)
    a, b, want = np.ones(n), np.full(n, 0.5), []
    for row in x:
        if carry == "nested":
            d = row.copy()
            for e in row:
                d = d * 0.5 + e
            row = d
        want.append(a * b)
        a, b = b * 0.5 + np.sin(row), a + row * a.sum() * 1e-3
    np.testing.assert_allclose(c[0], a, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(c[1], b, rtol=1e-10, atol=1e-14)
    if length:
        np.testing.assert_allclose(ys, np.stack(want), rtol=1e-10, atol=1e-14)
    if length >= 2:
        k = length if unroll is True else unroll
        pingpong = carry == "small"
        u = min(k, loops.MAX_UNROLL)
        u = 2 * u if pingpong and u % 2 else u
        calls = _body_calls(exe)
        # u copies in the loop (when it runs at all) + the remainder as straight-line code
        assert calls == (length if u > length else u + length % u)


def test_while_loop_alternates_carry_slots():
    """A small-carry ``while_loop`` runs two steps per iteration alternating two local slots (no
    copy between steps); carries that read each other's old values (a swap, a Fibonacci pair)
    and exits after odd and even step counts give the Python loop's results."""
    def f(n, a0):
        def body(c):
            i, a, b, v = c
            return i + 1, b, a + b, jnp.roll(v, 1) * 0.5 + a  # reads every old carry
        return lax.while_loop(lambda c: c[0] < n, body, (np.int32(0), a0, a0 * 0 + 1.0, np.arange(4.0)))

    g = native(f)
    for n in range(0, 8):
        with cf.require_native_loops():
            i, a, b, v = g(np.int32(n), np.float64(0.25))
        wa, wb, wv = 0.25, 1.0, np.arange(4.0)
        for _ in range(n):
            wa, wb, wv = wb, wa + wb, np.roll(wv, 1) * 0.5 + wa
        assert int(i) == n
        np.testing.assert_allclose([float(a), float(b)], [wa, wb], rtol=1e-15)
        np.testing.assert_allclose(np.asarray(v), wv, rtol=1e-15)
    exe = g.lower(np.int32(3), np.float64(0.25)).executable
    (st,) = loop_steps(exe)
    main = exe.source.split("int ember_main(")[1]
    assert main.count(f"{st.sub.bodies[1].name}(") == 2 and "odd_" in main
    loop_text = main.split("for (;;)")[1].split("if (odd_)")[0]
    # no copy of a carry from its B slot back to its A slot inside the loop (only the body's
    # pass-through output ``new a = old b`` is a copy)
    assert not re.search(r"memcpy\(\(\(char \*\)kA(\d+)_\), \(\(char \*\)kB\1_\)", loop_text)


def test_loop_inside_a_falling_back_loop_is_reported_as_reference(monkeypatch, caplog):
    """An inner scan that could compile natively, inside an outer scan whose body cannot (``sort``
    pinned to the Python fallback), runs inside the outer reference loop: the log says so for
    both, never "native" for the inner one, and ``require_native=True`` on the inner loop raises."""
    without_calls(monkeypatch, "sort")
    x = RNG.standard_normal((3, 4))

    def f(x, req_inner):
        def outer(c, r):
            s, _ = lax.scan(lambda d, v: (d * 0.5 + v, None), np.float64(0), r, require_native=req_inner)
            return c + s + jnp.sort(r)[0], None
        return lax.scan(outer, np.float64(0), x)[0]

    def np_f(x):
        c = 0.0
        for r in x:
            d = 0.0
            for v in r:
                d = d * 0.5 + v
            c = c + d + np.sort(r)[0]
        return c

    ember.set_debug(1)
    caplog.set_level(logging.DEBUG, logger="ember")
    try:
        got = native(f, static_argnums=1)(x, False)
        with pytest.raises(cf.NativeLoopError, match="inside a scan that runs as a reference loop"):
            native(f, static_argnums=1)(x, True)
    finally:
        ember.set_debug(0)
    np.testing.assert_allclose(float(got), np_f(x), rtol=1e-12)
    msgs = [r.getMessage() for r in caplog.records if r.getMessage().startswith("scan[")]
    assert not any("native loop on backend 'native'" in m for m in msgs), msgs
    inner = [m for m in msgs if "inside a scan that runs as a reference loop" in m]
    outer = [m for m in msgs if "reference loop on backend 'native' (the body runs sort" in m]
    assert inner and outer


def test_nested_native_loops_are_reported_native(caplog):
    """Both levels of a nested scan that compiles natively are logged as native loops."""
    x = RNG.standard_normal((3, 4))

    def f(x):
        def outer(c, r):
            s, _ = lax.scan(lambda d, v: (d * 0.25 + v, None), np.float64(0), r)
            return c + s, None
        return lax.scan(outer, np.float64(0), x)[0]

    ember.set_debug(1)
    caplog.set_level(logging.DEBUG, logger="ember")
    try:
        got = native(f)(x)
    finally:
        ember.set_debug(0)
    want = 0.0
    for r in x:
        d = 0.0
        for v in r:
            d = d * 0.25 + v
        want += d
    np.testing.assert_allclose(float(got), want, rtol=1e-12)
    msgs = [r.getMessage() for r in caplog.records if "native loop on backend 'native'" in r.getMessage()]
    assert len(msgs) == 2 and any("body of 2 equations" in m or "scan[length=4" in m for m in msgs), msgs
