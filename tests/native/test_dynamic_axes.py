"""Named dynamic axes on the native backend: one C compile per symbolic signature, every binding
checked against the reference backend (``backend="numpy"``) and NumPy references."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember._src import shapes as sh
from ember._src.native import specialize
from ember._src.native.base import symdims as sd
from ember._src.native.plan.planner import _first_fit, first_fit, plan_memory
from ember._src.native.rewrite.passes import run_passes
from ember._src.native.runtime import compiler
from ember._src.native.runtime.pool import POOL
from ember._src.native.scheduling import index as ixm
from ember._src.native.scheduling.index import Ix
from ember._src.native.scheduling.schedule import build_schedule
from ember.errors import ShapeError
from tests.dynamic.models import (
    SEQS,
    assert_block_close,
    block,
    block_inputs,
    block_params,
    block_ref,
    mlp,
    mlp_params,
    mlp_ref,
)
from tests.helpers import run_in_threads
from tests.native.conftest import requires_cc

pytestmark = requires_cc



def _counters() -> tuple[int, int, int]:
    st = specialize.cache_stats()
    return compiler.cache_stats()["compiles"], st["level1_builds"], st["static_fallbacks"]


def _delta(before: tuple[int, int, int]) -> tuple[int, int, int]:
    return tuple(a - b for a, b in zip(_counters(), before))  # type: ignore[return-value]


def test_mlp_64_batch_sizes_compile_c_once() -> None:
    rng = np.random.default_rng(0)
    params = mlp_params(rng, d_in=13, d_hidden=21, d_out=5)  # sizes no other test compiles
    f = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="native")
    ref = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="numpy")
    before = _counters()
    order = list(range(1, 65))
    rng.shuffle(order)
    for b in order:
        x = rng.standard_normal((b, 13)).astype(np.float32)
        out = np.asarray(f(params, x))
        assert out.shape == (b, 5) and out.dtype == np.float32
        np.testing.assert_allclose(out, np.asarray(ref(params, x)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out, mlp_ref(params, x), rtol=2e-5, atol=2e-5)
    assert _delta(before) == (1, 1, 0)  # one C compile, one symbolic build, no static fallback
    info = f.cache_info()
    assert info["compiles"] == 1 and info["specializations"] == 64


def test_block_16_sequence_lengths_compile_c_once() -> None:
    rng = np.random.default_rng(1)
    params = block_params(rng, d=12, d_ff=20)
    axes = {"x": ("batch", "seq", None)}
    f = ember.jit(block, dynamic_axes=axes, backend="native")
    ref = ember.jit(block, dynamic_axes=axes, backend="numpy")
    before = _counters()
    for b, s, x in block_inputs(rng, 12):
        got = f(params, x)
        assert_block_close(got, ref(params, x), b, s, 12, atol=1e-5)
        assert_block_close(got, block_ref(params, x), b, s, 12)
    assert _delta(before) == (1, 1, 0)
    assert f.cache_info()["compiles"] == 1 and f.cache_info()["specializations"] == len(SEQS)


def test_generated_c_reads_axes_from_dims() -> None:
    rng = np.random.default_rng(2)
    params = mlp_params(rng, d_in=11, d_hidden=9, d_out=3)
    f = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="native")
    c = f.lower(params, np.ones((4, 11), np.float32))
    sym = specialize.symbolic_executable(c.program)
    assert sym.fallback_reason is None and sym.axes == ("batch",)
    assert "const int64_t em_d_batch = dims[0];" in sym.source
    # a loop bound read at run time: in the loop, or as the row count of a pooled parallel loop
    assert any(t in sym.source for t in ("< (em_d_batch)", "< em_d_batch;",
                                         "em_par(k1_task, &em_mctx_, em_d_batch,",
                                         "em_par(k1_task, &em_mctx_, (em_d_batch),"))
    assert ", 11," in sym.source or "11)" in sym.source  # static dims stay literals
    # arena offsets come from dims after the axis values
    assert "arena + dims[1]" in sym.source
    text = sym.describe()  # the symbolic plan: byte sizes are polynomials, offsets read from dims
    assert "@dims[1]" in text and "*batch B" in text


def test_grad_of_dynamic_axes_function_on_native() -> None:
    rng = np.random.default_rng(4)
    w = rng.standard_normal((7, 3)).astype(np.float32)

    def loss(w: object, x: object) -> object:
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    def grad_ref(w: np.ndarray, x: np.ndarray) -> np.ndarray:
        x64 = x.astype(np.float64)
        t = np.tanh(x64 @ w)
        return x64.T @ (2 * t * (1 - t * t)) / t.size

    jg = ember.jit(ember.grad(loss), dynamic_axes={"x": "batch, _"}, backend="native")
    ref = ember.jit(ember.grad(loss), dynamic_axes={"x": "batch, _"}, backend="numpy")
    before = _counters()
    for b in (1, 4, 9, 30):
        x = rng.standard_normal((b, 7)).astype(np.float32)
        g = np.asarray(jg(w, x))
        np.testing.assert_allclose(g, grad_ref(w, x), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(g, np.asarray(ref(w, x)), rtol=1e-4, atol=1e-6)
    assert _delta(before)[1:] == (1, 0)
    assert jg.cache_info()["compiles"] == 1 and jg.cache_info()["specializations"] == 4


def test_symbolic_slices_concat_and_pad() -> None:
    """Movement ops whose offsets and extents are symbolic: read through index expressions."""
    def f(x: object, y: object) -> object:
        head, tail = x[:, :-1], x[:, 1:]
        both = jnp.concatenate([head + tail, y], axis=1)
        return jnp.pad(both, ((0, 0), (2, 1))) * 2.0, jnp.sum(jnp.flip(x, 1)[:, 1:], axis=1)

    axes = {"x": ("batch", "seq"), "y": ("batch", "extra")}
    nat = ember.jit(f, dynamic_axes=axes, backend="native")
    ref = ember.jit(f, dynamic_axes=axes, backend="numpy")
    rng = np.random.default_rng(5)
    for b, s, e in ((1, 2, 1), (2, 1, 3), (3, 5, 4), (2, 9, 7), (4, 16, 2)):  # seq 1: empty slices
        x = rng.standard_normal((b, s)).astype(np.float32)
        y = rng.standard_normal((b, e)).astype(np.float32)
        got, want = nat(x, y), ref(x, y)
        for g, r in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(np.asarray(got[0]),
                                   2 * np.pad(np.concatenate([x[:, :-1] + x[:, 1:], y], 1), ((0, 0), (2, 1))),
                                   rtol=1e-6, atol=1e-6)


def test_fallback_steps_run_with_binding_shapes() -> None:
    """Primitives without a kernel (cumsum, sort) run through the Python callback inside the one
    native call; their buffers are viewed with the binding's concrete shapes."""
    def f(x: object) -> object:
        c = jnp.cumsum(jnp.exp(x), axis=0)
        return jnp.sort(c * 2.0, axis=1) + 1.0, c.sum(0)

    nat = ember.jit(f, dynamic_axes={"x": ("n", "m")}, backend="native")
    before = _counters()
    rng = np.random.default_rng(7)
    for n, m in ((1, 1), (4, 3), (9, 6)):
        x = rng.standard_normal((n, m)).astype(np.float32)
        y, t = nat(x)
        c = np.cumsum(np.exp(x.astype(np.float64)), axis=0)
        np.testing.assert_allclose(np.asarray(y), np.sort(2 * c, axis=1) + 1, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(t), c.sum(0), rtol=1e-5)
    assert _delta(before)[1:] == (1, 0)
    sym = specialize.symbolic_executable(nat.lower(np.ones((2, 2), np.float32)).program)
    assert sym.schedule.count("fallback") >= 1


