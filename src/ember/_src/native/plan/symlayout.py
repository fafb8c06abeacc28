"""Per-binding arena layout of a symbolic plan whose native loops have symbolic shapes.

Under named dynamic axes (:mod:`.specialize`) sizes are ``DimExpr`` polynomials and arena offsets
are placed for each binding. A native ``scan``/``while``/``cond`` step (:mod:`.loops`) adds a
level: its workspace buffer holds the large carries' two slots each and, after them, the arena of
its bodies, whose own intermediates (and nested loops' workspaces) are placed inside it. Every
such offset is a ``dims`` entry read by the generated C, numbered here once per symbolic program:

* each arena buffer of the parent plan and of every body plan: ``(arena + dims[k])``;
* each carry slot of a loop with arena carries: ``ws_ + dims[k]``;
* the offset of a loop's body arena inside its workspace: ``ws_ + dims[k]``.

:class:`ArenaLayout` assigns those slots (writing the C text into the buffers' ``offset`` and the
lowerings' ``slot_offsets``/``arena_offset``) and lists the size expressions a binding needs;
:meth:`ArenaLayout.place` then lays a binding out bottom-up: each body plan first fit (the same
placement as the static planner's), a loop's workspace = its carry slots + the largest of its
bodies' peaks (they never run at the same time), then the enclosing plan with that workspace
size. Only the offsets change between bindings; the C is compiled once.
"""

from __future__ import annotations

from typing import Any

from ember._src.native.plan.planner import ALIGN, GRADS, MemoryPlan, first_fit
from ember._src.native.plan.scratch import LOOP_WORKSPACE
from ember._src.native.scheduling.schedule import Schedule


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class _Slots:
    """Allocates ``dims`` indices (after the axis values)."""

    def __init__(self, first: int):
        self.n = first

    def take(self) -> int:
        self.n += 1
        return self.n - 1


class _PlanLayout:
    """One plan's arena buffers: each a size expression, or a nested loop's workspace."""

    def __init__(self, sched: Schedule, plan: MemoryPlan, slots: _Slots, exprs: list[Any]):
        loops = {id(b): sched.steps[s].sub for (s, key), b in plan.scratch.items() if key == LOOP_WORKSPACE}
        arena = [b for b in plan.buffers if b.in_arena]
        self.starts = [b.start for b in arena]
        self.ends = [b.end for b in arena]
        self.grads = [b.cls == GRADS for b in arena]  # placed in a region after the others
        self.slots: list[int] = []
        self.items: list[Any] = []  # index into exprs, or a _LoopLayout
        for b in arena:
            k = slots.take()
            b.offset = f"dims[{k}]"
            self.slots.append(k)
            low = loops.get(id(b))
            if low is not None:
                self.items.append(_LoopLayout(low, slots, exprs))
            else:
                self.items.append(len(exprs))
                exprs.append(b.nbytes)

    def place(self, vals: tuple, dims: list[int]) -> int:
        sizes = [it.place(vals, dims) if isinstance(it, _LoopLayout) else vals[it] for it in self.items]
        peak = 0
        for region in (False, True):  # the GRADS region after the others (as the static planner)
            idx = [i for i, g in enumerate(self.grads) if g == region]
            offsets, top = first_fit([sizes[i] for i in idx], [self.starts[i] for i in idx],
                                     [self.ends[i] for i in idx])
            for i, off in zip(idx, offsets):
                dims[self.slots[i]] = peak + off
            peak += top
        return peak


class _LoopLayout:
    """A native loop's workspace: carry slots (arena carries), then its bodies' shared arena."""

    def __init__(self, low: Any, slots: _Slots, exprs: list[Any]):
        self.carries: list[tuple[int, int, int]] = []  # (expr index, slot A, slot B)
        low.slot_offsets = []
        if not low.small_carries:
            for n in low.carry_bytes:
                a, b = slots.take(), slots.take()
                self.carries.append((len(exprs), a, b))
                exprs.append(n)
                low.slot_offsets.append((f"dims[{a}]", f"dims[{b}]"))
        self.arena_slot = slots.take()
        low.arena_offset = f"dims[{self.arena_slot}]"
        self.bodies = [_PlanLayout(b.schedule, b.plan, slots, exprs) for b in low.bodies]

    def place(self, vals: tuple, dims: list[int]) -> int:
        off = 0
        for idx, a, b in self.carries:
            n = _align(vals[idx])
            dims[a], dims[b] = off, off + n
            off += 2 * n
        dims[self.arena_slot] = off
        return off + max((body.place(vals, dims) for body in self.bodies), default=0)


class ArenaLayout:
    """The ``dims`` slots of a symbolic schedule (the parent plan and every native loop in it,
    nested ones included) and the sizes a binding needs to place them.

    ``exprs``: the byte sizes (``int`` or ``DimExpr``) to evaluate per binding, in the order
    :meth:`place` reads them; ``n_slots``: how many ``dims`` entries follow the axis values."""

    def __init__(self, sched: Schedule, plan: MemoryPlan, n_axes: int):
        slots = _Slots(n_axes)
        self.exprs: list[Any] = []
        self._root = _PlanLayout(sched, plan, slots, self.exprs)
        self.n_axes = n_axes
        self.n_slots = slots.n - n_axes

    def root_lifetimes(self) -> tuple[list[int], list[int]]:
        """First and last step of each of the parent plan's arena buffers (its slots come first)."""
        return list(self._root.starts), list(self._root.ends)

    def place(self, vals: tuple) -> tuple[list[int], int]:
        """(the ``dims`` entries after the axis values, the arena peak) for a binding whose
        evaluated ``exprs`` are ``vals``."""
        dims = [0] * (self.n_axes + self.n_slots)
        peak = self._root.place(vals, dims)
        return dims[self.n_axes:], peak

    def check(self, vals: tuple) -> None:
        """Invariants of one binding's placement at every level: aligned offsets, no two
        simultaneously live buffers of one plan overlap, each within its region (raises
        ``ValidationError``)."""
        from ember.errors import ValidationError

        dims = [0] * (self.n_axes + self.n_slots)
        self._root.place(vals, dims)

        def walk(node: _PlanLayout, region: int) -> None:
            sizes = [it.place(vals, list(dims)) if isinstance(it, _LoopLayout) else vals[it]
                     for it in node.items]
            offs = [dims[k] for k in node.slots]
            for i, (o, n) in enumerate(zip(offs, sizes)):
                if n and (o % ALIGN or o + n > region):
                    raise ValidationError(f"symlayout: buffer {i} at {o} (+{n}) outside its region {region}")
                for j in range(i):
                    if (n and sizes[j] and node.starts[i] <= node.ends[j] and node.starts[j] <= node.ends[i]
                            and o < offs[j] + sizes[j] and offs[j] < o + n):
                        raise ValidationError(f"symlayout: live buffers {j} and {i} overlap")
            for it, n in zip(node.items, sizes):
                if isinstance(it, _LoopLayout):
                    base = dims[it.arena_slot]
                    for _, a, b in it.carries:
                        if not (dims[a] < dims[b] <= base):
                            raise ValidationError("symlayout: carry slots out of order")
                    for body in it.bodies:
                        walk(body, n - base)

        walk(self._root, self._root.place(vals, list(dims)))
