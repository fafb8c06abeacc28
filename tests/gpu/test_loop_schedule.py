"""The backend-neutral scan schedule (``gpu/loop_schedule.py``) that WebGPU and CUDA both run:
its actions checked against hand-derived sequences, and replayed over host memory (the body
evaluated by the reference interpreter) against the CPU backend. No device needed."""

from __future__ import annotations

import numpy as np
import pytest

import ember
import ember.numpy as jnp
from ember import lax
from ember._src.core import ShapedArray
from ember._src.gpu import kernels, loop_schedule, nested
from ember._src.gpu.cuda import CUDARenderer
from ember._src.interpreter import numpy_backend
from ember._src.program import trace_to_program


def _nbytes(n: int, dtype: np.dtype) -> int:
    return n * np.dtype(dtype).itemsize


def _schedule(f, *args) -> tuple[loop_schedule.ScanSchedule, object]:
    """The schedule of the one scan ``f`` traces to, and its equation."""
    prog, _ = trace_to_program(lambda *a: ember.tree.leaves(f(*a)),
                               [ShapedArray(np.shape(a), np.asarray(a).dtype) for a in args])
    (e,) = [e for e in prog.eqns if e.prim.name == "scan"]
    body = kernels.schedule(nested.unrolled_body(e.params["body"]), CUDARenderer())
    return loop_schedule.ScanSchedule(e, body), e


def _f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _affine(reverse: bool = False):
    def f(c, xs):
        return lax.scan(lambda c, x: (c * 2.0 + x, c + 1.0), c, xs, reverse=reverse)
    return f


@pytest.mark.parametrize("n", [0, 1, 3, 4])
def test_forward_steps_ping_pong_and_offsets(n: int) -> None:
    sched, _ = _schedule(_affine(), _f32(3), _f32(n, 3))
    assert sched.pingpong == [True]  # the body's kernel writes the new carry into the other set
    plan = sched.plan({}, _nbytes)
    (y_kind, y_buf) = sched.body.outputs[1]
    assert y_kind == "buf"
    want = [("copy", ("init", 0), 0, ("carry", 0, 0), 0, 12)]
    for i in range(n):
        want += [("copy", ("xs", 0), 12 * i, ("x", 0), 0, 12), ("body", i % 2),
                 ("copy", ("temp", y_buf), 0, ("ys", 0), 12 * i, 12)]
    assert plan.actions == want
    assert plan.outputs == [("carry", n % 2, 0), ("ys", 0)]  # odd trip counts end in set B
    assert sched.order() == [(i, i % 2) for i in range(n)]
    assert plan.buffers["ys", 0] == max(12 * n, 4) and plan.buffers["carry", 1, 0] == 12
    # the carry's input buffer and the carry the kernel writes swap sets with the parity
    c_in, (_, c_out) = sched.body.inputs[0], sched.body.outputs[0]
    for par in (0, 1):
        m = plan.binding(par)
        assert m[c_in] == ("carry", par, 0) and m[c_out] == ("carry", 1 - par, 0)
        assert m[sched.body.inputs[1]] == ("x", 0) and m[y_buf] == ("temp", y_buf)


def test_reverse_steps_read_and_write_from_the_end() -> None:
    sched, _ = _schedule(_affine(reverse=True), _f32(3), _f32(3, 3))
    plan = sched.plan({}, _nbytes)
    assert sched.order() == [(2, 0), (1, 1), (0, 0)]  # parity follows the step, not the index
    x_offsets = [a[2] for a in plan.actions if a[0] == "copy" and a[1] == ("xs", 0)]
    y_offsets = [a[4] for a in plan.actions if a[0] == "copy" and a[3] == ("ys", 0)]
    assert x_offsets == y_offsets == [24, 12, 0]
    assert [a[1] for a in plan.actions if a[0] == "body"] == [0, 1, 0]
    assert plan.outputs[0] == ("carry", 1, 0)


def _swap(n: int):
    def f(a, b):
        def body(c, _):
            a, b, keep = c
            return (b, a * 2.0, keep), None
        return lax.scan(body, (a, b, a + b), None, length=n)[0]
    return f