def test_unsupported_program_falls_back_with_reason(caplog: pytest.LogCaptureFixture) -> None:
    def f(x: object) -> object:
        return jnp.sin(x) * 2

    nat = ember.jit(f, dynamic_axes={"x": ("n",)}, backend="native")
    ember.set_debug(1)
    try:
        with caplog.at_level(logging.DEBUG, logger="ember"):
            before = _counters()
            for n in (3, 8):
                x = np.linspace(0, 1, n).astype(np.float16)  # float16 has no C type
                np.testing.assert_allclose(np.asarray(nat(x)).astype(np.float64),
                                           2 * np.sin(x.astype(np.float64)), rtol=2e-3, atol=2e-3)
    finally:
        ember.set_debug(0)
    assert _delta(before)[2] == 2  # each binding built statically
    assert any("static program per binding" in r.getMessage() and "float16" in r.getMessage()
               for r in caplog.records)


def test_specialization_does_not_recompile_and_reuses_pooled_outputs() -> None:
    rng = np.random.default_rng(6)
    params = mlp_params(rng, d_in=6, d_hidden=10, d_out=4)
    f = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="native")
    f(params, np.ones((2, 6), np.float32))
    before = _counters()
    x = rng.standard_normal((33, 6)).astype(np.float32)
    first = np.asarray(f(params, x)).copy()
    assert _delta(before) == (0, 0, 0)
    # the runner allocates nothing but its outputs, and those come from the pool: dropping the
    # previous result lets the next call reuse its block
    run = f.lower(params, x).executable.specialization({"batch": 33}).run
    assert isinstance(run, specialize.NativeRun)
    vals = [np.asarray(params[k]) for k in sorted(params)] + [x]
    np.testing.assert_array_equal(np.asarray(run(vals)[0]), first)
    allocs = POOL.stats()["allocations"]
    for _ in range(20):
        out = run(vals)
        del out
    assert POOL.stats()["allocations"] == allocs
    np.testing.assert_allclose(first, mlp_ref(params, x), rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------------------------


def test_symbolic_index_simplification_is_exact() -> None:
    """delinearize(linearize(i)) over symbolic shapes collapses to affine forms where it is provable,
    and every expression evaluates like NumPy's unravel/ravel at concrete bindings."""
    b, s = sh.axis("batch"), sh.axis("seq")
    ranges = {"d0": (0, b - 1), "d1": (0, s - 1), "d2": (0, 7)}
    flat = ixm.linearize([Ix.var("d0"), Ix.var("d1"), Ix.var("d2")], (b, s, 8))
    back = ixm.delinearize(flat, (b, s, 8), ranges)
    assert back == [Ix.var("d0"), Ix.var("d1"), Ix.var("d2")]
    # (batch*seq, 8) -> (batch, seq, 8): the row splits into d0 // seq, d0 % seq (opaque, correct)
    rows = ixm.linearize([Ix.var("d0"), Ix.var("d2")], (b * s, 8))
    split = ixm.delinearize(rows, (b, s, 8), {"d0": (0, b * s - 1), "d2": (0, 7)})
    for bb, ss in ((1, 1), (2, 3), (5, 4)):
        env = {"batch": bb, "seq": ss}
        for r in range(bb * ss):
            for c in range(8):
                vals = [_eval_ix(e, {"d0": r, "d2": c}, env) for e in split]
                assert tuple(vals) == np.unravel_index(r * 8 + c, (bb, ss, 8))


def _eval_ix(e: Ix, point: dict, env: dict) -> int:
    total = sd.evaluate(e.const, env)
    for t, c in e.terms.items():
        c = sd.evaluate(c, env)
        if isinstance(t, str):
            v = point[t]
        elif isinstance(t, ixm.FloorDiv):
            v = _eval_ix(t.e, point, env) // sd.evaluate(t.k, env)
        elif isinstance(t, ixm.Mod):
            v = _eval_ix(t.e, point, env) % sd.evaluate(t.k, env)
        elif isinstance(t, ixm.Clamp):
            v = min(max(_eval_ix(t.e, point, env), sd.evaluate(t.lo, env)), sd.evaluate(t.hi, env))
        else:
            raise AssertionError(t)
        total += c * v
    return total


def test_symdims_proofs_hold_for_every_binding_only() -> None:
    b, s = sh.axis("batch"), sh.axis("seq")
    assert sd.proves_lt(b - 1, b) and sd.proves_le(0, b - 1) and sd.proves_le(b, b * s)
    assert not sd.proves_lt(b, b * s)  # false at seq = 1
    assert not sd.proves_le(b, s) and not sd.proves_le(s, b)
    assert sd.divides(s, b * s * 4) and not sd.divides(b * s, s * 4)
    assert sd.sign(3 * b) == 1 and sd.sign(-b) == -1 and sd.sign(b - s) is None
    assert sd.cdim(2 * b * s + 3) in ("((int64_t)3 + 2*em_d_batch*em_d_seq)", "(2*em_d_batch*em_d_seq + 3)")
    assert sd.nominal(b * s) == sd.NOMINAL ** 2


def test_per_binding_first_fit_matches_static_planner() -> None:
    def f(x: object) -> object:
        a = jnp.exp(x)
        c = jnp.cumsum(a, axis=0)  # a fallback step: forces materialized intermediates
        return jnp.tanh(c) + jnp.cumsum(c * 2, axis=0)

    prog = ember.jit(f).lower(np.ones((37, 5), np.float32)).program
    sched = build_schedule(run_passes(prog, None), max_inputs=16, fuse=True)
    plan = plan_memory(sched)
    arena = [b for b in plan.buffers if b.in_arena]
    assert arena
    offsets, peak = first_fit([b.nbytes for b in arena], [b.start for b in arena], [b.end for b in arena])
    assert offsets == [b.offset for b in arena] and peak == plan.arena_bytes
    assert _first_fit(arena) == peak


def test_bindings_share_one_arena_safely_across_threads() -> None:
    """Specializations of one symbolic program share its arena (grown to the largest peak): calls
    from several threads at different sizes must not corrupt each other's intermediates."""

    rng = np.random.default_rng(8)
    params = mlp_params(rng, d_in=10, d_hidden=24, d_out=6)
    f = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="native")
    xs = {b: rng.standard_normal((b, 10)).astype(np.float32) for b in (1, 5, 40, 300)}
    want = {b: mlp_ref(params, x) for b, x in xs.items()}
    for x in xs.values():  # build the specializations first (ember's caches are not the subject)
        f(params, x)
    errors: list[BaseException] = []

    def worker(b: int) -> None:
        try:
            for _ in range(30):
                np.testing.assert_allclose(np.asarray(f(params, xs[b])), want[b], rtol=2e-5, atol=2e-5)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    run_in_threads(worker, xs)
    assert not errors, errors[0]


