"""Native loops under named dynamic axes: a ``scan`` whose length is a named axis, carries with a
symbolic ``batch`` dim, ``while_loop``/``cond`` with symbolic shapes — one C library serves every
binding, each checked against the reference backend (``backend="numpy"``) and NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native import specialize
from ember._src.native.plan import symlayout
from ember._src.native.runtime import compiler
from tests.native.conftest import requires_cc

pytestmark = requires_cc

SEQS = [1, 2, 3, 4, 7, 8, 13, 32, 5]  # >= 8 sequence lengths, 1 included, one odd after a large one


def _compiles() -> int:
    return compiler.cache_stats()["compiles"]


def _loop_steps(sched) -> list:
    out = []
    for st in sched.steps:
        if st.kind in ("loop", "cond"):
            out.append(st)
            for b in st.sub.bodies:
                out.extend(_loop_steps(b.schedule))
    return out


def _symbolic(f, *args):
    """The level-1 symbolic build behind ``f`` (a native ``jit`` with dynamic axes)."""
    sym = specialize.symbolic_executable(f.lower(*args).program)
    assert sym.fallback_reason is None, sym.fallback_reason
    return sym


def _all_fallbacks(sched) -> int:
    n = sched.count("fallback")
    for st in _loop_steps(sched):
        n += sum(b.schedule.count("fallback") for b in st.sub.bodies)
    return n


def _rnn(req: bool):
    def rnn(W, U, b, h0, xs):
        def step(h, x):
            h = jnp.tanh(h @ W + x @ U + b)
            return h, (h * h).sum(-1)

        return lax.scan(step, h0, xs, require_native=req)
    return rnn


def _rnn_np(W, U, b, h0, xs):
    h = h0.astype(np.float64)
    ys = []
    for x in xs.astype(np.float64):
        h = np.tanh(h @ W + x @ U + b)
        ys.append((h * h).sum(-1))
    return h, np.stack(ys)


def _rnn_params(rng, d, h):
    W = (rng.standard_normal((h, h)) / np.sqrt(h)).astype(np.float32)
    U = (rng.standard_normal((d, h)) / np.sqrt(d)).astype(np.float32)
    return W, U, (0.1 * rng.standard_normal(h)).astype(np.float32)


RNN_AXES = {"h0": ("batch", None), "xs": ("seq", "batch", None)}


def test_rnn_over_a_named_seq_axis_compiles_c_once() -> None:
    rng = np.random.default_rng(0)
    d, h = 6, 11  # sizes no other test compiles
    W, U, b = _rnn_params(rng, d, h)
    f = ember.jit(_rnn(True), dynamic_axes=RNN_AXES, backend="native")
    ref = ember.jit(_rnn(False), dynamic_axes=RNN_AXES, backend="numpy")
    before = _compiles()
    for i, s in enumerate(SEQS):
        nb = 1 + i % 3
        h0 = rng.standard_normal((nb, h)).astype(np.float32)
        xs = rng.standard_normal((s, nb, d)).astype(np.float32)
        hT, ys = f(W, U, b, h0, xs)
        assert hT.shape == (nb, h) and ys.shape == (s, nb)
        rh, rys = ref(W, U, b, h0, xs)
        np.testing.assert_allclose(np.asarray(hT), np.asarray(rh), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ys), np.asarray(rys), rtol=1e-5, atol=1e-5)
        wh, wys = _rnn_np(W, U, b, h0, xs)
        np.testing.assert_allclose(np.asarray(hT), wh, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(ys), wys, rtol=1e-4, atol=1e-5)
    assert _compiles() - before == 1
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == len(SEQS)
    sym = _symbolic(f, W, U, b, h0, xs)
    assert _all_fallbacks(sym.schedule) == 0
    (loop,) = _loop_steps(sym.schedule)
    assert loop.sub.per_binding and not loop.sub.small_carries
    assert "em_d_seq" in sym.source and "em_d_batch" in sym.source


def test_reverse_scan_with_symbolic_slices_and_layout_invariants() -> None:
    """``reverse=True`` over a named axis; xs and ys slices of symbolic size (a ``batch x feat``
    row); every binding's nested layout (carry slots, body arena) is checked."""
    def f(xs, c0, req=True):
        def step(c, x):
            c = 0.5 * c + jnp.sin(x)
            return c, c.sum(-1)[:, None] * x
        return lax.scan(step, c0, xs, reverse=True, require_native=req)

    def f_ref(xs, c0):
        return f(xs, c0, req=False)

    def np_ref(xs, c0):
        c = c0.astype(np.float64)
        ys = [None] * len(xs)
        for i in range(len(xs) - 1, -1, -1):
            c = 0.5 * c + np.sin(xs[i].astype(np.float64))
            ys[i] = c.sum(-1)[:, None] * xs[i]
        return c, np.stack(ys)

    axes = {"xs": ("seq", "batch", None), "c0": ("batch", None)}
    nat = ember.jit(f, dynamic_axes=axes, backend="native")
    ref = ember.jit(f_ref, dynamic_axes=axes, backend="numpy")
    rng = np.random.default_rng(1)
    before = _compiles()
    sym = None
    for s, nb in ((1, 1), (2, 5), (9, 3), (4, 1), (17, 2), (3, 8), (6, 6), (11, 4)):
        xs = rng.standard_normal((s, nb, 3)).astype(np.float64)
        c0 = rng.standard_normal((nb, 3))
        got = nat(xs, c0)
        for g, r, w in zip(got, ref(xs, c0), np_ref(xs, c0)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)
        sym = sym or _symbolic(nat, xs, c0)
        vals = sym._sizes(*[{"seq": s, "batch": nb}[a] for a in sym.axes])[:sym._n_arena]
        sym.layout.check(vals)
    assert _compiles() - before <= 1  # 0 when an earlier run left the library in the disk cache
    assert nat.cache_info()["compiles"] == 1


