"""The schedule of a device ``scan``, shared by the WebGPU and CUDA runtimes.

A static ``scan`` whose body the kernels compute runs as the body's kernels issued once per step
with no host work between steps (WebGPU: one command buffer; CUDA: one stream, captured into a
graph). Everything about that loop that does not depend on the device API is here: which buffer
each body buffer is in either **parity** of the ping-pong carry pair, which carries the body's
kernels write straight into the other set and which must be copied, the byte offsets of the
``xs``/``ys`` steps, the step order of a reverse scan, and the buffer sizes. A runtime turns the
:class:`ScanPlan` into device work: it allocates :attr:`ScanPlan.buffers`, resolves the other
slots to its operands, and runs :attr:`ScanPlan.actions` in order (:func:`replay`) with its own
buffer copy and kernel launch.

Slots (where a value lives) are tuples: ``("const", j)``, ``("init", j)``, ``("xs", j)`` the scan's
operands; ``("body_const", i)`` the body's captured constant in buffer ``i``; ``("carry", s, j)``
carry ``j`` of ping-pong set ``s`` (0: A, 1: B); ``("x", j)`` the body's input buffer of one step of
``xs[j]``; ``("temp", i)`` the body's intermediate buffer ``i`` (shared by both parities);
``("literal", j)`` a buffer holding body output ``j``, a literal; ``("ys", j)`` stacked output ``j``.

Actions: ``("copy", src, src_offset, dst, dst_offset, nbytes)`` and ``("body", parity)`` (the
body's kernels with the buffers of :meth:`ScanPlan.binding` of that parity).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember._src import shapes as sh
from ember._src.gpu import kernels
from ember._src.program import Eqn

Slot = tuple
NBytes = Callable[[int, np.dtype], int]


@dataclass
class ScanPlan:
    """The device work of one scan under one axis binding (see the module docstring)."""

    buffers: dict[Slot, int]  # slots the runtime allocates, and their bytes
    bindings: list[dict[int, Slot]]  # per parity: the body's buffer index -> its slot
    actions: list[tuple]
    outputs: list[Slot]  # the scan equation's outputs: the final carries, then the ys
    literals: dict[int, tuple[Any, int, np.dtype]] = field(default_factory=dict)  # j -> (value, count, dtype)
    body_consts: dict[int, np.ndarray] = field(default_factory=dict)  # buffer index -> value

    def binding(self, parity: int) -> dict[int, Slot]:
        """The slot of every body buffer on steps of ``parity``."""
        return self.bindings[parity]


class ScanSchedule:
    """The loop schedule of a ``scan`` equation ``eqn`` whose body is scheduled as ``body`` (the
    body's kernels, :func:`.kernels.schedule`). :meth:`plan` gives its device work for a binding."""

    def __init__(self, eqn: Eqn, body: kernels.Schedule):
        p = eqn.params
        self.eqn, self.body = eqn, body
        self.length, self.reverse = int(p["length"]), bool(p["reverse"])
        self.nc, self.nk = p["num_consts"], p["num_carry"]
        self.x_avals = [x.aval for x in eqn.inputs[self.nc + self.nk:]]
        self.y_avals = [v.aval for v in eqn.outvars[self.nk:]]
        self.body_out_avals = p["body"].out_avals
        # carries the body's kernels write into a buffer of their own: ping-pong, never copied
        made = {k.out.index for k in body.kernels}
        outs = body.outputs[:self.nk]
        self.pingpong = [kind == "buf" and v in made and outs.count((kind, v)) == 1 for kind, v in outs]
        self._plans: dict[tuple, ScanPlan] = {}

    def order(self) -> list[tuple[int, int]]:
        """``(i, parity)`` of every step in the order they run: ``i`` indexes ``xs``/``ys``."""
        n = self.length
        return [(n - 1 - s if self.reverse else s, s % 2) for s in range(n)]

    @property
    def final_parity(self) -> int:
        """The carry set holding the results after the last step."""
        return self.length % 2

    def plan(self, env: dict, nbytes: NBytes) -> ScanPlan:
        """The device work under the axis binding ``env``; ``nbytes(count, dtype)`` is the runtime's
        storage size of ``count`` elements. Cached per binding."""
        key = tuple(sorted((k, int(v)) for k, v in env.items()))
        if key not in self._plans:
            if len(self._plans) >= 64:
                self._plans.clear()
            self._plans[key] = self._plan(env, nbytes)
        return self._plans[key]

    def _plan(self, env: dict, nbytes: NBytes) -> ScanPlan:
        body, nc, nk = self.body, self.nc, self.nk
        sizes = body.sizes(env)
        dts = [b.dtype for b in body.buffers]

        def count(shape: Any) -> int:
            return int(np.prod([d if isinstance(d, int) else sh.evaluate(d, env) for d in shape],
                               dtype=np.int64))

        alloc = [nbytes(max(s, 1), dts[i]) for i, s in enumerate(sizes)]  # (at least one element)
        carry_in = body.inputs[nc:nc + nk]
        carry_used = [nbytes(sizes[i], dts[i]) for i in carry_in]  # 0: an empty carry
        x_step = [nbytes(sizes[i], dts[i]) for i in body.inputs[nc + nk:]]
        y_step = [nbytes(count(a.shape[1:]), a.dtype) for a in self.y_avals]
        buffers: dict[Slot, int] = {}
        for s in (0, 1):
            for j, i in enumerate(carry_in):
                buffers["carry", s, j] = alloc[i]
        for j, i in enumerate(body.inputs[nc + nk:]):
            buffers["x", j] = alloc[i]
        for j, a in enumerate(self.y_avals):
            buffers["ys", j] = nbytes(max(count(a.shape), 1), a.dtype)
        literals = {}
        for j, (kind, v) in enumerate(body.outputs):
            if kind == "literal":
                a = self.body_out_avals[j]
                literals[j] = (v, count(a.shape), np.dtype(a.dtype))
                buffers["literal", j] = nbytes(max(count(a.shape), 1), a.dtype)
        body_consts = {i: np.asarray(val, dts[i]) for i, val in body.consts}
        # each parity's buffers: inputs in their slots, ping-pong carry outputs in the other set
        common: dict[int, Slot] = {i: ("body_const", i) for i in body_consts}
        common.update({i: ("const", j) for j, i in enumerate(body.inputs[:nc])})
        common.update({i: ("x", j) for j, i in enumerate(body.inputs[nc + nk:])})
        inputs = set(body.inputs)
        for b in body.buffers:
            if b.index not in common and b.index not in inputs:
                common[b.index] = ("temp", b.index)
        bindings = []
        for par in (0, 1):
            m = dict(common)
            m.update({i: ("carry", par, j) for j, i in enumerate(carry_in)})
            for j, (_, v) in enumerate(body.outputs[:nk]):
                if self.pingpong[j]:
                    m[v] = ("carry", 1 - par, j)
            bindings.append(m)
        for slot in {s for m in bindings for s in m.values() if s[0] == "temp"}:
            buffers[slot] = alloc[slot[1]]

        def source(j: int, par: int) -> Slot:
            kind, v = body.outputs[j]
            if kind == "buf":
                return bindings[par][v]
            if kind == "input":
                return bindings[par][body.inputs[v]]
            return ("literal", j)

        actions: list[tuple] = [("copy", ("init", j), 0, ("carry", 0, j), 0, used)
                                for j, used in enumerate(carry_used) if used]
        for i, par in self.order():
            actions += [("copy", ("xs", j), i * s, ("x", j), 0, s) for j, s in enumerate(x_step) if s]
            actions.append(("body", par))
            actions += [("copy", source(j, par), 0, ("carry", 1 - par, j), 0, carry_used[j])
                        for j in range(nk) if not self.pingpong[j] and carry_used[j]]
            actions += [("copy", source(nk + j, par), 0, ("ys", j), i * s, s)
                        for j, s in enumerate(y_step) if s]
        final = self.final_parity
        outputs = [("carry", final, j) for j in range(nk)] + [("ys", j) for j in range(len(self.y_avals))]
        return ScanPlan(buffers, bindings, actions, outputs, literals, body_consts)


def replay(plan: ScanPlan, resolve: Callable[[Slot], Any], copy: Callable[[Any, int, Any, int, int], None],
           body: Callable[[int], None]) -> None:
    """Runs ``plan``'s actions: ``copy(src, src_offset, dst, dst_offset, nbytes)`` with the buffers
    ``resolve(slot)`` gives, and ``body(parity)`` for each step's kernels."""
    for a in plan.actions:
        if a[0] == "body":
            body(a[1])
        else:
            _, src, so, dst, do, n = a
            copy(resolve(src), so, resolve(dst), do, n)


def describe(sched: ScanSchedule, how: str) -> str:
    """The first line of a scan's ``as_text()``: its steps, ``how`` they run, its body's kernels."""
    return f"// scan: {sched.length} steps {how} ({len(sched.body.kernels)} body kernels per step)\n"
