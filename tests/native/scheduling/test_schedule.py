"""Schedule structure: what fuses into one kernel, what becomes a call, what fusion refuses."""

from __future__ import annotations

import numpy as np

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.rewrite import passes
from ember._src.native.scheduling.kernel import Unfusable, build_kernel
from ember._src.native.scheduling.schedule import build_schedule
from tests.native.util import row_softmax, without_calls

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 8)).astype(np.float32)


def sched(f, *args, **kw):
    return build_schedule(passes.run_passes(ember.make_program(f)(*args)), **kw)


def kinds(s) -> list[str]:
    return [st.kind for st in s.steps]


softmax = row_softmax


def layernorm(x, g, b):
    n = x.shape[-1]
    mean = lax.reduce_sum(x, (1,)) / n
    xc = x - lax.broadcast_in_dim(mean, x.shape, (0,))
    var = lax.reduce_sum(xc * xc, (1,)) / n
    y = xc * lax.broadcast_in_dim(lax.rsqrt(var + 1e-5), x.shape, (0,))
    return y * g + b


def test_mlp_layer_is_gemm_plus_one_epilogue():
    w, b = RNG.standard_normal((8, 16)).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    s = sched(lambda x, w, b: jnp.maximum(lax.dot(x, w) + b, 0.0), X, w, b)
    assert kinds(s) == ["gemm", "kernel"]
    assert s.steps[1].ir.n_outer == 0 and not s.steps[1].ir.reduces


def test_mlp_three_layers():
    ws = [RNG.standard_normal((8, 8)).astype(np.float32) for _ in range(3)]

    def mlp(x):
        for w in ws[:-1]:
            x = jnp.tanh(lax.dot(x, w) + 1.0)
        return lax.dot(x, ws[-1])

    assert kinds(sched(mlp, X)) == ["gemm", "kernel", "gemm", "kernel", "gemm"]


def test_softmax_is_one_kernel_with_row_cache():
    s = sched(softmax, X)
    assert kinds(s) == ["kernel"]
    ir = s.steps[0].ir
    assert ir.n_outer == 1 and len(ir.reduces) == 2 and ir.n_loops == 3
    assert [r.phase for r in ir.reduces] == [1, 2]
    assert len(ir.scratch) == 1  # exp(x - max) is cached for the last loop, not recomputed


def test_layernorm_is_one_kernel():
    g, b = np.ones(8, np.float32), np.zeros(8, np.float32)
    s = sched(layernorm, X, g, b)
    assert kinds(s) == ["kernel"]
    assert s.steps[0].outputs[0].aval.shape == (4, 8)


def test_keepdims_layernorm_and_softmax_are_one_kernel_each():
    """Row statistics kept as ``[..., 1]`` (``keepdims=True``) fuse like ``[...]`` rows: the layer
    norm of a 3-D value is one three-loop kernel, values as on NumPy."""
    x = RNG.standard_normal((2, 5, 24)).astype(np.float32)
    g, b = RNG.standard_normal(24).astype(np.float32), RNG.standard_normal(24).astype(np.float32)

    def ln(z, g, b):
        mu = jnp.mean(z, axis=-1, keepdims=True)
        zc = z - mu
        var = jnp.mean(zc * zc, axis=-1, keepdims=True)
        return zc / jnp.sqrt(var + 1e-5) * g + b, jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))

    s = sched(ln, x, g, b)
    assert kinds(s) == ["kernel", "kernel"]
    assert sorted(st.ir.n_loops for st in s.steps) == [2, 3]
    from tests.native.util import check

    check(ln, x, g, b)
    # the keepdims statistics themselves as outputs: row roots of shape [..., 1]
    exe = check(lambda z: (jnp.mean(z, axis=-1, keepdims=True), z / jnp.sum(z, axis=1, keepdims=True)), x)
    assert any(st.kind == "kernel" and st.ir.reduces and st.outputs[0].aval.shape == (2, 5, 1)
               for st in exe.schedule.steps)