def test_grad_of_the_rnn_on_a_named_axis() -> None:
    rng = np.random.default_rng(2)
    d, h = 4, 7
    W, U, b = _rnn_params(rng, d, h)

    def loss(W, U, b, h0, xs, req=True):
        hT, ys = _rnn(req)(W, U, b, h0, xs)
        return (hT ** 2).sum() + ys.mean()

    def loss_ref(W, U, b, h0, xs):
        return loss(W, U, b, h0, xs, req=False)

    g = ember.jit(ember.grad(loss, argnums=(0, 1, 3)), dynamic_axes=RNN_AXES, backend="native")
    gr = ember.jit(ember.grad(loss_ref, argnums=(0, 1, 3)), dynamic_axes=RNN_AXES, backend="numpy")
    before = _compiles()
    for s, nb in ((1, 2), (5, 1), (12, 3), (8, 2)):
        h0 = rng.standard_normal((nb, h)).astype(np.float32)
        xs = rng.standard_normal((s, nb, d)).astype(np.float32)
        got = g(W, U, b, h0, xs)
        want = gr(W, U, b, h0, xs)
        for a, r in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(r), rtol=2e-4, atol=2e-5)
        # finite differences in float64 along a random direction of W
        V = rng.standard_normal(W.shape)
        eps = 1e-6

        def np_loss(Wd, h0=h0, xs=xs):
            hT, ys = _rnn_np(Wd, U, b, h0, xs)
            return (hT ** 2).sum() + ys.mean()
        fd = (np_loss(W + eps * V) - np_loss(W - eps * V)) / (2 * eps)
        assert np.isclose(float((np.asarray(got[0]) * V).sum()), fd, rtol=2e-3, atol=1e-4)
    assert _compiles() - before <= 1
    assert g.cache_info()["compiles"] == 1
    sym = _symbolic(g, W, U, b, h0, xs)
    assert _all_fallbacks(sym.schedule) == 0 and len(_loop_steps(sym.schedule)) >= 2


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cumsum_over_a_named_axis(dtype) -> None:
    def f(x, req=True):
        def step(c, row):
            c = c + row
            return c, c
        return lax.scan(step, jnp.zeros(x.shape[1:], x.dtype), x, require_native=req)[1]

    nat = ember.jit(f, dynamic_axes={"x": ("n", "m")}, backend="native")
    rng = np.random.default_rng(3)
    for n, m in ((1, 1), (3, 2), (10, 1), (2, 9), (33, 4), (7, 7), (5, 3), (64, 2)):
        x = rng.integers(-5, 5, (n, m)).astype(dtype)
        got = np.asarray(nat(x))
        assert got.dtype == dtype
        np.testing.assert_allclose(got, np.cumsum(x, axis=0, dtype=dtype), rtol=1e-6)
    assert nat.cache_info()["compiles"] == 1
    assert _all_fallbacks(_symbolic(nat, x).schedule) == 0