def test_scan_over_a_named_axis_runs_in_the_symbolic_library() -> None:
    """A scan whose length and carry shapes are symbolic runs as a native loop of the one compiled
    library (tests/native/scheduling/test_symbolic_loops.py covers the rest)."""
    from ember import lax

    def f(x: object) -> object:
        def body(c: object, row: object) -> tuple:
            c = jnp.tanh(c + row)
            return c, c * 2.0

        c, ys = lax.scan(body, jnp.zeros(x.shape[1:], x.dtype), x)
        return c, ys.sum(1)

    def ref(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = np.zeros(x.shape[1:])
        ys = []
        for row in x.astype(np.float64):
            c = np.tanh(c + row)
            ys.append(2 * c)
        return c, np.sum(ys, axis=1)

    nat = ember.jit(f, dynamic_axes={"x": ("t", "d")}, backend="native")
    before = _counters()
    rng = np.random.default_rng(9)
    for t, d in ((1, 1), (3, 4), (7, 2), (3, 4)):
        x = rng.standard_normal((t, d)).astype(np.float32)
        for got, want in zip(nat(x), ref(x)):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)
    assert _delta(before)[1:] == (1, 0)
    assert nat.cache_info()["specializations"] == 3
    sym = specialize.symbolic_executable(nat.lower(x).program)
    assert [st.kind for st in sym.schedule.steps].count("loop") == 1
    assert sym.schedule.count("fallback") == 0


