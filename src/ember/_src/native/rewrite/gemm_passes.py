"""The passes that shape matrix products before scheduling (registered in :mod:`.passes`'s list):
``absorb_transposes``, ``lower_matmul`` (``dot_general`` -> ``native_gemm`` over matrix views),
``absorb_output_transpose``, ``absorb_scale``, ``absorb_bias`` and ``gemm_views`` (strided operand
and result views); each is described in :mod:`.passes`'s docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ember._src import dtypes as dt
from ember._src.core import ShapedArray
from ember._src.native import opinfo
from ember._src.native.base import prim_refs as pr
from ember._src.native.opinfo import OpCategory
from ember._src.native.rewrite.analysis import consumers, producers, use_counts
from ember._src.native.rewrite.fused import gemm_p
from ember._src.native.rewrite.fused import layouts as fused_layouts
from ember._src.native.rewrite.passes import Builder, dce, lit, reemit, register, splat_value
from ember._src.prims import elementwise as ew
from ember._src.prims import movement as mv
from ember._src.program import Atom, Eqn, Literal, Program, Var


def _unbatched(e: Eqn, ins: list[Atom], prod: dict[int, Eqn]) -> tuple | None:
    """``(x, y, dimension_numbers, perm)`` of the product without batch dims that ``e`` equals when
    one operand is a ``broadcast_in_dim`` adding exactly the batch axes (perm: the transpose of the
    new product's result that gives ``e``'s, None when it is the identity); else None."""
    (xc, yc), (xb, yb) = e.params["dimension_numbers"]
    if not xb:
        return None
    for side in (1, 0):
        a = ins[side]
        pe = prod.get(a.id) if isinstance(a, Var) else None
        if pe is None or pe.prim is not pr.BROADCAST_IN_DIM or isinstance(pe.inputs[0], Literal):
            continue
        bt, ct = (yb, yc) if side == 1 else (xb, xc)
        dims = tuple(pe.params["broadcast_dimensions"])
        rank = len(a.aval.shape)
        src = pe.inputs[0]
        if set(range(rank)) - set(dims) != set(bt) or list(dims) != sorted(dims) \
                or any(src.aval.shape[k] != a.aval.shape[d] for k, d in enumerate(dims)):
            continue
        pos = {d: k for k, d in enumerate(dims)}  # the operand's axis -> the source's
        sc = tuple(pos[d] for d in ct)
        oc, ob = (xc, xb) if side == 1 else (yc, yb)
        other = ins[1 - side]
        ofree = [i for i in range(len(other.aval.shape)) if i not in oc]  # batch axes now free
        sfree = [i for i in range(len(src.aval.shape)) if i not in sc]
        # axis labels: ("b", k) the k-th batch axis, ("o", i) / ("s", i) the free axes
        olab = [("b", list(ob).index(i)) if i in ob else ("o", i) for i in ofree]
        slab = [("s", i) for i in sfree]
        new_lab = olab + slab if side == 1 else slab + olab
        old_lab = [("b", k) for k in range(len(ob))] + [t for t in olab if t[0] == "o"]
        old_lab = old_lab + slab if side == 1 else [("b", k) for k in range(len(ob))] + slab + \
            [t for t in olab if t[0] == "o"]
        perm = tuple(new_lab.index(t) for t in old_lab)
        perm_or_none = None if perm == tuple(range(len(perm))) else perm
        if side == 1:
            return other, src, ((tuple(oc), sc), ((), ())), perm_or_none
        return src, other, ((sc, tuple(oc)), ((), ())), perm_or_none
    return None


@register
def unbatch_broadcast_dot(p: Program) -> Program:
    """A batched ``dot_general`` whose operand is a ``broadcast_in_dim`` adding exactly the batch
    axes (one matrix shared by every batch: a weight, as ``torch.bmm`` of an expanded weight in
    ``nn.MultiheadAttention``'s exported in-projection) becomes one product of the broadcast's
    source with the batch axes as free rows, then a transpose when the axis order differs: one large
    GEMM instead of a batch of small ones, and the weight is read as is (prepacked when constant)."""
    if not any(e.prim is pr.DOT_GENERAL and e.params["dimension_numbers"][1][0] for e in p.eqns):
        return p
    b = Builder(p)
    changed = False
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        r = _unbatched(e, ins, b.prod) if e.prim is pr.DOT_GENERAL else None
        if r is None:
            b.emit(e.prim, ins, e.params, e.outvars)
            continue
        x, y, dn, perm = r
        changed = True
        if perm is None:
            b.emit(e.prim, [x, y], dict(e.params, dimension_numbers=dn), e.outvars)
            continue
        out = b.emit1(e.prim, [x, y], dict(e.params, dimension_numbers=dn))
        b.emit(mv.transpose_p, [out], {"permutation": perm}, e.outvars)
    return dce(b.finish()) if changed else p


@register
def absorb_transposes(p: Program) -> Program:
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        params = e.params
        if e.prim is pr.DOT_GENERAL:
            (xc, yc), (xb, yb) = params["dimension_numbers"]
            new_ins = list(ins)
            for side in (0, 1):
                a = ins[side]
                pe = b.prod.get(a.id) if isinstance(a, Var) else None
                if pe is None or pe.prim is not pr.TRANSPOSE:
                    continue
                perm = pe.params["permutation"]
                c, bt = (xc, xb) if side == 0 else (yc, yb)
                free = [i for i in range(len(perm)) if i not in c and i not in bt]
                mapped = [perm[i] for i in free]
                if mapped != sorted(mapped):
                    continue  # the output's free dims would come out permuted
                c2, b2 = tuple(perm[i] for i in c), tuple(perm[i] for i in bt)
                if side == 0:
                    xc, xb = c2, b2
                else:
                    yc, yb = c2, b2
                new_ins[side] = pe.inputs[0]
            if new_ins != ins:
                params = dict(params, dimension_numbers=((tuple(xc), tuple(yc)), (tuple(xb), tuple(yb))))
                ins = new_ins
        b.emit(e.prim, ins, params, e.outvars)
    return b.finish()


def _operand_layout(ndim: int, batch: Sequence[int], contract: Sequence[int]) -> tuple[list[int], list[int]]:
    free = [i for i in range(ndim) if i not in contract and i not in batch]
    return list(batch), free


opinfo.register("dot_general", OpCategory.CONTRACTION, "BLAS ?gemm/?gemv via passes.lower_matmul")


@register
def lower_matmul(p: Program) -> Program:
    b = Builder(p)
    for e in p.eqns:
        ins = [b.read(a) for a in e.inputs]
        if e.prim is pr.DOT_GENERAL:
            r = _lower_dot(b, e, ins)
            if r is not None:
                b.sub[e.outvars[0].id] = r
                continue
        b.emit(e.prim, ins, e.params, e.outvars)
    return b.finish()


def _lower_dot(b: Builder, e: Eqn, ins: list[Atom]) -> Atom | None:
    x, y = ins
    if isinstance(x, Literal) or isinstance(y, Literal):
        return None
    (xc, yc), (xb, yb) = e.params["dimension_numbers"]
    pet = e.params.get("preferred_element_type")
    out_aval = e.outvars[0].aval
    if dt.is_low_precision(x.aval.dtype):
        return None
    if pet is not None and np.dtype(pet) != x.aval.dtype:
        if dt.is_inexact(np.dtype(pet)) != dt.is_inexact(x.aval.dtype):
            x = b.emit1(ew.convert_element_type_p, [x], {"new_dtype": np.dtype(pet), "weak_type": False})
            y = b.emit1(ew.convert_element_type_p, [y], {"new_dtype": np.dtype(pet), "weak_type": False})
        else:
            r = _lower_dot(b, Eqn(e.prim, [x, y], dict(e.params, preferred_element_type=None),
                                  [Var(ShapedArray(out_aval.shape, x.aval.dtype))]), [x, y])
            if r is None:
                return None
            return b.emit1(ew.convert_element_type_p, [r], {"new_dtype": np.dtype(pet), "weak_type": False})
    xs, ys = x.aval.shape, y.aval.shape
    _, xf = _operand_layout(len(xs), xb, xc)
    _, yf = _operand_layout(len(ys), yb, yc)
    best = None
    for order in (np.argsort(xc, kind="stable"), np.argsort(yc, kind="stable")):
        xc2 = [xc[i] for i in order]
        yc2 = [yc[i] for i in order]
        for ta in (False, True):
            pa = list(xb) + (xc2 + xf if ta else xf + xc2)
            for tb in (False, True):
                pb = list(yb) + (yf + yc2 if tb else yc2 + yf)
                cost = (pa != sorted(pa)) + (pb != sorted(pb))
                if best is None or cost < best[0]:
                    best = (cost, ta, tb, pa, pb, xc2, yc2)
    _, ta, tb, pa, pb, xc2, yc2 = best
    if pa != list(range(len(xs))):  # copy into [batch, M, K] with the chosen contraction order
        ta = False
        x = b.emit1(mv.transpose_p, [x], {"permutation": tuple(list(xb) + xf + xc2)})
    if pb != list(range(len(ys))):
        tb = False
        y = b.emit1(mv.transpose_p, [y], {"permutation": tuple(list(yb) + yc2 + yf)})
    prod_ = lambda dims, shape: math.prod(shape[i] for i in dims)  # noqa: E731 - dims may be symbolic
    bsz, m, k = prod_(xb, xs), prod_(xf, xs), prod_(xc, xs)
    n = prod_(yf, ys)
    lead = (bsz,) if xb else ()
    x = b.reshape(x, (*lead, k, m) if ta else (*lead, m, k))
    y = b.reshape(y, (*lead, n, k) if tb else (*lead, k, n))
    g = b.emit1(gemm_p, [x, y], {"trans_a": ta, "trans_b": tb, "alpha": 1.0, "beta": 0.0, "c_dims": None})
    return b.reshape(g, tuple(out_aval.shape))


@register
def absorb_output_transpose(p: Program) -> Program:
    """``transpose(gemm(x, y))`` (the matrix dims swapped, the product's only use) becomes
    ``gemm(y, x)`` with both transpose flags flipped: ``(op(x) op(y))^T = op(y)^T op(x)^T``. The
    weight gradients of a dense layer come out of autodiff this way (``dW = (dY^T X)^T``); the
    512 x 512 copy kernel per layer disappears."""
    uses = use_counts(p)
    prod = producers(p)
    swap: dict[int, Eqn] = {}  # id(transpose eqn) -> the gemm it absorbs
    for e in p.eqns:
        if e.prim is not pr.TRANSPOSE or not isinstance(e.inputs[0], Var):
            continue
        g = prod.get(e.inputs[0].id)
        if g is None or g.prim is not gemm_p or len(g.inputs) != 2 or g.params.get("views") is not None:
            continue
        nd = len(g.outvars[0].aval.shape)
        if uses[g.outvars[0].id] != 1 or tuple(e.params["permutation"]) != (*range(nd - 2), nd - 1, nd - 2):
            continue
        swap[id(e)] = g
    if not swap:
        return p
    def swapped(b: Builder, e: Eqn) -> None:
        g = swap[id(e)]
        x, y = (b.read(a) for a in g.inputs)
        params = dict(g.params, trans_a=not g.params["trans_b"], trans_b=not g.params["trans_a"])
        b.emit(gemm_p, [y, x], params, e.outvars)
    return reemit(p, {id(g) for g in swap.values()}, dict.fromkeys(swap, swapped))


def gemm_chain(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[Eqn, list[Eqn]] | None:
    """``a`` = reshape*(gemm(...)) with every intermediate used once: (gemm eqn, reshape eqns)."""
    chain: list[Eqn] = []
    while isinstance(a, Var):
        e = prod.get(a.id)
        if e is None or uses.get(a.id, 0) != 1:
            return None
        if e.prim is gemm_p:
            return e, chain
        if e.prim is not pr.RESHAPE:
            return None
        chain.append(e)
        a = e.inputs[0]
    return None


def _float_scalar(s: Any) -> float | None:
    if s is None:
        return None
    v = np.asarray(s)
    if v.dtype.kind != "f" or not np.isfinite(v):
        return None
    return float(v)


def _replace_gemm(p: Program, at: Eqn, old: Eqn, chain: list[Eqn],
                  make: Callable[[Builder], Atom]) -> Program:
    """Re-emit ``p`` with ``old`` and its reshape ``chain`` dropped and ``make(builder)`` emitted at
    the position of ``at`` (whose single output it replaces)."""
    def put(b: Builder, e: Eqn) -> None:
        b.sub[e.outvars[0].id] = make(b)
    return reemit(p, {id(old), *(id(c) for c in chain)} - {id(at)}, {id(at): put})


def _rebuild_gemm(b: Builder, old: Eqn, final_shape: tuple, **changes: Any) -> Atom:
    inputs = changes.pop("inputs", old.inputs)
    g = b.emit1(gemm_p, [b.read(a) for a in inputs], dict(old.params, **changes))
    return b.reshape(g, final_shape)


@register
def absorb_scale(p: Program) -> Program:
    changed = True
    while changed:
        changed = False
        prod, uses = producers(p), use_counts(p)
        for e in p.eqns:
            name = e.prim.name
            if name in ("mul", "div", "neg") and e.outvars[0].aval.dtype.kind == "f":
                for side in ((0, 1) if name == "mul" else (0,)):
                    g = gemm_chain(e.inputs[side], prod, uses)
                    if g is None:
                        continue
                    if name == "neg":
                        s = -1.0
                    else:
                        s = _float_scalar(splat_value(e.inputs[1 - side], prod))
                        if s is None or (name == "div" and s == 0):
                            continue
                        s = 1.0 / s if name == "div" else s
                    old, chain = g
                    prm = old.params
                    p = _replace_gemm(p, e, old, chain, lambda b, old=old, s=s, prm=prm, e=e: _rebuild_gemm(
                        b, old, e.outvars[0].aval.shape, alpha=prm["alpha"] * s, beta=prm["beta"] * s))
                    changed = True
                    break
            elif e.prim is gemm_p and e.outvars[0].aval.dtype.kind == "f":
                for side in (0, 1):
                    r = _scaled_operand(e.inputs[side], prod, uses)
                    if r is None:
                        continue
                    s, src, reshape_to = r
                    prm = e.params

                    def make(b: Builder, e: Eqn = e, s: float = s, src: Atom = src, side: int = side,
                             reshape_to: tuple = reshape_to, prm: dict = prm) -> Atom:
                        ins = list(e.inputs)
                        ins[side] = b.reshape(b.read(src), reshape_to)
                        return b.emit1(gemm_p, [b.read(a) for a in ins], dict(prm, alpha=prm["alpha"] * s))

                    p = _replace_gemm(p, e, e, [], make)
                    changed = True
                    break
            if changed:
                break
    return p


def _scaled_operand(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[float, Atom, tuple] | None:
    """``a`` = reshape*(mul(x, splat s)) used once: (s, x, shape of a)."""
    shape = tuple(a.aval.shape)
    while isinstance(a, Var) and uses.get(a.id, 0) == 1:
        e = prod.get(a.id)
        if e is None:
            return None
        if e.prim is pr.RESHAPE:
            a = e.inputs[0]
            continue
        if e.prim is pr.MUL:
            for side in (0, 1):
                s = _float_scalar(splat_value(e.inputs[1 - side], prod))
                if s is not None and splat_value(e.inputs[side], prod) is None:
                    return s, e.inputs[side], shape
        return None
    return None


def _feeds_elementwise(v: Var, cons: dict[int, list[Eqn]], prod: dict[int, Eqn]) -> bool:
    """Whether ``v`` flows (through scalar scales, which become alpha/beta) into elementwise work.

    Then the bias is better added by that fused epilogue kernel for free than filled into C
    before the gemm (which costs a write pass and makes gemm read C). Slices are looked through: a
    fused kernel reads its operand through them (a recurrent step's ``x_t W + b`` sliced into four
    gates). Reshapes are not: the bias of a product reshaped into an activation stays with the
    product, where the epilogue pass puts it in the GEMM's store (BERT's dense layers)."""
    for e in cons.get(v.id, ()):
        name = e.prim.name
        scale = name == "neg" or (name in ("mul", "div") and any(
            a is not v and splat_value(a, prod) is not None for a in e.inputs))
        if scale and _feeds_elementwise(e.outvars[0], cons, prod):
            return True
        if name == "slice" and _feeds_elementwise(e.outvars[0], cons, prod):
            return True
        if not scale and opinfo.category(e.prim) in (OpCategory.ELEMENTWISE, OpCategory.IDENTITY):
            return True
    return False


@register
def absorb_bias(p: Program) -> Program:
    changed = True
    while changed:
        changed = False
        prod, uses = producers(p), use_counts(p)
        cons = consumers(p)
        for e in p.eqns:
            if e.prim is not pr.ADD or e.outvars[0].aval.dtype.kind != "f":
                continue
            if _feeds_elementwise(e.outvars[0], cons, prod):
                continue
            for side in (0, 1):
                g = gemm_chain(e.inputs[side], prod, uses)
                if g is None or len(g[0].inputs) != 2:
                    continue
                old, chain = g
                plan = _bias_operand(e.inputs[1 - side], old.outvars[0].aval.shape, e.outvars[0].aval.shape,
                                     prod)
                if plan is None:
                    continue
                c, c_shape, c_dims = plan

                def make(b: Builder, old: Eqn = old, c: Atom = c, c_shape: tuple = c_shape,
                         c_dims: tuple = c_dims, e: Eqn = e) -> Atom:
                    cc = b.reshape(b.read(c), c_shape) if not isinstance(c, Literal) else c
                    return _rebuild_gemm(b, old, e.outvars[0].aval.shape, inputs=[*old.inputs, cc],
                                         beta=1.0, c_dims=c_dims)

                p = _replace_gemm(p, e, old, chain, make)
                changed = True
                break
            if changed:
                break
    return p


def _bias_operand(c: Atom, gshape: tuple, fshape: tuple, prod: dict[int, Eqn]) -> tuple | None:
    """How addend ``c`` (of the final shape ``fshape``) enters a gemm of output ``gshape``:
    (atom, shape to reshape it to, c_dims) or None."""
    s = splat_value(c, prod)
    if s is not None:
        return lit(s, c.aval.dtype), (), ()
    e = prod.get(c.id) if isinstance(c, Var) else None
    n = gshape[-1]
    if e is not None and e.prim is pr.BROADCAST_IN_DIM:
        v, bd = e.inputs[0], tuple(e.params["broadcast_dimensions"])
        vs = tuple(v.aval.shape)
        if bd == () and vs == ():
            return v, (), ()
        # a vector along the trailing dims that make up N (e.g. the bias of x @ w + b)
        tail = len(fshape)
        acc = 1
        while acc < n and tail > 0:
            tail -= 1
            acc *= fshape[tail]
        if acc == n and bd == tuple(range(tail, len(fshape))) and vs == tuple(fshape[tail:]):
            return v, (n,), (len(gshape) - 1,)
        return None
    if tuple(c.aval.shape) == tuple(fshape):
        return c, tuple(gshape), tuple(range(len(gshape)))
    return None


# ---------------------------------------------------------------------------------------------
# gemm_views: reshape/transpose chains around a matrix product become strides
# ---------------------------------------------------------------------------------------------

# A strided view of a value's elements in a contiguous buffer: one entry per dim, each a list of
# (size, stride) sub-dims (row-major digits of that dim's index; size-1 digits dropped).
_View = list


def _contiguous_view(shape: Sequence[int]) -> _View:
    dims, acc = [], 1
    for d in reversed(tuple(shape)):
        dims.append([(d, acc)] if d != 1 else [])
        acc *= d
    return dims[::-1]


def _view_transpose(view: _View, perm: Sequence[int]) -> _View:
    return [view[p] for p in perm]


def _view_reshape(view: _View, shape: Sequence[int]) -> _View | None:
    """The view after a reshape to ``shape``, or None when a new dim would straddle sub-dims in a
    way no stride describes (a size that does not divide the digit it cuts); None for an empty
    array (a 0 digit divides nothing)."""
    subs = [sd for dim in view for sd in dim]
    if 0 in shape or any(z == 0 for z, _ in subs):
        return None
    out: _View = []
    for size in shape:
        dim, need = [], size
        while need > 1:
            if not subs:
                return None
            z, st = subs[0]
            if z <= need:
                if need % z:
                    return None
                dim.append((z, st))
                subs.pop(0)
                need //= z
            else:
                if z % need:
                    return None
                dim.append((need, st * (z // need)))
                subs[0] = (z // need, st)
                need = 1
        out.append(dim)
    return out if not subs else None


def _merged(dim: list) -> list:
    """Adjacent digits ``(z1, s1), (z2, s2)`` with ``s1 == z2 * s2`` merged into one."""
    out: list = []
    for z, st in dim:
        if out and out[-1][1] == z * st:
            z0, _ = out.pop()
            out.append((z0 * z, st))
        else:
            out.append((z, st))
    return out


def _simple(dim: list, size: int) -> tuple[int, int] | None:
    """(size, stride) of a dim with one stride (stride 0 standing for 'any' when size is 1)."""
    m = _merged(dim)
    if not m:
        return (size, 0)
    return m[0] if len(m) == 1 else None


def _blas_matrix(rows: tuple[int, int], cols: tuple[int, int]) -> tuple | None:
    """Fill in the strides of size-1 dims and check that BLAS can read the matrix in place (one of
    the strides 1, the other a leading dimension at least as large as the extent it spans)."""
    (r, rs), (c, cs) = rows, cols
    if c == 1:
        cs = 1
    if r == 1:
        rs = max(c, 1) if cs == 1 else 1
    if cs == 1 and rs >= max(c, 1):
        return (r, rs), (c, cs)
    if rs == 1 and cs >= max(r, 1):
        return (r, rs), (c, cs)
    return None


def _matrix_view(view: _View, batched: bool, trans: bool) -> tuple | None:
    """A gemm operand's view as fused.MatView of op(x), or None."""
    rows, cols = view[-2:]
    size_r = math.prod(z for z, _ in rows)
    size_c = math.prod(z for z, _ in cols)
    r, c = _simple(rows, size_r), _simple(cols, size_c)
    if r is None or c is None:
        return None
    if trans:
        r, c = c, r
    rc = _blas_matrix(r, c)
    if rc is None:
        return None
    batch = tuple(_merged(view[0])) if batched else ()
    return (batch, *rc)


def _movement_chain_back(a: Atom, prod: dict[int, Eqn], uses: dict[int, int]) -> tuple[Atom, list[Eqn]]:
    """Walk from ``a`` back through reshapes/transposes whose results are used only along the
    chain: (the source value, the chain's equations from the source on)."""
    chain: list[Eqn] = []
    while isinstance(a, Var) and uses.get(a.id, 0) == 1:
        e = prod.get(a.id)
        if e is None or e.prim not in (pr.RESHAPE, pr.TRANSPOSE):
            break
        chain.append(e)
        a = e.inputs[0]
    return a, chain[::-1]


def _movement_chain_forward(v: Var, cons: dict[int, list[Eqn]], uses: dict[int, int]) -> list[Eqn]:
    """Reshapes/transposes applied to ``v`` one after another, each intermediate used once."""
    chain: list[Eqn] = []
    while uses.get(v.id, 0) == 1 and len(cons.get(v.id, ())) == 1:
        e = cons[v.id][0]
        if e.prim not in (pr.RESHAPE, pr.TRANSPOSE):
            break
        chain.append(e)
        v = e.outvars[0]
    return chain


def _apply_chain(view: _View | None, chain: Sequence[Eqn]) -> _View | None:
    for e in chain:
        if view is None:
            return None
        if e.prim is pr.TRANSPOSE:
            view = _view_transpose(view, e.params["permutation"])
        else:
            view = _view_reshape(view, e.outvars[0].aval.shape)
    return view


def _unapply_chain(view: _View | None, chain: Sequence[Eqn]) -> _View | None:
    """The view of the chain's first input, given its last output's view."""
    for e in reversed(chain):
        if view is None:
            return None
        if e.prim is pr.TRANSPOSE:
            perm = e.params["permutation"]
            view = _view_transpose(view, [perm.index(i) for i in range(len(perm))])
        else:
            view = _view_reshape(view, e.inputs[0].aval.shape)
    return view


def _moves_data(chain: Sequence[Eqn]) -> bool:
    return any(e.prim is pr.TRANSPOSE for e in chain)


def _static_shapes(*avals: Any) -> bool:
    return all(isinstance(d, int) for a in avals for d in a.shape)


@register
def gemm_views(p: Program) -> Program:
    """A float ``native_gemm`` whose operand is a transpose (through reshapes) of another value, or
    whose result is only transposed (through reshapes), reads / writes that value in place through
    strides (``views``): the copy kernel disappears. Only where every matrix stays readable by BLAS
    (one unit stride), so the product can always run on BLAS too."""
    prod, uses, cons = producers(p), use_counts(p), consumers(p)
    plans: dict[int, tuple] = {}  # id(gemm eqn) -> (inputs, views, output chain)
    # chain equations taken (a producer's result chain can be its consumer's operand chain)
    claimed: set[int] = set()
    for e in p.eqns:
        if e.prim is not gemm_p or e.params.get("views") is not None or len(e.inputs) not in (2, 3):
            continue
        if np.dtype(e.outvars[0].aval.dtype) not in (np.float32, np.float64):
            continue
        if not _static_shapes(*(a.aval for a in e.inputs), e.outvars[0].aval):
            continue
        if any(isinstance(a, Literal) for a in e.inputs[:2]):
            continue
        batched = len(e.inputs[0].aval.shape) == 3
        va, vb, vo, _ = fused_layouts(e.inputs[0].aval.shape, e.inputs[1].aval.shape, e.params)
        new_ins, views, changed = list(e.inputs[:2]), [va, vb], False
        for side in (0, 1):
            src, chain = _movement_chain_back(e.inputs[side], prod, uses)
            if not chain or not _moves_data(chain) or not _static_shapes(src.aval):
                continue
            if any(id(c) in claimed for c in chain):
                continue
            view = _apply_chain(_contiguous_view(src.aval.shape), chain)
            mv_ = None if view is None else _matrix_view(view, batched, bool(e.params["trans_" + "ab"[side]]))
            if mv_ is not None:
                new_ins[side], views[side], changed = src, mv_, True
                claimed.update(id(c) for c in chain)
        out, out_chain = e.outvars[0], []
        chain = _movement_chain_forward(out, cons, uses) if len(e.inputs) == 2 else []
        while chain and _moves_data(chain):
            end = chain[-1].outvars[0]
            view = _unapply_chain(_contiguous_view(end.aval.shape), chain)
            mv_ = None if view is None else _matrix_view(view, batched, False)
            if mv_ is not None and mv_[2][1] == 1 and _static_shapes(end.aval):
                vo = (tuple(end.aval.shape), mv_[0], mv_[1][1])
                out_chain, changed = chain, True
                claimed.update(id(c) for c in chain)
                break
            chain = chain[:-1]
        else:
            vo = (tuple(out.aval.shape), vo[0], vo[1][1])
        if changed:
            plans[id(e)] = (new_ins + list(e.inputs[2:]), (views[0], views[1], vo), out_chain)
    if not plans:
        return p

    def viewed(b: Builder, e: Eqn) -> None:
        ins, views, out_chain = plans[id(e)]
        params = dict(e.params, trans_a=False, trans_b=False, views=views)
        outvars = [out_chain[-1].outvars[0]] if out_chain else list(e.outvars)
        b.emit(e.prim, [b.read(a) for a in ins], params, outvars)
    skip = {id(c) for _, _, out_chain in plans.values() for c in out_chain}
    return dce(reemit(p, skip, dict.fromkeys(plans, viewed)))


# ---------------------------------------------------------------------------------------------
# constant folding
# ---------------------------------------------------------------------------------------------