def test_elementwise_chain_and_siblings():
    s = sched(lambda x: jnp.tanh(2 * x + 1) * jnp.exp(-x), X)
    assert kinds(s) == ["kernel"]
    s = sched(lambda x: (jnp.exp(x) + 1, jnp.exp(x) * 2), X)  # shared exp: one kernel, two outputs
    assert kinds(s) == ["kernel"] and len(s.steps[0].outputs) == 2


def test_movement_fuses_without_copies():
    def f(x):
        y = lax.concatenate([x, lax.rev(x, (1,))], 1)[:, ::2]
        return lax.pad(lax.transpose(y, (1, 0)), 0.0, ((1, 1, 0), (0, 0, 1))) + 1.0

    assert kinds(sched(f, X)) == ["kernel"]


def test_reduction_with_prologue_and_epilogue():
    s = sched(lambda x: jnp.sqrt(lax.reduce_sum(x * x, (1,))) + 1.0, X)
    assert kinds(s) == ["kernel"] and len(s.steps[0].ir.reduces) == 1


def test_no_duplication_of_expensive_broadcast():
    v = RNG.standard_normal(8).astype(np.float32)
    # exp(v) broadcast over 4 rows: computing it inside the (4, 8) kernel would do it 4 times
    s = sched(lambda x, v: x * lax.broadcast_in_dim(jnp.exp(v), (4, 8), (1,)), X, v)
    assert kinds(s) == ["kernel", "kernel"]
    # a cheap producer is recomputed instead of materialized
    s = sched(lambda x, v: x * lax.broadcast_in_dim(v * 2.0, (4, 8), (1,)), X, v)
    assert kinds(s) == ["kernel"]


def test_no_duplication_across_index_maps():
    p = passes.run_passes(ember.make_program(lambda x: jnp.exp(x) + lax.rev(jnp.exp(x), (1,)))(X))
    e = {eq.prim.name: eq for eq in p.eqns}
    try:
        build_kernel(p.eqns, (4, 8), 0, [p.outvars[0]])
        raise AssertionError("expected Unfusable")
    except Unfusable as err:
        assert "indices" in str(err)
    assert "exp" in e
    assert kinds(build_schedule(p)) == ["kernel", "kernel"]