def test_binding_beyond_blas_int_extents_takes_the_static_path() -> None:
    """BLAS takes 32-bit extents: a binding whose matrix product exceeds them gets no symbolic
    runner (the caller then builds the resolved program statically, which loops in C)."""
    rng = np.random.default_rng(10)
    params = mlp_params(rng, d_in=3, d_hidden=4, d_out=2)
    f = ember.jit(mlp, dynamic_axes={"x": ("batch", None)}, backend="native")
    sym = specialize.symbolic_executable(f.lower(params, np.ones((2, 3), np.float32)).program)
    assert sym.fallback_reason is None
    assert isinstance(sym.specialize({"batch": 2**31 - 1}), specialize.NativeRun)
    assert sym.specialize({"batch": 2**31}) is None


def test_operands_that_may_be_empty_are_read_safely() -> None:
    """``x[:, 1:]`` has size ``seq - 1``, which is 0 at ``seq = 1``: concatenating or padding it
    must not read out of bounds (such equations run unfused) and must match NumPy at every size."""
    def f(x: object) -> object:
        shifted = jnp.concatenate([x[:, 1:], jnp.zeros_like(x[:, :1])], axis=1)
        padded = jnp.pad(x[:, 1:], ((0, 0), (1, 0)), constant_values=7.0)
        return shifted * 2.0 + padded

    def ref(x: np.ndarray) -> np.ndarray:
        shifted = np.concatenate([x[:, 1:], np.zeros_like(x[:, :1])], axis=1)
        return shifted * 2 + np.pad(x[:, 1:], ((0, 0), (1, 0)), constant_values=7.0)

    nat = ember.jit(f, dynamic_axes={"x": ("batch", "seq")}, backend="native")
    before = _counters()
    rng = np.random.default_rng(11)
    for b, s in ((2, 1), (3, 2), (1, 6), (4, 1)):
        x = rng.standard_normal((b, s)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(nat(x)), ref(x), rtol=1e-6, atol=1e-6)
    assert _delta(before)[1:] == (1, 0)