def test_while_loop_with_a_symbolic_carry() -> None:
    """Power iteration on a ``(n,)`` vector until it converges (a data-dependent trip count) and
    a ``fori_loop`` of a ``(batch, n)`` carry with a traced bound."""
    def f(A, v, k, req=True):
        def cond(c):
            v, prev, i = c
            return (jnp.abs(v - prev).max() > 1e-10) & (i < 500)

        def body(c):
            v, _, i = c
            w = A @ v
            return w / jnp.sqrt((w * w).sum()), v, i + 1

        v, _, i = lax.while_loop(cond, body, (v, v + 1.0, 0), require_native=req)
        acc = lax.fori_loop(0, k, lambda j, a: jnp.cos(a) + j, jnp.outer(v, v), require_native=req)
        return v, i, acc

    def f_ref(A, v, k):
        return f(A, v, k, req=False)

    axes = {"A": ("n", "n"), "v": ("n",)}
    nat = ember.jit(f, dynamic_axes=axes, backend="native")
    ref = ember.jit(f_ref, dynamic_axes=axes, backend="numpy")
    rng = np.random.default_rng(4)
    for n in (1, 2, 5, 9, 16, 3):
        M = rng.standard_normal((n, n))
        A = M @ M.T + n * np.diag(np.arange(1.0, n + 1))  # symmetric, distinct leading eigenvalue
        v0 = rng.standard_normal(n)
        k = np.int32(n % 4 + 1)
        v, i, acc = nat(A, v0, k)
        rv, ri, racc = ref(A, v0, k)
        assert int(i) == int(ri) and 1 <= int(i) < 500
        np.testing.assert_allclose(np.asarray(v), np.asarray(rv), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(np.asarray(acc), np.asarray(racc), rtol=1e-9, atol=1e-12)
        w, vec = np.linalg.eigh(A)
        top = vec[:, -1] * np.sign(vec[:, -1] @ np.asarray(v))
        np.testing.assert_allclose(np.asarray(v), top, rtol=1e-6, atol=1e-6)
    assert nat.cache_info()["compiles"] == 1
    sym = _symbolic(nat, A, v0, k)
    assert _all_fallbacks(sym.schedule) == 0
    assert {st.eqns[0].prim.name for st in _loop_steps(sym.schedule)} >= {"while"}


def test_cond_and_nested_scan_with_symbolic_shapes() -> None:
    """A ``cond`` on symbolic operands inside a scan over ``seq`` whose body runs a scan over the
    row's ``feat`` axis (nested native loops, every level laid out per binding)."""
    def f(x, req=True):
        def inner(c, e):
            c = c * 0.5 + e
            return c, c

        def step(c, row):
            s, cs = lax.scan(inner, jnp.zeros((), row.dtype), row, require_native=req)
            c = lax.cond(s > 0, lambda a: a + cs, lambda a: a - 2.0 * cs, c)
            return c, s
        return lax.scan(step, jnp.zeros(x.shape[1:], x.dtype), x, require_native=req)

    def f_ref(x):
        return f(x, req=False)

    def np_ref(x):
        c = np.zeros(x.shape[1:])
        ss = []
        for row in x:
            acc, cs = 0.0, []
            for e in row:
                acc = acc * 0.5 + e
                cs.append(acc)
            cs = np.array(cs)
            c = c + cs if acc > 0 else c - 2.0 * cs
            ss.append(acc)
        return c, np.array(ss)

    nat = ember.jit(f, dynamic_axes={"x": ("seq", "feat")}, backend="native")
    ref = ember.jit(f_ref, dynamic_axes={"x": ("seq", "feat")}, backend="numpy")
    rng = np.random.default_rng(5)
    for s, m in ((1, 1), (4, 3), (9, 2), (2, 17), (6, 5)):
        x = rng.standard_normal((s, m))
        got = nat(x)
        for g, r, w in zip(got, ref(x), np_ref(x)):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-10, atol=1e-12)
    assert nat.cache_info()["compiles"] == 1
    sym = _symbolic(nat, x)
    assert _all_fallbacks(sym.schedule) == 0
    kinds = sorted(st.eqns[0].prim.name for st in _loop_steps(sym.schedule))
    assert kinds == ["cond", "scan", "scan"]


