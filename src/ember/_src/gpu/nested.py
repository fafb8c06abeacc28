"""Nested control flow in a preencoded ``scan`` body: each inner ``scan`` (``fori_loop``) with a
static trip count is unrolled into the body, so the outer loop's per-step dispatches hold every
inner step's dispatches and the whole nest is one command buffer and one ``queue.submit``; each
``cond`` (``switch``) whose branches the kernels compute and that has no effect becomes a
**select of its branches**: every branch is computed and ``select_n`` of the (clamped) index picks
each output, so the step needs no read-back (a branch's value where it is not taken, NaN or
infinity included, is discarded by the select).

The unrolled body is traced afresh (:func:`.program.trace_to_program`): an inner step reads
``xs[i]`` as a ``slice`` and a ``reshape``, and the stacked ``ys`` are ``broadcast_in_dim`` and
``concatenate`` of the steps' outputs, all of which the kernels fuse. The inner steps' kernels
are the same WGSL, so they share one compiled pipeline (the cache is by source hash); elementwise
inner steps fuse across steps into one kernel. Unrolling is bounded by :data:`MAX_EQNS` (the
equations of the unrolled body): a longer nest is not a device loop (an error naming it, or the
host with ``host_fallback=True``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ember._src.gpu import ops, segments
from ember._src.prims.elementwise import select_n_p
from ember._src.prims.movement import broadcast_in_dim_p, concatenate_p, reshape_p, slice_p
from ember._src.program import Eqn, Literal, Program, eqn_effectful, trace_to_program

MAX_EQNS = 4096
"""The most equations an unrolled scan body may hold."""


def static_scan(e: Eqn) -> bool:
    """Whether ``e`` is a ``scan`` with a static trip count."""
    return e.prim.name == "scan" and isinstance(e.params["length"], int)


def selectable_cond(e: Eqn) -> bool:
    """Whether ``e`` is a ``cond`` without effects (its branches are checked by :func:`_size`)."""
    return e.prim.name == "cond" and not eqn_effectful(e)


def _size(p: Program) -> int | None:
    """The equations of ``p`` with its static scans unrolled and its conds turned into selects
    (inlined calls counted by their equations), or None when it holds a primitive the device
    kernels do not compute."""
    n = 0
    for e in p.eqns:
        param = ops.INLINED.get(e.prim.name)
        if selectable_cond(e):
            inner = [_size(b) for b in e.params["branches"]]
            if any(k is None for k in inner):
                return None
            n += sum(inner) + 2 * len(e.outvars)  # (the index broadcast and the select per output)
        elif static_scan(e):
            inner = _size(e.params["body"])
            if inner is None or e.params["length"] == 0:
                return None
            n += e.params["length"] * (inner + 4)  # (the slices of xs and the stacking of ys)
        elif param is not None:
            sub = e.params[param]
            inner = _size(getattr(sub, "program", sub))
            if inner is None:
                return None
            n += inner
        elif segments.device_computes(e):
            n += 1
        else:
            return None
        if n > MAX_EQNS:
            return None
    return n


def has_nested(p: Program) -> bool:
    """Whether ``p``'s equations (inlined calls included) hold a static ``scan`` or a ``cond``."""
    for e in p.eqns:
        param = ops.INLINED.get(e.prim.name)
        if static_scan(e) or selectable_cond(e):
            return True
        if param is not None:
            sub = e.params[param]
            if has_nested(getattr(sub, "program", sub)):
                return True
    return False


def unrolled_body(body: Program) -> Program | None:
    """``body`` (a scan body) with its nested static scans unrolled and its conds selects,
    ``body`` itself when it has neither, or None when that is not possible: a primitive without a
    device kernel, or more than :data:`MAX_EQNS` equations."""
    if not has_nested(body):
        return body
    if _size(body) is None:
        return None
    prog, _ = trace_to_program(lambda *args: _eval(body, body.consts, args), body.in_avals)
    return prog


def _eval(p: Program, consts: Sequence[Any], args: Sequence[Any]) -> list[Any]:
    """Evaluate ``p`` by binding its primitives (under the tracing of :func:`unrolled_body`),
    unrolling static scans, selecting between cond branches and inlining the calls that hold
    them."""
    env: dict[Any, Any] = {}

    def read(a: Any) -> Any:
        return a.val if isinstance(a, Literal) else env[a]

    env.update(zip(p.constvars, consts))
    env.update(zip(p.invars, args))
    for e in p.eqns:
        ins = [read(a) for a in e.inputs]
        param = ops.INLINED.get(e.prim.name)
        if static_scan(e):
            outs = _unroll(e, ins)
        elif selectable_cond(e):
            outs = _select(e, ins)
        elif param is not None and has_nested(getattr(e.params[param], "program", e.params[param])):
            sub = getattr(e.params[param], "program", e.params[param])
            outs = _eval(sub, sub.consts, ins)
        else:
            outs = e.prim.bind(*ins, **e.params)
            if not e.prim.multiple_results:
                outs = [outs]
        env.update(zip(e.outvars, outs))
    return [read(a) for a in p.outvars]


def _unroll(e: Eqn, ins: list[Any]) -> list[Any]:
    """The outputs of the static scan ``e`` on ``ins``, one step after another."""
    ps = e.params
    body, n, nc, nk = ps["body"], ps["length"], ps["num_consts"], ps["num_carry"]
    consts, carry, xs = ins[:nc], list(ins[nc:nc + nk]), ins[nc + nk:]
    x_avals = [v.aval for v in e.inputs[nc + nk:]]
    y_avals = [v.aval for v in e.outvars[nk:]]
    ys: list[list[Any]] = [[None] * n for _ in y_avals]
    for step in range(n):
        i = n - 1 - step if ps["reverse"] else step
        x_i = [reshape_p.bind(slice_p.bind(x, start_indices=(i,) + (0,) * (len(a.shape) - 1),
                                           limit_indices=(i + 1,) + tuple(a.shape[1:]), strides=None),
                              new_sizes=tuple(a.shape[1:])) for x, a in zip(xs, x_avals)]
        outs = _eval(body, body.consts, [*consts, *carry, *x_i])
        carry = list(outs[:nk])
        for j, y in enumerate(outs[nk:]):
            ys[j][i] = y
    stacked = []
    for parts, a in zip(ys, y_avals):
        rank = len(a.shape)
        rows = [broadcast_in_dim_p.bind(y, shape=(1,) + tuple(a.shape[1:]),
                                        broadcast_dimensions=tuple(range(1, rank))) for y in parts]
        stacked.append(concatenate_p.bind(*rows, dimension=0) if n > 1 else rows[0])
    return [*carry, *stacked]


def _select(e: Eqn, ins: list[Any]) -> list[Any]:
    """The outputs of the ``cond`` ``e`` on ``ins``: every branch computed, each output picked by
    ``select_n`` of the index (which clamps it into range, as ``cond`` does)."""
    index, operands = ins[0], ins[1:]
    outs = [_eval(b, b.consts, operands) for b in e.params["branches"]]
    if len(outs) == 1:
        return outs[0]
    picked = []
    for j, v in enumerate(e.outvars):
        shape = tuple(v.aval.shape)
        which = broadcast_in_dim_p.bind(index, shape=shape, broadcast_dimensions=()) if shape else index
        picked.append(select_n_p.bind(which, *[o[j] for o in outs]))
    return picked