def test_max_over_an_axis_that_may_be_empty_raises_for_that_binding() -> None:
    def f(x: object) -> object:
        return jnp.max(x[:, 1:], axis=1)

    nat = ember.jit(f, dynamic_axes={"x": ("batch", "seq")}, backend="native")
    ref = ember.jit(f, dynamic_axes={"x": ("batch", "seq")}, backend="numpy")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(nat(x)), x[:, 1:].max(1))
    for g in (nat, ref):
        with pytest.raises(ShapeError, match=r"binding \{batch: 2, seq: 1\} violates a shape constraint"):
            g(np.ones((2, 1), np.float32))


def test_per_binding_arena_plan_invariants() -> None:
    """For every binding, live arena buffers of the one symbolic plan never overlap, offsets are
    64-byte aligned and the peak covers every buffer (the planner's invariants, per binding)."""
    rng = np.random.default_rng(12)
    params = block_params(rng, d=8, d_ff=12)
    f = ember.jit(block, dynamic_axes={"x": ("batch", "seq", None)}, backend="native")
    sym = specialize.symbolic_executable(f.lower(params, np.ones((2, 3, 8), np.float32)).program)
    assert sym.fallback_reason is None
    starts, ends = sym._arena_starts, sym._arena_ends
    for b, s in ((1, 1), (2, 3), (5, 17), (3, 64)):
        run = sym.specialize({"batch": b, "seq": s})
        sizes = list(sym._sizes(b, s)[:sym._n_arena])
        offsets = list(run._dims)[2:2 + sym._n_arena]
        assert all(o % 64 == 0 for o in offsets)
        assert all(o + n <= run.arena_bytes for o, n in zip(offsets, sizes))
        for i in range(len(sizes)):
            for j in range(i + 1, len(sizes)):
                live = starts[i] <= ends[j] and starts[j] <= ends[i]
                disjoint = offsets[i] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[i]
                assert not live or disjoint or 0 in (sizes[i], sizes[j])
        # sizes are the evaluated symbolic byte counts
        plan_sizes = [buf.nbytes for buf in sym.plan.buffers if buf.in_arena]
        assert sizes == [sd.evaluate(n, {"batch": b, "seq": s}) for n in plan_sizes]