def test_layout_places_nested_regions_per_binding() -> None:
    """The per-binding layout of a loop workspace: carry slots first (two per carry, aligned),
    then the bodies' arena; a larger binding never shrinks it."""
    def f(x):
        def step(c, row):
            c = jnp.tanh(c * row[:, None] + 1.0)
            return c, c.sum()
        return lax.scan(step, jnp.ones((x.shape[1], 3), x.dtype), x)

    nat = ember.jit(f, dynamic_axes={"x": ("seq", "m")}, backend="native")
    x = np.ones((2, 5))
    sym = _symbolic(nat, x)
    assert isinstance(sym.layout, symlayout.ArenaLayout)
    peaks = []
    for m in (1, 2, 30, 100):
        vals = sym._sizes(*[{"seq": 4, "m": m}[a] for a in sym.axes])[:sym._n_arena]
        sym.layout.check(vals)
        slots, peak = sym.layout.place(vals)
        assert peak >= 2 * m * 3 * 8 and all(o % 64 == 0 for o in slots)
        peaks.append(peak)
    assert peaks == sorted(peaks)
    got = np.asarray(nat(np.full((3, 4), 0.5))[0])
    c = np.ones((4, 3))
    for row in np.full((3, 4), 0.5):
        c = np.tanh(c * row[:, None] + 1.0)
    np.testing.assert_allclose(got, c, rtol=1e-12)


def test_body_without_a_native_lowering_falls_back_per_binding(monkeypatch) -> None:
    """A symbolic scan whose body runs a fallback step stays a reference loop (its body resolved
    for each binding) inside the one library; with ``require_native=True`` it raises early."""
    from ember._src.control_flow import common as cf
    from tests.native.util import without_calls

    without_calls(monkeypatch, "sort")  # pin sort to the Python fallback

    def f(x, req):
        return lax.scan(lambda c, r: (c + jnp.sort(r)[0], jnp.sort(r)), jnp.zeros((), x.dtype), x,
                        require_native=req)

    axes = {"x": ("seq", "m")}
    with pytest.raises(cf.NativeLoopError, match="sort"):
        ember.jit(f, dynamic_axes=axes, static_argnums=1, backend="native")(np.ones((2, 3)), True)
    g = ember.jit(f, dynamic_axes=axes, static_argnums=1, backend="native")
    rng = np.random.default_rng(6)
    for s, m in ((1, 2), (4, 3), (7, 1)):
        x = rng.standard_normal((s, m))
        c, ys = g(x, False)
        np.testing.assert_allclose(np.asarray(ys), np.sort(x, axis=1))
        np.testing.assert_allclose(float(c), np.sort(x, axis=1)[:, 0].sum(), rtol=1e-12)
    sym = _symbolic(g, x, False)
    assert sym.schedule.count("fallback") == 1 and not _loop_steps(sym.schedule)