def test_input_limit():
    xs = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(6)]

    def f(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = acc * x + 1.0
        return acc

    assert len(sched(f, *xs).steps) == 1
    s = sched(f, *xs, max_inputs=3)
    assert len(s.steps) > 1 and all(len(st.ir.inputs) <= 3 for st in s.steps)


def test_calls_fallbacks_and_aliases(monkeypatch):
    without_calls(monkeypatch, "sort")
    w = RNG.standard_normal((8, 3)).astype(np.float32)
    s = sched(lambda x, w: (lax.sort(jnp.exp(x), 1), lax.reshape(lax.dot(x, w), (12,))), X, w)
    assert sorted(kinds(s)) == ["alias", "fallback", "gemm", "kernel"]
    fb = next(st for st in s.steps if st.kind == "fallback")
    assert fb.eqns[0].prim.name == "sort"


def test_fuse_false_gives_one_kernel_per_equation():
    s = sched(lambda x: jnp.tanh(2 * x + 1), X, fuse=False)
    assert len(s.steps) == len(s.program.eqns) == 5 and all(st.kind == "kernel" for st in s.steps)


def test_schedule_text():
    text = str(sched(softmax, X))
    assert text.startswith("schedule: 1 steps (1 kernels") and "reduce_max" in text and "k0" in text


def test_column_reductions_use_the_accumulate_strategy():
    x3 = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    col = sched(lambda x: jnp.sqrt(lax.reduce_sum(x * x, (0,)) + 1.0), X).steps[0].ir
    assert col.natural == ["d1", "d0"]  # loops over the operand's rows (reduced) then columns
    assert sched(lambda x: lax.reduce_sum(x, (1,)), X).steps[0].ir.natural is None  # trailing: rows
    mixed = sched(lambda x: lax.reduce_max(x, (0, 2)), x3).steps[0].ir
    assert mixed.natural == ["d1", "d0", "d2"]
    # a softmax over axis 0 is two phases: its reductions keep the strided row strategy
    s = sched(lambda x: jnp.exp(x - lax.broadcast_in_dim(lax.reduce_max(x, (0,)), x.shape, (1,))), X)
    assert all(st.ir.natural is None or len(st.ir.reduces) == 1 for st in s.steps)


def test_residual_chain_does_not_keep_every_layer_live():
    """``h = h + f(norm(h))`` over layers: the residual add is cheap, but copying it into the next
    layer's consumers would make one kernel sum every layer's branch at the end, keeping them all
    live (the arena grew by two buffers per layer); it stays the same for 4 and 16 layers."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 32)).astype(np.float32)

    def model(x, ws):
        h = x
        for w in ws:
            n = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-5)
            h = h + jnp.tanh(n @ w)
        return h

    arena = {}
    for layers in (4, 16):
        ws = [rng.standard_normal((32, 32)).astype(np.float32) / 6 for _ in range(layers)]
        f = ember.jit(model, backend="native")
        np.testing.assert_allclose(np.asarray(f(x, ws)), np.asarray(ember.jit(model, backend="numpy")(x, ws)),
                                   rtol=1e-4, atol=1e-5)
        arena[layers] = f.lower(x, ws).executable.plan.arena_bytes
    assert arena[16] == arena[4], arena


def _mixing_chain(x, y, rounds: int):
    """A threefry-like DAG of maps over one domain: every value feeds two later ones."""
    a, b = x, y
    for _ in range(rounds):
        a = jnp.tanh(a + b)
        b = b * 0.5 + jnp.sin(a) * 0.3
        a, b = b - a * 0.25, a
    return a * b


def test_a_large_map_region_is_one_kernel_built_once(monkeypatch):
    """A 300-equation map DAG becomes one kernel through one region build (not one rebuild per
    pairwise merge, which was quadratic), and computes the NumPy result."""
    from ember._src.native.scheduling import schedule as sched_mod

    calls = []
    real = sched_mod.build_kernel
    monkeypatch.setattr(sched_mod, "build_kernel",
                        lambda eqns, *a, **k: calls.append(len(eqns)) or real(eqns, *a, **k))
    y = RNG.standard_normal((4, 8)).astype(np.float32)
    s = sched(lambda x, y: _mixing_chain(x, y, 50), X, y)
    assert kinds(s) == ["kernel"]
    n = len(s.steps[0].eqns)
    assert n >= 300
    # classification builds each equation alone; then one region build and the final one
    assert sorted(calls)[-2:] == [n, n] and sum(1 for c in calls if c > 1) == 2
    got = np.asarray(ember.jit(lambda x, y: _mixing_chain(x, y, 50))(X, y))
    a, b = X.astype(np.float64), y.astype(np.float64)
    for _ in range(50):
        a = np.tanh(a + b)
        b = b * 0.5 + np.sin(a) * 0.3
        a, b = b - a * 0.25, a
    np.testing.assert_allclose(got, a * b, rtol=2e-4, atol=1e-4)


def test_a_map_region_through_a_product_is_not_merged():
    """Maps connected directly and through a matrix product (x1 -> dot -> z and x1 -> z) are not
    one region: merging them would put the product inside its own consumer's kernel (a cycle)."""
    w = RNG.standard_normal((8, 8)).astype(np.float32)

    def f(x):
        x1 = x
        for k in range(20):
            x1 = jnp.tanh(x1 * 1.01 + 0.1 * k)
        y = lax.dot(x1, w)
        z = x1
        for k in range(20):
            z = z * y + 0.01 * k
        return z

    s = sched(f, X)
    assert kinds(s) == ["kernel", "gemm", "kernel"]
    x1 = X.astype(np.float64)
    for k in range(20):
        x1 = np.tanh(x1 * 1.01 + 0.1 * k)
    y, z = x1 @ w, x1
    for k in range(20):
        z = z * y + 0.01 * k
    np.testing.assert_allclose(np.asarray(ember.jit(f)(X)), z, rtol=1e-4, atol=1e-4)


def test_a_map_region_with_too_many_inputs_falls_back_to_pairwise_merging():
    """A region reading 40 inputs cannot be one kernel (16 at most): the pairwise loop splits it
    into kernels that each fit, and the result is the NumPy sum."""
    xs = [RNG.standard_normal((4, 8)).astype(np.float32) for _ in range(40)]

    def f(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = acc * 0.9 + x
        return acc

    s = sched(f, *xs)
    assert all(k == "kernel" for k in kinds(s)) and len(s.steps) >= 3
    assert all(len(st.inputs) <= 16 for st in s.steps)
    want = xs[0].astype(np.float64)
    for x in xs[1:]:
        want = want * 0.9 + x
    np.testing.assert_allclose(np.asarray(ember.jit(f)(*xs)), want, rtol=1e-5, atol=1e-5)


def test_a_very_deep_elementwise_chain_splits_into_kernels():
    """700 ``tanh(x * a + b)`` in a row (2100 equations) raised RecursionError in the kernel
    builder's walk; a region now stops growing at MAX_EXPR_DEPTH equations, so the chain runs as a
    few kernels. Values against float64 NumPy; the gradient of a 100-long chain (300 equations, its
    backward longer) against the chain rule by hand."""
    from ember._src.native.scheduling.kernel import MAX_EXPR_DEPTH

    def chain(n):
        def f(x):
            for _ in range(n):
                x = jnp.tanh(x * 1.0001 + 0.1)
            return x
        return f

    def by_hand(x, n):
        y, dy = x.copy(), np.ones_like(x)
        for _ in range(n):
            y = np.tanh(y * 1.0001 + 0.1)
            dy = dy * 1.0001 * (1 - y ** 2)
        return y, dy
    x = np.linspace(-2, 2, 64).reshape(4, 16)
    s = sched(chain(700), x.astype(np.float32))
    assert 2100 // MAX_EXPR_DEPTH <= kinds(s).count("kernel") <= 4 * (2100 // MAX_EXPR_DEPTH)
    got = np.asarray(ember.jit(chain(700), backend="native")(x.astype(np.float32)))
    np.testing.assert_allclose(got, by_hand(x, 700)[0], rtol=0, atol=2e-6)
    loss = ember.grad(lambda x: chain(100)(x).sum())
    g = np.asarray(ember.jit(loss, backend="native")(x.astype(np.float32)))
    np.testing.assert_allclose(g, by_hand(x, 100)[1], rtol=1e-4, atol=1e-6)


def test_scheduling_a_long_chain_builds_linearly_many_equations(monkeypatch):
    """The gradient of a 250-long ``x + 0.01 tanh(1.01 x + 0.1)`` chain is one map region too deep
    for one kernel. It was left to the pairwise loop, which rebuilt a growing kernel at every merge:
    1.3 million equations went through the kernel builder for a 2800-equation program (467 per
    equation; the gradient of a 700-long chain took 330 s to compile). The region is now cut into
    chunks that fit, so the builder sees each equation a bounded number of times (12 here). Values
    against the chain rule by hand in float64."""
    import ember._src.native.scheduling.schedule as schedule_mod
    from ember._src.native.scheduling.kernel import MAX_EXPR_DEPTH
    seen: list[int] = []
    real = schedule_mod.build_kernel

    def counting(eqns, *args, **kw):
        seen.append(len(eqns))
        return real(eqns, *args, **kw)
    monkeypatch.setattr(schedule_mod, "build_kernel", counting)

    def loss(x):
        for _ in range(250):
            x = x + 0.01 * jnp.tanh(x * 1.01 + 0.1)
        return x.sum()
    x = np.linspace(-2, 2, 64).reshape(4, 16)
    s = sched(ember.grad(loss), x.astype(np.float32))
    n_eqns = sum(len(st.eqns) for st in s.steps)
    assert sum(seen) <= 20 * n_eqns, (sum(seen), n_eqns)
    assert all(k == "kernel" for k in kinds(s)) and len(s.steps) >= 2500 // MAX_EXPR_DEPTH
    y, dy = x.copy(), np.ones_like(x)
    for _ in range(250):
        t = np.tanh(y * 1.01 + 0.1)
        dy = dy * (1 + 0.01 * 1.01 * (1 - t ** 2))
        y = y + 0.01 * t
    g = np.asarray(ember.jit(ember.grad(loss), backend="native")(x.astype(np.float32)))
    np.testing.assert_allclose(g, dy, rtol=1e-4)
