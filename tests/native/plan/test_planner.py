"""Memory plan invariants: no two simultaneously live buffers overlap, alignment, peak <= sum,
aliases share storage, deterministic plans; a warm call allocates only its outputs."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.native.plan.planner import ACTIVATION, EXTERNAL_OUT, WORKSPACE, plan_memory
from ember._src.native.rewrite import passes
from ember._src.native.scheduling.schedule import build_schedule
from ember._src.program import Var
from tests.native import randprog
from tests.native.conftest import requires_cc
from tests.native.util import row_softmax

RNG = np.random.default_rng(0)


def independent_overlap_check(exe) -> None:
    """Recompute liveness from the schedule and check arena byte ranges of live values."""
    sched, plan = exe.schedule, exe.plan
    first, last = {}, {}
    for s, st in enumerate(sched.steps):
        reads = st.ir.inputs if st.ir is not None else [a for a in st.inputs if isinstance(a, Var)]
        for v in reads:
            last[v.id] = s
        for v in st.outputs:
            first.setdefault(v.id, s)
            last.setdefault(v.id, s)
    spans = []
    for vid, s0 in first.items():
        b = plan.value_buffer[vid]
        if b.in_arena and b.nbytes:
            spans.append((vid, s0, last[vid], b))
    for i, (va, a0, a1, ba) in enumerate(spans):
        for vb, b0, b1, bb in spans[i + 1:]:
            if ba is bb:
                continue  # shared on purpose (alias or in place)
            if a0 <= b1 and b0 <= a1:
                assert ba.offset + ba.nbytes <= bb.offset or bb.offset + bb.nbytes <= ba.offset, \
                    f"v{va} and v{vb} are live together and overlap"


def plan_of(f, *args, **kw):
    p = passes.run_passes(ember.make_program(f)(*args))
    s = build_schedule(p)
    return s, plan_memory(s, **kw)


def chain(x):
    a = lax.sort(jnp.exp(x), 1)      # fallbacks force intermediates into the arena
    b = lax.sort(a * 2.0 + 1.0, 0)
    c = lax.sort(jnp.tanh(b), 1)
    return lax.sort(c - a, 0)


def test_plan_invariants_and_reuse():
    x = RNG.standard_normal((32, 32)).astype(np.float32)
    s, plan = plan_of(chain, x)
    plan.check()
    arena = [b for b in plan.buffers if b.cls in (ACTIVATION, WORKSPACE)]
    assert all(b.offset % 64 == 0 for b in arena)
    assert plan.arena_bytes <= plan.intermediate_bytes
    assert plan.arena_bytes < plan.intermediate_bytes  # buffers whose lifetimes do not meet share bytes
    assert "arena" in str(plan) and "EXTERNAL_OUT" in str(plan)


def test_plans_are_deterministic():
    x = RNG.standard_normal((32, 32)).astype(np.float32)
    a = [(b.cls, b.nbytes, b.offset, b.start, b.end) for b in plan_of(chain, x)[1].buffers]
    b = [(b.cls, b.nbytes, b.offset, b.start, b.end) for b in plan_of(chain, x)[1].buffers]
    assert a == b


def test_aliases_share_storage():
    x = RNG.standard_normal((8, 6)).astype(np.float32)
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    s, plan = plan_of(lambda x, w: lax.reshape(lax.dot(lax.sort(x, 1), w), (32,)), x, w)
    alias = next(st for st in s.steps if st.kind == "alias")
    assert plan.value_buffer[alias.inputs[0].id] is plan.value_buffer[alias.outputs[0].id]
    assert plan.value_buffer[alias.outputs[0].id].cls == EXTERNAL_OUT  # the gemm writes the output


def test_in_place_only_when_input_dies():
    x = RNG.standard_normal((16, 16)).astype(np.float32)
    _, plan = plan_of(lambda x: lax.sort(lax.sort(x, 0) * 2.0, 1), x)
    assert len(plan.inplace) == 1
    _, plan = plan_of(lambda x: (lambda a: lax.sort(a * 2.0, 1) + a)(lax.sort(x, 0)), x)
    assert plan.inplace == []  # a is still needed after the multiply
    _, plan = plan_of(lambda x: lax.sort(lax.sort(x, 0) * 2.0, 1), x, inplace=False)
    assert plan.inplace == []


def test_workspace_is_per_thread_and_single_step():
    x = RNG.standard_normal((8, 64)).astype(np.float32)

    _, plan = plan_of(row_softmax, x, threads=4)
    ws = [b for b in plan.buffers if b.cls == WORKSPACE]
    assert len(ws) == 1 and ws[0].nbytes == 64 * 4 * 4 and ws[0].start == ws[0].end


@pytest.mark.parametrize("seed", range(25))
def test_random_plans(seed):
    f, inputs, _ = randprog.make(1000 + seed)
    p = passes.run_passes(ember.make_program(f)(*inputs))
    s = build_schedule(p)
    plan = plan_memory(s, threads=2)
    plan.check()

    class Exe:
        schedule, plan = s, None

    Exe.plan = plan
    independent_overlap_check(Exe)


@requires_cc
def test_warm_call_allocates_only_outputs():
    x = RNG.standard_normal((256, 256)).astype(np.float32)
    f = ember.jit(chain, backend="native")
    for _ in range(3):
        f(x)
    exe = f.lower(x).executable
    out_bytes = sum(b.nbytes for b in exe.plan.buffers if b.cls == EXTERNAL_OUT)
    assert exe.plan.arena_bytes > out_bytes  # there are intermediates, and they are not allocated
    arg = [np.ascontiguousarray(x)]
    exe(arg)
    gc.collect()
    outs, new = _call_buffer_bytes(exe, arg)
    assert new == 0, f"{new} bytes of buffers allocated by a warm call (outputs come from the pool)"
    # with every pooled block still held by the caller, the call allocates exactly its output (idle
    # blocks other tests left in the shared pool's bucket would be reused: clear_caches drops them)
    ember.clear_caches()
    keep = [exe(arg) for _ in range(3)]
    outs2, new = _call_buffer_bytes(exe, arg)
    assert 0 < new <= 2 * out_bytes + 64 and all(outs2[0] is not k[0] for k in keep)
    del outs


def _call_buffer_bytes(exe, arg):
    """``exe(arg)`` and the bytes of buffers it newly holds (traced with tracemalloc)."""
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        outs = exe(arg)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    return outs, _buffer_bytes(before, after)


def _buffer_bytes(before, after) -> int:
    """Bytes newly held in blocks of at least 1 KiB (buffers, not small Python objects)."""
    return sum(st.size_diff for st in after.compare_to(before, "traceback")
               if st.size_diff > 0 and st.count_diff > 0 and st.size_diff / st.count_diff >= 1024)


@requires_cc
def test_gemm_accumulates_into_a_dying_addend():
    from tests.native.util import check

    x = RNG.standard_normal((8, 16)).astype(np.float32)
    w = RNG.standard_normal((16, 16)).astype(np.float32)

    def f(x, w):
        r = lax.sort(x, 1) * 2.0      # an intermediate that dies at the second gemm
        return lax.sort(lax.dot(lax.dot(x, w), w) + r, 0)

    exe = check(f, x, w, rtol=1e-4, atol=1e-4)
    g = [st for st in exe.schedule.steps if st.kind == "gemm"][-1]
    assert len(g.eqns[0].inputs) == 3
    assert any(out == g.outputs[0].id for _, out, _ in exe.plan.inplace)