def _ck_loss(ck, reverse, req=True):
    def loss(W, xs, h0):
        def step(h, x):
            h = jnp.tanh(W @ h + x)
            return h, (h * h).sum()
        hT, ys = lax.scan(step, h0, xs, reverse=reverse, checkpoint=ck, require_native=req)
        return (hT ** 2).sum() + (ys * jnp.cos(ys)).sum()
    return loss


def _ck_loss_np(W, xs, h0, reverse):
    h, tot = h0, 0.0
    for x in (xs[::-1] if reverse else xs):
        h = np.tanh(W @ h + x)
        y = (h * h).sum()
        tot += y * np.cos(y)
    return (h ** 2).sum() + tot


@pytest.mark.parametrize("reverse", [False, True])
def test_checkpointed_grad_over_a_named_axis(reverse) -> None:
    """``checkpoint=True`` (segments of ``ceil(sqrt(seq))`` steps, chosen per binding) and an int
    segment length over a named ``seq`` axis: one C library per policy, gradients equal the
    stored-carry ones and finite differences, at lengths 1, primes and perfect squares."""
    h = 5
    rng = np.random.default_rng(7)
    W = rng.standard_normal((h, h)) / np.sqrt(h)
    h0 = rng.standard_normal(h)
    axes = {"xs": ("seq", None)}
    grads = {ck: ember.jit(ember.grad(_ck_loss(ck, reverse), argnums=(0, 1, 2)), dynamic_axes=axes,
                           backend="native") for ck in (True, 3, False)}
    ref = ember.jit(ember.grad(_ck_loss(True, reverse, req=False), argnums=(0, 1, 2)),
                    dynamic_axes=axes, backend="numpy")
    for L in (1, 2, 3, 4, 5, 7, 9, 13, 16, 31):
        xs = rng.standard_normal((L, h))
        got = {ck: [np.asarray(a) for a in g(W, xs, h0)] for ck, g in grads.items()}
        for ck in (True, 3):
            for a, b in zip(got[ck], got[False]):
                np.testing.assert_allclose(a, b, rtol=1e-11, atol=1e-12)
        for a, b in zip(got[True], ref(W, xs, h0)):
            np.testing.assert_allclose(a, np.asarray(b), rtol=1e-11, atol=1e-12)
        eps = 1e-6
        for i, arg in enumerate((W, xs, h0)):
            V = rng.standard_normal(arg.shape)
            args = [W, xs, h0]
            args[i] = arg + eps * V
            up = _ck_loss_np(*args, reverse)
            args[i] = arg - eps * V
            fd = (up - _ck_loss_np(*args, reverse)) / (2 * eps)
            assert np.isclose((got[True][i] * V).sum(), fd, rtol=1e-6, atol=1e-8)
    for g in grads.values():
        assert g.cache_info()["compiles"] == 1
    for ck, g in grads.items():
        prog = g.lower(W, xs, h0).program
        sched = _symbolic(g, W, xs, h0).schedule
        # the remainder may be empty under some bindings: joining it (concatenate, pad) still runs
        # as native kernels (test_symbolic_empty.py), no fallback step anywhere
        assert _all_fallbacks(sched) == 0, sched
        lengths = {str(e.params["length"]) for e in prog.eqns if e.prim.name == "scan"}
        if ck is False:
            assert lengths == {"seq"}
        else:
            assert "seq" not in lengths and len(lengths) == 2  # n segments, r remaining steps