def test_symbolic_builds_are_released_with_their_program() -> None:
    """The level-1 cache is keyed weakly by the Program: dropping the jitted function (and the
    function it wraps, which holds the traces as in JAX) releases the compiled library handle and
    the arena."""
    import gc

    rng = np.random.default_rng(13)
    params = mlp_params(rng, d_in=5, d_hidden=7, d_out=3)

    def fn(params, x):
        return mlp(params, x)

    import weakref

    before = {id(k) for k in list(specialize._LEVEL1.keys())}
    f = ember.jit(fn, dynamic_axes={"x": ("batch", None)}, backend="native")
    np.testing.assert_allclose(np.asarray(f(params, np.ones((3, 5), np.float32))),
                               mlp_ref(params, np.ones((3, 5), np.float32)), rtol=2e-5, atol=2e-5)
    # (this program's entry by identity: other tests' entries may die at the same collection)
    mine = [weakref.ref(k) for k in list(specialize._LEVEL1.keys()) if id(k) not in before]
    assert len(mine) == 1
    del f, fn
    gc.collect()
    assert mine[0]() is None


def test_size_expressions_are_named_once() -> None:
    """Nested symbolic sizes (a strided convolution's output size, floor divisions of floor
    divisions) are named once per generated function (``symdims.hoist_sizes``): the generated C
    stays small and its values stay right for several bindings."""
    lines = ["for (int64_t o0 = 0; o0 < (em_floordiv64((em_floordiv64(((int64_t)-1 + em_d_h), 2)), 2) + 1); "
             "++o0)",
             "    x[o0*(64 + 64*em_floordiv64((em_floordiv64(((int64_t)-1 + em_d_h), 2)), 2)) + i1] = 0;",
             "    y = a / (em_d_h > 0 ? em_d_h : 1) + em_floordiv64(o0, 2) + em_floordiv64(em_d_h, em_d_w);"]
    decls, out = sd.hoist_sizes(lines, indent="")
    assert decls == ["const int64_t em_h0 = ((int64_t)-1 + em_d_h); (void)em_h0;",
                     "const int64_t em_h1 = em_floordiv64(em_h0, 2); (void)em_h1;",
                     "const int64_t em_h2 = em_floordiv64(em_h1, 2); (void)em_h2;",
                     "const int64_t em_h3 = (em_h2 + 1); (void)em_h3;",
                     "const int64_t em_h4 = (64 + 64*em_h2); (void)em_h4;"]
    assert out[0] == "for (int64_t o0 = 0; o0 < em_h3; ++o0)"
    assert out[1] == "    x[o0*em_h4 + i1] = 0;"
    # a division by a size, a loop index and a guarded expression stay where they are
    assert out[2] == lines[2]

    w = np.random.default_rng(0).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3

    def net(x):
        for _ in range(4):  # each stride-2 convolution nests one more floor division in every size
            x = jnp.tanh(ember.lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1))) + 0.25)
        return x

    f = ember.jit(net, dynamic_axes={"x": ("b", None, "h", "w")}, backend="native")
    rng = np.random.default_rng(3)
    for shape in ((2, 4, 37, 41), (1, 4, 64, 23)):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(np.asarray(f(x)), np.asarray(ember.jit(net, backend="numpy")(x)),
                                   rtol=1e-5, atol=1e-5)
    sym = specialize.symbolic_executable(f.lower(x).program)
    assert sym.fallback_reason is None
    assert "em_floordiv64(em_floordiv64(" not in sym.source and "const int64_t em_h" in sym.source
    assert f.cache_info()["compiles"] == 1


def test_nested_maxima_render_once_and_are_named() -> None:
    """A symbolic ``max`` renders as a call (``em_max64``), each argument's text once, which
    ``hoist_sizes`` names like a floor division: as the ternary ``a > b ? a : b`` it was never named,
    and the sizes of TF-style padded layers nested in full (12 MB of C for MobileNetV2). The C text
    evaluates like the size itself; named, each level is one short declaration."""
    h = sh.axis("h")
    d = h
    for _ in range(12):  # a strided layer's "SAME" padding nests a maximum of the previous size
        d = sh.floordiv(d + sh.dmax(2 - d % 2, 1), 2)
    text = sd.cdim(d)
    assert "?" not in text

    def em_floordiv64(a, b):
        return a // b

    def em_mod64(a, b):
        return a % b

    def em_max64(a, b):
        return max(a, b)

    code = text.replace("(int64_t)", "")
    fns = {"em_floordiv64": em_floordiv64, "em_mod64": em_mod64, "em_max64": em_max64}
    for n in (1, 2, 7, 64, 77, 4097, 12345):
        want = n
        for _ in range(12):  # the same sizes in plain Python
            want = (want + max(2 - want % 2, 1)) // 2
        assert eval(code, fns, {"em_d_h": n}) == want == sh.evaluate(d, {"h": n})  # noqa: S307 - our C text
    decls, out = sd.hoist_sizes([f"x[{text}] = 0;"], indent="")
    assert out == [f"x[em_h{len(decls) - 1}] = 0;"] and any("em_max64(" in ln for ln in decls)
    assert len(decls) < 100 and max(len(ln) for ln in decls) < 120


