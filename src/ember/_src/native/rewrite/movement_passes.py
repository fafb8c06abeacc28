"""Movement passes of the native backend (registered in :data:`.passes.PASSES`).

* ``refine_transposes``: ``transpose(reshape(x))`` where the reshape both merges and splits axes
  (``[L, B, H*D] -> [L, B*H, D]``, then the heads moved to the front: how ``nn.MultiheadAttention``'s
  export lays out its heads) becomes ``reshape(transpose(reshape(x)))`` over the common refinement
  of the two shapes (``[L, B, H, D]``), so the copy kernel that runs the transpose indexes ``x``
  linearly instead of through a division and remainder by a merged (possibly symbolic) size on
  every element. Sizes are ints or one-term symbolic products; the pass leaves the pair unchanged
  when the two shapes have no common refinement along exact divisions.
"""

from __future__ import annotations

from typing import Any

from ember._src import shapes as sh
from ember._src.native.base import prim_refs as pr
from ember._src.native.rewrite.passes import Builder, dce, register
from ember._src.prims import movement as mv
from ember._src.program import Program, Var


def _exact_div(a: Any, b: Any) -> Any:
    """``a / b`` when ``b`` divides ``a`` exactly (ints, or one-term symbolic products), else None."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b if b and a % b == 0 else None
    q = sh.floordiv(a, b)
    return q if q * b == a and not (isinstance(q, int) and q == 0) else None


def refinement(src: tuple, dst: tuple) -> tuple[list, list[list[int]], list[list[int]]] | None:
    """The common refinement of two shapes of one size: ``(atoms, src_groups, dst_groups)`` with
    ``atoms`` the refined sizes (outermost first) and each dim's group the indices of the atoms it
    is the product of (empty for a size-1 dim); None when an inner dim of one shape is neither a
    multiple nor a divisor of the other's remaining size."""
    def dims(shape: tuple) -> list[int]:
        return [i for i, d in enumerate(shape) if not (isinstance(d, int) and d == 1)]
    ia, ib = dims(src), dims(dst)
    atoms: list = []
    ga: dict[int, list[int]] = {i: [] for i in range(len(src))}
    gb: dict[int, list[int]] = {i: [] for i in range(len(dst))}
    pa, pb = len(ia) - 1, len(ib) - 1
    a = src[ia[pa]] if pa >= 0 else None
    b = dst[ib[pb]] if pb >= 0 else None
    while pa >= 0 and pb >= 0:
        if a == b:
            atom, a, b = a, 1, 1
        elif (q := _exact_div(a, b)) is not None:
            atom, a, b = b, q, 1
        elif (q := _exact_div(b, a)) is not None:
            atom, a, b = a, 1, q
        else:
            return None
        ga[ia[pa]].append(len(atoms))
        gb[ib[pb]].append(len(atoms))
        atoms.append(atom)
        if isinstance(a, int) and a == 1:
            pa -= 1
            a = src[ia[pa]] if pa >= 0 else None
        if isinstance(b, int) and b == 1:
            pb -= 1
            b = dst[ib[pb]] if pb >= 0 else None
    if pa >= 0 or pb >= 0:
        return None
    n = len(atoms)  # the atoms were found innermost first: number them outermost first
    flip = lambda g: sorted(n - 1 - i for i in g)  # noqa: E731
    return (atoms[::-1], [flip(ga[i]) for i in range(len(src))], [flip(gb[i]) for i in range(len(dst))])


@register
def refine_transposes(p: Program) -> Program:
    """``transpose(reshape(x))`` over the shapes' common refinement (module docstring)."""
    b = Builder(p)
    changed = False
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        src = b.prod.get(ins[0].id) if e.prim is pr.TRANSPOSE and isinstance(ins[0], Var) else None
        r = None
        if src is not None and src.prim is pr.RESHAPE and isinstance(src.inputs[0], Var):
            x = src.inputs[0]
            mid = tuple(ins[0].aval.shape)
            r = refinement(tuple(x.aval.shape), mid)
        if r is None or len(r[0]) <= len([d for d in mid if not (isinstance(d, int) and d == 1)]):
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        atoms, _, groups = r
        perm = [i for d in e.params["permutation"] for i in groups[d]]
        changed = True
        fine = b.reshape(x, tuple(atoms))
        moved = b.emit1(mv.transpose_p, [fine], {"permutation": tuple(perm)})
        b.emit(mv.reshape_p, [moved], {"new_sizes": tuple(e.outvars[0].aval.shape)}, e.outvars)
    return dce(b.finish()) if changed else p