def test_checkpointed_named_axis_scan_stores_sqrt_n_carries() -> None:
    """The memory plan of ``grad`` over a named ``seq`` axis: with ``checkpoint=True`` the stored
    carries grow as ``sqrt(seq)`` (the arena per step shrinks with ``seq``), with
    ``checkpoint=False`` every step's carry (``h * 8`` bytes) is kept."""
    h = 64

    def loss(ck):
        def f(W, xs):
            def step(c, x):
                return jnp.tanh(W @ c + x), None
            return lax.scan(step, jnp.zeros(h, xs.dtype), xs, checkpoint=ck)[0].sum()
        return f

    W = np.eye(h) * 0.5
    xs = np.ones(7)
    peaks = {}
    for ck in (True, False):
        g = ember.jit(ember.grad(loss(ck)), dynamic_axes={"xs": ("seq",)}, backend="native")
        sym = _symbolic(g, W, xs)
        for L in (10_000, 1_000_000):
            vals = sym._sizes(*[{"seq": L}[a] for a in sym.axes])[:sym._n_arena]
            sym.layout.check(vals)
            peaks[ck, L] = sym.layout.place(vals)[1]
        # the stacked carries of the forward scan, evaluated at a binding
        res = [v.aval for e in g.lower(W, xs).program.eqns if e.prim.name == "scan"
               for v in e.outvars if v.aval.shape[1:] == (h,) and not isinstance(v.aval.shape[0], int)]
        rows = sum(sh_eval(a.shape[0], 1_000_000) for a in res)
        assert rows == 1000 if ck else rows >= 1_000_000
    carry = h * 8
    assert peaks[False, 1_000_000] >= 1_000_000 * carry
    # checkpointed: the O(seq) part of the arena is the (scalar) xs traffic, far below one carry
    assert peaks[True, 1_000_000] - peaks[True, 10_000] < 990_000 * carry / 8
    assert peaks[True, 1_000_000] < peaks[False, 1_000_000] / 8
    # sanity: the gradient itself, against finite differences
    g = ember.jit(ember.grad(loss(True), argnums=1), dynamic_axes={"xs": ("seq",)}, backend="native")
    rng = np.random.default_rng(8)
    Wr = rng.standard_normal((h, h)) / np.sqrt(h)
    for L in (1, 11, 50):
        x = rng.standard_normal(L)
        got = np.asarray(g(Wr, x))

        def np_f(x):
            c = np.zeros(h)
            for e in x:
                c = np.tanh(Wr @ c + e)
            return c.sum()
        fd = np.array([(np_f(x + 1e-6 * d) - np_f(x - 1e-6 * d)) / 2e-6 for d in np.eye(L)])
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def sh_eval(d, seq: int) -> int:
    from ember._src import shapes
    return shapes.evaluate(d, {"seq": seq})


def test_binding_checks_look_inside_loop_bodies_without_resolving_them() -> None:
    """A new binding re-checks the equations of loop bodies (here a body slice whose bounds are
    symbolic) but not the scan equation itself (whose typing holds for every binding), so the
    body is not resolved at every new length; results still match a Python loop."""
    from ember._src import dynamic

    def f(x):
        def step(c, row):
            c = c * 0.5 + row[1:].sum()
            return c, c
        return lax.scan(step, jnp.zeros((), x.dtype), x)

    nat = ember.jit(f, dynamic_axes={"x": ("seq", "feat")}, backend="native")
    rng = np.random.default_rng(9)
    for s, m in ((1, 2), (5, 3), (8, 7), (3, 2)):
        x = rng.standard_normal((s, m))
        c, ys = nat(x)
        want, acc = [], 0.0
        for row in x:
            acc = acc * 0.5 + row[1:].sum()
            want.append(acc)
        np.testing.assert_allclose(np.asarray(ys), want, rtol=1e-12)
        assert float(c) == pytest.approx(want[-1], rel=1e-12)
    prog = nat.lower(x).program
    checked: list = []
    dynamic._collect_checks(prog, {}, checked, set())
    names = [e.prim.name for e in checked]
    assert "scan" not in names and "slice" in names
    (scan_eqn,) = [e for e in prog.eqns if e.prim.name == "scan"]
    assert any(e in scan_eqn.params["body"].eqns for e in checked)