def test_carries_passed_through_or_swapped_are_copied() -> None:
    sched, _ = _schedule(_swap(2), _f32(4), _f32(4, seed=1))
    # carry 0 is the input b, carry 2 the input keep: copied; carry 1 a kernel's output: ping-pong
    assert sched.pingpong == [False, True, False]
    plan = sched.plan({}, _nbytes)
    init = [("copy", ("init", j), 0, ("carry", 0, j), 0, 16) for j in range(3)]
    step = [[("body", p), ("copy", ("carry", p, 1), 0, ("carry", 1 - p, 0), 0, 16),
             ("copy", ("carry", p, 2), 0, ("carry", 1 - p, 2), 0, 16)] for p in (0, 1)]
    assert plan.actions == init + step[0] + step[1]
    assert plan.outputs == [("carry", 0, j) for j in range(3)]


def _replay_on_host(sched: loop_schedule.ScanSchedule, e, operands: list) -> list:
    """Runs the schedule over host memory: a byte array per slot, each step's body evaluated by
    the reference interpreter over the slots its parity binds, its outputs stored into theirs."""
    plan = sched.plan({}, _nbytes)
    body_prog = nested.unrolled_body(e.params["body"])
    body_run = numpy_backend(body_prog)
    mem = {s: np.zeros(n, np.uint8) for s, n in plan.buffers.items()}
    nc, nk = sched.nc, sched.nk
    kinds = ["const"] * nc + ["init"] * nk + ["xs"] * (len(operands) - nc - nk)
    counts: dict[str, int] = {}
    for kind, x in zip(kinds, operands):
        j = counts[kind] = counts.get(kind, -1) + 1
        mem[kind, j] = np.frombuffer(np.ascontiguousarray(x).tobytes() or b"\0", np.uint8).copy()
    for j, (value, n, dtype) in plan.literals.items():
        mem["literal", j] = np.full(max(n, 1), value, dtype).view(np.uint8).copy()

    def copy(src, so, dst, do, n):
        dst[do:do + n] = src[so:so + n]

    def body(par):
        m = plan.binding(par)
        ins = [mem[m[i]][:_nbytes(int(np.prod(a.shape)), a.dtype)].view(a.dtype).reshape(a.shape)
               for i, a in zip(sched.body.inputs, body_prog.in_avals)]
        outs = [np.asarray(o, a.dtype) for o, a in zip(body_run(ins), body_prog.out_avals)]
        for (kind, v), o in zip(sched.body.outputs, outs):
            if kind == "buf":
                mem[m[v]][:o.nbytes] = o.reshape(-1).view(np.uint8)

    loop_schedule.replay(plan, mem.__getitem__, copy, body)
    avals = [v.aval for v in e.outvars]
    return [mem[s][:_nbytes(int(np.prod(a.shape)), a.dtype)].view(a.dtype).reshape(a.shape)
            for s, a in zip(plan.outputs, avals)]


def _consts_and_literal(n: int, reverse: bool):
    def f(w, c, k, xs):
        def body(carry, x):
            c, k = carry
            h = jnp.tanh(c @ w) + x
            return (h, k), (h * 2.0, jnp.sum(h), 1.0)
        return lax.scan(body, (c, k), xs, reverse=reverse)
    return f


def _swap_inputs(n: int):
    def f(a, b, keep):
        def body(c, _):
            a, b, keep = c
            return (b, a * 2.0, keep), None
        return lax.scan(body, (a, b, keep), None, length=n)[0]
    return f


@pytest.mark.parametrize("n", [0, 1, 2, 5])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("case", ["consts_and_literal", "swap", "affine"])
def test_host_replay_matches_the_cpu_backend(case: str, reverse: bool, n: int) -> None:
    """Every operand of the scan is an input of the function, so the replay's operands are the
    arguments and its outputs the function's results."""
    if case == "swap":
        f, args = _swap_inputs(n), (_f32(4), _f32(4, seed=1), _f32(4, seed=6))
    elif case == "affine":
        f, args = _affine(reverse), (_f32(3), _f32(n, 3, seed=2))
    else:
        f, args = _consts_and_literal(n, reverse), (_f32(3, 3, seed=5), _f32(2, 3), _f32(4, seed=3),
                                                    _f32(n, 2, 3, seed=4))
    prog, _ = trace_to_program(lambda *a: ember.tree.leaves(f(*a)),
                               [ShapedArray(np.shape(a), np.asarray(a).dtype) for a in args])
    (e,) = prog.eqns
    assert list(prog.outvars) == list(e.outvars)
    sched, _ = _schedule(f, *args)
    env = dict(zip(prog.invars, args))
    operands = [np.asarray(env[v], v.aval.dtype) for v in e.inputs]
    got = _replay_on_host(sched, e, operands)
    want = ember.tree.leaves(ember.jit(f, backend="native")(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=2e-6, atol=2e-6)
