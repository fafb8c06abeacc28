"""Split loops: a map kernel that reads concatenates runs as one loop nest per piece.

Read through index expressions, a concatenate evaluates every piece at every element and selects
one (a select chain), so an im2col tap stack of ``k1 x k2`` pieces costs ``k1 * k2`` loads per
element. When the concatenate axis index is affine in one loop variable, the domain is instead
cut where the pieces change: each box of the domain is built as its own kernel (with the loop
ranges of the box, the concatenate resolves to one piece statically, as do the pads and clamps
around it) writing its part of the outputs. Boxes are cut again for further concatenates (a tap
stack over two spatial axes), up to :data:`MAX_PARTS` boxes.

The boxes share the loops over the dims before the first cut (``n_outer`` of each part): the
generated code opens those loops once and runs the parts one after another inside, so the
writes of one row stay together (see ``kernels.KernelEmitter.emit_split``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember._src.native.scheduling.kernel import KernelIR, Unfusable, build_kernel
from ember._src.program import Eqn, Var

MAX_PARTS = 256  # beyond this many boxes the remaining concatenates stay select chains
ENABLED = True  # False: kernels keep their select chains (for ablation benchmarks)

Box = tuple[tuple[int, int], ...]  # per dim: (global start, extent)


def _cut(box: Box, ir: KernelIR) -> list[Box] | None:
    """``box`` cut at the cut points ``ir`` recorded on its first cut variable (None: no cut)."""
    for k, dv in enumerate(ir.dvars):
        start, n = box[k]
        if not isinstance(n, int):  # symbolic extents are never cut
            continue
        pts = sorted(c for c in ir.cuts.get(dv, ()) if 0 < c < n)
        if not pts:
            continue
        out = []
        for a, b in zip([0, *pts], [*pts, n]):
            out.append(box[:k] + ((start + a, b - a),) + box[k + 1:])
        return out
    return None


def split_parts(eqns: Sequence[Eqn], domain: tuple[int, ...], roots: Sequence[Var], max_inputs: int,
                ir: KernelIR) -> list[KernelIR] | None:
    """The per-box map kernels computing ``roots`` over ``domain`` (the unsplit kernel ``ir``
    recorded the cut points), ordered as the output is laid out; None when no cut applies or a
    box cannot be built."""
    if not ENABLED:
        return None
    full: Box = tuple((0, n) for n in domain)
    first = _cut(full, ir)
    if first is None or len(first) > MAX_PARTS:
        return None
    done: list[tuple[Box, KernelIR]] = []
    todo = list(first)
    while todo:
        box = todo.pop()
        try:
            part = build_kernel(eqns, tuple(n for _, n in box), 0, roots, max_inputs,
                                origin=tuple(s for s, _ in box))
        except Unfusable:
            return None
        sub = _cut(box, part)
        if sub is None or len(done) + len(todo) + len(sub) + 1 > MAX_PARTS:
            if part.needs_split:  # still recomputes expensive work and cannot be cut further
                return None
            done.append((box, part))
        else:
            todo.extend(sub)
    # shared outer loops: the dims before the first one any box cuts
    n_outer = min(k for box, _ in done for k, (s, n) in enumerate(box) if (s, n) != (0, domain[k]))
    # an expensive value evaluated by several boxes must not add up to more than its elements
    counts: dict[int, list[int]] = {}
    for _, part in done:
        for vid, (count, size) in part.evaluations.items():
            counts.setdefault(vid, [0, size])[0] += count
    if any(c > size for c, size in counts.values()):
        return None
    parts = []
    for box, _ in sorted(done, key=lambda bp: tuple(s for s, _ in bp[0])):
        try:
            parts.append(build_kernel(eqns, tuple(n for _, n in box), n_outer, roots, max_inputs,
                                      origin=tuple(s for s, _ in box)))
        except Unfusable:
            return None
    return parts