def test_a_chain_of_reshapes_over_symbolic_sizes_stays_short() -> None:
    """Each reshape over symbolic sizes nests its divisions around the previous ones' and the text
    of the index grows fourfold per level; fused, such a chain (Funnel's relative-position shift:
    reshape, slice, reshape) gave lines of C of megabytes. Past ``MAX_SYMBOLIC_NESTING`` levels the
    operand is materialized: the C stays small and the values are NumPy's at every binding."""

    def shift(x, xp):  # x: (b, n, t)
        b, n, t = x.shape
        for _ in range(6):
            y = xp.reshape(x, (b, t, n))[:, 1:, :]
            x = xp.reshape(y, (b, n, t - 1)) * 1.5 + 1.0
            t = t - 1
        return x

    g = ember.jit(lambda x: shift(ember.lax.slice_in_dim(x, 0, 2 * x.shape[1] + 8, axis=2), jnp),
                  dynamic_axes={"x": ("b", "n", "m")}, backend="native")
    c = g.lower(np.ones((2, 3, 14), np.float32))
    sym = specialize.symbolic_executable(c.program)
    assert sym.fallback_reason is None
    assert len(sym.source) < 100_000 and max(len(ln) for ln in sym.source.splitlines()) < 2_000
    rng = np.random.default_rng(0)
    for b, n, m in ((2, 3, 14), (1, 5, 19), (3, 4, 17)):
        x = rng.standard_normal((b, n, m)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(g(x)), shift(x[:, :, : 2 * n + 8], np), rtol=1e-5, atol=1e-5)


def test_a_reshape_keeps_the_index_of_axes_it_keeps() -> None:
    """A reshape that keeps leading and trailing axes (Longformer's chunks and banded scores: a
    padded ``[b, s, 12]`` to ``[b, n, 4, 12]``, to ``[b, n, 48]``, padded, to ``[b, n, 4, 13]``,
    cut to 9) passes their indices through and splits only the axes between: the leading axis's
    loop variable appears once in the fused kernel's read, outside every division (flattening all
    axes divided each element's whole offset, the batch's part included, by run-time sizes; the
    Longformer attention ran 3x slower). Values against NumPy at three bindings."""

    def band(x, xp):  # x: (b, s, 12)
        b, s = x.shape[:2]
        n = s // 4 + 1
        padded = np.pad(x, ((0, 0), (0, n * 4 - s), (0, 0))) if xp is np else \
            ember.lax.pad(x, 0.0, ((0, 0, 0), (0, n * 4 - s, 0), (0, 0, 0)))
        flat = xp.pad(xp.reshape(xp.reshape(padded, (b, n, 4, 12)), (b, n, 48)), ((0, 0), (0, 0), (0, 4)))
        return xp.exp(xp.reshape(flat, (b, n, 4, 13))[..., :9]) * 2.0

    g = ember.jit(lambda x: band(x, jnp), dynamic_axes={"x": ("b", "s", None)}, backend="native")
    sym = specialize.symbolic_executable(g.lower(np.ones((2, 7, 12), np.float32)).program)
    assert sym.fallback_reason is None
    reads = [ln for ln in sym.source.splitlines() if "= p0_float[" in ln]
    assert reads and all(len(re.findall(r"\bi0\b", ln)) == 1 for ln in reads), reads
    rng = np.random.default_rng(1)
    for b, s in ((2, 7), (1, 1), (3, 12)):
        x = rng.standard_normal((b, s, 12)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(g(x)), band(x, np), rtol=1e-6)
